"""整门课在一个真的 JupyterHub 上走一遍：真的 hub、真的代理（npm 的 configurable-http-proxy）、真的系统用户、真的浏览器。

配置就是 deploy/jupyterhub/jupyterhub_config.py（dummy 认证），环境由 deploy/jupyterhub/local_hub.py 的
prepare() 搭（和 make hub 一样）：一位教师、三名学生，都是 useradd 建的系统用户。作业的发布、取、交、收集、反馈全部经过
交换服务 ngshare（hub 服务，以它自己的系统用户运行，数据在它自己的 700 目录里）；课程名单由 ngshare-roster 服务从
hub 的组同步过去。

1. 教师 `nbgrader release_assignment exercises`（用 hub 签发的 token，和在 hub 的终端里一样）；
2. 每名学生在浏览器里登录，在 Assignment List 里 Fetch，打开练习 01，在答题单元格里输入答案
   （两人输入参考答案，一人输入全零的错答案），保存，点 Validate，再 Submit；学生打不开 formgrader，教师能；
3. 教师 `nbgrader collect exercises`、`python -m lib.grading grade exercises --submissions submitted/`、
   `nbgrader release_feedback exercises`；
4. 每名学生在 Assignment List 里 Fetch Feedback，打开反馈，看到 grades.csv 里自己的分数。

第二个测试是隔离：学生 A 用自己的 token 对学生 B 的文件试遍交换的每一种调用（列出、下载 B 的提交，冒充 B 提交，
读、改 B 的反馈），再直接用 HTTP 调 ngshare 的接口（直连和经过代理），每一次都要被服务拒绝（冒充 B 的那次提交
只能记在 A 自己名下）；A 也读不到 ngshare 的数据目录；B 的提交和反馈一个字节都不变。测试数出试了几次、拒绝了几次。

第三个测试是交换服务的小型压力测试：20 名学生（20 个系统用户、20 个 hub 用户）先取作业，在练习 01 里写下只属于自己的
标记，停在一个屏障前；屏障一开，每人同时提交两次（像连点两下 Submit），第二次的标记不同。教师 `nbgrader collect`
之后：一个不少（20 人都收到）、一个不多（ngshare 里每人正好两次提交，收集到每人一份）、没有串（每人收到的是自己
最后一次提交的内容）。每名学生以自己的 uid、用自己的 hub token 提交。最后照 README 在 hub 运行中备份 ngshare，
检查备份完整。

要 root（建用户、替用户启动服务器）、jupyterhub（deploy/jupyterhub/requirements.txt）、ngshare-exchange
（deploy/jupyterhub/requirements-no-deps.txt）、ngshare 的 venv 和 configurable-http-proxy（make hub-deps）、
playwright 和系统的 Chromium。make test 会把它们都装好；缺了就带着原因跳过。
"""
from __future__ import annotations

import base64
import contextlib
import csv
import grp
import importlib.util
import json
import multiprocessing as mp
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[1]
DEPLOY = REPO_ROOT / "deploy" / "jupyterhub"
ARTIFACTS = REPO_ROOT / "test-artifacts"
CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
PREFIX = "l07hub"
INSTRUCTOR = f"{PREFIX}i1"
STUDENTS = [f"{PREFIX}s1", f"{PREFIX}s2", f"{PREFIX}s3"]
WRONG = f"{PREFIX}s2"  # 这名学生输入错答案
GROUP = f"{PREFIX}-graders"
NGSHARE_USER = f"{PREFIX}ng"  # 交换服务 ngshare 的系统用户
PASSWORD = "hub-test-password"
NOTEBOOK = "01_attention_by_hand"
ANSWER_ID = "ex1_hand_answer"
TIMEOUT_MS = 240_000
# 和 README“在 JupyterHub 上开课”里教师的那一行相同
COPY_FEEDBACK_KEYS = 'for d in submitted/*/exercises; do cp "$d/timestamp.txt" "feedback/${d#submitted/}/"; done'
# README 里备份交换服务的那一行（$D：ngshare 的数据目录，$B：备份目录）：先用 SQLite 的在线备份拷数据库，再打包文件
BACKUP_NGSHARE = ("python3 -c 'import sqlite3, sys; d = sqlite3.connect(sys.argv[2]); sqlite3.connect(sys.argv[1]).backup(d); "
                  "d.close()' \"$D/ngshare.db\" \"$B/ngshare.db\" && tar -C \"$D\" -czf \"$B/ngshare-files.tar.gz\" files")

sys.path.insert(0, str(DEPLOY))
import local_hub  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parent))
from free_port import free_port  # noqa: E402


def _answers() -> dict[str, str]:
    sol = json.loads((REPO_ROOT / "solutions" / "exercises" / f"{NOTEBOOK}.ipynb").read_text(encoding="utf-8"))
    right = "".join(next(c for c in sol["cells"]
                         if (c["metadata"].get("nbgrader") or {}).get("grade_id") == ANSWER_ID)["source"])
    wrong = ("import numpy as np\nscores_1 = np.zeros((2, 2))\nweights_1 = np.zeros((2, 2))\n"
             "outputs_1 = np.zeros((2, 2))\n")
    return {s: (wrong if s == WRONG else right) for s in STUDENTS}


def _remove_leftovers(names, group: str) -> None:
    """上一次被中途打断（kill、Ctrl-C）的测试没来得及删的测试用户、家目录和组：先删掉，从干净的状态开始。
    这些名字只给测试用（前缀 l07），不会是真的用户；local_hub 自己从不改已有的用户。"""
    for name in _kill_user_procs(names):
        subprocess.run(["userdel", "--remove", name], capture_output=True)
    subprocess.run(["groupdel", group], capture_output=True)


def _kill_user_procs(names) -> list[str]:
    """SIGKILL 这些用户的全部进程（按 uid）；返回其中存在的用户。"""
    existing = []
    for name in names:
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        existing.append(name)
    return existing


def _user_procs(name: str) -> list[int]:
    uid = pwd.getpwnam(name).pw_uid
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if d.stat().st_uid == uid:
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


def _ngshare_url(env: dict) -> str:
    """学生和助教的服务器连 ngshare 用的地址（和 jupyterhub_config.py 的 NGSHARE_URL 一样算）。"""
    return f"http://127.0.0.1:{env.get('LECTURE07_HUB_NGSHARE_PORT', '10101')}/services/ngshare"


def _token(hub_url: str, name: str, password: str) -> str:
    """像用户在 hub 的 Token 页面上那样，用用户名和密码向 hub 要一个 API token（dummy 认证）。"""
    req = urllib.request.Request(f"{hub_url}/hub/api/users/{name}/tokens", method="POST",
                                 data=json.dumps({"auth": {"username": name, "password": password},
                                                  "note": "tests/test_hub.py", "expires_in": 3600}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["token"]


def _ngshare(base: str, token: str | None, method: str, path: str, data: dict | None = None) -> tuple[int, str]:
    """直接调用 ngshare 的 REST 接口；返回 (HTTP 状态, 响应正文)。"""
    req = urllib.request.Request(f"{base}/{path}", method=method,
                                 data=urllib.parse.urlencode(data).encode() if data is not None else None,
                                 headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _ngshare_ok(base: str, token: str, method: str, path: str, data: dict | None = None) -> dict:
    status, body = _ngshare(base, token, method, path, data)
    assert status == 200, f"ngshare {method} /{path}：HTTP {status} {body[:500]}"
    return json.loads(body)


def _as_instructor(env: dict, *args: str, user: str = INSTRUCTOR, group: str = GROUP,
                   timeout: int = 600, umask: int = -1, token: str | None = None) -> subprocess.CompletedProcess:
    """以教师的系统用户在课程目录里运行命令（就像教师在 hub 的终端里运行：token 就是终端里的 JUPYTERHUB_API_TOKEN）。"""
    entry = pwd.getpwnam(user)
    venv_bin = str(Path(sys.prefix) / "bin")
    run_env = {"HOME": entry.pw_dir, "USER": user, "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
               "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
               "JUPYTER_CONFIG_PATH": str(DEPLOY / "jupyter-config" / "grader"),
               "LECTURE07_NGSHARE_URL": _ngshare_url(env),
               "LECTURE07_COURSE_ID": env["LECTURE07_HUB_COURSE_ID"],
               "LECTURE07_COURSE_ROOT": env["LECTURE07_HUB_COURSE_ROOT"]}
    if token:
        run_env.update({"JUPYTERHUB_USER": user, "JUPYTERHUB_API_TOKEN": token})
    return subprocess.run(list(args), cwd=env["LECTURE07_HUB_COURSE_ROOT"], env=run_env, user=entry.pw_uid,
                          group=entry.pw_gid, extra_groups=[grp.getgrnam(group).gr_gid], capture_output=True,
                          text=True, timeout=timeout, umask=umask)


@pytest.fixture(scope="module")
def system_users():
    """root、useradd；让测试建的用户走得到 venv 的 Python（结束时改回原来的权限）。

    这个模块的测试共用它：它们在同一个 pytest 进程里（--dist loadscope），不会一个改回权限时另一个还在用。
    """
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("要以 root 运行：测试要 useradd 建系统用户，hub 要替每个用户启动服务器（CI 以 root 运行）")
    for tool in ("useradd", "userdel", "groupadd", "prlimit"):
        if not shutil.which(tool):
            pytest.skip(f"没有 {tool}（Debian：apt-get install passwd util-linux）")
    changed = local_hub.make_traversable(local_hub.venv_python(), Path(sys.prefix) / "ngshare" / "bin" / "python",
                                         DEPLOY / "jupyter-config", Path(CHROMIUM))
    changed += local_hub.hide_private(REPO_ROOT)  # 和 make hub 一样：学生走得进仓库的 .venv，但读不到答案
    try:
        yield
    finally:
        local_hub.restore_modes(changed)


def _need_hub_tools() -> None:
    pytest.importorskip("jupyterhub", reason="没有安装 jupyterhub：pip install -r deploy/jupyterhub/requirements.txt")
    pytest.importorskip("jupyterhub_idle_culler", reason="没有安装 jupyterhub-idle-culler（deploy/jupyterhub/requirements.txt）")
    # 只查在不在、不导入：ngshare_exchange 导入时就记下 JUPYTERHUB_USER（测试的子进程要在设好环境之后才导入它）
    if importlib.util.find_spec("ngshare_exchange") is None:
        pytest.skip("没有安装 ngshare-exchange：pip install --no-deps -r deploy/jupyterhub/requirements-no-deps.txt"
                    "（make setup）")
    if not (Path(sys.prefix) / "ngshare" / "bin" / "python").exists():
        pytest.skip("没有交换服务 ngshare 的 venv（.venv/ngshare/）：make hub-deps")
    proxy = Path(sys.prefix) / "chp" / "node_modules" / ".bin" / "configurable-http-proxy"
    if not proxy.exists() and not shutil.which("configurable-http-proxy"):
        pytest.skip("没有 configurable-http-proxy：make hub-deps（npm install --prefix .venv/chp configurable-http-proxy）")


def _wait_for_hub(proc: subprocess.Popen, url: str, log: Path, seconds: float = 120) -> None:
    """等到 hub 的 API 回答 200；进程先退出或超时都让测试失败，附上日志的结尾。"""
    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None:
            pytest.fail(f"JupyterHub 没能启动：\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/hub/api/", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"JupyterHub {seconds:.0f} 秒内没有响应")
        time.sleep(0.5)


@contextlib.contextmanager
def _running_hub(env: dict, base: Path, users: list[str], password: str, instructor: str, students: list[str]):
    """用 env 在前台起 jupyterhub（和 make hub 一样），等到 hub 回答、ngshare-roster 把名单同步进 ngshare；
    yield 地址等；结束时停掉 hub、代理、各服务和各用户的进程。"""
    port = free_port()
    env.update({"LECTURE07_HUB_URL": f"http://127.0.0.1:{port}", "LECTURE07_HUB_HUB_PORT": str(free_port()),
                "LECTURE07_HUB_PROXY_API_PORT": str(free_port()), "LECTURE07_HUB_NGSHARE_PORT": str(free_port())})
    hub_proc = None
    log = open(base / "hub.log", "wb")
    try:
        hub_proc = subprocess.Popen([str(Path(sys.prefix) / "bin" / "jupyterhub"), "-f",
                                     str(DEPLOY / "jupyterhub_config.py")],
                                    cwd=env["LECTURE07_HUB_DATA"], env={**os.environ, **env},
                                    stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        _wait_for_hub(hub_proc, url, base / "hub.log")
        # ngshare-roster 启动时同步一次名单：等到 ngshare 里这门课的学生齐了（教师能列出学生，说明教师也在名单里）
        ngshare, course = _ngshare_url(env), env["LECTURE07_HUB_COURSE_ID"]
        token = _token(url, instructor, password)
        deadline = time.monotonic() + 120
        while True:
            status, body = _ngshare(ngshare, token, "GET", f"students/{course}")
            if status == 200 and {s["username"] for s in json.loads(body)["students"]} == set(students):
                break
            if time.monotonic() > deadline:
                pytest.fail(f"ngshare-roster 120 秒内没有把名单同步进 ngshare（最后一次：HTTP {status} {body[:300]}）\n"
                            f"{(base / 'hub.log').read_text(errors='replace')[-3000:]}")
            time.sleep(1)
        yield {"url": url, "env": env, "base": base, "log": base / "hub.log", "ngshare": ngshare,
               "instructor_token": token}
    finally:
        # 先结束各人的服务器和内核、hub 的空闲回收服务和交换服务：不然 hub 在 SIGTERM 后一个个地等它们体面退出，
        # 机器忙时要 30 多秒（CI 的 hub.log：回收服务从 SIGTERM 到结束约 30 秒）
        _kill_user_procs(users)
        if hub_proc is not None:
            subprocess.run(["pkill", "-KILL", "-P", str(hub_proc.pid), "-f", "jupyterhub_idle_culler"],
                           capture_output=True)
            _kill_user_procs([env["LECTURE07_HUB_NGSHARE_USER"]])
            os.kill(hub_proc.pid, signal.SIGTERM)  # hub 退出前停掉代理（和还在的单用户服务器）
            try:
                hub_proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(hub_proc.pid, signal.SIGKILL)
                hub_proc.wait(timeout=10)
        log.close()
        _kill_user_procs([*users, env["LECTURE07_HUB_NGSHARE_USER"]])  # hub 退出后还留下的进程


@pytest.fixture(scope="module")
def hub(system_users):
    _need_hub_tools()
    pytest.importorskip("playwright.sync_api", reason="没有安装 playwright：pip install -r requirements-dev.txt")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"找不到 Chromium（{CHROMIUM}）：Debian 上 apt-get install chromium")
    base = Path(tempfile.mkdtemp(prefix="l07hub-", dir="/tmp"))
    users = [INSTRUCTOR, *STUDENTS]
    try:
        _remove_leftovers([*users, NGSHARE_USER], GROUP)
        env = local_hub.prepare(base, STUDENTS, [INSTRUCTOR], homes=base / "home", graders_group=GROUP,
                                password=PASSWORD, ngshare_user=NGSHARE_USER)
        env["LECTURE07_HUB_EXPOSE_APP"] = "1"
        try:
            with _running_hub(env, base, users, PASSWORD, INSTRUCTOR, STUDENTS) as running:
                yield running
        finally:
            if (base / "hub.log").exists():
                ARTIFACTS.mkdir(exist_ok=True)
                shutil.copy(base / "hub.log", ARTIFACTS / "hub.log")
    finally:
        for name in [*users, NGSHARE_USER]:
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        subprocess.run(["groupdel", GROUP], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)



def _login(context, hub, name: str):
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(f"{hub['url']}/hub/login")
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", PASSWORD)
    page.click("#login_submit")
    return page


def _wait_lab(page, name: str):
    page.wait_for_url(f"**/user/{name}/lab**", timeout=TIMEOUT_MS)
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands.hasCommand("
                           "'nbgrader:open-assignment-list')", timeout=TIMEOUT_MS)


def _assignment_list(page):
    page.evaluate("() => window.jupyterapp.commands.execute('nbgrader:open-assignment-list')")
    return page.locator("#released_assignments_list"), page.locator("#fetched_assignments_list"), \
        page.locator("#submitted_assignments_list")


def _shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))
    return ARTIFACTS / name


def _student_works(page, name: str, answer: str) -> str:
    """Fetch → 打开练习 → 输入答案 → 保存 → Validate → Submit；返回 Validate 的结果文字。"""
    released, fetched, submitted = _assignment_list(page)
    released.locator(".list_item", has_text="exercises").get_by_role("button", name="Fetch").click()
    fetched.get_by_role("button", name="exercises").click()
    fetched.get_by_text(NOTEBOOK, exact=True).click()
    page.wait_for_function(
        "(nb) => { const w = window.jupyterapp.shell.currentWidget;"
        " return w && w.context && w.context.path === `exercises/${nb}.ipynb` && w.sessionContext.session"
        " && w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle'; }", arg=NOTEBOOK)
    index = page.evaluate(
        "(gid) => window.jupyterapp.shell.currentWidget.content.model.toJSON().cells"
        ".findIndex(c => ((c.metadata || {}).nbgrader || {}).grade_id === gid)", ANSWER_ID)
    assert index > 0, f"{NOTEBOOK} 里找不到答题单元格 {ANSWER_ID}"
    cell = page.locator(".jp-NotebookPanel:visible .jp-Cell").nth(index)
    cell.scroll_into_view_if_needed()
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(answer)  # 像粘贴一样输入
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
    source = page.evaluate(f"() => window.jupyterapp.shell.currentWidget.content.model.cells.get({index})"
                           ".sharedModel.getSource()")
    assert source == answer
    page.locator(".lm-TabBar-tab", has_text="Assignments").click()
    fetched.locator(".nested_list_item", has_text=NOTEBOOK).get_by_role("button", name="Validate").click()
    dialog = page.locator(".jp-Dialog", has_text="Validation Results")
    dialog.wait_for()
    result = dialog.inner_text()
    _shot(page, f"hub_validate_{name}.png")
    dialog.get_by_role("button").last.click()
    fetched.locator(".list_item", has_text="exercises").first.get_by_role("button", name="Submit").click()
    submitted.locator(".list_item", has_text="exercises").first.wait_for()
    return result


def test_class_on_jupyterhub(hub):
    from playwright.sync_api import sync_playwright
    env, timings = hub["env"], {}
    course_id, token = env["LECTURE07_HUB_COURSE_ID"], hub["instructor_token"]
    t0 = time.monotonic()
    p = _as_instructor(env, str(Path(sys.prefix) / "bin" / "nbgrader"), "release_assignment", "exercises", token=token)
    assert p.returncode == 0, p.stdout + p.stderr
    # 发布的作业在 ngshare 里（ngshare_exchange 出错时只写日志、退出码仍是 0：所以向服务本身核对）
    files = _ngshare_ok(hub["ngshare"], token, "GET", f"assignment/{course_id}/exercises?list_only=true")["files"]
    assert f"{NOTEBOOK}.ipynb" in {f["path"] for f in files}, files
    timings["release"] = time.monotonic() - t0
    answers = _answers()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-quic"])
        try:
            # 四个人几乎同时登录：hub 同时启动四个服务器
            t = time.monotonic()
            contexts = {n: browser.new_context(viewport={"width": 1400, "height": 900})
                        for n in [*STUDENTS, INSTRUCTOR]}
            pages = {n: _login(ctx, hub, n) for n, ctx in contexts.items()}
            for n, page in pages.items():
                _wait_lab(page, n)
            timings["login_spawn_4"] = time.monotonic() - t
            # 页面配置里 news 是关掉的（news_url=None，空字符串不算）：服务器不去取新闻；弹窗本身见下面反馈那一步的检查
            page_config = json.loads(pages[STUDENTS[0]].locator("#jupyter-config-data").text_content())
            assert page_config.get("news", {}).get("disabled") is True, page_config.get("news")
            # 学生的设置和本地的 make lab 是同一份（jupyter-config/student/）：中文菜单，没有教师工具；助教的都在
            labels = pages[STUDENTS[0]].locator("#jp-MainMenu .lm-MenuBar-itemLabel").all_inner_texts()
            assert "文件" in labels and "File" not in labels, labels
            tools = ("() => ['nbgrader:open-formgrader', 'nbgrader:open-create-assignment', 'nbgrader:open-assignment-list']"
                     ".map(id => window.jupyterapp.commands.hasCommand(id))")
            assert pages[STUDENTS[0]].evaluate(tools) == [False, False, True]
            assert pages[INSTRUCTOR].evaluate(tools) == [True, True, True]

            # 资源限制确实加在了学生的服务器上
            for name in STUDENTS:
                server = [pid for pid in _user_procs(name)
                          if b"jupyterhub-singleuser" in Path(f"/proc/{pid}/cmdline").read_bytes()]
                assert server, f"找不到 {name} 的单用户服务器进程"
                limits = Path(f"/proc/{server[0]}/limits").read_text()
                assert "Max processes" in limits and " 512 " in limits.split("Max processes")[1].split("\n")[0]
                as_line = limits.split("Max address space")[1].split("\n")[0].split()
                assert as_line[0] == str(2 * 1024 ** 3), limits
                hub_log = hub["log"].read_text(errors="replace")
                line = next(x for x in hub_log.splitlines() if f"{name} 的服务器（pid {server[0]}）" in x)
                assert "prlimit --nproc=512 --as=2147483648" in line, line
                if "lecture07/" in line:  # cgroup 可写时：服务器在这名学生自己的 cgroup 里
                    assert f"lecture07/{name}" in Path(f"/proc/{server[0]}/cgroup").read_text(), line

            # 助教的服务器以 umask 002 运行（collect/grade 写的文件组可写，几位助教共用课程目录）；学生的不变
            def umask(name):
                pid = next(pid for pid in _user_procs(name)
                           if b"jupyterhub-singleuser" in Path(f"/proc/{pid}/cmdline").read_bytes())
                return next(x.split()[1] for x in Path(f"/proc/{pid}/status").read_text().splitlines()
                            if x.startswith("Umask:"))
            assert umask(INSTRUCTOR) == "0002"
            assert all(umask(name) != "0002" for name in STUDENTS)

            # formgrader：学生没有，教师有
            for name in STUDENTS:
                r = pages[name].request.get(f"{hub['url']}/user/{name}/formgrader")
                assert r.status == 404, f"学生 {name} 不该有 formgrader（HTTP {r.status}）"
            r = pages[INSTRUCTOR].request.get(f"{hub['url']}/user/{INSTRUCTOR}/formgrader/manage_assignments")
            assert r.status == 200, f"教师打不开 formgrader（HTTP {r.status}）"

            t = time.monotonic()
            for name in STUDENTS:
                result = _student_works(pages[name], name, answers[name])
                # 练习 1 的三个测试单元格（scores_1 / weights_1 / outputs_1）只检查格式和自洽：答案对时通过
                if name != WRONG:
                    assert "scores_1" not in result and "weights_1" not in result, result[:3000]
                assert "The following cell failed" in result  # 其余练习还没做
            timings["students_fetch_answer_validate_submit_3"] = time.monotonic() - t
            # 每名学生的服务器 + 内核（Validate 从头运行了练习 01）在 cgroup 里记下的内存峰值
            for name in STUDENTS:
                for f in (Path(f"/sys/fs/cgroup/memory/lecture07/{name}/memory.max_usage_in_bytes"),
                          Path(f"/sys/fs/cgroup/lecture07/{name}/memory.peak")):
                    if f.exists():
                        timings[f"peak_MiB_{name}"] = int(f.read_text()) / 2 ** 20

            # 教师：collect → 我们的 grade → release_feedback
            t = time.monotonic()
            nbgrader = str(Path(sys.prefix) / "bin" / "nbgrader")
            p = _as_instructor(env, nbgrader, "collect", "exercises", token=token)
            assert p.returncode == 0, p.stdout + p.stderr
            p = _as_instructor(env, str(Path(sys.prefix) / "bin" / "python"), "-m", "lib.grading", "grade",
                               "exercises", "--submissions", "submitted/", "--jobs", "2")
            assert p.returncode == 0, p.stdout + p.stderr
            course = Path(env["LECTURE07_HUB_COURSE_ROOT"])
            rows = list(csv.DictReader((course / "grades.csv").open(encoding="utf-8-sig")))
            graded = [r for r in rows if r["notebook"]]
            assert {r["student_id"] for r in graded} == set(STUDENTS), rows
            assert len(graded) == 6 * len(STUDENTS) and all(r["status"] == "ok" for r in graded), \
                [r for r in graded if r["status"] != "ok"]
            # 从 ngshare 收集来的提交只有 notebook 和 timestamp.txt：不应隔离任何东西
            others = [r for r in rows if not r["notebook"]]
            assert not others, others
            mine = {r["student_id"]: r for r in rows if r["notebook"] == NOTEBOOK}
            right = {float(mine[s]["score"]) for s in STUDENTS if s != WRONG}
            assert len(right) == 1, f"同样的答案应该同分：{mine}"
            assert float(mine[WRONG]["score"]) < right.pop()
            # release_feedback 要在 feedback/学号/exercises/ 里找到提交的 timestamp.txt（ngshare 按它找到是哪一次提交；
            # nbgrader generate_feedback 会复制它，lib.grading 目前不复制）：README 里的同一行命令
            p = _as_instructor(env, "sh", "-c", COPY_FEEDBACK_KEYS)
            assert p.returncode == 0, p.stdout + p.stderr
            p = _as_instructor(env, nbgrader, "release_feedback", "exercises", token=token)
            assert p.returncode == 0, p.stdout + p.stderr
            for name in STUDENTS:  # 每名学生最后一次提交的反馈都在 ngshare 里
                stamp = (course / "submitted" / name / "exercises" / "timestamp.txt").read_text().strip()
                query = urllib.parse.urlencode({"timestamp": stamp, "list_only": "true"})
                answer = _ngshare_ok(hub["ngshare"], token, "GET", f"feedback/{course_id}/exercises/{name}?{query}")
                assert len([f for f in answer["files"] if f["path"].endswith(".html")]) == 6, (name, answer)
            timings["collect_grade_release_feedback"] = time.monotonic() - t

            # 学生：Fetch Feedback，打开反馈，看到自己的分数
            t = time.monotonic()
            for name in STUDENTS:
                page = pages[name]
                # 像学生一样点作业列表的刷新按钮（不重新加载页面：重新加载 JupyterLab 要约 6 个核·秒）
                _, _, submitted = _assignment_list(page)
                page.locator("#refresh_assignments_list").click()
                item = submitted.locator(".list_item", has_text="exercises").first
                item.get_by_role("button", name="Fetch Feedback").click()
                # “(view feedback)” 让文件浏览器转到反馈文件夹；双击 HTML 文件，在 JupyterLab 里打开
                item.get_by_text("view feedback").click()
                page.locator(".jp-DirListing-item", has_text=f"{NOTEBOOK}.html").dblclick()
                want = f"{NOTEBOOK}：得分 {float(mine[name]['score'])} / {float(mine[name]['max_score'])}"
                page.frame_locator(".jp-HTMLViewer:visible iframe").get_by_text(want).first.wait_for()
                shot = _shot(page, f"hub_feedback_{name}.png")
                # 页面已经开了一分多钟：没有“要不要接收 Jupyter 新闻”的弹窗挡着（announcements 插件已禁用）
                assert page.get_by_text("official Jupyter news").count() == 0, f"新闻弹窗还在（截图 {shot}）"
                assert page.get_by_text("Jupyter 新闻").count() == 0, f"新闻弹窗还在（截图 {shot}）"
            timings["students_fetch_feedback_3"] = time.monotonic() - t
        finally:
            browser.close()
    timings["total"] = time.monotonic() - t0
    print("用时（秒）：" + "，".join(f"{k} {v:.1f}" for k, v in timings.items()))


# ----------------------------------------------------------------------------- 学生之间的隔离（交换服务）
CROSS_A, CROSS_B = STUDENTS[0], STUDENTS[1]


def _as_exchange_user(name: str, environ: dict, fn, args: tuple, results) -> None:
    """子进程：变成这个系统用户（setuid），环境和他在 hub 的终端里一样（environ），运行 fn(*args)，结果放进 results。"""
    try:
        user = pwd.getpwnam(name)
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)
        for key in ("JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "JUPYTERHUB_USER", "JUPYTERHUB_API_TOKEN"):
            os.environ.pop(key, None)
        os.environ.update({"HOME": user.pw_dir, "USER": name, **environ})
        os.chdir(user.pw_dir)
        results.put((name, "ok", fn(*args)))
    except BaseException as e:  # 子进程的任何失败都报告给父进程
        results.put((name, f"{type(e).__name__}: {e}", None))


def _student_config():
    """学生服务器加载的那份 nbgrader 设置（deploy/jupyterhub/jupyter-config/student/，交换走 ngshare）。"""
    from traitlets.config.loader import PyFileConfigLoader
    return PyFileConfigLoader("nbgrader_config.py", path=str(DEPLOY / "jupyter-config" / "student")).load_config()


def _run_exchange(kind: str, overrides: dict):
    """用学生的设置加上 overrides，经 nbgrader 的 ExchangeFactory 运行一次交换操作（kind：List、Collect……）。"""
    from traitlets.config import Config
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange import ExchangeFactory
    c = _student_config()
    c.merge(Config(overrides))
    op = getattr(ExchangeFactory(config=c), kind)(coursedir=CourseDirectory(config=c),
                                                  authenticator=Authenticator(config=c), config=c)
    return op, op.start()


def _a_tries_b(b: str, b_stamp: str, work: str) -> list[dict]:
    """以学生 A 的身份（A 的 uid、A 的 token），但在客户端冒充 B（JUPYTERHUB_USER=B），对 B 的文件试遍交换的每种调用。
    记下每次调用时 ngshare 的每个回答（方法、路径、HTTP 状态、正文），交给父进程判断。"""
    from ngshare_exchange.exchange import Exchange as NgshareExchange
    seen: list = []
    check = NgshareExchange._ngshare_api_check_error

    def spy(self, response, url):  # 插件处理 ngshare 的每一个回答都经过这里
        seen.append([response.request.method, url, response.status_code, response.text])
        return check(self, response, url)
    NgshareExchange._ngshare_api_check_error = spy
    assert NgshareExchange.username == b  # 插件以为自己是 B
    work = Path(work)
    nb = json.loads((work / "released.ipynb").read_text(encoding="utf-8"))
    (work / "exercises").mkdir()
    nb["cells"][0]["source"] = "FORGED-SUBMISSION-BY-A"
    (work / "exercises" / f"{NOTEBOOK}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    forged = work / "course" / "feedback" / b / "exercises"
    forged.mkdir(parents=True)
    (forged / f"{NOTEBOOK}.html").write_text("<html>FORGED-FEEDBACK-BY-A</html>", encoding="utf-8")
    (forged / "timestamp.txt").write_text(b_stamp, encoding="utf-8")
    # fetch_feedback 按本地缓存里的提交记录去取：A 在自己的缓存里伪造一条“B 的提交”
    from jupyter_core.paths import jupyter_data_dir
    cache = Path(jupyter_data_dir()) / "nbgrader_cache" / os.environ["LECTURE07_COURSE_ID"]
    (cache / f"{b}+exercises+{b_stamp}").mkdir(parents=True, exist_ok=True)
    attempts = [
        ("列出 B 的提交（nbgrader list --inbound --student B）", "List",
         {"ExchangeList": {"inbound": True}, "CourseDirectory": {"student_id": b, "assignment_id": "exercises"}}),
        ("列出所有人的提交（nbgrader list --inbound）", "List", {"ExchangeList": {"inbound": True}}),
        ("下载 B 的提交（nbgrader collect）", "Collect",
         {"CourseDirectory": {"root": str(work / "course"), "assignment_id": "exercises"}}),
        ("读 B 的反馈（nbgrader fetch_feedback，冒充 B）", "FetchFeedback",
         {"CourseDirectory": {"assignment_id": "exercises"}, "Exchange": {"assignment_dir": str(work)}}),
        ("改写 B 的反馈（nbgrader release_feedback --student B）", "ReleaseFeedback",
         {"CourseDirectory": {"root": str(work / "course"), "assignment_id": "exercises", "student_id": b}}),
        ("冒充 B 提交（nbgrader submit，JUPYTERHUB_USER=B）", "Submit",
         {"CourseDirectory": {"assignment_id": "exercises"}, "Exchange": {"assignment_dir": str(work)}}),
    ]
    out = []
    for label, kind, overrides in attempts:
        seen.clear()
        error = result = None
        try:
            op, result = _run_exchange(kind, overrides)
            if kind == "Submit":
                result = op.timestamp
        except Exception as e:  # nbgrader 的 ExchangeError 等：记下，由父进程判断
            error = f"{type(e).__name__}: {e}"
        out.append({"label": label, "kind": kind, "responses": [list(r) for r in seen], "error": error,
                    "result": result if isinstance(result, (str, type(None))) else repr(result)})
    # A 的工作目录里不应出现任何取回来的东西（B 的提交或反馈）
    out.append({"label": "files", "files": sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file())})
    return out


def test_student_cannot_reach_another_students_files(hub):
    """学生 A 对学生 B 的提交和反馈：交换的每一种调用（经 nbgrader 的交换插件）、直接调 ngshare 的接口（直连和经过
    代理，带 A 自己的 token）、直接读 ngshare 的数据目录，全部被拒绝；B 的提交和反馈一个字节都没变。"""
    env, url, ngshare = hub["env"], hub["url"], hub["ngshare"]
    course_id, teacher = env["LECTURE07_HUB_COURSE_ID"], hub["instructor_token"]
    a_token, b_token = _token(url, CROSS_A, PASSWORD), _token(url, CROSS_B, PASSWORD)
    # 准备：作业已发布（单独运行这个测试时在这里发布），B 交一份带暗记的作业，教师给这次提交发带暗记的反馈
    if "exercises" not in _ngshare_ok(ngshare, teacher, "GET", f"assignments/{course_id}")["assignments"]:
        p = _as_instructor(env, str(Path(sys.prefix) / "bin" / "nbgrader"), "release_assignment", "exercises",
                           token=teacher)
        assert p.returncode == 0, p.stdout + p.stderr
    secret = f"SECRET-OF-{CROSS_B}-{os.urandom(4).hex()}"
    released = _ngshare_ok(ngshare, b_token, "GET", f"assignment/{course_id}/exercises")["files"]
    notebook = base64.b64decode(next(f["content"] for f in released if f["path"] == f"{NOTEBOOK}.ipynb"))
    b_nb = json.loads(notebook)
    b_nb["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "source": secret})
    b_files = [{"path": f"{NOTEBOOK}.ipynb", "content": base64.b64encode(json.dumps(b_nb).encode()).decode()}]
    b_stamp = _ngshare_ok(ngshare, b_token, "POST", f"submission/{course_id}/exercises",
                          {"files": json.dumps(b_files)})["timestamp"]
    feedback_secret = f"FEEDBACK-OF-{CROSS_B}-{os.urandom(4).hex()}"
    _ngshare_ok(ngshare, teacher, "POST", f"feedback/{course_id}/exercises/{CROSS_B}", {
        "timestamp": b_stamp, "files": json.dumps([{"path": f"{NOTEBOOK}.html", "content": base64.b64encode(
            f"<html>{feedback_secret}</html>".encode()).decode()}])})
    stamp_q = urllib.parse.urlencode({"timestamp": b_stamp})

    def b_state():
        """教师眼里 B 的提交列表、最新一次提交的内容、这次提交的反馈。"""
        subs = _ngshare_ok(ngshare, teacher, "GET", f"submissions/{course_id}/exercises/{CROSS_B}")["submissions"]
        latest = _ngshare_ok(ngshare, teacher, "GET", f"submission/{course_id}/exercises/{CROSS_B}")
        fb = _ngshare_ok(ngshare, teacher, "GET", f"feedback/{course_id}/exercises/{CROSS_B}?{stamp_q}")
        return subs, latest["timestamp"], latest["files"], fb["files"]
    before = b_state()
    assert before[1] == b_stamp and any(secret.encode() in base64.b64decode(f["content"]) for f in before[2])
    # 对照：这些接口本身是通的，B 读得到自己的反馈，A 列得出自己的提交（下面的拒绝是因为身份，不是接口坏了）
    own = _ngshare_ok(ngshare, b_token, "GET", f"feedback/{course_id}/exercises/{CROSS_B}?{stamp_q}")
    assert feedback_secret.encode() in base64.b64decode(own["files"][0]["content"])
    _ngshare_ok(ngshare, a_token, "GET", f"submissions/{course_id}/exercises/{CROSS_A}")
    a_before = {s["timestamp"] for s in _ngshare_ok(
        ngshare, teacher, "GET", f"submissions/{course_id}/exercises/{CROSS_A}")["submissions"]}

    tried, refused, notes = [], [], []

    def leaks(text: str) -> bool:
        return secret in text or feedback_secret in text or any(
            secret.encode() in base64.b64decode(m) or feedback_secret.encode() in base64.b64decode(m)
            for m in _b64_fields(text))

    # 1. 交换插件的每一种调用：以 A 的 uid、A 的 token，在 A 的家目录里，客户端冒充 B
    a_home = Path(pwd.getpwnam(CROSS_A).pw_dir)
    work = a_home / f"cross-{os.urandom(3).hex()}"
    work.mkdir()
    (work / "released.ipynb").write_bytes(notebook)
    shutil.chown(work, CROSS_A, CROSS_A)
    shutil.chown(work / "released.ipynb", CROSS_A, CROSS_A)
    environ = {"JUPYTERHUB_USER": CROSS_B, "JUPYTERHUB_API_TOKEN": a_token, "LECTURE07_NGSHARE_URL": ngshare,
               "LECTURE07_COURSE_ID": course_id, "JUPYTER_CONFIG_PATH": str(DEPLOY / "jupyter-config" / "student")}
    import nbgrader.exchange  # noqa: F401  （先在父进程里导入，子进程 fork 之后直接用）
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    proc = ctx.Process(target=_as_exchange_user, args=(CROSS_A, environ, _a_tries_b, (CROSS_B, b_stamp, str(work)),
                                                       results))
    proc.start()
    name, status, attempts = results.get(timeout=300)
    proc.join(timeout=60)
    assert status == "ok", status
    files = attempts.pop()["files"]
    submit_stamp = None
    for att in attempts:
        tried.append(att["label"])
        assert att["responses"], f"{att['label']}：插件根本没有调用 ngshare（{att}）"
        assert not any(leaks(r[3]) for r in att["responses"]), f"{att['label']}：ngshare 的回答里有 B 的内容"
        if att["kind"] == "Submit":
            # ngshare 不看客户端自称是谁：这次提交只能记在 A 自己名下（下面向服务核对），B 的提交不变
            posts = [r for r in att["responses"] if r[0] == "POST"]
            assert len(posts) == 1 and posts[0][1] == f"/submission/{course_id}/exercises" and posts[0][2] == 200, posts
            submit_stamp = att["result"]
            assert submit_stamp, att
            continue
        # 其余每一次调用：凡是碰到提交或反馈的请求，ngshare 一律回答 403 Permission denied（一个 200 都没有）；
        # 别的请求只是列出已发布的作业（人人可见，上面已查过回答里没有 B 的内容）
        targeted = [r for r in att["responses"] if r[1].startswith(("/submission", "/feedback"))]
        assert targeted and all(r[2] == 403 and "Permission denied" in r[3] for r in targeted), \
            f"{att['label']}：{[(r[0], r[1], r[2]) for r in att['responses']]}"
        if att["kind"] in ("Collect", "ReleaseFeedback"):
            assert att["error"] and "ExchangeError" in att["error"], att  # 插件也报了失败
        refused.append(att["label"])
    assert submit_stamp is not None, "没有试“冒充 B 提交”"
    # A 的工作目录里只有 A 自己放的文件：没有下载到 B 的提交（course/submitted/），也没有取到 B 的反馈（exercises/feedback/）
    assert set(files) == {"released.ipynb", f"exercises/{NOTEBOOK}.ipynb", f"course/feedback/{CROSS_B}/exercises/"
                          f"{NOTEBOOK}.html", f"course/feedback/{CROSS_B}/exercises/timestamp.txt"}, files
    a_after = {s["timestamp"] for s in _ngshare_ok(
        ngshare, teacher, "GET", f"submissions/{course_id}/exercises/{CROSS_A}")["submissions"]}
    assert a_after - a_before == {submit_stamp}, (a_before, a_after, submit_stamp)
    notes.append(f"“冒充 B 提交”被 ngshare 按 A 的 token 记在 A 自己名下（{submit_stamp}），B 的提交没有多出一份")

    # 2. 直接调 ngshare 的接口，带 A 自己的 token：直连服务和经过 hub 的代理各一遍
    b = urllib.parse.quote(CROSS_B)
    raw = [
        ("GET", f"submissions/{course_id}/exercises/{b}", None),          # 列出 B 的提交
        ("GET", f"submissions/{course_id}/exercises", None),              # 列出所有人的提交
        ("GET", f"submission/{course_id}/exercises/{b}", None),           # 下载 B 最新的提交
        ("GET", f"submission/{course_id}/exercises/{b}?{stamp_q}", None), # 下载 B 的某一次提交
        ("POST", f"submission/{course_id}/exercises/{b}", {"files": json.dumps(b_files)}),  # 覆盖 B 的提交
        ("DELETE", f"submission/{course_id}/exercises/{b}", None),        # 删掉 B 的提交
        ("GET", f"feedback/{course_id}/exercises/{b}?{stamp_q}", None),   # 读 B 的反馈
        ("POST", f"feedback/{course_id}/exercises/{b}",                   # 改写 B 的反馈
         {"timestamp": b_stamp, "files": json.dumps([{"path": f"{NOTEBOOK}.html", "content": "Rk9SR0VE"}])}),
        ("GET", f"student/{course_id}/{b}", None),                        # B 的名单信息
        ("DELETE", f"student/{course_id}/{b}", None),                     # 把 B 移出课程
        ("GET", f"students/{course_id}", None),                           # 全班名单
        ("POST", f"instructor/{course_id}/{urllib.parse.quote(CROSS_A)}", # 把自己升成教师
         {"first_name": "", "last_name": "", "email": ""}),
    ]
    for base in (ngshare, f"{url}/services/ngshare"):
        for method, path, data in raw:
            label = f"{method} {base}/{path.split('?')[0]}"
            tried.append(label)
            status_code, body = _ngshare(base, a_token, method, path, data)
            assert not leaks(body), f"{label}：回答里有 B 的内容"
            # 403：ngshare 认出是 A、不许；405：ngshare 根本没有这个操作（提交只能新交，不能覆盖或删除）
            assert status_code in (403, 405), f"{label}：HTTP {status_code} {body[:300]}"
            refused.append(label)
    # 没有 token、假 token：没有任何数据（ngshare 这几个接口没有 @authenticated，self.user 是 None，回答 500）
    for token in (None, a_token[::-1]):
        label = f"GET {ngshare}/submission/{course_id}/exercises/{b}（{'没有 token' if token is None else '假 token'}）"
        tried.append(label)
        status_code, body = _ngshare(ngshare, token, "GET", f"submission/{course_id}/exercises/{b}")
        assert status_code in (401, 403, 500) and not leaks(body), f"{label}：HTTP {status_code} {body[:300]}"
        refused.append(label)

    # 3. 直接读 ngshare 的数据目录（SQLite 数据库和文件）：A 的 uid 进不去
    data = Path(env["LECTURE07_HUB_NGSHARE_DATA"])
    for args in (["ls", str(data)], ["cat", str(data / "ngshare.db")], ["ls", str(data / "files")]):
        tried.append(" ".join(args))
        r = _as_student(CROSS_A, *args)
        assert r.returncode != 0 and "Permission denied" in r.stderr, (args, r.stdout[:200], r.stderr[:200])
        refused.append(" ".join(args))

    # B 的提交和反馈一个字节都没变
    assert b_state() == before
    assert len(tried) == len(refused) + 1, (tried, refused)
    print(f"A（{CROSS_A}）对 B（{CROSS_B}）的文件试了 {len(tried)} 次：{len(refused)} 次被拒绝"
          f"（插件 {len(attempts) - 1} 次、HTTP {2 * len(raw) + 2} 次、文件系统 3 次），1 次{notes[0]}")


def _b64_fields(text: str) -> list[str]:
    """ngshare 回答里的 base64 内容（files[].content），用来检查回答里有没有 B 的文件。"""
    try:
        answer = json.loads(text)
    except ValueError:
        return []
    return [f["content"] for f in answer.get("files", []) if isinstance(f, dict) and "content" in f]


# ----------------------------------------------------------------------------- 交换服务的压力测试
N = 20
EX_PREFIX = "l07ex"
EX_INSTRUCTOR = f"{EX_PREFIX}i1"
EX_STUDENTS = [f"{EX_PREFIX}s{i:02d}" for i in range(1, N + 1)]
EX_GROUP = f"{EX_PREFIX}-graders"
EX_NGSHARE_USER = f"{EX_PREFIX}ng"
EX_PASSWORD = "lecture07"  # local_hub.prepare 的默认密码


def _student(name: str, home: str, barrier) -> str:
    """子进程里（已经是这名学生、环境里是他自己的 token）：取作业，写标记，等屏障，连交两次。"""
    _, _ = _run_exchange("FetchAssignment", {"CourseDirectory": {"assignment_id": "exercises"}})
    path = Path(home) / "exercises" / f"{NOTEBOOK}.ipynb"
    original = path.read_text(encoding="utf-8")  # 取作业失败时插件只写日志：这里就会找不到文件

    def mark(tag: str) -> None:
        nb = json.loads(original)
        cell = next(c for c in nb["cells"] if (c["metadata"].get("nbgrader") or {}).get("solution"))
        cell["source"] = f"# {tag}\n" + "".join(cell["source"])
        path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")

    def submit() -> None:
        op, _ = _run_exchange("Submit", {"CourseDirectory": {"assignment_id": "exercises"}})
        if not op.timestamp:  # 提交失败时插件只写日志（“Failed to submit.”）、不抛异常
            raise RuntimeError(f"{name} 提交失败")

    mark(f"MARK-{name}-first")
    barrier.wait(timeout=300)
    submit()
    # 第二次提交：ngshare 的时间戳精确到微秒，同一秒内的两次也分得开
    mark(f"MARK-{name}-second")
    submit()
    return "ok"


@pytest.fixture(scope="module")
def course(system_users):
    base = Path(tempfile.mkdtemp(prefix="l07ex-", dir="/tmp"))
    try:
        _remove_leftovers([EX_INSTRUCTOR, *EX_STUDENTS, EX_NGSHARE_USER], EX_GROUP)
        env = local_hub.prepare(base, EX_STUDENTS, [EX_INSTRUCTOR], homes=base / "home", graders_group=EX_GROUP,
                                ngshare_user=EX_NGSHARE_USER)
        yield env
    finally:
        for name in [EX_INSTRUCTOR, *EX_STUDENTS, EX_NGSHARE_USER]:
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        subprocess.run(["groupdel", EX_GROUP], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def course_hub(course):
    """同一个课程目录上起一个 hub（连同 ngshare 和名单同步），20 名学生都是它的用户。"""
    _need_hub_tools()
    base = Path(course["LECTURE07_HUB_DATA"]).parent
    with _running_hub(course, base, [EX_INSTRUCTOR, *EX_STUDENTS], EX_PASSWORD, EX_INSTRUCTOR, EX_STUDENTS) as running:
        yield running


def _as_student(name: str, *args: str, cwd: str = "/") -> subprocess.CompletedProcess:
    entry = pwd.getpwnam(name)
    return subprocess.run(list(args), cwd=cwd, user=entry.pw_uid, group=entry.pw_gid, extra_groups=[],
                          env={"HOME": entry.pw_dir, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
                          capture_output=True, text=True, timeout=60)


def _listening(port: int) -> list[str]:
    """在这个端口上 LISTEN 的本地地址（读 /proc/net/tcp、tcp6：不用装 ss/netstat）。"""
    import ipaddress
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A：LISTEN
                raw = bytes.fromhex(address)
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # 每 4 字节是主机字节序
                found.append(str(ipaddress.ip_address(raw)))
    return found


def test_ngshare_listens_only_on_this_machine(hub):
    """ngshare 自己写死监听 0.0.0.0；单机版经 ngshare_local.py 只监听 127.0.0.1：别的机器连不上它的端口。"""
    port = int(hub["env"]["LECTURE07_HUB_NGSHARE_PORT"])
    assert _listening(port) == ["127.0.0.1"], _listening(port)
    outward = [a for a in subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
               if ":" not in a and not a.startswith("127.")]
    for address in outward:  # 本机对外的地址：连不上
        with pytest.raises(OSError):
            socket.create_connection((address, port), timeout=3).close()
    socket.create_connection(("127.0.0.1", port), timeout=3).close()  # 本机能连


def test_students_cannot_read_answers(course):
    """学生（同一个 system_users 的权限：走得进仓库的 .venv）读不到答案、隐藏测试和 git 历史，但读得到 lib/ 和 Python。"""
    student = EX_STUDENTS[0]
    root = Path(course["LECTURE07_HUB_COURSE_ROOT"])
    solution = next((REPO_ROOT / "solutions").rglob("*.ipynb"))
    hidden = next((REPO_ROOT / "source").rglob("*.ipynb"))
    for path in [root / "source", root / "solutions", root / "gradebook.db", solution, hidden,
                 root / solution.relative_to(REPO_ROOT), REPO_ROOT / ".git", REPO_ROOT / "tests" / "test_hub.py",
                 Path(course["LECTURE07_HUB_NGSHARE_DATA"])]:  # 交换服务的数据目录（只属于 ngshare 的系统用户）
        r = _as_student(student, "cat", str(path))
        assert r.returncode != 0, f"学生 {student} 读到了 {path}"
        if path.is_dir():
            r = _as_student(student, "ls", str(path))
            assert r.returncode != 0, f"学生 {student} 列出了 {path}：{r.stdout[:200]}"
    if shutil.which("git"):
        rel = solution.relative_to(REPO_ROOT).as_posix()
        r = _as_student(student, "git", "-c", f"safe.directory={REPO_ROOT}", "-C", str(REPO_ROOT), "show", f"HEAD:{rel}")
        assert r.returncode != 0 and "nbgrader" not in r.stdout, f"学生 {student} 用 git 读到了 {rel}"
    # 要用的还读得到：课程代码和 venv 的 Python（不然上面的“读不到”什么也说明不了）
    assert _as_student(student, "cat", str(Path(course["LECTURE07_HUB_LIB"]) / "transformer.py")).returncode == 0
    r = _as_student(student, str(local_hub.venv_python()), "-c", "import torch, jupyterhub; print('ok')")
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-1000:]


def test_second_grader_writes_gradebook(course):
    """两位助教共用课程目录：以 hub 给助教服务器的 umask 002（test_class_on_jupyterhub 检查 hub 确实这样设），
    一位助教建的 gradebook.db 另一位也能写。"""
    root = Path(course["LECTURE07_HUB_COURSE_ROOT"])
    second = f"{PREFIX}x2g"
    subprocess.run(["useradd", "--create-home", "--home-dir", str(root.parent / "home" / second),
                    "--groups", EX_GROUP, second], check=True, capture_output=True)
    db = root / "gradebook.db"
    existed = db.exists()
    try:
        nbgrader = str(Path(sys.prefix) / "bin" / "nbgrader")
        a = _as_instructor(course, nbgrader, "db", "student", "add", "ta1-added", user=EX_INSTRUCTOR, group=EX_GROUP,
                           umask=0o002)
        assert a.returncode == 0, a.stdout + a.stderr
        assert db.stat().st_mode & 0o060 == 0o060 and db.stat().st_gid == grp.getgrnam(EX_GROUP).gr_gid
        b = _as_instructor(course, nbgrader, "db", "student", "add", "ta2-added", user=second, group=EX_GROUP,
                           umask=0o002)
        assert b.returncode == 0, b.stdout + b.stderr
        listing = _as_instructor(course, nbgrader, "db", "student", "list", user=second, group=EX_GROUP)
        assert "ta1-added" in listing.stdout and "ta2-added" in listing.stdout, listing.stdout + listing.stderr
    finally:
        subprocess.run(["userdel", "--remove", second], capture_output=True)
        if existed:
            open(db, "w").close()  # 同一个 course 的交换测试从空的 gradebook 开始（清空，属主和 660 不变）
        elif db.exists():
            db.unlink()


def _as_ex_instructor(env, *args, token=None):
    return _as_instructor(env, str(Path(sys.prefix) / "bin" / "nbgrader"), *args, user=EX_INSTRUCTOR, group=EX_GROUP,
                          token=token)


def test_twenty_students_submit_at_once(course_hub):
    env, teacher, ngshare = course_hub["env"], course_hub["instructor_token"], course_hub["ngshare"]
    course_id = env["LECTURE07_HUB_COURSE_ID"]
    p = _as_ex_instructor(env, "release_assignment", "exercises", token=teacher)
    assert p.returncode == 0, p.stdout + p.stderr
    tokens = {s: _token(course_hub["url"], s, EX_PASSWORD) for s in EX_STUDENTS}
    # 先在父进程里导入，子进程 fork 之后直接用（20 个进程同时导入 nbgrader 要几十秒）；ngshare_exchange 不在这里导入：
    # 它在导入时记下 JUPYTERHUB_USER，要在每个子进程设好环境之后再导入
    import nbgrader.auth  # noqa: F401
    import nbgrader.coursedir  # noqa: F401
    import nbgrader.exchange  # noqa: F401
    import rapidfuzz  # noqa: F401
    import requests  # noqa: F401
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(N), ctx.Queue()
    student_dir = str(DEPLOY / "jupyter-config" / "student")
    procs = [ctx.Process(target=_as_exchange_user, args=(
        s, {"JUPYTERHUB_USER": s, "JUPYTERHUB_API_TOKEN": tokens[s], "LECTURE07_NGSHARE_URL": ngshare,
            "LECTURE07_COURSE_ID": course_id, "JUPYTER_CONFIG_PATH": student_dir},
        _student, (s, pwd.getpwnam(s).pw_dir, barrier), results)) for s in EX_STUDENTS]
    t = time.monotonic()
    for proc in procs:
        proc.start()
    outcome = {name: status for name, status, _ in (results.get(timeout=600) for _ in procs)}
    for proc in procs:
        proc.join(timeout=60)
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
    elapsed = time.monotonic() - t
    assert outcome == {s: "ok" for s in EX_STUDENTS}, {s: r for s, r in outcome.items() if r != "ok"}

    # ngshare 里：每人正好两次提交，记在他自己名下（ngshare 按 token 认人），一共 2N 次
    subs = _ngshare_ok(ngshare, teacher, "GET", f"submissions/{course_id}/exercises")["submissions"]
    per_student = {s: sorted(x["timestamp"] for x in subs if x["student_id"] == s) for s in EX_STUDENTS}
    assert all(len(set(v)) == 2 for v in per_student.values()), {s: v for s, v in per_student.items() if len(set(v)) != 2}
    assert len(subs) == 2 * N, subs

    p = _as_ex_instructor(env, "collect", "exercises", token=teacher)
    assert p.returncode == 0, p.stdout + p.stderr
    submitted = Path(env["LECTURE07_HUB_COURSE_ROOT"]) / "submitted"
    assert sorted(d.name for d in submitted.iterdir()) == EX_STUDENTS
    for s in EX_STUDENTS:
        text = (submitted / s / "exercises" / f"{NOTEBOOK}.ipynb").read_text(encoding="utf-8")
        marks = [m for m in ("first", "second") if f"MARK-{s}-{m}" in text]
        assert marks == ["second"], f"{s}：收到的不是最后一次提交（{marks}）"
        others = [o for o in EX_STUDENTS if o != s and f"MARK-{o}-" in text]
        assert not others, f"{s} 的提交里有别人的标记：{others}"
        stamp = (submitted / s / "exercises" / "timestamp.txt").read_text().strip()
        assert stamp == per_student[s][-1], (s, stamp, per_student[s])

    # README 的备份（hub 照常运行时）：备份的数据库里有全部 2N 次提交，它引用的每个文件都在打包的文件里
    backup = Path(tempfile.mkdtemp(prefix="l07backup-", dir="/tmp"))
    try:
        r = subprocess.run(["sh", "-c", BACKUP_NGSHARE], env={"PATH": f"{Path(sys.prefix) / 'bin'}:/usr/bin:/bin",
                           "D": env["LECTURE07_HUB_NGSHARE_DATA"], "B": str(backup)}, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        import sqlite3
        import tarfile
        db = sqlite3.connect(backup / "ngshare.db")
        try:
            counts = dict(db.execute("SELECT student_id, COUNT(*) FROM submissions GROUP BY student_id").fetchall())
            stored = {row[0] for row in db.execute("SELECT actual_name FROM files")}
        finally:
            db.close()
        assert counts == {s: 2 for s in EX_STUDENTS}, counts
        with tarfile.open(backup / "ngshare-files.tar.gz") as tar:
            archived = {Path(m.name).name for m in tar.getmembers() if m.isfile()}
        assert stored and stored <= archived, sorted(stored - archived)[:5]
    finally:
        shutil.rmtree(backup, ignore_errors=True)
    print(f"{N} 名学生同时各提交两次（经过 ngshare）：{elapsed:.1f} 秒（取作业 + 提交，在负载很高的 2 核机器上）")


def test_clean_removes_only_what_make_hub_created(system_users):
    """make hub-clean（local_hub.py --clean）删掉试用新建的用户、组和 BASE；已有的用户 make hub 不改、clean 也不删。"""
    base = Path(tempfile.mkdtemp(prefix="l07clean-", dir="/tmp"))
    old, new, ta, group = f"{PREFIX}cold", f"{PREFIX}cnew", f"{PREFIX}cta", f"{PREFIX}c-graders"
    service = f"{PREFIX}cng"  # ngshare 的系统用户：试用时新建，clean 也删掉
    subprocess.run(["useradd", "--create-home", "--home-dir", str(base / "home" / old), old], check=True)
    try:
        os.chmod(base / "home" / old, 0o751)
        local_hub.prepare(base / "try", [old, new], [ta], homes=base / "home", graders_group=group,
                          ngshare_user=service)
        data = base / "try" / "ngshare"
        assert pwd.getpwuid(data.stat().st_uid).pw_name == service and stat.S_IMODE(data.stat().st_mode) == 0o700
        assert stat.S_IMODE((base / "home" / old).stat().st_mode) == 0o751  # 已有用户的家目录没被改
        assert stat.S_IMODE((base / "home" / new).stat().st_mode) == 0o700
        assert (base / "home" / new / "lib").resolve() == base / "try" / "lib"  # 建账号时就有 ~/lib
        assert local_hub.clean(base / "try") == 0
        for name, kept in [(old, True), (new, False), (ta, False), (service, False)]:
            try:
                pwd.getpwnam(name)
                assert kept, f"{name} 应该被删掉"
            except KeyError:
                assert not kept, f"已有的用户 {name} 被删掉了"
        with pytest.raises(KeyError):
            grp.getgrnam(group)
        assert not (base / "try").exists()
    finally:
        for name in (old, new, ta, service):
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_local_hub_wants_user_names_not_counts(tmp_path):
    """--students 3 是人数的误会：不建出叫“3”的系统用户，说清楚要的是逗号分开的用户名。"""
    assert local_hub.user_names("student1, ta-2,_x", "--students") == ["student1", "ta-2", "_x"]
    for bad in ("3", "Student1", "a b", "", "x" * 40):
        with pytest.raises(ValueError, match="逗号分开的用户名"):
            local_hub.user_names(bad, "--students")
    if os.geteuid() != 0:
        pytest.skip("local_hub.py 要以 root 运行")
    base = tmp_path / "try"
    p = subprocess.run([sys.executable, str(DEPLOY / "local_hub.py"), "--base", str(base), "--students", "3",
                        "--instructors", "1"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "不是人数" in p.stderr, p.stdout + p.stderr
    for name in ("3", "1"):
        with pytest.raises(KeyError):
            pwd.getpwnam(name)
    assert not base.exists()


def test_local_hub_stops_on_sigterm_and_gives_the_repo_back(system_users, tmp_path):
    """make hub 在后台运行（SIGINT 被忽略，像 nohup / cmd &）时，kill（SIGTERM）也让它很快停下，并把仓库的权限改回。"""
    top = Path(tempfile.mkdtemp(prefix="l07sig-", dir="/tmp"))  # ngshare 的用户要走得进 BASE（pytest 的 tmp_path 是 700）
    os.chmod(top, 0o755)
    base, port = top / "try", free_port()
    modes = {p: stat.S_IMODE((REPO_ROOT / p).stat().st_mode) for p in (".git", "solutions")}
    log = open(tmp_path / "hub.log", "wb")  # 不用管道：hub 的日志写满管道就停住了
    proc = subprocess.Popen([sys.executable, str(DEPLOY / "local_hub.py"), "--base", str(base), "--port", str(port),
                             "--students", f"{PREFIX}sgs", "--instructors", f"{PREFIX}sgt"],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **{
                                f"LECTURE07_HUB_{k}_PORT": str(free_port()) for k in ("HUB", "PROXY_API", "NGSHARE")}},
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        _wait_for_hub(proc, f"http://127.0.0.1:{port}", tmp_path / "hub.log")
        time.sleep(2)  # 等 hub 的服务都起来
        assert all(stat.S_IMODE((REPO_ROOT / p).stat().st_mode) & 0o007 == 0 for p in modes), "运行时答案对学生不可读"
        t = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert time.monotonic() - t < 15, f"SIGTERM 之后 {time.monotonic() - t:.0f} 秒才停"
        assert {p: stat.S_IMODE((REPO_ROOT / p).stat().st_mode) for p in modes} == modes
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        subprocess.run([sys.executable, str(DEPLOY / "local_hub.py"), "--clean", "--base", str(base)],
                       capture_output=True, timeout=120)
        shutil.rmtree(top, ignore_errors=True)
