"""notebook 03（03_positions_and_rope.ipynb）= 练习 5（RoPE 的手算、rotate_2d、rope）：公开测试。

手算的五个数不和参考值比较（那会透露答案）：检查格式、自洽（旋转不改变长度、dot_a = q̃·k̃）和典型错误（转反了方向、
查询和键转了同样的角度）。(b)、(c) 的点积只查格式：它们和 (a) 的关系正是题目要你自己发现的。
"""
from __future__ import annotations

import math

import numpy as np

from lib.answer_format import array, call, close, number, within
from lib.public_tests import expect, need

# 典型错误：公开测试和评分说明（lib/grading/exercises/nb03_ex5.py 的检查一段）用同一句话
MISTAKES = {
    "clockwise": "转反了方向：R(φ) 是逆时针旋转",
    "same_angle": "位置 m = 2 要转 mθ",
}


def test_numbers(namespace):
    q_t = array(need(namespace, "q_tilde_a"), "q_tilde_a", (2,), returned=False)
    k_t = array(need(namespace, "k_tilde_a"), "k_tilde_a", (2,), returned=False)
    dot_a = number(need(namespace, "dot_a"), "dot_a", returned=False)
    for name in ("dot_b", "dot_c"):
        number(need(namespace, name), name, returned=False)
    for name, v in (("q_tilde_a", q_t), ("k_tilde_a", k_t)):
        expect(close(np.linalg.norm(v), 1.0, "hand_relation"), f"旋转不改变长度：|{name}| 应为 1，得到 {np.linalg.norm(v):.3f}")
        # (1, 0) 逆时针转 0 到 π 之间的角度，第二个分量是正的
        expect(v[1] > 0, f"{name} 的第二个分量是负的：{MISTAKES['clockwise']}（这里的角度在 0 和 π 之间）")
    expect(not close(q_t, k_t, "hand_relation"),
           f"q_tilde_a 和 k_tilde_a 转了同样的角度：{MISTAKES['same_angle']}，位置 n = 1 的键转 nθ")
    expect(close(float(q_t @ k_t), dot_a, "hand_relation"), "dot_a 应等于 q_tilde_a · k_tilde_a（你自己的两个向量的点积）")


def test_rotate_2d(namespace):
    fn = need(namespace, "rotate_2d")
    r = array(call(fn, np.array([1.0, 0.0]), math.pi / 2), "rotate_2d((1, 0), π/2)", (2,))
    expect(not close(r, [0.0, -1.0]), f"(1, 0) 逆时针转 90° 应得到 (0, 1)，得到 {r}：{MISTAKES['clockwise']}")
    expect(close(r, [0.0, 1.0]), f"(1, 0) 逆时针转 90° 应得到 (0, 1)，得到 {r}")
    r = array(call(fn, np.array([3.0, 4.0]), 1.0), "rotate_2d((3, 4), 1.0)", (2,))
    expect(close(np.linalg.norm(r), 5.0), f"旋转不改变长度：|(3, 4)| = 5，得到 {np.linalg.norm(r):.6g}")


def test_rope(namespace):
    fn = need(namespace, "rope")
    x = np.array([[1.0, 0.0, 0.0, 2.0]])
    y = array(call(fn, x.copy(), np.array([0])), "rope(x, [0])", (1, 4))
    expect(close(y, x), "位置 0 不旋转：输出应等于输入")
    y = array(call(fn, np.array([[1.0, 0.0, 0.0, 0.0]]), np.array([2])), "rope(x, [2])", (1, 4))
    expect(close(y, [[math.cos(2), 0.0, math.sin(2), 0.0]]),
           f"d = 4 时第 0 维和第 2 维是第一个平面（θ_0 = 1）：位置 2 应转 2 弧度，得到 {y}")
    for base in (10000.0, 100.0):
        theta_1 = base ** (-2 * 1 / 8)  # θ_i = base^(-2i/d)，i = 1、d = 8；e_1 只有第 1 维是 1，它和第 5 维组成第 1 个平面
        y = array(call(fn, np.eye(8)[1:2], np.array([1]), base), f"rope(e_1, [1], base={base:g})", (1, 8))
        expect(close(y[0, [1, 5]], [math.cos(theta_1), math.sin(theta_1)]),
               f"d = 8、base = {base:g}：第 1 个平面（第 1 维和第 5 维）的角速度应是 θ_1 = base^(-2·1/8) = {theta_1:.4f}，"
               f"位置 1 转 θ_1 弧度；得到第 1、5 维 {y[0, [1, 5]]}（指数是 -2i/d 吗？用了参数 base 吗？）")
    rng = np.random.default_rng(5)
    q, k = rng.normal(size=(1, 8)), rng.normal(size=(1, 8))
    rot = lambda v, p: array(call(fn, v.copy(), np.array([p])), f"rope(v, [{p}])", (1, 8))  # noqa: E731
    s1, s2 = float(rot(q, 7)[0] @ rot(k, 4)[0]), float(rot(q, 30)[0] @ rot(k, 27)[0])
    # 打分的误差以 |q||k| 为尺度（和评分时一样）：float32 的舍入误差不算“不同”
    expect(within(s1, s2, np.linalg.norm(q) * np.linalg.norm(k)),
           f"m − n 相同（都是 3）时打分应该相同：{s1:.8f} 和 {s2:.8f}")


TESTS = {"ex5_numbers": test_numbers, "ex5_rotate_2d": test_rotate_2d, "ex5_rope": test_rope}
