"""在课程目录之外的临时副本里、在 bubblewrap 沙箱中执行一份学生 notebook。

保证（有 bwrap 时）：
- 学生代码看不到课程目录（gradebook.db、source/、solutions/、lib/grading/ 都被一层空的 tmpfs 盖住）、
  看不到原始提交文件夹、其他学生的临时副本（/tmp 是新的空 tmpfs）和评分人的家目录；没有网络；
  以 root 评分时（bwrap 允许的话）切换到每个并行槽位自己的 uid，进程数上限（RLIMIT_NPROC）因此真正生效；
  容器里的 bwrap 不能切换 uid 时，学生代码在沙箱里是没有任何 capability 的 root，进程数只靠审计钩子限制。
- 每个单元格有超时（先中断，不响应再整体杀掉），内存上限（RLIMIT_AS），进程数上限，文件大小上限。
- 内核通常不是新启动的 Python，而是从模板进程 fork 出来的（见 ForkServer）：模板在任何学生代码之前启动、
  只导入库、从不运行学生代码；每份提交照样由 bwrap 新建自己的沙箱，fork 出来的内核加入它、只评这一份，
  沙箱结束时它和学生留下的进程一起结束。
没有 bwrap 时仍然成立的只有：临时副本在课程目录之外、不含 lib/grading/ 和答案、资源上限（root 身份下
进程数上限只靠审计钩子）；学生代码可以用绝对路径读写评分人能读写的任何文件、可以联网。
这类访问会被审计钩子记录并标记为可疑，但无法阻止。分数仍然只由干净进程里的检查给出。
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import runner
from .runner import SANDBOX_WORKDIR

RUNNER_SOURCE = (Path(__file__).with_name("runner.py")).read_text(encoding="utf-8")
SANDBOX_RUNNER = "/tmp/_grader_runner.py"
UID_BASE = 61000
# 每个评分进程用自己的一段 uid（每段 64 个槽位）：同一台机器上同时跑两次评分（两门课、两个助教、
# 并行的测试）时，一次评分的进程数上限（RLIMIT_NPROC 按 uid 计）不会把另一次的进程也算进去。
RUN_UID_BASE = UID_BASE + 64 * (os.getpid() % 512)

NO_BWRAP_MESSAGE = (
    "未找到可用的 bubblewrap（bwrap）：学生代码将直接在临时副本里运行，没有文件系统和网络隔离。"
    "分数仍然只由干净进程里的检查给出，但学生代码可以用绝对路径读取评分人能读到的文件。"
    "安装方法：sudo apt-get install bubblewrap")


@dataclass
class Limits:
    cell_timeout: float = 120.0      # 每个单元格的秒数（torch 单元格在慢机器上也够用）
    memory_mb: int = 4096            # RLIMIT_AS（虚拟内存）；导入 torch 大约需要 1.5 GB 虚拟地址空间
    max_procs: int = 64              # 同一 uid 的进程+线程数上限
    max_forks: int = 16              # 审计钩子允许学生代码创建的子进程数
    file_mb: int = 256               # 单个文件大小上限
    grace: float = 10.0              # 超时后等待中断生效的秒数，之后整体杀掉


@dataclass
class ExecResult:
    outputs: dict = field(default_factory=dict)        # cell index -> list of outputs
    exec_counts: dict = field(default_factory=dict)
    timed_out_cells: list = field(default_factory=list)
    memory_cells: list = field(default_factory=list)
    records: dict | None = None
    changed: list = field(default_factory=list)
    flags: list = field(default_factory=list)
    forks: int = 0
    junk: int = 0                                      # 通道上不属于本次运行的数据行数
    crashed: bool = False
    killed_for_timeout: bool = False
    fail_cell: int | None = None                       # 崩溃/被杀时正在运行的单元格
    stderr_tail: str = ""
    seconds: float = 0.0
    timings: dict = field(default_factory=dict)               # 各阶段到达的时刻（秒，从启动算起）


_BWRAP_CACHE: dict = {}


def bwrap_status() -> tuple[bool, str]:
    """(能否使用 bwrap, 说明)。结果缓存在进程里。"""
    if "v" in _BWRAP_CACHE:
        return _BWRAP_CACHE["v"]
    exe = shutil.which("bwrap")
    if exe is None:
        res = (False, NO_BWRAP_MESSAGE)
    else:
        cmd = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
               "--unshare-all", "--die-with-parent", "true"]
        try:
            p = subprocess.run(cmd, capture_output=True, timeout=30)
            ok = p.returncode == 0
            msg = "bubblewrap 可用" if ok else (NO_BWRAP_MESSAGE + "（bwrap 存在但无法运行："
                                               + p.stderr.decode(errors="replace").strip()[:200] + "）")
        except Exception as e:  # pragma: no cover
            ok, msg = False, NO_BWRAP_MESSAGE + f"（{e}）"
        res = (ok, msg)
    _BWRAP_CACHE["v"] = res
    return res


def bwrap_can_drop_uid() -> bool:
    """以 root 身份运行 bwrap 时，沙箱里能否切换到别的 uid（容器里的 bwrap 可能只能建只映射 uid 0 的
    user namespace，那样切换会失败；这时不切换 uid，进程数上限只靠审计钩子）。"""
    if "drop" in _BWRAP_CACHE:
        return _BWRAP_CACHE["drop"]
    ok = False
    if os.geteuid() == 0 and bwrap_status()[0]:
        cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
               "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--die-with-parent",
               "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", sys.executable, "-S", "-c",
               f"import os; os.setgroups([]); os.setgid({UID_BASE}); os.setuid({UID_BASE}); "
               f"assert os.getuid() == {UID_BASE}"]
        try:
            ok = subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0
        except Exception:  # pragma: no cover
            ok = False
    _BWRAP_CACHE["drop"] = ok
    return ok


def is_under(path: Path, base: Path) -> bool:
    try:
        path.resolve().relative_to(base.resolve())
        return True
    except ValueError:
        return False


def _count_user_procs(uid: int) -> int:
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    n += len(os.listdir(f"/proc/{d}/task"))
            except OSError:
                pass
    return n


def _python_readable_by_others() -> bool:
    """降权后的 uid 能否读到 Python 安装（每一级目录都要对其他人可执行）。"""
    for base in {Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent}:
        p = base.resolve()
        for d in [p, *p.parents]:
            try:
                if not os.stat(d).st_mode & 0o001:
                    return False
            except OSError:
                return False
    return True


def kernel_can_read(path: Path, use_bwrap: bool) -> bool:
    """学生的内核能不能读到评分人的这个文件（学期密钥）。有 bwrap：课程目录被盖住，pid 命名空间里也看不见评分进程，
    读不到。没有 bwrap：以 root 评分、内核换成槽位的 uid（和 execute 里的条件相同）时，只有文件对其他人可读才读得到；
    否则内核和评分人是同一个用户（或是 root），文件和评分进程的内存（/proc/PID/mem）都读得到。"""
    if use_bwrap:
        return False
    if os.geteuid() == 0 and _python_readable_by_others():
        return bool(Path(path).stat().st_mode & 0o004)
    return True


def prepare_scratch(base: Path, course_root: Path, nb: dict) -> Path:
    """临时副本：lib/（去掉 lib/grading/）+ 这份 notebook。不含 source/、solutions/、gradebook.db。"""
    scratch = Path(tempfile.mkdtemp(prefix="sub-", dir=base))
    work = scratch / "work"
    work.mkdir()
    lib_src = course_root / "lib"
    if lib_src.is_dir():
        shutil.copytree(lib_src, work / "lib",
                        ignore=lambda d, names: [n for n in names if n in ("grading", "__pycache__")
                                                 or n.endswith(".pyc")])
    (work / "submission.ipynb").write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    (scratch / "runner.py").write_text(RUNNER_SOURCE, encoding="utf-8")
    return scratch


def kernel_env(scratch: Path | None) -> dict:
    """内核的环境变量。scratch 为 None：在 bwrap 沙箱里（缓存和配置都在这份提交私有的 /tmp 里）。"""
    home, tmp = (SANDBOX_WORKDIR, "/tmp") if scratch is None else (str(scratch / "work"), str(scratch))
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": f"{tmp}/mpl", "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0", "CI": "true", "TQDM_DISABLE": "1", "PYTHONNOUSERSITE": "1",
        "NBGRADER_EXECUTION": "autograde",  # 和 nbgrader autograde 一样：练习里“自动评分时跳过”的训练和选做测量不运行
        "XDG_CACHE_HOME": f"{tmp}/cache",
    }


# Ctrl-C：评分进程设置它，正在运行的沙箱在半秒之内被杀掉（execute 抛出 Interrupted，不留执行结果）
STOP = threading.Event()


class Interrupted(Exception):
    """评分被中断（Ctrl-C）：这份提交没有评完，不存执行结果，下次运行重新执行。"""


class SandboxError(Exception):
    """沙箱里的内核没能启动（学生代码一行也没运行）：评分环境的问题，不是学生的。"""


class ForkServerError(Exception):
    pass


class ForkServer:
    """模板进程（runner.serve_template）的评分进程一侧：每种预加载（"numpy"、"torch"）一个模板进程，
    第一次用到时启动，评分结束时 close()。它们在任何学生代码之前启动、只导入库，自己从不运行学生代码；
    spawn() 让模板 fork 一个只用一次的内核，加入 execute() 刚为这份提交新建的 bwrap 沙箱。
    任何一步失败都会关掉这个加速（之后的提交改用全新的 Python，隔离不变）并提示一次。"""

    def __init__(self, folder: Path):
        self.folder = folder
        self.error: str | None = None
        self.spawned = 0  # fork 出来的内核数
        self._templates: dict = {}  # kind -> (Popen, socket)
        self._locks = {"numpy": threading.Lock(), "torch": threading.Lock()}

    def _socket(self, kind: str) -> socket.socket:
        if kind not in self._templates:
            self.folder.mkdir(parents=True, exist_ok=True)
            script = self.folder / f"runner_{kind}.py"
            script.write_text(RUNNER_SOURCE, encoding="utf-8")
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with open(self.folder / f"{kind}.log", "wb") as log:
                proc = subprocess.Popen([sys.executable, "-u", str(script), "--template", kind, str(theirs.fileno())],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                        env=kernel_env(None), cwd="/", pass_fds=(theirs.fileno(),),
                                        start_new_session=True)
            theirs.close()
            ours.settimeout(600)  # 包括模板第一次导入 torch 的时间
            self._templates[kind] = (proc, ours)
        return self._templates[kind][1]

    def spawn(self, kind: str, pid: int, namespaces: dict, fds: list[int], argv: list[str]) -> None:
        """fds：内核的控制输入（读端）、stderr 文件、通道（写端）。"""
        with self._locks[kind]:
            if self.error is not None:
                raise ForkServerError(self.error)
            try:
                sock = self._socket(kind)
                request = json.dumps({"pid": pid, "namespaces": namespaces, "argv": argv}).encode()
                socket.send_fds(sock, [request], fds)
                reply = sock.recv(65536)
            except OSError as e:
                reply = f"{type(e).__name__}: {e}".encode()
            if reply == b"ok":
                self.spawned += 1
            else:
                try:
                    log = (self.folder / f"{kind}.log").read_text(errors="replace").strip().splitlines()[-1:]
                except OSError:
                    log = []
                self.error = (reply.decode(errors="replace") or "模板进程退出了") + (f"（{log[0]}）" if log else "")
                print(f"注意：预先导入库的模板进程不能用（{self.error}），之后的提交改为每份启动全新的 Python"
                      "（慢一些，隔离和分数不变）。", file=sys.stderr)
                raise ForkServerError(self.error)

    def close(self) -> None:
        for proc, sock in self._templates.values():
            sock.close()  # 模板读到 EOF 后退出
        for proc, sock in self._templates.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


ALERT_KINDS = {"introspect", "read", "write", "network", "process", "eq"}
MAX_FLAGS = 100


def _take_alert(res: ExecResult, ev: dict) -> None:
    """runner 在发现的那一刻发出的可疑迹象（runner._install_tripwire）：{"ev": "alert", "kind": ..., "hex": 说明的
    UTF-8 十六进制}。不带 nonce：学生伪造一条只会标记自己。不认识的写法记作评分通道异常。"""
    try:
        kind, detail = str(ev["kind"]), bytes.fromhex(str(ev["hex"])).decode("utf-8", "replace")[:300]
    except (KeyError, ValueError):
        kind, detail = "channel", "格式不对的可疑迹象"
    if kind not in ALERT_KINDS:
        kind, detail = "channel", f"不认识的可疑迹象 {kind[:40]!r}"
    if len(res.flags) < MAX_FLAGS:
        res.flags.append([kind, detail])


# 模板 fork 的内核要加入的沙箱里先运行的占位进程：它说一声 ready（这时 bwrap 已经建好整个沙箱），然后等到
# 评分进程关闭它的标准输入才退出；它一退出，沙箱的 pid 命名空间就结束，里面剩下的进程全部被操作系统杀掉。
HOLDER = "import os, sys; os.write(1, b'ready'); sys.stdin.buffer.read()"


def _start_forked(forkserver: ForkServer, bwrap_cmd: list, env: dict, errf, channel_w: int, with_torch: bool,
                  runner_args: list, work: Path):
    """用和全新内核完全相同的 bwrap 参数新建沙箱（里面是占位进程），再让模板 fork 一个内核加入它。
    返回 (占位进程, 内核的控制输入)。"""
    info_r, info_w = os.pipe()
    ready_r, ready_w = os.pipe()
    proc = subprocess.Popen(bwrap_cmd + ["--info-fd", str(info_w), sys.executable, "-I", "-S", "-c", HOLDER],
                            stdin=subprocess.PIPE, stdout=ready_w, stderr=errf, env=env, pass_fds=(info_w,),
                            start_new_session=True, cwd=str(work))
    os.close(info_w)
    os.close(ready_w)
    control_r = control_w = None
    try:
        if not select.select([ready_r], [], [], 60)[0] or os.read(ready_r, 16) != b"ready":
            raise ForkServerError("bwrap 沙箱没有启动")
        info = b""
        while select.select([info_r], [], [], 10)[0] and (chunk := os.read(info_r, 65536)):
            info += chunk
            try:
                namespaces = json.loads(info)
                break
            except json.JSONDecodeError:
                continue
        else:
            raise ForkServerError(f"bwrap --info-fd 的输出不完整：{info[:200]!r}")
        control_r, control_w = os.pipe()
        forkserver.spawn("torch" if with_torch else "numpy", namespaces["child-pid"], namespaces,
                         [control_r, errf.fileno(), channel_w], [SANDBOX_RUNNER, *runner_args])
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        if control_w is not None:
            os.close(control_w)
        raise
    finally:
        os.close(info_r)
        os.close(ready_r)
        if control_r is not None:
            os.close(control_r)
    return proc, os.fdopen(control_w, "wb")


def execute(nb: dict, *, course_root: Path, scratch_base: Path, hide: list[Path], limits: Limits,
            slot: int, control: dict, use_bwrap: bool, forkserver: ForkServer | None = None) -> ExecResult:
    """执行 notebook 的全部代码单元格，再在同一个内核里运行探针。control 是学生单元格跑完后才发送的控制消息
    （nonce、每个 grade_id 的种子 seeds、probes_source、grade_ids）。forkserver：有 bwrap 时，内核由预先导入好库的模板 fork 出来
    （见 ForkServer），否则启动全新的 Python。"""
    if STOP.is_set():
        raise Interrupted()
    res = ExecResult()
    t_start = time.monotonic()
    scratch = prepare_scratch(scratch_base, course_root, nb)
    work = scratch / "work"
    is_root = os.geteuid() == 0
    drop_uid = -1
    if is_root and ((use_bwrap and bwrap_can_drop_uid()) or (not use_bwrap and _python_readable_by_others())):
        drop_uid = RUN_UID_BASE + slot
        if not use_bwrap:  # 降权的内核要能进到 work/：上面两级是 mkdtemp 建的 0700 目录（只开“可进入”，不能列目录）
            for d in (Path(scratch_base), scratch):
                os.chmod(d, 0o711)
        for dirpath, dirnames, filenames in os.walk(work):
            os.chown(dirpath, drop_uid, drop_uid)
            for fn in filenames:
                os.chown(os.path.join(dirpath, fn), drop_uid, drop_uid)
    if use_bwrap:
        nb_path, runner_path, root_arg = f"{SANDBOX_WORKDIR}/submission.ipynb", SANDBOX_RUNNER, str(course_root)
    else:
        nb_path, runner_path, root_arg = str(work / "submission.ipynb"), str(scratch / "runner.py"), str(course_root)

    r_fd, w_fd = os.pipe()
    os.set_inheritable(w_fd, True)
    nproc_limit = -1  # 以 root 身份且不降权时 RLIMIT_NPROC 对 root 无效，不设
    if drop_uid >= 0:
        nproc_limit = limits.max_procs
    elif not is_root:
        nproc_limit = _count_user_procs(os.geteuid()) + limits.max_procs
    # 资源上限由 runner 在执行任何学生代码之前对自己设置（软硬上限相同，学生代码无法再调高）；
    # 不用 preexec_fn，这样 subprocess 可以用 vfork，评分进程很大时启动快得多
    runner_args = [nb_path, str(limits.cell_timeout), str(limits.max_forks), str(drop_uid), str(drop_uid),
                   root_arg, str(w_fd), str(limits.memory_mb), str(nproc_limit), str(limits.file_mb)]
    # 解释器用解析过符号链接的目录里的那个（venv 本身可以是指向别处的链接；下面挂回沙箱的是解析后的目录）
    py = str(Path(sys.executable).parent.resolve() / Path(sys.executable).name)
    if use_bwrap:
        cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--perms", "1777",
               "--tmpfs", "/tmp"]
        hidden = []
        for h in [course_root, Path.home(), scratch_base, *hide]:
            h = Path(h).resolve()
            if h.is_dir() and str(h) != "/" and not any(is_under(h, x) for x in hidden):
                hidden.append(h)
        for h in hidden:
            cmd += ["--tmpfs", str(h)]
        # Python 本身（venv 和它指向的解释器）可能就在被盖住的目录里（课程目录里的 .venv、家目录里的
        # pyenv、/tmp 下的克隆）：把它们只读地挂回原处，否则沙箱里找不到解释器。
        covered = hidden + [Path("/tmp").resolve()]
        rebind = set()
        for p in (sys.prefix, sys.base_prefix, os.path.dirname(sys.executable),
                  os.path.dirname(os.path.realpath(sys.executable))):
            p = Path(p).resolve()
            if any(is_under(p, h) for h in covered):
                rebind.add(p if p.name != "bin" else p.parent)
        made = set()
        for p in sorted(rebind, key=lambda x: len(str(x))):
            for a in reversed(p.parents):  # 中间目录要对降权后的 uid 可进入
                if any(is_under(a, h) and a != h for h in covered) and a not in made:
                    cmd += ["--perms", "0755", "--dir", str(a)]
                    made.add(a)
            cmd += ["--ro-bind", str(p), str(p)]
        cmd += ["--bind", str(work), SANDBOX_WORKDIR, "--ro-bind", str(scratch / "runner.py"), SANDBOX_RUNNER,
                "--chdir", SANDBOX_WORKDIR, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
        if drop_uid >= 0:
            cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            cmd += ["--unshare-user-try"]
    else:
        cmd = []
    env = kernel_env(None if use_bwrap else scratch)

    errf = open(scratch / "stderr.txt", "wb")
    proc = None
    if forkserver is not None and use_bwrap:
        try:
            proc, control_pipe = _start_forked(forkserver, cmd, env, errf, w_fd, runner.needs_torch(nb["cells"]),
                                               runner_args, work)
        except ForkServerError:
            proc = None  # 模板不能用：这一份（和之后的）改用全新的 Python
    if proc is None:
        proc = subprocess.Popen(cmd + [py, "-u", runner_path, *runner_args], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=errf, env=env, pass_fds=(w_fd,),
                                start_new_session=True, cwd=str(work))
        control_pipe = proc.stdin
    os.close(w_fd)
    n_code = sum(1 for c in nb["cells"] if c.get("cell_type") == "code")
    total_budget = (n_code + len(control.get("grade_ids", [])) + 2) * limits.cell_timeout + 60
    deadline_total = time.monotonic() + total_budget
    cell_started: tuple[int, float] | None = None
    in_probes_since = None
    buf = b""
    total_bytes = 0
    got_done = False
    cells_done = False
    killed = False
    interrupted = False

    def kill():
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    try:
        while True:
            now = time.monotonic()
            if STOP.is_set():
                interrupted = killed = True
                kill()
                break
            if cell_started is not None and now - cell_started[1] > limits.cell_timeout + limits.grace:
                res.fail_cell = cell_started[0]
                res.killed_for_timeout = True
                killed = True
                kill()
                break
            if in_probes_since is not None and now - in_probes_since > (
                    len(control.get("grade_ids", [])) + 1) * (limits.cell_timeout + limits.grace):
                res.killed_for_timeout = True
                killed = True
                kill()
                break
            if now > deadline_total:
                res.killed_for_timeout = True
                res.fail_cell = cell_started[0] if cell_started else None
                killed = True
                kill()
                break
            ready, _, _ = select.select([r_fd], [], [], 0.5)
            if not ready:
                continue
            chunk = os.read(r_fd, 65536)
            if not chunk:
                break
            total_bytes += len(chunk)
            if total_bytes > 64 * 1024 * 1024:
                res.flags.append(["channel", "输出过多"])
                killed = True
                kill()
                res.crashed = True
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    ev = json.loads(line)
                    kind = ev["ev"]
                except Exception:
                    res.junk += 1
                    continue
                if kind in ("ready", "cells_done", "record", "done") and kind not in res.timings:
                    res.timings[kind] = round(time.monotonic() - t_start, 3)
                if kind == "start" and not cells_done:
                    cell_started = (int(ev["cell"]), time.monotonic())
                elif kind == "end" and not cells_done:
                    idx = int(ev["cell"])
                    res.outputs[idx] = ev.get("outputs", [])
                    res.exec_counts[idx] = ev.get("execution_count")
                    if ev.get("timed_out"):
                        res.timed_out_cells.append(idx)
                    if ev.get("memory"):
                        res.memory_cells.append(idx)
                    cell_started = None
                elif kind == "cells_done" and not cells_done:
                    cells_done = True
                    cell_started = None
                    in_probes_since = time.monotonic()
                    try:
                        control_pipe.write((json.dumps(control) + "\n").encode())
                        control_pipe.flush()
                    except (BrokenPipeError, OSError):
                        pass
                elif kind == "record" and cells_done and ev.get("nonce") == control["nonce"] \
                        and res.records is None:
                    res.records = ev.get("records") or {}
                    res.changed = list(ev.get("changed") or [])
                    res.flags.extend(ev.get("flags") or [])
                    res.forks = int(ev.get("forks") or 0)
                elif kind == "done" and ev.get("nonce") == control["nonce"] and res.records is not None:
                    got_done = True
                elif kind == "alert":
                    _take_alert(res, ev)
                elif kind == "ready":
                    pass
                else:
                    res.junk += 1
    finally:
        for pipe in {control_pipe, proc.stdin}:  # 模板 fork 的内核：关掉占位进程的标准输入，沙箱随之结束
            try:
                pipe.close()
            except OSError:
                pass
        if not got_done:
            kill()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover
            kill()
            proc.wait()
        kill()  # 学生留下的后台进程（同一进程组）
        os.close(r_fd)
        errf.close()
        try:
            res.stderr_tail = (scratch / "stderr.txt").read_text(errors="replace")[-1500:]
        except OSError:
            pass
        shutil.rmtree(scratch, ignore_errors=True)
    if interrupted:
        raise Interrupted()
    if "ready" not in res.timings and not killed:
        raise SandboxError(res.stderr_tail.strip()[-300:] or f"退出码 {proc.returncode}")
    if not got_done and not killed:
        res.crashed = True
        res.fail_cell = cell_started[0] if cell_started else None
    res.seconds = time.monotonic() - t_start
    return res
