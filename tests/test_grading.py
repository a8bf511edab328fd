"""助教评分流水线（lib/grading）的测试。

两组端到端测试（标记 slow，都在临时课程目录里运行，绝不在仓库里写学生数据）：
- 小课程：测试里用 nbgrader 现场生成的两题作业，跑全部 25 种 fixture（作弊、死循环、崩溃、修复……）；
- 真实作业 `exercises`：从仓库的 release/ 和 solutions/ 造提交（每个 notebook 的正确/空白/部分答错，
  加上第一个 notebook 上的一组作弊与修复 fixture）。
以及不执行 notebook 的快速单元测试（导入、修复、命令行参数）。
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grading_fixtures as gf  # noqa: E402

from lib.grading import collect, pipeline, repair, sandbox  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BWRAP, BWRAP_MSG = sandbox.bwrap_status()


def _snapshot(folder: Path) -> dict:
    return {p: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ============================================================================ 小课程：全部 fixture
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    course = gf.make_tiny_course(root / "course", REPO)
    release = gf.load(course / "release" / "tiny" / "tiny.ipynb")
    solution = gf.load(course / "solutions" / "tiny" / "tiny.ipynb")
    fixtures = gf.build_fixtures(release, solution, "tiny", course, "tiny", multi=False)
    full = sum(gf.test_points(release).values())
    for f in fixtures:
        f["full"] = full
    subs = root / "downloads"
    gf.write_fixtures(fixtures, subs)
    before = _snapshot(subs)
    cwd = os.getcwd()
    os.chdir(course)
    sys.path.insert(0, str(course))
    try:
        opts = pipeline.Options(assignment="tiny", submissions=subs, course_root=course, jobs=2,
                                limits=sandbox.Limits(cell_timeout=6, grace=3), checks_module="tiny_checks",
                                probes_file=course / "tiny_probes.py", progress=False, quiet=True)
        rows = pipeline.run(opts)
    finally:
        os.chdir(cwd)
    return {"course": course, "subs": subs, "fixtures": fixtures, "rows": rows, "before": before, "opts": opts,
            "csv": gf.read_grades(course), "release": release}


@pytest.mark.slow
def test_tiny_every_input_file_is_a_row(tiny_run):
    rows = tiny_run["csv"]
    assert len(rows) == len(tiny_run["fixtures"])  # 每个输入文件恰好一行：评分或隔离
    assert list(rows[0].keys()) == ["student_id", "notebook", "score", "max_score", "status", "detail"]


@pytest.mark.slow
@pytest.mark.parametrize("name", [f["name"] for f in gf.build_fixtures(
    gf.tiny_source_notebook(), gf.tiny_source_notebook(), "tiny", Path("/x"), "tiny", multi=False)])
def test_tiny_fixture_score_and_status(tiny_run, name):
    fx = next(f for f in tiny_run["fixtures"] if f["name"] == name)
    rows = gf.rows_for(fx, tiny_run["csv"])
    assert len(rows) == 1, rows
    row = rows[0]
    st = gf.statuses(row)
    assert fx["must"] <= st, (row["status"], row["detail"])
    assert not (fx["forbid"] & st), (row["status"], row["detail"])
    want = gf.expected_score(fx, BWRAP)
    if want is None:
        assert row["score"] == "" and row["status"] == "quarantined"
    else:
        # 小课程：两个自动评分单元格 3 + 1 分，人工评分的 2 分还没给
        assert float(row["score"]) == pytest.approx(want), (row["status"], row["detail"])
        assert float(row["max_score"]) == 6.0


@pytest.mark.slow
def test_tiny_originals_untouched(tiny_run):
    assert _snapshot(tiny_run["subs"]) == tiny_run["before"]


@pytest.mark.slow
def test_tiny_feedback_has_no_hidden_tests_or_reference(tiny_run):
    course = tiny_run["course"]
    graded = [r for r in tiny_run["csv"] if r["status"] != "quarantined"]
    files = sorted((course / "feedback").rglob("*.html"))
    assert len(files) == len(graded)
    for f in files:
        html = f.read_text(encoding="utf-8")
        assert gf.HIDDEN_MARKER not in html, f
        assert "BEGIN HIDDEN TESTS" not in html, f
        if "s02_blank" in str(f):
            assert gf.REFERENCE_MARKER not in html  # 空白提交的反馈里没有参考答案
            assert "3 / 3" not in html
        assert "可见测试通过" in html or "double" in html  # 学生的答案和可见测试都在
    for f in (course / "autograded").rglob("*.ipynb"):
        assert gf.HIDDEN_MARKER not in f.read_text(encoding="utf-8")


@pytest.mark.slow
def test_tiny_gradebook_and_manual_grades(tiny_run):
    """分数在 nbgrader gradebook 里；人工评分后再运行，grades.csv 加上人工分，且不重新执行学生代码。"""
    from nbgrader.api import Gradebook
    course = tiny_run["course"]
    db = "sqlite:///" + str(course / "gradebook.db")
    with Gradebook(db) as gb:
        sn = gb.find_submission_notebook("tiny", "tiny", "s01_correct")
        assert sn.score == pytest.approx(4.0) and sn.max_score == pytest.approx(6.0)
        assert sn.needs_manual_grade
        g = gb.find_grade("explain", "tiny", "tiny", "s01_correct")
        g.manual_score = 1.5
        gb.db.commit()
    before_csv = (course / "grades.csv").read_bytes()
    calls = []
    orig = sandbox.execute
    sandbox.execute = lambda *a, **k: calls.append(1) or orig(*a, **k)
    cwd = os.getcwd()
    os.chdir(course)
    try:
        pipeline.run(tiny_run["opts"])
    finally:
        os.chdir(cwd)
        sandbox.execute = orig
    assert calls == []  # 续跑：不重新执行
    rows = gf.read_grades(course)
    row = next(r for r in rows if r["student_id"] == "s01_correct")
    assert float(row["score"]) == pytest.approx(5.5)
    # 除了这一行，其余完全相同（幂等）
    old = [r for r in csv.DictReader(io.StringIO(before_csv.decode("utf-8-sig"))) if r["student_id"] != "s01_correct"]
    assert old == [r for r in rows if r["student_id"] != "s01_correct"]


@pytest.mark.slow
def test_tiny_summary_and_quarantine_copies(tiny_run):
    text = pipeline.summary([pipeline.Row(r["student_id"], r["notebook"], float(r["score"]) if r["score"] else None,
                                          float(r["max_score"]) if r["max_score"] else None, r["status"], r["detail"])
                             for r in tiny_run["csv"]], 1.0, True)
    assert "quarantined 3" in text and "平均得分率" in text and "#" in text
    q = tiny_run["course"] / ".grading" / "tiny" / "quarantine"
    assert len(list(q.iterdir())) == 3


@pytest.mark.slow
def test_tiny_without_bwrap_degrades_but_never_scores_silently(tiny_run, tmp_path):
    """没有 bwrap：学生能读到参考答案并因此答对，但这一份一定被标记为可疑；打补丁照样不加分。"""
    course = tmp_path / "course"
    shutil.copytree(tiny_run["course"], course, ignore=shutil.ignore_patterns(
        ".grading", "autograded", "submitted", "feedback", "gradebook.db", "grades.csv", "__pycache__"))
    fixtures = [f for f in tiny_run["fixtures"] if f["name"][:3] in ("s01", "s05", "s10", "s13")]
    subs = tmp_path / "subs"
    gf.write_fixtures(fixtures, subs)
    cwd = os.getcwd()
    os.chdir(course)
    try:
        opts = pipeline.Options(assignment="tiny", submissions=subs, course_root=course, jobs=2,
                                limits=sandbox.Limits(cell_timeout=6, grace=3), checks_module="tiny_checks",
                                probes_file=course / "tiny_probes.py", progress=False, quiet=True, use_bwrap=False)
        pipeline.run(opts)
    finally:
        os.chdir(cwd)
    rows = {r["student_id"]: r for r in gf.read_grades(course)}
    assert rows["s01_correct"]["status"] == "ok" and float(rows["s01_correct"]["score"]) == 4.0, rows["s01_correct"]
    assert "suspect" in gf.statuses(rows["s05_patch_numpy"]) and float(rows["s05_patch_numpy"]["score"]) == 0.0
    assert "suspect" in gf.statuses(rows["s10_read_solutions"])
    assert "timeout" in gf.statuses(rows["s13_stubborn_loop"]) and float(rows["s13_stubborn_loop"]["score"]) == 4.0


# ============================================================================ 真实作业
REAL = (REPO / "release" / "exercises").is_dir() and (REPO / "solutions" / "exercises").is_dir()
# 每个有代码题的 notebook 交三种：正确、空白、部分答错。练习 01 上全部 25 种提交（作弊、崩溃、改坏的 notebook……）
# 由 test_grading_demo_matches_every_fixture_on_a_real_notebook 通过命令行评一遍，不在这里再评一遍。
REAL_KINDS = ["s01", "s02", "s03"]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    if not REAL:
        pytest.skip("release/exercises 还没有生成")
    root = tmp_path_factory.mktemp("real")
    course = gf.copy_course(REPO, root / "course")
    fixtures = []
    names = sorted(p.stem for p in (course / "release" / "exercises").glob("*.ipynb"))
    for i, nb in enumerate(names):
        rel = gf.load(course / "release" / "exercises" / f"{nb}.ipynb")
        sol = gf.load(course / "solutions" / "exercises" / f"{nb}.ipynb")
        has_code = any(gf.is_solution(c) and c["cell_type"] == "code" for c in rel["cells"])
        if not has_code:
            continue
        fx = gf.build_fixtures(rel, sol, nb, course, "exercises", multi=True)
        fx = [f for f in fx if f["name"][:3] in REAL_KINDS]
        full = sum(gf.test_points(rel).values())
        for f in fx:
            f["full"], f["notebook"] = full, nb
            f["path"] = f["path"].replace(f["name"], f"{f['name']}_{i}") if "/" in f["path"] else f["path"]
            f["name"] = f"{f['name']}_{i}"
        fixtures += fx
    subs = root / "lms_download.zip"
    with zipfile.ZipFile(subs, "w") as zf:  # LMS 的 zip：所有文件在一个顶层文件夹里
        for f in fixtures:
            zf.writestr("exercises_submissions/" + f["path"], f["data"])
    before = _snapshot(root)
    cwd = os.getcwd()
    os.chdir(course)
    try:
        opts = pipeline.Options(assignment="exercises", submissions=subs, course_root=course, jobs=2,
                                limits=sandbox.Limits(cell_timeout=60, grace=5), progress=False, quiet=True)
        rows = pipeline.run(opts)
    finally:
        os.chdir(cwd)
    return {"course": course, "fixtures": fixtures, "rows": rows, "csv": gf.read_grades(course),
            "subs": subs, "before": before, "root": root}


@pytest.mark.slow
def test_real_scores_and_statuses(real_run):
    # 每个 fixture 学生只交一个 notebook：其余的 notebook 各有一行 missing，score 留空（没交不是 0 分）
    missing = [r for r in real_run["csv"] if r["status"] == "missing"]
    assert missing and all(r["score"] == "" and r["detail"].startswith("没有") for r in missing)
    rows = [r for r in real_run["csv"] if r["status"] != "missing"]
    assert len(rows) == len(real_run["fixtures"])
    problems = []
    for fx in real_run["fixtures"]:
        match = gf.rows_for(fx, rows)
        if len(match) != 1:
            problems.append((fx["name"], "rows", match))
            continue
        row = match[0]
        if not gf.row_matches(fx, row, BWRAP):  # max_score 含人工评分单元格；自动评分部分要和期望完全一致
            problems.append((fx["name"], row["score"], gf.expected_score(fx, BWRAP), row["status"],
                             row["detail"][:300]))
    assert not problems, "\n".join(map(str, problems))


def _assert_feedback_never_shows_hidden_tests(course: Path) -> None:
    """course/feedback/ 里的每一份反馈 HTML 都不含 source/ 里任何一行隐藏测试。"""
    import html as _html
    hidden_lines = set()
    for p in (course / "source" / "exercises").glob("*.ipynb"):
        for c in gf.load(p)["cells"]:
            text = gf.src(c)
            if "BEGIN HIDDEN TESTS" in text:
                body = text.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS", 1)[0]
                hidden_lines |= {line.strip() for line in body.splitlines() if len(line.strip()) > 12}
    assert hidden_lines, "source/ 里应该有隐藏测试"
    files = list((course / "feedback").rglob("*.html"))
    assert files
    for f in files:
        text = _html.unescape(f.read_text(encoding="utf-8"))
        leaked = [h for h in hidden_lines if h in text]
        assert not leaked, (f, leaked[:3])
        assert "BEGIN HIDDEN TESTS" not in text


@pytest.mark.slow
def test_real_feedback_never_shows_hidden_tests(real_run):
    _assert_feedback_never_shows_hidden_tests(real_run["course"])


@pytest.mark.slow
def test_real_feedback_is_a_chinese_summary_per_exercise_without_boilerplate(real_run):
    """反馈顶部是中文的汇总表，每个自动评分单元格一行（按题目命名）；每份都一样的引导单元格、作答说明、自检
    不放进反馈；Bootstrap 只嵌入反馈页用到的子集。"""
    import html as _html
    course = real_run["course"]
    for fx in real_run["fixtures"]:
        if fx["name"][:3] not in ("s01", "s03"):  # 正确 / 部分答错：都评了分、写了反馈
            continue
        student = gf.rows_for(fx, real_run["csv"])[0]["student_id"]
        f = course / "feedback" / student / "exercises" / f"{fx['notebook']}.html"
        text = _html.unescape(f.read_text(encoding="utf-8"))
        rel = gf.load(course / "release" / "exercises" / f"{fx['notebook']}.ipynb")
        graded = [gf.gid(c) for c in rel["cells"] if gf.meta(c).get("grade")]  # 测试单元格和文字题，按顺序
        tests = gf.test_points(rel)
        table = text.split('id="summary">', 1)[1].split("</table>", 1)[0]
        rows = re.findall(r'<tr><td><a href="#([^"]+)">([^<]+)</a></td><td[^>]*>([^<]+)</td><td>([^<]*)</td></tr>', table)
        assert "<th>题目</th>" in table and [r[0] for r in rows] == graded, (f, rows)
        assert all(label.startswith("练习") for _, label, _, _ in rows), rows
        if fx["name"].startswith("s01"):
            assert all(msg == "正确。" for gid, _, _, msg in rows if gid in tests), rows
        assert "Test cell" not in text and "Score:" not in text
        assert "# 引导单元格" not in text and "check_this_notebook(" not in text and "## 怎样作答" not in text
        assert ".glyphicon" not in text and len(f.read_bytes()) < 100_000, (f, len(f.read_bytes()))
        assert '"Microsoft YaHei","Noto Sans CJK SC"' in text  # 中文字体栈：找得到系统的中文字体
        from lib.grading import feedback_math
        if feedback_math.available():  # 公式是 MathML：离线也能显示，不从 CDN 加载 MathJax
            assert "<math" in text and "mathjax" not in text.lower() and "cdnjs" not in text, f


@pytest.mark.slow
def test_real_originals_untouched(real_run):
    snap = {p: v for p, v in _snapshot(real_run["root"]).items() if p == real_run["subs"]}
    assert snap == {p: v for p, v in real_run["before"].items() if p == real_run["subs"]}


# ============================================================================ 快速单元测试
def _nb_bytes(cells=None):
    return json.dumps({"cells": cells or [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()


def test_collect_layouts_and_reasons(tmp_path):
    d = tmp_path / "dl"
    (d / "alice").mkdir(parents=True)
    (d / "alice" / "01_a.ipynb").write_bytes(_nb_bytes())
    (d / "alice" / "Copy of 02_b.ipynb").write_bytes(_nb_bytes())      # Colab 的“副本”名
    (d / "bob").mkdir()
    (d / "bob" / "01_a (1).ipynb").write_bytes(_nb_bytes())            # 同一 notebook 两份：较早的一份
    os.utime(d / "bob" / "01_a (1).ipynb", (1_700_000_000, 1_700_000_000))
    (d / "bob" / "01_a.ipynb").write_bytes(_nb_bytes())                # 较新的一份
    (d / "bob" / "notes.ipynb").write_bytes(_nb_bytes())               # 不认识的 notebook
    (d / "carol.ipynb").write_bytes(_nb_bytes())                       # 多 notebook 作业里的单文件
    (d / "dave").mkdir()
    (d / "dave" / "01_a.ipynb").write_bytes(b"{not json")
    (d / "dave" / "02_b.ipynb").write_bytes(b'{"hello": 1}')
    (d / ".DS_Store").write_bytes(b"x")
    items = collect.collect(d, ["01_a", "02_b"])
    by = {it.src: it for it in items}
    assert len(items) == 9
    assert by["alice/01_a.ipynb"].reason is None and by["alice/01_a.ipynb"].notebook == "01_a"
    assert by["alice/Copy of 02_b.ipynb"].notebook == "02_b" and by["alice/Copy of 02_b.ipynb"].notes
    assert by["bob/01_a.ipynb"].reason is None                          # 文件时间新的那份评分
    assert "重复提交" in by["bob/01_a (1).ipynb"].reason and by["bob/01_a (1).ipynb"].skip
    assert "notebook 名称不对" in by["bob/notes.ipynb"].reason
    assert "文件名不符合约定" in by["carol.ipynb"].reason
    assert "JSON" in by["dave/01_a.ipynb"].reason
    assert "不是 notebook" in by["dave/02_b.ipynb"].reason
    assert "系统生成" in by[".DS_Store"].reason


def test_collect_zip_regex_roster(tmp_path):
    z = tmp_path / "moodle.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("top/张三_1001_assignsubmission_file_/hw.ipynb", _nb_bytes())
        zf.writestr("top/李四_1002_assignsubmission_file_/hw.ipynb", _nb_bytes())
        zf.writestr("top/readme.txt", b"hi")
    rx = r"^[^_/]+_(?P<student_id>\d+)_assignsubmission_file_/(?P<notebook>[^/]+)\.ipynb$"
    items = collect.collect(z, ["hw"], name_regex=rx, roster={"1001"})
    by = {it.src: it for it in items}
    assert by["张三_1001_assignsubmission_file_/hw.ipynb"].student_id == "1001"
    assert "名单里没有" in by["李四_1002_assignsubmission_file_/hw.ipynb"].reason
    assert "不是 .ipynb" in by["readme.txt"].reason
    with pytest.raises(collect.InputError):
        collect.collect(z, ["hw", "x"], name_regex=r"^(?P<student_id>\w+)\.ipynb$")
    with pytest.raises(collect.InputError):
        collect.read_inputs(tmp_path / "nope")


def _tiny_release():
    """不用 nbgrader：把 source 版本手工变成 release 的样子（去掉答案和隐藏测试）。"""
    nb = gf.tiny_source_notebook()
    for c in nb["cells"]:
        s = gf.src(c)
        if "### BEGIN SOLUTION" in s:
            head = s.split("### BEGIN SOLUTION")[0]
            c["source"] = head + ("    " if head.strip() else "") + "# 在这里写你的代码\nraise NotImplementedError()"
        if "### BEGIN HIDDEN TESTS" in s:
            c["source"] = s.split("### BEGIN HIDDEN TESTS")[0].rstrip()
    return nb


def test_repair_restores_everything():
    rel = _tiny_release()
    full = gf.answered(rel, gf.tiny_source_notebook())
    answers = {gf.gid(c): gf.src(c) for c in full["cells"] if gf.is_solution(c)}
    for make, word in [(gf.strip_metadata, "补回 nbgrader 元数据"), (gf.duplicate_graded_cell, "重复"),
                       (gf.delete_test_cell, "补回"), (gf.change_cell_type, "类型"), (gf.colab_style, None)]:
        broken = make(full)
        fixed, notes = repair.repair(broken, rel)
        assert [gf.gid(c) for c in fixed["cells"] if gf.gid(c)] == [gf.gid(c) for c in rel["cells"] if gf.gid(c)]
        for c in fixed["cells"]:
            if gf.is_solution(c):
                assert gf.src(c) == answers[gf.gid(c)], make.__name__
            elif gf.gid(c):
                orig = next(r for r in rel["cells"] if gf.gid(r) == gf.gid(c))
                assert gf.src(c) == gf.src(orig) and c["cell_type"] == orig["cell_type"]
        if word:
            assert any(word in n for n in notes), (make.__name__, notes)
        else:
            assert notes == [], notes
    # 学生自己加的单元格保留在原位
    extra = gf.insert_after_last_solution(full, "helper = 1")
    fixed, _ = repair.repair(extra, rel)
    assert any(gf.src(c) == "helper = 1" and not gf.gid(c) for c in fixed["cells"])


def test_cli_rejects_bad_arguments(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "lib.grading", "grade", "x", "--submissions", str(tmp_path),
                        "--jobs", "0"], capture_output=True, text=True, cwd=REPO, env=env)
    assert p.returncode == 2 and "--jobs" in p.stderr
    p = subprocess.run([sys.executable, "-m", "lib.grading", "grade", "exercises", "--submissions",
                        str(tmp_path / "missing.zip")], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert p.returncode != 0 and "nbgrader_config.py" in (p.stderr + p.stdout)


def test_sandbox_status_message():
    ok, msg = sandbox.bwrap_status()
    if not ok:
        assert "bubblewrap" in msg and "apt-get install bubblewrap" in msg
    else:
        assert msg == "bubblewrap 可用"


def test_slow_submissions_are_scheduled_first():
    """最长处理时间优先：导入 torch（直接或经由 lib 的模型模块）的提交先执行；估计对怪格式的提交也不出错。"""
    def nb(*sources, cell_type="code"):
        return {"cells": [{"cell_type": cell_type, "source": s, "metadata": {}} for s in sources]}

    light = nb("import numpy as np\nx = np.ones(3)")
    heavy = [nb("import torch"), nb(["from lib.transformer import ", "TransformerLM"]),
             nb("from lib import transformer"), nb("import lib.toy_tasks as demos")]
    not_heavy = [nb("# import torch  这行是注释\nx = 1"), nb("import torch", cell_type="markdown"),
                 nb("print('torch')")]
    assert all(pipeline.estimated_seconds(h) > pipeline.estimated_seconds(light) for h in heavy)
    assert all(pipeline.estimated_seconds(n) == pipeline.estimated_seconds(light) for n in not_heavy)
    assert pipeline.estimated_seconds({"cells": [None, 3]}) == pipeline.estimated_seconds(light)
    assert pipeline.estimated_seconds({"cells": "oops"}) == pipeline.estimated_seconds(light)


def test_slots_are_handed_out_in_the_scheduled_order():
    """执行槽按排好的顺序发：线程先到后到（这里故意倒着启动）不改变谁先执行；用不着槽的一轮不挡后面的；
    Ctrl-C（sandbox.STOP）之后还在等的抛出 Interrupted。CI 里 --jobs 1 的 Ctrl-C 测试曾因线程抢槽而先评了慢的。"""
    import threading
    import time

    slots, order, lock = pipeline.InOrderSlots(1), [], threading.Lock()

    def job(turn):
        if turn == 2:  # 这一份有存下的执行结果，不执行
            slots.pass_turn(turn)
            return
        slot = slots.take(turn)
        with lock:
            order.append(turn)
        time.sleep(0.01)
        slots.give_back(slot)

    threads = [threading.Thread(target=job, args=(t,), daemon=True) for t in reversed(range(6))]
    for t in threads:
        t.start()
        time.sleep(0.01)
    for t in threads:
        t.join(timeout=10)
    assert order == [0, 1, 3, 4, 5]

    two, running, most, started = pipeline.InOrderSlots(2), [], [], []  # 两个槽：每份都执行了，同时执行的不超过两份

    def job2(turn):
        slot = two.take(turn)
        with lock:
            running.append(turn)
            started.append(turn)
            most.append(len(running))
        time.sleep(0.02)
        with lock:
            running.remove(turn)
        two.give_back(slot)

    threads = [threading.Thread(target=job2, args=(t,), daemon=True) for t in reversed(range(8))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(started) == list(range(8)) and max(most) <= 2 and not running

    waiting = pipeline.InOrderSlots(1)
    got = waiting.take(0)  # 槽被占着，第 1 轮只能等
    outcome = []
    t = threading.Thread(target=lambda: outcome.append(_take_or_interrupted(waiting, 1)), daemon=True)
    t.start()
    time.sleep(0.1)  # 让它先进入等待
    sandbox.STOP.set()
    try:
        t.join(timeout=5)
    finally:
        sandbox.STOP.clear()
    waiting.give_back(got)
    assert outcome == ["Interrupted"]


def _take_or_interrupted(slots, turn):
    try:
        return slots.take(turn)
    except sandbox.Interrupted:
        return "Interrupted"


@pytest.mark.slow
def test_grading_demo_matches_every_fixture_on_a_real_notebook(tmp_path):
    """`make grade-demo`：真实的练习 01 上全部 25 种提交（作弊、死循环、fork 炸弹、段错误、改坏的 notebook……），
    通过命令行评分，每一种都得到期望的分数和状态，反馈里没有隐藏测试；临时课程之外什么也不写。"""
    if not REAL:
        pytest.skip("release/exercises 还没有生成")
    before = sorted(p.name for p in REPO.iterdir())
    p = subprocess.run([sys.executable, str(REPO / "tests" / "grading_demo.py"), "--suite", "robustness",
                        "--keep", str(tmp_path / "demo")],
                       capture_output=True, text=True, cwd=REPO, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "25 / 25 份符合期望" in p.stdout
    rows = gf.read_grades(tmp_path / "demo" / "course")
    assert len([r for r in rows if r["status"] != "missing"]) == 25
    # 只交了 notebook 01：没人交的 notebook 不算“缺交”（issue 21），缺交行若有，分数为空而不是 0
    assert {r["score"] for r in rows if r["status"] == "missing"} <= {""}
    assert sorted(p.name for p in REPO.iterdir()) == before  # 没在仓库里留下 gradebook.db、grades.csv……
    _assert_feedback_never_shows_hidden_tests(tmp_path / "demo" / "course")  # 包括各种作弊的那些提交的反馈


@pytest.mark.slow
@pytest.mark.skipif(not BWRAP, reason=BWRAP_MSG)
def test_a_sandbox_that_cannot_start_is_an_error_not_a_zero(tmp_path, monkeypatch, capsys):
    """评分环境坏了（沙箱里找不到 Python）时不能给学生记 0 分：status 为 error、不记分、退出码 4；修好后重评。"""
    from lib.grading.__main__ import main
    course = gf.copy_course(REPO, tmp_path / "course")
    downloads = tmp_path / "downloads" / "2024001"
    downloads.mkdir(parents=True)
    shutil.copy(REPO / "release" / "exercises" / "01_attention_by_hand.ipynb", downloads)
    monkeypatch.chdir(course)
    args = ["grade", "exercises", "--submissions", str(downloads.parent), "--no-fork-server", "--quiet"]
    with monkeypatch.context() as m:
        m.setattr(sys, "executable", str(tmp_path / "gone" / "bin" / "python"))
        assert main(args) == 4
    assert "不是学生的问题" in capsys.readouterr().err
    (row,) = [r for r in gf.read_grades(course) if r["notebook"] == "01_attention_by_hand"]
    assert row["status"] == "error" and row["score"] == "" and "没能启动" in row["detail"]
    assert main(args) == 0  # 环境修好了：这一份重新执行，空白答卷得 0 分
    (row,) = [r for r in gf.read_grades(course) if r["notebook"] == "01_attention_by_hand"]
    assert row["status"] == "ok" and float(row["score"]) == 0.0


def test_feedback_math_is_mathml_and_leaves_code_alone():
    pytest.importorskip("latex2mathml")
    from lib.grading import feedback_math as fm
    out = fm.markdown_with_mathml("打分 $q_i \\cdot k_j / \\sqrt{d_k}$，代码 `x = $y$`，价格 \\$5。\n\n$$\nE = QK^\\top\n$$")
    assert out.count("<math") == 2 and 'display="block"' in out and "`x = $y$`" in out and "\\$5" in out, out
    assert "<msqrt>" in out and "$" not in out.replace("`x = $y$`", "").replace("\\$5", "")
    assert fm.markdown_with_mathml("$\\notacommand{$") == "$\\notacommand{$" or "<code" in fm.markdown_with_mathml(
        "$\\notacommand{$")  # 不认识的写法不丢内容
    page = ("<head>\n<!-- Loading mathjax macro -->\n<!-- Load mathjax -->\n<script src=x></script>\n"
            "<!-- End of mathjax configuration -->\n</head>")
    assert fm.drop_mathjax(page) == "<head>\n</head>"


# ============================================================================ 没交的 notebook 不进 formgrader 的待评队列
@pytest.mark.filterwarnings("ignore:.*not in session")  # nbgrader 自己 add_submission 时的 SQLAlchemy 警告
def test_never_submitted_notebooks_do_not_need_manual_grading(tmp_path):
    """nbgrader 的 add_submission 给作业的每个 notebook 都建记录，单元格默认“需要人工评分”：没交的 notebook
    会出现在 formgrader 的待评队列里（0 分）。写分数时（submitted=交了的 notebook）清掉它们的标记；以后交了，照常标记。"""
    from nbgrader.api import Gradebook

    from lib.grading import gradebook_io

    names = ["01_attention_by_hand", "02_scaling_and_equivariance"]
    rel = {n: gf.load(REPO / "release" / "exercises" / f"{n}.ipynb") for n in names}
    db = "sqlite:///" + str(tmp_path / "gradebook.db")
    gradebook_io.ensure_assignment(db, "exercises", rel)
    auto = {n: {g: p for g, (p, a) in gradebook_io.grade_cells(rel[n]).items() if a} for n in names}
    with Gradebook(db) as gb:
        gradebook_io.write_scores(gb, "exercises", "old", names[0], auto[names[0]], set())  # 不给 submitted：nbgrader 的默认
        assert gb.find_submission_notebook(names[1], "exercises", "old").needs_manual_grade
        w = gradebook_io.write_scores(gb, "exercises", "s1", names[0], auto[names[0]], set(), submitted={names[0]})
        never = gb.find_submission_notebook(names[1], "exercises", "s1")
        assert not never.needs_manual_grade and never.score == 0
        assert w.pending == len(gradebook_io.grade_cells(rel[names[0]])) - len(auto[names[0]])  # 交了的文字题照常待评
        gradebook_io.write_scores(gb, "exercises", "s1", names[1], auto[names[1]], set(), submitted=set(names))
        later = gb.find_submission_notebook(names[1], "exercises", "s1")
        assert later.needs_manual_grade == any(not a for _, a in gradebook_io.grade_cells(rel[names[1]]).values())


def test_an_answer_cell_that_does_not_run_is_named_in_the_message(tmp_path):
    """答题单元格本身有语法错误（IndentationError）时，后面的检查看到的是“没有找到 f”；给学生的说明先点出
    那个单元格和它的错误，不让学生以为是名字拼错了。"""
    nb_name = "01_attention_by_hand"
    release = gf.load(REPO / "release" / "exercises" / f"{nb_name}.ipynb")
    solution = gf.load(REPO / "solutions" / "exercises" / f"{nb_name}.ipynb")
    nb = gf.answered(release, solution)
    first = next(i for i, c in enumerate(nb["cells"]) if gf.is_solution(c) and c["cell_type"] == "code")
    nb["cells"][first]["source"] = "  x = 1\n" + gf.src(nb["cells"][first])  # 第一行多了缩进
    subs = tmp_path / "downloads" / "2024001"
    subs.mkdir(parents=True)
    (subs / f"{nb_name}.ipynb").write_bytes(gf.dump(nb))
    course = gf.copy_course(REPO, tmp_path / "course")
    env = dict(os.environ, PYTHONPATH=str(course), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "lib.grading", "grade", "exercises", "--jobs", "1", "--quiet",
                        "--submissions", str(subs.parent)], cwd=course, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    graded = gf.load(course / "autograded" / "2024001" / "exercises" / f"{nb_name}.ipynb")
    texts = ["".join(o.get("text", "") for o in c.get("outputs", [])) for c in graded["cells"] if gf.is_test(c)]
    first_test = next(t for t in texts if t)
    assert f"先修好第 {first + 1} 个单元格" in first_test and "IndentationError" in first_test, first_test
