"""几位助教共用一个课程（issue 35）：同时运行的命令、忙着的 gradebook、学期密钥。

- 两个真的 ``python -m lib.grading grade`` 进程在同一个课程上隔几秒先后开始（SQLite 和 PostgreSQL）：后来的那个
  说清楚在等谁，等它结束再评；最后每个学生的分数和一次干净的评分完全相同，没有 crashed、没有 error。
- 另一个连接占着 gradebook 的写事务：占的时间短于等待上限，评分只是慢一点；长于上限，那几行记 error（不是
  crashed），grades.csv 保留上次的分数，退出码 4，放开之后再运行一次就全部写好，不重新执行。
- PostgreSQL 上一位助教评分、另一位同时在 formgrader 里（这里用 nbgrader 的 Gradebook）录入人工分：人工分全部保留，
  没有重复的记录。
- 学期密钥：两个密钥给出不同的隐藏输入；同一个密钥两次评分分数相同；没有密钥时和以前完全一样。
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import grading_fixtures as gf  # noqa: E402
from test_postgres import NB, _scores, _submissions, postgres_url  # noqa: E402,F401  （postgres_url 是 fixture）

from lib.grading import course_lock, hidden_inputs, pipeline  # noqa: E402
from lib.grading.course_lock import CourseBusy, CourseLock  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _start(course: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    full = dict(os.environ, PYTHONPATH=str(course), OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "lib.grading", *args], cwd=course, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(p: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out + err


GRADE = ("grade", "exercises", "--jobs", "1", "--quiet")


def _grade(course: Path, subs: Path, *extra: str, env: dict | None = None) -> tuple[int, str]:
    return _finish(_start(course, *GRADE, "--submissions", str(subs), *extra, env=env))


def _rows(course: Path) -> dict:
    return {r["student_id"]: r for r in gf.read_grades(course) if r["notebook"] == NB}


def _sqlite(course: Path) -> str:
    return f"sqlite:///{course / 'gradebook.db'}"


def _class(root: Path) -> Path:
    """12 名学生的 notebook 01（和 issue 里的一样：8 份全对、4 份空白；加上一份做了一半的），按学号文件夹放。
    一次评分在这台机器上要好几秒：两次评分隔 3 秒开始时还会重叠。"""
    three = _submissions(root / "three")  # 2024001 全对、2024002 空白、2024003 一半
    files = {sid: (three / sid / f"{NB}.ipynb").read_bytes() for sid in ("2024001", "2024002", "2024003")}
    subs = root / "downloads"
    for i, kind in enumerate(["2024001"] * 8 + ["2024002"] * 4 + ["2024003"]):
        (subs / f"2025{i:03d}").mkdir(parents=True)
        (subs / f"2025{i:03d}" / f"{NB}.ipynb").write_bytes(files[kind])
    return subs


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """一次干净的评分：每个学生的分数（gradebook 里每个单元格）就是下面每种情形都要得到的。"""
    root = tmp_path_factory.mktemp("clean")
    subs = _class(root)
    course = gf.copy_course(REPO, root / "course")
    rc, out = _grade(course, subs)
    assert rc == 0, out
    return {"subs": subs, "scores": _scores(_sqlite(course)), "rows": _rows(course)}


# ---------------------------------------------------------------------------------------------- 锁本身


def _hold(course: Path, seconds: float, shared: bool = False) -> subprocess.Popen:
    """另一个进程拿着课程的锁 seconds 秒（打印 ready 之后才算拿到）。"""
    code = ("import sys, time; from pathlib import Path; from lib.grading.course_lock import CourseLock\n"
            f"with CourseLock(Path({str(course)!r}), 'grade exercises', shared={shared}):\n"
            "    print('ready', flush=True); time.sleep(%r)\n" % seconds)
    p = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_a_second_writer_waits_and_names_the_holder_or_refuses_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(course_lock, "POLL_SECONDS", 0.05)
    holder = _hold(tmp_path, 2.0)
    with pytest.raises(CourseBusy, match=rf"pid {holder.pid}.*grade exercises.*--no-wait"):
        with CourseLock(tmp_path, "feedback exercises", wait=False):
            pass
    said: list[str] = []
    start = time.monotonic()
    with CourseLock(tmp_path, "feedback exercises", say=said.append):
        waited = time.monotonic() - start  # 拿到锁时，先拿着锁的那个已经放开了（它拿了 2 秒）
    assert holder.wait(timeout=10) == 0
    assert waited > 0.5 and f"pid {holder.pid}" in said[0] and os.environ.get("USER", "") in said[0]
    assert said[-1] == "轮到这里了，开始。"


def test_readers_share_the_lock_and_only_writers_wait(tmp_path):
    reader = _hold(tmp_path, 3.0, shared=True)
    start = time.monotonic()
    with CourseLock(tmp_path, "report exercises", shared=True, wait=False):  # 另一个读：马上拿到
        pass
    assert time.monotonic() - start < 1.0
    with pytest.raises(CourseBusy, match="report|grade"):
        with CourseLock(tmp_path, "grade exercises", wait=False):  # 写：要等读的结束
            pass
    reader.wait(timeout=10)


def test_a_killed_holder_leaves_no_lock_and_its_record_is_cleaned(tmp_path):
    holder = _hold(tmp_path, 60.0)
    assert len(CourseLock(tmp_path, "x").holders()) == 1
    holder.send_signal(signal.SIGKILL)  # kill -9：内核放开 flock，记录文件留下了
    holder.wait(timeout=10)
    assert len(CourseLock(tmp_path, "x").holders()) == 1
    with CourseLock(tmp_path, "grade exercises", wait=False) as lock:
        assert [h["pid"] for h in lock.holders()] == [os.getpid()]  # 崩溃的进程留下的记录清掉了
    assert lock.holders() == []


# ---------------------------------------------------------------------------------------------- 两次评分同时进行


def _two_runs(course: Path, subs: Path, offset: float) -> list[tuple[int, str, int]]:
    first = _start(course, *GRADE, "--submissions", str(subs))
    time.sleep(offset)
    second = _start(course, *GRADE, "--submissions", str(subs))
    return [(*_finish(p), p.pid) for p in (first, second)]


def _check_two_runs(runs, course: Path, db_url: str, clean: dict) -> None:
    for rc, out, _ in runs:
        assert rc == 0, out[-3000:]
    (_, out_a, pid_a), (_, out_b, pid_b) = runs
    # 后开始的那个（offset 0 时不一定是谁）说清楚在等谁：用户、pid、命令
    assert (f"pid {pid_a}" in out_b and "grade exercises" in out_b) or (f"pid {pid_b}" in out_a and "grade exercises" in out_a)
    assert _scores(db_url) == clean["scores"]
    rows = _rows(course)
    assert {sid: (r["score"], r["status"]) for sid, r in rows.items()} == \
        {sid: (r["score"], r["status"]) for sid, r in clean["rows"].items()}
    assert not any(s in r["status"] for r in rows.values() for s in ("crashed", "error"))


@pytest.mark.slow
@pytest.mark.parametrize("offset", [0.0, 0.5, 3.0])
def test_two_grade_runs_on_one_course_give_the_scores_of_one_clean_run(tmp_path, clean, offset):
    course = gf.copy_course(REPO, tmp_path / "course")
    _check_two_runs(_two_runs(course, clean["subs"], offset), course, _sqlite(course), clean)


def _pg_course(tmp_path: Path, url: str) -> Path:
    course = gf.copy_course(REPO, tmp_path / "course")
    with open(course / "nbgrader_config.py", "a", encoding="utf-8") as f:
        f.write(f'\nc.CourseDirectory.db_url = "{url}"\n')
    return course


def _fresh_pg(postgres_url: str, name: str) -> str:
    """同一个服务器上的一个新数据库（每个测试一个，互不影响）。"""
    import psycopg2
    base, _ = postgres_url.rsplit("/", 1)
    conn = psycopg2.connect(base.replace("postgresql+psycopg2", "postgresql") + "/postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    conn.close()
    return f"{base}/{name}"


@pytest.mark.slow
@pytest.mark.parametrize("offset", [0.5, 3.0])
def test_two_grade_runs_on_a_postgresql_gradebook_give_the_scores_of_one_clean_run(tmp_path, clean, postgres_url,
                                                                                    offset):
    url = _fresh_pg(postgres_url, f"two_runs_{int(offset * 10)}")
    course = _pg_course(tmp_path, url)
    _check_two_runs(_two_runs(course, clean["subs"], offset), course, url, clean)


# ---------------------------------------------------------------------------------------------- 忙着的 gradebook


def _hold_sqlite(path: Path, seconds: float) -> subprocess.Popen:
    """另一个连接拿着 SQLite 的写锁（BEGIN IMMEDIATE + 一次写）seconds 秒，像 formgrader 里一个没结束的事务。"""
    code = ("import sqlite3, sys, time\n"
            f"c = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
            "c.execute('BEGIN IMMEDIATE'); c.execute(\"UPDATE student SET first_name = first_name\")\n"
            "print('ready', flush=True); time.sleep(%r); c.execute('COMMIT')\n" % seconds)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


@pytest.mark.slow
def test_a_gradebook_busy_for_a_while_only_delays_grading(tmp_path, clean):
    course = gf.copy_course(REPO, tmp_path / "course")
    assert _grade(course, clean["subs"])[0] == 0
    holder = _hold_sqlite(course / "gradebook.db", 6.0)
    start = time.monotonic()
    rc, out = _grade(course, clean["subs"])  # 再评一次（沿用执行结果）：写 gradebook 时要等那个事务结束
    assert rc == 0, out[-3000:]
    assert time.monotonic() - start > 4 and holder.wait(timeout=30) == 0
    assert _scores(_sqlite(course)) == clean["scores"]
    assert all(r["status"] == clean["rows"][sid]["status"] for sid, r in _rows(course).items())


@pytest.mark.slow
def test_a_gradebook_busy_past_the_wait_marks_rows_error_keeps_the_last_scores_and_a_rerun_fixes_them(tmp_path, clean):
    course = gf.copy_course(REPO, tmp_path / "course")
    assert _grade(course, clean["subs"])[0] == 0
    before = _rows(course)
    holder = _hold_sqlite(course / "gradebook.db", 300.0)
    try:
        rc, out = _grade(course, clean["subs"], env={"COURSE_GRADEBOOK_BUSY_SECONDS": "0.3"})
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.wait(timeout=30)
    assert rc == 4, out[-3000:]
    assert "评分这边" in out and "不是学生的问题" in out
    rows = _rows(course)
    assert {r["status"] for r in rows.values()} == {"error"}  # 评分这边的问题：不是 crashed，也没有一行 0 分
    for sid, r in rows.items():
        assert r["score"] == before[sid]["score"] and "一直被别的程序占着" in r["detail"] and "上一次评分的结果" in r["detail"]
    rc, out = _grade(course, clean["subs"])
    assert rc == 0, out[-3000:]
    assert _scores(_sqlite(course)) == clean["scores"] and _rows(course).keys() == before.keys()
    assert all(r["status"] == before[sid]["status"] for sid, r in _rows(course).items())


# ---------------------------------------------------------------------------------------------- PostgreSQL：评分时有人录入人工分


NB5 = "05_masks_and_kv_cache"  # 练习 8 的 (a)(b)(c) 是文字题：人工评分


def _written_class(root: Path) -> Path:
    """6 名学生的 notebook 05：全对（参考答案，文字题写了答案）和空白各 3 份。"""
    release = gf.load(REPO / "release" / "exercises" / f"{NB5}.ipynb")
    solution = gf.load(REPO / "solutions" / "exercises" / f"{NB5}.ipynb")
    subs = root / "downloads5"
    for i, nb in enumerate([gf.answered(release, solution)] * 3 + [release] * 3):
        (subs / f"2026{i:03d}").mkdir(parents=True)
        (subs / f"2026{i:03d}" / f"{NB5}.ipynb").write_bytes(gf.dump(nb))
    return subs


def _all_scores(db_url: str, notebook: str) -> dict:
    from nbgrader.api import Gradebook
    with Gradebook(db_url) as gb:
        return {(s.student.id, g.name): (g.auto_score, g.manual_score) for s in gb.assignment_submissions("exercises")
                for sn in s.notebooks if sn.name == notebook for g in sn.grades}


@pytest.mark.slow
def test_manual_grades_entered_while_another_ta_grades_are_all_kept(tmp_path, postgres_url):
    url = _fresh_pg(postgres_url, "manual_while_grading")
    course = _pg_course(tmp_path, url)
    subs = _written_class(tmp_path)
    assert _grade(course, subs)[0] == 0
    first = _all_scores(url, NB5)
    release = gf.load(REPO / "release" / "exercises" / f"{NB5}.ipynb")
    manual = [gid for gid, (points, auto) in pipeline.gradebook_io.grade_cells(release).items() if not auto]
    answered = sorted({sid for (sid, gid), (a, m) in first.items() if gid in manual and a is None})  # 写了文字题的
    assert manual and answered
    from nbgrader.api import Gradebook
    entered: dict = {}
    stop = threading.Event()

    def formgrader():  # 另一位助教：一直在给文字题打分，每次一个事务
        n = 0
        with Gradebook(url) as gb:
            while not stop.is_set():
                sid, gid = answered[n % len(answered)], manual[n % len(manual)]
                grade = gb.find_grade(gid, NB5, "exercises", sid)
                grade.manual_score = float(n % 3 + 1)
                gb.db.commit()
                entered[sid, gid] = grade.manual_score
                n += 1
                time.sleep(0.02)

    t = threading.Thread(target=formgrader)
    t.start()
    try:
        rc, out = _grade(course, subs, "--fresh")  # 重新导入同一批下载：重写每个学生的分数
    finally:
        stop.set()
        t.join(timeout=30)
    assert rc == 0, out[-3000:]
    assert len(entered) >= 1
    after = _all_scores(url, NB5)
    for (sid, gid), score in entered.items():
        assert after[sid, gid][1] == score  # 人工分一个不少
    assert {k: a for k, (a, m) in after.items()} == {k: a for k, (a, m) in first.items()}  # 自动分和第一次相同
    with Gradebook(url) as gb:
        ids = [s.student.id for s in gb.assignment_submissions("exercises")]
        assert sorted(ids) == sorted(set(ids)) == sorted(p.name for p in subs.iterdir())  # 没有重复的提交记录
        for s in gb.assignment_submissions("exercises"):
            assert [nb.name for nb in s.notebooks].count(NB5) == 1


# ---------------------------------------------------------------------------------------------- 学期密钥


def test_two_secrets_give_different_hidden_inputs_and_no_secret_the_public_seed(tmp_path):
    from lib.grading import exercise_checks  # noqa: F401  （先导入它：练习模块由它加载）
    from lib.grading.exercises import nb01_ex1_ex4 as nb01
    gids = ["ex1_self_attention", "ex4_copy_query"]
    public = hidden_inputs.HiddenInputs.for_course(tmp_path)
    assert public.public and public.seeds(gids) == {g: pipeline.SEED for g in gids} == {g: 0 for g in gids}  # 公开的克隆
    path = hidden_inputs.create(tmp_path)
    assert oct(path.stat().st_mode & 0o777) == "0o640" and path.stat().st_gid == tmp_path.stat().st_gid
    first = hidden_inputs.HiddenInputs.for_course(tmp_path)
    with pytest.raises(FileExistsError):
        hidden_inputs.create(tmp_path)  # 学期中间不会被不小心换掉
    hidden_inputs.create(tmp_path, force=True)
    second = hidden_inputs.HiddenInputs.for_course(tmp_path)
    a, b = first.seed("ex1_self_attention"), second.seed("ex1_self_attention")
    assert len({0, a, b}) == 3
    assert repr(nb01.inputs_self_attention(a)) != repr(nb01.inputs_self_attention(b)) != repr(nb01.inputs_self_attention(0))
    opts = pipeline.Options(assignment="exercises", submissions=tmp_path)
    assert pipeline.grader_version(opts, "src") == pipeline.grader_version(opts, "src", public.version())  # 没有密钥：存下的结果照旧能用
    assert pipeline.grader_version(opts, "src", first.version()) != pipeline.grader_version(opts, "src", second.version())


@pytest.mark.slow
def test_the_same_secret_gives_identical_scores_on_two_runs(tmp_path, clean):
    courses = [gf.copy_course(REPO, tmp_path / name) for name in ("a", "b")]
    secret = hidden_inputs.create(courses[0])
    (courses[1] / ".grading").mkdir()
    (courses[1] / ".grading" / "secret").write_bytes(secret.read_bytes())  # 同一个学期的另一台机器
    for course in courses:  # 有密钥、没有截止时间：点名要评的 notebook（全部）
        assert _grade(course, clean["subs"], "--notebooks", "all")[0] == 0
        states = list((course / ".grading" / "exercises" / "state").glob("*.json"))
        inputs = hidden_inputs.HiddenInputs.for_course(course)
        for p in states:  # 每个检查自己的种子（和发进内核的相同），存下来给判分用
            seeds = json.loads(p.read_text(encoding="utf-8"))["seeds"]
            assert seeds and seeds == inputs.seeds(seeds) and len(set(seeds.values())) == len(seeds)
        assert states
    a, b = (_scores(_sqlite(c)) for c in courses)
    assert a == b
    assert {sid: total for sid, (total, _) in a.items()} == {sid: total for sid, (total, _) in clean["scores"].items()}


def test_a_grade_killed_while_swapping_the_import_copy_loses_nothing(tmp_path):
    """grade 换 .grading/作业/imported 的那一刻被 kill -9：换副本的每一个中间状态，下一条命令都恢复出完整的一份
    （分批评分的学生一个不少），不会把下一次下载当成第一次。"""
    three = _submissions(tmp_path / "three")  # 2024001 全对、2024002 空白、2024003 一半
    course = gf.copy_course(REPO, tmp_path / "course")
    assert _grade(course, three)[0] == 0
    later = tmp_path / "later"  # 第 2 次下载：一名新学生
    (later / "2024009").mkdir(parents=True)
    (later / "2024009" / f"{NB}.ipynb").write_bytes((three / "2024001" / f"{NB}.ipynb").read_bytes())
    assert _grade(course, later)[0] == 0
    assert set(_rows(course)) == {"2024001", "2024002", "2024003", "2024009"}
    ws = course / ".grading" / "exercises"
    final, tmp, old = ws / "imported", ws / "imported.tmp", ws / "imported.old"

    # 两次改名之间停下：旧副本已经是 imported.old，完整的新副本还叫 imported.tmp（没有 imported）
    final.rename(old)
    shutil.copytree(old, tmp)
    rc, out = _finish(_start(course, "export", "exercises", "--lms", "csv"))
    assert rc == 0 and "4 名学生" in out, out
    assert final.exists() and not tmp.exists() and not old.exists()

    # 新副本写到一半时停下（没有 manifest.json）：imported 还在，半份新副本丢掉
    tmp.mkdir()
    (tmp / "00000.ipynb").write_text("{", encoding="utf-8")
    latest = tmp_path / "latest"  # 第 3 次下载
    (latest / "2024010").mkdir(parents=True)
    (latest / "2024010" / f"{NB}.ipynb").write_bytes((three / "2024002" / f"{NB}.ipynb").read_bytes())
    rc, out = _finish(_start(course, "grade", "exercises", "--jobs", "1", "--submissions", str(latest)))
    assert rc == 0, out
    assert "第 3 次下载" in out, out
    assert set(_rows(course)) == {"2024001", "2024002", "2024003", "2024009", "2024010"}
    assert final.exists() and not tmp.exists() and not old.exists()


def test_a_broken_submission_is_exported_as_ungradable_not_as_missing(tmp_path):
    """交了、但文件打不开（进了隔离区）的学生：导出里写“无法评分”和原因，不写“没有提交”，也不从表里消失；
    汇总里点名，让助教去找学生要文件。"""
    three = _submissions(tmp_path / "three")
    (three / "2024004").mkdir()
    (three / "2024004" / f"{NB}.ipynb").write_text('{"cells": [', encoding="utf-8")  # 坏的 JSON
    course = gf.copy_course(REPO, tmp_path / "course")
    assert _grade(course, three)[0] == 0
    assert _rows(course)["2024004"]["status"] == "quarantined"
    rc, out = _finish(_start(course, "export", "exercises", "--lms", "csv"))
    assert rc == 0, out
    assert "1 名学生交了、但有 notebook 无法评分" in out and "2024004" in out, out
    rows = {r["student_id"]: r for r in gf.read_csv(course / "exports" / "exercises_csv.csv")}
    assert set(rows) == {"2024001", "2024002", "2024003", "2024004"}
    assert rows["2024004"][NB] == "无法评分" and rows["2024004"]["status"].startswith("提交无法评分：")
    assert "JSON" in rows["2024004"]["status"]
    assert rows["2024002"]["status"] != "没有提交"  # 空白的那份是交了得 0 分


def test_in_a_group_shared_course_everything_grade_writes_is_group_writable(tmp_path):
    """助教 ssh 登录（默认 umask 022）在共用的课程目录（组可写、setgid）里评分：写出的 grades.csv、.grading/、
    submitted/、autograded/ 都组可写，另一位助教能接着改。"""
    three = _submissions(tmp_path / "three")
    course = gf.copy_course(REPO, tmp_path / "course")
    os.chmod(course, 0o2775)
    env = dict(os.environ, PYTHONPATH=str(course), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "lib.grading", *GRADE, "--submissions", str(three)], cwd=course, env=env,
                       capture_output=True, text=True, timeout=600, preexec_fn=lambda: os.umask(0o022))
    assert p.returncode == 0, p.stderr
    written = [course / "grades.csv", *[(course / d) for d in (".grading", "submitted", "autograded")]]
    written += [q for d in written[1:] for q in d.rglob("*")]
    assert len(written) > 10
    not_shared = [str(q.relative_to(course)) for q in written if not q.stat().st_mode & 0o020]
    assert not not_shared, not_shared


def test_a_private_course_keeps_the_users_umask(tmp_path):
    from lib.grading.__main__ import share_with_the_group
    course = tmp_path / "course"
    course.mkdir(mode=0o755)
    os.chmod(course, 0o755)
    old = os.umask(0o022)
    try:
        assert share_with_the_group(course) is False and os.umask(0o022) == 0o022
        os.chmod(course, 0o2775)
        assert share_with_the_group(course) is True and os.umask(0o022) == 0o002
    finally:
        os.umask(old)
