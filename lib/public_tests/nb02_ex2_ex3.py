"""notebook 02（02_scaling_and_equivariance.ipynb）= 练习 2（缩放、蒙特卡罗实验）和练习 3（置换等变）：公开测试。"""
from __future__ import annotations

import math

import numpy as np

from lib.answer_format import call, close, number, within
from lib.public_tests import expect, need

# 典型错误：公开测试和评分说明（lib/grading/exercises/nb02_ex2_ex3.py 的检查一段）用同一句话
MISTAKES = {
    "sigma_squared": "这是 d_k·σ²",
    "forgot_sigma": "忘了 σ",
    "variance_not_std": "这是方差：要除以标准差（方差的平方根）",
    "formula": "结果恰好等于公式 d_k·σ⁴：要真的抽随机数做实验，返回样本方差",
    "seed": "换了 seed，结果却一模一样：要用参数 seed 建随机数生成器 np.random.default_rng(seed)",
    "no_causal": "加因果掩码后等变性不成立，差应明显大于 0（causal 传给 sa_numpy 了吗？）",
}


def test_variance(namespace):
    fn = need(namespace, "score_variance")
    v = number(call(fn, 64, 1.0), "score_variance(64, 1.0)")
    expect(close(v, 64.0), f"σ = 1 时就是讲义 §3.1 的情形：Var(q·k) = d_k = 64，得到 {v}")
    v = number(call(fn, 1, 2.0), "score_variance(1, 2.0)")
    expect(not close(v, 1 * 2.0**2), f"d_k = 1、σ = 2 时得到 {v:g}：{MISTAKES['sigma_squared']}，"
                                     "不是 q_1·k_1 的方差（两个独立变量乘积的方差是多少？）")


def test_divisor(namespace):
    fn = need(namespace, "score_divisor")
    s = number(call(fn, 4, 3.0), "score_divisor(4, 3.0)")
    variance = number(call(need(namespace, "score_variance"), 4, 3.0), "score_variance(4, 3.0)")
    expect(not close(s, math.sqrt(4)), f"score_divisor(4, 3.0) = {s:g} = √d_k：{MISTAKES['forgot_sigma']}（σ = 3 时打分的方差变大了）")
    expect(not close(s, variance), f"score_divisor(4, 3.0) 等于你的 score_variance(4, 3.0)：{MISTAKES['variance_not_std']}")
    s64 = number(call(fn, 64, 1.0), "score_divisor(64, 1.0)")
    expect(close(s64, 8.0), f"σ = 1 时应除以 √d_k = 8，得到 {s64}")
    expect(close(s**2, variance), "除数的平方应等于打分的方差（你的 score_variance）：除以标准差，方差才变成 1")


def test_monte_carlo(namespace):
    fn = need(namespace, "monte_carlo_variance")
    v = number(call(fn, 16, 0.5, 20000, 1), "monte_carlo_variance(16, 0.5, 20000, 1)")
    expect(v != 16 * 0.5**4, MISTAKES["formula"])
    expect(abs(v - 16 * 0.5**4) < 0.08 * 16 * 0.5**4, f"d_k = 16、σ = 0.5 时样本方差应接近 d_k σ⁴ = 1.0，得到 {v:.4f}")
    v2 = number(call(fn, 16, 0.5, 20000, 2), "monte_carlo_variance(16, 0.5, 20000, 2)")
    expect(v2 != v, MISTAKES["seed"])


def test_equivariance(namespace):
    fn, sa_numpy = need(namespace, "equivariance_gap"), need(namespace, "sa_numpy")
    rng = np.random.default_rng(3)
    X, W_q, W_k, W_v = (rng.normal(size=(5, 4)), rng.normal(size=(4, 3)), rng.normal(size=(4, 3)),
                        rng.normal(size=(4, 3)))
    perm = np.array([2, 0, 4, 1, 3])
    args = lambda: (X.copy(), W_q.copy(), W_k.copy(), W_v.copy(), perm.copy())  # noqa: E731
    gap = number(call(fn, *args(), what="equivariance_gap(..., causal=False)"), "equivariance_gap(..., causal=False)")
    scale = np.abs(sa_numpy(X, W_q, W_k, W_v)).max()  # “差为 0”：不超过输出量级的 1e-4（float32 也算对）
    expect(within(gap, 0.0, max(scale, 1.0)),
           f"不加掩码时 SA(PX) 应等于 P·SA(X)，你算出的差是 {gap:.3g}（置换用对了吗？）")
    gap_causal = number(call(fn, *args(), True, what="equivariance_gap(..., causal=True)"),
                        "equivariance_gap(..., causal=True)")
    expect(gap_causal > 1e-3, f"{MISTAKES['no_causal']}：你算出 {gap_causal:.3g}")


TESTS = {
    "ex2_variance": test_variance,
    "ex2_divisor": test_divisor,
    "ex2_monte_carlo": test_monte_carlo,
    "ex3_equivariance": test_equivariance,
}
