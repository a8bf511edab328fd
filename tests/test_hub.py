"""整门课在一个真的 JupyterHub 上走一遍：真的 hub、真的代理（npm 的 configurable-http-proxy）、真的系统用户、真的浏览器。

配置就是 deploy/jupyterhub/jupyterhub_config.py（dummy 认证），环境由 deploy/jupyterhub/local_hub.py 的
prepare() 搭（和 make hub 一样）：一位教师、三名学生，都是 useradd 建的系统用户。

1. 教师 `nbgrader release_assignment exercises`；
2. 每名学生在浏览器里登录，在 Assignment List 里 Fetch，打开练习 01，在答题单元格里输入答案
   （两人输入参考答案，一人输入全零的错答案），保存，点 Validate，再 Submit；学生打不开 formgrader，教师能；
3. 教师 `nbgrader collect exercises`、`python -m lib.grading grade exercises --submissions submitted/`、
   `nbgrader release_feedback exercises`；
4. 每名学生在 Assignment List 里 Fetch Feedback，打开反馈，看到 grades.csv 里自己的分数。

第二个测试是交换目录的小型压力测试：20 名学生（20 个系统用户）先取作业，在练习 01 里写下只属于自己的标记，
停在一个屏障前；屏障一开，每人同时提交两次（像连点两下 Submit），第二次的标记不同。教师 `nbgrader collect` 之后：
一个不少（20 人都收到）、一个不多（交换目录里每人正好两次提交，收集到每人一份）、没有串（每人收到的是自己
最后一次提交的内容）。权限和 hub 上一样：每名学生以自己的 uid 写入 nbgrader 自己建的 inbound（2733）。

要 root（建用户、替用户启动服务器）、jupyterhub（deploy/jupyterhub/requirements.txt）、configurable-http-proxy
（make hub-deps）、playwright 和系统的 Chromium。make test 会把它们都装好；缺了就带着原因跳过。
"""
from __future__ import annotations

import csv
import grp
import json
import multiprocessing as mp
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
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
PASSWORD = "hub-test-password"
NOTEBOOK = "01_attention_by_hand"
ANSWER_ID = "ex1_hand_answer"
TIMEOUT_MS = 240_000
# 和 README“在 JupyterHub 上开课”里教师的那一行相同
COPY_FEEDBACK_KEYS = ('for d in submitted/*/exercises; do cp "$d/timestamp.txt" "$d/submission_secret.txt" '
                      '"feedback/${d#submitted/}/"; done')

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


def _as_instructor(env: dict, *args: str, user: str = INSTRUCTOR, group: str = GROUP,
                   timeout: int = 600, umask: int = -1) -> subprocess.CompletedProcess:
    """以教师的系统用户在课程目录里运行命令（就像教师在 hub 的终端里运行）。"""
    entry = pwd.getpwnam(user)
    venv_bin = str(Path(sys.prefix) / "bin")
    run_env = {"HOME": entry.pw_dir, "USER": user, "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
               "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
               "JUPYTER_CONFIG_PATH": str(DEPLOY / "jupyter-config" / "grader"),
               "LECTURE07_EXCHANGE": env["LECTURE07_HUB_EXCHANGE"],
               "LECTURE07_COURSE_ID": env["LECTURE07_HUB_COURSE_ID"],
               "LECTURE07_COURSE_ROOT": env["LECTURE07_HUB_COURSE_ROOT"]}
    return subprocess.run(list(args), cwd=env["LECTURE07_HUB_COURSE_ROOT"], env=run_env, user=entry.pw_uid,
                          group=entry.pw_gid, extra_groups=[grp.getgrnam(group).gr_gid], capture_output=True,
                          text=True, timeout=timeout, umask=umask)


@pytest.fixture(scope="module")
def system_users():
    """root、useradd；让测试建的用户走得到 venv 的 Python（结束时改回原来的权限）。

    这个模块的两个测试共用它：它们在同一个 pytest 进程里（--dist loadscope），不会一个改回权限时另一个还在用。
    """
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("要以 root 运行：测试要 useradd 建系统用户，hub 要替每个用户启动服务器（CI 以 root 运行）")
    for tool in ("useradd", "userdel", "groupadd", "prlimit"):
        if not shutil.which(tool):
            pytest.skip(f"没有 {tool}（Debian：apt-get install passwd util-linux）")
    changed = local_hub.make_traversable(local_hub.venv_python(), DEPLOY / "jupyter-config", Path(CHROMIUM))
    changed += local_hub.hide_private(REPO_ROOT)  # 和 make hub 一样：学生走得进仓库的 .venv，但读不到答案
    try:
        yield
    finally:
        local_hub.restore_modes(changed)


@pytest.fixture(scope="module")
def hub(system_users):
    pytest.importorskip("jupyterhub", reason="没有安装 jupyterhub：pip install -r deploy/jupyterhub/requirements.txt")
    pytest.importorskip("jupyterhub_idle_culler", reason="没有安装 jupyterhub-idle-culler（deploy/jupyterhub/requirements.txt）")
    pytest.importorskip("playwright.sync_api", reason="没有安装 playwright：pip install -r requirements-dev.txt")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"找不到 Chromium（{CHROMIUM}）：Debian 上 apt-get install chromium")
    proxy = Path(sys.prefix) / "chp" / "node_modules" / ".bin" / "configurable-http-proxy"
    if not proxy.exists() and not shutil.which("configurable-http-proxy"):
        pytest.skip("没有 configurable-http-proxy：make hub-deps（npm install --prefix .venv/chp configurable-http-proxy）")
    base = Path(tempfile.mkdtemp(prefix="l07hub-", dir="/tmp"))
    hub_proc = log = None
    try:
        _remove_leftovers([INSTRUCTOR, *STUDENTS], GROUP)
        env = local_hub.prepare(base, STUDENTS, [INSTRUCTOR], homes=base / "home", graders_group=GROUP,
                                password=PASSWORD)
        port = free_port()
        env.update({"LECTURE07_HUB_URL": f"http://127.0.0.1:{port}", "LECTURE07_HUB_HUB_PORT": str(free_port()),
                    "LECTURE07_HUB_PROXY_API_PORT": str(free_port()), "LECTURE07_HUB_EXPOSE_APP": "1"})
        log = open(base / "hub.log", "wb")
        hub_proc = subprocess.Popen([str(Path(sys.prefix) / "bin" / "jupyterhub"), "-f",
                                     str(DEPLOY / "jupyterhub_config.py")],
                                    cwd=env["LECTURE07_HUB_DATA"], env={**os.environ, **env},
                                    stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            if hub_proc.poll() is not None:
                pytest.fail(f"JupyterHub 没能启动：\n{(base / 'hub.log').read_text(errors='replace')[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/hub/api/", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("JupyterHub 120 秒内没有响应")
            time.sleep(0.5)
        yield {"url": url, "env": env, "base": base, "log": base / "hub.log"}
    finally:
        # 先结束各人的服务器和内核、hub 的空闲回收服务：不然 hub 在 SIGTERM 后一个个地等它们体面退出，
        # 机器忙时要 30 多秒（CI 的 hub.log：回收服务从 SIGTERM 到结束约 30 秒）
        _kill_user_procs([INSTRUCTOR, *STUDENTS])
        if hub_proc is not None:
            subprocess.run(["pkill", "-KILL", "-P", str(hub_proc.pid), "-f", "jupyterhub_idle_culler"],
                           capture_output=True)
            os.kill(hub_proc.pid, signal.SIGTERM)  # hub 退出前停掉代理（和还在的单用户服务器）
            try:
                hub_proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(hub_proc.pid, signal.SIGKILL)
                hub_proc.wait(timeout=10)
        if log is not None:
            log.close()
            ARTIFACTS.mkdir(exist_ok=True)
            shutil.copy(base / "hub.log", ARTIFACTS / "hub.log")
        _kill_user_procs([INSTRUCTOR, *STUDENTS])  # hub 退出后还留下的进程
        for name in [INSTRUCTOR, *STUDENTS]:
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
    t0 = time.monotonic()
    p = _as_instructor(env, str(Path(sys.prefix) / "bin" / "nbgrader"), "release_assignment", "exercises")
    assert p.returncode == 0, p.stdout + p.stderr
    outbound = Path(env["LECTURE07_HUB_EXCHANGE"]) / env["LECTURE07_HUB_COURSE_ID"] / "outbound" / "exercises"
    assert (outbound / f"{NOTEBOOK}.ipynb").exists()
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
            p = _as_instructor(env, nbgrader, "collect", "exercises")
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
            # 已知：lib.grading 把 nbgrader 0.9 收集来的 submission_secret.txt 当成“不是 .ipynb 的文件”隔离
            # （不影响评分和反馈）；除此之外不应隔离任何东西
            others = [r for r in rows if not r["notebook"]]
            assert all(r["detail"].endswith("/exercises/submission_secret.txt") for r in others), others
            mine = {r["student_id"]: r for r in rows if r["notebook"] == NOTEBOOK}
            right = {float(mine[s]["score"]) for s in STUDENTS if s != WRONG}
            assert len(right) == 1, f"同样的答案应该同分：{mine}"
            assert float(mine[WRONG]["score"]) < right.pop()
            # nbgrader release_feedback 要在 feedback/学号/exercises/ 里找到 timestamp.txt 和 submission_secret.txt
            # （nbgrader generate_feedback 会复制它们，lib.grading 目前不复制）：README 里的同一行命令
            p = _as_instructor(env, "sh", "-c", COPY_FEEDBACK_KEYS)
            assert p.returncode == 0, p.stdout + p.stderr
            p = _as_instructor(env, nbgrader, "release_feedback", "exercises")
            assert p.returncode == 0, p.stdout + p.stderr
            released = list((Path(env["LECTURE07_HUB_EXCHANGE"]) / env["LECTURE07_HUB_COURSE_ID"] / "feedback").glob("*.html"))
            assert len(released) == 6 * len(STUDENTS), released
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
            timings["students_fetch_feedback_3"] = time.monotonic() - t
        finally:
            browser.close()
    timings["total"] = time.monotonic() - t0
    print("用时（秒）：" + "，".join(f"{k} {v:.1f}" for k, v in timings.items()))


# ----------------------------------------------------------------------------- 交换目录的压力测试
N = 20
EX_PREFIX = "l07ex"
EX_INSTRUCTOR = f"{EX_PREFIX}i1"
EX_STUDENTS = [f"{EX_PREFIX}s{i:02d}" for i in range(1, N + 1)]
EX_GROUP = f"{EX_PREFIX}-graders"
COURSE_ID = "cs224n-lecture07"


def _exchange_config(exchange: str, root: str):
    from traitlets.config import Config
    c = Config()
    c.Exchange.root = exchange
    c.CourseDirectory.course_id = COURSE_ID
    c.CourseDirectory.root = root
    c.CourseDirectory.assignment_id = "exercises"
    return c


def _student(name: str, exchange: str, barrier, results) -> None:
    """子进程：变成这名学生，取作业，写标记，等屏障，连交两次。"""
    try:
        user = pwd.getpwnam(name)
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)
        os.environ["HOME"] = user.pw_dir
        os.chdir(user.pw_dir)
        from nbgrader.auth import Authenticator
        from nbgrader.coursedir import CourseDirectory
        from nbgrader.exchange.default import ExchangeFetchAssignment, ExchangeSubmit
        c = _exchange_config(exchange, user.pw_dir)
        coursedir = CourseDirectory(config=c)
        auth = Authenticator(config=c)  # nbgrader 的默认认证插件（不限制课程），和 Assignment List 用的一样
        ExchangeFetchAssignment(coursedir=coursedir, authenticator=auth, config=c).start()
        path = Path(user.pw_dir) / "exercises" / f"{NOTEBOOK}.ipynb"
        original = path.read_text(encoding="utf-8")

        def mark(tag: str) -> None:
            nb = json.loads(original)
            cell = next(c for c in nb["cells"] if (c["metadata"].get("nbgrader") or {}).get("solution"))
            cell["source"] = f"# {tag}\n" + "".join(cell["source"])
            path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")

        mark(f"MARK-{name}-first")
        barrier.wait(timeout=300)
        ExchangeSubmit(coursedir=coursedir, authenticator=auth, config=c).start()
        # 第二次提交：nbgrader 的时间戳精确到微秒，同一秒内的两次也分得开
        mark(f"MARK-{name}-second")
        ExchangeSubmit(coursedir=coursedir, authenticator=auth, config=c).start()
        results.put((name, "ok"))
    except BaseException as e:  # 子进程的任何失败都报告给父进程
        results.put((name, f"{type(e).__name__}: {e}"))


@pytest.fixture(scope="module")
def course(system_users):
    base = Path(tempfile.mkdtemp(prefix="l07ex-", dir="/tmp"))
    try:
        _remove_leftovers([EX_INSTRUCTOR, *EX_STUDENTS], EX_GROUP)
        env = local_hub.prepare(base, EX_STUDENTS, [EX_INSTRUCTOR], homes=base / "home", graders_group=EX_GROUP)
        yield env
    finally:
        for name in [EX_INSTRUCTOR, *EX_STUDENTS]:
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        subprocess.run(["groupdel", EX_GROUP], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _as_student(name: str, *args: str, cwd: str = "/") -> subprocess.CompletedProcess:
    entry = pwd.getpwnam(name)
    return subprocess.run(list(args), cwd=cwd, user=entry.pw_uid, group=entry.pw_gid, extra_groups=[],
                          env={"HOME": entry.pw_dir, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
                          capture_output=True, text=True, timeout=60)


def test_students_cannot_read_answers(course):
    """学生（同一个 system_users 的权限：走得进仓库的 .venv）读不到答案、隐藏测试和 git 历史，但读得到 lib/ 和 Python。"""
    student = EX_STUDENTS[0]
    root = Path(course["LECTURE07_HUB_COURSE_ROOT"])
    solution = next((REPO_ROOT / "solutions").rglob("*.ipynb"))
    hidden = next((REPO_ROOT / "source").rglob("*.ipynb"))
    for path in [root / "source", root / "solutions", root / "gradebook.db", solution, hidden,
                 root / solution.relative_to(REPO_ROOT), REPO_ROOT / ".git", REPO_ROOT / "tests" / "test_hub.py"]:
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


def _as_ex_instructor(env, *args):
    return _as_instructor(env, str(Path(sys.prefix) / "bin" / "nbgrader"), *args, user=EX_INSTRUCTOR, group=EX_GROUP)


def test_twenty_students_submit_at_once(course):
    p = _as_ex_instructor(course, "release_assignment", "exercises")
    assert p.returncode == 0, p.stdout + p.stderr
    # 先在父进程里导入，子进程 fork 之后直接用（20 个进程同时导入 nbgrader 要几十秒）
    import nbgrader.auth  # noqa: F401
    import nbgrader.exchange.default  # noqa: F401
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(N), ctx.Queue()
    procs = [ctx.Process(target=_student, args=(s, course["LECTURE07_HUB_EXCHANGE"], barrier, results))
             for s in EX_STUDENTS]
    t = time.monotonic()
    for proc in procs:
        proc.start()
    outcome = dict(results.get(timeout=600) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
    elapsed = time.monotonic() - t
    assert outcome == {s: "ok" for s in EX_STUDENTS}, {s: r for s, r in outcome.items() if r != "ok"}

    inbound = Path(course["LECTURE07_HUB_EXCHANGE"]) / COURSE_ID / "inbound"
    entries = sorted(p.name for p in inbound.iterdir())
    per_student = {s: [e for e in entries if e.split("+")[0] == s] for s in EX_STUDENTS}
    assert all(len(v) == 2 for v in per_student.values()), {s: len(v) for s, v in per_student.items() if len(v) != 2}
    assert len(entries) == 2 * N
    for s, subs in per_student.items():
        owner = {pwd.getpwuid((inbound / e).stat().st_uid).pw_name for e in subs}
        assert owner == {s}, f"{s} 的提交属于 {owner}"

    p = _as_ex_instructor(course, "collect", "exercises")
    assert p.returncode == 0, p.stdout + p.stderr
    submitted = Path(course["LECTURE07_HUB_COURSE_ROOT"]) / "submitted"
    assert sorted(d.name for d in submitted.iterdir()) == EX_STUDENTS
    for s in EX_STUDENTS:
        text = (submitted / s / "exercises" / f"{NOTEBOOK}.ipynb").read_text(encoding="utf-8")
        marks = [m for m in ("first", "second") if f"MARK-{s}-{m}" in text]
        assert marks == ["second"], f"{s}：收到的不是最后一次提交（{marks}）"
        others = [o for o in EX_STUDENTS if o != s and f"MARK-{o}-" in text]
        assert not others, f"{s} 的提交里有别人的标记：{others}"
    print(f"{N} 名学生同时各提交两次：{elapsed:.1f} 秒（取作业 + 提交，在负载很高的 2 核机器上）")


def test_clean_removes_only_what_make_hub_created(system_users):
    """make hub-clean（local_hub.py --clean）删掉试用新建的用户、组和 BASE；已有的用户 make hub 不改、clean 也不删。"""
    base = Path(tempfile.mkdtemp(prefix="l07clean-", dir="/tmp"))
    old, new, ta, group = f"{PREFIX}cold", f"{PREFIX}cnew", f"{PREFIX}cta", f"{PREFIX}c-graders"
    subprocess.run(["useradd", "--create-home", "--home-dir", str(base / "home" / old), old], check=True)
    try:
        os.chmod(base / "home" / old, 0o751)
        local_hub.prepare(base / "try", [old, new], [ta], homes=base / "home", graders_group=group)
        assert stat.S_IMODE((base / "home" / old).stat().st_mode) == 0o751  # 已有用户的家目录没被改
        assert stat.S_IMODE((base / "home" / new).stat().st_mode) == 0o700
        assert (base / "home" / new / "lib").resolve() == base / "try" / "lib"  # 建账号时就有 ~/lib
        assert local_hub.clean(base / "try") == 0
        for name, kept in [(old, True), (new, False), (ta, False)]:
            try:
                pwd.getpwnam(name)
                assert kept, f"{name} 应该被删掉"
            except KeyError:
                assert not kept, f"已有的用户 {name} 被删掉了"
        with pytest.raises(KeyError):
            grp.getgrnam(group)
        assert not (base / "try").exists()
    finally:
        for name in (old, new, ta):
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
