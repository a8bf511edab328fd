"""一个课程同时只有一个写入者：grade、feedback 拿排他锁，export、report 读 gradebook 时拿共享锁。

几位助教在同一个 JupyterHub 上共用一个课程目录：一位在评分，另一位同时运行 grade、feedback 或 export，
两边就会同时写 gradebook、grades.csv 和 feedback/（实测：提交记录重复的 IntegrityError、被标成 crashed 的
学生、只剩后写完的那一份 grades.csv）。所以这些命令先拿课程的锁：

- 锁是 ``.grading/lock`` 上的 ``flock``：拿着锁的进程结束（正常退出、Ctrl-C、kill -9、断电）时内核自动放开，
  不会留下死锁；评分组的每个成员都能拿（文件和 ``.grading/`` 设成组可读写）。
- 谁拿着锁写在 ``.grading/holders/<主机>-<pid>.json``（用户、pid、主机、从什么时候起、什么命令）：等锁的一方
  说清楚在等谁；拿到排他锁时，之前崩溃的进程留下的记录一并清掉。
- 默认等（每 30 秒说一次还在等谁）；``wait=False``（命令行 ``--no-wait``）时马上以 ``CourseBusy`` 退出。
- 读的命令拿共享锁：几个读可以同时进行，只挡住写；它们只在读 gradebook 的那一段拿着锁。
"""
from __future__ import annotations

import datetime as dt
import errno
import fcntl
import getpass
import json
import os
import socket
import time
from pathlib import Path

POLL_SECONDS = 0.5
REMIND_SECONDS = 30.0


class CourseBusy(Exception):
    """课程正被另一个命令使用，而调用者不想等（--no-wait）。"""


def _holder_info(command: str, shared: bool) -> dict:
    return {"user": getpass.getuser(), "pid": os.getpid(), "host": socket.gethostname(), "command": command,
            "mode": "读" if shared else "写", "since": dt.datetime.now().astimezone().isoformat(timespec="seconds")}


def describe_holder(h: dict, course_root: Path | str = ".") -> str:
    """一位持锁者，写成一句话：alice（pid 1234，主机 hub-1，从 2026-12-03 07:30:05（Asia/Shanghai）起，grade exercises）。
    时间用课程的时区（pyproject.toml 的 [tool.course] timezone）。"""
    from .lms import course_time
    since = course_time(h["since"], course_root) if h.get("since") else "?"
    return f"{h.get('user', '?')}（pid {h.get('pid', '?')}，主机 {h.get('host', '?')}，从 {since} 起，{h.get('command', '?')}）"


def _group_share(path: Path, mode: int) -> None:
    """尽量让评分组的其他成员也能用（改不了权限时——不是自己的文件——就算了）。"""
    try:
        os.chmod(path, mode)
    except OSError:
        pass


class CourseLock:
    """``with CourseLock(course, "grade exercises"):`` 期间，这个课程没有别的写入者（shared=True 时：没有写入者）。"""

    def __init__(self, course: Path, command: str, shared: bool = False, wait: bool = True, say=print):
        self.dir = Path(course) / ".grading"
        self.command, self.shared, self.wait, self.say = command, shared, wait, say
        self.fd: int | None = None
        self.record: Path | None = None

    def holders(self) -> list[dict]:
        """记录在案的持锁者（可能含有已经结束的进程留下的记录：拿不到锁时，至少其中一个还活着）。"""
        out = []
        for p in sorted((self.dir / "holders").glob("*.json")):
            try:
                out.append(json.loads(p.read_text(encoding="utf-8")))
            except (OSError, json.JSONDecodeError):
                continue
        return out

    def _try(self) -> bool:
        try:
            fcntl.flock(self.fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            return True
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return False
            raise

    def _others(self) -> list[dict]:
        return [h for h in self.holders() if not (h.get("host") == socket.gethostname() and h.get("pid") == os.getpid())]

    def _busy_message(self) -> str:
        others = self._others()
        for _ in range(40):  # 对方刚拿到锁、还没写下记录（几毫秒）：稍等再读，免得说“没有留下记录”
            if others:
                break
            time.sleep(0.05)
            others = self._others()
        who = "；".join(describe_holder(h, self.dir.parent) for h in others) or "另一个评分命令（没有留下记录）"
        return f"这个课程正在被使用：{who}。"

    def __enter__(self) -> "CourseLock":
        self.dir.mkdir(parents=True, exist_ok=True)
        _group_share(self.dir, 0o2770)
        path = self.dir / "lock"
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o660)
        _group_share(path, 0o660)
        if not self._try():
            message = self._busy_message()
            if not self.wait:
                os.close(self.fd)
                self.fd = None
                raise CourseBusy(message + "（加了 --no-wait，所以不等；去掉它就会等对方结束再开始。）")
            self.say(message + "等它结束再开始……（Ctrl-C 放弃）")
            last = time.monotonic()
            while not self._try():
                time.sleep(POLL_SECONDS)
                if time.monotonic() - last >= REMIND_SECONDS:
                    self.say("还在等：" + self._busy_message())
                    last = time.monotonic()
            self.say("轮到这里了，开始。")
        holders = self.dir / "holders"
        holders.mkdir(exist_ok=True)
        _group_share(holders, 0o2770)
        if not self.shared:  # 排他锁：没有别人拿着锁，剩下的记录都是崩溃的进程留下的
            for p in holders.glob("*.json"):
                p.unlink(missing_ok=True)
        else:  # 共享锁：只清掉这台机器上已经不在的进程的记录
            for h, p in ((self._read(p), p) for p in holders.glob("*.json")):
                if h and h.get("host") == socket.gethostname() and not _alive(h.get("pid")):
                    p.unlink(missing_ok=True)
        self.record = holders / f"{socket.gethostname()}-{os.getpid()}.json"
        self.record.write_text(json.dumps(_holder_info(self.command, self.shared), ensure_ascii=False), encoding="utf-8")
        _group_share(self.record, 0o660)
        return self

    @staticmethod
    def _read(p: Path) -> dict | None:
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None

    def __exit__(self, *exc) -> None:
        if self.record is not None:
            self.record.unlink(missing_ok=True)
            self.record = None
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
        return True
    except (OSError, ValueError, TypeError):
        return False
