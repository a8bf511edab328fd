"""交换目录的小型压力测试：20 名学生（20 个真的系统用户）在同一时刻通过 nbgrader 的交换目录提交。

每名学生先取作业（nbgrader 的 fetch），在练习 01 里写下只属于自己的标记，然后全部停在一个屏障前；
屏障一开，每人同时提交两次（像连点两下 Submit），第二次的标记不同。之后教师 `nbgrader collect`：
一个都不少（20 人都收到），一个不多（每人一份，交换目录里每人正好两次提交），没有串（每人收到的是
自己最后一次提交的内容）。

权限和 hub 上一样：交换目录 1777，nbgrader 自己建 inbound（2733），每名学生以自己的 uid 写入。
要 root（useradd）；jupyterhub 本身不需要。
"""
from __future__ import annotations

import grp
import json
import multiprocessing as mp
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[1]
DEPLOY = REPO_ROOT / "deploy" / "jupyterhub"
sys.path.insert(0, str(DEPLOY))
import local_hub  # noqa: E402

N = 20
PREFIX = "l07ex"
INSTRUCTOR = f"{PREFIX}i1"
STUDENTS = [f"{PREFIX}s{i:02d}" for i in range(1, N + 1)]
GROUP = f"{PREFIX}-graders"
COURSE_ID = "cs224n-lecture07"
NOTEBOOK = "01_attention_by_hand.ipynb"


def _config(exchange: str, root: str):
    from traitlets.config import Config
    c = Config()
    c.Exchange.root = exchange
    c.CourseDirectory.course_id = COURSE_ID
    c.CourseDirectory.root = root
    c.CourseDirectory.assignment_id = "exercises"
    return c


def _student(name: str, exchange: str, barrier, results) -> None:
    """子进程：变成这名学生，取作业，写标记，等屏障，连交两次。"""
    try:
        user = pwd.getpwnam(name)
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)
        os.environ["HOME"] = user.pw_dir
        os.chdir(user.pw_dir)
        from nbgrader.coursedir import CourseDirectory
        from nbgrader.exchange.default import ExchangeFetchAssignment, ExchangeSubmit
        c = _config(exchange, user.pw_dir)
        coursedir = CourseDirectory(config=c)
        ExchangeFetchAssignment(coursedir=coursedir, config=c).start()
        path = Path(user.pw_dir) / "exercises" / NOTEBOOK
        original = path.read_text(encoding="utf-8")

        def mark(tag: str) -> None:
            nb = json.loads(original)
            cell = next(c for c in nb["cells"] if (c["metadata"].get("nbgrader") or {}).get("solution"))
            cell["source"] = f"# {tag}\n" + "".join(cell["source"])
            path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")

        mark(f"MARK-{name}-first")
        barrier.wait(timeout=300)
        ExchangeSubmit(coursedir=coursedir, config=c).start()
        # 第二次提交：nbgrader 的时间戳精确到微秒，同一秒内的两次也分得开
        mark(f"MARK-{name}-second")
        ExchangeSubmit(coursedir=coursedir, config=c).start()
        results.put((name, "ok"))
    except BaseException as e:  # 子进程的任何失败都报告给父进程
        results.put((name, f"{type(e).__name__}: {e}"))


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("要以 root 运行：测试要 useradd 建 21 个系统用户（CI 以 root 运行）")
    for tool in ("useradd", "userdel", "groupadd"):
        if not shutil.which(tool):
            pytest.skip(f"没有 {tool}（Debian：apt-get install passwd）")
    base = Path(tempfile.mkdtemp(prefix="l07ex-", dir="/tmp"))
    changed = local_hub.make_traversable(local_hub.venv_python())
    try:
        env = local_hub.prepare(base, STUDENTS, [INSTRUCTOR], homes=base / "home", graders_group=GROUP)
        yield env
    finally:
        for name in [INSTRUCTOR, *STUDENTS]:
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        subprocess.run(["groupdel", GROUP], capture_output=True)
        local_hub.restore_modes(changed)
        shutil.rmtree(base, ignore_errors=True)


def _as_instructor(env, *args):
    user = pwd.getpwnam(INSTRUCTOR)
    run_env = {"HOME": user.pw_dir, "PATH": f"{Path(sys.prefix) / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8",
               "JUPYTER_CONFIG_PATH": str(DEPLOY / "jupyter-config" / "grader"),
               "LECTURE07_EXCHANGE": env["LECTURE07_HUB_EXCHANGE"], "LECTURE07_COURSE_ID": COURSE_ID,
               "LECTURE07_COURSE_ROOT": env["LECTURE07_HUB_COURSE_ROOT"]}
    return subprocess.run([str(Path(sys.prefix) / "bin" / "nbgrader"), *args], cwd=env["LECTURE07_HUB_COURSE_ROOT"],
                          env=run_env, user=user.pw_uid, group=user.pw_gid,
                          extra_groups=[grp.getgrnam(GROUP).gr_gid], capture_output=True, text=True, timeout=600)


def test_twenty_students_submit_at_once(course):
    p = _as_instructor(course, "release_assignment", "exercises")
    assert p.returncode == 0, p.stdout + p.stderr
    # 先在父进程里导入，子进程 fork 之后直接用（20 个进程同时导入 nbgrader 要几十秒）
    import nbgrader.exchange.default  # noqa: F401
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(N), ctx.Queue()
    procs = [ctx.Process(target=_student, args=(s, course["LECTURE07_HUB_EXCHANGE"], barrier, results))
             for s in STUDENTS]
    t = time.monotonic()
    for proc in procs:
        proc.start()
    outcome = dict(results.get(timeout=600) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
    elapsed = time.monotonic() - t
    assert outcome == {s: "ok" for s in STUDENTS}, {s: r for s, r in outcome.items() if r != "ok"}

    inbound = Path(course["LECTURE07_HUB_EXCHANGE"]) / COURSE_ID / "inbound"
    entries = sorted(p.name for p in inbound.iterdir())
    per_student = {s: [e for e in entries if e.split("+")[0] == s] for s in STUDENTS}
    assert all(len(v) == 2 for v in per_student.values()), {s: len(v) for s, v in per_student.items() if len(v) != 2}
    assert len(entries) == 2 * N
    for s, subs in per_student.items():
        owner = {pwd.getpwuid((inbound / e).stat().st_uid).pw_name for e in subs}
        assert owner == {s}, f"{s} 的提交属于 {owner}"

    p = _as_instructor(course, "collect", "exercises")
    assert p.returncode == 0, p.stdout + p.stderr
    submitted = Path(course["LECTURE07_HUB_COURSE_ROOT"]) / "submitted"
    assert sorted(d.name for d in submitted.iterdir()) == STUDENTS
    for s in STUDENTS:
        text = (submitted / s / "exercises" / NOTEBOOK).read_text(encoding="utf-8")
        marks = [m for m in ("first", "second") if f"MARK-{s}-{m}" in text]
        assert marks == ["second"], f"{s}：收到的不是最后一次提交（{marks}）"
        others = [o for o in STUDENTS if o != s and f"MARK-{o}-" in text]
        assert not others, f"{s} 的提交里有别人的标记：{others}"
    print(f"{N} 名学生同时各提交两次：{elapsed:.1f} 秒（取作业 + 提交，在负载很高的 2 核机器上）")
