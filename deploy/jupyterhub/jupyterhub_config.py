"""第 7 讲课程的 JupyterHub 配置：一台服务器，一门课，学生和教师/助教都是 hub 用户。

    jupyterhub -f deploy/jupyterhub/jupyterhub_config.py      # 以 root 运行（要替每个用户启动服务器）

- 用户：每个 hub 用户是一个同名的系统用户（LocalProcessSpawner）。两个 hub 组，名字沿用 nbgrader 的约定：
  `nbgrader-<课程>`（学生）和 `formgrade-<课程>`（教师、助教）。
- 作业分发：交换服务 ngshare（hub 服务，以自己的系统用户 `LECTURE07_HUB_NGSHARE_USER` 运行，数据在
  `LECTURE07_HUB_NGSHARE_DATA`，700，只有它自己能读）。每个请求带着调用者的 hub token，ngshare 向 hub 问清是谁，
  再按课程名单判断：学生只能取作业、交自己的、取自己的反馈，看不到、改不了别人的提交和反馈；收集和发反馈只有教师/助教。
  nbgrader 通过 ngshare-exchange 插件用它（jupyter-config/ngshare_exchange.py）。课程名单由 ngshare-roster 服务
  （ngshare_roster.py）从下面两个 hub 组同步过去，不用手工维护。学生在 **Assignment List** 里取作业、提交、
  取反馈；教师和助教在共享的课程目录里 `nbgrader release_assignment`、`nbgrader collect`、
  `python -m lib.grading grade ...`，**Formgrader** 只对他们开放（学生的服务器关掉了 formgrader 扩展，
  而且课程目录对学生不可读）。
- 环境：所有人的服务器和内核都来自同一个 venv（按仓库的 requirements.txt 装好，CPU 版 torch），只有一个内核。
- 资源限制：见下面的 CourseSpawner（prlimit 总是生效；cgroup 在 /sys/fs/cgroup 可写时生效）。
- 空闲回收：jupyterhub-idle-culler 作为 hub 服务运行。

所有设置都可以用环境变量改（LECTURE07_HUB_*，见下面）；`make hub` 用它们在本机起一个试用的 hub。
"""
from __future__ import annotations

import os
import pwd
import shutil
import sys
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner

c = get_config()  # noqa: F821

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def setting(name: str, default: str) -> str:
    return os.environ.get(f"LECTURE07_HUB_{name}", default)


def names(value: str) -> list[str]:
    return [n for n in value.replace(",", " ").split() if n]


COURSE_ID = setting("COURSE_ID", "cs224n-lecture07")
# 教师和助教共用的课程目录（nbgrader 的 course root：source/、release/、gradebook、submitted/……）
COURSE_ROOT = setting("COURSE_ROOT", "/srv/lecture07/course")
# 交换服务 ngshare：它的系统用户、数据目录（SQLite 数据库 + 文件；hub 启动时建好，属于这个用户，700）和端口
NGSHARE_USER = setting("NGSHARE_USER", "lecture07-ngshare")
NGSHARE_DATA = Path(setting("NGSHARE_DATA", "/srv/lecture07/ngshare"))
NGSHARE_PORT = int(setting("NGSHARE_PORT", "10101"))
# 学生和助教的服务器直接连 ngshare（它只认 hub 签发的 token），路径里带 hub 给服务的前缀 /services/ngshare/
NGSHARE_URL = f"http://127.0.0.1:{NGSHARE_PORT}/services/ngshare"
# 学生的 notebook 要导入的课程代码 lib/（只读即可；默认就是这份仓库里的 lib/）
COURSE_LIB = setting("LIB", str(REPO / "lib"))
# 课程环境（按 requirements.txt 装好的 venv）；默认是运行 hub 的这个 Python 所在的 venv
VENV = setting("VENV", sys.prefix)
# ngshare 自己的 venv（make hub-deps 建在 .venv/ngshare/：ngshare 0.6.0 要 SQLAlchemy 1.4，见 requirements-ngshare.txt）
NGSHARE_PYTHON = setting("NGSHARE_PYTHON", str(Path(VENV) / "ngshare" / "bin" / "python"))
# hub 自己的数据：用户数据库、cookie 密钥、代理的 pid 文件
DATA = Path(setting("DATA", "/srv/lecture07/hub"))
STUDENTS_GROUP = f"nbgrader-{COURSE_ID}"
GRADERS_GROUP = f"formgrade-{COURSE_ID}"
STUDENTS = names(setting("STUDENTS", ""))
INSTRUCTORS = names(setting("INSTRUCTORS", ""))
ADMINS = names(setting("ADMINS", ""))

# ---------------------------------------------------------------- 网络、数据
c.JupyterHub.bind_url = setting("URL", "http://127.0.0.1:8000")
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{setting('HUB_PORT', '8081')}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{setting('PROXY_API_PORT', '8001')}"
DATA.mkdir(parents=True, exist_ok=True)
c.JupyterHub.db_url = setting("DB_URL", f"sqlite:///{DATA / 'jupyterhub.sqlite'}")
c.JupyterHub.cookie_secret_file = str(DATA / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(DATA / "jupyterhub-proxy.pid")
# 代理：npm 的 configurable-http-proxy（make hub-deps 把它装在 .venv/chp/）
_proxy = setting("PROXY", "")
for candidate in (_proxy, str(Path(VENV) / "chp/node_modules/.bin/configurable-http-proxy"),
                  str(REPO / ".venv/chp/node_modules/.bin/configurable-http-proxy"),
                  shutil.which("configurable-http-proxy") or ""):
    if candidate and Path(candidate).exists():
        c.ConfigurableHTTPProxy.command = [candidate]
        break

# ---------------------------------------------------------------- 认证（可替换）
# dummy：只用于试用和测试（所有人同一个密码）。正式开课换成学校的认证：
#   pam（系统账号）、ldapauthenticator.LDAPAuthenticator、jupyterhub-cas-authenticator、
#   oauthenticator.generic.GenericOAuthenticator（学校的 OAuth2 / OIDC）、
#   ltiauthenticator.lti13.authenticator.LTI13Authenticator（从 LMS 用 LTI 1.3 登录）。
AUTH = setting("AUTH", "pam")
if AUTH == "dummy":
    c.JupyterHub.authenticator_class = "dummy"
    password = setting("DUMMY_PASSWORD", "")
    if not password:
        raise SystemExit("LECTURE07_HUB_AUTH=dummy 时必须用 LECTURE07_HUB_DUMMY_PASSWORD 设一个密码")
    c.DummyAuthenticator.password = password
else:
    c.JupyterHub.authenticator_class = AUTH
# 名单之外的人不能登录；有名单时两个组也由这里建好（用 LTI / OAuth 时可以改成让认证器管理组：
# c.Authenticator.manage_groups = True）
if STUDENTS or INSTRUCTORS:
    c.Authenticator.allowed_users = set(STUDENTS) | set(INSTRUCTORS)
c.Authenticator.admin_users = set(ADMINS)
c.JupyterHub.load_groups = {
    STUDENTS_GROUP: {"users": STUDENTS},
    GRADERS_GROUP: {"users": INSTRUCTORS},
}

# ---------------------------------------------------------------- 单用户服务器
# 每个学生的上限（JupyterHub 的标准设置；LocalProcessSpawner 本身不执行它们，由下面的 CourseSpawner 执行）
c.Spawner.mem_limit = setting("MEM_LIMIT", "2G")
c.Spawner.cpu_limit = float(setting("CPU_LIMIT", "1"))
# 每个系统用户最多这么多进程 + 线程（RLIMIT_NPROC：挡住 fork 炸弹）
NPROC = int(setting("NPROC", "512"))
c.Spawner.cmd = [str(Path(VENV) / "bin" / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
# news_url=None（不是空字符串）：服务器不去取 Jupyter 新闻（LabApp 只在 news_url is None 时设 news.disabled）；
# 但 JupyterLab 4.6 仍会弹出“要不要接收 Jupyter 新闻”：那个弹窗由 jupyter-config/*/labconfig/page_config.json
# 里禁用的 @jupyterlab/apputils-extension:announcements 插件关掉（tests/test_hub.py 检查页面上没有它）
c.Spawner.args = ["--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
if setting("EXPOSE_APP", "") == "1":  # 只给测试用：让浏览器里的脚本读到 JupyterLab 的对象
    c.Spawner.args.append("--LabApp.expose_app_in_browser=True")
c.Spawner.http_timeout = 120
c.Spawner.start_timeout = 180


class CourseSpawner(LocalProcessSpawner):
    """LocalProcessSpawner 加上课程需要的三件事（都在启动服务器之前或之后，由 hub 以 root 身份做）：

    1. 家目录里建两个链接：`~/lib` → 课程代码（notebook 的引导单元格从这里导入 lib/），
       教师/助教另有 `~/lecture07` → 共享的课程目录（formgrader 要求课程目录在服务器根目录之下）。
    2. 环境：按组选 nbgrader 和 JupyterLab 的设置（JUPYTER_CONFIG_PATH：学生没有 formgrader），单线程的 torch。
    3. 资源限制：
       - 总是：`prlimit --as=mem_limit --nproc=NPROC`：每个进程（服务器、每个内核）的地址空间不超过 mem_limit，
         这个系统用户的进程加线程不超过 NPROC。
       - /sys/fs/cgroup 可写时：每个用户一个 cgroup（lecture07/用户名），服务器和它启动的所有内核加起来
         内存不超过 mem_limit（v2 memory.max / v1 memory.limit_in_bytes），CPU 不超过 cpu_limit 个核
         （v2 cpu.max / v1 cpu.cfs_quota_us）。不可写时只在日志里说明没有这一层。
    """

    def _role(self) -> str:
        return "grader" if any(g.name == GRADERS_GROUP for g in self.user.groups) else "student"

    def _home(self) -> Path:
        return Path(pwd.getpwnam(self.user.name).pw_dir)

    def _link(self, link: Path, target: str) -> None:
        if link.is_symlink() and os.readlink(link) == target:
            return
        if link.exists() or link.is_symlink():
            self.log.warning("%s 已经存在，不是指向 %s 的链接：保留原样", link, target)
            return
        os.symlink(target, link)
        user = pwd.getpwnam(self.user.name)
        os.lchown(link, user.pw_uid, user.pw_gid)

    def get_env(self):
        env = super().get_env()
        role = self._role()
        env.update({
            "JUPYTER_CONFIG_PATH": str(HERE / "jupyter-config" / role),
            "LECTURE07_NGSHARE_URL": NGSHARE_URL,
            "LECTURE07_COURSE_ID": COURSE_ID,
            "OMP_NUM_THREADS": "1",
            # 不沿用 hub 进程（root）的 PATH（里面可能有 /root/... 下的工具）：课程 venv + 系统目录
            "PATH": f"{Path(VENV) / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        })
        if role == "grader":
            env["LECTURE07_COURSE_ROOT"] = str(self._home() / "lecture07")
        return env

    def make_preexec_fn(self, name):
        """助教的服务器（连同终端、内核、nbgrader）以 umask 002 运行：collect/grade 写出的文件组可写，几位助教共用课程目录。"""
        preexec = super().make_preexec_fn(name)
        if self._role() != "grader":
            return preexec

        def grader_preexec():
            preexec()
            os.umask(0o002)
        return grader_preexec

    def _cgroups(self) -> list[tuple[Path, dict[str, str]]]:
        mem = int(self.mem_limit) if self.mem_limit else None
        cpu = self.cpu_limit
        root = Path("/sys/fs/cgroup")
        period = 100_000
        if (root / "cgroup.controllers").exists():  # v2
            values = {}
            if mem:
                values["memory.max"] = str(mem)
            if cpu:
                values["cpu.max"] = f"{int(cpu * period)} {period}"
            return [(root / "lecture07" / self.user.name, values)]
        targets = []
        if mem and (root / "memory").is_dir():
            targets.append((root / "memory" / "lecture07" / self.user.name, {"memory.limit_in_bytes": str(mem)}))
        if cpu and (root / "cpu").is_dir():
            targets.append((root / "cpu" / "lecture07" / self.user.name,
                            {"cpu.cfs_period_us": str(period), "cpu.cfs_quota_us": str(int(cpu * period))}))
        return targets

    def _join_cgroups(self, pid: int) -> list[str]:
        applied = []
        for path, values in self._cgroups():
            try:
                if path.parent.name == "lecture07" and (path.parent.parent / "cgroup.subtree_control").exists():
                    path.parent.mkdir(exist_ok=True)  # v2：在父 cgroup 里打开 memory 和 cpu 控制器
                    for ctl in ("+memory", "+cpu"):
                        for p in (path.parent.parent, path.parent):
                            try:
                                (p / "cgroup.subtree_control").write_text(ctl)
                            except OSError:
                                pass
                path.mkdir(parents=True, exist_ok=True)
                for name, value in values.items():
                    (path / name).write_text(value)
                (path / "cgroup.procs").write_text(str(pid))
                applied.append(f"{path}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
            except OSError as e:
                self.log.warning("cgroup %s 不可用（%s）：这一层限制没有生效", path, e)
        return applied

    async def start(self):
        home = self._home()
        self._link(home / "lib", COURSE_LIB)
        if self._role() == "grader":
            self._link(home / "lecture07", COURSE_ROOT)
        prlimit = shutil.which("prlimit")
        limits = []
        if prlimit:
            limits = [f"--nproc={NPROC}"]
            if self.mem_limit:
                limits.append(f"--as={int(self.mem_limit)}")
            if self.cmd[0] != prlimit:  # 同一个 Spawner 对象会被重复启动
                self.cmd = [prlimit, *limits, "--", *self.cmd]
        else:
            self.log.warning("没有 prlimit（util-linux）：每进程内存和进程数的上限没有生效")
        ip_port = await super().start()
        applied = self._join_cgroups(self.pid)
        self.log.info("%s 的服务器（pid %s）的资源限制：prlimit %s；cgroup %s", self.user.name, self.pid,
                      " ".join(limits) or "无", "; ".join(applied) or "无")
        return ip_port

    async def stop(self, now=False):
        await super().stop(now=now)
        for path, _ in self._cgroups():
            try:
                path.rmdir()
            except OSError:
                pass


c.JupyterHub.spawner_class = CourseSpawner

# ---------------------------------------------------------------- 空闲回收、交换服务
# 一小时没有活动的服务器被停掉（学生的文件都在家目录里，下次登录再启动）
c.JupyterHub.load_roles = [{
    "name": "jupyterhub-idle-culler-role",
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
    "services": ["jupyterhub-idle-culler-service"],
}, {
    # 名单同步只需要读这门课的两个组
    "name": "ngshare-roster-role",
    "scopes": [f"read:groups!group={STUDENTS_GROUP}", f"read:groups!group={GRADERS_GROUP}"],
    "services": ["ngshare-roster"],
}]
# ngshare 的管理员就是名单同步服务 ngshare-roster（ngshare 只按名字认人，分不出同名的 hub 用户和服务）
if "ngshare-roster" in set(STUDENTS) | set(INSTRUCTORS) | set(ADMINS):
    raise SystemExit("hub 用户不能叫 ngshare-roster：这是交换服务的管理员（名单同步服务）的名字")
# ngshare 的数据目录：只属于 ngshare 的系统用户（学生、助教的服务器都不挂它、读不到它）
try:
    _ngshare_user = pwd.getpwnam(NGSHARE_USER)
except KeyError:
    raise SystemExit(f"没有系统用户 {NGSHARE_USER}（交换服务 ngshare 以它运行）：先 useradd --system "
                     f"--no-create-home --shell /usr/sbin/nologin {NGSHARE_USER}") from None
if not Path(NGSHARE_PYTHON).exists():
    raise SystemExit(f"没有 ngshare 的 venv（{NGSHARE_PYTHON}）：make hub-deps，或用 LECTURE07_HUB_NGSHARE_PYTHON 指定")
NGSHARE_DATA.mkdir(parents=True, exist_ok=True)
if os.geteuid() == 0:
    os.chown(NGSHARE_DATA, _ngshare_user.pw_uid, _ngshare_user.pw_gid)
os.chmod(NGSHARE_DATA, 0o700)
c.JupyterHub.services = [{
    "name": "jupyterhub-idle-culler-service",
    "command": [sys.executable, "-m", "jupyterhub_idle_culler",
                f"--timeout={setting('IDLE_TIMEOUT', '3600')}", "--cull-every=300"],
}, {
    # 交换服务：ngshare 用调用者的 token 向 hub 问“你是谁”（/hub/api/user），再按它自己的课程名单放行。
    # ngshare 自己把监听地址写死成 0.0.0.0；ngshare_local.py 让它只监听 127.0.0.1（别的机器连不上这个端口）。
    # 唯一的 ngshare 管理员是下面的 ngshare-roster 服务（它建课程、同步名单）；别让 hub 里有同名的用户。
    "name": "ngshare",
    "url": f"http://127.0.0.1:{NGSHARE_PORT}",
    "user": NGSHARE_USER,
    "cwd": str(NGSHARE_DATA),
    "command": [NGSHARE_PYTHON, str(HERE / "ngshare_local.py"), "--admins", "ngshare-roster",
                "--database", f"sqlite:///{NGSHARE_DATA / 'ngshare.db'}", "--storage", f"{NGSHARE_DATA / 'files'}/"],
    "oauth_no_confirm": True,
}, {
    # 把 hub 的两个组同步成 ngshare 里这门课的教师和学生（启动时一次，之后每 ROSTER_INTERVAL 秒一次）
    "name": "ngshare-roster",
    "user": NGSHARE_USER,
    "command": [sys.executable, str(HERE / "ngshare_roster.py")],
    "environment": {
        "LECTURE07_COURSE_ID": COURSE_ID,
        "LECTURE07_NGSHARE_URL": NGSHARE_URL,
        "LECTURE07_STUDENTS_GROUP": STUDENTS_GROUP,
        "LECTURE07_GRADERS_GROUP": GRADERS_GROUP,
        "LECTURE07_ROSTER_INTERVAL": setting("ROSTER_INTERVAL", "60"),
    },
}]
