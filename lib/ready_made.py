"""练习 1 的 ``self_attention`` 要自己写出每一步：它用到的代码里不能有现成的注意力。

公开测试、评分的探针和提交前自检用同一个判断 ``borrowed(fn, home)``（``lib.answer_format`` 转出）。它只看代码和对象，
不运行学生的代码。从学生的函数出发，走遍它碰得到的、学生在 notebook（全局字典 ``home``）里写的东西：函数（连同
里面定义的函数）的字节码、默认参数、闭包变量、装饰器包着的原函数、学生的类（连同基类）和实例、SimpleNamespace、
学生自己造的模块、list / tuple / set / dict。碰到下面任何一个就算“用到了”：

- 课程 ``lib`` 里的对象或模块（它的注意力就是答案），包括在函数里 import lib；
- torch 里名字带 attention 的对象：``F.scaled_dot_product_attention``、``nn.MultiheadAttention``、
  ``torch._scaled_dot_product_attention_math``、``torch.ops.aten`` 里的……；不管是直接拿着它、从模块上按属性取到它
  （``F.x``、``torch.nn.functional.x``、函数里 import 之后再取），还是放在默认参数、容器、类和实例的属性里；
- ``getattr(模块, "名字")`` 取到的现成的注意力，以及 ``getattr`` 里写着的 torch 私有算子的名字；
- 在来历不明的对象上（模块放在默认参数、属性、字典里，或者当参数传进来）取 ``scaled_dot_product_attention`` 这类
  名字的属性——除非学生自己的函数、类、实例、字典里有这个名字（那是学生自己的方法或属性）。

判断的是对象，不是名字：学生自己的函数、方法、属性和库里的同名都没关系；print 和配置里写着的名字、字符串也不算。
反过来，按运行时才拼出来的名字找对象（``importlib.import_module("lib.transformer")``、``sys.modules[…]``、``__import__``、
``eval``）看不出来：那是有意绕过，不是写错，TA 指南里写了。``if False:`` 里的代码编译时就被删掉了，
看不到也不算；别的关掉的调试代码（``if DEBUG:``）看得到，算。
"""
from __future__ import annotations

import builtins
import contextlib
import dis
import functools
import importlib
import sys
import types

LIB = "lib"
READY_MADE = frozenset({  # torch 里现成的注意力的名字；私有的那些在 getattr 里写出来也算（见 _private_op）
    "scaled_dot_product_attention", "multi_head_attention_forward", "MultiheadAttention", "_native_multi_head_attention",
    "_scaled_dot_product_attention_math", "_scaled_dot_product_attention_math_for_mps",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention", "_triton_multi_head_attention",
    "_triton_scaled_dot_attention"})
MAX_OBJECTS, MAX_ITEMS = 20_000, 1_000  # 走到这么多对象、容器里这么多项就停（学生的大数组不是容器）
PUBLIC_READY_MADE = frozenset(name for name in READY_MADE if not name.startswith("_"))
_ATTR_OPS = ("LOAD_ATTR", "LOAD_METHOD")
_PASS_THROUGH = frozenset({"SWAP", "POP_TOP", "COPY", "CACHE", "PRECALL", "NOP", "EXTENDED_ARG", "PUSH_NULL", "RESUME"})


def _named_ready_made(obj) -> bool:
    """obj 自己（函数、类、模块）是 lib 里的东西，或 torch 里名字带 attention 的对象。"""
    module = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    if not isinstance(module, str):
        return False
    name = getattr(obj, "__name__", None)
    package = module.split(".")[0]
    return package == LIB or (package == "torch" and isinstance(name, str) and "attention" in name.lower())


def _ready_made(obj) -> bool:
    """obj 是现成的注意力：它自己，或者它的类、类的基类（nn.MultiheadAttention 的实例、子类）。"""
    classes = obj.__mro__ if isinstance(obj, type) else type(obj).__mro__
    return _named_ready_made(obj) or any(_named_ready_made(c) for c in classes)


def _label(obj) -> str:
    name = getattr(obj, "__name__", None)
    return name if isinstance(name, str) else type(obj).__name__


def _students_class(cls, home: dict) -> bool:
    """cls 是学生在 notebook 里定义的类吗（在顶层定义，或者有方法是在 notebook 里写的）？"""
    if not isinstance(cls, type):
        return False
    if home.get(cls.__name__) is cls and getattr(builtins, cls.__name__, None) is not cls:
        return True
    return any(getattr(getattr(v, "__func__", v), "__globals__", None) is home for v in vars(cls).values())


def _handmade_module(obj) -> bool:
    """学生用 types.ModuleType(...) 造的模块（没有文件，也不是装好的包）。"""
    return isinstance(obj, types.ModuleType) and getattr(obj, "__spec__", None) is None \
        and not hasattr(obj, "__file__") and sys.modules.get(obj.__name__) is not obj


def _items(values) -> list:
    return list(values)[:MAX_ITEMS]


def _parts(obj, home: dict) -> list:
    """obj 里面还要看的对象（只展开学生写的东西和通用的包装、容器）。"""
    parts = [obj.__wrapped__] if "__wrapped__" in getattr(obj, "__dict__", {}) else []  # 装饰器包着的原函数
    if isinstance(obj, types.FunctionType):
        parts += _items(getattr(obj, "registry", {}).values())  # functools.singledispatch
        if obj.__globals__ is home:
            for cell in obj.__closure__ or ():
                with contextlib.suppress(ValueError):  # 还没赋值的闭包变量
                    parts.append(cell.cell_contents)
            parts += [*(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()]
    elif isinstance(obj, types.MethodType):
        parts += [obj.__func__, obj.__self__]
    elif isinstance(obj, (staticmethod, classmethod)):
        parts.append(obj.__func__)
    elif isinstance(obj, property):
        parts += [obj.fget, obj.fset, obj.fdel]
    elif isinstance(obj, functools.partial):
        parts += [obj.func, *obj.args, *obj.keywords.values()]
    elif isinstance(obj, (list, tuple, set, frozenset)):
        parts += _items(obj)
    elif isinstance(obj, (dict, types.MappingProxyType)):
        parts += _items(obj.values())
    elif isinstance(obj, type):
        if _students_class(obj, home):
            parts += _items(vars(obj).values()) + [b for b in obj.__mro__[1:] if _students_class(b, home)]
    elif _handmade_module(obj) or isinstance(obj, types.SimpleNamespace) or _students_class(type(obj), home):
        parts += _items(vars(obj).values()) + [type(obj)]
    return parts


def _module(name: str, fromlist) -> object:
    """IMPORT_NAME 得到的对象：没有 fromlist 时是顶层的包。torch 还没导入时导入它（只为了认出它里面的对象）。"""
    with contextlib.suppress(Exception):
        if name.split(".")[0] == "torch" and name not in sys.modules:
            importlib.import_module(name)
    return sys.modules.get(name if fromlist else name.split(".")[0])


def _getattr_call(op: str, arg, home: dict) -> bool:
    """这条指令取的是内置的 getattr 吗（没有被学生的同名变量盖住）？它后面的模块和字符串就是 getattr 的参数。"""
    return op in ("LOAD_GLOBAL", "LOAD_NAME") and arg == "getattr" and home.get("getattr", builtins.getattr) is builtins.getattr


def _private_op(text: str) -> bool:
    """torch 私有的注意力算子的名字（"_scaled_dot_product_attention_math" 之类）：学生的代码里不会为别的事写它。"""
    return text.startswith("_") and text in READY_MADE


def _read_code(fn, home: dict, todo: list, names: list) -> str | None:
    """学生的函数 fn（连同里面定义的函数）的字节码：import 了 lib、从模块上（按属性或用 getattr）取到现成的注意力
    → 那个名字；全局名字指向的对象放进 todo（由 borrowed 接着看）。在来历不明的对象上取 scaled_dot_product_attention
    这类名字的属性（模块放在默认参数、属性、字典里，或者当参数传进来），记进 names：不是学生自己的东西才算。"""
    codes = [fn.__code__]
    while codes:
        code = codes.pop()
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        current, base, local_modules, last_const, in_getattr = None, None, {}, None, False
        for ins in dis.get_instructions(code):
            op, arg = ins.opname, ins.argval
            if in_getattr and op == "LOAD_CONST" and isinstance(arg, str) and (
                    _private_op(arg) or (isinstance(current, types.ModuleType) and _ready_made(getattr(current, arg, None)))):
                return f"getattr 取的 '{arg}'"  # getattr(F, "scaled_dot_product_attention")、getattr(torch.ops.aten, "_…")
            if op in _ATTR_OPS and current is None and arg in PUBLIC_READY_MADE:
                names.append((str(arg), fn.__qualname__))  # backend.scaled_dot_product_attention：最后看是不是学生自己的
            in_getattr = _getattr_call(op, arg, home) or (in_getattr and (op in _PASS_THROUGH or op in _ATTR_OPS
                                                                          or op in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST")))
            if op == "IMPORT_NAME":
                if str(arg).split(".")[0] == LIB:
                    return str(arg)
                current = base = _module(str(arg), last_const)
            elif op in ("IMPORT_FROM", "LOAD_ATTR", "LOAD_METHOD"):
                owner = current if isinstance(current, types.ModuleType) else base if op == "IMPORT_FROM" else None
                current = getattr(owner, str(arg), None) if isinstance(owner, types.ModuleType) else None
                if current is not None and _ready_made(current):
                    return str(arg)
            elif op in ("LOAD_GLOBAL", "LOAD_NAME"):
                current = home.get(arg)
                todo.append(current)
            elif op in ("LOAD_FAST", "LOAD_DEREF"):
                current = local_modules.get(arg)
            elif op in ("STORE_FAST", "STORE_NAME", "STORE_DEREF"):
                if isinstance(current, types.ModuleType):
                    local_modules[arg] = current
                current = None
            elif op not in _PASS_THROUGH:
                current = None
            last_const = arg if op == "LOAD_CONST" else None
    return None


def borrowed(fn, home: dict | None = None) -> str | None:
    """fn 用到的代码里有现成的注意力时，返回“名字（在哪里）”；没有时 None。home：学生 notebook 的全局字典。"""
    home = getattr(fn, "__globals__", {}) if home is None else home
    todo, seen, names, own = [(fn, _label(fn))], set(), [], set()
    while todo and len(seen) < MAX_OBJECTS:
        obj, where = todo.pop()
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        try:
            if _ready_made(obj):
                return f"{_label(obj)}，在 {where} 里"
            if isinstance(obj, types.FunctionType) and obj.__globals__ is home:
                where = obj.__qualname__
                more = []
                found = _read_code(obj, home, more, names)
                if found:
                    return f"{found}，在 {where} 里"
                todo += [(o, where) for o in more]
                own.add(obj.__name__)
            own.update(_own_names(obj, home))
            todo += [(o, where) for o in _parts(obj, home)]
        except Exception:  # noqa: BLE001  学生的对象再怪也只是“看不出”
            continue
    return next((f"{name}，在 {where} 里" for name, where in names if name not in own), None)


def _own_names(obj, home: dict) -> set:
    """学生自己的东西里的名字（类、实例、SimpleNamespace、自己造的模块的属性，字典的键）：这些名字的属性是学生自己的。"""
    if isinstance(obj, dict):
        return {k for k in obj if isinstance(k, str)} if obj is not home else set()
    if _students_class(obj, home) or _handmade_module(obj) or isinstance(obj, types.SimpleNamespace) \
            or _students_class(type(obj), home):
        return set(vars(obj))
    return set()


def borrowed_message(what: str, name: str) -> str:
    return (f"{what} 用到的代码里有现成的注意力（{name}）：这道题要自己写出打分、缩放、掩码、softmax 和加权求和这几步"
            "（NumPy 或 torch 的基本运算都行，softmax 也可以用 NumPy / torch 的函数）；lib 里的任何东西和 torch 现成的注意力都不能用")
