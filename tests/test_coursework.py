"""学生的副本和 make update（lib/coursework.py、lib/notebook_merge.py）：按单元格合并、学生的答案永远不丢。

快：小的合成 notebook、临时 git 仓库（一个“上游”，一个学生的克隆），不开浏览器。真的 JupyterLab 里的同一件事
（中文界面、打开每一页、自动保存、浏览器里作答之后 make update）在 tests/test_student_lab.py。
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import nbformat
import pytest
from ipykernel.ipkernel import IPythonKernel

from lib import coursework
from lib.notebook_merge import NOTE_MARK, merge_notebooks

REPO_ROOT = Path(__file__).resolve().parents[1]
GIT_ID = ["-c", "user.name=课程组", "-c", "user.email=course@example.edu"]


# ---------------------------------------------------------------- 按单元格的三方合并

def _cell(kind: str, source: str, cell_id: str, grade_id: str | None = None, solution: bool = False):
    cell = (nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell)(source)
    cell.id = cell_id
    if grade_id:
        cell.metadata["nbgrader"] = {"grade_id": grade_id, "solution": solution, "grade": False, "locked": not solution,
                                     "schema_version": 3}
    return cell


def _nb(*cells):
    nb = nbformat.v4.new_notebook(cells=[nbformat.from_dict(dict(c)) for c in cells])
    return nb


def _sources(nb) -> list[str]:
    return [c.source for c in nb.cells]


BASE = _nb(_cell("markdown", "# 练习", "title"),
           _cell("markdown", "题目：算 softmax", "question"),
           _cell("code", "raise NotImplementedError()", "x1", grade_id="answer", solution=True),
           _cell("code", "check(answer)", "x2", grade_id="test"),
           _cell("code", "print('演示')", "demo"))


def _edit(nb, index: int, source: str):
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    nb.cells[index].source = source
    return nb


def test_unchanged_cells_take_the_new_version_and_edits_are_kept():
    mine = _edit(BASE, 2, "answer = softmax(x)")                # 学生作答
    mine.cells[4].outputs = [nbformat.v4.new_output("stream", text="演示\n")]  # 学生运行过的单元格
    theirs = _edit(BASE, 1, "题目：算 softmax（每行和为 1）")      # 课程改了题目
    merged, report = merge_notebooks(BASE, mine, theirs)
    assert _sources(merged) == ["# 练习", "题目：算 softmax（每行和为 1）", "answer = softmax(x)", "check(answer)",
                                "print('演示')"]
    assert merged.cells[4].outputs == mine.cells[4].outputs  # 课程没改的单元格：学生的运行结果留着
    assert (report.updated, report.kept, report.both) == (1, 1, [])


def test_both_changed_an_answer_cell_keeps_the_answer_and_shows_the_new_stub():
    mine = _edit(BASE, 2, "answer = softmax(x)")
    theirs = _edit(BASE, 2, "# 新的提示：用 torch.softmax\nraise NotImplementedError()")
    merged, report = merge_notebooks(BASE, mine, theirs)
    assert merged.cells[2].source == "answer = softmax(x)"
    note = merged.cells[3]
    assert note.cell_type == "markdown" and NOTE_MARK in note.source and "新的提示：用 torch.softmax" in note.source
    assert _sources(merged)[4:] == ["check(answer)", "print('演示')"]
    assert len(report.both) == 1 and "答案" in report.both[0]


def test_both_changed_a_page_cell_takes_the_new_one_and_keeps_the_students_below_it():
    mine = _edit(BASE, 4, "print('我改过的演示')")
    theirs = _edit(BASE, 4, "print('课程的新演示')")
    merged, report = merge_notebooks(BASE, mine, theirs)
    assert merged.cells[4].source == "print('课程的新演示')"
    assert merged.cells[5].cell_type == "markdown" and "print('我改过的演示')" in merged.cells[5].source
    assert NOTE_MARK in merged.cells[5].source and "```python" in merged.cells[5].source
    assert len(report.both) == 1


def test_students_own_cells_stay_where_they_were_and_deleted_course_cells_come_back():
    mine = nbformat.from_dict(json.loads(json.dumps(BASE)))
    mine.cells.insert(2, _cell("markdown", "我的笔记：先看讲义 §2", "mine1"))
    del mine.cells[5]  # 学生删掉了演示单元格
    theirs = _edit(BASE, 0, "# 练习 1")
    theirs.cells.insert(1, _cell("markdown", "新的一段说明", "new1"))
    merged, report = merge_notebooks(BASE, mine, theirs)
    assert _sources(merged) == ["# 练习 1", "新的一段说明", "题目：算 softmax", "我的笔记：先看讲义 §2",
                                "raise NotImplementedError()", "check(answer)", "print('演示')"]
    assert (report.student_cells, report.restored, report.updated) == (1, 1, 1)
    assert len({c.id for c in merged.cells}) == len(merged.cells)


def test_a_removed_course_cell_the_student_edited_is_kept_with_a_note():
    mine = _edit(BASE, 4, "print('我改过')")
    theirs = nbformat.from_dict(json.loads(json.dumps(BASE)))
    del theirs.cells[4]
    merged, report = merge_notebooks(BASE, mine, theirs)
    assert "print('我改过')" in _sources(merged)
    assert NOTE_MARK in merged.cells[-1].source and len(report.both) == 1
    merged, _ = merge_notebooks(BASE, BASE, theirs)  # 学生没改过的，就随课程删掉
    assert _sources(merged) == _sources(theirs)


def test_answers_are_found_by_grade_id_even_when_cell_ids_change():
    """nbgrader 的单元格按 grade_id 对应（重新生成 release/ 时单元格 id 可能变，grade_id 不变）。"""
    mine = _edit(BASE, 2, "answer = softmax(x)")
    theirs = nbformat.from_dict(json.loads(json.dumps(BASE)))
    for cell in theirs.cells[2:4]:
        cell.id = cell.id + "-new"
    merged, _ = merge_notebooks(BASE, mine, theirs)
    assert _sources(merged).count("answer = softmax(x)") == 1 and "raise NotImplementedError()" not in _sources(merged)


def test_without_a_base_every_difference_keeps_both():
    mine = _edit(BASE, 2, "answer = softmax(x)")
    theirs = _edit(BASE, 1, "题目：新的")
    merged, report = merge_notebooks(None, mine, theirs)
    assert "answer = softmax(x)" in _sources(merged) and "题目：新的" in _sources(merged)
    assert any("题目：算 softmax" in s for s in _sources(merged))  # 学生副本里的旧题目也留着（在说明里）
    assert len(report.both) == 2


# ---------------------------------------------------------------- make update：临时的上游仓库和学生的克隆

def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *GIT_ID, *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def _course_page(title: str) -> nbformat.NotebookNode:
    return _nb(_cell("markdown", f"# {title}", "title"), _cell("code", "x = 1", "code1"),
               _cell("markdown", "讲解", "text1"))


@pytest.fixture
def clones(tmp_path):
    """上游仓库（课程组）和学生的克隆；学生的副本已经建好（make lab 第一次运行时做的事）。"""
    up = tmp_path / "upstream"
    for rel, nb in {"notebooks/02_page.ipynb": _course_page("第 2 页"), "release/exercises/01_ex.ipynb": BASE}.items():
        (up / rel).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, up / rel)
    (up / "assets").mkdir()
    (up / "assets" / "badge.svg").write_text("<svg/>", encoding="utf-8")
    (up / ".gitignore").write_text("/mywork/\n", encoding="utf-8")
    _git(tmp_path, "init", "-q", str(up))
    _git(up, "add", "-A")
    _git(up, "commit", "-qm", "v1")
    student = tmp_path / "student"
    _git(tmp_path, "clone", "-q", str(up), str(student))
    assert coursework.init(student) == ["assets/badge.svg", "notebooks/02_page.ipynb", "release/exercises/01_ex.ipynb"]
    return up, student


def _upstream_commit(up: Path, edits: dict) -> None:
    for rel, (index, source) in edits.items():
        nb = nbformat.read(up / rel, as_version=4)
        nb.cells[index].source = source
        nbformat.write(nb, up / rel)
    _git(up, "commit", "-qam", "v2")


def _answer(student: Path, text: str) -> None:
    path = student / "mywork" / "release" / "exercises" / "01_ex.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells[2].source = text
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", text="运行过\n")]
    nb.metadata["language_info"] = {"name": "python", "version": "3.12.1"}  # 学生机器上的 JupyterLab 写的
    nbformat.write(nb, path)


def test_the_copy_carries_this_kernels_language_info_and_nothing_else_changes(clones):
    up, student = clones
    for rel in ("notebooks/02_page.ipynb", "release/exercises/01_ex.ipynb"):
        course, copy = (nbformat.read(root / rel, as_version=4) for root in (up, student / "mywork"))
        assert copy.metadata["language_info"] == IPythonKernel.language_info  # 内核启动时写的那一份，带版本号
        assert copy.cells == course.cells and copy.metadata.get("kernelspec") == course.metadata.get("kernelspec")
    assert (student / "mywork" / "assets" / "badge.svg").read_bytes() == b"<svg/>"


def test_make_update_keeps_the_answer_and_brings_the_new_version(clones, capsys):
    up, student = clones
    _answer(student, "answer = softmax(x)")
    _upstream_commit(up, {"release/exercises/01_ex.ipynb": (1, "题目：算 softmax（新版）"),
                          "notebooks/02_page.ipynb": (2, "讲解（新版）")})
    assert coursework.update(student) == 0
    out = capsys.readouterr().out
    ex = nbformat.read(student / "mywork" / "release" / "exercises" / "01_ex.ipynb", as_version=4)
    assert ex.cells[1].source == "题目：算 softmax（新版）"
    assert ex.cells[2].source == "answer = softmax(x)" and ex.cells[2].outputs[0]["text"] == "运行过\n"
    page = nbformat.read(student / "mywork" / "notebooks" / "02_page.ipynb", as_version=4)
    assert page.cells[2].source == "讲解（新版）"
    assert _git(student, "status", "--porcelain") == ""  # 课程文件一个没动，副本被 git 忽略
    # 合并后的副本带着这个环境的内核的 language_info：JupyterLab 打开它时不会先改写一遍、标成“有改动”
    for nb in (ex, page):
        assert nb.metadata["language_info"] == IPythonKernel.language_info, nb.metadata["language_info"]

    backups = list((student / "mywork" / "备份").glob("*/release/exercises/01_ex.ipynb"))
    assert len(backups) == 1 and "answer = softmax(x)" in backups[0].read_text(encoding="utf-8")
    assert "取到了课程的新版本" in out and "课程更新了 1 个单元格" in out
    # 再运行一次：没有新版本，什么都不改
    before = (student / "mywork" / "release" / "exercises" / "01_ex.ipynb").read_bytes()
    assert coursework.update(student) == 0
    assert "课程已经是最新版本" in capsys.readouterr().out
    assert (student / "mywork" / "release" / "exercises" / "01_ex.ipynb").read_bytes() == before


def test_make_update_after_a_manual_git_pull_still_merges_from_the_copys_version(clones, capsys):
    """学生自己 git pull 过（副本还是旧版本）：合并的 base 是副本记下的版本，不是 pull 之前的 HEAD。"""
    up, student = clones
    _answer(student, "answer = softmax(x)")
    _upstream_commit(up, {"release/exercises/01_ex.ipynb": (1, "题目（新版）")})
    _git(student, "pull", "-q", "--ff-only")
    assert coursework.pending_update(student) == ["release/exercises/01_ex.ipynb"]
    assert coursework.update(student) == 0
    ex = nbformat.read(student / "mywork" / "release" / "exercises" / "01_ex.ipynb", as_version=4)
    assert ex.cells[1].source == "题目（新版）" and ex.cells[2].source == "answer = softmax(x)"
    assert NOTE_MARK not in json.dumps(ex, ensure_ascii=False)
    assert coursework.pending_update(student) == []


def test_answers_written_in_the_course_files_are_rescued(clones, capsys):
    """以前的 make lab 直接打开课程文件：学生在 release/ 上作答过。make update 把答案存进副本和备份，还原课程文件，再更新。"""
    up, student = clones
    (student / "mywork" / "release" / "exercises" / "01_ex.ipynb").unlink()
    course_file = student / "release" / "exercises" / "01_ex.ipynb"
    nb = nbformat.read(course_file, as_version=4)
    nb.cells[2].source = "answer = 42"
    nbformat.write(nb, course_file)
    _upstream_commit(up, {"release/exercises/01_ex.ipynb": (1, "题目（新版）")})
    assert coursework.update(student) == 0
    assert _git(student, "status", "--porcelain") == ""
    ex = nbformat.read(student / "mywork" / "release" / "exercises" / "01_ex.ipynb", as_version=4)
    assert ex.cells[1].source == "题目（新版）" and ex.cells[2].source == "answer = 42"
    saved = list((student / "mywork" / "备份").glob("*/课程文件里的改动/release/exercises/01_ex.ipynb"))
    assert len(saved) == 1 and "answer = 42" in saved[0].read_text(encoding="utf-8")


def test_make_update_refuses_when_the_student_changed_other_course_files(clones, capsys):
    up, student = clones
    (student / ".gitignore").write_text("/mywork/\n*.tmp\n", encoding="utf-8")
    assert coursework.update(student) == 1
    out = capsys.readouterr().out
    assert "没有进行" in out and ".gitignore" in out and "git checkout --" in out
    assert (student / ".gitignore").read_text(encoding="utf-8").endswith("*.tmp\n")  # 什么都没动


def test_make_update_waits_for_the_courses_open_jupyterlab(clones, capsys, monkeypatch, tmp_path):
    """JupyterLab 开着时，开着的页面会在自动保存时把并进来的新内容覆盖掉（它还会问“文件已更改”，默认按钮是覆盖）：
    make update 先说清楚、什么也不动；--force 照样更新。别的目录的 JupyterLab 不算。"""
    up, student = clones
    _answer(student, "answer = softmax(x)")
    _upstream_commit(up, {"release/exercises/01_ex.ipynb": (1, "题目（新版）")})
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    other = {"pid": os.getpid(), "url": "http://127.0.0.1:9999/", "root_dir": str(tmp_path / "elsewhere"), "port": 9999}
    (runtime / "jpserver-1.json").write_text(json.dumps(other), encoding="utf-8")
    assert coursework.open_labs(student) == []
    mine = dict(other, url="http://127.0.0.1:8888/", root_dir=str(student / "mywork"), port=8888)
    (runtime / "jpserver-2.json").write_text(json.dumps(mine), encoding="utf-8")
    before = (student / "mywork" / "release" / "exercises" / "01_ex.ipynb").read_bytes()
    assert coursework.update(student) == 1
    out = capsys.readouterr().out
    assert "没有进行" in out and "http://127.0.0.1:8888/" in out and "--force" in out, out
    assert (student / "mywork" / "release" / "exercises" / "01_ex.ipynb").read_bytes() == before
    assert coursework.pending_update(student) == []  # 也没有 git pull
    assert coursework.update(student, force=True) == 0
    ex = nbformat.read(student / "mywork" / "release" / "exercises" / "01_ex.ipynb", as_version=4)
    assert ex.cells[1].source == "题目（新版）" and ex.cells[2].source == "answer = softmax(x)"
    assert "点“撤回”" in capsys.readouterr().out


# ---------------------------------------------------------------- make lab：学生和助教的设置

def test_lab_command_opens_the_copy_with_the_student_profile(tmp_path, monkeypatch):
    monkeypatch.delenv("JUPYTER_CONFIG_PATH", raising=False)
    cmd, env = coursework.lab_command(tmp_path)
    assert env["JUPYTER_CONFIG_PATH"].split(os.pathsep) == [str(tmp_path / "deploy/jupyterhub/jupyter-config/student-local"),
                                                            str(tmp_path / "deploy/jupyterhub/jupyter-config/student")]
    assert f"--ServerApp.root_dir={tmp_path / 'mywork'}" in cmd
    assert "--LabApp.default_url=/lab/workspaces/lecture07/tree/notebooks/00_start_here.ipynb" in cmd
    cmd, env = coursework.lab_command(tmp_path, ta=True)
    assert env["JUPYTER_CONFIG_PATH"] == str(tmp_path / "deploy/jupyterhub/jupyter-config/grader")
    assert f"--ServerApp.root_dir={tmp_path}" in cmd
    assert "--LabApp.default_url=/lab/workspaces/lecture07-ta" in cmd  # 和学生的工作区分开：不恢复成课程的文件


def test_make_lab_hides_the_assignment_list_that_needs_the_hubs_exchange():
    """make lab 的一层（hub 不用）只关掉 Assignment List 和只有它的 Nbgrader 菜单：JupyterLab 把几层 page_config 合在一起，
    学生 profile 关掉的教师工具照样关着，Validate（validate-assignment）还在。"""
    from jupyter_server.config_manager import recursive_update
    merged: dict = {}
    for layer in (coursework.PROFILES["student"], coursework.LOCAL_STUDENT_LAYER):  # 优先级从低到高
        recursive_update(merged, json.loads((REPO_ROOT / layer / "labconfig" / "page_config.json").read_text()))
    off = {k for k, v in merged["disabledExtensions"].items() if v}
    assert {"@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:menu", "@jupyter/nbgrader:formgrader",
            "@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:course-list"} <= off
    assert "@jupyter/nbgrader:validate-assignment" not in off
    hub = json.loads((REPO_ROOT / coursework.PROFILES["student"] / "labconfig" / "page_config.json").read_text())
    assert "@jupyter/nbgrader:assignment-list" not in hub["disabledExtensions"]  # hub 的学生用它取作业


@pytest.mark.parametrize("role", ["student", "grader"])
def test_profiles_choose_chinese_and_no_news(role):
    """学生（make lab 和 hub 的学生）和助教（make lab-ta 和 hub 的助教）的设置：界面中文，不问要不要订阅新闻。"""
    labconfig = REPO_ROOT / "deploy" / "jupyterhub" / "jupyter-config" / role / "labconfig"
    overrides = json.loads((labconfig / "default_setting_overrides.json").read_text(encoding="utf-8"))
    assert overrides["@jupyterlab/translation-extension:plugin"]["locale"] == "zh_CN"
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    disabled = json.loads((labconfig / "page_config.json").read_text(encoding="utf-8"))["disabledExtensions"]
    teacher = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:course-list", "@jupyter/nbgrader:create-assignment"}
    assert disabled.get("@jupyterlab/apputils-extension:announcements") is True
    assert (teacher <= {k for k, v in disabled.items() if v}) == (role == "student")


def test_the_chinese_language_pack_is_pinned_and_installed():
    from importlib import metadata
    pins = {line.split("==")[0].lower(): line.split("==")[1].split()[0]
            for line in (REPO_ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines() if "==" in line}
    assert "jupyterlab-language-pack-zh-cn" in pins, "requirements.txt 里要固定 jupyterlab-language-pack-zh-CN"
    assert metadata.version("jupyterlab-language-pack-zh-CN") == pins["jupyterlab-language-pack-zh-cn"]
