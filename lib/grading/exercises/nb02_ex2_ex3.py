"""notebook 02（02_scaling_and_equivariance.ipynb）= 练习 2（缩放、蒙特卡罗）和练习 3（置换等变）：
探针和检查，写在同一个文件里。

约定（见 lib/grading/exercises/__init__.py 和 CONTRIBUTING.md 的“怎样加一道练习”）：
“探针”一段送进学生的内核运行（只用标准库、numpy、torch 和 lib.answer_format，工具来自 lib/grading/probes.py），
只记录数据；“检查”一段在从未运行过学生代码的评分进程里，用同一个 seed 重新生成输入、用可信的参考实现判分。
"""
from __future__ import annotations

import json  # noqa: F401
import math
from typing import Callable  # noqa: F401

import numpy as np

from lib.answer_format import describe  # noqa: F401

# ==== 评分进程才执行的导入（送进内核时跳过这一段：内核里同名的工具由 lib/grading/probes.py 提供）====
from lib import answer_format as fmt  # noqa: F401
from lib.answer_format import FormatError  # noqa: F401
from lib.grading.exercise_checks import (OK, Check, Wrong, _cases, _checked, _close, _error_text,  # noqa: F401
                                         _field, _fmt, _part, _result, _score, _vs, attention, softmax)
from lib.grading.probes import PROBES, _call_cases, _get, _guarded, _rng, _variable_probe, quiet_call  # noqa: F401

# ==== 探针：在学生的内核里运行 ====
# ----------------------------------------------------------------------------
# 练习 2：缩放
# ----------------------------------------------------------------------------


def inputs_variance(seed: int) -> list[tuple]:
    rng = _rng(seed, 201)
    cases = [(64, 1.0), (16, 0.5), (1, 2.0)]
    for _ in range(3):
        cases.append((int(rng.integers(1, 2049)), float(np.round(rng.uniform(0.1, 3.0), 3))))
    return cases


@_guarded
def probe_ex2_variance(namespace, seed):
    fn = _get(namespace, "score_variance")
    return {"cases": _call_cases(fn, inputs_variance(seed))}


@_guarded
def probe_ex2_divisor(namespace, seed):
    fn = _get(namespace, "score_divisor")
    return {"cases": _call_cases(fn, inputs_variance(seed))}


def inputs_monte_carlo(seed: int) -> list[tuple]:
    """(d_k, σ, n_trials, seed)：同一组 (d_k, σ) 用两个不同的种子各跑一次。"""
    rng = _rng(seed, 203)
    s1, s2, s3 = (int(x) for x in rng.integers(0, 2**31, size=3))
    d_k, sigma = int(rng.choice([8, 16, 32])), float(np.round(rng.uniform(0.5, 2.0), 2))
    return [(d_k, sigma, 20000, s1), (d_k, sigma, 20000, s2), (64, 1.0, 20000, s3)]


@_guarded
def probe_ex2_monte_carlo(namespace, seed):
    fn = _get(namespace, "monte_carlo_variance")
    return {"cases": _call_cases(fn, inputs_monte_carlo(seed))}


# ----------------------------------------------------------------------------
# 练习 3：置换等变
# ----------------------------------------------------------------------------


def inputs_equivariance(seed: int) -> list[dict]:
    rng = _rng(seed, 301)
    cases = []
    for causal in (False, True, False, True):
        n, d, dk = int(rng.integers(4, 8)), int(rng.integers(3, 7)), int(rng.integers(2, 6))
        perm = rng.permutation(n)
        while np.all(perm == np.arange(n)) or np.all(perm == np.argsort(perm)):  # 不要恒等、也不要自逆的置换
            perm = rng.permutation(n)
        cases.append({"X": rng.normal(size=(n, d)), "W_q": rng.normal(size=(d, dk)), "W_k": rng.normal(size=(d, dk)),
                      "W_v": rng.normal(size=(d, dk)), "perm": perm, "causal": causal})
    return cases


@_guarded
def probe_ex3_equivariance(namespace, seed):
    fn = _get(namespace, "equivariance_gap")
    cases = inputs_equivariance(seed)
    args = [(c["X"].copy(), c["W_q"].copy(), c["W_k"].copy(), c["W_v"].copy(), c["perm"].copy(), c["causal"])
            for c in cases]
    return {"cases": _call_cases(fn, args)}


PROBES.update({
    "ex2_variance": probe_ex2_variance,
    "ex2_divisor": probe_ex2_divisor,
    "ex2_monte_carlo": probe_ex2_monte_carlo,
    "ex3_equivariance": probe_ex3_equivariance,
})

# ==== 检查：在干净的评分进程里运行 ====
# 典型错误的说法：和公开测试同一份（lib/public_tests/nb02_ex2_ex3.py）
from lib.public_tests.nb02_ex2_ex3 import MISTAKES  # noqa: E402

def self_attention_proj(X, W_q, W_k, W_v, causal=False):
    n = X.shape[0]
    mask = np.tril(np.ones((n, n), dtype=bool)) if causal else None
    return attention(X @ W_q, X @ W_k, X @ W_v, mask)[0]



def _verify_formula(name, formula, typical):
    """typical：[(常见的错误公式, 原因)]。"""

    @_checked
    def verify(data, seed):
        specs = inputs_variance(seed)
        cases = _cases(data, expected=len(specs))
        for (d_k, sigma), case in zip(specs, cases):
            what = f"{name}({d_k}, {sigma})"
            got = fmt.read_number(_result(case, what), what)
            want = formula(d_k, sigma)
            if not _close(got, want):
                why = next((w for f, w in typical if _close(got, f(d_k, sigma))), "")
                raise Wrong(f"{what}：{_vs(got, want)}。{why}")
        return 1.0, OK

    verify.__name__ = f"verify_{name}"
    return verify


@_checked
def verify_ex2_monte_carlo(data, seed):
    """实验结果接近 d_kσ⁴（1 分）+ 用了参数 seed（1 分）。直接返回公式不是实验：0 分。"""
    specs = inputs_monte_carlo(seed)
    cases = _cases(data, expected=len(specs))
    values = []
    for (d_k, sigma, n, s), case in zip(specs, cases):
        what = f"monte_carlo_variance({d_k}, {sigma}, {n}, seed={s})"
        values.append((what, d_k * sigma**4, fmt.read_number(_result(case, what), what)))
    if any(math.isclose(got, theory, rel_tol=1e-12) for _, theory, got in values):
        raise Wrong(f"{MISTAKES['formula']}。")

    def accurate():
        for what, theory, got in values:
            if abs(got - theory) > 0.08 * theory:
                raise Wrong(f"{what} = {got:.4g}，离理论值 d_k·σ⁴ = {theory:.4g} 太远（超过 8%）。"
                            "是 q·k 的方差吗？每一维的标准差是 σ 吗（方差是 σ²）？")

    def uses_seed():
        if values[0][2] == values[1][2]:
            raise Wrong(f"同样的 d_k、σ {MISTAKES['seed']}。")

    return _score([_part("结果接近 d_kσ⁴", 1, accurate), _part("用了参数 seed", 1, uses_seed)])


@_checked
def verify_ex3_equivariance(data, seed):
    """不加掩码时差为 0（3 分）+ 加因果掩码时差等于参考值（2 分）。
    “总是返回 0”在不加掩码时也是 0：所以前一部分只有在加掩码时返回的不全是 0（函数真的在算）时才给分；
    加掩码时出错（例如自己写的注意力不支持掩码）不算“返回 0”。"""
    specs = inputs_equivariance(seed)
    cases = _cases(data, expected=len(specs))

    def zero(value, spec) -> bool:
        """差“是 0”：不超过输出量级的 1e-4（float32 算出的 0 是 1e-7 左右，不是恰好 0）。"""
        scale = float(np.max(np.abs(self_attention_proj(spec["X"], spec["W_q"], spec["W_k"], spec["W_v"]))))
        return fmt.within(value, 0.0, max(scale, 1.0))

    got = []
    for i, (spec, case) in enumerate(zip(specs, cases), 1):
        label = f"第 {i} 组（{'因果掩码' if spec['causal'] else '无掩码'}）"
        try:
            got.append((label, spec, fmt.read_number(_result(case, label), f"{label}：equivariance_gap")))
        except (Wrong, FormatError) as err:
            got.append((label, spec, err))

    def unmasked():
        for label, spec, value in got:
            if isinstance(value, Exception):
                if not spec["causal"]:
                    raise value
            elif not spec["causal"] and not zero(value, spec):
                raise Wrong(f"{label}：不加掩码时 SA(PX) 和 P·SA(X) 应该相等（差为 0），你算出的差是 {value:.3g}。"
                            "检查 PX 和 P·SA(X) 是否用了同一个置换（X[perm]、SA(X)[perm]）。")
        if all(not isinstance(value, Exception) and zero(value, spec) for _, spec, value in got if spec["causal"]):
            raise Wrong("加因果掩码时也返回 0：函数没有真的在比较（或者 causal 没有传给 sa_numpy），"
                        "所以不加掩码时的 0 也不能算数。")

    def causal():
        for label, spec, value in got:
            if not spec["causal"]:
                continue
            if isinstance(value, Exception):
                raise value
            sa = lambda X_: self_attention_proj(X_, spec["W_q"], spec["W_k"], spec["W_v"], True)  # noqa: E731
            diff = sa(spec["X"][spec["perm"]]) - sa(spec["X"])[spec["perm"]]
            want = float(np.max(np.abs(diff)))
            if not _close(value, want):
                hint = ""
                inverse = np.argsort(spec["perm"])
                diff_inv = sa(spec["X"][inverse]) - sa(spec["X"])[inverse]
                if zero(value, spec):
                    hint = f"{MISTAKES['no_causal']}。"
                elif _close(value, float(np.mean(np.abs(diff)))):
                    hint = "这是平均值：要的是最大的差 max|SA(PX) − P·SA(X)|。"
                elif _close(value, float(np.max(np.abs(diff_inv)))):
                    hint = ("置换的方向反了：题目的 PX 是 X[perm]（第 i 行是 X 的第 perm[i] 行，P = np.eye(n)[perm]）；"
                            "np.eye(n)[:, perm] @ X 是 X[np.argsort(perm)]，是反方向的置换。")
                mine, ref = fmt.shown(value, want)
                raise Wrong(f"{label}：差应为 {ref}（加因果掩码后等变性不成立），你算出 {mine}。{hint}")

    return _score([_part("不加掩码：差为 0", 3, unmasked), _part("加因果掩码：差等于参考值", 2, causal)])


NOTEBOOK = "02_scaling_and_equivariance"
EXERCISES = (2, 3)  # 讲义 §15 的练习编号：grade_id 是 ex2_*、ex3_*；模块名 nb02_ex2_ex3 = notebook 02 + 这些练习
CHECKS = [
    Check("ex2_variance", NOTEBOOK, 2, _verify_formula(
        "score_variance", lambda d, s: d * s**4,
        [(lambda d, s: d * s**2, f"{MISTAKES['sigma_squared']}：每一项 q_j k_j 的方差是 E[q_j²]E[k_j²] = σ⁴。")])),
    Check("ex2_divisor", NOTEBOOK, 2, _verify_formula(
        "score_divisor", lambda d, s: s**2 * math.sqrt(d),
        [(lambda d, s: math.sqrt(d), f"{MISTAKES['forgot_sigma']}：要除以打分的标准差 √(d_k σ⁴) = σ²√d_k。"),
         (lambda d, s: s * math.sqrt(d), "是 σ²√d_k，不是 σ√d_k（方差是 d_kσ⁴）。"),
         (lambda d, s: d * s**4, f"{MISTAKES['variance_not_std']}。")])),
    Check("ex2_monte_carlo", NOTEBOOK, 2, verify_ex2_monte_carlo),
    Check("ex3_equivariance", NOTEBOOK, 5, verify_ex3_equivariance),
]
