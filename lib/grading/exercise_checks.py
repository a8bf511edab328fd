"""练习（assignment `exercises`）每个自动评分测试单元格的检查：唯一的真相来源。

每个自动评分的测试单元格（nbgrader 的 grade_id）对应一个 ``Check``：

- ``probes.PROBES[grade_id](namespace, seed)`` 在学生的内核里调用学生的函数、读学生的变量，
  只记录纯数据（见 lib/grading/probes.py）；
- ``Check.verify(data, seed)`` 在干净的进程里用同一个 seed 重新生成输入，用可信的参考实现
  （本文件里的 NumPy 函数；评分进程不导入 torch）算出答案并比较，返回 (得分比例, 中文说明)。
  数据缺键、形状不对、NaN、探针记录的错误，一律算答错并说明原因，从不抛出异常。

``run_check(grade_id, namespace, seed=None)`` 在一个进程里跑探针 + 检查，答错时抛出
AssertionError(说明)。source/ 里每个测试单元格的隐藏测试就调用它，所以普通的 nbgrader
和评分流水线（lib/grading 的其余部分）用的是同一套检查。seed=None 时用固定的 DEFAULT_SEED。
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

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
# 读取探针数据的工具：任何不合规的数据都变成 Wrong
# ----------------------------------------------------------------------------


def _field(data, key):
    if not isinstance(data, dict):
        raise Wrong(f"记录的数据格式不对（应是 dict，得到 {type(data).__name__}）")
    if "error" in data:
        raise Wrong(f"运行你的代码时出错：{data['error']}")
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
    if not isinstance(case, dict):
        raise Wrong(f"{label}：记录的数据格式不对")
    if "error" in case:
        raise Wrong(f"{label}：你的代码出错了：{case['error']}")
    if "result" not in case:
        raise Wrong(f"{label}：没有记录到结果")
    return case["result"]


def _to_array(obj, label: str, shape=None) -> np.ndarray:
    if isinstance(obj, dict) and "error" in obj:
        raise Wrong(f"{label}：{obj['error']}")
    if not isinstance(obj, dict) or "values" not in obj or "shape" not in obj:
        raise Wrong(f"{label}：记录的数组格式不对")
    try:
        a = np.array(obj["values"], dtype=float)
    except (TypeError, ValueError) as err:
        raise Wrong(f"{label}：不是数值数组（{err}）") from None
    if list(a.shape) != list(obj["shape"]):
        raise Wrong(f"{label}：记录的形状 {obj['shape']} 和数据 {list(a.shape)} 不一致")
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise Wrong(f"{label}：形状应是 {tuple(shape)}，得到 {tuple(a.shape)}")
    if not np.all(np.isfinite(a)):
        raise Wrong(f"{label}：含有 NaN 或无穷大")
    return a


def _to_number(obj, label: str) -> float:
    if isinstance(obj, bool) or not isinstance(obj, (int, float)):
        raise Wrong(f"{label}：应是一个数，得到 {type(obj).__name__}")
    x = float(obj)
    if not math.isfinite(x):
        raise Wrong(f"{label}：得到 {x}")
    return x


def _close(a, b, rtol=1e-6, atol=1e-8) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))


def _fmt(x) -> str:
    return np.array2string(np.asarray(x, dtype=float), precision=4, suppress_small=True, separator=", ")


def _checked(verify):
    """verify 从不抛出异常：Wrong → (0, 说明)；意外错误 → (0, 说明)。"""

    def wrapper(data, seed) -> tuple[float, str]:
        try:
            return verify(data, int(seed))
        except Wrong as err:
            return 0.0, str(err)
        except Exception as err:  # noqa: BLE001  数据再怪也不让评分进程崩溃
            return 0.0, f"记录的数据无法检查（{type(err).__name__}: {err}）"

    wrapper.__name__ = verify.__name__
    return wrapper


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


def self_attention_proj(X, W_q, W_k, W_v, causal=False):
    n = X.shape[0]
    mask = np.tril(np.ones((n, n), dtype=bool)) if causal else None
    return attention(X @ W_q, X @ W_k, X @ W_v, mask)[0]


def rotate_2d(x, angle):
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s], [s, c]]) @ np.asarray(x, float)


def rope(x, positions, base=10000.0):
    """RoPE 的“前一半和后一半配对”写法（GPT-NeoX、LLaMA；lib.transformer.apply_rope 的 NumPy 版）。"""
    x = np.asarray(x, float)
    d = x.shape[-1]
    theta = base ** (-np.arange(0, d, 2) / d)  # (d/2,)
    angles = np.asarray(positions, float)[:, None] * theta  # (T, d/2)
    cos, sin = np.cos(angles), np.sin(angles)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def count_params(V, d, n_layers, max_len, tied, positions):
    """§7.5：词嵌入 Vd + 位置表（只有 learned）+ N(12d² + 13d) + 最后的 LN 2d（+ 不共享时输出层 Vd）。

    和 lib.transformer.lm_param_formula 相同（测试里核对过）；这里不导入 torch，评分更快。
    """
    total = V * d + n_layers * (12 * d * d + 13 * d) + 2 * d
    if positions == "learned":
        total += max_len * d
    if not tied:
        total += V * d
    return total


# 练习 1 的手算答案（q、k、v 见讲义 §15 练习 1）
EX1_Q = np.array([[1.0, 0.0], [0.0, 1.0]])
EX1_K = np.array([[1.0, 1.0], [1.0, -1.0]])
EX1_V = np.array([[1.0, 0.0], [0.0, 1.0]])
EX1_SCORES = EX1_Q @ EX1_K.T / math.sqrt(2)
EX1_OUTPUTS, EX1_WEIGHTS = attention(EX1_Q, EX1_K, EX1_V)
HAND_TOL = 0.01  # 手算答案保留两三位小数即可

# 练习 5 的答案
EX5 = {
    "q_tilde_a": rotate_2d([1.0, 0.0], 2 * math.pi / 6),
    "k_tilde_a": rotate_2d([1.0, 0.0], 1 * math.pi / 6),
    "dot_a": math.cos(math.pi / 6),
    "dot_b": math.cos(math.pi / 6),
    "dot_c": math.cos(-math.pi / 6),
}


# ----------------------------------------------------------------------------
# 各题的 verify
# ----------------------------------------------------------------------------


def _hand_value(name, expected, hint):
    @_checked
    def verify(data, seed):
        got = _to_array(_field(data, "value"), name, shape=expected.shape)
        if not _close(got, expected, rtol=0, atol=HAND_TOL):
            raise Wrong(f"{name} 不对：得到 {_fmt(got)}。{hint}")
        return 1.0, OK

    verify.__name__ = f"verify_{name}"
    return verify


@_checked
def verify_ex1_self_attention(data, seed):
    specs = probes.inputs_self_attention(seed)
    cases = _cases(data, expected=len(specs))
    labels = ["二维输入、无掩码", "查询和键个数不同", "因果掩码", "有批维度 + 随机掩码", "两个批维度 + 广播的掩码"]
    for spec, case, label in zip(specs, cases, labels):
        res = _result(case, label)
        out_ref, w_ref = attention(spec["Q"], spec["K"], spec["V"], spec["mask"])
        if not isinstance(res, dict):
            raise Wrong(f"{label}：记录的数据格式不对")
        out = _to_array(res.get("output"), f"{label}：输出", shape=out_ref.shape)
        w = _to_array(res.get("weights"), f"{label}：权重", shape=w_ref.shape)
        if not _close(w, w_ref, rtol=1e-5, atol=1e-6):
            hint = ""
            if _close(w, attention(spec["Q"] * spec["Q"].shape[-1], spec["K"], spec["V"], spec["mask"])[1],
                      rtol=1e-5, atol=1e-6):
                hint = "看起来打分乘了 √d_k，应该除以 √d_k。"
            elif spec["mask"] is not None and _close(w, attention(spec["Q"], spec["K"], spec["V"])[1],
                                                     rtol=1e-5, atol=1e-6):
                hint = "看起来掩码没有起作用：被挡住的位置权重应为 0。"
            raise Wrong(f"{label}：注意力权重和参考答案不一致。{hint}")
        if not _close(out, out_ref, rtol=1e-5, atol=1e-6):
            raise Wrong(f"{label}：权重正确，但输出不对（输出应是权重乘 V）。")
    return 1.0, OK


def _verify_query(kind):
    @_checked
    def verify(data, seed):
        specs = probes.inputs_orthonormal_keys(seed, 401 if kind == "copy" else 402)
        cases = _cases(data, expected=len(specs))
        for i, (spec, case) in enumerate(zip(specs, cases), 1):
            K, V, a, b = spec["K"], spec["V"], spec["a"], spec["b"]
            q = _to_array(_result(case, f"第 {i} 组"), f"第 {i} 组的查询", shape=(K.shape[1],))
            out = softmax(K @ q) @ V  # 讲义练习 4：不考虑缩放
            target = V[a] if kind == "copy" else 0.5 * (V[a] + V[b])
            err = float(np.max(np.abs(out - target)))
            scale = float(np.max(np.abs(V)))
            if err > 0.01 * scale:
                want = "v_a" if kind == "copy" else "(v_a + v_b)/2"
                raise Wrong(f"第 {i} 组（n = {K.shape[0]}、d = {K.shape[1]}）：注意力输出和 {want} 相差 {err:.3g}，"
                            f"超过了 1%（{0.01 * scale:.3g}）。查询的方向对吗？长度够大吗？")
        return 1.0, OK

    verify.__name__ = f"verify_ex4_{kind}_query"
    return verify


def _verify_formula(name, formula, rtol, hint):
    @_checked
    def verify(data, seed):
        specs = probes.inputs_variance(seed)
        cases = _cases(data, expected=len(specs))
        for (d_k, sigma), case in zip(specs, cases):
            got = _to_number(_result(case, f"d_k={d_k}, σ={sigma}"), f"{name}({d_k}, {sigma})")
            want = formula(d_k, sigma)
            if not math.isclose(got, want, rel_tol=rtol, abs_tol=1e-12):
                raise Wrong(f"{name}({d_k}, {sigma}) = {got:.6g}，应为 {want:.6g}。{hint}")
        return 1.0, OK

    verify.__name__ = f"verify_{name}"
    return verify


@_checked
def verify_ex2_monte_carlo(data, seed):
    specs = probes.inputs_monte_carlo(seed)
    cases = _cases(data, expected=len(specs))
    values = []
    for (d_k, sigma, n, s), case in zip(specs, cases):
        got = _to_number(_result(case, f"d_k={d_k}"), f"monte_carlo_variance({d_k}, {sigma}, {n}, seed={s})")
        theory = d_k * sigma**4
        if abs(got - theory) > 0.08 * theory:
            raise Wrong(f"monte_carlo_variance({d_k}, {sigma}, {n}, seed={s}) = {got:.4g}，"
                        f"离理论值 d_k·σ⁴ = {theory:.4g} 太远（超过 8%）。是 q·k 的方差吗？每一维的标准差是 σ 吗？")
        values.append(got)
    if values[0] == values[1]:
        raise Wrong("同样的 d_k、σ 换一个 seed，结果一模一样：请真的用 seed 抽随机数做实验，而不是直接返回公式。")
    return 1.0, OK


@_checked
def verify_ex3_equivariance(data, seed):
    specs = probes.inputs_equivariance(seed)
    cases = _cases(data, expected=len(specs))
    for i, (spec, case) in enumerate(zip(specs, cases), 1):
        label = f"第 {i} 组（{'因果掩码' if spec['causal'] else '无掩码'}）"
        got = _to_number(_result(case, label), label)
        X, perm = spec["X"], spec["perm"]
        sa = lambda X_: self_attention_proj(X_, spec["W_q"], spec["W_k"], spec["W_v"], spec["causal"])  # noqa: E731
        want = float(np.max(np.abs(sa(X[perm]) - sa(X)[perm])))
        if not spec["causal"]:
            if abs(got) > 1e-8:
                raise Wrong(f"{label}：不加掩码时 SA(PX) 和 P·SA(X) 应该相等（差为 0），你算出的差是 {got:.3g}。"
                            "检查 PX 和 P·SA(X) 是否用了同一个置换（X[perm]、SA(X)[perm]）。")
        elif not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
            raise Wrong(f"{label}：差应为 {want:.6g}（加因果掩码后等变性不成立），你算出 {got:.6g}。")
    return 1.0, OK


@_checked
def verify_ex5_numbers(data, seed):
    for name, want in EX5.items():
        want = np.asarray(want, dtype=float)
        got = _to_array(_field(data, name), name, shape=want.shape)
        if not _close(got, want, rtol=0, atol=HAND_TOL):
            raise Wrong(f"{name} 不对：得到 {_fmt(got)}。旋转矩阵是 R(φ) = [[cos φ, −sin φ], [sin φ, cos φ]]，"
                        "位置 m 转 mθ。")
    return 1.0, OK


@_checked
def verify_ex5_rotate_2d(data, seed):
    specs = probes.inputs_rotate_2d(seed)
    cases = _cases(data, expected=len(specs))
    for (x, angle), case in zip(specs, cases):
        got = _to_array(_result(case, f"角度 {angle:.3f}"), f"rotate_2d(x, {angle:.3f})", shape=(2,))
        want = rotate_2d(x, angle)
        if not _close(got, want, rtol=1e-6, atol=1e-8):
            hint = "（转反了方向？）" if _close(got, rotate_2d(x, -angle), 1e-6, 1e-8) else ""
            raise Wrong(f"rotate_2d({_fmt(x)}, {angle:.4f}) = {_fmt(got)}，应为 {_fmt(want)}{hint}。")
    return 1.0, OK


@_checked
def verify_ex5_rope(data, seed):
    spec = probes.inputs_rope(seed)
    n_ref = len(spec["cases"])
    cases = _cases(data, expected=n_ref + 2 * len(spec["pairs"]))
    for i, (c, case) in enumerate(zip(spec["cases"], cases[:n_ref]), 1):
        want = rope(c["x"], c["positions"], c["base"])
        got = _to_array(_result(case, f"第 {i} 组"), f"第 {i} 组", shape=want.shape)
        if not _close(got, want, rtol=1e-6, atol=1e-8):
            hint = ""
            if c["base"] != 10000.0:
                hint = "（这一组的 base 不是 10000：函数要用参数 base。）"
            raise Wrong(f"第 {i} 组（T = {c['x'].shape[0]}、d = {c['x'].shape[1]}）：和参考的 RoPE（前一半与后一半配对，"
                        f"θ_i = base^(-2i/d)）不一致{hint}。")
    # 相对位置：q 在 m、k 在 n，m - n 相同时打分相同；旋转不改变长度
    d = spec["q"].shape[0]
    scores = []
    for j, (m, n) in enumerate(spec["pairs"]):
        q_rot = _to_array(_result(cases[n_ref + 2 * j], f"q 在位置 {m}"), f"q 在位置 {m}", shape=(1, d))[0]
        k_rot = _to_array(_result(cases[n_ref + 2 * j + 1], f"k 在位置 {n}"), f"k 在位置 {n}", shape=(1, d))[0]
        if not math.isclose(np.linalg.norm(q_rot), np.linalg.norm(spec["q"]), rel_tol=1e-6):
            raise Wrong(f"旋转改变了向量的长度（位置 {m}）：RoPE 应保持长度不变。")
        scores.append(float(q_rot @ k_rot))
    if not np.allclose(scores, scores[0], rtol=1e-6, atol=1e-8):
        raise Wrong(f"m − n 相同时打分应该相同，得到 {_fmt(scores)}。")
    return 1.0, OK


@_checked
def verify_ex6_param_count(data, seed):
    specs = probes.inputs_param_count(seed)
    cases = _cases(data, expected=len(specs))
    for spec, case in zip(specs, cases):
        label = "count_params(V={}, d={}, n_layers={}, max_len={}, tied={}, positions={!r})".format(*spec)
        got = _to_number(_result(case, label), label)
        want = count_params(*spec)
        if got != want:
            diff = got - want
            V, d = spec[0], spec[1]
            hint = ""
            if diff == -2 * d:
                hint = "少了最后一个层归一化的 2d。"
            elif diff == spec[3] * d:
                hint = "只有可学习的位置嵌入（positions='learned'）才有 max_len·d 个参数。"
            elif diff == -spec[3] * d:
                hint = "可学习的位置嵌入有 max_len·d 个参数。"
            elif abs(diff) == V * d:
                hint = "检查输出层是否和词嵌入共享（tied）。"
            raise Wrong(f"{label} = {got:,.0f}，应为 {want:,}。{hint}")
    return 1.0, OK


@_checked
def verify_ex7_crossover(data, seed):
    specs = probes.inputs_compute(seed)
    cases = _cases(data, expected=len(specs))
    for (_, d), case in zip(specs, cases):
        got = _to_number(_result(case, f"d={d}"), f"crossover_length({d})")
        if not math.isclose(got, 6 * d, rel_tol=1e-9):
            raise Wrong(f"crossover_length({d}) = {got:g}，应为 {6 * d}（注意力矩阵 2n²d 和线性部分 12nd² 相等时）。")
    return 1.0, OK


@_checked
def verify_ex7_share(data, seed):
    specs = probes.inputs_compute(seed)
    cases = _cases(data, expected=len(specs))
    for (n, d), case in zip(specs, cases):
        got = _to_number(_result(case, f"n={n}, d={d}"), f"attention_share({n}, {d})")
        want = n / (n + 6 * d)
        if not math.isclose(got, want, rel_tol=1e-6):
            hint = "（这是比值 n/6d，不是占比。）" if math.isclose(got, n / (6 * d), rel_tol=1e-6) else ""
            raise Wrong(f"attention_share({n}, {d}) = {got:.6g}，应为 {want:.6g}{hint}。占比是 0 到 1 之间的小数。")
    return 1.0, OK


def layer_norm(x, eps=1e-5):
    """lib.transformer.layer_norm 的 NumPy 版（不含 γ、β）。"""
    x = np.asarray(x, float)
    mu, var = x.mean(axis=-1, keepdims=True), x.var(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def encoder_outputs(x, mask, seed, n_layers=2, n_heads=2):
    """几层双向 Pre-LN Transformer 块（随机权重，float64）在掩码下的输出。

    mask：能广播到 (B, h, T, T) 的布尔数组（True = 可以看）或 None。被整行挡住的查询权重为 0，不是 NaN。
    用来检查填充掩码：真实词的输出不应受填充位置影响。结构是 lib.transformer.Block 的 Pre-LN 块（注意力 + 前馈，
    各带残差），权重随机，LayerNorm 不带 γ、β，前馈用 ReLU：检查的是掩码，这些细节不影响结论。
    """
    rng = np.random.default_rng([seed & 0xFFFFFFFF, 803])
    h = np.asarray(x, float)
    B, T, d = h.shape
    heads = lambda t: t.reshape(B, T, n_heads, d // n_heads).transpose(0, 2, 1, 3)  # (B, h, T, d_head)
    for _ in range(n_layers):
        w_q, w_k, w_v, w_o = (rng.normal(size=(d, d)) / math.sqrt(d) for _ in range(4))
        w_1, w_2 = rng.normal(size=(d, 4 * d)) / math.sqrt(d), rng.normal(size=(4 * d, d)) / math.sqrt(4 * d)
        a = layer_norm(h)
        out, _ = attention(heads(a @ w_q), heads(a @ w_k), heads(a @ w_v), mask)
        h = h + out.transpose(0, 2, 1, 3).reshape(B, T, d) @ w_o
        h = h + np.maximum(layer_norm(h) @ w_1, 0.0) @ w_2
    return h


@_checked
def verify_ex8_pad_mask(data, seed):
    specs = probes.inputs_pad_mask(seed)
    cases = _cases(data, expected=len(specs))
    rng = np.random.default_rng([seed & 0xFFFFFFFF, 802])
    for i, (pad, case) in enumerate(zip(specs, cases), 1):
        res = _result(case, f"第 {i} 批")
        if not isinstance(res, dict) or "shape" not in res or "values" not in res:
            raise Wrong(f"第 {i} 批：记录的数据格式不对")
        B, T = pad.shape
        try:
            m = np.array(res["values"], dtype=bool)
        except (TypeError, ValueError):
            raise Wrong(f"第 {i} 批：掩码不是布尔数组") from None
        if list(m.shape) != list(res["shape"]) or m.ndim != 4:
            raise Wrong(f"第 {i} 批：掩码应能广播到 (B, h, T, T) = ({B}, h, {T}, {T})，且是 4 维，得到形状 {res['shape']}。")
        try:
            np.broadcast_shapes(m.shape, (B, 1, T, T))
        except ValueError:
            raise Wrong(f"第 {i} 批：形状 {tuple(m.shape)} 不能广播到 ({B}, h, {T}, {T})。") from None
        if m.shape[1] != 1:
            raise Wrong(f"第 {i} 批：填充掩码对每个头都一样，头这一维应是 1，得到 {m.shape[1]}。")
        d = 8
        x = rng.normal(size=(B, T, d))
        x[~pad] = 50 * rng.normal(size=(int((~pad).sum()), d))  # 填充位置放上很大的“垃圾”向量
        out = encoder_outputs(x, m, seed)
        for b in range(B):
            L = int(pad[b].sum())
            alone = encoder_outputs(x[b : b + 1, :L], None, seed)[0]
            if not np.allclose(out[b, :L], alone, rtol=1e-6, atol=1e-8):
                rows = np.broadcast_to(m, (B, 1, T, T))[b, 0]
                hint = ""
                if np.array_equal(rows, np.broadcast_to(pad[b][:, None], (T, T))):
                    hint = "这个掩码挡住的是行（查询），应该挡列（键）：pad_mask[:, None, None, :]。"
                raise Wrong(f"第 {i} 批第 {b} 句（{L} 个真实词、{T - L} 个填充）：真实词的编码器输出和不填充时不同，"
                            f"说明它们还在关注填充位置或被挡住了真实的词。{hint}")
    return 1.0, OK


@_checked
def verify_ex11_counts(data, seed):
    specs = probes.inputs_kv_counts(seed)
    without, with_cache = _cases(data, "without", len(specs)), _cases(data, "with", len(specs))
    for (n, m), a, b in zip(specs, without, with_cache):
        got = _to_number(_result(a, f"n={n}, m={m}"), f"positions_without_cache({n}, {m})")
        want = m * n + m * (m - 1) // 2
        if got != want:
            raise Wrong(f"positions_without_cache({n}, {m}) = {got:g}，应为 {want}：第 i 次生成要重算 n + i − 1 个位置。")
        got = _to_number(_result(b, f"n={n}, m={m}"), f"positions_with_cache({n}, {m})")
        if got != n + m:
            raise Wrong(f"positions_with_cache({n}, {m}) = {got:g}，应为 {n + m}：提示算一次，之后每个新词算 1 个位置。")
    return 1.0, OK


def tiny_lm_logits(w: dict, idx) -> np.ndarray:
    """probes.TinyLM 的前向（NumPy 版，不用缓存）：整个序列一次送进去，返回 (B, T, V) 的 logits。"""
    idx = np.asarray(idx)
    T = idx.shape[1]
    x = w["tok"][idx] + w["pos"][:T]
    out, _ = attention(x @ w["w_q"], x @ w["w_k"], x @ w["w_v"], np.tril(np.ones((T, T), dtype=bool)))
    return (x + out) @ w["w_out"]


def greedy_reference(model_seed: int, prompt, m: int) -> list:
    """不用缓存的贪心生成（每步把整个序列送进 TinyLM(model_seed)）：可信的参考。"""
    w = probes.tiny_lm_weights(model_seed)
    idx = np.asarray(prompt, dtype=np.int64)
    for _ in range(m):
        nxt = tiny_lm_logits(w, idx)[:, -1, :].argmax(axis=-1)
        idx = np.concatenate([idx, nxt[:, None]], axis=1)
    return idx.tolist()


@_checked
def verify_ex11_cached_generation(data, seed):
    specs = probes.inputs_generation(seed)
    cases = _cases(data, expected=len(specs))
    for i, (spec, case) in enumerate(zip(specs, cases), 1):
        res = _result(case, f"第 {i} 组")
        if not isinstance(res, dict) or not isinstance(res.get("tokens"), list) or not isinstance(res.get("calls"), list):
            raise Wrong(f"第 {i} 组：记录的数据格式不对")
        prompt, m = spec["prompt"], spec["m"]
        B, n = prompt.shape
        want = greedy_reference(spec["model_seed"], prompt, m)
        try:
            tokens = np.array(res["tokens"], dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            raise Wrong(f"第 {i} 组：返回的不是整数词元") from None
        if tokens.shape != (B, n + m):
            raise Wrong(f"第 {i} 组：应返回 (B, n + m) = ({B}, {n + m}) 的词元（提示 + 新词），得到形状 {tokens.shape}。")
        if tokens.tolist() != want:
            raise Wrong(f"第 {i} 组：生成的词元和不用缓存的贪心生成不同。检查：提示只送进模型一次，"
                        "之后每步只送最新的一个词，并且每次都传同一个 kv_cache。")
        calls = res["calls"]
        try:
            total = sum(int(c["positions"]) for c in calls)
            used_cache = all(bool(c["cache"]) for c in calls)
        except (TypeError, KeyError, ValueError):
            raise Wrong(f"第 {i} 组：记录的调用信息格式不对") from None
        if not calls or not used_cache or total > n + m:
            raise Wrong(f"第 {i} 组：词元对了，但模型一共处理了 {total} 个位置（用了缓存应不超过 n + m = {n + m}）："
                        "每一步都要把 kv_cache 传给模型，并且只送入新的词。")
    return 1.0, OK


# ----------------------------------------------------------------------------
# grade_id → Check（points 和 source/ 里测试单元格的 nbgrader points 一致）
# ----------------------------------------------------------------------------

_NB1, _NB2, _NB3 = "01_attention_by_hand", "02_scaling_and_equivariance", "03_positions_and_rope"
_NB4, _NB5 = "04_blocks_and_cost", "05_masks_and_kv_cache"

CHECKS: dict[str, Check] = {c.grade_id: c for c in [
    Check("ex1_scores", _NB1, 2, _hand_value("scores_1", EX1_SCORES, "打分是 q_i·k_j 除以 √d_k = √2。")),
    Check("ex1_weights", _NB1, 2, _hand_value("weights_1", EX1_WEIGHTS, "每一行做 softmax，每行之和为 1。")),
    Check("ex1_outputs", _NB1, 2, _hand_value("outputs_1", EX1_OUTPUTS, "第 i 行是 Σ_j α_ij v_j。")),
    Check("ex1_self_attention", _NB1, 8, verify_ex1_self_attention),
    Check("ex4_copy_query", _NB1, 3, _verify_query("copy")),
    Check("ex4_average_query", _NB1, 3, _verify_query("average")),
    Check("ex2_variance", _NB2, 2, _verify_formula("score_variance", lambda d, s: d * s**4, 1e-9,
                                                   "每一项 q_j k_j 的方差是 σ⁴，d_k 项独立相加。")),
    Check("ex2_divisor", _NB2, 2, _verify_formula("score_divisor", lambda d, s: s**2 * math.sqrt(d), 1e-9,
                                                  "要除以打分的标准差：√(d_k σ⁴)。")),
    Check("ex2_monte_carlo", _NB2, 2, verify_ex2_monte_carlo),
    Check("ex3_equivariance", _NB2, 5, verify_ex3_equivariance),
    Check("ex5_numbers", _NB3, 3, verify_ex5_numbers),
    Check("ex5_rotate_2d", _NB3, 3, verify_ex5_rotate_2d),
    Check("ex5_rope", _NB3, 6, verify_ex5_rope),
    Check("ex6_param_count", _NB4, 6, verify_ex6_param_count),
    Check("ex7_crossover", _NB4, 2, verify_ex7_crossover),
    Check("ex7_share", _NB4, 2, verify_ex7_share),
    Check("ex8_pad_mask", _NB5, 6, verify_ex8_pad_mask),
    Check("ex11_counts", _NB5, 3, verify_ex11_counts),
    Check("ex11_cached_generation", _NB5, 6, verify_ex11_cached_generation),
]}

assert set(CHECKS) == set(probes.PROBES), "每个检查都要有一个探针"


def grade(grade_id: str, namespace: dict, seed: int | None = None) -> tuple[float, str]:
    """在同一个进程里跑探针 + 检查，返回 (得分比例, 说明)。数据先经过一次 JSON 往返，和评分流水线一样。"""
    seed = DEFAULT_SEED if seed is None else int(seed)
    data = probes.PROBES[grade_id](namespace, seed)
    data = json.loads(json.dumps(data))
    return CHECKS[grade_id].verify(data, seed)


def run_check(grade_id: str, namespace: dict, seed: int | None = None) -> None:
    """隐藏测试调用的入口：答错时抛出 AssertionError(中文说明)。"""
    if grade_id not in CHECKS:
        raise KeyError(f"未知的 grade_id {grade_id!r}")
    fraction, message = grade(grade_id, namespace, seed)
    if fraction < 1.0:
        raise AssertionError(f"[{grade_id}] {message}")
