"""notebook 03（03_positions_and_rope.ipynb）= 练习 5（RoPE）：
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
# 练习 5：RoPE
# ----------------------------------------------------------------------------


def inputs_rotate_2d(seed: int) -> list[tuple]:
    rng = _rng(seed, 501)
    cases = [(np.array([1.0, 0.0]), math.pi / 6), (np.array([3.0, 4.0]), 2.5)]
    for _ in range(4):
        cases.append((rng.normal(size=2), float(rng.uniform(-2 * math.pi, 2 * math.pi))))
    return cases


@_guarded
def probe_ex5_rotate_2d(namespace, seed):
    fn = _get(namespace, "rotate_2d")
    return {"cases": _call_cases(fn, [(x.copy(), a) for x, a in inputs_rotate_2d(seed)])}


def inputs_rope(seed: int) -> dict:
    """与参考实现比较的输入（两组 base = 10000，两组别的 base），以及检查“打分只依赖相对位置”的位置对：
    前四对 m − n 相同，最后一对的 m − n 不同（打分应该不同：真的转了）。"""
    rng = _rng(seed, 502)
    cases = []
    for base in (10000.0, 10000.0, 100.0, 500000.0):
        T, d = int(rng.integers(2, 7)), 2 * int(rng.integers(2, 9))  # d ≥ 4：d = 2 时 θ_0 = 1，和 base 无关
        cases.append({"x": rng.normal(size=(T, d)), "positions": rng.integers(1, 300, size=T), "base": base})
    d = 2 * int(rng.integers(2, 9))
    q, k = rng.normal(size=d), rng.normal(size=d)
    offset = int(rng.integers(1, 7)) * int(rng.choice([-1, 1]))
    starts = rng.integers(0, 500, size=4)
    pairs = [(int(s) + offset + 10, int(s) + 10) for s in starts]  # m - n = offset
    pairs.append((pairs[0][0] + 3, pairs[0][1]))  # m - n = offset + 3
    return {"cases": cases, "q": q, "k": k, "pairs": pairs}


@_guarded
def probe_ex5_rope(namespace, seed):
    fn = _get(namespace, "rope")
    spec = inputs_rope(seed)
    args = [(c["x"].copy(), c["positions"].copy(), c["base"]) for c in spec["cases"]]
    # 相对位置：查询在 m、键在 n，分别旋转（每次只给一个位置）
    for m, n in spec["pairs"]:
        args.append((spec["q"][None, :].copy(), np.array([m]), 10000.0))
        args.append((spec["k"][None, :].copy(), np.array([n]), 10000.0))
    return {"cases": _call_cases(fn, args)}


EX5_NAMES = ("q_tilde_a", "k_tilde_a", "dot_a", "dot_b", "dot_c")


@_guarded
def probe_ex5_numbers(namespace, seed):
    out = {}
    for name in EX5_NAMES:
        try:
            out[name] = describe(_get(namespace, name))
        except Exception as err:  # noqa: BLE001
            out[name] = _error(err)
    return out


PROBES.update({
    "ex5_numbers": probe_ex5_numbers,
    "ex5_rotate_2d": probe_ex5_rotate_2d,
    "ex5_rope": probe_ex5_rope,
})

# ==== 检查：在干净的评分进程里运行 ====
# 典型错误的说法：和公开测试同一份（lib/public_tests/nb03_ex5.py）
from lib.public_tests.nb03_ex5 import MISTAKES  # noqa: E402

def rotate_2d(x, angle):
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s], [s, c]]) @ np.asarray(x, float)


def rope(x, positions, base=10000.0, exponent=None):
    """RoPE 的“前一半和后一半配对”写法（GPT-NeoX、LLaMA；lib.transformer.apply_rope 的 NumPy 版）。

    exponent：θ_i = base^exponent_i，默认 −2i/d（只有给错误答案找原因时才换成别的）。"""
    x = np.asarray(x, float)
    d = x.shape[-1]
    theta = base ** (-np.arange(0, d, 2) / d if exponent is None else exponent)  # (d/2,)
    angles = np.asarray(positions, float)[:, None] * theta  # (T, d/2)
    cos, sin = np.cos(angles), np.sin(angles)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)



# 练习 5 的答案
EX5 = {
    "q_tilde_a": rotate_2d([1.0, 0.0], 2 * math.pi / 6),
    "k_tilde_a": rotate_2d([1.0, 0.0], 1 * math.pi / 6),
    "dot_a": math.cos(math.pi / 6),
    "dot_b": math.cos(math.pi / 6),
    "dot_c": math.cos(-math.pi / 6),
}



EX5_HINTS = {
    "q_tilde_a": [(rotate_2d([1.0, 0.0], -math.pi / 3), f"{MISTAKES['clockwise']}。"),
                  (rotate_2d([1.0, 0.0], math.pi / 6), f"{MISTAKES['same_angle']} = π/3。")],
    "k_tilde_a": [(rotate_2d([1.0, 0.0], -math.pi / 6), f"{MISTAKES['clockwise']}。")],
    "dot_c": [(-math.cos(math.pi / 6), "点积是 cos((m − n)θ)，cos 是偶函数：cos(−π/6) = cos(π/6)。")],
}


@_checked
def verify_ex5_numbers(data, seed):
    """五个数各 0.6 分。"""

    def value(name, want):
        want, desc = np.asarray(want, dtype=float), _field(data, name)
        if isinstance(desc, dict) and "error" in desc:
            raise Wrong(_error_text(desc["error"]))
        if want.shape:
            got = fmt.read_array(desc, name, want.shape, returned=False)
        else:
            got = np.asarray(fmt.read_number(desc, name, returned=False))
        if not _close(got, want, "hand"):
            why = next((w for v, w in EX5_HINTS.get(name, []) if _close(got, v, "hand")),
                       "旋转矩阵是 R(φ) = [[cos φ, −sin φ], [sin φ, cos φ]]，位置 m 转 mθ。")
            raise Wrong(f"得到 {_fmt(got)}。{why}")

    if isinstance(data, dict) and "error" in data:
        raise Wrong(_error_text(data["error"]))
    return _score([_part(name, 0.6, lambda n=name, w=want: value(n, w)) for name, want in EX5.items()])


@_checked
def verify_ex5_rotate_2d(data, seed):
    specs = inputs_rotate_2d(seed)
    cases = _cases(data, expected=len(specs))
    for (x, angle), case in zip(specs, cases):
        what = f"rotate_2d({_fmt(x)}, {angle:.4f})"
        got = fmt.read_array(_result(case, what), what, (2,))
        want = rotate_2d(x, angle)
        if not _close(got, want):
            hint = f"（{MISTAKES['clockwise']}）" if _close(got, rotate_2d(x, -angle)) else ""
            raise Wrong(f"{what}：{_vs(got, want)}{hint}。")
    return 1.0, OK


@_checked
def verify_ex5_rope(data, seed):
    """打分只依赖 m − n（2 分）+ 配对方式（2 分）+ base = 10000 时和参考一致（1 分）+ 用参数 base（1 分）。"""
    spec = inputs_rope(seed)
    n_ref = len(spec["cases"])
    cases = _cases(data, expected=n_ref + 2 * len(spec["pairs"]))
    outputs = []  # (case, 学生的输出或错误)
    for i, (c, case) in enumerate(zip(spec["cases"], cases[:n_ref]), 1):
        what = f"rope（T = {c['x'].shape[0]}、d = {c['x'].shape[1]}、base = {c['base']:g}）"
        try:
            outputs.append((what, c, fmt.read_array(_result(case, what), what, c["x"].shape)))
        except (Wrong, FormatError) as err:
            outputs.append((what, c, err))

    def pairing():
        for what, c, y in outputs:
            if isinstance(y, Exception):
                raise y
            x, half = c["x"], c["x"].shape[1] // 2
            plane = lambda a: np.hypot(a[:, :half], a[:, half:])  # noqa: E731  第 i 个平面：第 i 维和第 i + d/2 维
            if _close(y, x):
                raise Wrong(f"{what}：位置不为 0，向量却没有转动。")
            if not _close(plane(y), plane(x)):
                raise Wrong(f"{what}：第 i 维和第 i + d/2 维组成的平面里长度变了：配对方式不是“前一半和后一半”"
                            "（相邻两维配对是原论文的写法，本题按 lib.transformer.apply_rope 的写法）。")

    def matches(bases):
        for what, c, y in outputs:
            if c["base"] not in bases:
                continue
            if isinstance(y, Exception):
                raise y
            if not _close(y, rope(c["x"], c["positions"], c["base"])):
                d = c["x"].shape[1]
                hint = ""
                if _close(y, rope(c["x"], c["positions"], c["base"], -np.arange(d // 2) / d)):
                    hint = "看起来用了 θ_i = base^(−i/d)：指数应是 −2i/d。"
                elif _close(y, rope(c["x"], c["positions"])):
                    hint = "这一组的 base 不是 10000，结果却和 base = 10000 一样：函数要用参数 base。"
                elif _close(y, rope(c["x"], -np.asarray(c["positions"]), c["base"])):
                    hint = "转反了方向：位置 p 逆时针转 pθ_i。"
                raise Wrong(f"{what}：和参考的 RoPE（前一半与后一半配对，θ_i = base^(−2i/d)）不一致。{hint}")

    def relative():
        d = spec["q"].shape[0]
        scores = []
        for j, (m, n) in enumerate(spec["pairs"]):
            q_rot = fmt.read_array(_result(cases[n_ref + 2 * j], f"q 在位置 {m}"), f"q 在位置 {m}", (1, d))[0]
            k_rot = fmt.read_array(_result(cases[n_ref + 2 * j + 1], f"k 在位置 {n}"), f"k 在位置 {n}", (1, d))[0]
            if not _close(np.linalg.norm(q_rot), np.linalg.norm(spec["q"])):
                raise Wrong(f"旋转改变了向量的长度（位置 {m}）：RoPE 应保持长度不变。")
            scores.append(float(q_rot @ k_rot))
        # 打分的误差以 |q||k| 为尺度：float32 的误差和 |q||k| 成正比，和打分本身是否接近 0 无关
        norms = float(np.linalg.norm(spec["q"]) * np.linalg.norm(spec["k"]))
        same, other = scores[:-1], scores[-1]
        if not all(fmt.within(c, same[0], norms) for c in same):
            text = np.array2string(np.array(scores[:-1]), precision=8, separator=", ")
            raise Wrong(f"m − n 相同时打分应该相同，得到 {text}。")
        if fmt.within(other, same[0], norms):
            raise Wrong("m − n 不同时打分也一样：位置没有起作用（向量真的转了吗？）。")

    return _score([_part("打分只依赖 m − n", 2, relative),
                   _part("配对：第 i 维和第 i + d/2 维在同一个平面里旋转", 2, pairing),
                   _part("base = 10000 时和参考一致（θ_i = base^(−2i/d)）", 1, lambda: matches({10000.0})),
                   _part("用了参数 base（base ≠ 10000 的几组）", 1,
                         lambda: matches({c["base"] for c in spec["cases"]} - {10000.0}))])


NOTEBOOK = "03_positions_and_rope"
EXERCISES = (5,)  # 讲义 §15 的练习编号：grade_id 是 ex5_*；模块名 nb03_ex5 = notebook 03 + 这些练习
CHECKS = [
    Check("ex5_numbers", NOTEBOOK, 3, verify_ex5_numbers),
    Check("ex5_rotate_2d", NOTEBOOK, 3, verify_ex5_rotate_2d),
    Check("ex5_rope", NOTEBOOK, 6, verify_ex5_rope),
]
