"""学生的 JupyterLab（make lab）和助教的（make lab-ta）：真的 make、真的 JupyterLab、无头 Chromium（Playwright）。

在一个临时的课程克隆里（它的“上游”是另一个临时仓库，测试在那里做一次假的课程更新）运行 `make lab`，用它在终端里
打印的网址打开浏览器（浏览器的语言是英文：中文界面必须来自课程的设置，而不是浏览器或家目录），检查：
- 打开的是 00_start_here，菜单是中文，没有“要不要订阅 Jupyter 新闻”的弹窗，没有 nbgrader 的教师工具，Validate 还在；
- 打开每一页和每个练习、等过自动保存之后，`git status --porcelain` 是空的（学生的东西都在 git 忽略的 mywork/ 里）；
- 学生在浏览器里作答、运行，上游改了一页和一个练习之后 `make update`：答案和运行结果留着，新内容进来了；
- `make lab-ta` 的 JupyterLab 有 formgrader。
一次 `make lab` 的 JupyterLab 供前三项共用。截图（1366×800）在 test-artifacts/student_lab_*.png。

自动保存：JupyterLab 默认每 120 秒自动保存一次；这里在（测试自己的、空的）用户设置里把间隔设成 1 秒，机制相同。
要 playwright（requirements-dev.txt）、系统的 Chromium，中文字形要 fonts-noto-cjk（make system-deps）；缺前两样时跳过并说明。
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from free_port import free_port  # noqa: E402

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO_ROOT / "test-artifacts"
CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
# 学生的克隆里要有的东西（make lab、make update 用到的全部）
COURSE_PATHS = ("Makefile", "lib", "notebooks", "release", "assets", "deploy/jupyterhub/jupyter-config",
                "nbgrader_config.py", "pyproject.toml", "requirements.txt", ".gitignore")
GIT_ID = ["-c", "user.name=课程组", "-c", "user.email=course@example.edu"]
EXERCISE = "release/exercises/01_attention_by_hand.ipynb"
PAGE = "notebooks/02_self_attention.ipynb"
ANSWER_ID = "ex1_hand_answer"
ANSWER = "import numpy as np\nscores_1 = np.array([[0.5, 0.5], [0.0, 0.7]])\nweights_1 = None\noutputs_1 = None\nprint('我的答案')"
UPSTREAM_NOTE = "（课程更新：这一句是新版本加的。）"
ENGLISH_MENUS = {"File", "Edit", "View", "Run", "Kernel", "Tabs", "Settings", "Help"}
TEACHER_COMMANDS = ("nbgrader:open-formgrader", "nbgrader:open-course-list", "nbgrader:open-create-assignment")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *GIT_ID, *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """上游仓库（课程组，装着这份仓库的课程文件）和学生的 git clone；学生的 .venv 就是跑测试的这个环境。"""
    base = tmp_path_factory.mktemp("student-lab")
    up = base / "upstream"
    for rel in COURSE_PATHS:
        src, dst = REPO_ROOT / rel, up / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
        else:
            shutil.copy2(src, dst)
    _git(base, "init", "-q", str(up))
    _git(up, "add", "-A")
    _git(up, "commit", "-qm", "课程 v1")
    student = base / "student"
    _git(base, "clone", "-q", str(up), str(student))
    (student / ".venv").symlink_to(Path(sys.prefix))
    with open(student / ".git" / "info" / "exclude", "a", encoding="utf-8") as f:
        f.write(".venv\n")  # 链接不是文件夹，.gitignore 的 .venv/ 管不到它（真的克隆里 .venv 是文件夹）
    return {"base": base, "upstream": up, "student": student}


def _make(course, *args: str, env: dict | None = None, **kw):
    """在学生的克隆里运行 make（-o：不重装 .venv，它就是跑测试的环境）。"""
    return ["make", "-o", ".venv/.installed-student", *args], dict(cwd=course["student"], env=env, **kw)


def _lab_env(course) -> dict:
    """像一台新电脑：空的 Jupyter 家目录设置；只有一条测试自己的用户设置——自动保存间隔 1 秒（默认 120 秒）。"""
    base = course["base"]
    settings = base / "user-settings" / "@jupyterlab" / "docmanager-extension" / "plugin.jupyterlab-settings"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text('{"autosave": true, "autosaveInterval": 1}', encoding="utf-8")
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(base / "user-settings"), "JUPYTER_CONFIG_DIR": str(base / "home"),
           "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"), "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
           "CI": "true", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    for key in ("PYTHONPATH", "JUPYTER_CONFIG_PATH"):
        env.pop(key, None)
    return env


def _start(course, target: str, log_name: str):
    """运行 make lab / make lab-ta，等它在终端里打印网址；返回 (进程, 打印的网址, 日志文件)。"""
    port = free_port()
    lab_args = (f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port={port} --ServerApp.port_retries=0 "
                "--LabApp.expose_app_in_browser=True")
    log_path = course["base"] / log_name
    log = open(log_path, "wb")
    cmd, kw = _make(course, target, f"LAB_ARGS={lab_args}", env=_lab_env(course))
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **kw)
    printed = re.compile(rf"http://127\.0\.0\.1:{port}/\S*\?token=\w+")
    deadline = time.monotonic() + 180
    while not (m := printed.search(log_path.read_text(errors="replace"))):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc, log)
            pytest.fail(f"make {target} 没有打印网址：\n{log_path.read_text(errors='replace')[-3000:]}")
        time.sleep(0.3)
    return proc, m.group(0), log


def _stop(proc, log) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # make 和它启动的 JupyterLab 在同一个进程组里（start_new_session）
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    log.close()


@pytest.fixture(scope="module")
def browser(course):
    pytest.importorskip("playwright.sync_api", reason="没有安装 playwright：pip install -r requirements-dev.txt")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"找不到 Chromium（{CHROMIUM}）：Debian 上 apt-get install chromium，或用 CHROMIUM_PATH 指定")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                               args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking"])
        try:
            yield b
        finally:
            b.close()


def _new_page(browser, url: str):
    """浏览器的语言是英文（en-US）：界面是不是中文只取决于课程的设置。"""
    context = browser.new_context(viewport={"width": 1366, "height": 800}, locale="en-US")
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(url)
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands.hasCommand('docmanager:open')")
    page.evaluate("() => window.jupyterapp.restored")
    return page


@pytest.fixture(scope="module")
def student_lab(course, browser):
    proc, url, log = _start(course, "lab", "make-lab.log")
    page = _new_page(browser, url)
    try:
        yield {"url": url, "page": page, "log": course["base"] / "make-lab.log"}
    finally:
        page.context.close()
        _stop(proc, log)


def _shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))
    return ARTIFACTS / name


def _current_path(page) -> str | None:
    return page.evaluate("() => { const w = window.jupyterapp.shell.currentWidget;"
                         " return w && w.context ? w.context.path : null; }")


def _open(page, path: str) -> None:
    """像在文件浏览器里双击一样打开 path，等到它的内核空闲。"""
    page.evaluate("async (path) => { await window.jupyterapp.commands.execute('docmanager:open', {path}); }", path)
    page.wait_for_function(
        "(path) => { const w = window.jupyterapp.shell.currentWidget;"
        " return w && w.context && w.context.path === path && w.sessionContext.session"
        " && w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle'; }", arg=path)


def _wait_saved(page) -> None:
    """等到当前 notebook 没有未保存的改动（有改动时，1 秒的自动保存会把它写到磁盘上）。"""
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000)


def _wait_on_disk(path: Path, index: int, what, timeout: float) -> nbformat.NotebookNode | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nb = nbformat.read(path, as_version=4)
        if what(nb.cells[index]):
            return nb
        time.sleep(0.5)
    return None


def _saved_with_output(page, path: Path, index: int, answer: str, timeout: float = 120):
    """磁盘上的副本：先等自动保存把答案写进去（学生没按 Ctrl+S），再等第 index 个单元格的输出。

    JupyterLab 的一个竞争：自动保存正好在代码运行、输出还没到的时候开始，输出在保存进行中到达，保存结束时模型被标成
    “没有改动”，这次的输出就要等下一次改动才存（机器很忙、保存很慢时才见得到；CI 上出现过）。所以答案必须由自动
    保存写进去；输出在 30 秒内没存进去、模型又显示没有改动时，像学生一样按一次 Ctrl+S。"""
    saved = _wait_on_disk(path, index, lambda c: c.source == answer, timeout)
    assert saved is not None, (f"{timeout:.0f} 秒之内，{path.name} 第 {index} 个单元格的答案没有被自动保存到磁盘上："
                               "机器太忙（再跑一次），或者 JupyterLab 的自动保存没有打开（看 _lab_env 的用户设置）")
    nb = _wait_on_disk(path, index, lambda c: bool(c.get("outputs")), 30)
    if nb is None and not page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty"):
        page.evaluate("async () => { await window.jupyterapp.commands.execute('docmanager:save'); }")
        nb = _wait_on_disk(path, index, lambda c: bool(c.get("outputs")), timeout)
    assert nb is not None, f"{path.name} 第 {index} 个单元格的运行结果没有存到磁盘上（自动保存和 Ctrl+S 都没有）"
    return nb


def _close(page) -> None:
    """关掉当前 notebook 并关掉它的内核（已经保存过：不会弹“要不要保存”）。"""
    page.evaluate("async () => { const w = window.jupyterapp.shell.currentWidget;"
                  " await w.sessionContext.shutdown(); w.dispose(); }")


def _menu_labels(page) -> list[str]:
    return page.locator("#jp-MainMenu .lm-MenuBar-itemLabel").all_inner_texts()


def test_printed_url_opens_the_start_page_in_chinese_without_teacher_tools(student_lab):
    page = student_lab["page"]
    assert "/tree/notebooks/00_start_here.ipynb?token=" in student_lab["url"]
    page.wait_for_function("() => { const w = window.jupyterapp.shell.currentWidget;"
                           " return w && w.context && w.context.path === 'notebooks/00_start_here.ipynb'; }")
    labels = _menu_labels(page)
    assert {"文件", "编辑", "内核", "帮助"} <= set(labels) and not ENGLISH_MENUS & set(labels), labels
    has = page.evaluate("(ids) => ids.map(id => window.jupyterapp.commands.hasCommand(id))",
                        [*TEACHER_COMMANDS, "nbgrader:open-assignment-list"])
    # 自己的电脑上没有交换服务：Assignment List 只会报英文错误，make lab 连同 Nbgrader 菜单一起关掉（hub 上在）
    assert has == [False, False, False, False], f"教师工具和 Assignment List 应该都没有：{has}"
    assert "Nbgrader" not in labels, labels
    page.wait_for_timeout(3000)  # 新闻的询问在界面就绪之后弹出：给它时间
    shot = _shot(page, "student_lab_start.png")
    assert page.locator(".Toastify__toast").count() == 0, f"有通知弹出（截图 {shot}）"
    assert page.get_by_text("Jupyter 新闻").count() == 0 and page.get_by_text("Jupyter news").count() == 0
    log = student_lab["log"].read_text(errors="replace")
    assert "第一次运行：把各页和练习复制到了 mywork/" in log and "make update" in log


def test_opening_every_page_changes_no_tracked_file(course, student_lab):
    page, student = student_lab["page"], course["student"]
    pages = sorted(p.relative_to(student / "mywork").as_posix() for pattern in ("notebooks/*.ipynb", "release/exercises/*.ipynb")
                   for p in (student / "mywork").glob(pattern))
    assert len(pages) >= 14, pages
    before = {rel: (student / "mywork" / rel).read_bytes() for rel in pages}
    for rel in pages:
        _open(page, rel)
        # 内核的 language_info 到了以后（带这台机器的 Python 版本）标签页仍然没有“有改动”的标记：副本里存的就是这一份
        page.wait_for_function("() => (window.jupyterapp.shell.currentWidget.content.model"
                               ".getMetadata('language_info') || {}).version !== undefined")
        dirty = page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty")
        assert not dirty, f"{rel} 一打开就显示有改动：副本的 language_info 和内核的不一样（lib/coursework.for_this_kernel）"
        if rel == EXERCISE:  # 练习的工具栏上有 nbgrader 的 Validate（学生要用的那一个）
            toolbar = page.locator(".jp-NotebookPanel:visible .jp-NotebookPanel-toolbar")
            assert toolbar.get_by_text("Validate", exact=True).count() == 1
            _shot(page, "student_lab_exercise.png")
        _wait_saved(page)
        _close(page)
    page.wait_for_timeout(2500)  # 比自动保存的间隔长
    status = _git(student, "status", "--porcelain", "--untracked-files=all")
    assert status == "", f"打开各页之后课程的文件变了，或者多出了没被忽略的文件：\n{status}"
    # 只打开、不改：副本里的文件一个字节都没变（没有“要不要保存”，也没有自动保存）
    changed = [rel for rel in pages if (student / "mywork" / rel).read_bytes() != before[rel]]
    assert not changed, f"只是打开，副本里的这些文件就被改写了：{changed}"


def _type_answer(page, grade_id: str, text: str) -> int:
    index = page.evaluate("(gid) => window.jupyterapp.shell.currentWidget.content.model.toJSON().cells"
                          ".findIndex(c => ((c.metadata || {}).nbgrader || {}).grade_id === gid)", grade_id)
    assert index > 0, f"找不到答题单元格 {grade_id}"
    page.evaluate("async (i) => { const nb = window.jupyterapp.shell.currentWidget.content;"
                  " nb.activeCellIndex = i; await nb.scrollToCell(nb.widgets[i], 'start'); }", index)
    cell = page.locator(".jp-NotebookPanel:visible .jp-Cell").nth(index)
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(text)  # 像粘贴一样输入
    page.keyboard.press("Shift+Enter")  # 运行这个单元格
    page.wait_for_function("(i) => { const c = window.jupyterapp.shell.currentWidget.content.model.toJSON().cells[i];"
                           " return c.outputs && c.outputs.length > 0; }", arg=index)
    return index


def _upstream_adds_a_sentence(up: Path, rel: str, cell_id: str) -> None:
    nb = nbformat.read(up / rel, as_version=4)
    cell = next(c for c in nb.cells if c.id == cell_id)
    cell.source += "\n\n" + UPSTREAM_NOTE
    nbformat.write(nb, up / rel)


def test_make_update_keeps_the_answer_and_brings_the_new_version(course, student_lab):
    page, student, up = student_lab["page"], course["student"], course["upstream"]
    _open(page, EXERCISE)
    index = _type_answer(page, ANSWER_ID, ANSWER)
    _wait_saved(page)  # 学生没按 Ctrl+S：自动保存把答案写进了副本
    mine = _saved_with_output(page, student / "mywork" / EXERCISE, index, ANSWER)
    assert mine.cells[index].source == ANSWER and "我的答案" in mine.cells[index].outputs[0]["text"]
    # 课程组改了一页和这个练习（都是答题单元格以外的地方），提交到上游
    statement = nbformat.read(up / EXERCISE, as_version=4).cells[index - 1]  # 答题单元格上面的题目
    assert statement.cell_type == "markdown" and "nbgrader" not in statement.metadata
    exercise_cell = statement.id
    _upstream_adds_a_sentence(up, EXERCISE, exercise_cell)
    page_cell = next(c.id for c in nbformat.read(up / PAGE, 4).cells if c.cell_type == "markdown" and "##" in c.source)
    _upstream_adds_a_sentence(up, PAGE, page_cell)
    _git(up, "commit", "-qam", "课程 v2：改了一页和一个练习")

    # JupyterLab 还开着：make update 说清楚、什么都不动（开着的页面自动保存时会把新内容覆盖掉）
    before = (student / "mywork" / EXERCISE).read_bytes()
    cmd, kw = _make(course, "update", env=_lab_env(course))
    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert refused.returncode != 0 and "JupyterLab 还开着" in refused.stdout, refused.stdout + refused.stderr
    assert (student / "mywork" / EXERCISE).read_bytes() == before
    cmd, kw = _make(course, "update", "FORCE=1", env=_lab_env(course))  # 学生确实要现在更新，之后重新加载页面
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "取到了课程的新版本" in result.stdout, result.stdout
    merged = nbformat.read(student / "mywork" / EXERCISE, as_version=4)
    answer = next(c for c in merged.cells if (c.metadata.get("nbgrader") or {}).get("grade_id") == ANSWER_ID)
    assert answer.source == ANSWER and "我的答案" in answer.outputs[0]["text"], "学生的答案或运行结果丢了"
    assert any(c.id == exercise_cell and c.source.endswith(UPSTREAM_NOTE) for c in merged.cells), "练习的新版本没有进来"
    new_page = nbformat.read(student / "mywork" / PAGE, as_version=4)
    assert any(c.id == page_cell and c.source.endswith(UPSTREAM_NOTE) for c in new_page.cells), "新版本的页面没有进来"
    assert _git(student, "status", "--porcelain", "--untracked-files=all") == ""
    assert list((student / "mywork" / "备份").glob(f"*/{EXERCISE}")), "改写之前的副本应该有备份"

    # 学生在 JupyterLab 里重新加载这个练习：答案和新的一句都在
    page.evaluate("async () => { await window.jupyterapp.shell.currentWidget.context.revert(); }")
    cells = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.model.toJSON().cells.map(c => c.source)")
    cells = ["".join(c) if isinstance(c, list) else c for c in cells]
    assert ANSWER in cells and any(c.endswith(UPSTREAM_NOTE) for c in cells)
    page.evaluate("async (i) => { const nb = window.jupyterapp.shell.currentWidget.content;"
                  " nb.activeCellIndex = i; await nb.scrollToCell(nb.widgets[i], 'center'); }", index)
    _shot(page, "student_lab_after_update.png")


def test_ta_lab_has_formgrader(course, browser):
    proc, url, log = _start(course, "lab-ta", "make-lab-ta.log")
    try:
        base, token = url.split("/lab/")[0], url.split("?token=")[1]
        with urllib.request.urlopen(f"{base}/formgrader?token={token}", timeout=60) as r:
            assert r.status == 200
        page = _new_page(browser, url)
        try:
            assert page.evaluate("() => window.jupyterapp.commands.hasCommand('nbgrader:open-formgrader')")
            assert "内核" in _menu_labels(page)
            page.evaluate("() => window.jupyterapp.commands.execute('nbgrader:open-formgrader')")
            frame = page.frame_locator("iframe[src*='formgrader']")
            frame.get_by_text("Manage Assignments").first.wait_for()
            _shot(page, "student_lab_ta_formgrader.png")
            # 助教的工作区和学生的分开：学生开过的标签页没有在这里恢复成课程的文件（否则自动保存会改写它们）
            opened = page.evaluate("() => Array.from(window.jupyterapp.shell.widgets('main'))"
                                   ".filter(w => w.context).map(w => w.context.path)")
            assert opened == [], opened
            page.wait_for_timeout(2500)
            assert _git(course["student"], "status", "--porcelain", "--untracked-files=no") == ""
        finally:
            page.context.close()
    finally:
        _stop(proc, log)
