"""班级报告（lib/grading/class_report.py 读数据，class_analysis.py 统计，class_similarity.py 相似度，class_report_html.py 和
templates/class_report/ 的页面；`python -m lib.grading report`）的测试。

- 相似度：一个合成的班（tests/class_fixtures.py：诚实的学生各写各的，共用模板和一行的答案；三对抄袭——改名+改注释+
  加空行、重排换行、调换单元格；空白的 notebook），抄袭的三对排在最前面、被标出，别的一对也不标；
- 统计：一个六个人的小班，每个数（平均、满分率、零分率、未作答、部分、区分度、说明的人数、人工评分进度、缺交、迟交）
  和手算的比较；三个人的班和全空白的 notebook 不出错，无法定义的值写明原因；
- 报告不改 gradebook 和 autograded/ 的任何字节；命令行写出三个文件；
- 真的 Chromium 打开页面（Playwright，和 tests/test_browser.py 一样），各部分都在、没有任何网络请求；
- 端到端（slow）：小课程里用 `grade` 真的评几份提交，再出报告。
"""
from __future__ import annotations

import csv
import datetime as dt
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import class_fixtures as cf  # noqa: E402
import grading_fixtures as gf  # noqa: E402

from lib.grading import class_analysis as ca  # noqa: E402
from lib.grading import class_report as cr  # noqa: E402
from lib.grading import class_similarity as cs  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HAVE_RELEASE = (REPO / "release" / "exercises").is_dir()
pytestmark = pytest.mark.skipif(not HAVE_RELEASE, reason="release/exercises 还没有生成（make release）")
NB1, NB2, NB4 = "01_attention_by_hand", "02_scaling_and_equivariance", "04_blocks_and_cost"


def _read_csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.DictReader(f))


def _digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "reports" not in p.parts}


# ============================================================================ 相似度
@pytest.fixture(scope="module")
def copied_class(tmp_path_factory):
    rel = {k: v for k, v in cf.release_of(REPO).items() if k in (NB1, NB2, NB4)}
    students, planted = cf.synthetic_answers(rel, n_honest=12, seed=7)
    course = cf.write_class(tmp_path_factory.mktemp("copied") / "course", REPO, students, notebooks=list(rel))
    before = _digest(course)
    result = cr.run(course, "exercises", quiet=True)
    return {"course": course, "planted": planted, "result": result, "before": before, "students": students}


def test_planted_pairs_rank_first_and_nothing_else_is_flagged(copied_class):
    pairs = copied_class["result"]["pairs"]
    for nb, a, b in copied_class["planted"]:
        ps = pairs[nb]
        assert ps, nb
        assert {ps[0].a, ps[0].b} == {a, b}, (nb, [(p.a, p.b, p.similarity) for p in ps[:3]])
        assert ps[0].flagged and ps[0].similarity >= 0.8, (nb, ps[0])
    flagged = {(p.notebook, frozenset((p.a, p.b))) for ps in pairs.values() for p in ps if p.flagged}
    assert flagged == {(nb, frozenset((a, b))) for nb, a, b in copied_class["planted"]}


def test_honest_students_share_template_and_one_liners_but_are_not_similar(copied_class):
    """诚实的学生都有同样的模板、同样的手算答案（练习 1）和一行的答案（练习 7），相似度仍然很低；空白提交不出现。"""
    pairs = copied_class["result"]["pairs"]
    planted = {frozenset((a, b)) for _, a, b in copied_class["planted"]}
    others = [p for ps in pairs.values() for p in ps if frozenset((p.a, p.b)) not in planted]
    assert all(p.similarity < cs.FLAG_SIMILARITY or p.shared < cs.FLAG_MIN_SHARED for p in others)
    assert not any(p.a.startswith("blank") or p.b.startswith("blank") for ps in pairs.values() for p in ps)
    # 一行的答案确实大家都一样（否则这个测试什么也没证明）
    h = [s for s in copied_class["students"] if s.startswith("h")]
    ex7 = {copied_class["students"][s][NB4]["answers"]["ex7_answer"] for s in h}
    assert len(ex7) == 1


def test_similarity_csv_and_side_by_side_evidence(copied_class):
    out = copied_class["result"]["dir"]
    rows = _read_csv(out / "similarity.csv")
    assert list(rows[0])[:6] == ["notebook", "student_a", "student_b", "similarity", "flagged", "evidence"]
    assert all(0.0 <= float(r["similarity"]) <= 1.0 and r["flagged"] in ("true", "false") for r in rows)
    flagged = [r for r in rows if r["flagged"] == "true"]
    assert len(flagged) == 3 and all("↔" in r["evidence"] for r in flagged)
    page = (out / "index.html").read_text(encoding="utf-8")
    assert page.count('class="flagged-pair"') == 3 and page.count("<mark>") >= 6
    assert "相似不等于抄袭" in page


def test_report_changes_nothing_and_is_repeatable(copied_class):
    course = copied_class["course"]
    assert _digest(course) == copied_class["before"]  # gradebook.db、autograded/、submitted/ 一个字节都没变
    first = (copied_class["result"]["dir"] / "similarity.csv").read_bytes()
    items = (copied_class["result"]["dir"] / "items.csv").read_bytes()
    cr.run(course, "exercises", quiet=True)
    assert (copied_class["result"]["dir"] / "similarity.csv").read_bytes() == first  # 指纹的哈希是固定的
    assert (copied_class["result"]["dir"] / "items.csv").read_bytes() == items


def test_renaming_comments_and_reflow_do_not_change_the_filtered_tokens():
    code = "def f(x, y):\n    return np.sum(x @ y) + 1\n"
    other = "def g(a,b):  # 注释\n\n    return np.sum(\n        a@b\n    ) + 1\n"
    assert cs.filter_python(code)[0] == cs.filter_python(other)[0]
    assert cs.filter_python(code)[0] != cs.filter_python(code.replace("+ 1", "- 1"))[0]
    broken = "def f(x:\n    return [x"  # 语法不完整也能切分
    assert cs.filter_python(broken)[0].startswith("defV(V:")


# ============================================================================ 统计（手算）
SA = "ex1_self_attention"
L2D, L2M, LB, LBM = ("二维输入、无掩码", "二维输入 + 因果掩码", "有批维度、无掩码",
                     "有批维度 + 掩码（每句不同的掩码、要广播的掩码）")
SQRT = "看起来打分没有除以 √d_k。"


def _partial(parts):
    got = sum(p for _, p, ok, _ in parts if ok)
    total = sum(p for _, p, _, _ in parts)
    lines = [f"✓ {lab}（{p:g} 分）" if ok else f"✗ {lab}（{p:g} 分）：{why}" for lab, p, ok, why in parts]
    head = f"部分正确，{got:g} / {total:g} 分" if got else f"0 / {total:g} 分"
    return head + "。" + "；".join(lines)


def _small_class():
    """六个学生。练习 1 的 self_attention（8 分，四部分各 2 分）和 scores（2 分）；notebook 02 的文字题 ex3_proof（4 分）。"""
    blank_sa = "还没有作答（仍是 raise NotImplementedError()）"
    s = {
        "s1": {"sa": 8, "msg": "正确。", "scores": 2},
        "s2": {"sa": 4, "msg": _partial([(L2D, 2, True, ""), (L2M, 2, True, ""),
                                         (LB, 2, False, "Q 的形状 (2, 3, 4)：注意力权重和参考答案不一致。" + SQRT),
                                         (LBM, 2, False, "Q 的形状 (2, 3, 4)、掩码 (2, 1, 3)：你的代码出错了：IndexError")]),
               "scores": 0, "smsg": "scores_1 不对：得到 [[1., 1.], [1., -1.]]。" + SQRT},
        "s3": {"sa": 0, "msg": SQRT, "scores": 0, "smsg": "scores_1 不对：得到 [[2., 0.5], [1., -3.]]。" + SQRT},
        "s4": {"sa": 6, "msg": _partial([(L2D, 2, True, ""), (L2M, 2, True, ""), (LB, 2, True, ""),
                                         (LBM, 2, False, SQRT)]), "scores": 2},
        "s5": {"sa": 0, "msg": blank_sa, "scores": 0, "smsg": "还没有作答", "blank": True},
        "s6": {"sa": 8, "msg": "正确。", "scores": 2},
    }
    rel = cf.release_of(REPO)
    tmpl = {g: t for g, _, t in cf.answer_cells(rel[NB1])}
    students = {}
    for sid, v in s.items():
        answers = {} if v.get("blank") else {g: t.replace("raise NotImplementedError()", f"return {sid!r}")
                                               + f"\n# {sid}" for g, t in tmpl.items()}
        spec1 = {"answers": answers, "scores": {SA: v["sa"], "ex1_scores": v["scores"]},
                 "messages": {SA: v["msg"], "ex1_scores": v.get("smsg", "正确。")}}
        students[sid] = {NB1: spec1}
    # notebook 02：s1..s4 交了；文字题 s1 = 3 分、s2 = 4 分（已评），s3 待评，s4 没作答（自动 0 分）；s5、s6 没交
    for sid, val, answered in (("s1", 3, True), ("s2", 4, True), ("s3", None, True), ("s4", None, False)):
        students[sid][NB2] = {"answers": {"ex3_proof": f"{sid} 的证明：置换矩阵……"} if answered else {},
                              "scores": {"ex3_proof": val}}
    students["s7"] = {}  # 在 gradebook 里，一份也没交
    return students, s


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    students, spec = _small_class()
    due = dt.datetime(2024, 3, 1, 15, 59)
    course = cf.write_class(tmp_path_factory.mktemp("small") / "course", REPO, students, notebooks=[NB1, NB2],
                            due=due, timestamps={"s1": due - dt.timedelta(hours=1), "s2": due + dt.timedelta(hours=5)})
    result = cr.run(course, "exercises", quiet=True)
    items = {(r["cell"], r["part"]): r for r in _read_csv(result["dir"] / "items.csv")}
    return {"course": course, "result": result, "items": items, "spec": spec}


def test_item_statistics_match_hand_computation(small):
    r = small["items"][(SA, "")]
    assert list(r)[:10] == ["notebook", "cell", "part", "max_points", "mean_points", "full_rate", "zero_rate",
                            "discrimination", "top_hint", "top_hint_count"]
    # 得分 8, 4, 0, 6, 0, 8
    assert float(r["mean_points"]) == pytest.approx(26 / 6, abs=1e-3)
    assert float(r["difficulty"]) == pytest.approx(26 / 48, abs=1e-3)
    assert float(r["full_rate"]) == pytest.approx(2 / 6, abs=1e-3)
    assert float(r["zero_rate"]) == pytest.approx(2 / 6, abs=1e-3)
    assert float(r["blank_rate"]) == pytest.approx(1 / 6, abs=1e-3)  # s5 没作答
    # 区分度：和其余自动评分题（这里只有 ex1_scores：2, 0, 0, 2, 0, 2）的 Pearson 相关
    want = statistics.correlation([8, 4, 0, 6, 0, 8], [2, 0, 0, 2, 0, 2])
    assert float(r["discrimination"]) == pytest.approx(want, abs=1e-3)
    # 最常见的说明：“没有除以 √d_k”，s3（整题只有这一个原因）和 s4（一部分）得到了
    assert r["top_hint"] == SQRT and r["top_hint_count"] == "2"


def test_parts_are_read_from_the_messages(small):
    items = small["items"]
    assert {p for c, p in items if c == SA} == {"", L2D, L2M, LB, LBM}
    # 二维无掩码：s1 ✓ s2 ✓ s3 ✗(0 分) s4 ✓ s5 ✗ s6 ✓ → 满分率 4/6
    r = items[(SA, L2D)]
    assert float(r["max_points"]) == 2 and float(r["full_rate"]) == pytest.approx(4 / 6, abs=1e-3)
    # 有批维度 + 掩码：只有 s1、s6 对
    r = items[(SA, LBM)]
    assert float(r["full_rate"]) == pytest.approx(2 / 6, abs=1e-3)
    assert float(r["mean_points"]) == pytest.approx(4 / 6, abs=1e-3)


def test_hints_with_student_specific_numbers_are_grouped(small):
    r = small["items"][("ex1_scores", "")]
    assert r["top_hint"] == "scores_1 不对：得到 …。" + SQRT and r["top_hint_count"] == "2"
    page = (small["result"]["dir"] / "index.html").read_text(encoding="utf-8")
    assert "33% 的学生（2 / 6）得到这条说明：scores_1 不对：得到 …。" in page
    assert "33% 的学生（2 / 6）得到这条说明：" + SQRT in page


def test_manual_grading_progress_missing_and_late(small):
    r = small["items"][("ex3_proof", "")]
    # 助教已评 2（s1、s2），s4 没作答、自动 0 分（不算“已评”，不进平均），s3 待评
    assert r["kind"] == "manual" and r["graded"] == "2" and r["pending"] == "1" and r["auto_zero"] == "1"
    assert float(r["mean_points"]) == pytest.approx((3 + 4) / 2, abs=1e-3)
    summ = small["result"]["summary"]
    assert summ["late"] == ["s2"] and summ["no_submission"] == ["s7"] and summ["n_students"] == 7
    assert summ["per_notebook"][NB2]["missing"] == 3 and summ["per_notebook"][NB1]["missing"] == 1
    # 总分：notebook 01 的全部评分单元格 + 02 的文字题
    assert summ["totals"]["s2"] == pytest.approx(4 + 0 + 4)
    page = (small["result"]["dir"] / "index.html").read_text(encoding="utf-8")
    assert "3 分 × 1" in page and "4 分 × 1" in page and "待人工评分的单元格" in page


def test_part_discrimination_leaves_the_whole_cell_out_of_the_rest(small):
    """部分的区分度：“其余”去掉整个单元格（同一单元格的其他部分不算），页面上说明其余是哪些 notebook。"""
    r = small["items"][(SA, LBM)]
    # 有批维度 + 掩码：2, 0, 0, 0, 0, 2；其余 = 总分 − 整个 self_attention = 只有 ex1_scores：2, 0, 0, 2, 0, 2
    assert float(r["discrimination"]) == pytest.approx(
        statistics.correlation([2, 0, 0, 0, 0, 2], [2, 0, 0, 2, 0, 2]), abs=1e-3)
    r = small["items"][(SA, L2D)]  # 2, 2, 0, 2, 0, 2
    assert float(r["discrimination"]) == pytest.approx(
        statistics.correlation([2, 2, 0, 2, 0, 2], [2, 0, 0, 2, 0, 2]), abs=1e-3)
    page = (small["result"]["dir"] / "index.html").read_text(encoding="utf-8")
    assert f"这份报告里的 notebook（{NB1}、{NB2}）" in page and "整个单元格" in page


def test_small_class_and_blank_notebooks_say_why_values_are_undefined(tmp_path):
    students = {f"b{i}": {NB1: {"answers": {}, "messages": {}}} for i in range(3)}
    course = cf.write_class(tmp_path / "course", REPO, students, notebooks=[NB1])
    result = cr.run(course, "exercises", quiet=True)
    items = _read_csv(result["dir"] / "items.csv")
    assert items and all(r["discrimination"] == "" for r in items)
    assert all("人数太少" in r["discrimination_note"] for r in items)
    assert all(float(r["zero_rate"]) == 1.0 and float(r["blank_rate"]) == 1.0 for r in items)
    assert result["pairs"][NB1] == []
    assert "无法计算：人数太少" in (result["dir"] / "index.html").read_text(encoding="utf-8")
    # 人数够、但全部空白：所有人得分相同
    students = {f"b{i}": {NB1: {"answers": {}}} for i in range(6)}
    course = cf.write_class(tmp_path / "course6", REPO, students, notebooks=[NB1])
    items = _read_csv(cr.run(course, "exercises", quiet=True)["dir"] / "items.csv")
    assert all(r["discrimination_note"] == "所有人这一项得分相同" for r in items)


def test_unit_helpers():
    parts = ca.parse_parts(_partial([(LBM, 2, False, "原因：a；b"), (L2D, 2, True, "")]))
    assert parts == [(LBM, 2.0, False, "原因：a；b"), (L2D, 2.0, True, "")]
    assert ca.parse_parts("正确。") is None and ca.parse_parts(SQRT) is None
    key, nums = ca.hint_key("得到 [[1., 2.]] 和 3.5，第 1 组")
    assert key == "得到 # 和 #，第 # 组" and nums == ("[[1., 2.]]", "3.5", "1")
    assert ca.hint_display(key, [nums, ("[[0.]]", "3.5", "1")]) == "得到 … 和 3.5，第 1 组"
    assert ca.pearson([1, 2, 3], [1, 2, 3]) == (None, "人数太少（n = 3 < 5）")
    assert ca.pearson([1, 1, 1, 1, 1], [1, 2, 3, 4, 5])[1] == "所有人这一项得分相同"
    assert ca.pearson([1, 2, 3, 4, 5], [5, 4, 3, 2, 1])[0] == pytest.approx(-1.0)


def test_cli_writes_the_three_files_and_explains_bad_input(small, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "lib.grading", "report", "exercises", "-o", str(out)],
                       cwd=small["course"], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert sorted(x.name for x in out.iterdir()) == ["index.html", "items.csv", "similarity.csv"]
    assert "报告：" in p.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copytree(small["course"] / "release", empty / "release")
    (empty / "nbgrader_config.py").write_text("")
    p = subprocess.run([sys.executable, "-m", "lib.grading", "report", "exercises"], cwd=empty,
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 2 and "gradebook.db" in p.stderr and "Traceback" not in p.stderr


# ============================================================================ 浏览器
CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"


@pytest.mark.slow
def test_page_opens_offline_in_a_real_browser(copied_class):
    pytest.importorskip("playwright.sync_api", reason="没有安装 playwright：pip install -r requirements-dev.txt")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"找不到 Chromium（{CHROMIUM}）：Debian 上 apt-get install chromium，或用 CHROMIUM_PATH 指定")
    from playwright.sync_api import sync_playwright
    page_path = copied_class["result"]["dir"] / "index.html"
    requests = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            page = browser.new_page(viewport={"width": 1366, "height": 768})  # 笔记本电脑的屏幕
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_path.as_uri())
            for sid, title in (("class", "班级概况"), ("reteach", "该重讲什么"), ("items", "题目分析"),
                               ("manual", "文字题"), ("similarity", "相似的提交")):
                h2 = page.locator(f"#{sid} h2")
                assert h2.is_visible() and title in h2.inner_text()
            imgs = page.locator("img")
            assert imgs.count() >= 5
            assert page.evaluate("() => [...document.images].every(i => i.complete && i.naturalWidth > 0)")
            assert page.locator(".flagged-pair").count() == 3 and page.locator(".flagged-pair mark").count() >= 6
            # 并排的证据放得下：没有横向滚动条
            assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
            (REPO / "test-artifacts").mkdir(exist_ok=True)
            page.screenshot(path=str(REPO / "test-artifacts" / "class_report.png"))
            page.locator("#similarity").scroll_into_view_if_needed()
            page.screenshot(path=str(REPO / "test-artifacts" / "class_report_similarity.png"))
        finally:
            browser.close()
    assert all(u.startswith(("file:", "data:")) for u in requests), requests  # 不联网：没有 CDN


# ============================================================================ 端到端：真的评分输出
@pytest.mark.slow
def test_report_on_real_grading_output(tmp_path):
    """小课程：用评分流水线真的评 4 份（全对、空白、部分答错、全对的改名抄袭），再出报告。"""
    from lib.grading import pipeline, sandbox
    course = gf.make_tiny_course(tmp_path / "course", REPO)
    release = gf.load(course / "release" / "tiny" / "tiny.ipynb")
    solution = gf.load(course / "solutions" / "tiny" / "tiny.ipynb")
    fx = {f["name"]: f for f in gf.build_fixtures(release, solution, "tiny", course, "tiny", multi=False)}
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in ("s01_correct", "s02_blank", "s03_partly_wrong"):
        (subs / f"{name}.ipynb").write_bytes(fx[name]["data"])
    (subs / "s26_copy.ipynb").write_bytes(fx["s01_correct"]["data"])
    cwd = os.getcwd()
    os.chdir(course)
    sys.path.insert(0, str(course))
    try:
        pipeline.run(pipeline.Options(assignment="tiny", submissions=subs, course_root=course, jobs=2,
                                      limits=sandbox.Limits(cell_timeout=30, grace=3), checks_module="tiny_checks",
                                      probes_file=course / "tiny_probes.py", progress=False, quiet=True,
                                      feedback=False))
    finally:
        os.chdir(cwd)
        sys.path.remove(str(course))
    grades = {r["student_id"]: float(r["score"]) for r in gf.read_grades(course)}
    before = _digest(course)
    result = cr.run(course, "tiny", quiet=True)
    assert _digest(course) == before
    items = {(r["cell"], r["part"]): r for r in _read_csv(result["dir"] / "items.csv")}
    # test_double 3 分：s01、s26 对，s02（空白）、s03（第一个答案留空）错
    d = items[("test_double", "")]
    assert float(d["full_rate"]) == pytest.approx(0.5) and float(d["zero_rate"]) == pytest.approx(0.5)
    # 未作答 = 答案单元格和发布版一字不差：只有 s02（s03 把单元格换成了只有 raise 的另一段，不算“和发布版相同”）
    assert float(d["blank_rate"]) == pytest.approx(0.25)
    # 两个丢分的学生：s02 没作答（double 抛出 NotImplementedError），不进说明的排名；s03 根本没有定义 double：算一次
    it = next(i for i in result["items"] if i.cell == "test_double" and not i.part)
    assert sorted(c for _, c in it.hints) == [1] and d["top_hint_count"] == "1" and it.wrong == 1
    assert not any("NotImplementedError" in t for t, _ in it.hints), it.hints
    a = items[("test_answer", "")]
    assert float(a["full_rate"]) == pytest.approx(0.75)  # s03 只空了第一题
    e = items[("explain", "")]
    # s02 的文字题没作答：自动 0 分，不算助教已评；平均要等助教评了才有
    assert e["kind"] == "manual" and e["pending"] == "3" and e["graded"] == "0" and e["auto_zero"] == "1"
    assert e["mean_points"] == "" and e["difficulty"] == ""
    totals = result["summary"]["totals"]
    assert totals == pytest.approx(grades)


def test_roster_missing_and_lms_late_come_from_grades_csv(small, tmp_path):
    """名单上没交的学生不在 gradebook 里，LMS 标的迟交在没有截止时间时也只在 grades.csv：两者都算进班级概况。"""
    course = tmp_path / "course"
    shutil.copytree(small["course"], course, ignore=shutil.ignore_patterns("reports"))
    (course / "grades.csv").write_text(
        "\ufeffstudent_id,notebook,score,max_score,status,detail\n"
        f"s3,{NB1},0,20,ok+late,晚了 2 小时\ns9,{NB1},0,,missing,没有提交\n", encoding="utf-8")
    summ = cr.run(course, "exercises", quiet=True)["summary"]
    assert summ["late"] == ["s2", "s3"] and "s9" in summ["no_submission"] and summ["n_students"] == 8


def test_parts_parser_reads_what_exercise_checks_writes():
    """部分分的说明由 exercise_checks._score 写：报告读回的标签、分值和对错要和写进去的一致（格式变了这里会失败）。"""
    from lib.grading import exercise_checks as ec

    def wrong(why):
        def f():
            raise ec.Wrong(why)
        return f

    parts = [ec._part(L2D, 2, lambda: None), ec._part(LBM, 2, wrong("Q 的形状 (2, 3, 4)：" + SQRT)),
             ec._part("用了参数 seed", 0.5, wrong("同样的 d_k、σ 换一个 seed，结果一模一样；要用 seed。"))]
    frac, msg = ec._score(parts)
    assert frac == pytest.approx(2 / 4.5)
    # 逐条之间用“；”连接，前一条末尾的“。”被去掉（避免“。；”）
    assert ca.parse_parts(msg) == [(L2D, 2.0, True, ""), (LBM, 2.0, False, "Q 的形状 (2, 3, 4)：" + SQRT.rstrip("。")),
                                   ("用了参数 seed", 0.5, False, "同样的 d_k、σ 换一个 seed，结果一模一样；要用 seed。")]
    _, msg0 = ec._score([ec._part(L2D, 2, wrong("a")), ec._part(LB, 2, wrong("b"))])  # 0 分、原因不同：也逐条列出
    assert [p[:3] for p in ca.parse_parts(msg0)] == [(L2D, 2.0, False), (LB, 2.0, False)]
    assert ca.parse_parts(ec._score([ec._part(L2D, 2, lambda: None)])[1]) is None  # “正确。”


# ============================================================================ 评审（issue 22）：一个像真班那样的小班
NB3, NB6 = "03_positions_and_rope", "06_hands_on"
WHY = "注意力权重和参考答案不一致。" + SQRT
BLANK_SA = "还没有作答（仍是 raise NotImplementedError()）"


@pytest.fixture(scope="module")
def review(tmp_path_factory):
    """六个学生：r1 全对；r2、r3 在不同的部分犯同一个错（说明开头是不同的输入）；b1..b3 空白（说明是“还没有作答”，
    开头的输入也各不相同）。notebook 02 的文字题：r1..r3 写了、助教还没评，b1..b3 没作答（自动 0 分）。
    notebook 06 只有 r1 交了；03、04、05 谁也没交。"""
    from lib.grading import gradebook_io
    rel = cf.release_of(REPO)
    full = {nb: {g: p for g, (p, auto) in gradebook_io.grade_cells(rel[nb]).items() if auto} for nb in (NB1, NB2)}
    tmpl = {nb: {g: t for g, _, t in cf.answer_cells(rel[nb])} for nb in (NB1, NB2, NB6)}

    def answers(nb, sid):
        return {g: t.replace("raise NotImplementedError()", f"return {sid!r}") + f"\n# {sid}" for g, t in tmpl[nb].items()}

    msgs = {"r1": (8, "正确。"),
            "r2": (4, _partial([(L2D, 2, True, ""), (L2M, 2, True, ""), (LB, 2, False, "Q 的形状 (2, 3, 4)：" + WHY),
                                (LBM, 2, False, "Q 的形状 (4, 4, 6)、掩码 (4, 1, 6)：" + WHY)])),
            "r3": (4, _partial([(L2D, 2, False, "Q 的形状 (3, 5)：" + WHY),
                                (L2M, 2, False, "Q 的形状 (7, 7)、掩码 (7, 7)：" + WHY), (LB, 2, True, ""), (LBM, 2, True, "")])),
            "b1": (0, "Q 的形状 (3, 5)：" + BLANK_SA), "b2": (0, "Q 的形状 (3, 5)：" + BLANK_SA),
            "b3": (0, "Q 的形状 (7, 7)、掩码 (7, 7)：" + BLANK_SA)}
    students = {}
    for sid, (sa, msg) in msgs.items():
        blank = sid.startswith("b")
        s1 = dict(full[NB1], **{SA: sa})
        students[sid] = {NB1: {"answers": {} if blank else answers(NB1, sid), "messages": {SA: msg},
                               "scores": {g: (0 if blank else p) for g, p in s1.items()} if blank else s1},
                         NB2: {"answers": {} if blank else answers(NB2, sid),
                               "scores": {g: (0 if blank else p) for g, p in full[NB2].items()}}}
    students["r1"][NB6] = {"answers": {"ex10a_answer": "两个头就够了。"}}
    course = cf.write_class(tmp_path_factory.mktemp("review") / "course", REPO, students, notebooks=[NB1, NB2, NB3, NB6])
    result = cr.run(course, "exercises", quiet=True)
    items = {(r["notebook"], r["cell"], r["part"]): r for r in _read_csv(result["dir"] / "items.csv")}
    page = (result["dir"] / "index.html").read_text(encoding="utf-8")
    return {"course": course, "result": result, "items": items, "page": page}


def test_blank_answers_are_left_out_of_the_hint_ranking(review):
    """三个空白的学生得到“还没有作答”，两个答错的学生得到真正的原因：排第一的是原因（只算答错的两人），页面这样说。"""
    r = review["items"][(NB1, SA, "")]
    assert r["top_hint"] == WHY and r["top_hint_count"] == "2"
    assert float(r["blank_rate"]) == pytest.approx(3 / 6, abs=1e-3)  # 没作答的比例单独列出
    assert not any("还没有作答" in row["top_hint"] for row in review["items"].values())
    page = review["page"]
    assert f"答错的学生中最常见的说明：{WHY}（2 / 2 人）" in page
    assert "得到这条说明：" + BLANK_SA not in page and "还没有作答（仍是" not in page


def test_hints_are_grouped_by_cause_without_the_input_prefix(review):
    """同一个原因、开头的输入不同（“Q 的形状 (3, 5)”/“(7, 7)、掩码 …”）：归成一类，按人数（r2 两条说明只算一人）。"""
    it = next(i for i in review["result"]["items"] if i.cell == SA and not i.part)
    assert it.hints == [(WHY, 2)]
    part = next(i for i in review["result"]["items"] if i.cell == SA and i.part == L2D)
    assert part.hints == [(WHY, 1)]  # 只有 r3 在这一部分错；空白的不算
    assert ca.hint_key("第 1 组（n = 8、d = 8）：k_a 的权重只有 0.5。")[0] == ca.hint_key("第 2 组（n = 4、d = 2）：k_a 的权重只有 0.7。")[0]
    assert ca.hint_key("monte_carlo_variance(32, 0.64, 20000, seed=7)：方差不对")[0] == "方差不对"
    assert ca.hint_key("scores_1 不对：得到 [[1.]]。")[0].startswith("scores_# 不对：")  # 不是输入：不去掉
    assert ca.is_blank_hint("第 2 组（因果掩码）：" + BLANK_SA) and not ca.is_blank_hint(WHY)


def test_written_answers_separate_ta_grading_from_automatic_zeros(review):
    """文字题：没作答的三人自动 0 分，助教一份也没评：已评 0，平均、难度、零分率都空着。"""
    r = review["items"][(NB2, "ex3_proof", "")]
    assert (r["graded"], r["auto_zero"], r["pending"]) == ("0", "3", "3")
    assert r["mean_points"] == r["difficulty"] == r["zero_rate"] == r["full_rate"] == ""
    page = review["page"]
    assert "助教已评 0，没作答自动 0 分 3" in page and "助教还没有评分" in page and "0 分 × 3" not in page


def test_notebooks_nobody_submitted_are_left_out(review, tmp_path):
    """03、04、05 谁也没交：不进表、不算进总分的满分，页面说明哪些没列；--all-notebooks 时照样列出。"""
    res = review["result"]
    assert res["data"].notebooks == [NB1, NB2, NB6] and res["data"].left_out == [NB3]
    summ = res["summary"]
    assert set(summ["per_notebook"]) == {NB1, NB2, NB6}
    assert not any(nb == NB3 for nb, _, _ in review["items"])
    nb_max = {nb: sum(p for p, _ in res["data"].cells[nb].values()) for nb in (NB1, NB2, NB6)}
    assert summ["max_total"] == pytest.approx(sum(nb_max.values()))
    assert "全班都没有交的 notebook 不在这份报告里" in review["page"] and NB3 in review["page"]
    assert f"<h3>{NB3}</h3>" not in review["page"]
    # 缺交的 notebook：只数报告里的（06 只有 r1 交了：5 个）
    assert sum(v["missing"] for v in summ["per_notebook"].values()) == 5
    course = tmp_path / "course"
    shutil.copytree(review["course"], course, ignore=shutil.ignore_patterns("reports"))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "lib.grading", "report", "exercises", "--all-notebooks", "--quiet"],
                       cwd=course, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert any(r["notebook"] == NB3 for r in _read_csv(course / "reports" / "exercises" / "items.csv"))


def test_labels_and_the_blank_note_read_well(review):
    """“需要几个头？：文字题”没有“？：”；“没作答多说明没时间……”只说一次。"""
    page = review["page"]
    assert "需要几个头？（文字题）" in page and "？：" not in page
    assert page.count("没作答多说明没时间或没开始") == 1
    assert len(page.split('<section id="reteach">')[1].split("</ol>")[0].split("<li>")) - 1 == 5


def test_method_section_states_the_common_fingerprint_limit(small):
    page = (small["result"]["dir"] / "index.html").read_text(encoding="utf-8")
    assert "超过 10%（至少 3 个）学生都有的指纹" in page and "common_limit" not in page
    assert cs.common_limit(20) == 3 and cs.common_limit(200) == 20


PROOF = ("设 $P$ 是置换矩阵，$A(X) = \\mathrm{softmax}(XW_Q (XW_K)^T / \\sqrt{d_k})\\, XW_V$。\n\n"
         "那么 $A(PX) = P\\,A(X)$：因为 Softmax 按行做，置换行不改变每一行内部的 Attention 权重；"
         "再乘 $PXW_V$ 时行的顺序和 $P$ 一致，所以 Self-Attention 对输入的 Permutation 是等变的。")


@pytest.fixture(scope="module")
def text_pair(tmp_path_factory):
    """notebook 02：六个诚实的学生，t1 和 t2 的文字题和代码一样（t2 改了变量名）。"""
    import random
    rel = {NB2: cf.release_of(REPO)[NB2]}
    rng = random.Random(3)
    students = {f"h{i}": {NB2: {"answers": {g: cf.honest_answer(g, k, t, rng) for g, k, t in cf.answer_cells(rel[NB2])}}}
                for i in range(6)}
    orig = {g: cf.honest_answer(g, k, t, rng) for g, k, t in cf.answer_cells(rel[NB2])}
    orig["ex3_proof"] = PROOF
    students["t1"] = {NB2: {"answers": orig}}
    students["t2"] = {NB2: {"answers": {g: (v if g == "ex3_proof" else cf.rename_and_comment(v)) for g, v in orig.items()}}}
    course = cf.write_class(tmp_path_factory.mktemp("textpair") / "course", REPO, students, notebooks=[NB2])
    return cr.run(course, "exercises", quiet=True)


def test_similarity_panel_shows_the_original_text(text_pair):
    import html as _html
    import re as _re
    p = text_pair["pairs"][NB2][0]
    assert {p.a, p.b} == {"t1", "t2"} and p.flagged
    shown = _html.unescape(_re.sub(r"<[^>]+>", "", p.html))
    assert "$A(PX) = P\\,A(X)$" in shown and "Self-Attention" in shown and "Permutation" in shown
    assert "a(px)" not in shown and "self-attention" not in shown
    assert "<mark>" in p.html.split("文字题")[1]


def test_fingerprints_stay_inside_each_cell_and_panels_name_the_cells(text_pair):
    a = "def f(x):\n    y = np.exp(x - x.max(axis=-1, keepdims=True))\n    return y / y.sum(axis=-1, keepdims=True)\n"
    b = "def g(q, k):\n    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])\n    return s\n"
    with cs._StableHashes():
        both = cs.code_fingerprint([("c1", a), ("c2", b)])[0]
        swapped = cs.code_fingerprint([("c2", b), ("c1", a)])[0]
        alone = cs.code_fingerprint([("c1", a)])[0].hashes | cs.code_fingerprint([("c2", b)])[0].hashes
        t_both = cs.text_fingerprint([("p", PROOF), ("q", "另一段文字：Q 和 K 的点积除以根号 d_k，方差变成 1。")])[2]
        t_alone = (cs.text_fingerprint([("p", PROOF)])[2]
                   | cs.text_fingerprint([("q", "另一段文字：Q 和 K 的点积除以根号 d_k，方差变成 1。")])[2])
    assert both.hashes == alone == swapped.hashes  # 没有跨两个单元格的指纹；单元格的先后不影响
    assert t_both == t_alone
    p = text_pair["pairs"][NB2][0]
    assert "单元格 <code>ex3_proof</code>" in p.html
    code_gids = [g for g, k, _ in cf.answer_cells(cf.release_of(REPO)[NB2]) if k == "code"]
    assert sum(f"单元格 <code>{g}</code>" in p.html for g in code_gids) >= 2
