"""在沙箱里执行一份学生 notebook 的脚本（评分进程把它的源码复制进沙箱再运行）。

这个文件只依赖标准库、IPython 和它旁边的 guard.py（审计钩子；沙箱里叫 _grader_guard.py，见 sandbox_kernel.py），
不导入 lib/ 的任何别的东西：它运行的地方看不到课程目录。
有 bwrap 时它通常不是这样启动的，而是作为模板进程（文件末尾的 serve_template）：先导入库，再为每份提交
fork 出一个内核、放进那份提交的沙箱，在那里运行同一个 main()。两种方式对学生代码来说没有区别。

协议（评分进程 <-> 本脚本）：
- 命令行参数：没有（全新的 Python 是 `python -u runner.py`；模板 fork 的内核也一样）。sys.argv 只剩本脚本。
- 控制输入（开始时是标准输入；学生的代码之前挪到别的 fd 上，标准输入换成 /dev/null，见 _take_control_input）：
  第一行 JSON 是设置：notebook 路径（沙箱内）nb_path、每个单元格的超时秒数 cell_timeout、子进程数上限 max_forks、
  要切换到的 uid（-1 不切换）、课程根目录 course_root（只用来认出读课程目录的代码）、通道 fd channel_fd、内存上限
  memory_mb、RLIMIT_NPROC nproc（-1 不设）、文件大小上限 file_mb。资源上限在执行学生代码之前设置。
  学生的单元格全部跑完、本脚本发出 cells_done 之后，评分进程才写入第二行：本次运行的随机 nonce、要探测的
  grade_id 和每个 grade_id 自己的种子（seeds；学期密钥从不进来，见 hidden_inputs.py）、probes.py 的源码。
  学生代码运行时还不存在这些值，所以事先打印或写好的“假记录”带不上正确的 nonce，也无法针对未知的种子准备答案。
- 通道 fd（只写）：每行一个 JSON 事件：{"ev": "start"/"end", ...}、{"ev": "cells_done"}、{"ev": "record", ...}、
  {"ev": "done"}；{"ev": "alert", "kind": ..., "hex": ...}：审计钩子（guard.py）发现可疑迹象的那一刻就发出，学生的
  代码事后抹不掉（kind 是 flags.Flag 里 runner 的一种，或 replaced：替换了的函数，forks：创建的进程超过上限）。
学生代码和本脚本在同一个进程里：它能改动本脚本之后用到的东西，所以记录里的数据只当作“学生函数的输出”，
对错全部由干净的评分进程重新计算（见 pipeline.judge）。可疑迹象（被替换的函数、越界的文件访问、创建进程、
窥探评分程序）由审计钩子报告，交给人来看。
"""
import _thread
import builtins
import io
import json
import os
import re
import sys
import threading
import time
import traceback

try:
    from . import guard as _guard  # 评分进程里（lib.grading.runner）
except ImportError:  # 沙箱里：sandbox_kernel 把 guard.py 以这个名字放在本文件旁边
    import _grader_guard as _guard

CHANNEL_FD = 3
_THIS_FILE = os.path.abspath(__file__)  # 学生看到的 traceback 里去掉本脚本的帧
SANDBOX_WORKDIR = "/tmp/submission"  # 沙箱里这份提交的工作目录（sandbox_bwrap.py 用同一个常量挂载）
_write = os.write
_exit_now = os._exit
_dumps = json.dumps
_monotonic = time.monotonic


def send(obj):
    data = (_dumps(obj, ensure_ascii=True, default=repr) + "\n").encode()
    try:
        while data:
            n = _write(CHANNEL_FD, data)
            data = data[n:]
    except OSError:
        pass


# ---------------------------------------------------------------- 审计钩子（guard.py）
# 文件、进程、网络、窥探评分程序、替换函数的检测全在 guard.py 的审计钩子里（沙箱里叫 _grader_guard.py）：它在学生的代码
# 之前装上，状态只在它自己的闭包里，学生的代码关不掉它。本脚本只用 sys.audit("lecture07.…") 告诉它进行到了哪一步
# （那个 sys.audit 是 main() 在学生的代码之前取好的）。
_state = {"child": False}  # 学生 fork 出来的子进程：单元格跑完就结束（不许它继续跑评分流程）


def _after_fork_in_child():
    _state["child"] = True


_ORIG_BUILTINS = dict(vars(builtins))


def _restore_builtins():
    """学生替换的内置函数恢复原样（本脚本自己也要用它们；替换本身由审计钩子在 lecture07.cell_done 时报告）。"""
    cur = vars(builtins)
    for k, v in _ORIG_BUILTINS.items():
        if cur.get(k, _ORIG_BUILTINS) is not v:
            cur[k] = v


# ---------------------------------------------------------------- 超时看门狗
class Watchdog(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.deadline = None
        self.fired = False
        self.lock = threading.Lock()

    def arm(self, seconds):
        with self.lock:
            self.deadline = _monotonic() + seconds
            self.fired = False

    def disarm(self):
        with self.lock:
            self.deadline = None

    def run(self):
        while True:
            time.sleep(0.05)
            with self.lock:
                if self.deadline is not None and _monotonic() > self.deadline:
                    self.deadline = _monotonic() + 2.0  # 学生代码吞掉中断时，2 秒后再打断一次
                    self.fired = True
                    _thread.interrupt_main()


# ---------------------------------------------------------------- 执行
def _own_rendering(exc):
    """异常自己的显示（IPython 的 _render_traceback_：有它就用它返回的几行代替调用栈，课程的 CheckFailed 就是一行
    “✗ 说明”，和学生在 JupyterLab 里看到的一样）。没有、出错或不是一串文字时 None。"""
    try:
        render = getattr(exc, "_render_traceback_", None)
        lines = render() if callable(render) else None
        if isinstance(lines, list) and all(isinstance(line, str) for line in lines):
            return lines
    except Exception:
        pass
    return None


def _error_output(exc, timed_out=False):
    if timed_out:
        return {"output_type": "error", "ename": "TimeoutError",
                "evalue": "这个单元格运行超时，评分时被中断（评分环境）",
                "traceback": ["TimeoutError: 这个单元格运行超时，评分时被中断（评分环境）"]}
    if isinstance(exc, MemoryError):
        text = "MemoryError: 内存超过评分环境的上限"
        return {"output_type": "error", "ename": "MemoryError", "evalue": "内存超过评分环境的上限",
                "traceback": [text]}
    tb = _own_rendering(exc)
    if tb is None:
        try:
            tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
            tb = [line for line in tb if _THIS_FILE not in line and "IPython/core" not in line]
        except Exception:
            tb = [repr(exc)]
    return {"output_type": "error", "ename": type(exc).__name__, "evalue": str(exc)[:2000],
            "traceback": [line.rstrip("\n") for line in tb][-30:]}


def _limit(text, n=20000):
    return text if len(text) <= n else text[:n] + "\n……（输出太长，已截断）\n"


def imports_torch(source):
    """这段代码是否导入 torch（直接导入，或导入会导入 torch 的 lib 模块）。评分进程也用它估计一份提交要跑多久。"""
    import_lines = "\n".join(line for line in source.splitlines() if re.match(r"\s*(import|from)\s", line))
    return bool(re.search(r"\btorch\b|\blib\.(transformer|rnn|experiments|toy_tasks)\b|\bfrom\s+lib\s+import\b",
                          import_lines))


def needs_torch(cells):
    """执行这些单元格之前要不要先导入 torch（见 imports_torch；markdown 单元格也算进去，宁可多导入）。"""
    return imports_torch("\n".join("".join(c["source"]) if isinstance(c.get("source"), list)
                                   else (c.get("source") or "") for c in cells))


def preload(with_torch):
    """学生代码之前导入的模块。全新内核在 main() 里导入它们；模板进程（见 serve_template）在任何学生代码
    之前导入一次，之后 fork 出来的每个内核都已经有了，main() 里再调用时什么也不做。
    先导入常用的数值库，这样学生在第一个单元格里替换 np.allclose 也能被发现；用到 torch（或导入 lib.transformer，
    它会导入 torch）时也先导入：导入时间不算进单元格的超时。"""
    import IPython.core.interactiveshell  # noqa: F401
    import IPython.utils.capture  # noqa: F401
    import numpy  # noqa: F401
    import numpy.random  # noqa: F401  NumPy 2 里它是用到时才导入的：先导入，替换 default_rng 才能被发现
    import numpy.testing  # noqa: F401
    import math  # noqa: F401
    if with_torch:
        import torch  # noqa: F401
        import torch.testing  # noqa: F401


# ---------------------------------------------------------------- 内核：准备 → 学生的单元格 → 检查（探针）
def _limit_resources(mem_mb, file_mb, nproc):
    """资源上限（软硬相同，学生代码无法再调高）：内存、core 文件、单个文件大小、进程数（nproc <= 0 不设）。"""
    import resource
    mem = int(mem_mb) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    fsz = int(file_mb) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsz, fsz))
    if int(nproc) > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (int(nproc), int(nproc)))


def _become(uid, gid):
    """切换到槽位自己的 uid/gid（-1：不切换）。"""
    if uid >= 0:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)


def _enter_workdir(nb_path):
    """进到 notebook 所在的目录（这份提交的临时副本）。和 Jupyter 内核一样：当前目录可以导入（lib/ 的副本就在这里），
    本脚本所在目录不行。"""
    os.chdir(os.path.dirname(os.path.abspath(nb_path)))
    sys.path[:] = [""] + [p for p in sys.path[1:]]


def _new_shell():
    """执行学生单元格的 IPython shell：不打印 traceback 和输出提示（输出由 capture_output 收集）。"""
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    shell.showtraceback = lambda *a, **k: None
    shell.showsyntaxerror = lambda *a, **k: None
    shell.displayhook.write_output_prompt = lambda *a, **k: None
    shell.displayhook.write_format_data = lambda *a, **k: None
    shell.user_ns["__name__"] = "__main__"
    return shell


def _install_guards(setup):
    """学生代码之前装好的一切：看门狗、fork 之后的标记、审计钩子（guard.install）。"""
    watchdog = Watchdog()
    watchdog.start()
    os.register_at_fork(after_in_child=_after_fork_in_child)
    _guard.install(CHANNEL_FD, setup["course_root"], os.getcwd(), int(setup["max_forks"]), {_THIS_FILE}, globals())
    return watchdog


def _cell_outputs(cap, result, exc, timed_out):
    """一个单元格的输出（nbformat 的样子）：stdout、stderr、display_data、execute_result（result：run_cell 没出错时
    的结果，出错时 None）、error（exc：单元格的错误）。"""
    outputs = []
    if cap is not None:
        if cap.stdout:
            outputs.append({"output_type": "stream", "name": "stdout", "text": _limit(cap.stdout)})
        if cap.stderr:
            outputs.append({"output_type": "stream", "name": "stderr", "text": _limit(cap.stderr)})
        for out in cap.outputs[:20]:
            try:
                data = {k: v for k, v in out.data.items() if isinstance(v, str)}
                outputs.append({"output_type": "display_data", "data": data, "metadata": {}})
            except Exception:
                pass
    if result is not None and result.result is not None:
        try:
            text = repr(result.result)
        except BaseException as e:
            text = f"<repr 出错：{type(e).__name__}>"
        outputs.append({"output_type": "execute_result", "execution_count": result.execution_count,
                        "data": {"text/plain": _limit(text, 5000)}, "metadata": {}})
    if exc is not None:
        outputs.append(_error_output(exc, timed_out=timed_out and isinstance(exc, KeyboardInterrupt)))
    return outputs


def _run_cell(shell, i, src, watchdog, cell_timeout, capture_output, audit):
    """执行第 i 个单元格（有超时），把 start / end 事件发给评分进程。capture_output 和 audit 是学生代码之前取好的
    （学生换掉 IPython 里的那个、sys.audit 也没用）。"""
    send({"ev": "start", "cell": i})
    t0 = _monotonic()
    watchdog.arm(cell_timeout)
    result = None
    cap = None
    exc = None
    try:
        with capture_output() as cap:
            try:
                result = shell.run_cell(src, store_history=True, silent=False)
            finally:
                audit("lecture07.cell_done")  # 钩子在内置函数换回来之前看一眼
                _restore_builtins()
    except BaseException as e:  # 中断落在 run_cell 之外
        exc = e
    _restore_builtins()
    watchdog.disarm()
    if _state.get("child"):
        os._exit(0)  # 学生 fork 出来的子进程：不许它继续跑评分流程
    timed_out = watchdog.fired
    err = None if result is None else (result.error_before_exec or result.error_in_exec)
    if err is not None:  # run_cell 报告的错误（编译时或运行时）优先于落在 run_cell 之外的中断
        exc = err
    outputs = _cell_outputs(cap, result if err is None else None, exc, timed_out)
    send({"ev": "end", "cell": i, "outputs": outputs, "seconds": round(_monotonic() - t0, 3),
          "timed_out": bool(timed_out), "memory": isinstance(exc, MemoryError),
          "execution_count": getattr(result, "execution_count", None)})


def run_student_cells(shell, cells, watchdog, cell_timeout, capture_output, audit):
    """按顺序执行全部代码单元格。第一个代码单元格之前让审计钩子拍下快照（之后学生替换的函数由它报告）。"""
    audit("lecture07.cells_start")
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        if isinstance(src, list):
            src = "".join(src)
        _run_cell(shell, i, src, watchdog, cell_timeout, capture_output, audit)


def _load_probes(source):
    """probes.py（和各练习的探针）的源码 → (PROBES, 记录)。加载失败时 PROBES 为空，记录里写明原因。"""
    probes_ns = {"__name__": "grading_probes"}
    records = {}
    try:
        exec(compile(source, _guard.PROBES_FILENAME, "exec"), probes_ns)
        probes = probes_ns["PROBES"]
    except BaseException as e:
        probes = {}
        records["__error__"] = f"probes.py 无法加载：{type(e).__name__}: {e}"
    return probes, records


def _probe(fn, user_ns, seeds, gid_, watchdog, capture_output):
    """用这个检查自己的种子（学期密钥不进内核）运行一个探针，返回它的记录（可以 JSON 序列化的）；
    出错或超时时 {"error": 原因}。"""
    try:
        seed = int(seeds[gid_])
        with capture_output():
            rec = fn(user_ns, seed)
        return json.loads(_dumps(rec, default=lambda o: f"<不可序列化：{type(o).__name__}>", allow_nan=True))
    except BaseException as e:
        if watchdog.fired:
            return {"error": "探针超时（学生函数运行太久）"}
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}


def run_probes(ctl, user_ns, watchdog, cell_timeout, capture_output, audit):
    """对每个要检查的 grade_id 运行它的探针（每个有超时、有自己的种子）。返回 {grade_id: 记录}。"""
    probes, records = _load_probes(ctl["probes_source"])
    for gid_ in ctl["grade_ids"]:
        fn = probes.get(gid_)
        if fn is None:
            records[gid_] = {"error": "没有这个 grade_id 的探针"}
            continue
        watchdog.arm(float(ctl.get("probe_timeout", cell_timeout)))
        records[gid_] = _probe(fn, user_ns, ctl["seeds"], gid_, watchdog, capture_output)
        watchdog.disarm()
        if _state.get("child"):
            os._exit(0)
        audit("lecture07.check_done")  # 检查时装的信号处理函数：换回去、标出来
    return records


def _read_line(control):
    """控制输入的一行 JSON（评分进程写的）；读不到或不是 JSON 时 None。"""
    try:
        return json.loads(control.readline())
    except Exception:
        return None


def _check_phase(control, shell, watchdog, cell_timeout, capture_output, audit):
    """学生的单元格跑完、审计钩子已经打开窥探的检查之后：现在才读 nonce、种子和探针，检查，发 record 和 done。
    这些值只在这个函数（和它调用的）里：学生在单元格里留下的帧（main() 的）里没有它们。"""
    send({"ev": "cells_done"})
    ctl = _read_line(control)
    if ctl is None:
        send({"ev": "done"})
        return
    records = run_probes(ctl, shell.user_ns, watchdog, cell_timeout, capture_output, audit)
    audit("lecture07.probes_done")  # 检查时替换的函数（例如 numpy.random.default_rng）
    send({"ev": "record", "nonce": ctl["nonce"], "records": records, "changed": [], "flags": [], "forks": 0})
    send({"ev": "done", "nonce": ctl["nonce"]})


def _take_control_input():
    """评分进程的控制输入（标准输入）挪到一个新的文件描述符上，标准输入换成 /dev/null：学生的代码读标准输入、
    把 fd 0 换掉（os.dup2）都碰不到它。返回它的读取器。"""
    control = os.fdopen(os.dup(0), "rb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = io.StringIO("")
    return control


def main(control, setup):
    """一份提交：control 是控制输入（_take_control_input），setup 是它的第一行（见文件开头的协议）。设好上限、换 uid →
    执行学生的单元格 → 让审计钩子检查并打开窥探的检查 → 读 nonce、种子和探针（_check_phase）→ 检查 → 发 record 和 done。"""
    global CHANNEL_FD
    audit = sys.audit  # 学生的代码之前取好：学生换掉 sys.audit 不影响 runner 告诉审计钩子进行到哪一步
    CHANNEL_FD = int(setup["channel_fd"])
    sys.argv = [_THIS_FILE]  # 命令行参数里没有课程的东西；sys.argv 也只剩本脚本
    _limit_resources(setup["memory_mb"], setup["file_mb"], setup["nproc"])
    cell_timeout = float(setup["cell_timeout"])
    _become(int(setup["uid"]), int(setup["uid"]))
    _enter_workdir(setup["nb_path"])
    with open(setup["nb_path"], encoding="utf-8") as f:
        cells = json.load(f)["cells"]
    preload(needs_torch(cells))
    from IPython.utils.capture import capture_output
    shell = _new_shell()
    watchdog = _install_guards(setup)
    send({"ev": "ready", "pid": os.getpid()})
    run_student_cells(shell, cells, watchdog, cell_timeout, capture_output, audit)
    audit("lecture07.cells_done", shell.user_ns)  # 替换的函数、改写 __eq__ 的类；去掉跟踪函数；从现在起拦下窥探
    _check_phase(control, shell, watchdog, cell_timeout, capture_output, audit)


# ---------------------------------------------------------------- 模板进程（fork server）
# 评分进程为两种预加载（只有 numpy；另加 torch）各启动一个模板进程：`python -u runner.py --template KIND FD`。
# 它在任何学生代码之前导入 preload() 的模块，然后只做一件事：从 socket FD 收到请求就 fork。fork 出来的
# 中间进程加入评分进程刚为这份提交建好的 bwrap 沙箱的全部命名空间（见 sandbox_forkserver.start_forked），再 fork 一次：
# 这个孙进程在沙箱的 pid 命名空间里，丢掉全部特权，像全新内核一样运行 main()。模板进程从不运行学生代码，
# 也从不进入沙箱；每个 fork 出来的内核只评一份提交，和它的沙箱一起结束。
_CLONE_NEWUSER = 0x10000000
_NAMESPACES = {"cgroup": 0x02000000, "ipc": 0x08000000, "uts": 0x04000000, "net": 0x40000000,
               "pid": 0x20000000, "mnt": 0x00020000}  # 挂载命名空间最后加入：之后的路径都在沙箱里解析
_NS_GET_USERNS, _NS_GET_PARENT = 0xB701, 0xB702  # ioctl_ns(2)
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 24, 38
_CAP_VERSION_3 = 0x20080522


def _libc():
    import ctypes
    return ctypes, ctypes.CDLL(None, use_errno=True)


def _join_sandbox(pid, namespaces):
    """加入进程 pid（沙箱的 init）的命名空间。namespaces 是 bwrap --info-fd 报告的 {名字: inode}：逐个核对，
    所以 pid 万一已经换成了别的进程，这里会拒绝，而不是加入错误的命名空间。
    非 root 评分时 bwrap 建两层 user 命名空间：外层拥有挂载、pid 等命名空间，内层给沙箱里的进程。
    所以由外向内加入 user 命名空间，进到拥有其他命名空间的那一层时加入它们。"""
    import fcntl
    ctypes, libc = _libc()

    def setns(fd, kind):
        if libc.setns(fd, kind) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({kind:#x}): {os.strerror(err)}")
        os.close(fd)

    others = {}
    for name, kind in _NAMESPACES.items():
        fd = os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY)
        ino = os.fstat(fd).st_ino
        if name == "cgroup" and ino == os.stat("/proc/self/ns/cgroup").st_ino:
            os.close(fd)  # --unshare-cgroup-try 没能新建 cgroup 命名空间
            continue
        if ino != namespaces.get(f"{name}-namespace"):
            raise RuntimeError(f"{name} 命名空间和 bwrap 报告的不同：进程 {pid} 不是这份提交的沙箱")
        others[name] = (fd, kind)
    owner_fd = fcntl.ioctl(others["mnt"][0], _NS_GET_USERNS)
    owner = os.fstat(owner_fd).st_ino  # 拥有这些命名空间的 user 命名空间
    os.close(owner_fd)
    own_user = os.stat("/proc/self/ns/user").st_ino
    users = []  # 沙箱进程的 user 命名空间，一层层往外，直到（不含）我们自己的
    fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    while os.fstat(fd).st_ino != own_user:
        users.append(fd)
        fd = fcntl.ioctl(fd, _NS_GET_PARENT)  # 不是我们的后代时这里抛出 PermissionError
    os.close(fd)
    users.reverse()  # 由外向内
    if owner != own_user and owner not in [os.fstat(u).st_ino for u in users]:
        raise RuntimeError("沙箱的命名空间不属于它的 user 命名空间链")
    if owner == own_user:  # root 评分：命名空间属于我们自己的 user 命名空间
        for fd, kind in others.values():
            setns(fd, kind)
    for fd in users:
        ino = os.fstat(fd).st_ino
        setns(fd, _CLONE_NEWUSER)
        if ino == owner:
            for ofd, kind in others.values():
                setns(ofd, kind)


def _drop_privileges(switch_uid):
    """和 bwrap 对它启动的进程做的一样：清空 capability 边界集、设置 no_new_privs；不切换 uid 时（非 root 评分，
    或 bwrap 不能切换 uid）清空全部 capability。切换 uid 时（main() 里 setuid）capability 随之清空。"""
    ctypes, libc = _libc()
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    for cap in range(last_cap + 1):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_CAPBSET_DROP")
    if not switch_uid:
        header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
        data = (ctypes.c_uint32 * 6)()  # 两组 (effective, permitted, inheritable)，全为 0
        if libc.capset(header, data) != 0:
            raise OSError(ctypes.get_errno(), "capset")
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")


def _run_forked_kernel(fds, namespaces):
    """fork 出来、已经在沙箱里的内核：接好标准输入输出和通道，关掉模板进程的其他文件，丢掉特权，运行 main()。"""
    control, stderr_fd, channel = fds
    os.setsid()
    os.dup2(control, 0)
    os.dup2(stderr_fd, 2)
    null = os.open("/dev/null", os.O_WRONLY)
    os.dup2(null, 1)
    os.closerange(3, channel)
    os.closerange(channel + 1, 1 << 16)
    for name in ("mnt", "pid"):  # 确认自己确实在沙箱里（pid 命名空间只对 fork 之后的进程生效）
        if os.stat(f"/proc/self/ns/{name}").st_ino != namespaces[f"{name}-namespace"]:
            raise RuntimeError(f"内核不在沙箱的 {name} 命名空间里")
    control = _take_control_input()
    setup = _read_line(control)
    setup["channel_fd"] = channel  # 通道在这个进程里的编号
    _drop_privileges(switch_uid=int(setup["uid"]) >= 0)
    import numpy
    numpy.random.seed()  # 全新进程的 numpy 全局随机状态各不相同；fork 出来的内核要自己重新播种
    main(control, setup)


def serve_template(kind, sock_fd):
    import socket
    preload(kind == "torch")
    sock = socket.socket(fileno=sock_fd)
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
        except OSError:
            return
        if not msg:
            return  # 评分进程关闭了 socket（评分结束或评分进程退出）
        req = json.loads(msg)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # 中间进程
            status = 1
            try:
                os.close(r)
                sock.close()
                _join_sandbox(req["pid"], req["namespaces"])
                if os.fork() == 0:  # 内核：沙箱 pid 命名空间里的新进程
                    try:
                        os.close(w)
                        _run_forked_kernel(fds, req["namespaces"])
                    except BaseException:
                        traceback.print_exc()
                    finally:
                        sys.stdout.flush()
                        os._exit(0)
                os.write(w, b"ok")
                status = 0
            except BaseException as e:
                os.write(w, f"{type(e).__name__}: {e}".encode()[:2000])
            os._exit(status)
        os.close(w)
        for fd in fds:
            os.close(fd)
        reply = b""
        while chunk := os.read(r, 4096):
            reply += chunk
        os.close(r)
        os.waitpid(pid, 0)
        sock.sendall(reply or b"intermediate process died")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--template"]:
        serve_template(sys.argv[2], int(sys.argv[3]))
    else:
        control = _take_control_input()
        main(control, _read_line(control))
    sys.stdout.flush()
    os._exit(0)
