"""gradebook 放在 PostgreSQL 里（nbgrader 的 ``c.CourseDirectory.db_url``）：几位助教同时评分时用。

测试自己起一个真的 PostgreSQL 服务器（Debian 的 postgresql 包，/usr/lib/postgresql/*/bin；CI 上由
``make system-deps`` 安装）：initdb 到临时目录、只监听 127.0.0.1 的空闲端口，以 root 运行时用 postgres 用户。
同一批提交用命令行各评一次（SQLite 和 PostgreSQL），分数必须相同，而且确实写进了 PostgreSQL。
"""
from __future__ import annotations

import csv
import glob
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

sys.path.insert(0, str(Path(__file__).parent))
import grading_fixtures as gf  # noqa: E402
from free_port import free_port  # noqa: E402

from lib.grading import gradebook_io  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NB = "01_attention_by_hand"


def _pg_bin() -> Path | None:
    """PostgreSQL 服务器程序所在目录：$POSTGRES_BIN，否则 Debian 的 /usr/lib/postgresql/<最新版本>/bin，否则 PATH。"""
    cands = [os.environ.get("POSTGRES_BIN", "")]
    cands += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
                    if Path(p).parent.name.isdigit() else 0, reverse=True)
    if shutil.which("initdb"):
        cands.append(str(Path(shutil.which("initdb")).parent))
    for c in cands:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "postgres").is_file():
            return Path(c)
    return None


PG_BIN = _pg_bin()
NO_PG = "找不到 PostgreSQL 服务器程序（initdb、postgres）：Debian 上 apt-get install postgresql（make system-deps 会装）"


@pytest.fixture(scope="module")
def postgres_url():
    """起一个临时的 PostgreSQL 服务器，给出一个空数据库的地址；测试结束后停掉并删掉数据目录。"""
    if PG_BIN is None:
        pytest.skip(NO_PG)
    as_root = os.geteuid() == 0
    if as_root:  # postgres 不肯以 root 运行
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail("以 root 运行，但没有 postgres 用户（Debian 的 postgresql 包会建这个用户）")
    # 直接以 postgres 用户 exec（不经 runuser/su：那样停服务器的信号到不了 postgres 本身）
    user = dict(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[]) if as_root else {}
    base = Path(tempfile.mkdtemp(prefix="pg-gradebook-"))
    data = base / "data"
    if as_root:
        os.chown(base, pw.pw_uid, pw.pw_gid)
    proc = None
    try:
        subprocess.run([str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                        "-E", "UTF8", "--no-locale", "--no-sync"], check=True, capture_output=True, timeout=120,
                       cwd=base, **user)
        port = free_port()
        proc = subprocess.Popen([str(PG_BIN / "postgres"), "-D", str(data), "-p", str(port),
                                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={base}",
                                 "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=base, **user)
        import psycopg2
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
                break
            except psycopg2.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("PostgreSQL 没有启动：" + proc.stderr.read().decode(errors="replace")) from None
                time.sleep(0.2)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE gradebook")
        conn.close()
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/gradebook"
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # fast shutdown：断开连接、干净地停下
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(base, ignore_errors=True)


def test_db_url_comes_from_nbgrader_config(tmp_path):
    """一个 helper 读 nbgrader_config.py 的 CourseDirectory.db_url：相对的 SQLite 路径按课程根目录解释；
    没设时是 nbgrader 自己的默认值；PostgreSQL 的地址原样使用（提示里不显示密码）。"""
    from nbgrader.coursedir import CourseDirectory
    course = tmp_path / "course"
    course.mkdir()
    cfg = course / "nbgrader_config.py"
    cfg.write_text('c = get_config()\nc.CourseDirectory.db_url = "sqlite:///gradebook.db"\n', encoding="utf-8")
    assert gradebook_io.course_db_url(course) == f"sqlite:///{course / 'gradebook.db'}"
    assert gradebook_io.missing(gradebook_io.course_db_url(course))
    cfg.write_text("c = get_config()\n", encoding="utf-8")  # 没设：nbgrader 的默认值（按课程根目录）
    assert gradebook_io.course_db_url(course) == CourseDirectory(root=str(course)).db_url
    url = "postgresql+psycopg2://ta:s3cret@db.example.edu:5433/cs224n"
    cfg.write_text(f"import os\nc = get_config()\nc.CourseDirectory.db_url = os.environ.get('X_DB', {url!r})\n",
                   encoding="utf-8")
    assert gradebook_io.course_db_url(course) == url
    assert not gradebook_io.missing(url) and gradebook_io.sqlite_file(url) is None
    assert "s3cret" not in gradebook_io.describe(url) and "db.example.edu:5433/cs224n" in gradebook_io.describe(url)
    try:  # 没装的驱动：一句中文说明，不是 ModuleNotFoundError 的内部错误
        import pg8000  # noqa: F401
    except ImportError:
        cfg.write_text('c = get_config()\nc.CourseDirectory.db_url = "postgresql+pg8000://ta@db/x"\n', encoding="utf-8")
        with pytest.raises(SystemExit, match="数据库驱动 pg8000.*postgresql\\+psycopg2://"):
            gradebook_io.course_db_url(course)


def _submissions(root: Path) -> Path:
    """三名学生的 notebook 01：全对、空白、只做了前一半。按学号文件夹放（不要正则）。"""
    release = gf.load(REPO / "release" / "exercises" / f"{NB}.ipynb")
    solution = gf.load(REPO / "solutions" / "exercises" / f"{NB}.ipynb")
    half = gf.answered(release, solution)
    sol_ids = [gf.gid(c) for c in half["cells"] if gf.is_solution(c)]
    keep = set(sol_ids[: len(sol_ids) // 2])
    rel_by_id = {gf.gid(c): c for c in release["cells"] if gf.gid(c)}
    half["cells"] = [rel_by_id[gf.gid(c)] if gf.is_solution(c) and gf.gid(c) not in keep else c
                     for c in half["cells"]]
    subs = root / "downloads"
    for sid, nb in [("2024001", gf.answered(release, solution)), ("2024002", release), ("2024003", half)]:
        (subs / sid).mkdir(parents=True)
        (subs / sid / f"{NB}.ipynb").write_bytes(gf.dump(nb))
    return subs


def _cli(course: Path, *args: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(course), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "lib.grading", *args], cwd=course, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]


def _scores(db_url: str) -> dict:
    """gradebook 里 notebook 01 的分数：学生 -> (notebook 总分, {grade_id: 分数})，用 nbgrader 自己的 Gradebook。"""
    from nbgrader.api import Gradebook
    out = {}
    with Gradebook(db_url) as gb:
        for sub in gb.assignment_submissions("exercises"):
            for sn in sub.notebooks:
                if sn.name == NB:
                    out[sub.student.id] = (float(sn.score), {g.name: g.score for g in sn.grades})
    return out


def _csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_grading_with_a_postgresql_gradebook_matches_sqlite(postgres_url, tmp_path):
    subs = _submissions(tmp_path)
    lite = gf.copy_course(REPO, tmp_path / "sqlite")
    pg = gf.copy_course(REPO, tmp_path / "pg")
    with open(pg / "nbgrader_config.py", "a", encoding="utf-8") as f:
        f.write(f'\nc.CourseDirectory.db_url = "{postgres_url}"\n')
    assert gradebook_io.course_db_url(pg) == postgres_url
    for course in (lite, pg):
        _cli(course, "grade", "exercises", "--submissions", str(subs), "--jobs", "2", "--quiet")
        _cli(course, "feedback", "exercises", "--quiet")
        _cli(course, "export", "exercises", "--lms", "csv")
    assert not (pg / "gradebook.db").exists()  # 什么都没写进 SQLite
    in_pg, in_lite = _scores(postgres_url), _scores(f"sqlite:///{lite / 'gradebook.db'}")
    assert set(in_pg) == {"2024001", "2024002", "2024003"}
    assert in_pg == in_lite
    full = sum(gf.test_points(gf.load(REPO / "release" / "exercises" / f"{NB}.ipynb")).values())
    assert in_pg["2024001"][0] == full and in_pg["2024002"][0] == 0 and 0 < in_pg["2024003"][0] < full
    # grades.csv、导出的总表、反馈里的分数也一样（都从 gradebook 读）
    key = ("student_id", "notebook", "score", "status")
    assert [tuple(r[k] for k in key) for r in gf.read_grades(pg)] == \
        [tuple(r[k] for k in key) for r in gf.read_grades(lite)]
    exp = pg / "exports" / "exercises_csv.csv"
    assert _csv(exp) == _csv(lite / "exports" / "exercises_csv.csv") and len(_csv(exp)) == 3
    for sid in in_pg:
        assert (pg / "feedback" / sid / "exercises" / f"{NB}.html").is_file()
