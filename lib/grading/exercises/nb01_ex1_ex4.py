"""notebook 01（01_attention_by_hand.ipynb）= 练习 1（手算自注意力、self_attention）和练习 4（复制与平均的查询）：
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

from lib.answer_format import borrowed, describe  # noqa: F401

# ==== 评分进程才执行的导入（送进内核时跳过这一段：内核里同名的工具由 lib/grading/probes.py 提供）====
from lib import answer_format as fmt  # noqa: F401
from lib.answer_format import FormatError  # noqa: F401
from lib.grading.exercise_checks import (OK, Check, Wrong, _cases, _checked, _close, _error_text,  # noqa: F401
                                         _field, _fmt, _part, _result, _score, _vs, attention, softmax)
from lib.grading.probes import PROBES, _call_cases, _get, _guarded, _rng, _variable_probe, quiet_call  # noqa: F401

# ==== 探针：在学生的内核里运行 ====
# ----------------------------------------------------------------------------
# 练习 1：手算自注意力；NumPy 的 self_attention(Q, K, V, mask=None)
# ----------------------------------------------------------------------------

# 四个部分（下面的 verify_ex1_self_attention 给每部分 2 分）：二维无掩码、二维 + 掩码、批维度无掩码、批维度 + 掩码
SELF_ATTENTION_PARTS = ("2d", "2d_mask", "batch", "batch_mask")


def inputs_self_attention(seed: int) -> list[dict]:
    """随机形状、批、掩码（每组标明属于哪一部分）。d_k ≥ 2，所以“乘 √d_k”“不缩放”“除以 √d_k”一定不同。"""
    rng = _rng(seed, 101)
    normal = rng.normal
    cases = []

    def add(part, Q, K, V, mask=None):
        cases.append({"part": part, "Q": Q, "K": K, "V": V, "mask": mask})

    # 二维，无掩码：n_q = n_k；查询和键个数不同（交叉注意力的形状）
    n, dk, dv = rng.integers(3, 8), rng.integers(2, 10), rng.integers(1, 7)
    add("2d", normal(size=(n, dk)), normal(size=(n, dk)), normal(size=(n, dv)))
    m, n, dk, dv = rng.integers(2, 6), rng.integers(2, 9), rng.integers(2, 9), rng.integers(1, 6)
    add("2d", normal(size=(m, dk)), normal(size=(n, dk)), normal(size=(n, dv)))
    # 二维 + 因果掩码
    n, dk, dv = rng.integers(3, 8), rng.integers(2, 10), rng.integers(1, 7)
    add("2d_mask", normal(size=(n, dk)), normal(size=(n, dk)), normal(size=(n, dv)), np.tril(np.ones((n, n), bool)))
    # 批维度，无掩码：(B, n, d) 和 (B, h, n, d)
    B, n, dk, dv = rng.integers(2, 5), rng.integers(3, 7), rng.integers(2, 9), rng.integers(1, 6)
    add("batch", normal(size=(B, n, dk)), normal(size=(B, n, dk)), normal(size=(B, n, dv)))
    B, h, n, dk, dv = rng.integers(2, 3), rng.integers(2, 4), rng.integers(2, 6), rng.integers(2, 7), rng.integers(1, 5)
    add("batch", normal(size=(B, h, n, dk)), normal(size=(B, h, n, dk)), normal(size=(B, h, n, dv)))
    # 批维度 + 每个句子不同的随机掩码（每行至少能看一个位置）；(B, h, n, d) + 只给 (n, n)、要靠广播的掩码
    B, n, dk, dv = rng.integers(2, 5), rng.integers(3, 7), rng.integers(2, 9), rng.integers(1, 6)
    mask = rng.random((B, n, n)) < 0.6
    mask[:, np.arange(n), rng.integers(0, n, size=n)] = True
    add("batch_mask", 1.5 * normal(size=(B, n, dk)), normal(size=(B, n, dk)), normal(size=(B, n, dv)), mask)
    B, h, n, dk, dv = rng.integers(1, 3), rng.integers(2, 4), rng.integers(2, 6), rng.integers(2, 7), rng.integers(1, 5)
    add("batch_mask", normal(size=(B, h, n, dk)), normal(size=(B, h, n, dk)), normal(size=(B, h, n, dv)),
        np.tril(np.ones((n, n), bool)))
    return cases


@_guarded
def probe_ex1_self_attention(namespace, seed):
    fn = _get(namespace, "self_attention")
    cases = inputs_self_attention(seed)
    args = [(c["Q"].copy(), c["K"].copy(), c["V"].copy(), None if c["mask"] is None else c["mask"].copy())
            for c in cases]
    return {"cases": _call_cases(fn, args), "borrowed": borrowed(fn, namespace)}  # 现成的注意力的名字（只看代码）


# ----------------------------------------------------------------------------
# 练习 4：复制与平均（键两两正交、长度为 1；不缩放）
# ----------------------------------------------------------------------------

EX4_MAX_KEYS = 8  # 题目里写明：评分时 n ≤ d ≤ 8；n = d = 8 是最坏的情况（别的键最多）


def inputs_orthonormal_keys(seed: int, salt: int, n_random: int = 2) -> list[dict]:
    """固定的最坏情况（n = d = 8）和最小的情况（n = 2），再加 n_random 组随机的。"""
    rng = _rng(seed, salt)
    cases = []
    for d, n in [(EX4_MAX_KEYS, EX4_MAX_KEYS), (3, 2)] + [(None, None)] * n_random:
        d = int(rng.integers(3, EX4_MAX_KEYS + 1)) if d is None else d
        n = int(rng.integers(2, d + 1)) if n is None else n
        basis, _ = np.linalg.qr(rng.normal(size=(d, d)))
        K = basis[:, :n].T.copy()  # (n, d)，行两两正交、长度为 1
        a, b = rng.choice(n, size=2, replace=False)
        cases.append({"K": K, "a": int(a), "b": int(b)})
    return cases


@_guarded
def probe_ex4_copy_query(namespace, seed):
    fn = _get(namespace, "copy_query")
    cases = inputs_orthonormal_keys(seed, 401)
    return {"cases": _call_cases(fn, [(c["K"].copy(), c["a"]) for c in cases])}


@_guarded
def probe_ex4_average_query(namespace, seed):
    fn = _get(namespace, "average_query")
    cases = inputs_orthonormal_keys(seed, 402)
    return {"cases": _call_cases(fn, [(c["K"].copy(), c["a"], c["b"]) for c in cases])}


@_guarded
def probe_ex1_outputs(namespace, seed):
    """outputs_1，再记下学生自己的 weights_1：输出等于“你的权重 × V”时，错的是上游的权重，不是这一步。"""
    return {"value": describe(_get(namespace, "outputs_1")), "weights": describe(namespace.get("weights_1"))}


PROBES.update({
    "ex1_scores": _variable_probe("scores_1"),
    "ex1_weights": _variable_probe("weights_1"),
    "ex1_outputs": probe_ex1_outputs,
    "ex1_self_attention": probe_ex1_self_attention,
    "ex4_copy_query": probe_ex4_copy_query,
    "ex4_average_query": probe_ex4_average_query,
})

# ==== 检查：在干净的评分进程里运行 ====
# 典型错误的说法和判断：和公开测试同一份（lib/public_tests/nb01_ex1_ex4.py），交之前和交之后说同一句话
from lib.public_tests import nb01_ex1_ex4 as public  # noqa: E402

# 练习 1 的手算答案（q、k、v 见讲义 §15 练习 1）
EX1_Q = np.array([[1.0, 0.0], [0.0, 1.0]])
EX1_K = np.array([[1.0, 1.0], [1.0, -1.0]])
EX1_V = np.array([[1.0, 0.0], [0.0, 1.0]])
EX1_SCORES = EX1_Q @ EX1_K.T / math.sqrt(2)
EX1_OUTPUTS, EX1_WEIGHTS = attention(EX1_Q, EX1_K, EX1_V)
HAND_TOL = fmt.TOLERANCES["hand"]["atol"]  # 手算答案保留两三位小数即可


def _hand_value(name, expected, explain):
    """手算的数值（变量）：和答案相差不超过 HAND_TOL。explain(data, got)：答错时的原因（一句话）。"""

    @_checked
    def verify(data, seed):
        got = fmt.read_array(_field(data, "value"), name, expected.shape, returned=False)
        if not _close(got, expected, "hand"):
            raise Wrong(f"{name} 不对：得到 {_fmt(got)}。{explain(data, got)}")
        return 1.0, OK

    verify.__name__ = f"verify_{name}"
    return verify


def _said(key, default: str) -> str:
    """公开测试的那句话（加句号）；看不出是哪种典型错误时用 default。"""
    return f"{public.MISTAKES[key]}。" if key else default


def _explain_scores(data, got):
    return _said(public.scores_mistake(got), "打分是 q_i·k_j 除以 √d_k = √2。")


def _explain_weights(data, got):
    return _said(public.weights_mistake(got), "每一行做 softmax，每行之和为 1。")


def _explain_outputs(data, got):
    """和公开测试同一个判断（public.outputs_explained）：输出是学生自己的 weights_1 × V 时说出权重错在哪，
    否则看是不是转置了、不等于权重 × V；没有可用的权重时和正确的输出比。"""
    try:
        w = fmt.read_array(data.get("weights"), "weights_1", EX1_WEIGHTS.shape, returned=False)
    except Exception:  # noqa: BLE001  没填、格式不对或记录的数据古怪：和正确的输出比
        w = None
    said = public.outputs_explained(got, w)
    return f"{said}。" if said else "第 i 行是 o_i = Σ_j α_ij v_j。"


SELF_ATTENTION_LABELS = {"2d": "二维输入、无掩码", "2d_mask": "二维输入 + 因果掩码", "batch": "有批维度、无掩码",
                         "batch_mask": "有批维度 + 掩码（每句不同的掩码、要广播的掩码）"}


def _attention_hint(w, spec) -> str:
    """权重不对时，最可能的原因。"""
    Q, K, V, mask = spec["Q"], spec["K"], spec["V"], spec["mask"]
    d_k = Q.shape[-1]
    same = lambda other: _close(w, other)  # noqa: E731
    if same(attention(Q * math.sqrt(d_k), K, V, mask)[1]):
        return f"{public.MISTAKES['sa_unscaled']}。"
    if same(attention(Q * d_k, K, V, mask)[1]):
        return f"{public.MISTAKES['sa_times_sqrt']}。"
    if same(attention(Q / math.sqrt(d_k), K, V, mask)[1]):
        return f"{public.MISTAKES['sa_over_d']}。"
    for size in {V.shape[-1], K.shape[-2], Q.shape[-2]} - {d_k}:  # 除以 √d_v、√n_k（或 √n_q）
        if same(attention(Q * math.sqrt(d_k / size), K, V, mask)[1]):
            return f"{public.MISTAKES['sa_wrong_dim']}。"
    if mask is not None and same_shape_try(lambda: attention(Q, K, V)[1] * np.asarray(mask), w):
        return f"{public.MISTAKES['mask_after_softmax']}。"
    if mask is not None and same(attention(Q, K, V)[1]):
        return f"{public.MISTAKES['mask_ignored']}。"
    if mask is not None and same(attention(Q, K, V, ~np.asarray(mask))[1]):
        return "看起来掩码用反了：mask 里 True 表示“可以看”。"
    if mask is not None and np.ndim(mask) >= 2 and same(attention(Q, K, V, np.swapaxes(np.asarray(mask), -1, -2))[1]):
        return ("看起来掩码挡住的是行而不是列：mask[..., i, j] 为 False 表示第 i 个查询不能看第 j 个键，"
                "应把打分里这些位置（第 j 列）填 −∞；不要转置掩码，也不要按行去挡。")
    if Q.ndim > 2 and same_shape_try(lambda: _weights(Q @ K.T / math.sqrt(d_k), mask), w):
        return f"看起来用了 K.T。{public.MISTAKES['batch_transpose']}。"
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_k)
    if same_shape_try(lambda: _weights(scores, mask, axis=-2), w):
        return f"{public.MISTAKES['sa_columns']}。"
    return "检查打分 QK^T/√d_k、按行 softmax（最后一维）和掩码（挡住的是列：键）"


def _weights(scores, mask=None, axis=-1):
    """打分 →（加掩码后）softmax 的权重；用来重算学生可能的写法。"""
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    return softmax(scores, axis=axis)


def same_shape_try(make, w) -> bool:
    """make() 算出的权重和 w 一致（形状不对、出错都算不一致）。"""
    try:
        with np.errstate(all="ignore"):
            other = make()
    except Exception:  # noqa: BLE001  重算某种错误写法时形状对不上
        return False
    return np.shape(other) == np.shape(w) and _close(w, other)


def _swapped(out_d, w_d, out_ref, w_ref) -> bool:
    """返回的是 (权重, 输出)：形状正好对调，或形状相同而数值对调。"""
    if out_ref.shape != w_ref.shape:
        return (tuple(out_d.get("shape", ())) == w_ref.shape and tuple(w_d.get("shape", ())) == out_ref.shape)
    try:
        return (_close(fmt.read_array(out_d, "", w_ref.shape), w_ref)
                and _close(fmt.read_array(w_d, "", out_ref.shape), out_ref) and not _close(out_ref, w_ref))
    except FormatError:
        return False


def _check_attention_case(spec, res, label):
    out_ref, w_ref = attention(spec["Q"], spec["K"], spec["V"], spec["mask"])
    out_d, w_d = fmt.read_pair(res, f"{label}：self_attention")
    if isinstance(out_d, dict) and isinstance(w_d, dict) and _swapped(out_d, w_d, out_ref, w_ref):
        raise Wrong(f"{label}：{public.MISTAKES['sa_swapped']}。")
    nan_hint = (public.MISTAKES["mask_nan"] if spec["mask"] is not None
                else "exp 溢出了？softmax 之前先减去每行的最大值")
    w = fmt.read_array(w_d, f"{label}：权重", w_ref.shape, nan_hint=nan_hint)
    out = fmt.read_array(out_d, f"{label}：输出", out_ref.shape, nan_hint=nan_hint)
    if not _close(w, w_ref):
        raise Wrong(f"{label}：注意力权重和参考答案不一致。{_attention_hint(w, spec).rstrip('。')}。")
    if not _close(out, out_ref):
        raise Wrong(f"{label}：权重正确，但输出不对（输出应是权重乘 V）。")


def _batch_error_hint(error: str, spec) -> str:
    """有批维度时出错：按错误本身说原因（转置、掩码的形状），不笼统地猜。"""
    text = error.lower()
    if "boolean" in text or "too many indices" in text:
        return ("（掩码的形状和打分不同时不能用布尔索引 scores[~mask]：它要求两者形状完全相同。"
                "用能广播的 np.where(mask, scores, -np.inf)）")
    if "broadcast" in text and spec["mask"] is not None:
        return (f"（形状对不上：掩码的形状 {spec['mask'].shape} 要能广播到打分的形状 (..., n_q, n_k)；"
                "打分的最后两维是 (n_q, n_k) 吗？）")
    if "matmul" in text or "aligned" in text or "core dimension" in text or "broadcast" in text:
        return f"（{public.MISTAKES['batch_transpose']}）"
    return "（有批维度时：只对最后两维做矩阵运算和 softmax，前面的维度原样保留）"


@_checked
def verify_ex1_self_attention(data, seed):
    """四部分各 2 分：二维无掩码、二维 + 掩码、批维度无掩码、批维度 + 掩码。"""
    specs = inputs_self_attention(seed)
    cases = _cases(data, expected=len(specs))
    name = data.get("borrowed")
    if name is not None:  # 用了 lib 或 torch 现成的注意力：这一题不得分（公开测试、自检说的是同一句话）
        raise Wrong(fmt.borrowed_message("self_attention", str(name)) + "。")
    failed_2d = any("error" in case for spec, case in zip(specs, cases) if not spec["part"].startswith("batch"))

    def check_part(part):
        for spec, case in zip(specs, cases):
            if spec["part"] != part:
                continue
            label = f"Q 的形状 {spec['Q'].shape}" + ("" if spec["mask"] is None else f"、掩码 {spec['mask'].shape}")
            if "error" in case and part.startswith("batch"):
                # 只有二维输入都不出错、有批维度才出错时，才按“批维度”说原因（没作答、处处出错的代码不说）
                hint = "" if failed_2d else _batch_error_hint(str(case["error"]), spec)
                raise Wrong(f"{label}：{_error_text(case['error'])}{hint}")
            _check_attention_case(spec, _result(case, label), label)

    return _score([_part(SELF_ATTENTION_LABELS[p], 2, lambda p=p: check_part(p)) for p in SELF_ATTENTION_PARTS])


def _verify_query(kind):
    """方向对（2 分）+ 长度够（1 分）。只看注意力权重，和值 V 无关：
    copy：k_a 的打分最大，权重至少 0.99；average：k_a、k_b 的打分相等且最大，两者权重合计至少 0.99、相差不超过 0.01。"""

    @_checked
    def verify(data, seed):
        specs = inputs_orthonormal_keys(seed, 401 if kind == "copy" else 402)
        cases = _cases(data, expected=len(specs))
        scores = []  # 每组：(说明, K q, a, b)
        for i, (spec, case) in enumerate(zip(specs, cases), 1):
            n, d = spec["K"].shape
            where = f"第 {i} 组（n = {n}、d = {d}）"
            q = fmt.read_array(_result(case, where), f"{where}的查询", (d,))
            scores.append((where, spec["K"] @ q, spec["a"], spec["b"]))

        def direction():
            for where, s, a, b in scores:
                if kind == "copy":
                    others = np.delete(s, a)
                    if not s[a] > others.max() + 1e-4 * abs(s[a]):
                        raise Wrong(f"{where}：q·k_a 应比其他所有键的打分都大（q 应指向 k_a），"
                                    f"得到 q·k_a = {s[a]:.3g}，其他键最大 {others.max():.3g}。")
                    continue
                others = np.delete(s, [a, b])
                if not _close(s[a], s[b]):
                    raise Wrong(f"{where}：k_a、k_b 的打分应相等（q 应同样地指向 k_a 和 k_b），得到 {s[a]:.3g} 和 {s[b]:.3g}。")
                if others.size and not min(s[a], s[b]) > others.max() + 1e-4 * abs(s[a]):
                    raise Wrong(f"{where}：k_a、k_b 的打分应比其他键都大，得到 {s[a]:.3g}，其他键最大 {others.max():.3g}。")

        def direction_ok(s, a, b):
            if kind == "copy":
                return s[a] > np.delete(s, a).max() + 1e-4 * abs(s[a])
            others = np.delete(s, [a, b])
            return _close(s[a], s[b]) and (not others.size or min(s[a], s[b]) > others.max() + 1e-4 * abs(s[a]))

        def length():
            for where, s, a, b in scores:
                w = softmax(s)
                if not direction_ok(s, a, b):  # 方向错时，把 q 变长没有用：先说方向
                    want = "k_a 的权重应至少 0.99" if kind == "copy" else "k_a、k_b 的权重应各约 0.5"
                    got = f"{w[a]:.3f}" if kind == "copy" else f"{w[a]:.3f} 和 {w[b]:.3f}"
                    raise Wrong(f"{where}：权重是 {got}（{want}）：方向不对，q 没有"
                                + ("指向 k_a" if kind == "copy" else "同样地指向 k_a 和 k_b")
                                + "；先改方向，方向对了再看长度（c 的大小）。")
                if kind == "copy" and w[a] < 0.99:
                    raise Wrong(f"{where}：k_a 的权重只有 {w[a]:.3f}，要求至少 0.99。q = c·k_a 时权重是 "
                                "e^c / (e^c + n − 1)，n = 8 时要 c ≥ ln(99 × 7) ≈ 6.5。")
                if kind == "average" and (w[a] + w[b] < 0.99 or abs(w[a] - w[b]) > 0.01):
                    raise Wrong(f"{where}：k_a、k_b 的权重是 {w[a]:.3f} 和 {w[b]:.3f}，要求合计至少 0.99、相差不超过 0.01。"
                                "q = c·(k_a + k_b) 时要 c 足够大（n = 8 时 c ≥ ln(99 × 6 / 2) ≈ 5.7）。")

        parts = [_part("方向：打分最大的是 k_a" if kind == "copy" else "方向：k_a、k_b 的打分相等且最大", 2, direction),
                 _part("长度：权重集中到 0.99 以上", 1, length)]
        return _score(parts)

    verify.__name__ = f"verify_ex4_{kind}_query"
    return verify


NOTEBOOK = "01_attention_by_hand"
EXERCISES = (1, 4)  # 讲义 §15 的练习编号：grade_id 是 ex1_*、ex4_*；模块名 nb01_ex1_ex4 = notebook 01 + 这些练习
CHECKS = [
    Check("ex1_scores", NOTEBOOK, 2, _hand_value("scores_1", EX1_SCORES, _explain_scores)),
    Check("ex1_weights", NOTEBOOK, 2, _hand_value("weights_1", EX1_WEIGHTS, _explain_weights)),
    Check("ex1_outputs", NOTEBOOK, 2, _hand_value("outputs_1", EX1_OUTPUTS, _explain_outputs)),
    Check("ex1_self_attention", NOTEBOOK, 8, verify_ex1_self_attention),
    Check("ex4_copy_query", NOTEBOOK, 3, _verify_query("copy")),
    Check("ex4_average_query", NOTEBOOK, 3, _verify_query("average")),
]
