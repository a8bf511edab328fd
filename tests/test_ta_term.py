"""助教的一个学期（issue 21，以及 issue 20 §6）：分批评分、教务系统的名单、中文和 macOS 的文件名、损坏的下载、
课程的时区、Ctrl-C，和“没交不是交了得 0 分”。

下载和名单都按平台自己的格式造（tests/lms_exports.py，出处见 lib/grading/lms.py 的注释）：Canvas 的
submissions.zip、Moodle 的评分工作表（默认只显示邮箱这个身份字段；中文界面的表头来自 mod/assign 的 zh_cn
语言包）、Blackboard 没有回执的尝试、Gradescope 的 submission_metadata.yml、教务系统的 Excel 名单
（合并单元格的标题行、序号列）、macOS 的 Archive Utility 写的 NFD 文件名。
快速测试只导入、读名单、填表；标记 slow 的执行真实的 notebook 02。
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
import unicodedata
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grading_fixtures as gf  # noqa: E402
import lms_exports as lx  # noqa: E402

from lib.grading import collect, export, gradebook_io, lms, pipeline, roster  # noqa: E402
from lib.grading.__main__ import main  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = lx.NOTEBOOKS
nb_bytes, imported, graded, held = lx.nb_bytes, lx.imported, lx.graded, lx.held
NB = "02_scaling_and_equivariance"
NB1 = "01_attention_by_hand"
S0, S1, S2 = lx.STUDENTS
CST = lx.CST


def options(tmp_path, submissions, **kw) -> pipeline.Options:
    kw.setdefault("quiet", True)
    return pipeline.Options(assignment="exercises", submissions=Path(submissions), course_root=tmp_path, **kw)


@pytest.fixture(autouse=True)
def course_timezone():
    """每个测试开始时课程时区是默认的（有的测试会换）。"""
    lms.use_timezone(lms.course_timezone(REPO))
    yield
    lms.use_timezone(lms.course_timezone(REPO))


# ============================================================================ 1. 分批评分（导入这一层）
def test_a_new_download_adds_to_the_saved_state(tmp_path):
    """第一批 Canvas 下载两个人；第二批只有迟交的李娜和重交的王芳：三个人都在，王芳评新的那份；
    同一份下载再导入一次不重复；--fresh 从头开始。"""
    ws = tmp_path / ".grading" / "exercises"
    z1 = lx.canvas_zip(tmp_path / "dl1" / "submissions.zip", [
        lx.Upload(S0, f"{NB}.ipynb", nb_bytes("s0"), attachment=900010),
        lx.Upload(S1, f"{NB}.ipynb", nb_bytes("s1 first"), attachment=900011)])
    first = collect.gather(options(tmp_path, z1), NOTEBOOKS, ws)
    assert set(graded(first)) == {(str(S0.canvas_id), NB), (str(S1.canvas_id), NB)}
    # Canvas 的 zip 里只有每个学生最新的附件：第二次下载（截止以后）只剩重交的和迟交的
    z2 = lx.canvas_zip(tmp_path / "dl2" / "submissions.zip", [
        lx.Upload(S1, f"{NB}-1.ipynb", nb_bytes("s1 second"), attachment=900020),
        lx.Upload(S2, f"{NB}.ipynb", nb_bytes("s2 late"), attachment=900030, late=True),
        lx.Upload(S2, "报告.pdf", b"%PDF-1.4", attachment=900031)])
    second = collect.gather(options(tmp_path, z2), NOTEBOOKS, ws)
    g = graded(second)
    assert set(g) == {(str(S0.canvas_id), NB), (str(S1.canvas_id), NB), (str(S2.canvas_id), NB)}
    assert b"s0" in g[(str(S0.canvas_id), NB)].data and g[(str(S0.canvas_id), NB)].batch == 1
    assert b"s1 second" in g[(str(S1.canvas_id), NB)].data and g[(str(S1.canvas_id), NB)].batch == 2
    assert any("替换了之前下载（第 1 批）" in n for n in g[(str(S1.canvas_id), NB)].notes)
    assert g[(str(S2.canvas_id), NB)].late and "Canvas 标记为迟交" in g[(str(S2.canvas_id), NB)].late
    assert [it.src.endswith("报告.pdf") for it in held(second)] == [True]
    # 保存的副本就是合在一起的状态：feedback 和 export 读它
    again = collect.load_import(ws)
    assert set(graded(again)) == set(g) and [b["batch"] for b in again.batches] == [1, 2]
    # 同一个下载又导入一次：什么都不重复，隔离行也只一行
    third = collect.gather(options(tmp_path, z2), NOTEBOOKS, ws)
    assert set(graded(third)) == set(g) and len(held(third)) == 1
    assert len([it for it in third.items if it.reason is None]) == 3
    assert [b["batch"] for b in third.batches] == [1, 2]                       # 续跑不算新的一批
    fresh = collect.gather(options(tmp_path, z2, fresh=True), NOTEBOOKS, ws)
    assert set(graded(fresh)) == {(str(S1.canvas_id), NB), (str(S2.canvas_id), NB)}


def test_newest_attempt_wins_across_downloads_by_lms_time(tmp_path, capsys):
    """Blackboard 的尝试带时间：后下载的 zip 里若是较早的尝试（助教勾了“所有尝试”又只挑了一部分），评更新的那份。"""
    ws = tmp_path / ".grading" / "exercises"
    late_attempt = dt.datetime(2024, 3, 2, 1, 0, tzinfo=CST)
    early_attempt = dt.datetime(2024, 3, 1, 20, 0, tzinfo=CST)
    z1 = lx.blackboard_zip(tmp_path / "a.zip", [lx.Upload(S0, f"{NB}.ipynb", nb_bytes("new"), time=late_attempt)])
    z2 = lx.blackboard_zip(tmp_path / "b.zip", [lx.Upload(S0, f"{NB}.ipynb", nb_bytes("old"), time=early_attempt),
                                               lx.Upload(S1, f"{NB}.ipynb", nb_bytes("s1"), time=early_attempt)])
    collect.gather(options(tmp_path, z1), NOTEBOOKS, ws)
    imp = collect.gather(options(tmp_path, z2, quiet=False), NOTEBOOKS, ws)
    g = graded(imp)
    assert b"new" in g[(S0.username, NB)].data and set(g) == {(S0.username, NB), (S1.username, NB)}
    skipped = next(it for it in imp.items if it.skip and it.student_id == S0.username)
    assert "保留已经评过的新版本" in skipped.reason
    err = capsys.readouterr().err
    assert "这是第 2 次下载" in err and "--fresh" in err and "现在一共 2 份 notebook、2 名学生" in err


def test_an_earlier_roster_is_reused_and_lms_ids_are_mapped(tmp_path, capsys):
    """第一批没给名单（学生编号是 Canvas 的用户 ID），第二批给了 Canvas 成绩册：之前的也换成学号，不会一人两行。"""
    ws = tmp_path / ".grading" / "exercises"
    z1 = lx.canvas_zip(tmp_path / "1.zip", [lx.Upload(S0, f"{NB}.ipynb", nb_bytes("a"), attachment=900001)])
    collect.gather(options(tmp_path, z1), NOTEBOOKS, ws)
    gb = lx.canvas_gradebook(tmp_path / "gb.csv")
    z2 = lx.canvas_zip(tmp_path / "2.zip", [lx.Upload(S1, f"{NB}.ipynb", nb_bytes("b"), attachment=900002)])
    imp = collect.gather(options(tmp_path, z2, roster=gb), NOTEBOOKS, ws)
    assert set(graded(imp)) == {(S0.sid, NB), (S1.sid, NB)}
    z3 = lx.canvas_zip(tmp_path / "3.zip", [lx.Upload(S2, f"{NB}.ipynb", nb_bytes("c"), attachment=900003)])
    capsys.readouterr()
    imp = collect.gather(options(tmp_path, z3, quiet=False), NOTEBOOKS, ws)     # 不给名单：沿用上次的
    assert set(graded(imp)) == {(S0.sid, NB), (S1.sid, NB), (S2.sid, NB)}
    assert "沿用上次的名单" in capsys.readouterr().err


# ============================================================================ 2. 教务系统和 Excel 的名单
def test_jiaowu_xlsx_with_merged_title_row(tmp_path):
    path = lx.jiaowu_roster_xlsx(tmp_path / "学生名单.xlsx")
    r = roster.load(path)
    assert r.ids == [S0.sid, S1.sid, S2.sid]                                  # 不是序号 1、2、3
    assert r.id_column == "学号" and r.header_row == 3 and r.column_index == 2
    assert r.names[S1.sid] == S1.name
    assert "第 3 行是表头" in r.describe() and "学号列“学号”（第 2 列）" in r.describe()
    assert roster.load(path, id_column="学号").ids == r.ids                    # 以前说“没有这一列”
    # 下载是 “学号_姓名/” 文件夹：和名单对上，没有一个进隔离区
    z = lx.folders_zip(tmp_path / "作业.zip", [lx.Upload(S0, f"{NB}.ipynb", nb_bytes())])
    imp = imported(z, roster=r)
    assert set(graded(imp)) == {(S0.sid, NB)} and not held(imp)


@pytest.mark.parametrize("encoding", ["gbk", "utf-8"])
def test_csv_roster_with_title_row_has_no_phantom_student(tmp_path, encoding):
    r = roster.load(lx.jiaowu_roster_csv(tmp_path / "名单.csv", encoding=encoding))
    assert r.ids == [S0.sid, S1.sid, S2.sid] and "学号" not in r.ids and "序号" not in r.ids
    assert r.header_row == 2 and r.id_column == "学号"
    # 没有认得出的表头（只有一列学号、上面一行标题）：标题和表头词都不算学生
    plain = tmp_path / "ids.csv"
    plain.write_text("计科2101 名单\n学号\n" + "\n".join(s.sid for s in lx.STUDENTS) + "\n", encoding=encoding)
    assert roster.load(plain).ids == [S0.sid, S1.sid, S2.sid]


def test_moodle_worksheet_without_id_number_says_ids_are_emails(tmp_path):
    r = roster.load(lx.moodle_worksheet_email(tmp_path / "ws.csv"))
    assert r.kind == "Moodle 评分工作表" and r.ids == [s.email for s in lx.STUDENTS]
    assert "邮箱" in r.note and "ID number" in r.note and "学号" in r.note      # 怎么换成学号
    assert "邮箱" in r.describe()
    zh = roster.load(lx.moodle_worksheet_email(tmp_path / "ws_zh.csv", chinese=True))
    assert zh.lookup(str(S1.pid)) == S1.email and "邮箱" in zh.note           # 中文表头“标识符”“参与者 N”


# ============================================================================ 3. 文件名
def test_macos_nfd_names_are_normalised(tmp_path):
    zoe = lx.Student("2023010109", "Zoë Müller", "Zoë Müller", 50109, 123509, "zmuller")
    nfd = unicodedata.normalize("NFD", f"{zoe.sid}_{zoe.name}/{NB}.ipynb")
    assert nfd != unicodedata.normalize("NFC", nfd)
    z = lx.raw_zip(tmp_path / "mac.zip", [(nfd, nb_bytes()),
                                          ("__MACOSX/" + unicodedata.normalize("NFD", f"{zoe.sid}_{zoe.name}/._{NB}.ipynb"),
                                           b"\x00\x05\x16\x07")])
    imp = imported(z)
    assert set(graded(imp)) == {(zoe.sid, NB)} and graded(imp)[(zoe.sid, NB)].name == "Zoë Müller"
    # 名单里是 NFC 的姓名，下载里是 NFD 的：按姓名也对得上
    names = lx.roster_csv(tmp_path / "names.csv", ["学号", "姓名"], [["2023999999", "Zoë Müller"]])
    z2 = lx.moodle_zip(tmp_path / "m.zip", [lx.Upload(zoe, f"{NB}.ipynb", nb_bytes())])
    with zipfile.ZipFile(z2) as src:
        files = [(unicodedata.normalize("NFD", i.filename), src.read(i)) for i in src.infolist()]
    imp = imported(lx.raw_zip(tmp_path / "m_nfd.zip", files), roster=roster.load(names))
    assert set(graded(imp)) == {("2023999999", NB)}


def test_gbk_platform_zip_with_jiaowu_roster(tmp_path):
    """中文平台“打包下载”的 zip（GBK 文件名、没有 UTF-8 标记）+ 教务系统的 Excel 名单。"""
    z = lx.gbk_zip(tmp_path / "第7讲作业_打包下载.zip", [
        (f"第7讲作业/{S0.sid}_{S0.name}/{NB}.ipynb", nb_bytes("a")),
        (f"第7讲作业/{S1.name}（{S1.sid}）/{NB1}.ipynb", nb_bytes("b")),
        (f"第7讲作业/{S2.sid}_{S2.name}/实验报告.docx", b"PK\x03\x04 docx")])
    with zipfile.ZipFile(z) as zf:
        assert not any(i.flag_bits & 0x800 for i in zf.infolist())          # 确实是 GBK、没有标记
    imp = imported(z, roster=roster.load(lx.jiaowu_roster_xlsx(tmp_path / "名单.xlsx")))
    assert set(graded(imp)) == {(S0.sid, NB), (S1.sid, NB1)}
    docx = held(imp)[0]
    assert docx.student_id == S2.sid and docx.src.endswith("实验报告.docx") and "不是 .ipynb" in docx.reason


@pytest.mark.parametrize("path", [f"{S0.name}({S0.sid})/{NB}.ipynb", f"{S0.name}（{S0.sid}）/{NB}.ipynb",
                                  f"{S0.sid}_{S0.name}_{NB}.ipynb", f"{S0.sid}-{S0.name}-{NB}.ipynb",
                                  f"{S0.sid}_{S0.name}_{NB} (1).ipynb", f"{S0.name}_{S0.sid}_{NB}.ipynb"])
def test_name_and_id_folders_and_flat_files(tmp_path, path):
    z = lx.raw_zip(tmp_path / "dl.zip", [(path, nb_bytes()), (f"{S1.sid}_{S1.name}/{NB1}.ipynb", nb_bytes("x"))])
    imp = imported(z)
    assert imp.layout == "folders" and not held(imp)
    assert set(graded(imp)) == {(S0.sid, NB), (S1.sid, NB1)}


def test_blackboard_without_receipt_splits_underscore_usernames_by_roster(tmp_path):
    wang = lx.Student("2024002", "王芳", "Fang Wang", 50002, 123457, "wang_fang")
    z = lx.blackboard_zip_without_receipts(tmp_path / "gradebook_Exercises.zip", [
        lx.Upload(wang, f"{NB}.ipynb", nb_bytes()), lx.Upload(S0, f"{NB}.ipynb", nb_bytes("s0"))],
        title="Exercises_第7讲")
    gc = roster.load(lx.blackboard_gc(tmp_path / "gc.xls", students=[S0, wang]))
    imp = imported(z, roster=gc)
    assert set(graded(imp)) == {(wang.sid, NB), (S0.sid, NB)} and not held(imp)
    # 没有名单：只能按最后一段认（fang），并在 detail 里说明怎么办
    imp = imported(z)
    it = graded(imp)[("fang", NB)]
    assert any("没有回执" in n and "--roster" in n for n in it.notes)


# ============================================================================ 4. 损坏的下载
def test_one_damaged_member_is_quarantined_and_the_rest_graded(tmp_path):
    z = lx.canvas_zip(tmp_path / "submissions.zip", [
        lx.Upload(S0, f"{NB}.ipynb", nb_bytes("ok " * 200), attachment=900010),
        lx.Upload(S1, f"{NB}.ipynb", nb_bytes("broken " * 200), attachment=900011),
        lx.Upload(S2, f"{NB}.ipynb", nb_bytes("ok too " * 200), attachment=900012)])
    member = next(n for n in zipfile.ZipFile(z).namelist() if str(S1.canvas_id) in n)
    lx.damage_member(z, member)
    with pytest.raises(zipfile.BadZipFile):  # 确实坏了：zipfile 读它会出错
        zipfile.ZipFile(z).read(member)
    imp = imported(z)
    assert set(graded(imp)) == {(str(S0.canvas_id), NB), (str(S2.canvas_id), NB)}
    bad = held(imp)[0]
    assert bad.student_id == str(S1.canvas_id) and bad.notebook == NB and bad.damaged
    assert "损坏" in bad.reason and "重新下载" in bad.reason


@pytest.mark.parametrize("kind", ["truncated", "html", "empty"])
def test_truncated_download_or_error_page_says_download_again(tmp_path, kind, capsys):
    z = lx.canvas_zip(tmp_path / "full.zip", [lx.Upload(S0, f"{NB}.ipynb", nb_bytes("x" * 5000))])
    bad = tmp_path / "submissions.zip"
    if kind == "truncated":   # 浏览器下载到一半断了
        bad.write_bytes(z.read_bytes()[: len(z.read_bytes()) // 2])
    elif kind == "html":      # 登录过期时 LMS 返回的网页被存成了 .zip
        bad.write_text("<!DOCTYPE html><html><head><title>Canvas 登录</title></head><body>会话已过期</body></html>",
                       encoding="utf-8")
    else:
        bad.write_bytes(b"")
    with pytest.raises(collect.InputError, match="下载不完整，请重新下载"):
        imported(bad)


# ============================================================================ 5. 课程的时区
@pytest.fixture
def utc_machine(monkeypatch):
    """评分机器是 UTC 的服务器。"""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_due_and_lms_times_are_read_in_the_course_timezone(tmp_path, utc_machine):
    assert dt.datetime(2024, 3, 1, 12, 0).astimezone().utcoffset() == dt.timedelta(0)   # 机器真是 UTC
    due = collect.parse_due("2024-03-01 23:59")
    assert due == dt.datetime(2024, 3, 1, 23, 59, tzinfo=CST)                # 北京时间，不是服务器的 UTC
    assert collect.parse_due("2024-03-01T23:59-05:00").utcoffset() == dt.timedelta(hours=-5)  # 自带时区的照原样
    # Gradescope 的时间自带时区（+0800）：截止后 5 小时交的是迟交
    five_after = dt.datetime(2024, 3, 2, 4, 59, tzinfo=CST)
    z = lx.gradescope_zip(tmp_path / "gs.zip", [[lx.Upload(S0, f"{NB}.ipynb", nb_bytes(), time=five_after)]])
    it = graded(imported(z, due=due))[(S0.sid, NB)]
    assert it.late and "晚了 5 小时" in it.late and "2024-03-02 04:59" in it.late
    # Blackboard 文件名里的时间不带时区：是服务器（课程所在地）的当地时间
    z = lx.blackboard_zip(tmp_path / "bb.zip", [lx.Upload(S1, f"{NB}.ipynb", nb_bytes(), time=five_after)])
    it = graded(imported(z, due=due))[(S1.username, NB)]
    assert it.time == five_after and "晚了 5 小时" in it.late
    assert lms.show_time(due, zone=True) == "2024-03-01 23:59（Asia/Shanghai，UTC+08:00）"


def test_the_course_timezone_is_one_setting_in_pyproject(tmp_path, utc_machine):
    (tmp_path / "pyproject.toml").write_text('[tool.course]\nrepository = "x"\nref = "main"\n'
                                             'timezone = "America/New_York"\n', encoding="utf-8")
    lms.use_timezone(lms.course_timezone(tmp_path))
    assert collect.parse_due("2024-03-01 23:59").utcoffset() == dt.timedelta(hours=-5)
    assert lms.course_timezone(REPO).key == "Asia/Shanghai"                   # 本课程的设置
    (tmp_path / "pyproject.toml").write_text('[tool.course]\ntimezone = "Beijing"\n', encoding="utf-8")
    with pytest.raises(collect.InputError, match="不是时区名"):
        lms.course_timezone(tmp_path)


# ============================================================================ 7. 小问题
def test_gradescope_submitter_without_sid_is_keyed_by_email_with_a_note(tmp_path):
    z = lx.gradescope_zip(tmp_path / "gs.zip", [[lx.Upload(S0, f"{NB}.ipynb", nb_bytes())]])
    with zipfile.ZipFile(z) as src:
        files = [(i.filename, src.read(i)) for i in src.infolist()]
    files = [(n, d.replace(f"    :sid: '{S0.sid}'\n".encode(), b"    :sid:\n") if n.endswith(".yml") else d)
             for n, d in files]
    imp = imported(lx.raw_zip(tmp_path / "nosid.zip", files))
    it = graded(imp)[(S0.email, NB)]
    assert any("没有 SID" in n and "邮箱" in n for n in it.notes)


def test_chinese_moodle_worksheet_gets_comments_in_its_own_column(tmp_path):
    path = lx.moodle_worksheet_email(tmp_path / "评分工作表.csv", chinese=True)
    ws = roster.read_table(path)
    st = export.Students({str(S0.pid): export.Result(str(S0.pid), {NB: 10, NB1: 0}, 10, 0, set())},
                         collect.Imported([collect.Item(f"{NB}.ipynb", b"", student_id=str(S0.pid), notebook=NB)],
                                          "moodle", "Moodle"))
    done = export.fill_moodle(ws, st, 20, True, [NB1, NB], [])
    assert done == {str(S0.pid)} and ws.header == lx.read_rows(path)[0]       # 没有新加英文列
    row = next(r for r in ws.rows if r[0] == f"参与者 {S0.pid}")
    assert row[4] == "50.00" and f"{NB}：10 分" in row[9] and f"{NB1}：未交" in row[9]


def test_wrong_directory_and_unknown_assignment_say_what_is_wrong(tmp_path, capsys, monkeypatch):
    sub = tmp_path / "course" / "notebooks"
    sub.mkdir(parents=True)
    (tmp_path / "course" / "nbgrader_config.py").write_text("c = get_config()\n")
    monkeypatch.chdir(sub)
    for argv in (["feedback", "exercises"], ["export", "exercises", "--lms", "csv"],
                 ["grade", "exercises", "--submissions", "x.zip"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "不是课程根目录" in err and str(tmp_path / "course") in err and "请先运行 grade" not in err
    monkeypatch.chdir(REPO)
    assert main(["feedback", "exercize"]) == 2
    assert "没有作业 'exercize'" in capsys.readouterr().err and "exercises" in capsys.readouterr().err + "exercises"


def test_a_killed_runs_temporary_folder_is_cleaned(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / (pipeline.SCRATCH_PREFIX + "killed")
    (stale / "s0" / "work").mkdir(parents=True)
    (stale / "owner.pid").write_text(str(dead.pid))
    alive = tmp_path / (pipeline.SCRATCH_PREFIX + "running")
    alive.mkdir()
    (alive / "owner.pid").write_text(str(os.getpid()))
    assert pipeline.clean_stale_scratch(tmp_path) == 1
    assert not stale.exists() and alive.exists()


@pytest.mark.filterwarnings("ignore:.*not in session")
def test_an_old_ta_comment_on_a_changed_answer_is_marked(tmp_path):
    from nbgrader.api import Gradebook
    rel = gf.load(REPO / "release" / "exercises" / f"{NB}.ipynb")
    db = "sqlite:///" + str(tmp_path / "gradebook.db")
    gradebook_io.ensure_assignment(db, "exercises", {NB: rel})
    auto = {g: p for g, (p, a) in gradebook_io.grade_cells(rel).items() if a}
    with Gradebook(db) as gb:
        gradebook_io.write_scores(gb, "exercises", "s1", NB, auto, set())
        c = gb.find_comment("ex3_proof", NB, "exercises", "s1")
        c.manual_comment = "第二步少了转置。"                                  # formgrader 里写的评语
        gb.db.commit()
        w = gradebook_io.write_scores(gb, "exercises", "s1", NB, auto, set(), changed={"ex3_proof"})
        c = gb.find_comment("ex3_proof", NB, "exercises", "s1")
        assert c.manual_comment == gradebook_io.OLD_COMMENT_MARK + "第二步少了转置。"
        assert any("评语" in n for n in w.notes)
        gradebook_io.write_scores(gb, "exercises", "s1", NB, auto, set(), changed={"ex3_proof"})  # 不重复加标记
        assert gb.find_comment("ex3_proof", NB, "exercises", "s1").manual_comment.count("之前提交") == 1
        gradebook_io.write_scores(gb, "exercises", "s1", NB, auto, set(), changed=set())
        assert gb.find_comment("ex3_proof", NB, "exercises", "s1").manual_comment.startswith("【")


# ============================================================================ issue 20 §6：没交不是 0 分（导出这一层）
def test_csv_export_marks_never_submitted_notebooks(tmp_path):
    items = [collect.Item(f"{S0.sid}/{NB}.ipynb", b"", student_id=S0.sid, notebook=NB)]
    st = export.Students({S0.sid: export.Result(S0.sid, {NB: 7.0, NB1: 0.0}, 7.0, 0, set())},
                         collect.Imported(items, "folders", "学号文件夹"))
    table, _ = export.plain_tables("csv", st, [NB1, NB], 20, "exercises", [])
    row = dict(zip(table.header, table.rows[0]))
    assert row[NB1] == "未交" and row[NB] == "7" and row["total"] == "7" and "未交 1 个 notebook" in row["status"]


def test_grades_csv_rows_for_never_submitted_notebooks():
    rows = [pipeline.Row(S0.sid, NB, 7.0, 20.0, "ok", ""),
            pipeline.Row(S1.sid, NB1, None, None, "quarantined", "坏 JSON")]
    extra = pipeline.missing_rows(rows, None, [NB1, NB])
    assert [(r.student_id, r.notebook, r.score, r.status) for r in extra] == [(S0.sid, NB1, None, "missing")]
    extra = pipeline.missing_rows(rows, {S1.sid, S2.sid}, [NB1, NB])
    by = {(r.student_id, r.notebook): r for r in extra}
    assert set(by) == {(S0.sid, NB1), (S1.sid, NB), (S2.sid, NB1), (S2.sid, NB)}   # (S1, NB1) 只有 quarantined 那一行
    assert all(r.score is None for r in extra) and "隔离区" in by[(S1.sid, NB)].detail
    text = pipeline.summary(rows + extra, 1.0, True)
    assert "没交的 notebook：4 个（3 名学生）" in text and "不是 0 分" in text


# ============================================================================ 完整往返（执行真实的 notebook 02）
def answered_02(written: str, blank: bool = False) -> bytes:
    rel = gf.load(REPO / "release" / "exercises" / f"{NB}.ipynb")
    nb = rel if blank else gf.answered(rel, gf.load(REPO / "solutions" / "exercises" / f"{NB}.ipynb"))
    for c in nb["cells"]:
        if gf.gid(c) == "ex3_proof":
            c["source"] = written
    return gf.dump(nb)


GRADE = ["grade", "exercises", "--jobs", "2", "--quiet", "--submissions"]


@pytest.fixture
def course(tmp_path):
    c = gf.copy_course(REPO, tmp_path / "course")
    cwd = os.getcwd()
    os.chdir(c)
    yield c
    os.chdir(cwd)


def put(course: Path, student: str, score: float) -> None:
    from nbgrader.api import Gradebook
    with Gradebook("sqlite:///" + str(course / "gradebook.db")) as gb:
        grade = gb.find_grade("ex3_proof", NB, "exercises", student)
        grade.manual_score = score
        grade.needs_manual_grade = False
        gb.db.commit()


@pytest.mark.slow
def test_round_trip_in_batches_keeps_everyone(course, tmp_path, capsys):
    """Moodle：第一批两个人（一人人工评过分），第二批只有迟交的李娜（zip 里还有一个坏掉的文件）：grades.csv、
    反馈、导出、反馈包都包括三个人；没交的 notebook 是“未交”，不是 0；交了但下载坏了的是“无法评分”。"""
    ws = lx.moodle_worksheet(tmp_path / "worksheet.csv")
    z1 = lx.moodle_zip(tmp_path / "batch1.zip", [lx.Upload(S0, f"{NB}.ipynb", answered_02("张伟的证明")),
                                                 lx.Upload(S1, f"{NB}.ipynb", answered_02("王芳的证明"))])
    assert main(GRADE + [str(z1), "--roster", str(ws)]) == 0
    put(course, S0.sid, 3.0)
    late = dt.datetime(2024, 3, 3, 10, 0, tzinfo=CST)
    z2 = lx.moodle_zip(tmp_path / "batch2.zip", [lx.Upload(S2, f"{NB}.ipynb", answered_02("李娜的证明"), time=late),
                                                 lx.Upload(S2, f"{NB1}.ipynb", b'{"cells": [' + b"x" * 400 + b"]}",
                                                           time=late)])
    lx.damage_member(z2, next(n for n in zipfile.ZipFile(z2).namelist() if n.endswith(f"{NB1}.ipynb")))
    assert main(GRADE + [str(z2)]) == 0                                       # 坏了一个文件不算失败
    rows = {(r["student_id"], r["notebook"]): r for r in gf.read_grades(course)}
    for s in (S0, S1, S2):
        assert float(rows[(s.sid, NB)]["score"]) > 0, rows[(s.sid, NB)]
        assert (course / "feedback" / s.sid / "exercises" / f"{NB}.html").exists()
    assert "待人工评分" in rows[(S1.sid, NB)]["detail"]
    damaged = [r for r in rows.values() if r["status"] == "quarantined"]
    assert len(damaged) == 1 and damaged[0]["student_id"] == S2.sid and "重新下载" in damaged[0]["detail"]
    never = rows[(S0.sid, NB1)]
    assert never["status"] == "missing" and never["score"] == ""               # 不是 0
    capsys.readouterr()
    assert main(["feedback", "exercises"]) == 0
    cap = capsys.readouterr()
    assert "重用上次 grade 导入的 3 份" in cap.err
    assert "反馈完成" in cap.out and "评分完成" not in cap.out                   # feedback 不说“评分”
    assert re.search(r"待人工评分：\d+ 个单元格（2 份提交）", cap.out), cap.out   # 王芳、李娜的证明题
    assert len([r for r in gf.read_grades(course) if r["status"] != "missing"]) == 4
    out, fb = tmp_path / "filled.csv", tmp_path / "feedback.zip"
    assert main(["export", "exercises", "--lms", "moodle", "--template", str(ws), "-o", str(out), "--comments",
                 "--feedback-zip", str(fb)]) == 0
    said = capsys.readouterr().out
    assert "3 名学生的成绩" in said and "待人工评分" in said and S1.sid in said
    filled = {r[0]: r for r in lx.read_rows(out)[1:]}
    assert all(filled[f"Participant {s.pid}"][5] for s in (S0, S1, S2))
    assert f"{NB1}：未交" in filled[f"Participant {S0.pid}"][10]
    with zipfile.ZipFile(fb) as zf:
        assert len(zf.namelist()) == 3
    assert main(["export", "exercises", "--lms", "csv", "-o", str(tmp_path / "all.csv")]) == 0
    table = lx.read_rows(tmp_path / "all.csv")
    by = {r[0]: dict(zip(table[0], r)) for r in table[1:]}
    assert by[S0.sid][NB1] == "未交" and float(by[S0.sid][NB]) > 0
    assert by[S2.sid][NB1] == "无法评分" and "重新下载" in by[S2.sid]["status"]  # 交了、下载坏了：不是“未交”


@pytest.mark.slow
def test_ctrl_c_stops_quickly_keeps_what_was_finished_and_continues(course, tmp_path):
    """真实的 SIGINT 发给真实的评分子进程：几秒内结束（沙箱都没了），评完的留在 grades.csv 里，再运行接着评。"""
    quick = answered_02("证明")
    slow = gf.dump(gf.append_cell(gf.load(REPO / "release" / "exercises" / f"{NB}.ipynb"),
                                  "import time\nfor _ in range(600):\n    time.sleep(0.1)"))
    z = lx.canvas_zip(tmp_path / "submissions.zip",
                      [lx.Upload(S0, f"{NB}.ipynb", quick, attachment=900001)]
                      + [lx.Upload(lx.Student(f"20249{k:02d}", "同学", f"Stu Dent{k}", 51000 + k, 1, f"s{k}"),
                                   f"{NB}.ipynb", slow, attachment=900100 + k) for k in range(4)])
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(os.environ, PYTHONPATH=str(course), OMP_NUM_THREADS="1", TMPDIR=str(tmpdir))
    cmd = [sys.executable, "-m", "lib.grading", "grade", "exercises", "--jobs", "1", "--timeout", "300",
           "--submissions", str(z)]
    p = subprocess.Popen(cmd, cwd=course, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state = course / ".grading" / "exercises" / "state"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not list(state.glob(f"{S0.canvas_id}__*.json")):
        assert p.poll() is None, p.communicate()
        time.sleep(0.2)
    assert list(state.glob(f"{S0.canvas_id}__*.json")), "第一份没有评完"
    time.sleep(2)                                                             # 这时一份慢的正在沙箱里跑
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    stopped = time.monotonic() - t0
    print(f"Ctrl-C 到退出：{stopped:.1f} 秒")
    assert p.returncode == 130, err
    assert stopped < 15, f"Ctrl-C 之后 {stopped:.1f} 秒才结束（机器忙）"
    rows = {(r["student_id"], r["notebook"]): r for r in gf.read_grades(course)}
    statuses = {k: (r["status"], r["detail"][:200]) for k, r in rows.items()}
    assert "再运行同一个命令会接着评" in err and "已中断：评完的 1 份已经保存" in err and "Traceback" not in err, \
        (err, statuses)
    assert float(rows[(str(S0.canvas_id), NB)]["score"]) > 0
    assert sum(r["status"] == "interrupted" for r in rows.values()) == 4
    assert all(r["score"] == "" for r in rows.values() if r["status"] == "interrupted")
    alive = [d for d in os.listdir("/proc") if d.isdigit() and str(tmpdir) in _cmdline(d)]
    assert not alive, "沙箱里的进程还活着"
    assert not [d for d in tmpdir.iterdir() if d.name.startswith(pipeline.SCRATCH_PREFIX)]
    # 再运行（同样的设置，慢的不要了）：第一份不再执行，直接复用存下的执行结果
    before = {f.name: f.stat().st_mtime_ns for f in state.glob("*.json")}
    z2 = lx.canvas_zip(tmp_path / "again.zip", [lx.Upload(S0, f"{NB}.ipynb", quick, attachment=900001)])
    assert main(["grade", "exercises", "--quiet", "--fresh", "--timeout", "300", "--submissions", str(z2)]) == 0
    assert {f.name: f.stat().st_mtime_ns for f in state.glob("*.json")} == before


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace") + \
            Path(f"/proc/{pid}/environ").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


# ============================================================================ issue 21 第二轮：又一个助教的一个学期
def _ta_zip(path: Path, files: list[tuple[str, bytes, tuple]]) -> Path:
    """自己收作业的打包（学号_姓名 文件夹，没有 LMS 的提交时间）：zip 里每个文件带着它的修改时间。"""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data, when in files:
            info = zipfile.ZipInfo(name, date_time=when)
            info.flag_bits |= 0x800
            zf.writestr(info, data)
    return path


def test_an_older_download_never_rolls_back_a_resubmission(tmp_path, capsys):
    """第 1 批、第 2 批（张伟 10-22 重交）之后又把第 1 批的 zip 评了一次：评的仍是重交的那份（zip 里的文件时间
    说明它更新），横幅说实话，不说“换成了更新的版本”。"""
    ws = tmp_path / ".grading" / "exercises"
    d0 = f"{S0.sid}_{S0.name}"
    z1 = _ta_zip(tmp_path / "第1批.zip", [(f"{d0}/{NB}.ipynb", nb_bytes("first"), (2025, 10, 20, 20, 0, 0)),
                                        (f"{S1.sid}_{S1.name}/{NB}.ipynb", nb_bytes("s1"), (2025, 10, 20, 21, 0, 0))])
    z2 = _ta_zip(tmp_path / "重交.zip", [(f"{d0}/{NB}.ipynb", nb_bytes("resubmitted"), (2025, 10, 22, 9, 30, 0))])
    collect.gather(options(tmp_path, z1), NOTEBOOKS, ws)
    second = collect.gather(options(tmp_path, z2, quiet=False), NOTEBOOKS, ws)
    assert b"resubmitted" in graded(second)[(S0.sid, NB)].data
    assert "1 份换成了这次下载里更新的版本" in capsys.readouterr().err
    third = collect.gather(options(tmp_path, z1, quiet=False), NOTEBOOKS, ws)
    err = capsys.readouterr().err
    g = graded(third)
    assert b"resubmitted" in g[(S0.sid, NB)].data and b"s1" in g[(S1.sid, NB)].data
    assert "这次下载里的是旧版本，保留已经评过的新版本" in err and "换成了这次下载里更新的版本" not in err
    old = next(it for it in third.items if it.skip and it.student_id == S0.sid)
    assert "这次下载里的是旧版本" in old.reason and "2025-10-20" in old.reason
    # 存下的副本里也是新的那份（feedback、export 从副本出发）
    assert b"resubmitted" in graded(collect.load_import(ws))[(S0.sid, NB)].data


def test_gbk_question_mark_names_keep_the_plain_id(tmp_path):
    """中文 Windows 把 GBK 里没有的 ë 存成 “?”：`Zo? Müller(2025005)` 里的学号照样认得出。"""
    zoe = lx.Student("2025005", "Zoë Müller", "Zoe Muller", 50105, 123505, "zmuller")
    z = lx.raw_zip(tmp_path / "dl.zip", [(f"Zo? Müller({zoe.sid})/{NB}.ipynb", nb_bytes("z")),
                                         (f"Zo? Müller_{zoe.sid}/{NB1}.ipynb", b"{not json"),
                                         (f"{S0.sid}_{S0.name}/{NB}.ipynb", nb_bytes())])
    imp = imported(z)
    assert set(graded(imp)) == {(zoe.sid, NB), (S0.sid, NB)}
    bad = held(imp)[0]
    assert bad.student_id == zoe.sid and bad.notebook == NB1


def test_one_row_per_student_and_notebook_and_rows_point_at_the_quarantine():
    """坏了的文件（知道学生和 notebook）只有一行 quarantined，不再另加一行 missing；同一学生别的 notebook
    若隔离的文件认不出是哪个 notebook，missing 行指向隔离区，不说“没有提交”。"""
    rows = [pipeline.Row(S0.sid, NB, 7.0, 20.0, "ok", ""),
            pipeline.Row(S1.sid, NB1, None, None, "quarantined", "下载的 zip 里这个文件损坏了"),
            pipeline.Row(S2.sid, "", None, None, "quarantined", "notebook 名称不对：作业.ipynb")]
    extra = pipeline.missing_rows(rows, {S0.sid, S1.sid, S2.sid}, [NB1, NB])
    by = {(r.student_id, r.notebook): r for r in extra}
    assert (S1.sid, NB1) not in by and set(by) == {(S0.sid, NB1), (S1.sid, NB), (S2.sid, NB1), (S2.sid, NB)}
    assert "隔离区" in by[(S2.sid, NB)].detail and "隔离区" in by[(S1.sid, NB)].detail
    assert by[(S0.sid, NB1)].detail.startswith("没有提交这个 notebook")


def test_unknown_students_quarantine_row_names_the_notebook(tmp_path):
    z = lx.raw_zip(tmp_path / "dl.zip", [(f"2099999_赵六/{NB1}.ipynb", nb_bytes()),
                                         (f"{S0.sid}_{S0.name}/{NB}.ipynb", nb_bytes())])
    imp = imported(z, roster=roster.Roster.from_ids([S0.sid, S1.sid]))
    bad = held(imp)[0]
    assert "名单里没有学生 2099999" in bad.reason and bad.notebook == NB1


def test_banner_counts_only_this_downloads_quarantine_and_stale_rows_go(tmp_path, capsys):
    """第 1 批：王芳的 notebook 名字不对（隔离）、一个 docx；第 2 批：王芳交了正确命名的文件。
    第 2 批的横幅只数这次隔离的（0 个），王芳过时的隔离行不再列出。"""
    ws = tmp_path / ".grading" / "exercises"
    z1 = lx.raw_zip(tmp_path / "b1.zip", [(f"{S0.sid}_{S0.name}/{NB}.ipynb", nb_bytes()),
                                          (f"{S1.sid}_{S1.name}/作业七.ipynb", nb_bytes("wrong name")),
                                          (f"{S2.sid}_{S2.name}/报告.docx", b"PK docx")])
    first = collect.gather(options(tmp_path, z1, quiet=False), NOTEBOOKS, ws)
    assert "隔离 2 个文件" in capsys.readouterr().err and len(held(first)) == 2
    z2 = lx.raw_zip(tmp_path / "b2.zip", [(f"{S1.sid}_{S1.name}/{NB}.ipynb", nb_bytes("right name"))])
    second = collect.gather(options(tmp_path, z2, quiet=False), NOTEBOOKS, ws)
    err = capsys.readouterr().err
    assert "隔离 0 个文件" in err and "已由这次正确命名的提交取代" in err
    assert [it.student_id for it in held(second)] == [S2.sid]            # 李娜的 docx 还在，王芳的过时行没了
    assert any("作业七.ipynb" in n for n in graded(second)[(S1.sid, NB)].notes)


def _moodle_sheet(path: Path, comments_header: str | None) -> Path:
    """中文界面的 Moodle 评分工作表（zh_cn 语言包，Moodle 3.11/4.5：评语列是“反馈意见”）；None：作业没开评语。"""
    header = ["标识符", "全名", "学号", "电子邮件地址", "状态", "成绩", "最高分", "允许更改成绩",
              "上次修改（作业）", "上次修改（评分）"] + ([comments_header] if comments_header else [])
    rows = [header] + [[f"参与人{s.pid}", s.name, s.sid, s.email, "已提交请评分", "", "100.00", "是",
                        "2025年10月20日 星期一 21:05", "-"] + ([""] if comments_header else []) for s in lx.STUDENTS]
    return lx._write_csv(path, rows, bom=True)


def _students_for_moodle(layout: str = "moodle") -> export.Students:
    return export.Students({str(S0.pid): export.Result(str(S0.pid), {NB: 10, NB1: 0}, 10, 0, set())},
                           collect.Imported([collect.Item(f"{NB}.ipynb", b"", student_id=str(S0.pid), notebook=NB,
                                                          layout=layout)], layout, "Moodle"))


def test_zh_cn_moodle_comments_column_is_fankui_yijian(tmp_path):
    path = _moodle_sheet(tmp_path / "评分工作表.csv", "反馈意见")
    ws = roster.read_table(path)
    notes: list = []
    assert export.fill_moodle(ws, _students_for_moodle(), 20, True, [NB1, NB], notes) == {str(S0.pid)}
    assert ws.header == lx.read_rows(path)[0] and not any("评语" in n for n in notes)                # 写进“反馈意见”，不新加一列
    row = next(r for r in ws.rows if r[0] == f"参与人{S0.pid}")
    assert row[5] == "50.00" and f"{NB}：10 分" in row[10]
    # 作业没开评语：工作表里没有这一列。不新加 Moodle 不会导入的列，说清楚怎么办
    path = _moodle_sheet(tmp_path / "没有评语.csv", None)
    ws = roster.read_table(path)
    assert export.fill_moodle(ws, _students_for_moodle(), 20, True, [NB1, NB], notes) == {str(S0.pid)}
    assert ws.header == lx.read_rows(path)[0] and all(len(r) <= len(ws.header) for r in ws.rows)
    note = next(n for n in notes if "评语" in n)
    assert "没有写评语" in note and "重新下载评分工作表" in note and "新加" not in note


def test_feedback_zip_from_another_platform_fails_before_writing(tmp_path, monkeypatch):
    """提交是学号文件夹收的，成绩交到 Moodle：--feedback-zip 在写任何文件之前就说不行、怎么办。"""
    st = _students_for_moodle("folders")
    ws = tmp_path / ".grading" / "exercises"
    ws.mkdir(parents=True)
    collect.save_import(ws, st.imported)
    monkeypatch.setattr(export, "gradebook_results", lambda course, a: (20.0, [NB1, NB], st.results,
                                                                       {NB1: 10.0, NB: 10.0}))
    out = tmp_path / "exports" / "moodle.csv"
    with pytest.raises(collect.InputError, match="什么都没有写") as e:
        export.export(tmp_path, "exercises", "moodle", template=_moodle_sheet(tmp_path / "ws.csv", "反馈意见"),
                      out=out, comments=True, feedback=tmp_path / "fb.zip", quiet=True)
    assert "去掉 --feedback-zip" in str(e.value) and "学号文件夹" in str(e.value)
    assert not out.exists() and not (tmp_path / "fb.zip").exists()


def test_submitted_at_marks_a_late_batch_without_lms_times(tmp_path, utc_machine, capsys):
    """学号文件夹的下载里没有提交时间：迟交的一批用 --submitted-at（按课程的时区理解，评分机器是 UTC）。"""
    ws = tmp_path / ".grading" / "exercises"
    z1 = lx.raw_zip(tmp_path / "按时.zip", [(f"{S0.sid}_{S0.name}/{NB}.ipynb", nb_bytes())])
    z2 = lx.raw_zip(tmp_path / "迟交.zip", [(f"{S1.sid}_{S1.name}/{NB}.ipynb", nb_bytes())])
    first = collect.gather(options(tmp_path, z1, due="2025-10-20 23:59", quiet=False), NOTEBOOKS, ws)
    assert graded(first)[(S0.sid, NB)].late is None and "--submitted-at" in capsys.readouterr().err
    second = collect.gather(options(tmp_path, z2, due="2025-10-20 23:59", submitted_at="2025-10-21 08:00"),
                            NOTEBOOKS, ws)
    g = graded(second)
    assert g[(S0.sid, NB)].late is None                                      # 第一批不受影响
    late = g[(S1.sid, NB)]
    assert late.time == dt.datetime(2025, 10, 21, 8, 0, tzinfo=CST) and "晚了 8 小时" in late.late
    assert any("--submitted-at" in n for n in late.notes)
    # 写成截止之前（按课程的时区，不按 UTC 的评分机器）则按时
    on_time = collect.gather(options(tmp_path, z2, due="2025-10-20 23:59", submitted_at="2025-10-20 23:00"),
                             NOTEBOOKS, ws)
    assert graded(on_time)[(S1.sid, NB)].late is None
    with pytest.raises(collect.InputError, match="--submitted-at 看不懂"):
        collect.gather(options(tmp_path, z2, submitted_at="昨天晚上"), NOTEBOOKS, ws)


def test_summary_names_the_command_and_counts_pending_manual_cells():
    rows = [pipeline.Row(S0.sid, NB, 7.0, 20.0, "ok", "1 个单元格待人工评分（formgrader）", pending=1),
            pipeline.Row(S1.sid, NB, 5.0, 20.0, "ok", "2 个单元格待人工评分（formgrader）", pending=2),
            pipeline.Row(S2.sid, NB, 9.0, 20.0, "ok", "")]
    text = pipeline.summary(rows, 1.0, True, what="反馈")
    assert text.startswith("反馈完成") and "评分完成" not in text
    assert "待人工评分：3 个单元格（2 份提交）" in text and "feedback" in text
    assert "待人工评分：0 个单元格" in pipeline.summary(rows[2:], 1.0, True)


def test_notebooks_nobody_submitted_yet_do_not_count(tmp_path, monkeypatch, capsys):
    """学期中：只发布了 01、02，03 还没有人交。03 不算谁没交，也不计入导出的满分；汇总和导出说计入了哪些。"""
    NB3 = "03_later"
    rows = [pipeline.Row(S0.sid, NB1, 8.0, 10.0, "ok", ""), pipeline.Row(S1.sid, NB, 6.0, 10.0, "ok", "")]
    counted = pipeline.counted_notebooks(rows, [NB1, NB, NB3])
    assert counted == [NB1, NB]
    extra = pipeline.missing_rows(rows, {S0.sid, S1.sid}, counted)
    assert {(r.student_id, r.notebook) for r in extra} == {(S0.sid, NB), (S1.sid, NB1)}
    text = pipeline.summary(rows + extra, 1.0, True, not_counted=[NB3])
    assert f"计入的 notebook：{NB1}、{NB}" in text and f"还没有人交的 {NB3} 不计入" in text
    # 导出：满分只算 01、02（各 10 分），没有 03 的“未交”
    items = [collect.Item("a", b"", student_id=S0.sid, notebook=NB1, layout="folders"),
             collect.Item("b", b"", student_id=S1.sid, notebook=NB, layout="folders")]
    results = {S0.sid: export.Result(S0.sid, {NB1: 8.0, NB: 0.0, NB3: 0.0}, 8.0, 0, set()),
               S1.sid: export.Result(S1.sid, {NB1: 0.0, NB: 6.0, NB3: 0.0}, 6.0, 0, set())}
    ws = tmp_path / ".grading" / "exercises"
    ws.mkdir(parents=True)
    collect.save_import(ws, collect.Imported(items, "folders", "学号文件夹"))
    monkeypatch.setattr(export, "gradebook_results",
                        lambda course, a: (30.0, [NB1, NB, NB3], results, {NB1: 10.0, NB: 10.0, NB3: 10.0}))
    out = tmp_path / "all.csv"
    info = export.export(tmp_path, "exercises", "csv", out=out)
    table = lx.read_rows(out)
    assert NB3 not in table[0]
    by = {r[0]: dict(zip(table[0], r)) for r in table[1:]}
    assert by[S0.sid]["max_total"] == "20" and by[S0.sid][NB] == "未交" and "未交 1 个" in by[S0.sid]["status"]
    assert any(f"还没有人交的 {NB3} 不计入" in n for n in info["notes"]) and "满分 20" in capsys.readouterr().out


def test_garbled_roster_names_warn_and_keep_the_better_name(tmp_path):
    """教务系统导出成 GBK 的名单把“Zoë”存成“Zo?”：读名单时提醒；导出用下载里完好的姓名。"""
    zoe = lx.Student("2025005", "Zoë Müller", "Zoe Muller", 50105, 123505, "zmuller")
    path = tmp_path / "名单.csv"
    path.write_bytes("学号,姓名\r\n2025005,Zoë Müller\r\n2024001,张伟\r\n".encode("gbk", errors="replace"))
    r = roster.load(path)
    assert r.names["2025005"] == "Zo? Müller" and "含“?”" in r.describe() and "UTF-8" in r.describe()
    items = [collect.Item("a", b"", student_id=zoe.sid, notebook=NB, name=zoe.name, layout="folders"),
             collect.Item("b", b"", student_id=S0.sid, notebook=NB, name="Zhang Wei", layout="folders")]
    st = export.Students({sid: export.Result(sid, {NB: 5.0}, 5.0, 0, set()) for sid in (zoe.sid, S0.sid)},
                         collect.Imported(items, "folders", "学号文件夹", roster=r))
    assert st.name(zoe.sid) == "Zoë Müller" and st.name(S0.sid) == "张伟"     # 名单完好时名单优先
