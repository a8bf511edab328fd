"""助教和 LMS 之间的往返：各 LMS 真实样子的下载 → grade → 人工评分 → feedback → export → 读回上传文件。

下载和成绩表由 tests/lms_exports.py 按各 LMS 自己的命名造出来（出处见 lib/grading/lms.py）。
快速测试只导入、读名单、填表（不执行 notebook）；标记 slow 的是完整往返，用真实的
release/exercises/02（既有自动评分，也有文字题 ex3_proof），每次只评两三份。
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grading_fixtures as gf  # noqa: E402
import lms_exports as lx  # noqa: E402

from lib.grading import collect, export, gradebook_io, roster  # noqa: E402
from lib.grading.__main__ import main  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = lx.NOTEBOOKS
nb_bytes, imported, graded, rows_of = lx.nb_bytes, lx.imported, lx.graded, lx.held
NB = "02_scaling_and_equivariance"
S0, S1, S2 = lx.STUDENTS
CST = lx.CST


# ============================================================================ 布局：各 LMS 的下载
def test_canvas_flat_late_reupload_and_zipped_upload(tmp_path):
    z = lx.canvas_zip(tmp_path / "submissions.zip", [
        lx.Upload(S0, f"{NB}.ipynb", nb_bytes("s0"), attachment=900010),
        lx.Upload(S1, f"{NB}.ipynb", nb_bytes("old"), attachment=900011, late=True),
        lx.Upload(S1, f"{NB}-1.ipynb", nb_bytes("new"), attachment=900020, late=True),  # Canvas 给重传的同名文件加 -1
        lx.Upload(S2, "作业.zip", lx.zipped_upload([(f"{NB}.ipynb", nb_bytes("zipped"))]), attachment=900030),
        lx.Upload(S2, "report.pdf", b"%PDF-1.4", attachment=900031),
    ], upper_late=True)
    imp = imported(z)
    assert imp.layout == "canvas" and "Canvas" in imp.title
    g = graded(imp)
    assert set(g) == {(str(S0.canvas_id), NB), (str(S1.canvas_id), NB), (str(S2.canvas_id), NB)}
    newest = g[(str(S1.canvas_id), NB)]
    assert b"new" in newest.data and "900020" in newest.src          # 附件编号大的是后传的
    assert "没有采用较早的" in newest.notes[-1] and "900011" in newest.notes[-1]
    assert newest.late and "Canvas 标记为迟交" in newest.late
    assert not g[(str(S0.canvas_id), NB)].late
    zipped = g[(str(S2.canvas_id), NB)]
    assert zipped.container.endswith("作业.zip") and b"zipped" in zipped.data
    pdf = next(it for it in rows_of(imp) if it.src.endswith("report.pdf"))
    assert pdf.student_id == str(S2.canvas_id) and "不是 .ipynb" in pdf.reason   # 隔离行带着学生编号
    assert not any("__MACOSX" in it.src for it in rows_of(imp))               # zip 里的 Mac 垃圾不算提交
    assert newest.upload == f"wangfang_{S1.canvas_id}_900020_"                 # 反馈包要用的前缀


@pytest.mark.parametrize("folders", [True, False])
def test_moodle_folders_and_flat_with_spaces_and_chinese(tmp_path, folders):
    ups = [lx.Upload(S0, f"{NB}.ipynb", nb_bytes()), lx.Upload(S1, f"{NB}.ipynb", nb_bytes())]
    z = lx.moodle_zip(tmp_path / "m.zip", ups, folders=folders, chinese_names=True)
    with zipfile.ZipFile(z, "a") as zf:  # 开了“在线文本”的作业：这位同学把答案贴进了文本框
        zf.writestr(f"{S2.name}_{S2.pid}_assignsubmission_onlinetext_/onlinetext.html", "<p>答案</p>")
        zf.writestr(f"Fang Wang_{S1.pid}_assignsubmission_file_" + ("/" if folders else "") + "notes.ipynb", nb_bytes())
    imp = imported(z)
    assert imp.layout == "moodle"
    g = graded(imp)
    assert set(g) == {(str(S0.pid), NB), (str(S1.pid), NB)}                  # 参与者编号，不是 “张伟_123456_…”
    assert g[(str(S0.pid), NB)].name == S0.name
    online = next(it for it in rows_of(imp) if "onlinetext" in it.src)
    assert online.student_id == str(S2.pid) and "Moodle" in online.reason
    wrong = next(it for it in rows_of(imp) if it.src.endswith("notes.ipynb"))
    assert wrong.student_id == str(S1.pid) and "notebook 名称不对" in wrong.reason
    # 英文名里有空格也行（以前 “Wang Fang_…” 被拒）
    imp2 = imported(lx.moodle_zip(tmp_path / "m2.zip", ups, folders=folders))
    assert set(graded(imp2)) == {(str(S0.pid), NB), (str(S1.pid), NB)}


def test_blackboard_attempts_receipts_and_due(tmp_path):
    first = dt.datetime(2024, 3, 1, 20, 0, tzinfo=CST)
    second = dt.datetime(2024, 3, 2, 1, 30, tzinfo=CST)
    z = lx.blackboard_zip(tmp_path / "gradebook_CS224N_Exercises.zip", [
        lx.Upload(S0, f"{NB}.ipynb", nb_bytes("attempt 1"), time=first),
        lx.Upload(S0, f"{NB} (1).ipynb", nb_bytes("attempt 2"), time=second),
        lx.Upload(S1, f"{NB}.ipynb", nb_bytes(), time=first),
    ], title="Exercises_2024 (第 7 讲)")  # 作业名里有下划线和括号：用户名从回执里读
    due = dt.datetime(2024, 3, 1, 23, 59, tzinfo=CST)
    imp = imported(z, due=due)
    assert imp.layout == "blackboard"
    g = graded(imp)
    assert set(g) == {(S0.username, NB), (S1.username, NB)}
    s0 = g[(S0.username, NB)]
    assert b"attempt 2" in s0.data and s0.time == second                     # 新的尝试赢，不看文件时间
    assert "没有采用较早的" in s0.notes[-1]
    assert s0.late and "1 小时 31 分钟" in s0.late
    assert not g[(S1.username, NB)].late
    assert not rows_of(imp)                                                   # 回执不是隔离的文件
    # 没有回执时（只挑了文件打包）：用户名是 _attempt_ 前面的最后一段
    bare = tmp_path / "bare.zip"
    with zipfile.ZipFile(z) as src, zipfile.ZipFile(bare, "w") as dst:
        for info in src.infolist():
            if not info.filename.endswith(".txt"):
                dst.writestr(info, src.read(info))
    assert {k for k in graded(imported(bare))} == {(S0.username, NB), (S1.username, NB)}


def test_gradescope_export_group_submission_and_missing_metadata(tmp_path):
    t = dt.datetime(2024, 3, 1, 19, 0, tzinfo=CST)
    z = lx.gradescope_zip(tmp_path / "export.zip", [
        [lx.Upload(S0, f"{NB}.ipynb", nb_bytes("group"), time=t), lx.Upload(S1, "README.md", b"x", time=t)],
        [lx.Upload(S2, f"{NB}.ipynb", nb_bytes("solo"), time=t)],
    ])
    imp = imported(z)
    assert imp.layout == "gradescope"
    g = graded(imp)
    assert set(g) == {(S0.sid, NB), (S1.sid, NB), (S2.sid, NB)}              # SID，不是 submission_2000
    assert g[(S0.sid, NB)].data == g[(S1.sid, NB)].data                       # 组员共用一份
    assert abs(g[(S2.sid, NB)].time - t) < dt.timedelta(seconds=1)          # Ruby 写的是纳秒
    # 只拿到 submission_N/ 文件夹、没有 submission_metadata.yml：说明原因，不把 submission_2000 当学生
    bare = tmp_path / "bare.zip"
    with zipfile.ZipFile(z) as src, zipfile.ZipFile(bare, "w") as dst:
        for info in src.infolist():
            if not info.filename.endswith(".yml"):
                dst.writestr(info, src.read(info))
    imp = imported(bare)
    assert imp.layout == "gradescope" and not graded(imp)
    assert all("submission_metadata.yml" in it.reason for it in rows_of(imp) if it.src.endswith(".ipynb"))


def test_nbgrader_submitted_layout_reads_timestamps(tmp_path):
    t = dt.datetime(2024, 3, 2, 2, 0, tzinfo=CST)
    d = lx.nbgrader_submitted(tmp_path / "exchange", [lx.Upload(S0, f"{NB}.ipynb", nb_bytes(), time=t),
                                                       lx.Upload(S1, "01_attention_by_hand.ipynb", nb_bytes())],
                              "exercises")
    imp = imported(d, due=dt.datetime(2024, 3, 1, 23, 59, tzinfo=CST))
    assert imp.layout == "nbgrader"
    g = graded(imp)
    assert set(g) == {(S0.username, NB), (S1.username, "01_attention_by_hand")}
    assert g[(S0.username, NB)].time == t and "迟交" in g[(S0.username, NB)].late
    assert not rows_of(imp)                                                   # timestamp.txt 读了，不隔离


def test_nbgrader_submitted_folder_with_one_student_keeps_the_student(tmp_path):
    """submitted/ 里只有一个学生时，顶层文件夹就是学号：不能当成 zip 的公共外层去掉（否则全部进隔离区）。"""
    d = lx.nbgrader_submitted(tmp_path / "course", [lx.Upload(S0, f"{NB}.ipynb", nb_bytes())], "exercises")
    for given in (d, d / "submitted"):  # 课程目录，或 README 里的 --submissions submitted/
        imp = imported(given)
        assert imp.layout == "nbgrader"
        assert set(graded(imp)) == {(S0.username, NB)}, given
        assert not rows_of(imp)


def test_id_name_folders_mac_zip_and_newest_file(tmp_path):
    z = lx.folders_zip(tmp_path / "mac.zip", [lx.Upload(S0, f"{NB}.ipynb", nb_bytes()),
                                              lx.Upload(S1, "01_attention_by_hand.ipynb", nb_bytes())])
    imp = imported(z)
    assert imp.layout == "folders"
    assert set(graded(imp)) == {(S0.sid, NB), (S1.sid, "01_attention_by_hand")}  # “学号_姓名/” → 学号
    assert not rows_of(imp)                                 # __MACOSX、.DS_Store、.ipynb_checkpoints 都不进成绩表
    assert sum(it.skip for it in imp.items) >= 5
    # 旧的空白 02.ipynb（两小时前）和新的 “02 (1).ipynb”：评新的，detail 写明
    d = tmp_path / "dl" / S1.sid
    d.mkdir(parents=True)
    (d / f"{NB}.ipynb").write_bytes(nb_bytes("blank"))
    os.utime(d / f"{NB}.ipynb", (1_709_290_000, 1_709_290_000))
    (d / f"{NB} (1).ipynb").write_bytes(nb_bytes("answer"))
    os.utime(d / f"{NB} (1).ipynb", (1_709_297_200, 1_709_297_200))
    it = graded(imported(tmp_path / "dl"))[(S1.sid, NB)]
    assert b"answer" in it.data
    assert f"{NB} (1).ipynb" in it.notes[-1] and f"没有采用较早的 {S1.sid}/{NB}.ipynb" in it.notes[-1]


def test_forced_layout_and_regex_errors(tmp_path):
    z = lx.canvas_zip(tmp_path / "c.zip", [lx.Upload(S0, f"{NB}.ipynb", nb_bytes())])
    imp = imported(z, lms_name="moodle")
    assert imp.layout == "moodle" and not graded(imp)
    assert "Moodle" in rows_of(imp)[0].reason
    with pytest.raises(collect.InputError, match="不是合法的正则表达式"):
        imported(z, name_regex=r"^(?P<student_id>\d+_(?P<notebook>.+)\.ipynb$")
    with pytest.raises(collect.InputError, match="不认识的 --lms"):
        imported(z, lms_name="sakai")
    imp = imported(z, name_regex=r"^[a-z]+_(?P<student_id>\d+)_\d+_(?P<notebook>.+)\.ipynb$")
    assert set(graded(imp)) == {(str(S0.canvas_id), NB)}


# ============================================================================ 名单
ROWS = [["1", S0.sid, S0.name, "一班"], ["2", S1.sid, "王, 芳", "一班"], ["3", S2.sid, S2.name, "二班"]]


@pytest.mark.parametrize("encoding,bom,suffix", [("utf-8", True, ".csv"), ("utf-8", False, ".csv"),
                                                 ("gbk", False, ".csv"), ("gb18030", False, ".csv"),
                                                 (None, False, ".xlsx")])
def test_roster_as_exported(tmp_path, encoding, bom, suffix):
    path = tmp_path / f"名单{suffix}"
    header = ["序号", "学号", "姓名", "班级"]
    if suffix == ".xlsx":
        lx.roster_xlsx(path, header, [[int(c) if c.isdigit() else c for c in r] for r in ROWS])  # 学号存成数字
    else:
        lx.roster_csv(path, header, ROWS, encoding=encoding, bom=bom)
    r = roster.load(path)
    assert r.ids == [S0.sid, S1.sid, S2.sid] and r.id_column == "学号"
    assert r.names[S1.sid] == "王, 芳"                                        # 带逗号的字段（CSV 引号）
    r = roster.load(path, id_column="序号")
    assert r.ids == ["1", "2", "3"]
    with pytest.raises(collect.InputError, match="没有 “学生证” 这一列"):
        roster.load(path, id_column="学生证")


def test_lms_files_as_rosters_map_lms_ids_to_student_numbers(tmp_path):
    canvas = roster.load(lx.canvas_gradebook(tmp_path / "gb.csv"))
    assert canvas.kind == "Canvas 成绩册导出" and canvas.id_column == "SIS User ID"
    assert canvas.ids == [S0.sid, S1.sid, S2.sid]                             # Points Possible 行、测试学生不算
    assert canvas.lookup(str(S1.canvas_id)) == S1.sid
    moodle = roster.load(lx.moodle_worksheet(tmp_path / "ws.csv"))
    assert moodle.kind == "Moodle 评分工作表" and moodle.lookup(str(S2.pid)) == S2.sid
    bb = roster.load(lx.blackboard_gc(tmp_path / "gc.xls"))
    assert bb.kind == "Blackboard 成绩中心文件" and bb.lookup(S0.username) == S0.sid
    plain = tmp_path / "ids.txt"
    plain.write_text(f"{S0.sid}\n{S1.sid}\n", encoding="utf-8")              # 每行一个学号、没有表头
    assert roster.load(plain).ids == [S0.sid, S1.sid]
    # Canvas 下载 + Canvas 成绩册当名单：学生编号变成学号；名单里没有的人隔离，行里带着 Canvas 编号
    stranger = lx.Student("2024999", "赵六", "Liu Zhao", 50099, 1, "zhaoliu")
    z = lx.canvas_zip(tmp_path / "c.zip", [lx.Upload(S0, f"{NB}.ipynb", nb_bytes()),
                                           lx.Upload(stranger, f"{NB}.ipynb", nb_bytes())])
    imp = imported(z, roster=canvas)
    assert set(graded(imp)) == {(S0.sid, NB)}
    out = rows_of(imp)[0]
    assert out.student_id == "50099" and "名单里没有学生 50099" in out.reason


def test_plain_roster_matches_lms_names_only_when_unique(tmp_path):
    """教务名单只有学号和姓名、Moodle 下载里只有姓名和参与者编号：名字唯一才对上，并在 detail 里说明。"""
    names = lx.roster_csv(tmp_path / "名单.csv", ["学号", "姓名"],
                          [[S0.sid, S0.name], [S1.sid, S1.name], ["2024100", S1.name]])  # 两个王芳
    z = lx.moodle_zip(tmp_path / "m.zip", [lx.Upload(S0, f"{NB}.ipynb", nb_bytes()),
                                           lx.Upload(S1, f"{NB}.ipynb", nb_bytes())], chinese_names=True)
    imp = imported(z, roster=roster.load(names))
    assert set(graded(imp)) == {(S0.sid, NB)}
    assert f"按姓名 {S0.name} 对上名单里的 {S0.sid}" in graded(imp)[(S0.sid, NB)].notes[0]
    held = rows_of(imp)[0]
    assert held.student_id == str(S1.pid) and f"名单里没有学生 {S1.pid}（{S1.name}）" in held.reason


# ============================================================================ 人工分跟着答案走（gradebook 层）
@pytest.mark.filterwarnings("ignore:.*not in session")  # nbgrader 自己 add_submission 时的 SQLAlchemy 警告
def test_manual_grades_follow_the_answer(tmp_path):
    """改了文字题答案：人工分清除、标记重新评分；没改：人工分和 formgrader 的标记都不动。"""
    from nbgrader.api import Gradebook
    rel = gf.load(REPO / "release" / "exercises" / f"{NB}.ipynb")
    db = "sqlite:///" + str(tmp_path / "gradebook.db")
    gradebook_io.ensure_assignment(db, "exercises", {NB: rel})
    auto = {g: p for g, (p, a) in gradebook_io.grade_cells(rel).items() if a}
    first, second = write_answer(rel, "第一次的证明"), write_answer(rel, "改过的证明")
    (tmp_path / "prev.ipynb").write_text(json.dumps(first), encoding="utf-8")
    with Gradebook(db) as gb:
        gradebook_io.write_scores(gb, "exercises", "s1", NB, auto, set())
        formgrader_put(gb, "ex3_proof", NB, "s1", 3.0)
        same = gradebook_io.changed_answers(tmp_path / "prev.ipynb", first, rel)
        w = gradebook_io.write_scores(gb, "exercises", "s1", NB, auto, set(), changed=same)   # feedback：同一份答案
        g = gb.find_grade("ex3_proof", NB, "exercises", "s1")
        assert same == set() and g.manual_score == 3.0 and not g.needs_manual_grade and not w.notes
        assert w.score == pytest.approx(sum(auto.values()) + 3.0)
        changed = gradebook_io.changed_answers(tmp_path / "prev.ipynb", second, rel)
        w = gradebook_io.write_scores(gb, "exercises", "s1", NB, auto, set(), changed=changed)
        g = gb.find_grade("ex3_proof", NB, "exercises", "s1")
        assert "ex3_proof" in changed and g.manual_score is None and g.needs_manual_grade
        assert "答案改过了" in w.notes[0] and "ex3_proof（原来 3 分）" in w.notes[0] and w.pending == 1


def write_answer(release: dict, text: str) -> dict:
    nb = json.loads(json.dumps(release))
    for c in nb["cells"]:
        if gf.gid(c) == "ex3_proof":
            c["source"] = text
    return nb


def formgrader_put(gb, grade_id: str, notebook: str, student: str, score: float) -> None:
    """和 formgrader 保存一个人工分时做的完全一样（nbgrader 的 formgrader/apihandlers.py GradeHandler.put）。"""
    grade = gb.find_grade(grade_id, notebook, "exercises", student)
    grade.manual_score = score
    grade.extra_credit = None
    grade.needs_manual_grade = grade.manual_score is None and grade.auto_score is None
    gb.db.commit()


# ============================================================================ 导出（填 LMS 的文件，不评分）
def fake_students(results: dict, roster_obj=None, items=()) -> export.Students:
    imp = collect.Imported(list(items), "canvas", "Canvas", roster=roster_obj) if (roster_obj or items) else None
    return export.Students(results, imp)


def res(sid: str, total: float, penalty: float = 0.0) -> export.Result:
    return export.Result(sid, {NB: total}, total, penalty, set())


def test_fill_canvas_keeps_everything_and_scales(tmp_path):
    t = roster.read_table(lx.canvas_gradebook(tmp_path / "gb.csv", points=60))
    canvas = roster.load(tmp_path / "gb.csv")
    st = fake_students({S0.sid: res(S0.sid, 50), S1.sid: res(S1.sid, 100, penalty=10), "2099": res("2099", 1)},
                       roster_obj=canvas)
    notes: list = []
    done = export.fill_canvas(t, st, "Exercises", 100, notes)
    assert done == {S0.sid, S1.sid}
    out = tmp_path / "up.csv"
    roster.write_table(out, t)
    assert out.read_bytes().startswith(b"\xef\xbb\xbf")                       # 模板带 BOM，写回也带
    rows = lx.read_rows(out)
    assert rows[0] == roster.read_table(tmp_path / "gb.csv").header           # 所有列都在
    assert rows[1][0] == "    Points Possible" and rows[1][6] == "60"        # Points Possible 行原样
    by = {r[2]: r for r in rows[2:]}
    assert by[S0.sid][6] == "30" and by[S1.sid][6] == "54"                    # 50/100×60；(100−10)/100×60
    assert by[S2.sid][6] == "" and by[""][1] == "59999"                       # 没成绩的、测试学生保持原样
    assert by[S0.sid][0] == "Zhang, Wei" and by[S0.sid][7] == "80"
    assert any("按比例换算" in n for n in notes)


def test_fill_moodle_worksheet_and_blackboard_file(tmp_path):
    ws = roster.read_table(lx.moodle_worksheet(tmp_path / "ws.csv", max_grade=100))
    st = fake_students({str(S0.pid): res(str(S0.pid), 12.5), str(S2.pid): res(str(S2.pid), 20)})
    assert export.fill_moodle(ws, st, 20, True, [NB], []) == {str(S0.pid), str(S2.pid)}
    rows = {r[0]: r for r in ws.rows}
    assert rows[f"Participant {S0.pid}"][5] == "62.50" and rows[f"Participant {S2.pid}"][5] == "100.00"
    assert NB in rows[f"Participant {S0.pid}"][10] and rows[f"Participant {S1.pid}"][5] == ""
    gc_path = lx.blackboard_gc(tmp_path / "gc.xls")
    gc = roster.read_table(gc_path)
    assert gc.encoding == "utf-16-le" and gc.delimiter == "\t"
    st = fake_students({S1.username: res(S1.username, 30)})
    assert export.fill_blackboard(gc, st, "Exercises", 60, []) == {S1.username}
    roster.write_table(tmp_path / "up.xls", gc, quote_all=True)
    assert (tmp_path / "up.xls").read_bytes().startswith(b"\xff\xfe")        # 照原样：UTF-16 带 BOM
    rows = lx.read_rows(tmp_path / "up.xls")
    assert rows[0][6] == "Exercises [Total Pts: 60 Score] |664617"
    assert {r[2]: r[6] for r in rows[1:]} == {S0.username: "", S1.username: "30", S2.username: ""}
    with pytest.raises(collect.InputError, match="不像 Moodle"):
        export.fill_moodle(roster.read_table(tmp_path / "up.xls"), st, 60, False, [NB], [])


# ============================================================================ 命令行：失败要响亮
GRADE = ["grade", "exercises", "--jobs", "2", "--quiet", "--submissions"]


@pytest.fixture
def course(tmp_path):
    c = gf.copy_course(REPO, tmp_path / "course")
    cwd = os.getcwd()
    os.chdir(c)
    yield c
    os.chdir(cwd)


def test_cli_errors_are_chinese_without_traceback(course, tmp_path, capsys, monkeypatch):
    z = lx.canvas_zip(tmp_path / "c.zip", [lx.Upload(S0, f"{NB}.ipynb", nb_bytes())])
    assert main(GRADE + [str(z), "--name-regex", "(?P<student_id>[0-9+"]) == 2
    err = capsys.readouterr().err
    assert "不是合法的正则表达式" in err and "Traceback" not in err
    assert main(["feedback", "exercises"]) == 2 and "请先运行 grade" in capsys.readouterr().err
    assert main(["export", "exercises", "--lms", "canvas"]) == 2 and "请先运行 grade" in capsys.readouterr().err
    assert main(GRADE + [str(tmp_path / "nope.zip")]) == 2 and "找不到提交路径" in capsys.readouterr().err
    monkeypatch.setattr("lib.grading.pipeline.run", lambda opts: 1 / 0)       # 评分器自己的错：一句话 + 日志
    assert main(GRADE + [str(z)]) == 1
    err = capsys.readouterr().err
    assert "内部错误：ZeroDivisionError" in err and "Traceback" not in err
    assert "ZeroDivisionError" in (course / ".grading" / "error.log").read_text(encoding="utf-8")


@pytest.mark.slow
def test_cli_nothing_gradable_exits_nonzero(tmp_path):
    course = gf.copy_course(REPO, tmp_path / "course")
    junk = lx.canvas_zip(tmp_path / "junk.zip", [lx.Upload(S0, "report.pdf", b"%PDF"),
                                                 lx.Upload(S1, "notes.ipynb", nb_bytes())])
    env = dict(os.environ, PYTHONPATH=str(course), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "lib.grading", *GRADE, str(junk)], cwd=course, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 3 and "没有一份提交能评分" in p.stderr and "Traceback" not in p.stderr
    rows = lx.read_rows(course / "grades.csv")
    assert {r[0] for r in rows[1:]} == {str(S0.canvas_id), str(S1.canvas_id)}  # 隔离行带学生编号
    assert all(r[4] == "quarantined" for r in rows[1:])


# ============================================================================ 完整往返（执行真实的 notebook 02）
def answered_02(written: str, blank: bool = False) -> bytes:
    rel = gf.load(REPO / "release" / "exercises" / f"{NB}.ipynb")
    nb = rel if blank else gf.answered(rel, gf.load(REPO / "solutions" / "exercises" / f"{NB}.ipynb"))
    return gf.dump(write_answer(nb, written))


def grades(course: Path) -> dict:
    rows = lx.read_rows(course / "grades.csv")
    return {(r[0], r[1]): dict(zip(rows[0], r)) for r in rows[1:]}


def grade_of(course: Path, student: str, grade_id: str = "ex3_proof"):
    from nbgrader.api import Gradebook
    with Gradebook("sqlite:///" + str(course / "gradebook.db")) as gb:
        g = gb.find_grade(grade_id, NB, "exercises", student)
        return g.manual_score, g.needs_manual_grade


def put(course: Path, student: str, score: float) -> None:
    from nbgrader.api import Gradebook
    with Gradebook("sqlite:///" + str(course / "gradebook.db")) as gb:
        formgrader_put(gb, "ex3_proof", NB, student, score)


@pytest.mark.slow
def test_round_trip_canvas(course, tmp_path, capsys):
    z = lx.canvas_zip(tmp_path / "dl" / "submissions.zip", [
        lx.Upload(S0, f"{NB}.ipynb", answered_02("", blank=True), attachment=900005),   # 先传了空白的
        lx.Upload(S0, f"{NB}-1.ipynb", answered_02("证明：P 同时置换行和列。"), attachment=900010),
        lx.Upload(S1, "作业.zip", lx.zipped_upload([(f"{NB}.ipynb", answered_02("", blank=True))]),
                  attachment=900020, late=True),
    ])
    assert main(GRADE + [str(z)]) == 0
    rows = grades(course)
    full = sum(gf.test_points(gf.load(course / "release" / "exercises" / f"{NB}.ipynb")).values())
    r0, r1 = rows[(str(S0.canvas_id), NB)], rows[(str(S1.canvas_id), NB)]
    assert float(r0["score"]) == full and "待人工评分" in r0["detail"] and r0["status"] == "ok"
    assert f"评分的是最新的 zhangwei_{S0.canvas_id}_900010_{NB}-1.ipynb" in r0["detail"]
    assert f"没有采用较早的 zhangwei_{S0.canvas_id}_900005_{NB}.ipynb" in r0["detail"]
    assert float(r1["score"]) == 0 and "late" in r1["status"] and "Canvas 标记为迟交" in r1["detail"]
    put(course, str(S0.canvas_id), 4.0)
    shutil.move(str(tmp_path / "dl"), str(tmp_path / "moved"))               # 下载挪走了，feedback 照样能跑
    capsys.readouterr()
    assert main(["feedback", "exercises"]) == 0
    assert "重用上次 grade 导入的 2 份" in capsys.readouterr().err
    assert grade_of(course, str(S0.canvas_id)) == (4.0, False)               # formgrader 的标记没被重置
    assert float(grades(course)[(str(S0.canvas_id), NB)]["score"]) == full + 4
    assert "得分：4.0 / 4.0" in (course / "feedback" / str(S0.canvas_id) / "exercises" / f"{NB}.html").read_text(encoding="utf-8")
    tpl = lx.canvas_gradebook(tmp_path / "2024-03-05T1200_Grades-CS224N.csv", points=100)
    out = tmp_path / "upload.csv"
    fb = tmp_path / "feedback.zip"
    assert main(["export", "exercises", "--lms", "canvas", "--template", str(tpl), "--column", "Exercises",
                 "-o", str(out), "--feedback-zip", str(fb)]) == 0
    rows = lx.read_rows(out)
    assert rows[0] == lx.read_rows(tpl)[0] and rows[1][0] == "    Points Possible"
    by = {r[1]: r for r in rows[2:]}
    counted_max = export.gradebook_results(course, "exercises")[3][NB]  # 只有 NB 有人交：满分只算它，按 Points Possible 换算
    assert by[str(S0.canvas_id)][6] == export.fmt((full + 4) * 100 / counted_max) and by[str(S1.canvas_id)][6] == "0"
    assert by[str(S2.canvas_id)][6] == ""
    said = capsys.readouterr().out
    assert "LMS 文件里有 2 名学生没有成绩" in said                             # 李娜没交，还有测试学生
    with zipfile.ZipFile(fb) as zf:  # Canvas 的“重新上传提交”：前两个纯数字段是用户 ID 和附件 ID
        assert sorted(zf.namelist()) == [f"wangfang_{S1.canvas_id}_900020_{NB}.html",
                                         f"zhangwei_{S0.canvas_id}_900010_{NB}.html"]


@pytest.mark.slow
def test_round_trip_moodle_resubmission_moves_manual_grades(course, tmp_path, capsys):
    """Moodle + 评分工作表当名单（学号）；人工评分后两人重交：改了证明的人工分清除，没改的保留。"""
    ws = lx.moodle_worksheet(tmp_path / "worksheet.csv", max_grade=100)
    t1 = dt.datetime(2024, 3, 1, 20, 0, tzinfo=CST)
    z1 = lx.moodle_zip(tmp_path / "a1.zip", [lx.Upload(S0, f"{NB}.ipynb", answered_02("第一版证明"), time=t1),
                                             lx.Upload(S1, f"{NB}.ipynb", answered_02("王芳的证明"), time=t1)])
    assert main(GRADE + [str(z1), "--roster", str(ws)]) == 0
    assert set(grades(course)) >= {(S0.sid, NB), (S1.sid, NB)}               # 参与者编号换成了学号
    assert grades(course)[(S2.sid, NB)]["status"] == "missing"
    put(course, S0.sid, 3.0)
    put(course, S1.sid, 4.0)
    t2 = dt.datetime(2024, 3, 2, 9, 0, tzinfo=CST)
    z2 = lx.moodle_zip(tmp_path / "a2.zip", [lx.Upload(S0, f"{NB}.ipynb", answered_02("重写的证明"), time=t2),
                                             lx.Upload(S1, f"{NB}.ipynb", answered_02("王芳的证明") + b"\n", time=t2)])
    assert main(GRADE + [str(z2), "--roster", str(ws)]) == 0
    rows = grades(course)
    assert grade_of(course, S0.sid) == (None, True) and "答案改过了" in rows[(S0.sid, NB)]["detail"]
    assert grade_of(course, S1.sid) == (4.0, False) and "答案改过了" not in rows[(S1.sid, NB)]["detail"]
    put(course, S0.sid, 2.0)
    assert main(["feedback", "exercises", "--quiet"]) == 0
    assert grade_of(course, S0.sid) == (2.0, False) and grade_of(course, S1.sid) == (4.0, False)
    out = tmp_path / "worksheet_filled.csv"
    fb = tmp_path / "feedback_files.zip"
    capsys.readouterr()
    assert main(["export", "exercises", "--lms", "moodle", "--template", str(ws), "-o", str(out), "--comments",
                 "--feedback-zip", str(fb)]) == 0
    rows = {r[0]: r for r in lx.read_rows(out)[1:]}
    full = sum(gf.test_points(gf.load(course / "release" / "exercises" / f"{NB}.ipynb")).values())
    max_total = export.gradebook_results(course, "exercises")[3][NB]  # 只有 NB 有人交：满分只算它
    assert rows[f"Participant {S0.pid}"][5] == f"{(full + 2) * 100 / max_total:.2f}"
    assert rows[f"Participant {S1.pid}"][5] == f"{(full + 4) * 100 / max_total:.2f}"
    assert rows[f"Participant {S2.pid}"][5] == "" and NB in rows[f"Participant {S0.pid}"][10]
    assert "名单上没有成绩的学生（1 名）：2024003" in capsys.readouterr().out
    with zipfile.ZipFile(fb) as zf:  # “上传多个反馈文件（zip）”：文件夹名就是下载时的前缀
        assert sorted(zf.namelist()) == sorted(f"{lx.moodle_prefix(s)}/{NB}.html" for s in (S0, S1))


@pytest.mark.slow
def test_round_trip_blackboard_due_and_nbgrader_late_penalty(course, tmp_path):
    """--due + nbgrader 的迟交扣分设置（penalty_method = 'zero'）：时间记在 nbgrader 放的地方，nbgrader 的导出看得到。"""
    with open(course / "nbgrader_config.py", "a", encoding="utf-8") as f:
        f.write("c.LateSubmissionPlugin.penalty_method = 'zero'\n")
    on_time = dt.datetime(2024, 3, 1, 22, 0, tzinfo=CST)
    late = dt.datetime(2024, 3, 2, 1, 0, tzinfo=CST)
    z = lx.blackboard_zip(tmp_path / "gradebook_CS224N_Exercises.zip", [
        lx.Upload(S0, f"{NB}.ipynb", answered_02("A"), time=on_time),
        lx.Upload(S1, f"{NB}.ipynb", answered_02("B"), time=late)])
    assert main(GRADE + [str(z), "--due", "2024-03-01T23:59:00+08:00"]) == 0
    rows = grades(course)
    r0, r1 = rows[(S0.username, NB)], rows[(S1.username, NB)]
    assert "late" not in r0["status"] and float(r0["score"]) > 0
    assert r1["status"] == "late" and "晚了 1 小时 1 分钟" in r1["detail"] and float(r1["score"]) == 0
    assert "迟交扣分" in r1["detail"]
    stamp = (course / "submitted" / S1.username / "exercises" / "timestamp.txt").read_text()
    assert stamp == "2024-03-01 17:00:00.000000 UTC"
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin
    with Gradebook("sqlite:///" + str(course / "gradebook.db")) as gb:  # 和 `nbgrader export` 同一个插件
        assert gb.find_assignment("exercises").duedate == dt.datetime(2024, 3, 1, 15, 59)
        CsvExportPlugin(to=str(tmp_path / "nbgrader_export.csv")).export(gb)
    exp = {r[3]: r for r in lx.read_rows(tmp_path / "nbgrader_export.csv")[1:]}
    assert exp[S1.username][2].startswith("2024-03-01 17:00") and float(exp[S1.username][8]) > 0
    assert float(exp[S1.username][9]) == 0 and float(exp[S0.username][8]) == 0
    gc = lx.blackboard_gc(tmp_path / "gc_CS224N_fullgc.xls")
    assert main(["export", "exercises", "--lms", "blackboard", "--template", str(gc), "--column", "Exercises",
                 "-o", str(tmp_path / "upload.xls")]) == 0
    up = {r[2]: r[6] for r in lx.read_rows(tmp_path / "upload.xls")[1:]}
    max_total = export.gradebook_results(course, "exercises")[3][NB]  # 只有 NB 有人交：满分只算它
    assert up == {S0.username: export.fmt(float(r0["score"]) * 60 / max_total), S1.username: "0", S2.username: ""}


@pytest.mark.slow
def test_round_trip_gradescope_folders_and_csv_export(course, tmp_path):
    """Gradescope 的小组提交 + xlsx 名单；再用 Mac 打的学号文件夹 zip + GBK 名单；csv 总表每人一行。"""
    names = tmp_path / "名单.xlsx"
    lx.roster_xlsx(names, ["学号", "姓名"], [[int(s.sid), s.name] for s in lx.STUDENTS])
    z = lx.gradescope_zip(tmp_path / "gs.zip", [[lx.Upload(S0, f"{NB}.ipynb", answered_02("组的证明"))],
                                               [lx.Upload(S2, f"{NB}.ipynb", answered_02("", blank=True))]])
    assert main(GRADE + [str(z), "--roster", str(names)]) == 0
    rows = grades(course)
    assert float(rows[(S2.sid, NB)]["score"]) == 0 and rows[(S1.sid, NB)]["status"] == "missing"
    assert main(["export", "exercises", "--lms", "csv", "-o", str(tmp_path / "all.csv")]) == 0
    table = lx.read_rows(tmp_path / "all.csv")
    assert (tmp_path / "all.csv").read_bytes().startswith(b"\xef\xbb\xbf")
    head = table[0]
    assert head[:2] == ["student_id", "name"] and head[-4:] == ["total", "max_total", "late_penalty", "status"]
    by = {r[0]: dict(zip(head, r)) for r in table[1:]}
    assert [r[0] for r in table[1:]] == [s.sid for s in lx.STUDENTS]         # 名单的顺序
    assert by[S0.sid]["name"] == S0.name and float(by[S0.sid][NB]) == float(by[S0.sid]["total"]) > 0
    assert by[S1.sid]["status"] == "没有提交" and by[S1.sid]["total"] == ""
    gbk = tmp_path / "名单_gbk.csv"
    lx.roster_csv(gbk, ["序号", "学号", "姓名"], [[str(i), s.sid, s.name] for i, s in enumerate(lx.STUDENTS)],
                  encoding="gbk")
    mac = lx.folders_zip(tmp_path / "mac.zip", [lx.Upload(S1, f"{NB}.ipynb", answered_02("王芳"))])
    assert main(GRADE + [str(mac), "--roster", str(gbk)]) == 0
    rows = grades(course)
    assert float(rows[(S1.sid, NB)]["score"]) > 0 and not any(r["status"] == "quarantined" for r in rows.values())
