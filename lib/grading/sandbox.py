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

execute 一步一步（每一步一个函数，各自的文件）：
prepare_scratch（临时副本）→ choose_uid / hand_over（以 root 评分时换成槽位自己的 uid）→
sandbox_bwrap.bwrap_command（沙箱的命令行）→ start_kernel（模板 fork 的内核，sandbox_forkserver；或全新的 Python）→
sandbox_supervisor.Supervisor（读评分通道、到时间就杀掉）→ _clean_up（杀掉剩下的进程、删掉临时副本）→ _outcome。
内核那一侧（runner.py）拿到的文件、环境变量和参数在 sandbox_kernel.py。
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import runner
from .runner import SANDBOX_WORKDIR
from .sandbox_bwrap import (UID_BASE, options_via_fd, bwrap_can_drop_uid, bwrap_command, bwrap_status, is_under,  # noqa: F401
                            sandbox_python)
from .sandbox_forkserver import ForkServer, ForkServerError, start_forked
from .sandbox_kernel import SANDBOX_RUNNER, kernel_env, setup_line, ship
from .sandbox_supervisor import ExecResult, Supervisor

# 每个评分进程用自己的一段 uid（每段 64 个槽位）：同一台机器上同时跑两次评分（两门课、两个助教、
# 并行的测试）时，一次评分的进程数上限（RLIMIT_NPROC 按 uid 计）不会把另一次的进程也算进去。
RUN_UID_BASE = UID_BASE + 64 * (os.getpid() % 512)

# Ctrl-C：评分进程设置它，正在运行的沙箱在半秒之内被杀掉（execute 抛出 Interrupted，不留执行结果）
STOP = threading.Event()


class Interrupted(Exception):
    """评分被中断（Ctrl-C）：这份提交没有评完，不存执行结果，下次运行重新执行。"""


class SandboxError(Exception):
    """沙箱里的内核没能启动（学生代码一行也没运行）：评分环境的问题，不是学生的。"""


@dataclass
class Limits:
    cell_timeout: float = 120.0      # 每个单元格的秒数（torch 单元格在慢机器上也够用）
    memory_mb: int = 4096            # RLIMIT_AS（虚拟内存）；导入 torch 大约需要 1.5 GB 虚拟地址空间
    max_procs: int = 64              # 同一 uid 的进程+线程数上限
    max_forks: int = 16              # 审计钩子允许学生代码创建的子进程数
    file_mb: int = 256               # 单个文件大小上限
    grace: float = 10.0              # 超时后等待中断生效的秒数，之后整体杀掉


# ---------------------------------------------------------------- 临时副本
_FONT_CACHE: dict = {}
_FONT_LOCK = threading.Lock()


def font_cache(base: Path) -> Path | None:
    """matplotlib 的字体缓存（fontlist-*.json），每次评分建一次，放在 base/mpl-cache。每份提交的 MPLCONFIGDIR
    （沙箱里的 /tmp/mpl）一开始是空的：没有它时学生第一次画图，matplotlib 要运行 fc-list（一个子进程）现建缓存，
    诚实的 plt.imshow 会被标成“创建了子进程”，每份还要多花一两秒。没装 matplotlib 或建不成时 None（照旧现建）。"""
    with _FONT_LOCK:
        if base not in _FONT_CACHE:
            cache = Path(base) / "mpl-cache"
            cache.mkdir(exist_ok=True)
            env = dict(kernel_env(None), MPLCONFIGDIR=str(cache), HOME=str(cache))
            try:
                ok = subprocess.run([sandbox_python(), "-c", "import matplotlib.font_manager"], env=env, cwd=str(cache),
                                    capture_output=True, timeout=300).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                ok = False
            _FONT_CACHE[base] = cache if ok and any(cache.glob("fontlist-*.json")) else None
        return _FONT_CACHE[base]


def prepare_scratch(base: Path, course_root: Path, nb: dict) -> Path:
    """临时副本：lib/（去掉 lib/grading/）+ 这份 notebook，旁边是 runner.py 和它导入的文件（sandbox_kernel.SHIPPED），
    mpl/ 里是 matplotlib 的字体缓存（font_cache）。不含 source/、solutions/、gradebook.db。"""
    scratch = Path(tempfile.mkdtemp(prefix="sub-", dir=base))
    work = scratch / "work"
    work.mkdir()
    fonts = font_cache(base)
    shutil.copytree(fonts, scratch / "mpl") if fonts is not None else (scratch / "mpl").mkdir()
    lib_src = course_root / "lib"
    if lib_src.is_dir():
        shutil.copytree(lib_src, work / "lib",
                        ignore=lambda d, names: [n for n in names if n in ("grading", "__pycache__")
                                                 or n.endswith(".pyc")])
    (work / "submission.ipynb").write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    ship(scratch)
    return scratch


# ---------------------------------------------------------------- 内核的 uid
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


def choose_uid(slot: int, use_bwrap: bool) -> int:
    """内核换成哪个 uid：以 root 评分、而且换得了（有 bwrap 时 bwrap 允许；没有 bwrap 时降权的 uid 读得到 Python）
    时是槽位自己的 uid，否则 -1（不换）。"""
    if os.geteuid() != 0:
        return -1
    if (use_bwrap and bwrap_can_drop_uid()) or (not use_bwrap and _python_readable_by_others()):
        return RUN_UID_BASE + slot
    return -1


def hand_over(scratch: Path, scratch_base: Path, uid: int, use_bwrap: bool) -> None:
    """把临时副本的 work/ 交给降权的 uid。没有 bwrap 时它还要能进到 work/：上面两级是 mkdtemp 建的 0700 目录
    （只开“可进入”，不能列目录）。"""
    if not use_bwrap:
        for d in (Path(scratch_base), scratch):
            os.chmod(d, 0o711)
    for top in ("work", "mpl"):
        for dirpath, dirnames, filenames in os.walk(scratch / top):
            os.chown(dirpath, uid, uid)
            for fn in filenames:
                os.chown(os.path.join(dirpath, fn), uid, uid)


def nproc_limit(drop_uid: int, limits: Limits) -> int:
    """RLIMIT_NPROC（按 uid 计）：换了 uid 时就是上限；非 root 评分时加上评分人自己已有的进程；
    以 root 身份且不换 uid 时对 root 无效，不设（-1）。"""
    if drop_uid >= 0:
        return limits.max_procs
    if os.geteuid() != 0:
        return _count_user_procs(os.geteuid()) + limits.max_procs
    return -1


def kernel_can_read(path: Path, use_bwrap: bool) -> bool:
    """学生的内核能不能读到评分人的这个文件（学期密钥）。有 bwrap：课程目录被盖住，pid 命名空间里也看不见评分进程，
    读不到。没有 bwrap：以 root 评分、内核换成槽位的 uid（和 choose_uid 的条件相同）时，只有文件对其他人可读才读得到；
    否则内核和评分人是同一个用户（或是 root），文件和评分进程的内存（/proc/PID/mem）都读得到。"""
    if use_bwrap:
        return False
    if os.geteuid() == 0 and _python_readable_by_others():
        return bool(Path(path).stat().st_mode & 0o004)
    return True


# ---------------------------------------------------------------- 启动内核
def start_kernel(cmd: list, setup: bytes, env: dict, errf, channel_w: int, scratch: Path, nb: dict,
                 forkserver: ForkServer | None):
    """启动内核，返回 (进程, 内核的控制输入)。cmd：bwrap 的命令行（没有沙箱时为空）；setup：控制输入的第一行
    （sandbox_kernel.setup_line）。有模板进程时让它 fork 一个内核加入新建的沙箱；模板不能用时（这一份和之后的）
    改用全新的 Python。"""
    work = scratch / "work"
    if forkserver is not None:
        try:
            return start_forked(forkserver, cmd, env, errf, channel_w, runner.needs_torch(nb["cells"]), setup, work)
        except ForkServerError:
            pass
    runner_path = SANDBOX_RUNNER if cmd else str(scratch / "runner.py")
    cmd, args_fd = options_via_fd(cmd) if cmd else ([], None)
    try:
        proc = subprocess.Popen(cmd + [sandbox_python(), "-u", runner_path], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=errf, env=env,
                                pass_fds=(channel_w,) + ((args_fd,) if args_fd is not None else ()),
                                start_new_session=True, cwd=str(work))
    finally:
        if args_fd is not None:
            os.close(args_fd)
    try:
        proc.stdin.write(setup)
        proc.stdin.flush()
    except OSError:  # 内核没起来：_outcome 报告 SandboxError
        pass
    return proc, proc.stdin


# ---------------------------------------------------------------- 执行一份提交
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
    drop_uid = choose_uid(slot, use_bwrap)
    if drop_uid >= 0:
        hand_over(scratch, scratch_base, drop_uid, use_bwrap)
    nb_path = f"{SANDBOX_WORKDIR}/submission.ipynb" if use_bwrap else str(scratch / "work" / "submission.ipynb")
    r_fd, w_fd = os.pipe()
    os.set_inheritable(w_fd, True)
    setup = setup_line(nb_path, limits, drop_uid, course_root, w_fd, nproc_limit(drop_uid, limits))
    cmd = bwrap_command(course_root, scratch_base, hide, scratch, drop_uid) if use_bwrap else []
    env = kernel_env(None if use_bwrap else scratch)
    errf = open(scratch / "stderr.txt", "wb")
    proc, control_pipe = start_kernel(cmd, setup, env, errf, w_fd, scratch, nb, forkserver if use_bwrap else None)
    os.close(w_fd)
    n_code = sum(1 for c in nb["cells"] if c.get("cell_type") == "code")
    supervisor = Supervisor(res, proc, r_fd, control_pipe, control, limits, STOP, t_start, n_code)
    try:
        watch = supervisor.run()
    finally:
        _clean_up(supervisor, r_fd, errf, scratch)
    return _outcome(res, watch, proc, t_start)


def _clean_up(supervisor: Supervisor, r_fd: int, errf, scratch: Path) -> None:
    """内核结束之后（或评分出错时）：关掉它的控制输入（模板 fork 的内核：占位进程的标准输入，沙箱随之结束），
    没有正常结束就杀掉，再杀掉学生留下的后台进程（同一进程组）；留下 stderr 的结尾，删掉临时副本。"""
    proc, res = supervisor.proc, supervisor.res
    for pipe in {supervisor.control_pipe, proc.stdin}:
        try:
            pipe.close()
        except OSError:
            pass
    if not supervisor.watch.done:
        supervisor.kill()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # pragma: no cover
        supervisor.kill()
        proc.wait()
    supervisor.kill()  # 学生留下的后台进程（同一进程组）
    os.close(r_fd)
    errf.close()
    try:
        res.stderr_tail = (scratch / "stderr.txt").read_text(errors="replace")[-1500:]
    except OSError:
        pass
    shutil.rmtree(scratch, ignore_errors=True)


def _outcome(res: ExecResult, watch, proc, t_start: float) -> ExecResult:
    """Ctrl-C：抛出 Interrupted。内核没说 ready 又不是我们杀的：评分环境的问题（SandboxError）。
    没收到 done 又不是我们杀的：内核崩溃了，记下当时运行的单元格。"""
    if watch.interrupted:
        raise Interrupted()
    if "ready" not in res.timings and not watch.killed:
        raise SandboxError(res.stderr_tail.strip()[-300:] or f"退出码 {proc.returncode}")
    if not watch.done and not watch.killed:
        res.crashed = True
        res.fail_cell = watch.cell[0] if watch.cell else None
    res.seconds = time.monotonic() - t_start
    return res
