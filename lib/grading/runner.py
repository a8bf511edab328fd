"""在沙箱里执行一份学生 notebook 的脚本（评分进程把它的源码复制进沙箱再运行）。

这个文件只依赖标准库、IPython 和它旁边的 flags.py（可疑迹象的表；沙箱里叫 _grader_flags.py，见 sandbox_kernel.py），
不导入 lib/ 的任何别的东西：它运行的地方看不到课程目录。
有 bwrap 时它通常不是这样启动的，而是作为模板进程（文件末尾的 serve_template）：先导入库，再为每份提交
fork 出一个内核、放进那份提交的沙箱，在那里运行同一个 main()。两种方式对学生代码来说没有区别。

协议（评分进程 <-> 本脚本）：
- 参数：notebook 路径（沙箱内）、每个单元格的超时秒数、子进程数上限、要切换到的 uid/gid（-1 表示不切换）、
  课程根目录、通道 fd、内存上限 MB、RLIMIT_NPROC（-1 不设）、文件大小上限 MB。资源上限在执行学生代码之前设置。
- 通道 fd（只写，编号由参数给出）：每行一个 JSON 事件：{"ev": "start"/"end", ...}、{"ev": "cells_done"}、
  {"ev": "record", ...}、{"ev": "done"}。
- 标准输入：学生的单元格全部跑完、本脚本发出 cells_done 之后，评分进程才写入一行 JSON：
  本次运行的随机 nonce、要探测的 grade_id 和每个 grade_id 自己的种子（seeds；学期密钥从不进来，见
  hidden_inputs.py）、probes.py 的源码。学生代码运行时还不存在这些值，
  所以事先打印或写好的“假记录”带不上正确的 nonce，也无法针对未知的种子准备答案。
- {"ev": "alert", "kind": ..., "hex": ...}：发现可疑迹象的那一刻就发出（_install_tripwire），学生的代码事后抹不掉。
学生代码和本脚本在同一个进程里：它能改动本脚本之后用到的东西，所以记录里的数据只当作“学生函数的输出”，
对错全部由干净的评分进程重新计算（见 pipeline.judge）。本脚本另外报告它看到的可疑迹象（被替换的函数、
越界的文件访问、创建进程），交给人来看。
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
    from .flags import Flag  # 评分进程里（lib.grading.runner）
except ImportError:  # 沙箱里：sandbox_kernel 把 flags.py 以这个名字放在本文件旁边
    from _grader_flags import Flag

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


# ---------------------------------------------------------------- 进程与文件的审计钩子
SUSPICIOUS_PARTS = {"solutions", "source", "gradebook.db", "autograded", "submitted", "feedback",
                    ".grading", "exercise_checks.py", "nbgrader_config.py"}
TRUSTED_PREFIXES = tuple({os.path.abspath(sys.prefix) + os.sep, os.path.abspath(sys.base_prefix) + os.sep})
_state = {"phase": "setup", "forks": 0, "max_forks": 16, "flags": [], "child": False,
          "scratch": "", "course_root": "", "alert": lambda kind, detail: None}


def _flag(flag, detail):
    """记下一条可疑迹象（flag 是 flags.Flag 里 by == "runner" 的一种）。"""
    if len(_state["flags"]) < 50:
        _state["flags"].append([flag.value, str(detail)[:300]])
        _state["alert"](flag.value, str(detail)[:300])  # 马上发给评分进程：学生清空 _state["flags"] 也抹不掉


def _path_is_suspicious(path):
    p = os.path.abspath(path)
    if p.startswith(TRUSTED_PREFIXES) or _inside_scratch(p):
        return False  # 临时副本里没有答案（它是评分进程造的），读它不算可疑
    if _state["course_root"] and (p == _state["course_root"] or p.startswith(_state["course_root"] + os.sep)):
        return True
    return any(part in SUSPICIOUS_PARTS for part in p.split(os.sep))


def _inside_scratch(p):
    base = _state["scratch"]
    return bool(base) and (p == base or p.startswith(base.rstrip(os.sep) + os.sep))


def _inside_allowed(path):
    p = os.path.abspath(path)
    # 沙箱里 /tmp 是这一份提交私有的 tmpfs；没有沙箱时 /tmp 是共享的（可能有别的学生的临时副本）
    private_tmp = _state["scratch"] == SANDBOX_WORKDIR
    for base in (_state["scratch"], "/tmp" if private_tmp else "", "/dev/null"):
        if base and (p == base or p.startswith(base.rstrip(os.sep) + os.sep)):
            return True
    return False


def _audit(event, args):
    if _state["phase"] in ("setup", "runner"):  # 本脚本自己的动作不算；学生单元格、测试单元格、探针阶段都算
        return
    if event in ("os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "subprocess.Popen", "os.system",
                 "os.exec", "pty.spawn"):
        _state["forks"] += 1
        if _state["forks"] == 1:
            _flag(Flag.PROCESS, f"{event}")
        if _state["child"]:
            _exit_now(0)  # 学生 fork 出来的子进程还想再 fork：直接结束它（防 fork 炸弹）
        if _state["forks"] > _state["max_forks"]:
            raise PermissionError("评分环境限制：不允许再创建新进程")
    elif event == "open":
        path, mode, flags = args
        if isinstance(path, int) or path is None:
            return
        try:
            path = os.fsdecode(path)
        except Exception:
            return
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        if _path_is_suspicious(path):
            _flag(Flag.WRITE if writing else Flag.READ, path)
        elif writing and not _inside_allowed(path):
            _flag(Flag.WRITE, path)
    elif event in ("os.listdir", "os.scandir", "glob.glob", "os.chdir"):
        path = args[0] if args else None
        if isinstance(path, (str, bytes)) and _path_is_suspicious(os.fsdecode(path)):
            _flag(Flag.READ, os.fsdecode(path))
    elif event in ("os.remove", "os.rename", "os.rmdir", "shutil.rmtree", "os.truncate", "os.chmod"):
        path = args[0] if args else None
        if isinstance(path, (str, bytes)) and not _inside_allowed(os.fsdecode(path)):
            _flag(Flag.WRITE, f"{event} {os.fsdecode(path)}")
    elif event == "socket.connect":
        _flag(Flag.NETWORK, str(args[1:]) if len(args) > 1 else "")


def _after_fork_in_child():
    _state["child"] = True


# ---------------------------------------------------------------- 窥探评分程序：审计钩子（关不掉）
# 学生的内核里只有这次要检查的几个 grade_id 的种子（学期密钥从不进来，见 hidden_inputs.py），所以窥探评分程序
# 拿不到密钥，也拿不到别的 notebook 的输入。这里另外在检查阶段把窥探本身拦下（PermissionError）并标出来（suspect）。
# 用到的审计事件（Python 3.10–3.13 都有，tests/test_grading_secret.py 在当前的 Python 上逐个核对）：
# - 拿到评分程序的帧或对象：sys._getframe、sys._current_frames、sys._current_exceptions、gc.get_objects、
#   gc.get_referrers、gc.get_referents、sys.settrace、sys.setprofile，以及 object.__getattr__ 里的 tb_frame、gi_frame、
#   cr_frame、ag_frame；直接读内存：ctypes.dlopen、ctypes.dlsym、ctypes.string_at、ctypes.wstring_at、ctypes.cdata、
#   ctypes.cdata/buffer。帧的 f_back、f_locals、f_globals 没有审计事件，但要先拿到一个帧，拿帧的途径都在上面，
#   只有信号处理函数收到的帧没有审计事件：见 _report_signal_traps（尽力而为：它用的 signal 模块学生改得了）。
# - 把代码伪装成库或评分程序（文件名），好让上面的检查认错人：compile、code.__new__、exec、function.__new__。
# 只算学生的代码自己做的：直接调用的帧不是库（sys.prefix 下的文件、冻结模块）也不是本脚本和探针时才算；
# inspect.currentframe/stack/trace/getouterframes/getinnerframes、traceback.walk_stack/walk_tb（和 capture_locals=True
# 的 traceback 函数）、asyncio 的 Task.get_stack、ctypes 的包装函数把帧或内存交给调用者，往上越过它们再看。
# logging、warnings、namedtuple、typing、traceback.print_exc、torch.jit 这些库自己看帧、不把帧交出来：学生调用它们不算。
# 钩子的状态全在闭包里（用到的函数和内置名字也在安装时取好）：学生的代码拿不到它（拿帧、gc 都会先经过钩子），
# 改本脚本的全局变量、_state、看门狗线程都关不掉它；审计钩子本身也没法移除。
INTROSPECTION_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys._current_exceptions", "gc.get_objects",
                                  "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile",
                                  "ctypes.dlopen", "ctypes.dlsym", "ctypes.string_at", "ctypes.wstring_at", "ctypes.cdata",
                                  "ctypes.cdata/buffer"})
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
CODE_EVENTS = frozenset({"compile", "code.__new__", "exec", "function.__new__"})
FRAME_HANDING = (  # (文件路径的结尾, 函数名)：把帧或内存交给调用者的库函数
    ("/inspect.py", "currentframe"), ("/inspect.py", "stack"), ("/inspect.py", "trace"),
    ("/inspect.py", "getouterframes"), ("/inspect.py", "getinnerframes"), ("/traceback.py", "walk_stack"),
    ("/traceback.py", "walk_tb"), ("/asyncio/base_tasks.py", "_task_get_stack"), ("/asyncio/tasks.py", "get_stack"),
    ("/ctypes/__init__.py", "__init__"), ("/ctypes/__init__.py", "__getattr__"), ("/ctypes/__init__.py", "__getitem__"),
    ("/ctypes/__init__.py", "string_at"), ("/ctypes/__init__.py", "wstring_at"))
PROBES_FILENAME = "probes.py"  # 探针源码编译时用的文件名
MAX_ALERTS = 50


def _alert_sender(channel_fd):
    """发可疑迹象的函数：写到通道的一个私有副本上，用安装时取好的 os.write；行是手写的 JSON（说明用十六进制），
    不经过学生可能改过的 json 模块。"""
    write, fd, sent = os.write, os.dup(channel_fd), [0]

    def alert(kind, detail):
        if sent[0] >= MAX_ALERTS or not (kind.isascii() and kind.isalpha()):
            return
        sent[0] += 1
        line = ('{"ev": "alert", "kind": "' + kind + '", "hex": "' + detail[:300].encode("utf-8", "replace").hex()
                + '"}\n').encode()
        try:
            write(fd, line)  # 一行不到 4 KB：对管道是原子的写，和别的线程的输出不会交错
        except:  # noqa: E722  这里不按名字查找任何东西（学生可能换掉了内置的异常类）
            pass

    return alert


def _intruder_finder(prefixes, this_file):
    """返回 (looks_trusted(文件名), intruder(帧))：intruder 给出触发事件的学生代码（code 对象），不是学生时 None。"""
    str_type, type_, handing = str, type, FRAME_HANDING

    def looks_trusted(filename):
        return type_(filename) is str_type and (filename.startswith(prefixes) or filename == this_file
                                                or filename == PROBES_FILENAME or filename.startswith("<frozen "))

    def captures_locals(frame):  # traceback 的函数一层层调用：其中一层带着 capture_locals=True 就会交出局部变量
        while frame is not None and frame.f_code.co_filename.endswith("/traceback.py"):
            if frame.f_locals.get("capture_locals") is True:
                return True
            frame = frame.f_back
        return False

    def hands_frames(frame, code):
        for suffix, name in handing:
            if code.co_name == name and code.co_filename.endswith(suffix):
                return True
        return code.co_filename.endswith("/traceback.py") and captures_locals(frame)

    def intruder(frame):
        while frame is not None:
            code = frame.f_code
            if not looks_trusted(code.co_filename):
                return code
            if not hands_frames(frame, code):
                return None
            frame = frame.f_back
        return None

    return looks_trusted, intruder


def _install_tripwire(channel_fd):
    """装上窥探评分程序的审计钩子（见上面的说明）。返回 (arm, alert)：arm() 之后（学生的单元格跑完、种子进来之前）
    检查拿帧和对象的事件；伪装代码的事件从一开始就检查。arm 只能打开、不能关上。alert(kind, 说明) 马上把一条可疑迹象
    发给评分进程。"""
    alert = _alert_sender(channel_fd)
    looks_trusted, intruder = _intruder_finder(TRUSTED_PREFIXES, _THIS_FILE)
    getframe, get_ident, denied, type_, getattr_ = sys._getframe, _thread.get_ident, PermissionError, type, getattr
    interrupt = KeyboardInterrupt  # 看门狗的中断（超时）不能被钩子吞掉
    introspect = Flag.INTROSPECT.value
    introspection, frame_attrs, code_events = INTROSPECTION_EVENTS, FRAME_ATTRIBUTES, CODE_EVENTS
    watched = introspection | code_events | {"object.__getattr__"}
    armed, busy = [False], set()

    def what_happened(event, args):
        if event in code_events:
            name = args[1] if event in ("compile", "code.__new__") else getattr_(args[0], "co_filename", None)
            return f"{event}（文件名 {name}）" if looks_trusted(name) else None
        if armed[0] and event in introspection:
            return event
        if armed[0] and event == "object.__getattr__" and args[1] in frame_attrs:
            return f"{type_(args[0]).__name__}.{args[1]}"
        return None

    def hook(event, args):
        if event not in watched:
            return
        me = get_ident()
        if me in busy:  # 钩子自己用 sys._getframe、f_code 时不再检查
            return
        busy.add(me)
        try:
            what = what_happened(event, args)
            code = None if what is None else intruder(getframe(1))
        except interrupt:
            raise
        except:  # noqa: E722  钩子出错时放行：不能因为评分程序自己的错误拦下学生的正常操作
            code = None
        finally:
            busy.discard(me)
        if code is not None:
            alert(introspect, f"{what}，在 {code.co_name}（{code.co_filename}）里")
            raise denied(f"评分环境：检查时不允许查看评分程序的调用栈和对象（{what}）")

    sys.addaudithook(hook)

    def arm():
        armed[0] = True

    return arm, alert


def _signal_handlers():
    import signal
    handlers = {}
    for sig in signal.valid_signals():
        try:
            handlers[sig] = signal.getsignal(sig)
        except (ValueError, OSError):
            pass
    return handlers


def _restore_signal_handlers(before):
    """把学生换掉的信号处理函数换回 before（学生的代码之前的样子），停掉计时器（signal.alarm、setitimer）。
    Python 的信号处理函数会收到信号到来时的帧，装它又没有审计事件。返回换回来的信号的名字。"""
    import signal
    changed = []
    for sig, handler in before.items():
        try:
            if signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
                changed.append(signal.Signals(sig).name)
        except (ValueError, OSError, TypeError):
            pass
    for timer in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
        if signal.getitimer(timer)[0]:
            signal.setitimer(timer, 0)
    return changed


def _drop_tracers(signals_before):
    """检查阶段开始之前：去掉学生装的跟踪/分析函数和信号处理函数（不算可疑：单元格里用它们可以是正当的）。"""
    sys.settrace(None)
    sys.setprofile(None)
    threading.settrace(None)
    threading.setprofile(None)
    _restore_signal_handlers(signals_before)


def _report_signal_traps(signals_before, alert):
    """一次检查之后：学生的函数在检查时装了信号处理函数，就换回去并标出来。"""
    names = _restore_signal_handlers(signals_before)
    if names:
        alert(Flag.INTROSPECT.value, "检查时装了信号处理函数（它会收到评分程序的帧）：" + "、".join(names))


def _changed_during_probes(snap_before, already):
    """检查阶段里学生的函数替换的东西（例如 numpy.random.default_rng：探针用它从种子生成输入）。"""
    if snap_before is None:
        return []
    _restore_builtins()
    now = _diff_snapshot(snap_before) + ["builtins." + k for k in sorted(_PATCHED_BUILTINS)]
    return sorted({k for k in now if k not in already})


# ---------------------------------------------------------------- 被替换函数的检测
WATCHED = {
    "numpy": ["allclose", "isclose", "array_equal", "array_equiv", "all", "any", "abs", "max", "asarray", "array"],
    "numpy.random": ["default_rng", "Generator", "PCG64", "SeedSequence"],  # 探针用它们从种子生成输入
    "numpy.testing": ["assert_allclose", "assert_array_equal", "assert_array_almost_equal", "assert_equal",
                      "assert_almost_equal"],
    "torch": ["allclose", "isclose", "equal", "all", "tensor", "as_tensor"],
    "torch.testing": ["assert_close"],
    "math": ["isclose", "isfinite", "isnan"],
    "json": ["dumps", "loads"],
    "os": ["write", "_exit"],
}
BUILTIN_NAMES = ["print", "abs", "all", "any", "bool", "float", "int", "isinstance", "len", "max", "min", "round",
                 "sum", "str", "repr", "type", "range", "zip", "__import__", "open", "AssertionError",
                 "Exception", "exec", "eval", "hasattr", "getattr", "setattr", "list", "tuple", "dict"]


def _snapshot():
    snap = {}
    for name in BUILTIN_NAMES:
        snap["builtins." + name] = id(getattr(builtins, name, None))
    for mod, names in WATCHED.items():
        m = sys.modules.get(mod)
        if m is None:
            continue
        for n in names:
            snap[f"{mod}.{n}"] = id(getattr(m, n, None))
    return snap


def _diff_snapshot(before):
    changed = []
    now = _snapshot()
    for key, val in now.items():
        if key in before and before[key] != val:
            changed.append(key)
    # 课程 lib/ 里的函数被学生的代码替换（co_filename 不再是模块自己的文件）
    for modname, mod in list(sys.modules.items()):
        if not (modname == "lib" or modname.startswith("lib.")) or mod is None:
            continue
        for attr, val in list(vars(mod).items()):
            code = getattr(val, "__code__", None)
            if code is None:
                continue
            # 在 notebook 里（或 exec 的字符串里）定义、被塞进 lib 模块的函数
            if code.co_filename.startswith("<") or getattr(val, "__module__", None) == "__main__":
                changed.append(f"{modname}.{attr}")
    return changed


_ORIG_BUILTINS = dict(vars(builtins))
_PATCHED_BUILTINS: set = set()


def _restore_builtins():
    """学生替换的内置函数：记下名字，然后恢复原样（本脚本自己也要用它们）。"""
    cur = vars(builtins)
    for k, v in _ORIG_BUILTINS.items():
        if cur.get(k, _ORIG_BUILTINS) is not v:
            _PATCHED_BUILTINS.add(k)
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
    _state["scratch"] = os.getcwd()


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


def _install_guards(channel_fd):
    """学生代码之前装好的一切：看门狗、fork 之后的标记、审计钩子、窥探评分程序的钩子。
    返回 (看门狗, arm_tripwire, alert, 学生代码之前的信号处理函数)。"""
    watchdog = Watchdog()
    watchdog.start()
    os.register_at_fork(after_in_child=_after_fork_in_child)
    sys.addaudithook(_audit)
    arm_tripwire, alert = _install_tripwire(channel_fd)
    _state["alert"] = alert
    return watchdog, arm_tripwire, alert, _signal_handlers()


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


def _run_cell(shell, i, src, watchdog, cell_timeout, capture_output):
    """执行第 i 个单元格（有超时），把 start / end 事件发给评分进程。capture_output 是学生代码之前取好的
    （学生换掉 IPython 里的那个也没用）。"""
    send({"ev": "start", "cell": i})
    t0 = _monotonic()
    _state["phase"] = "student"
    watchdog.arm(cell_timeout)
    result = None
    cap = None
    exc = None
    try:
        with capture_output() as cap:
            try:
                result = shell.run_cell(src, store_history=True, silent=False)
            finally:
                _restore_builtins()
    except BaseException as e:  # 中断落在 run_cell 之外
        exc = e
    _restore_builtins()
    watchdog.disarm()
    if _state["child"]:
        os._exit(0)  # 学生 fork 出来的子进程：不许它继续跑评分流程
    _state["phase"] = "runner"
    timed_out = watchdog.fired
    err = None if result is None else (result.error_before_exec or result.error_in_exec)
    if err is not None:  # run_cell 报告的错误（编译时或运行时）优先于落在 run_cell 之外的中断
        exc = err
    outputs = _cell_outputs(cap, result if err is None else None, exc, timed_out)
    send({"ev": "end", "cell": i, "outputs": outputs, "seconds": round(_monotonic() - t0, 3),
          "timed_out": bool(timed_out), "memory": isinstance(exc, MemoryError),
          "execution_count": getattr(result, "execution_count", None)})


def run_student_cells(shell, cells, watchdog, cell_timeout, capture_output):
    """按顺序执行全部代码单元格。返回第一个代码单元格之前拍下的快照（没有代码单元格时 None），
    事后用它找出学生替换的函数。"""
    snap_before = None
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        if isinstance(src, list):
            src = "".join(src)
        if snap_before is None:
            snap_before = _snapshot()
        _run_cell(shell, i, src, watchdog, cell_timeout, capture_output)
    return snap_before


def _changed_by_student_cells(snap_before):
    """学生的单元格替换了的函数（WATCHED、lib 的函数）和内置名字。"""
    changed = _diff_snapshot(snap_before) if snap_before is not None else []
    return changed + ["builtins." + k for k in sorted(_PATCHED_BUILTINS) if "builtins." + k not in changed]


def _flag_eq_classes(user_ns):
    """学生自己定义、改写了 __eq__ 的类（“永远相等”的把戏）。"""
    try:
        for name, val in list(user_ns.items()):
            cls = val if isinstance(val, type) else type(val)
            if getattr(cls, "__module__", None) == "__main__" and (
                    "__eq__" in vars(cls) or "__bool__" in vars(cls) or "__array__" in vars(cls)):
                _flag(Flag.EQ, f"{cls.__name__}.__eq__")
    except Exception:
        pass


def _load_probes(source):
    """probes.py（和各练习的探针）的源码 → (PROBES, 记录)。加载失败时 PROBES 为空，记录里写明原因。"""
    probes_ns = {"__name__": "grading_probes"}
    records = {}
    try:
        exec(compile(source, PROBES_FILENAME, "exec"), probes_ns)
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


def run_probes(ctl, user_ns, watchdog, cell_timeout, signals_before, alert, capture_output):
    """对每个要检查的 grade_id 运行它的探针（每个有超时、有自己的种子）。返回 {grade_id: 记录}。"""
    probes, records = _load_probes(ctl["probes_source"])
    for gid_ in ctl["grade_ids"]:
        fn = probes.get(gid_)
        if fn is None:
            records[gid_] = {"error": "没有这个 grade_id 的探针"}
            continue
        _state["phase"] = "probe"
        watchdog.arm(float(ctl.get("probe_timeout", cell_timeout)))
        records[gid_] = _probe(fn, user_ns, ctl["seeds"], gid_, watchdog, capture_output)
        watchdog.disarm()
        if _state["child"]:
            os._exit(0)
        _report_signal_traps(signals_before, alert)
    return records


def main(argv):
    """一份提交：设好上限、换 uid → 执行学生的单元格 → 发 cells_done，等评分进程发来 nonce、种子和探针 →
    检查 → 发 record 和 done。参数见文件开头的协议。"""
    global CHANNEL_FD
    nb_path, cell_timeout, max_procs, uid, gid, course_root, fd, mem_mb, nproc, file_mb = argv
    CHANNEL_FD = int(fd)
    _limit_resources(mem_mb, file_mb, nproc)
    cell_timeout = float(cell_timeout)
    _state["max_forks"] = int(max_procs)
    _state["course_root"] = course_root.rstrip(os.sep) if course_root != "-" else ""
    _become(int(uid), int(gid))
    _enter_workdir(nb_path)
    stdin = sys.stdin.buffer
    sys.stdin = io.StringIO("")  # 学生代码读不到控制通道
    with open(nb_path, encoding="utf-8") as f:
        cells = json.load(f)["cells"]
    preload(needs_torch(cells))
    from IPython.utils.capture import capture_output
    shell = _new_shell()
    watchdog, arm_tripwire, alert, signals_before = _install_guards(CHANNEL_FD)
    send({"ev": "ready", "pid": os.getpid()})

    snap_before = run_student_cells(shell, cells, watchdog, cell_timeout, capture_output)
    _state["phase"] = "runner"
    changed = _changed_by_student_cells(snap_before)
    _flag_eq_classes(shell.user_ns)
    _drop_tracers(signals_before)  # 学生单元格里装的跟踪函数、信号处理函数不能带进检查阶段（它们会收到评分程序的帧）
    arm_tripwire()  # 从现在起，种子进来之前：窥探评分程序的调用栈和对象会被拦下、标出来
    send({"ev": "cells_done"})

    # 学生代码已经跑完：现在才拿到 nonce、种子和探针
    line = stdin.readline()
    try:
        ctl = json.loads(line)
    except Exception:
        send({"ev": "done"})
        return
    records = run_probes(ctl, shell.user_ns, watchdog, cell_timeout, signals_before, alert, capture_output)
    _state["phase"] = "runner"
    changed += _changed_during_probes(snap_before, changed)
    send({"ev": "record", "nonce": ctl["nonce"], "records": records, "changed": changed,
          "flags": _state["flags"], "forks": _state["forks"]})
    send({"ev": "done", "nonce": ctl["nonce"]})


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


def _run_forked_kernel(fds, argv, namespaces):
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
    args = list(argv[1:])
    args[6] = str(channel)  # 通道 fd 的编号
    _drop_privileges(switch_uid=int(args[3]) >= 0)
    import numpy
    numpy.random.seed()  # 全新进程的 numpy 全局随机状态各不相同；fork 出来的内核要自己重新播种
    sys.argv = list(argv)
    main(args)


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
                        _run_forked_kernel(fds, req["argv"], req["namespaces"])
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
    if sys.argv[1] == "--template":
        serve_template(sys.argv[2], int(sys.argv[3]))
    else:
        main(sys.argv[1:11])
    sys.stdout.flush()
    os._exit(0)
