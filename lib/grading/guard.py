"""学生的内核里的审计钩子（sys.addaudithook）：看着学生的代码读写文件、创建进程、联网、窥探评分程序、替换函数，
发现的那一刻就把可疑迹象写到评分通道上。

只用标准库。sandbox_kernel.py 把这个文件放进沙箱（在那里叫 _grader_guard.py），runner.py 在学生的代码之前调用
install()；之后 runner 只用审计事件（sys.audit("lecture07.…")）告诉钩子进行到了哪一步。

**学生的代码关不掉它**（issue 44）：钩子装上就移除不了；它的全部状态（进行到哪一步、创建了几个进程、学生代码之前拍下的
函数快照……）都是钩子闭包里的不可变值，只有钩子自己能改；它要用的函数、常量和内置名字在安装时取好，不在 runner 或本模块的
全局变量、runner._state、看门狗线程里查。学生改 runner 的全局变量（例如 Watchdog.run.__globals__ 里的函数）不影响它，
这种改动本身在学生的单元格跑完时被报告成“替换了 runner.…”。gc.get_objects（能找到钩子这个函数对象）任何时候都被拦下；
改写函数的 __code__ 也是。

可疑迹象只算学生的代码做的：
- 文件、进程、网络：事件发生时调用栈上有学生的代码（不在 Python 安装目录、不是评分程序的文件名）。评分程序自己的动作不算。
- 窥探评分程序（调用栈、对象、内存）：直接做这件事的是学生的代码；中间隔着把帧交给调用者的库函数（inspect.currentframe、
  logging.currentframe、IPython.utils.frame……，见 FRAME_HANDING）时往上越过它们再看。logging、warnings 这些自己看帧、
  不交出来的库不算。拿帧和对象在检查阶段（runner 发出 lecture07.cells_done 之后）才拦；gc 和读 /proc/…/mem 任何时候都拦。

runner 发出的事件（都只在第一次或只往前走，学生自己发出它们只会让检查更严）：
lecture07.cells_start（拍快照）、lecture07.cell_done（一个单元格跑完：看内置函数）、lecture07.cells_done(user_ns)
（替换的函数、改写 __eq__ 的类，去掉跟踪函数和信号处理函数，打开窥探的检查）、lecture07.check_done（一个检查之后：
信号处理函数）、lecture07.probes_done（检查时替换的函数）、lecture07.child（fork 出来的子进程里）。
"""
import builtins
import os
import sys

try:
    from .flags import Flag  # 评分进程里（lib.grading.guard）
except ImportError:  # 沙箱里：sandbox_kernel 把 flags.py 以这个名字放在本文件旁边
    from _grader_flags import Flag

SUSPICIOUS_PARTS = frozenset({"solutions", "source", "gradebook.db", "autograded", "submitted", "feedback",
                              ".grading", "exercise_checks.py", "nbgrader_config.py"})
PROCESS_EVENTS = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "subprocess.Popen", "os.system",
                            "os.exec", "pty.spawn"})
LISTING_EVENTS = frozenset({"os.listdir", "os.scandir", "glob.glob", "os.chdir"})
CHANGING_EVENTS = frozenset({"os.remove", "os.rename", "os.rmdir", "shutil.rmtree", "os.truncate", "os.chmod"})
# 用到的审计事件（Python 3.10–3.13 都有，tests/test_grading_secret.py 在当前的 Python 上逐个核对）
INTROSPECTION_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys._current_exceptions", "gc.get_objects",
                                  "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile",
                                  "ctypes.dlopen", "ctypes.dlsym", "ctypes.string_at", "ctypes.wstring_at", "ctypes.cdata",
                                  "ctypes.cdata/buffer"})
ALWAYS_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents"})  # 检查之前也拦
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
CODE_EVENTS = frozenset({"compile", "code.__new__", "exec", "function.__new__"})
FRAME_HANDING = (  # (文件路径的结尾, 函数名)：把帧、帧里的变量或内存交给调用者的库函数
    ("/inspect.py", "currentframe"), ("/inspect.py", "stack"), ("/inspect.py", "trace"),
    ("/inspect.py", "getouterframes"), ("/inspect.py", "getinnerframes"), ("/traceback.py", "walk_stack"),
    ("/traceback.py", "walk_tb"), ("/asyncio/base_tasks.py", "_task_get_stack"), ("/asyncio/tasks.py", "get_stack"),
    ("/logging/__init__.py", "currentframe"), ("/logging/__init__.py", "<lambda>"),
    ("/IPython/utils/frame.py", "extract_vars"), ("/IPython/utils/frame.py", "extract_vars_above"),
    ("/IPython/utils/frame.py", "extract_module_locals"), ("/IPython/utils/frame.py", "debugx"),
    ("/bdb.py", "set_trace"), ("/pdb.py", "set_trace"),
    ("/ctypes/__init__.py", "__init__"), ("/ctypes/__init__.py", "__getattr__"), ("/ctypes/__init__.py", "__getitem__"),
    ("/ctypes/__init__.py", "string_at"), ("/ctypes/__init__.py", "wstring_at"))
PROBES_FILENAME = "probes.py"  # 探针源码编译时用的文件名
MAX_ALERTS = 200
READ, WRITE, NETWORK, PROCESS, EQ, INTROSPECT = (Flag.READ.value, Flag.WRITE.value, Flag.NETWORK.value,
                                                 Flag.PROCESS.value, Flag.EQ.value, Flag.INTROSPECT.value)
REPLACED, FORKS = "replaced", "forks"  # 通道上另外两种（不是可疑迹象的种类）：替换了的函数、超过上限时的进程数
WATCHED = (
    ("numpy", ("allclose", "isclose", "array_equal", "array_equiv", "all", "any", "abs", "max", "asarray", "array")),
    ("numpy.random", ("default_rng", "Generator", "PCG64", "SeedSequence")),  # 探针用它们从种子生成输入
    ("numpy.testing", ("assert_allclose", "assert_array_equal", "assert_array_almost_equal", "assert_equal",
                       "assert_almost_equal")),
    ("torch", ("allclose", "isclose", "equal", "all", "tensor", "as_tensor")),
    ("torch.testing", ("assert_close",)),
    ("math", ("isclose", "isfinite", "isnan")),
    ("json", ("dumps", "loads")),
    ("os", ("write", "_exit")),
    ("sys", ("audit", "addaudithook")),
)
BUILTIN_NAMES = ("print", "abs", "all", "any", "bool", "float", "int", "isinstance", "len", "max", "min", "round",
                 "sum", "str", "repr", "type", "range", "zip", "__import__", "open", "AssertionError",
                 "Exception", "exec", "eval", "hasattr", "getattr", "setattr", "list", "tuple", "dict")


# ---------------------------------------------------------------- 纯函数
# 钩子在安装时取好这些函数；调用时把要用的一切（常量、别的函数、内置函数）都当参数传进去：检查和比较快照的路上没有
# 按名字查找的全局变量，学生改本模块或 runner 的全局变量影响不到它们（这种改动本身会被报告，见 install）。
def under(path, base):
    return base != "" and (path == base or path.startswith(base.rstrip("/") + "/"))


def trusted_file(filename, prefixes, this_files, str_type, type_):
    """Python 安装目录里的库、评分程序自己（runner、本文件、探针）、冻结模块。"""
    return type_(filename) is str_type and (filename.startswith(prefixes) or filename in this_files
                                            or filename.startswith("<frozen "))


def student_on_stack(frame, prefixes, this_files, str_type, type_, trusted):
    """调用栈上第一个学生的代码（code 对象）；没有时 None。"""
    while frame is not None:
        code = frame.f_code
        if not trusted(code.co_filename, prefixes, this_files, str_type, type_):
            return code
        frame = frame.f_back
    return None


def hands_frames(frame, code, handing):
    """这一层是把帧交给调用者的库函数（handing 里的，或带着 capture_locals=True 的 traceback 函数）。"""
    for suffix, name in handing:
        if code.co_name == name and code.co_filename.endswith(suffix):
            return True
    while frame is not None and frame.f_code.co_filename.endswith("/traceback.py"):
        if frame.f_locals.get("capture_locals") is True:
            return True
        frame = frame.f_back
    return False


def direct_student(frame, prefixes, this_files, str_type, type_, trusted, handing, hands):
    """触发事件的学生代码：往上越过把帧交出来的库函数，第一个不是库的帧是学生的就是它；中间隔着别的库（它自己看帧、
    不交出来）时 None。"""
    while frame is not None:
        code = frame.f_code
        if not trusted(code.co_filename, prefixes, this_files, str_type, type_):
            return code
        if not hands(frame, code, handing):
            return None
        frame = frame.f_back
    return None


def path_of(arg, str_type, bytes_type, type_):
    """审计事件里的路径（str 或 bytes；文件描述符和别的对象不算：不调用学生对象的方法）。"""
    if type_(arg) is str_type:
        return arg
    if type_(arg) is bytes_type:
        return arg.decode("utf-8", "replace")
    return None


def is_process_memory(path):
    """/proc/self/mem、/proc/PID/mem、/proc/PID/task/TID/mem……：读它就是直接读进程的内存。"""
    parts = path.split("/")
    return parts[1:2] == ["proc"] and parts[3:4] != [] and parts[-1:] == ["mem"]


def file_flag(event, path, mode, flags, where, names, under_):
    """文件事件 → (种类, 说明) 或 None。where：(课程目录, 临时副本, 沙箱里的 /tmp 是私有的, 可信的前缀, 写的标志位)；
    names：(可疑的路径部分, 列目录的事件, str, int, 读的种类, 写的种类)。"""
    course_root, scratch, private_tmp, prefixes, write_bits = where
    suspicious_parts, listing, str_type, int_type, read, write = names
    suspicious = False
    if not (path.startswith(prefixes) or under_(path, scratch)):  # 临时副本里没有答案（它是评分进程造的）
        suspicious = under_(path, course_root)
        for part in path.split("/"):
            suspicious = suspicious or part in suspicious_parts
    allowed = under_(path, scratch) or (private_tmp and under_(path, "/tmp")) or under_(path, "/dev/null")
    if event == "open":
        writing = (mode.__class__ is str_type and ("w" in mode or "a" in mode or "x" in mode or "+" in mode)) or (
            flags.__class__ is int_type and flags & write_bits != 0)
        if suspicious:
            return (write if writing else read), path
        return (write, path) if writing and not allowed else None
    if event in listing:
        return (read, path) if suspicious else None
    return None if allowed else (write, event + " " + path)


def what_is_peeking(event, args, armed, t, trusted_args, sets, trusted):
    """拿帧、对象、内存，或把代码伪装成库 → 说明；不算时 None。sets：(伪装代码的事件, 任何时候都拦的, 检查时拦的,
    帧属性)。"""
    type_, getattr_ = t[0], t[3]
    code_events, always, introspection, frame_attrs = sets
    if event in code_events:
        name = args[1] if event in ("compile", "code.__new__") else getattr_(args[0], "co_filename", None)
        return f"{event}（文件名 {name}）" if trusted(name, *trusted_args) else None
    if event in always or (armed and event in introspection):
        return event
    if event == "object.__getattr__" and args[1] in frame_attrs:
        if armed or (args[1] == "tb_frame" and type_(args[0]).__name__ == "traceback"
                     and args[0].tb_frame.f_code.co_filename in trusted_args[1]):
            return f"{type_(args[0]).__name__}.{args[1]}"  # 检查之前也不许拿到钩子自己的帧（它抛出的异常里有）
        return None
    if event == "object.__setattr__" and args[1] == "__code__" and type_(args[0]).__name__ == "function":
        return f"改写函数的 __code__（{getattr_(args[0], '__qualname__', '?')}）"
    return None


def snapshot(holders, t):
    """holders：((名字, 对象或字典, 属性名), …) → ((名字, id), …)。t：安装时取好的 (type, id, dict, getattr, …)。"""
    type_, id_, dict_type, getattr_, tuple_ = t[0], t[1], t[2], t[3], t[9]
    out = []
    for label, holder, attr in holders:
        value = holder.get(attr) if type_(holder) is dict_type else getattr_(holder, attr, None)
        out.append((label, id_(value)))
    return tuple_(out)


def replaced_lib_functions(modules, t):
    """课程 lib/ 里被学生的代码换掉的函数（在 notebook 里或 exec 的字符串里定义、塞进 lib 模块的）。"""
    getattr_, vars_, list_ = t[3], t[4], t[5]
    out = []
    for modname, mod in list_(modules.items()):
        if not (modname == "lib" or modname.startswith("lib.")) or mod is None:
            continue
        for attr, val in list_(vars_(mod).items()):
            code = getattr_(val, "__code__", None)
            if code is not None and (code.co_filename.startswith("<") or getattr_(val, "__module__", None) == "__main__"):
                out.append(modname + "." + attr)
    return out


def generated_eq(cls, reference, t):
    """cls 的 __eq__ 是 @dataclass 自己生成的（逐个字段比较，不是“和什么都相等”的把戏）：和同样字段的参考类的
    __eq__ 字节码完全相同。reference(cls) 造出那个参考类（dataclasses.make_dataclass，安装时取好）。"""
    getattr_, vars_ = t[3], t[4]
    params = getattr_(cls, "__dataclass_params__", None)
    eq = vars_(cls).get("__eq__")
    if params is None or not params.eq or eq is None or getattr_(eq, "__qualname__", "") != cls.__qualname__ + ".__eq__":
        return False
    try:
        ref = vars_(reference(cls)).get("__eq__").__code__
        code = eq.__code__
    except Exception:  # noqa: BLE001  造不出参考类：当成学生自己写的
        return False
    return (code.co_code, code.co_names, code.co_consts) == (ref.co_code, ref.co_names, ref.co_consts)


def reads_second_argument(get_instructions, t, eq):
    """eq(self, other) 的代码读不读第二个参数（other）：“和什么都相等”的把戏不看 other（return True），普通的 __eq__
    （return self.dims == other.dims）要看它。get_instructions 是安装时取好的 dis.get_instructions；读 other 的指令是
    LOAD_FAST*（3.12 起还有 LOAD_FAST_CHECK，3.13 的 LOAD_FAST_LOAD_FAST 的 argval 是两个名字）、LOAD_DEREF 和
    LOAD_CLOSURE（other 被里面的生成器、lambda 用到时）。读之前先存进、删掉 other 的（other = self）不算读了。
    取不到代码、没有第二个参数、出错：当成不读（照样报告）。"""
    getattr_, str_, tuple_, isinstance_ = t[3], t[7], t[9], t[6]
    code = getattr_(getattr_(eq, "__func__", eq), "__code__", None)
    if code is None or code.co_argcount < 2:
        return False
    name = code.co_varnames[1]
    try:
        for ins in get_instructions(code):  # 按字节码的顺序：先把 other 换掉（other = self）再读的，不算读了
            op = ins.opname
            names = [str_(n) for n in (ins.argval if isinstance_(ins.argval, tuple_) else (ins.argval,))]
            if op == "STORE_FAST_LOAD_FAST":  # 3.13：(存进的, 读出的)
                if names[0] == name:
                    return False
                names = names[1:]
            elif op.startswith(("STORE_", "DELETE_")) and op.endswith(("_FAST", "_DEREF", "FAST_STORE_FAST")):
                if name in names:
                    return False
                continue
            if ("LOAD_FAST" in op or op in ("LOAD_DEREF", "LOAD_CLOSURE")) and name in names:
                return True
    except Exception:  # noqa: BLE001
        return False
    return False


def eq_classes(user_ns, reference, t, judges):
    """学生自己定义、改写了 __eq__、__bool__ 或 __array__ 的类（“永远相等”的把戏）。@dataclass 生成的 __eq__ 不算，
    读了第二个参数（other）的 __eq__ 也不算（普通的按内容比较，fe44r S2）。judges：(generated_eq, reads)，
    reads(eq) 是安装时用 dis.get_instructions 做好的 reads_second_argument。"""
    type_, getattr_, vars_, list_, isinstance_ = t[0], t[3], t[4], t[5], t[6]
    generated, reads = judges
    out = []
    for name, val in list_(user_ns.items()):
        cls = val if isinstance_(val, type_) else type_(val)
        if getattr_(cls, "__module__", None) != "__main__":
            continue
        own = vars_(cls)
        ordinary = "__eq__" in own and (generated(cls, reference, t) or reads(own["__eq__"]))
        if ("__eq__" in own and not ordinary) or "__bool__" in own or "__array__" in own:
            out.append(cls.__name__ + ".__eq__")
    return out


def dataclass_like(make_dataclass, field, fields):
    """generated_eq 的参考类：和 cls 同名、同样参与比较的字段（make_dataclass、field、fields 是安装时取好的）。"""
    def reference(cls):
        return make_dataclass(cls.__name__, [(f.name, object, field(compare=f.compare)) for f in fields(cls)])
    return reference


def signal_handlers(signal):
    handlers = []
    for sig in signal.valid_signals():
        try:
            handlers.append((sig, signal.getsignal(sig)))
        except (ValueError, OSError):
            pass
    return tuple(handlers)


def restore_signals(before, sig):
    """把学生换掉的信号处理函数换回 before（学生的代码之前的样子），停掉计时器。Python 的信号处理函数会收到信号
    到来时的帧，装它又没有审计事件。sig：(getsignal, signal, Signals, getitimer, setitimer, 计时器)。返回换回来的信号名。"""
    getsignal, set_handler, names, getitimer, setitimer, timers = sig
    changed = []
    for num, handler in before:
        try:
            if getsignal(num) is not handler:
                set_handler(num, handler)
                changed.append(names(num).name)
        except (ValueError, OSError, TypeError):
            pass
    for timer in timers:
        if getitimer(timer)[0]:
            setitimer(timer, 0)
    return changed


def runner_step(step, args, snap0, reported, ctx):
    """runner 的一步之后要做的检查（cell_done、cells_done、check_done、probes_done）。返回 (可疑迹象的列表, 新报告的
    替换)。ctx：install 里取好的一切（见那里）。"""
    holders, builtin_holders, modules, reference, sig, tracers, signals_before, t, fns, kinds = ctx
    snap, lib_replaced, eq_of, gen_eq, restore = fns
    replaced, eq, introspect = kinds
    found = []
    if snap0 is not None and step in ("cell_done", "cells_done", "probes_done"):
        before = t[2](snap0)  # runner 每个单元格之后把内置函数换回来：cell_done 只看内置函数，在换回来之前
        now = snap(builtin_holders if step == "cell_done" else holders, t)
        found = [label for label, ident in now if label in before and before[label] != ident and label not in reported]
        if step != "cell_done":
            found += [x for x in lib_replaced(modules, t) if x not in reported]
    alerts = [(replaced, label) for label in found]
    if step == "cells_done":
        if args and t[0](args[0]) is t[2]:
            alerts += [(eq, what) for what in eq_of(args[0], reference, t, gen_eq)]
        for set_tracer in tracers:  # 单元格里装的跟踪函数、信号处理函数不能带进检查阶段（它们会收到评分程序的帧）
            set_tracer(None)
        restore(signals_before, sig)
    if step == "check_done":
        names = restore(signals_before, sig)
        if names:
            alerts.append((introspect, "检查时装了信号处理函数（它会收到评分程序的帧）：" + "、".join(names)))
    return alerts, found


def alert_line(kind, detail):
    """评分通道上的一行：手写的 JSON（说明用十六进制），不经过学生可能改过的 json 模块。"""
    return ('{"ev": "alert", "kind": "' + kind + '", "hex": "' + detail[:300].encode("utf-8", "replace").hex()
            + '"}\n').encode()


# ---------------------------------------------------------------- 安装
def install(channel_fd, course_root, scratch, max_forks, this_files, runner_globals):
    """在学生的代码之前装上钩子。channel_fd：评分通道；this_files：评分程序自己的文件（runner）；runner_globals：
    runner 的全局变量。什么也不返回：钩子的状态是它自己闭包里的不可变值，只有它自己改得了（没有别的函数和它共用
    这些变量；钩子这个函数对象只在解释器里，gc 又被拦下）。学生改 runner 或本模块的全局变量、builtins、被监视的
    库函数，都在下一步（cell_done、cells_done、probes_done）被报告成“替换了 …”。"""
    import dataclasses
    import dis
    import functools
    import signal
    import threading
    t = (type, id, dict, getattr, vars, list, isinstance, str, bytes, tuple, int)
    get_ident, frozenset_ = __import__("_thread").get_ident, frozenset
    getframe, write, exit_now, abspath, realpath = sys._getframe, os.write, os._exit, os.path.abspath, os.path.realpath
    fstat, channel = os.fstat, (os.fstat(channel_fd).st_dev, os.fstat(channel_fd).st_ino)  # 评分通道是哪一个管道
    denied, interrupt = PermissionError, KeyboardInterrupt
    prefixes = tuple({os.path.abspath(sys.prefix) + "/", os.path.abspath(sys.base_prefix) + "/"})
    trusted_args = (prefixes, frozenset(this_files) | {PROBES_FILENAME, os.path.abspath(__file__)}, str, type)
    where = (course_root.rstrip("/"), scratch, scratch == "/tmp/submission", prefixes,
             os.O_WRONLY | os.O_RDWR | os.O_CREAT)
    names = (SUSPICIOUS_PARTS, LISTING_EVENTS, str, int, READ, WRITE)
    k_process, k_forks, k_network, k_introspect, max_alerts = PROCESS, FORKS, NETWORK, INTROSPECT, MAX_ALERTS
    sets = (CODE_EVENTS, ALWAYS_EVENTS, INTROSPECTION_EVENTS, FRAME_ATTRIBUTES)
    modules = sys.modules
    holders = tuple([("builtins." + n, builtins, n) for n in BUILTIN_NAMES]
                    + [("runner." + n, runner_globals, n) for n in list(runner_globals)]
                    + [("guard." + n, globals(), n) for n in list(globals())]
                    + [(mod + "." + n, modules[mod], n) for mod, ns in WATCHED if mod in modules for n in ns])
    ctx = (holders, holders[:len(BUILTIN_NAMES)], modules,
           dataclass_like(dataclasses.make_dataclass, dataclasses.field, dataclasses.fields),
           (signal.getsignal, signal.signal, signal.Signals, signal.getitimer, signal.setitimer,
            (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)),
           (sys.settrace, sys.setprofile, threading.settrace, threading.setprofile), signal_handlers(signal), t,
           (snapshot, replaced_lib_functions, eq_classes,
            (generated_eq, functools.partial(reads_second_argument, dis.get_instructions, t)), restore_signals),
           (REPLACED, EQ, INTROSPECT))
    watched = (INTROSPECTION_EVENTS | CODE_EVENTS | PROCESS_EVENTS | LISTING_EVENTS | CHANGING_EVENTS
               | {"open", "socket.connect", "object.__getattr__", "object.__setattr__"})
    process_events, file_events, handing = PROCESS_EVENTS, LISTING_EVENTS | CHANGING_EVENTS | {"open"}, FRAME_HANDING
    on_stack, direct, hands, path_of_, proc_mem, file_flag_, under_, snap, step_of, peeking, line_of, trusted = (
        student_on_stack, direct_student, hands_frames, path_of, is_process_memory, file_flag, under, snapshot,
        runner_step, what_is_peeking, alert_line, trusted_file)
    armed, child, forks, sent, snap0, reported, busy = False, False, 0, 0, None, frozenset_(), frozenset_()

    def hook(event, args):
        nonlocal armed, child, forks, sent, snap0, reported, busy
        alerts, blocked = [], None
        if event.startswith("lecture07."):  # runner 的一步（学生自己发出只会让检查更严）
            step = event[10:]
            if step == "cells_start" and snap0 is None:
                snap0 = snap(holders, t)
            elif step == "child":
                child = True
            elif step in ("cell_done", "cells_done", "check_done", "probes_done"):
                alerts, found = step_of(step, args, snap0, reported, ctx)
                reported = reported | frozenset_(found)
                armed = armed or step == "cells_done"
        elif event in watched and get_ident() not in busy:  # 钩子自己用 sys._getframe、realpath……时不再检查
            me = get_ident()
            busy = busy | {me}
            try:
                frame = getframe(1)
                if event in process_events:
                    if on_stack(frame, *trusted_args, trusted) is not None:
                        forks += 1
                        if child:
                            exit_now(0)  # 学生 fork 出来的子进程还想再 fork：直接结束它（防 fork 炸弹）
                        # 沙箱里（where[2]）子进程和内核一样看不到课程、别的学生和密钥：只数，不算可疑（!ls、!pip list），
                        # 超过上限（fork 炸弹）时才报告；没有沙箱时子进程读的文件审计钩子看不到，第一次创建就报告
                        alerts = [(k_process, event)] if forks == 1 and not where[2] else []
                        if forks > max_forks:
                            alerts += [(k_process, f"{event}（第 {forks} 个，超过上限）")] \
                                if forks == max_forks + 1 and where[2] else []
                            alerts += [(k_forks, str(forks))] if forks == max_forks + 1 else []
                            blocked = "评分环境限制：不允许再创建新进程"
                elif event in file_events:
                    path = path_of_(args[0], t[7], t[8], t[0]) if args else None
                    path = None if path is None else abspath(path)
                    student = None if path is None else on_stack(frame, *trusted_args, trusted)
                    if student is not None and not path.startswith(prefixes) and proc_mem(realpath(path)):
                        alerts = [(k_introspect, f"读进程的内存 {path}，在 {student.co_name}（{student.co_filename}）里")]
                        blocked = "评分环境：不允许读进程的内存"
                    elif student is not None:
                        found = file_flag_(event, path, args[1] if event == "open" else None,
                                           args[2] if event == "open" else None, where, names, under_)
                        alerts = [found] if found is not None else []
                elif event == "socket.connect":
                    if on_stack(frame, *trusted_args, trusted) is not None:
                        alerts = [(k_network, t[7](args[1:]) if args[1:] else "")]
                else:
                    what = peeking(event, args, armed, t, trusted_args, sets, trusted)
                    code = None if what is None else direct(frame, *trusted_args, trusted, handing, hands)
                    if code is not None:
                        alerts = [(k_introspect, f"{what}，在 {code.co_name}（{code.co_filename}）里")]
                        blocked = f"评分环境：检查时不允许查看评分程序的调用栈和对象（{what}）"
            except (denied, interrupt):
                raise
            except:  # noqa: E722  钩子出错时放行：不能因为评分程序自己的错误拦下学生的正常操作
                alerts, blocked = [], None
            finally:
                busy = busy - {me}
        for kind, detail in alerts:
            if sent < max_alerts:
                sent += 1
                try:
                    st = fstat(channel_fd)
                    same = (st.st_dev, st.st_ino) == channel
                except:  # noqa: E722  这里不按名字查找任何东西（学生可能换掉了内置的异常类）
                    same = False
                if not same:  # 学生把通道换成了自己的管道（好在中间滤掉可疑迹象）：结束内核，这一行是 crashed
                    try:
                        write(2, "评分通道被学生的代码换掉了（os.dup2/close），内核已结束\n".encode())
                    finally:
                        exit_now(70)
                try:
                    write(channel_fd, line_of(kind, detail))  # 一行不到 4 KB：对管道是原子的写
                except:  # noqa: E722
                    pass
        if blocked is not None:
            raise denied(blocked)

    sys.addaudithook(hook)
    os.register_at_fork(after_in_child=functools.partial(sys.audit, "lecture07.child"))
