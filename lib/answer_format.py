"""练习答案的格式规则：公开测试、评分时的隐藏检查、提交前自查用的是同一套规则（同一份代码）。

规则：NumPy 能**无损**转换成题目要求的形状和类型的，就接受；其余的用一句中文说明哪里不对。

- **一个数**：int、float、NumPy 标量、torch 标量，以及只有一个元素的数组或张量（手算时写成 1×1 的数组也行）。
  不接受：None（忘了 return？）、字符串、True/False、虚部不为 0 的复数、多于一个元素的数组。
- **整数**（计数）：同上，而且值必须是整数：``24576.0`` 可以，``6.5`` 不行。
- **数组**：list、tuple、NumPy 数组、torch 张量都行，元素是数（整数、浮点、布尔、虚部为 0 的复数）；
  形状必须是题目要求的形状，只差长度为 1 的维度也接受（要求 (2,) 时给 (2, 1) 可以）。
- **torch 布尔掩码**：必须是 dtype 为 torch.bool 的张量。NumPy 数组不接受，因为 ``lib.transformer``
  的注意力只接受 torch 张量（放进模型会出错）；浮点或整数的 0/1 也不接受（很多库把浮点掩码当成加到打分上的数）。

- **数值的容差**（``TOLERANCES``，三处共用 ``close``）：
  - ``"computed"``：函数算出来的值。相对误差不超过 1e-4（以整个答案的量级为尺度），所以 NumPy 的 float32、
    torch 默认的 float32（和 ``lib.transformer.apply_rope`` 一样）算出的正确答案都是满分；
  - ``"hand"``：手算后填写的数，和答案相差不超过 0.01（保留两三位小数即可）；
  - ``"share"``：比例、占比，和答案相差不超过 0.005（讲义写成百分数，例如 84%；保留到 0.84 或 0.842 都行）；
  - ``"hand_relation"``：只用于公开测试的自洽检查，两个手算的数之间的关系（例如权重 = 你自己的打分的 softmax）
    相差不超过 0.04：两边各有 0.01 的舍入，在 ``"hand"`` 容差内的答案一定通过；
  - 计数（整数）必须完全相同。
  每道题在题目里写明它用哪一种。超出容差时，``shown`` 把“你的”和“应为”写到能看出差别的位数。

评分时学生的函数在学生自己的内核里运行，``describe`` 把返回值变成纯 JSON 的无损描述；
判定（``read_*``）在从未运行过学生代码的评分进程里进行。公开测试和自查直接用 ``number``、``array`` 等，
它们就是 ``read_*(describe(x))``，所以三处的结论和说明文字一字不差。
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import warnings

import numpy as np

# 练习 1 的 self_attention 里不能有现成的注意力：公开测试、探针和自检用同一个判断（lib/ready_made.py）
from lib.ready_made import borrowed, borrowed_message  # noqa: F401

MAX_VALUES = 200_000  # 更大的数组只记录形状（练习里没有这么大的答案）


# 数值的容差：公开测试、隐藏检查、自查都用这一张表（见模块说明）
TOLERANCES = {
    "computed": {"rtol": 1e-4, "atol": 0.0},   # 算出来的值：float32 也算对
    "hand": {"rtol": 0.0, "atol": 0.01},       # 手算填写的数：保留两三位小数
    "share": {"rtol": 0.0, "atol": 0.005},     # 比例：讲义的精度（84%）
    # 几个手算的数之间的关系（公开测试的自洽检查：权重 = 你的打分的 softmax，点积 = 你的 q̃·k̃，|q̃| = 1）：
    # 每个数都可以差 0.01，关系两边最多差约 0.04；典型错误都比这远得多（例如没有缩放时权重差 0.08）
    "hand_relation": {"rtol": 0.0, "atol": 0.04},
}


def close(got, want, kind: str = "computed") -> bool:
    """got 和 want 在 kind 的容差内相等（形状也要相同）。computed：|got − want| ≤ rtol·max(|want| 的最大值, 1e-300)
    逐元素比较，以整个答案的量级为尺度（float32 的误差和量级成正比，分量接近 0 时也不会误判）。"""
    tol = TOLERANCES[kind]
    try:
        a, b = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    except (TypeError, ValueError):
        return False
    if a.shape != b.shape or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return False
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    bound = tol["atol"] + tol["rtol"] * max(scale, 1e-300)
    return bool(np.all(np.abs(a - b) <= bound))


def within(got, want, scale, kind: str = "computed") -> bool:
    """|got − want| 不超过 kind 的容差，尺度由调用者给出（例如差应为 0 时用输出的量级，打分用 |q||k|）。"""
    tol = TOLERANCES[kind]
    try:
        diff = float(np.max(np.abs(np.asarray(got, dtype=float) - np.asarray(want, dtype=float))))
    except (TypeError, ValueError):
        return False
    return bool(np.isfinite(diff)) and diff <= tol["atol"] + tol["rtol"] * max(abs(float(scale)), 1e-300)


def shown(got, want, kind: str = "computed") -> tuple[str, str]:
    """把 got 和 want 写成字符串，位数多到两者看得出不同（最少 4 位有效数字，最多 17 位）。"""
    a, b = np.atleast_1d(np.asarray(got, dtype=float)), np.atleast_1d(np.asarray(want, dtype=float))
    scalar = np.ndim(got) == 0 and np.ndim(want) == 0
    for digits in range(4, 18):
        ta = np.array2string(a, precision=digits, separator=", ", floatmode="maxprec")
        tb = np.array2string(b, precision=digits, separator=", ", floatmode="maxprec")
        if ta != tb or a.shape != b.shape or np.array_equal(a, b):
            break
    ta, tb = _no_trailing_dot(ta), _no_trailing_dot(tb)
    if scalar:
        ta, tb = ta.strip("[]").strip(), tb.strip("[]").strip()
    return ta, tb


def _no_trailing_dot(text: str) -> str:
    """NumPy 把整数值的浮点写成 “4.”：去掉末尾的点（“4.”→“4”，“1.e-08”→“1e-08”），对齐用的空格也去掉。"""
    import re

    text = re.sub(r"(?<=\d)\.(?=[\s,\]e]|$)", "", text)
    return re.sub(r" +(?=[,\]])", "", text)


class CheckFailed(AssertionError):
    """公开测试或评分检查没通过（一个失败的断言，说明是中文）。

    在 Jupyter 里（JupyterLab、nbgrader 的 Validate、nbclient 存下的输出）只显示 “✗ 说明”：IPython 显示异常时
    先找 ``_render_traceback_``，有就用它返回的几行代替调用栈，所以学生看不到 lib/ 里的内部调用。
    在普通的 Python 里（pytest、命令行）照常是完整的 traceback。"""

    def _render_traceback_(self) -> list[str]:
        return [f"✗ {self}"]


class FormatError(CheckFailed):
    """答案的格式不对（在公开测试里就是一个失败的断言，说明是中文）。"""


class NotAnswered(FormatError):
    """要填写的变量还是发布版里的 None：这道题还没做（和没写完的函数抛出的 NotImplementedError 是一回事）。"""


class StudentCodeError(CheckFailed):
    """测试调用你的函数时，你的代码出错了：显示中文说明，再显示出错的位置（你的代码里的几帧；
    测试本身在 lib/ 里的调用不显示）。"""

    def __init__(self, message: str, error: BaseException | None = None):
        super().__init__(message)  # args 只有 message：和别的异常一样能 pickle、复制
        self.error = error

    def _render_traceback_(self) -> list[str]:
        if self.error is None:
            return super()._render_traceback_()
        return [f"✗ {self}", "出错的位置（你的代码）："] + _student_traceback(self.error)


_LIB_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _student_traceback(error: BaseException) -> list[str]:
    """error 的调用栈，去掉开头在课程 lib/ 里的帧（测试调用学生函数的那几层）。在 IPython 里用它的格式
    （和普通的报错一样，单元格写成 “Cell In[5], line 3”），否则用标准库的格式。从不抛出异常。"""
    tb = error.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_LIB_DIR):
        tb = tb.tb_next
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            return list(shell.InteractiveTB.structured_traceback(type(error), error, tb))
    except Exception:  # noqa: BLE001  IPython 的格式化出错时退回标准库
        pass
    import traceback

    return [line.rstrip("\n") for line in traceback.format_exception(type(error), error, tb)]


# ----------------------------------------------------------------------------
# 描述：任意 Python 对象 → 纯 JSON 数据（不丢信息）
# ----------------------------------------------------------------------------


def _torch():
    return sys.modules.get("torch")  # 没导入过 torch，就不可能得到 torch 张量


def describe(x, _depth: int = 0) -> dict:
    """把一个值变成纯 JSON 的描述：类型、dtype、形状、数值（复数另记虚部）。从不抛出异常。"""
    torch = _torch()
    d: dict = {"type": type(x).__name__}
    if x is None:
        return {"type": "None"}
    if isinstance(x, str):
        return {"type": "str", "text": x[:40]}
    if isinstance(x, (tuple, list)) and _depth == 0:
        if type(x) not in (tuple, list):  # namedtuple、list 的子类：按 tuple、list 对待，类名另记
            d["type"], d["class"] = ("tuple" if isinstance(x, tuple) else "list"), type(x).__name__
        d["len"] = len(x)
        d["items"] = [describe(e, 1) for e in x[:4]]
    try:
        if torch is not None and isinstance(x, torch.Tensor):
            d["torch_dtype"] = str(x.dtype).replace("torch.", "")
            x = x.detach().cpu()
            x = x.numpy() if x.dtype != torch.bfloat16 else x.double().numpy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = np.asarray(x)
    except Exception:  # noqa: BLE001  转不成数组（长短不一的列表、奇怪的对象）：只记类型
        return d
    d.update(kind=a.dtype.kind, dtype=str(a.dtype), shape=list(a.shape))
    if a.dtype.kind not in "biufc" or a.size > MAX_VALUES:
        return d
    if a.dtype.kind == "c":
        d["values"], d["imag"] = a.real.astype(float).tolist(), a.imag.astype(float).tolist()
    elif a.dtype.kind == "f":
        d["values"] = a.astype(float).tolist()
    else:
        d["values"] = a.tolist()  # 整数保持精确的整数，布尔保持 True/False
    return d


# ----------------------------------------------------------------------------
# 判定：描述 → 题目要求的值，或 FormatError（中文说明）
# ----------------------------------------------------------------------------


def _got(desc: dict) -> str:
    t = desc.get("type")
    if t == "str":
        return f"字符串 {desc.get('text', '')!r}"
    if t == "bool":
        return f"布尔值 {desc.get('values')}"
    if "torch_dtype" in desc:
        return f"torch 张量（{desc['torch_dtype']}，形状 {tuple(desc.get('shape', ()))}）"
    if "shape" in desc and t in ("ndarray", "list", "tuple") and desc.get("shape"):
        return f"{'NumPy 数组' if t == 'ndarray' else t}（形状 {tuple(desc['shape'])}）"
    return t or "未知的对象"


# 格式不对时说清楚接受什么（和模块说明的规则一致）
ACCEPTED = {
    "数组": "接受由数组成的 list、tuple、NumPy 数组或 torch 张量",
    "一个数": "接受 int、float、NumPy 或 torch 的标量（只有一个元素的数组也行）",
    "整数": "接受 int、NumPy 或 torch 的整数（值是整数的 float 也行）",
}


def _verb(returned: bool) -> str:
    return "应返回" if returned else "应是"


def _numeric(desc: dict, what: str, want: str, returned: bool) -> np.ndarray:
    """共同的前几条规则：None、字符串、布尔标量、非数值、复数。返回 float64 数组（可能含 NaN）。"""
    if not isinstance(desc, dict):
        raise FormatError(f"{what}：记录的数据格式不对")
    if desc.get("type") == "None":
        if returned:
            raise FormatError(f"{what} 返回了 None：忘了写 return？")
        raise NotAnswered(f"{what} 还是 None：先在上面的单元格里填写它")
    if desc.get("type") == "str":
        raise FormatError(f"{what} {_verb(returned)}{want}，得到{_got(desc)}：去掉引号，不要用 str() 或 f-string 转换")
    if desc.get("type") == "bool" or (desc.get("kind") == "b" and want != "数组"):
        raise FormatError(f"{what} {_verb(returned)}{want}，得到布尔值（True/False）")
    if desc.get("kind") not in tuple("biufc") or "values" not in desc:
        inside = "，里面是字符串：去掉引号" if desc.get("kind") in ("U", "S") else "（不是数值）"
        raise FormatError(f"{what} {_verb(returned)}{want}，得到{_got(desc)}{inside}；{ACCEPTED.get(want, '')}".rstrip("；"))
    try:
        a = np.array(desc["values"], dtype=float)
        if desc.get("kind") == "c":
            imag = np.array(desc["imag"], dtype=float)
            if imag.shape != a.shape:
                raise ValueError("虚部的形状不一致")
            if np.any(imag != 0):
                raise FormatError(f"{what} {_verb(returned)}{want}（实数），得到虚部不为 0 的复数：取实部（.real）了吗？")
    except FormatError:
        raise
    except (TypeError, ValueError, KeyError):
        raise FormatError(f"{what}：记录的数值格式不对") from None
    if list(a.shape) != list(desc.get("shape", [])):
        raise FormatError(f"{what}：记录的形状和数据不一致")
    return a


def _finite(a: np.ndarray, what: str, hint: str = "") -> None:
    if not np.all(np.isfinite(a)):
        raise FormatError(f"{what} 含有 NaN 或无穷大{('：' + hint) if hint else ''}")


def read_number(desc: dict, what: str, returned: bool = True, nan_hint: str = "") -> float:
    a = _numeric(desc, what, "一个数", returned)
    if a.size != 1:
        raise FormatError(f"{what} {_verb(returned)}一个数，得到形状 {a.shape} 的数组（{a.size} 个元素）")
    _finite(a, what, nan_hint)
    return float(a.reshape(-1)[0])


def read_integer(desc: dict, what: str, returned: bool = True) -> int:
    a = _numeric(desc, what, "整数", returned)
    if a.size != 1:
        raise FormatError(f"{what} {_verb(returned)}整数，得到形状 {a.shape} 的数组（{a.size} 个元素）")
    _finite(a, what)
    if desc.get("kind") in "iu":  # 整数类型：直接取精确值（不经过浮点）
        return int(np.array(desc["values"]).reshape(-1)[0])
    x = float(a.reshape(-1)[0])
    if x != round(x):
        raise FormatError(f"{what} {_verb(returned)}整数（个数），得到 {x:g}：用整数除法 // 或检查公式")
    return int(round(x))


def _same_up_to_singletons(got, want) -> bool:
    return tuple(d for d in got if d != 1) == tuple(d for d in want if d != 1)


def read_array(desc: dict, what: str, shape=None, returned: bool = True, nan_hint: str = "") -> np.ndarray:
    a = _numeric(desc, what, "数组", returned)
    if shape is not None:
        shape = tuple(int(s) for s in shape)
        if a.shape != shape:
            if not _same_up_to_singletons(a.shape, shape):
                raise FormatError(f"{what} 的形状应是 {shape}，得到 {a.shape}")
            a = a.reshape(shape)
    _finite(a, what, nan_hint)
    return a


def read_torch_bool_mask(desc: dict, what: str, ndim: int | None = None) -> np.ndarray:
    if not isinstance(desc, dict):
        raise FormatError(f"{what}：记录的数据格式不对")
    if desc.get("type") == "None":
        raise FormatError(f"{what} 返回了 None：忘了写 return？")
    if "torch_dtype" not in desc:
        extra = ("：lib.transformer 的注意力只接受 torch 张量。直接对输入的 pad_mask 做索引（它本来就是 torch 张量），"
                 "或用 torch.from_numpy(...)" if desc.get("type") == "ndarray" else "")
        raise FormatError(f"{what} 应返回 torch 的布尔张量，得到{_got(desc)}{extra}")
    if desc["torch_dtype"] != "bool":
        raise FormatError(f"{what} 应是布尔张量（torch.bool，True = 可以看），得到 torch.{desc['torch_dtype']}："
                          "浮点或整数的掩码在很多库里表示“加到打分上的数”，不是“能不能看”")
    if ndim is not None and len(desc.get("shape", [])) != ndim:
        raise FormatError(f"{what} 应是 {ndim} 维的，得到形状 {tuple(desc.get('shape', []))}")
    try:
        m = np.array(desc["values"], dtype=bool)
    except (KeyError, TypeError, ValueError):
        raise FormatError(f"{what}：记录的掩码格式不对") from None
    if list(m.shape) != list(desc["shape"]):
        raise FormatError(f"{what}：记录的形状和数据不一致")
    return m


def read_pair(desc: dict, what: str) -> tuple[dict, dict]:
    """函数应返回两个东西（例如 (输出, 权重)）：返回这两个东西各自的描述。"""
    if not isinstance(desc, dict):
        raise FormatError(f"{what}：记录的数据格式不对")
    if desc.get("type") == "None":
        raise FormatError(f"{what} 返回了 None：忘了写 return？")
    items = desc.get("items")
    if desc.get("type") not in ("tuple", "list") or not isinstance(items, list):
        raise FormatError(f"{what} 应返回 (输出, 权重) 两个数组，得到{_got(desc)}")
    if desc.get("len") != 2:
        raise FormatError(f"{what} 应返回 (输出, 权重) 两个数组，得到 {desc.get('len')} 个")
    return items[0], items[1]


# ----------------------------------------------------------------------------
# 公开测试和自查用：直接检查一个值
# ----------------------------------------------------------------------------


def number(x, what: str, returned: bool = True, nan_hint: str = "") -> float:
    """x 是不是一个数？是就返回 float，否则 FormatError（中文说明）。"""
    return read_number(describe(x), what, returned, nan_hint)


def integer(x, what: str, returned: bool = True) -> int:
    return read_integer(describe(x), what, returned)


def array(x, what: str, shape=None, returned: bool = True, nan_hint: str = "") -> np.ndarray:
    """x 能不能无损地变成形状 shape 的浮点数组？返回 float64 的 np.ndarray。"""
    return read_array(describe(x), what, shape, returned, nan_hint)


def torch_bool_mask(x, what: str, ndim: int | None = None):
    """x 是不是 torch 的布尔张量（维数 ndim）？原样返回 x。"""
    read_torch_bool_mask(describe(x), what, ndim)
    return x


def pair(x, what: str) -> tuple:
    """x 是不是两个东西的 tuple/list（例如 self_attention 的 (输出, 权重)）？原样返回这两个东西。"""
    read_pair(describe(x), what)
    return x[0], x[1]


@contextlib.contextmanager
def silenced():
    """不显示学生代码的 print、警告和日志（nbgrader 把测试单元格里的 stderr 输出当成失败）。"""
    with contextlib.ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
        previous = logging.root.manager.disable
        logging.disable(logging.CRITICAL)
        stack.callback(logging.disable, previous)
        yield


LEFTOVER_RAISE = ("你写了答案，但函数在 return 之前执行到了 raise NotImplementedError()："
                  "删掉 raise NotImplementedError() 这一行")
# 不在函数里的 raise（填变量的答题单元格）：单元格运行到它就出错
LEFTOVER_RAISE_CELL = ("你写了答案，但单元格里还留着 raise NotImplementedError()：运行这个单元格时它会出错，"
                       "删掉 raise NotImplementedError() 这一行")


def has_own_code(fn) -> bool:
    """函数里除了文档字符串、注释、pass 和 raise NotImplementedError() 之外还有没有别的语句（学生写的答案）。
    拿不到源码时（例如用 exec 定义的函数）看字节码里用到的名字。"""
    import ast
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        body = next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))).body
    except (OSError, TypeError, SyntaxError, StopIteration):
        code = getattr(fn, "__code__", None)
        if code is None:
            return False
        own_locals = code.co_nlocals > code.co_argcount + code.co_kwonlyargcount
        return bool(set(code.co_names) - {"NotImplementedError"} or own_locals)

    def skeleton(node) -> bool:
        if isinstance(node, ast.Pass) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            return True
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
        return False

    return not all(skeleton(node) for node in body)


def unfinished_reason(fn) -> str:
    """函数抛出了 NotImplementedError：还没作答，还是写了答案却没删掉 raise 那一行？"""
    try:
        return LEFTOVER_RAISE if has_own_code(fn) else "还没有作答（仍是 raise NotImplementedError()）"
    except Exception:  # noqa: BLE001  学生的对象再怪也只影响说明
        return "还没有作答（仍是 raise NotImplementedError()）"


def call(fn, *args, what: str | None = None, **kwargs):
    """在测试单元格里调用你的函数：不显示它的 print、警告和日志；它出错时用中文说明是哪一次调用出的错。

    NotImplementedError：还没作答时抛出 NotAnswered（“还没有作答”）；写了答案却在 return 之前执行到
    raise NotImplementedError() 时，说明要删掉那一行（return 之后剩下的 raise 不会执行，没有影响）。
    你的函数出错时抛出 StudentCodeError：在 Jupyter 里显示中文说明和你的代码里出错的位置。"""
    name = what or f"{getattr(fn, '__name__', '你的函数')}(...)"
    if not callable(fn):
        raise FormatError(f"{name}：这个名字不是函数，得到 {type(fn).__name__}")
    try:
        with silenced():
            return fn(*args, **kwargs)
    except NotImplementedError:
        reason = unfinished_reason(fn)
        if reason == LEFTOVER_RAISE:
            raise CheckFailed(f"{name}：{LEFTOVER_RAISE}") from None
        raise NotAnswered(f"{name}：{reason}") from None
    except Exception as err:  # noqa: BLE001  学生代码的任何错误：加上是哪一次调用，并显示出错的位置
        raise StudentCodeError(f"调用 {name} 时你的函数出错了：{type(err).__name__}: {err}", err) from err
