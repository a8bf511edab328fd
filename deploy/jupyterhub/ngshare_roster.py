"""hub 服务 ngshare-roster：把 hub 的两个组同步成交换服务 ngshare 里这门课的名单。

    组 formgrade-<课程>  →  ngshare 里这门课的教师（能发布、收集、发反馈）
    组 nbgrader-<课程>   →  ngshare 里这门课的学生（能取作业、交自己的、取自己的反馈）

ngshare 有自己的课程名单，不在名单里的人它一律拒绝（403）。这个服务让 hub 的组成为唯一的名单：启动时同步一次，
之后每 LECTURE07_ROSTER_INTERVAL 秒（默认 60）再同步一次；组里新加的人加进去，移出组的人从名单里删掉
（他已经交的作业留在 ngshare 里）。同一个人在两个组里时只算教师（ngshare 不许教师同时是学生）。

它是 ngshare 唯一的管理员（ngshare 的 --admins ngshare-roster）：用 hub 给它的 token（JUPYTERHUB_API_TOKEN）
调用 ngshare，ngshare 向 hub 问出的名字就是服务名 ngshare-roster。hub 里不能有同名的用户。
读组只要 read:groups!group=…（jupyterhub_config.py 的 ngshare-roster-role；Kubernetes 上见 values.yaml）。

只用标准库（Kubernetes 上它运行在 hub 的 pod 里，那个镜像没有课程环境）。
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

log = logging.getLogger("ngshare-roster")


class RosterError(Exception):
    pass


def _request(url: str, token: str, method: str = "GET", data: dict | None = None) -> dict:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, method=method, headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read().decode() or "{}")
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")[:300]
        try:
            return {"success": False, "status": e.code, **json.loads(text)}
        except ValueError:
            raise RosterError(f"{method} {url}：HTTP {e.code} {text}") from None
    except (OSError, ValueError) as e:
        raise RosterError(f"{method} {url}：{e}") from None


class Roster:
    def __init__(self, hub_api: str, ngshare: str, token: str, course: str, students_group: str, graders_group: str):
        self.hub_api, self.ngshare, self.token = hub_api.rstrip("/"), ngshare.rstrip("/"), token
        self.course, self.students_group, self.graders_group = course, students_group, graders_group

    def group(self, name: str) -> set[str]:
        model = _request(f"{self.hub_api}/groups/{urllib.parse.quote(name)}", self.token)
        if "users" not in model:  # 404（组不存在）或没有权限：不要因此把名单清空
            raise RosterError(f"读不到 hub 组 {name}：{model}")
        return set(model["users"])

    def ngshare_call(self, method: str, path: str, data: dict | None = None) -> dict:
        answer = _request(f"{self.ngshare}/{path}", self.token, method, data)
        if not answer.get("success"):
            raise RosterError(f"ngshare {method} /{path}：{answer}")
        return answer

    def sync(self) -> dict[str, int]:
        """同步一次；返回做了什么（新建课程、加/删的教师和学生人数）。"""
        graders = self.group(self.graders_group)
        students = self.group(self.students_group) - graders
        course = urllib.parse.quote(self.course)
        done = {"course": 0, "+instructors": 0, "-instructors": 0, "+students": 0, "-students": 0}
        if self.course not in self.ngshare_call("GET", "courses")["courses"]:
            self.ngshare_call("POST", f"course/{course}", {"instructors": json.dumps(sorted(graders))})
            done["course"] = 1
        have = {i["username"] for i in self.ngshare_call("GET", f"instructors/{course}")["instructors"]}
        enrolled = {s["username"] for s in self.ngshare_call("GET", f"students/{course}")["students"]}
        # 先删：从学生变成助教的人要先从学生名单里出来
        for name in sorted(enrolled - students):
            self.ngshare_call("DELETE", f"student/{course}/{urllib.parse.quote(name)}")
            done["-students"] += 1
        for name in sorted(graders - have):
            self.ngshare_call("POST", f"instructor/{course}/{urllib.parse.quote(name)}",
                              {"first_name": "", "last_name": "", "email": ""})
            done["+instructors"] += 1
        for name in sorted(have - graders):
            self.ngshare_call("DELETE", f"instructor/{course}/{urllib.parse.quote(name)}")
            done["-instructors"] += 1
        missing = sorted(students - enrolled)
        if missing:
            answer = self.ngshare_call("POST", f"students/{course}", {"students": json.dumps(
                [{"username": n, "first_name": "", "last_name": "", "email": ""} for n in missing])})
            failed = [s for s in answer.get("status", []) if not s.get("success")]
            if failed:
                raise RosterError(f"ngshare 没有收下这些学生：{failed}")
            done["+students"] = len(missing)
        return done


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="[%(levelname).1s %(asctime)s %(name)s] %(message)s")
    env = os.environ
    roster = Roster(env["JUPYTERHUB_API_URL"], env["LECTURE07_NGSHARE_URL"], env["JUPYTERHUB_API_TOKEN"],
                    env["LECTURE07_COURSE_ID"], env["LECTURE07_STUDENTS_GROUP"], env["LECTURE07_GRADERS_GROUP"])
    interval = float(env.get("LECTURE07_ROSTER_INTERVAL", "60"))
    synced_once = False
    while True:
        try:
            done = roster.sync()
        except RosterError as e:
            # ngshare 和这个服务同时启动：第一次成功之前每 2 秒重试
            log.warning("名单同步失败（稍后重试）：%s", e)
            time.sleep(2 if not synced_once else interval)
            continue
        if not synced_once or any(done.values()):
            log.info("课程 %s 的名单已同步：%s", roster.course, done)
        synced_once = True
        time.sleep(interval)


if __name__ == "__main__":
    sys.exit(main())
