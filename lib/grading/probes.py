"""探针的工具（引擎的内核一侧）：在学生的内核里调用学生写的函数、读取学生的变量，只记录数据。

每个练习 notebook 的探针写在 lib/grading/exercises/nbNN_exK.py 里（和它的检查放在一起）；本文件不知道任何一道题。
``kernel_source()`` 把本文件和每个练习模块的“探针”一段拼成一份源码，评分流水线把它送进学生的内核
（学生的单元格都跑完之后），然后对每个自动评分的测试单元格调用 ``PROBES[grade_id](namespace, seed)``。

契约：
- 探针只用标准库、numpy、torch（只在需要时才导入）以及 ``lib.answer_format``（``describe`` 把任意返回值变成
  纯 JSON 的无损描述；格式规则本身由干净的评分进程执行）。内核里没有 lib/grading/。
- 输入是固定的：seed 是这个 grade_id 自己的种子（没有学期密钥时是 exercise_checks.DEFAULT_SEED = 0，有时由密钥
  派生，见 hidden_inputs.py；内核里只有这次要检查的 grade_id 的种子），每道题另有自己的 salt，
  所以同一份文件在任何人、任何一次运行、任何机器上得到同样的输入和同样的分数。
- 探针出错时记录 ``{"error": "NameError: ..."}``，从不抛出异常；探针不做任何比较（学生可能改过 numpy）。
- 学生的代码可能打印、发出警告或写日志：每次调用都静音，免得 nbgrader 把 stderr 当成失败。
"""
from __future__ import annotations

import json
import math

import numpy as np

from lib.answer_format import borrowed, describe, has_own_code, silenced  # noqa: F401  borrowed：探针用

__all__ = ["PROBES", "kernel_source", "quiet_call"]


# ----------------------------------------------------------------------------
# 工具：静音地调用学生代码；把结果转换成纯数据
# ----------------------------------------------------------------------------


def quiet_call(fn, *args, **kwargs):
    """调用 fn，吞掉它的 print、警告和日志（nbgrader 把测试单元格里的任何 stderr 输出记为 0 分）。"""
    with silenced():
        return fn(*args, **kwargs)


def _error(err: BaseException, fn=None) -> dict:
    text = f"{type(err).__name__}: {err}"
    if isinstance(err, NotImplementedError) and fn is not None:
        try:
            if has_own_code(fn):  # 写了答案，却在 return 之前执行到了 raise NotImplementedError()
                text = "LeftoverRaise: " + text
        except Exception:  # noqa: BLE001
            pass
    return {"error": text[:500]}


def _get(namespace: dict, name: str):
    if name not in namespace:
        raise NameError(f"没有找到 {name}（运行过答题单元格了吗？名字拼对了吗？）")
    return namespace[name]


def _guarded(probe):
    """探针本身也从不抛出异常：任何意外都变成 {"error": ...}。"""

    def wrapper(namespace: dict, seed: int) -> dict:
        try:
            data = probe(namespace, int(seed))
            json.dumps(data)  # 必须是纯 JSON 数据
            return data
        except BaseException as err:  # noqa: BLE001  学生代码可能抛出任何东西（包括 SystemExit）
            if isinstance(err, KeyboardInterrupt):
                raise
            return _error(err)

    wrapper.__name__ = getattr(probe, "__name__", "probe")
    wrapper.__doc__ = probe.__doc__
    return wrapper


def _call_cases(fn, cases, convert=describe) -> list:
    """对每组参数调用学生的函数；单组出错只记在那一组里。"""
    out = []
    for args in cases:
        try:
            out.append({"result": convert(quiet_call(fn, *args))})
        except BaseException as err:  # noqa: BLE001
            if isinstance(err, KeyboardInterrupt):
                raise
            out.append(_error(err, fn))
    return out


def _rng(seed: int, salt: int) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, salt])


def _variable_probe(name):
    @_guarded
    def probe(namespace, seed):
        return {"value": describe(_get(namespace, name))}

    probe.__name__ = f"probe_{name}"
    return probe


PROBES: dict = {}  # grade_id → 探针；每个练习模块的探针一段用 PROBES.update({...}) 登记

# 练习模块里“探针”一段的开头和结尾（两行注释之间的代码送进内核）
PROBE_START = "# ==== 探针"
CHECK_START = "# ==== 检查"


def probe_section(source: str, where: str = "练习模块") -> str:
    """一个练习模块的源码里送进内核的那一段（“探针”到“检查”两行注释之间）。"""
    try:
        start = source.index(PROBE_START)
        end = source.index(CHECK_START, start)
    except ValueError:
        raise ValueError(f"{where} 里没有“{PROBE_START}”和“{CHECK_START}”两行注释：见 CONTRIBUTING.md 的“怎样加一道练习”") from None
    return source[start:end]


def kernel_source(probes_file=None) -> str:
    """送进学生内核的源码。probes_file 是本文件（默认）时：本文件 + lib/grading/exercises/ 里每个练习模块的探针一段；
    别的文件（测试用的小课程自带的探针文件）原样使用。"""
    from pathlib import Path

    here = Path(__file__).resolve()
    path = Path(probes_file).resolve() if probes_file else here
    text = path.read_text(encoding="utf-8")
    if path != here:
        return text
    parts = [text]
    from .exercises import PATTERN

    for module in sorted((here.parent / "exercises").glob(PATTERN)):
        parts.append(f"\n# ---- {module.name} ----\n" + probe_section(module.read_text(encoding="utf-8"), module.name))
    return "\n".join(parts)
