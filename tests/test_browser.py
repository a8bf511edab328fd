"""浏览器测试：真的 JupyterLab + 无头 Chromium（Playwright），学生看到的就是这里检查的。

在临时的课程目录（notebook 的副本）里启动 JupyterLab，打开一个章节 notebook 和一个发布版练习，
全部运行；检查章节 notebook 没有错误输出、未作答的练习只有预期的 NotImplementedError、
nbgrader 的 Validate 按钮在，并且在答案版上报告通过。截图存到 test-artifacts/（git 忽略）。

需要：pip 包 playwright（requirements-dev.txt）和系统的 Chromium（Debian：apt-get install chromium；
其他位置用环境变量 CHROMIUM_PATH 指定）。缺任何一个都会跳过并说明原因，绝不会悄悄通过。
"""
from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from free_port import free_port  # noqa: E402

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO_ROOT / "test-artifacts"
CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# 欢迎 notebook（学生的第一站）和一个小的章节 notebook
SECTIONS = [p for p in ("notebooks/00_start_here.ipynb", "notebooks/02_self_attention.ipynb")
            if (REPO_ROOT / p).exists()]
EXERCISE = "exercises/01_attention_by_hand.ipynb"
RUN_TIMEOUT_MS = 300_000

# 在页面里读当前 notebook 的模型（不读 DOM：JupyterLab 4 只渲染看得见的单元格）
JS_STATE = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  if (!w || !w.content || !w.content.model || !w.sessionContext) return null;
  const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
  return {
    path: w.context.path,
    kernel: kernel ? kernel.status : null,
    cells: w.content.model.toJSON().cells.map(c => ({
      type: c.cell_type,
      count: c.execution_count === undefined ? null : c.execution_count,
      nbgrader: (c.metadata || {}).nbgrader || null,
      outputs: (c.outputs || []).map(o => ({
        type: o.output_type, ename: o.ename || null, name: o.name || null,
        text: (o.text !== undefined ? [].concat(o.text).join('') : (o.evalue || '')).slice(0, 400)})),
    })),
  };
}"""
# 从第 start 个单元格往下运行全部；返回的 Promise 在执行结束时才兑现
JS_RUN_BELOW = """async ([start, timeoutMs]) => {
  const w = window.jupyterapp.shell.currentWidget;
  w.content.activeCellIndex = start;
  const timeout = new Promise((_, reject) =>
    setTimeout(() => reject(new Error(`运行超过 ${timeoutMs / 1000} 秒`)), timeoutMs));
  await Promise.race([window.jupyterapp.commands.execute('notebook:run-all-below'), timeout]);
}"""


def _digests() -> dict[str, str]:
    paths = [*SECTIONS, f"release/{EXERCISE}", f"solutions/{EXERCISE}"]
    return {p: hashlib.sha256((REPO_ROOT / p).read_bytes()).hexdigest() for p in paths if (REPO_ROOT / p).exists()}


def _copy_course(dest: Path) -> Path:
    """只拷贝测试需要的东西：浏览器改动的是副本，仓库里的 notebook 永远不会被改。"""
    for name in ("lib", "notebooks", "release", "solutions", "source"):
        if (REPO_ROOT / name).exists():
            shutil.copytree(REPO_ROOT / name, dest / name,
                            ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    for name in ("nbgrader_config.py", "pyproject.toml", "requirements.txt"):
        shutil.copy2(REPO_ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """在临时课程目录里启动 JupyterLab；结束时按 PID 关掉。"""
    pytest.importorskip("playwright.sync_api", reason="没有安装 playwright：pip install -r requirements-dev.txt")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"找不到 Chromium（{CHROMIUM}）：Debian 上 apt-get install chromium，或用 CHROMIUM_PATH 指定")
    base = tmp_path_factory.mktemp("browser")
    course = _copy_course(base / "course")
    # 全新的设置目录，只写一条：不弹“要不要订阅 Jupyter 新闻”的通知（它会挡住截图，还会访问网络）
    notification = base / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True)
    notification.write_text('{"fetchNews": "false", "checkForUpdates": false}', encoding="utf-8")
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"), "JUPYTER_CONFIG_DIR": str(base / "config"),
           "JUPYTER_RUNTIME_DIR": str(base / "runtime"), "CI": "true", "OMP_NUM_THREADS": "1",
           "MPLBACKEND": "Agg"}
    env.pop("PYTHONPATH", None)  # notebook 的引导单元格要自己找到副本里的 lib/
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={course}", "--LabApp.expose_app_in_browser=True",
           "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(base / "jupyter.log", "wb")
    # 在课程根目录启动：否则 formgrader / Validate 找不到 nbgrader_config.py
    server = subprocess.Popen(cmd, cwd=course, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab 没能启动：\n{(base / 'jupyter.log').read_text(errors='replace')[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("JupyterLab 120 秒内没有响应")
            time.sleep(0.5)
        yield {"url": url, "token": token, "course": course, "base": base, "digests": _digests()}
    finally:
        os.kill(server.pid, signal.SIGTERM)  # 服务器收到 SIGTERM 会先关掉它启动的内核
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def browser_context(lab):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(lab["base"] / "chromium-profile"),  # 全新的空用户目录
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900})
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(scope="module")
def page(lab, browser_context):
    """一个 JupyterLab 页面，各个测试在里面依次打开自己的 notebook（每开一个新页面，JupyterLab 都要重新加载，
    本机约 6 个核·秒）。"""
    page = browser_context.new_page()
    page.set_default_timeout(RUN_TIMEOUT_MS)
    page.goto(f"{lab['url']}/lab?reset&token={lab['token']}")  # ?reset：不恢复旧的工作区
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands.hasCommand('docmanager:open')",
                           timeout=120_000)
    page.evaluate("() => window.jupyterapp.restored")
    yield page
    page.close()


def _open(page, path: str):
    """在 JupyterLab 里打开 path（像在文件浏览器里双击），等到它的内核空闲。"""
    page.evaluate("async (path) => { await window.jupyterapp.commands.execute('docmanager:open', {path}); }", path)
    page.wait_for_function(
        "(path) => { const w = window.jupyterapp.shell.currentWidget;"
        " return w && w.context && w.context.path === path && w.sessionContext.session"
        " && w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle'; }",
        arg=path, timeout=120_000)
    return page


def _run_everything(page) -> dict:
    """像学生一样“运行全部”；遇到错误时 JupyterLab 会停下，就从下一个没运行的单元格接着运行。"""
    start, tries = 0, 0
    while True:
        page.evaluate(JS_RUN_BELOW, [start, RUN_TIMEOUT_MS])
        state = page.evaluate(JS_STATE)
        # 包括 start 本身：机器很忙时，起点那个单元格也可能还没有执行编号（CI 里见过一次）
        not_run = [i for i, c in enumerate(state["cells"]) if c["type"] == "code" and c["count"] is None and i >= start]
        if not not_run or tries > len(state["cells"]):  # 一直运行不了的单元格：交给调用者的断言报告
            return state
        start, tries = not_run[0], tries + 1


def _errors(state) -> list[tuple[int, str, str]]:
    return [(i, o["ename"], o["text"]) for i, c in enumerate(state["cells"]) for o in c["outputs"]
            if o["type"] == "error"]


def _screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path))
    return path


@pytest.mark.parametrize("section", SECTIONS)
def test_section_notebook_runs_without_errors(page, section):
    _open(page, section)
    state = _run_everything(page)
    code = [c for c in state["cells"] if c["type"] == "code"]
    assert code and all(c["count"] is not None for c in code), "有代码单元格没有运行"
    assert _errors(state) == []
    stderr = [o["text"] for c in code for o in c["outputs"] if o["type"] == "stream" and o["name"] == "stderr"]
    assert stderr == [], f"章节 notebook 不该有 stderr 输出（警告、进度条）：{stderr}"
    assert "本地运行：已找到课程根目录" in code[0]["outputs"][0]["text"]
    # 截图停在引导单元格之后第一个有输出的演示上
    demo = next(i for i, c in enumerate(state["cells"]) if c["type"] == "code" and c["outputs"] and i > 1)
    page.evaluate("async (i) => { const nb = window.jupyterapp.shell.currentWidget.content;"
                  " nb.activeCellIndex = i; await nb.scrollToCell(nb.widgets[i], 'start'); }", demo)
    _screenshot(page, f"browser_{Path(section).stem}.png")


def _need(rel: str, lab) -> str:
    if not (lab["course"] / rel).exists():
        pytest.skip(f"{rel} 还没有生成（make release）")
    return rel


def test_unanswered_exercise_raises_only_notimplementederror(lab, page):
    _open(page, _need(f"release/{EXERCISE}", lab))
    toolbar = page.locator(".jp-NotebookPanel:visible .jp-NotebookPanel-toolbar")
    assert toolbar.get_by_text("Validate", exact=True).count() == 1, "nbgrader 的 Validate 按钮不在工具栏上"
    state = _run_everything(page)
    errors = _errors(state)
    assert errors, "未作答的练习应该至少抛出一个 NotImplementedError"
    # 没写完的函数抛出 NotImplementedError；还没填写的变量（发布版里的 None）让公开测试抛出 NotAnswered
    unexpected = [(i, name, text) for i, name, text in errors if name not in ("NotImplementedError", "NotAnswered")]
    assert unexpected == [], f"除了 NotImplementedError / NotAnswered 之外的错误：{unexpected}"
    graded = {i for i, c in enumerate(state["cells"]) if c["nbgrader"] and
              (c["nbgrader"].get("solution") or c["nbgrader"].get("grade"))}
    assert {i for i, _, _ in errors} <= graded, "NotImplementedError 只应出现在答题或测试单元格里"
    code = [c for c in state["cells"] if c["type"] == "code"]
    assert all(c["count"] is not None for c in code), "出错之后的单元格也都应该运行过"
    _screenshot(page, "browser_release_exercise.png")


def test_validate_button_reports_success_on_the_solution(lab, page):
    _open(page, _need(f"solutions/{EXERCISE}", lab))
    button = page.locator(".jp-NotebookPanel:visible .jp-NotebookPanel-toolbar").get_by_text("Validate", exact=True)
    assert button.count() == 1, "nbgrader 的 Validate 按钮不在工具栏上"
    button.click()
    result = page.locator(".validation-success, .validation-failed").first
    result.wait_for(timeout=RUN_TIMEOUT_MS)
    shot = _screenshot(page, "browser_validate_solution.png")
    text = result.inner_text()
    page.keyboard.press("Escape")  # 关掉结果对话框
    assert "Success! Your notebook passes all the tests." in text, f"Validate 没有通过（截图 {shot}）：{text[:2000]}"


def test_repository_notebooks_were_not_touched(lab):
    """浏览器只改了临时副本：仓库里的 notebook 一个字节都没变。"""
    assert _digests() == lab["digests"]
