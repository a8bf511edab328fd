"""代码指纹：一段代码“算什么”的哈希，随仓库发布的训练结果按它存档（lib/shipped.py、lib/experiments.py 共用这一个）。

按语法树算，不按源码文本：注释、文档字符串、空行、缩进和换行方式都不进指纹，所以改一句文档字符串、补一条注释、
重新排版都不让结果过期；改了一个数、一个运算、一个函数名，指纹就变。语法树写成一个和 Python 版本无关的文本
（每个节点写成 类型(字段=值, ...)，空的字段不写：Python 3.12 起函数多了一个通常为空的 type_params 字段，
3.13 的 ast.dump 不再写空字段），所以在 Python 3.10–3.13 上，同一份代码的指纹相同（tests/test_fingerprint.py）。
"""
from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import textwrap
import types

_HAS_DOCSTRING = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _drop_docstrings(tree: ast.AST) -> ast.AST:
    """去掉模块、类和函数开头的文档字符串（只剩文档字符串的函数体换成 pass）。"""
    for node in ast.walk(tree):
        if isinstance(node, _HAS_DOCSTRING) and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
    return tree


def _canonical(node) -> str:
    """语法树的文本形式：节点类型和非空的字段，不含行号。"""
    if isinstance(node, ast.AST):
        fields = [f"{name}={_canonical(value)}" for name, value in ast.iter_fields(node) if value not in (None, [])]
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return "[" + ", ".join(_canonical(item) for item in node) + "]"
    return repr(node)


def source_of(obj) -> str:
    """obj 的源码：字符串原样返回；模块、函数、类用 inspect 读（notebook 里定义的函数，IPython 把源码放在 linecache 里）。"""
    return obj if isinstance(obj, str) else inspect.getsource(obj)


@functools.lru_cache(maxsize=256)
def _text_form(source: str) -> str:
    try:
        tree = ast.parse(textwrap.dedent(source.replace("\r\n", "\n")))
    except SyntaxError:  # 单独拿出来不成句的源码（例如一个表达式中间的 lambda）：退回到按文本
        return "\n".join(line.rstrip() for line in source.replace("\r\n", "\n").strip().splitlines())
    return _canonical(_drop_docstrings(tree))


def code_text(obj) -> str:
    """obj（源码字符串、模块、函数或类）去掉注释和文档字符串、和排版无关的形式：指纹就是它的哈希。"""
    return _text_form(source_of(obj))


def code_fingerprint(*objects) -> str:
    """这些代码（模块、函数、类或源码字符串，按给出的顺序）的指纹：前 12 位十六进制。"""
    h = hashlib.sha256()
    for obj in objects:
        name = obj.__name__ if isinstance(obj, (types.ModuleType, types.FunctionType, type)) else ""
        h.update(f"{name}\n{code_text(obj)}\n".encode("utf-8"))
    return h.hexdigest()[:12]
