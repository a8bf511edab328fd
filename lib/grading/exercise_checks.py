"""练习（assignment `exercises`）的检查引擎：收集每个练习模块的检查，提供判分的工具。引擎不知道任何一道题。

每个练习 notebook 的探针和检查写在一起，在 ``lib/grading/exercises/nbNN_exK.py`` 里（notebook NN = 练习 K；怎样加一道练习见 CONTRIBUTING.md）。
每个自动评分的测试单元格（nbgrader 的 grade_id）对应一个 ``Check``：

- ``probes.PROBES[grade_id](namespace, seed)`` 在学生的内核里调用学生的函数、读学生的变量，
  只记录纯数据（见 lib/grading/probes.py）；
- ``Check.verify(data, seed)`` 在干净的进程里用同一个 seed 重新生成输入，用可信的参考实现
  （本文件里的 NumPy 函数；评分进程不导入 torch）算出答案并比较，返回 (得分比例, 中文说明)。
  数据缺键、NaN、探针记录的错误，一律算答错并说明原因，从不抛出异常。

**格式**：返回值先经过 ``lib.answer_format`` 的规则（公开测试和自查用的是同一套），格式不对的部分得 0 分，
说明和公开测试里的一字不差。

**分部分给分**：一个单元格里有几个互相独立的部分时（例如二维的情形和有批维度的情形），每部分有自己的分数，
说明里逐条写出哪些部分对了（✓）、哪些不对（✗）以及最可能的原因。部分的划分和分值写在每个 verify 里。

**确定性**：seed 是这个 grade_id 自己的种子（没有学期密钥时固定为 ``DEFAULT_SEED``，有时由密钥派生，见
hidden_inputs.py），输入只取决于 seed 和题目，所以同一份文件的分数只取决于文件本身。

``run_check(grade_id, namespace, seed=None)`` 在一个进程里跑探针 + 检查：全对时不返回任何东西，全错时抛出
CheckFailed(说明)（一种 AssertionError，在 Jupyter 里只显示说明），部分正确时打印说明并返回得分（nbgrader 把测试单元格最后一个表达式的数值当作部分分）。
source/ 里每个测试单元格的隐藏测试就调用它，所以普通的 nbgrader 和评分流水线（lib/grading 的其余部分）
用的是同一套检查、同样的部分分。
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from lib import answer_format as fmt
from lib.answer_format import CheckFailed, FormatError

from . import probes

DEFAULT_SEED = 0
OK = "正确。"


@dataclass(frozen=True)
class Check:
    grade_id: str  # nbgrader 测试单元格的 grade_id
    notebook: str  # 例如 "01_attention_by_hand"
    points: float  # 和单元格的 nbgrader points 相同
    verify: Callable[[dict, int], tuple[float, str]]


class Wrong(Exception):
    """verify 内部用：答错了，附带给学生看的说明。"""


# ----------------------------------------------------------------------------
# 读取探针数据的工具：任何不合规的数据都变成 Wrong 或 FormatError
# ----------------------------------------------------------------------------


def _error_text(error) -> str:
    text = str(error)
    if text.startswith("LeftoverRaise"):  # 探针：函数里有学生的代码，却在 return 之前执行到了 raise
        return fmt.LEFTOVER_RAISE
    if text.startswith("NotImplementedError"):
        return "还没有作答（仍是 raise NotImplementedError()）"
    return f"你的代码出错了：{text}"


def _field(data, key):
    if not isinstance(data, dict):
        raise Wrong(f"记录的数据格式不对（应是 dict，得到 {type(data).__name__}）")
    if "error" in data:
        raise Wrong(_error_text(data["error"]))
    if key not in data:
        raise Wrong(f"记录的数据里缺少 {key!r}")
    return data[key]


def _cases(data, key="cases", expected=None) -> list:
    cases = _field(data, key)
    if not isinstance(cases, list):
        raise Wrong(f"{key!r} 应是列表")
    if expected is not None and len(cases) != expected:
        raise Wrong(f"应有 {expected} 组结果，记录到 {len(cases)} 组")
    return cases


def _result(case, label: str):
    """一组调用的结果（answer_format.describe 的描述）。"""
    if not isinstance(case, dict):
        raise Wrong(f"{label}：记录的数据格式不对")
    if "error" in case:
        raise Wrong(f"{label}：{_error_text(case['error'])}")
    if "result" not in case:
        raise Wrong(f"{label}：没有记录到结果")
    return case["result"]


def _close(a, b, kind: str = "computed") -> bool:
    """容差的规则只有一处：lib.answer_format.close（公开测试和自查用的也是它）。"""
    return fmt.close(a, b, kind)


def _vs(got, want, kind: str = "computed") -> str:
    """“得到 …，应为 …”：位数多到两者看得出不同。"""
    a, b = fmt.shown(got, want, kind)
    return f"得到 {a}，应为 {b}"


def _fmt(x) -> str:
    return fmt._no_trailing_dot(np.array2string(np.asarray(x, dtype=float), precision=4, suppress_small=True,
                                                separator=", "))


def _checked(verify):
    """verify 从不抛出异常：Wrong / FormatError → (0, 说明)；意外错误 → (0, 说明)。"""

    def wrapper(data, seed) -> tuple[float, str]:
        try:
            return verify(data, int(seed))
        except (Wrong, FormatError) as err:
            return 0.0, str(err)
        except Exception as err:  # noqa: BLE001  数据再怪也不让评分进程崩溃
            return 0.0, f"记录的数据无法检查（{type(err).__name__}: {err}）"

    wrapper.__name__ = verify.__name__
    return wrapper


def _part(label: str, points: float, check: Callable[[], None]) -> tuple[str, float, str | None]:
    """评一个部分：check() 不抛出就是对的；抛出 Wrong / FormatError 时记下原因。"""
    try:
        check()
        return label, points, None
    except (Wrong, FormatError) as err:
        return label, points, str(err)


def _score(parts: list) -> tuple[float, str]:
    """各部分 → (得分比例, 说明)。全对：“正确。”；全错且原因相同：只写原因；否则逐条列出 ✓ / ✗。"""
    total = sum(p for _, p, _ in parts)
    got = sum(p for _, p, why in parts if why is None)
    if got == total:
        return 1.0, OK
    reasons = {why for _, _, why in parts if why is not None}
    if got == 0 and len(reasons) == 1:
        return 0.0, reasons.pop()
    lines = [f"✓ {label}（{p:g} 分）" if why is None else f"✗ {label}（{p:g} 分）：{why.rstrip('。；')}"
             for label, p, why in parts]
    head = f"部分正确，{got:g} / {total:g} 分" if got else f"0 / {total:g} 分"
    return got / total, head + "。" + "；".join(lines) + "。"


# ----------------------------------------------------------------------------
# 可信的参考实现（NumPy，float64）
# ----------------------------------------------------------------------------


def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)


def attention(Q, K, V, mask=None):
    """softmax(Q K^T / √d_k) V，mask 为布尔（True = 可以看），被挡住的位置权重恰好为 0。"""
    scores = np.asarray(Q, float) @ np.swapaxes(np.asarray(K, float), -1, -2) / math.sqrt(np.shape(Q)[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores)
    return weights @ np.asarray(V, float), weights


# ----------------------------------------------------------------------------
# grade_id → Check：从 lib/grading/exercises/ 的每个练习模块收集（本文件不知道任何一道题）
# ----------------------------------------------------------------------------

from .exercises import collect_checks  # noqa: E402  放在最后：练习模块从本文件导入上面的工具

CHECKS: dict[str, Check] = collect_checks()

assert set(CHECKS) == set(probes.PROBES), "每个检查都要有一个探针"


def grade(grade_id: str, namespace: dict, seed: int | None = None) -> tuple[float, str]:
    """在同一个进程里跑探针 + 检查，返回 (得分比例, 说明)。数据先经过一次 JSON 往返，和评分流水线一样。"""
    seed = DEFAULT_SEED if seed is None else int(seed)
    data = probes.PROBES[grade_id](namespace, seed)
    data = json.loads(json.dumps(data))
    return CHECKS[grade_id].verify(data, seed)


def run_check(grade_id: str, namespace: dict, seed: int | None = None) -> float | None:
    """隐藏测试调用的入口：全对时返回 None（nbgrader 给满分）；全错时抛出 CheckFailed(中文说明)；
    部分正确时打印说明、返回得分（单元格最后一个表达式的数值，nbgrader 把它当作部分分）。"""
    if grade_id not in CHECKS:
        raise KeyError(f"未知的 grade_id {grade_id!r}")
    fraction, message = grade(grade_id, namespace, seed)
    if fraction >= 1.0:
        return None
    if fraction <= 0.0:  # CheckFailed：Jupyter 里只显示 “✗ 说明”，不显示 lib/ 里的调用栈
        raise CheckFailed(f"[{grade_id}] {message}")
    print(f"[{grade_id}] {message}")
    return round(CHECKS[grade_id].points * fraction, 4)
