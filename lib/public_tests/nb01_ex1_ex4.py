"""notebook 01（01_attention_by_hand.ipynb）= 练习 1（手算打分、权重、输出；self_attention）和练习 4（复制与平均的查询）：公开测试。

手算的三个答案：检查格式、和你自己的上一步是否自洽、是不是某个典型错误，最后是不是在题目的容差（±0.01）之内。
说明里从不写出答案；但评分时会扣分的答案，公开测试一定不通过（和评分是同一个判断：``close(…, "hand")``），
只说原因（例如 √2 取得太粗），不说应是多少。
"""
from __future__ import annotations

import math

import numpy as np

from lib import answer_format as fmt
from lib.answer_format import CheckFailed, FormatError, array, call, pair
from lib.public_tests import expect, need

# 讲义 §15 练习 1 给出的 q、k、v（题目里写着；答案要用纸笔算）
Q = np.array([[1.0, 0.0], [0.0, 1.0]])
K = np.array([[1.0, 1.0], [1.0, -1.0]])
V = np.array([[1.0, 0.0], [0.0, 1.0]])
D_K = 2
# 参考答案：只用来判断“在不在 ±0.01 之内”（和评分同一个判断），从不写进说明
REF_SCORES = Q @ K.T / math.sqrt(D_K)

# 典型错误：公开测试和评分说明（lib/grading/exercises/nb01_ex1_ex4.py 的检查一段）用同一句话
MISTAKES = {
    "unscaled": "和 q·k 相等：没有除以 √d_k = √2",
    "times_sqrt": "是 q·k 乘了 √2：应该除以 √d_k = √2",
    "over_d": "是 q·k 除以了 d_k = 2：应该除以 √d_k = √2",
    "not_one_divisor": "不是每个 q_i·k_j 都除以同一个正数：逐个检查 e_ij = q_i·k_j / √d_k 的符号和大小",
    "sloppy_sqrt": "和用 √2 算出的差了 0.01 以上：√2 ≈ 1.414，不要取得太粗",
    "wrong_divisor": "每个 q_i·k_j 都除以了同一个数，但不是 √d_k = √2",
    "hand_off": "和正确的值差了 0.01 以上（题目允许 ±0.01）：按 e_ij = q_i·k_j / √d_k、按行 softmax、o_i = Σ_j α_ij v_j 再算一遍",
    "negative": "有负数：softmax 之后的权重都大于 0",
    "columns": "每一列之和是 1、每一行不是：softmax 按列做了，应按行做（每一行的权重之和为 1）",
    "rows": "有一行之和不是 1：softmax 按行做，每一行的权重之和为 1",
    "weights_unscaled": "是没有缩放的 q·k 做 softmax 的结果：先除以 √d_k = √2 再做 softmax",
    "weights_times_sqrt": "是 q·k 乘 √2 之后做 softmax 的结果：应该先除以 √d_k = √2",
    "weights_over_d": "是 q·k 除以 d_k = 2 之后做 softmax 的结果：应该除以 √d_k = √2",
    "not_own_softmax": "不是你的 scores_1 按行做 softmax 的结果（两个答案至少有一个不对）",
    "transposed": "看起来转置了：第 i 行应是第 i 个词的输出 o_i = Σ_j α_ij v_j",
    "not_own_outputs": "不等于你的 weights_1 乘 V：第 i 行是 o_i = Σ_j α_ij v_j",
    "sa_unscaled": "看起来打分没有除以 √d_k",
    "sa_times_sqrt": "看起来打分乘了 √d_k，应该除以 √d_k",
    "sa_over_d": "看起来打分除以了 d_k，应该除以 √d_k",
    "sa_wrong_dim": "看起来打分除以的是 √d_v 或 √n_k：除以的应是 √d_k（Q、K 的最后一维）",
    "sa_swapped": "返回的顺序是不是反了？应是 (输出, 权重)",
    "sa_columns": "看起来 softmax 按列做了：应按最后一维（axis=-1，每一行）做，每行之和为 1",
    "batch_transpose": ("有批维度时 K.T 会把所有维度都倒过来：只转置最后两维，用 np.swapaxes(K, -1, -2)"
                        "（三维时也可以写 K.transpose(0, 2, 1)）"),
    "mask_after_softmax": "看起来掩码是在 softmax 之后才乘上去的：应在 softmax 之前把不许看的打分填 −∞（这样每行之和仍是 1）",
    "mask_ignored": "看起来掩码没有起作用：mask 为 False 的位置权重应为 0（softmax 之前填 −∞）",
    "mask_nan": "某一行的位置全被挡住了？mask 里 True 表示“可以看”，是不是用反了？",
}


def softmax_rows(scores, axis=-1) -> np.ndarray:
    e = np.exp(scores - np.max(scores, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


REF_WEIGHTS = softmax_rows(REF_SCORES)
REF_OUTPUTS = REF_WEIGHTS @ V
SLOPPY_DIVISORS = (1.25, 1.6)  # 把 √2 ≈ 1.414 粗取成 1.3、1.4、1.5 之类：打分仍然成比例，只是除数不准


def _sloppy(divisor: float) -> bool:
    return SLOPPY_DIVISORS[0] < divisor < SLOPPY_DIVISORS[1]


# 手算答案的典型错误：返回 MISTAKES 的键，看不出时返回 None。公开测试和评分时的检查调用同样的函数。
# own_*：学生自己上一步的答案（没有时 None）。


def scores_mistake(s) -> str | None:
    raw = Q @ K.T
    for wrong, key in ((raw, "unscaled"), (raw * math.sqrt(D_K), "times_sqrt"), (raw / D_K, "over_d")):
        if fmt.close(s, wrong, "hand"):
            return key
    overlap = float(np.sum(s * raw))
    if overlap <= 0 or not fmt.close(s, raw * overlap / float(np.sum(raw * raw)), "hand_relation"):
        return "not_one_divisor"
    if not fmt.close(s, REF_SCORES, "hand"):  # 评分会扣分：说原因（除数不准），不说应是多少
        return "sloppy_sqrt" if _sloppy(float(np.sum(raw * raw)) / overlap) else "wrong_divisor"
    return None


def weights_mistake(w, own_scores=None) -> str | None:
    if np.any(w < 0):
        return "negative"
    if not fmt.close(w.sum(axis=1), [1.0, 1.0], "hand_relation"):
        return "columns" if fmt.close(w.sum(axis=0), [1.0, 1.0], "hand_relation") else "rows"
    raw = Q @ K.T
    for wrong, key in ((raw, "weights_unscaled"), (raw * math.sqrt(D_K), "weights_times_sqrt"),
                       (raw / D_K, "weights_over_d")):
        if fmt.close(w, softmax_rows(wrong), "hand"):
            return key
    if own_scores is not None and not fmt.close(w, softmax_rows(own_scores), "hand_relation"):
        return "not_own_softmax"
    if not fmt.close(w, REF_WEIGHTS, "hand"):  # 评分会扣分
        return "sloppy_sqrt" if _sloppy(_implied_divisor(w)) else "hand_off"
    return None


def _implied_divisor(w) -> float:
    """第 2 行 softmax(q_2·k / c) = softmax((1, −1) / c)：由两个权重之比反推 c（看不出时 nan）。"""
    with np.errstate(all="ignore"):
        ratio = float(w[1, 0]) / float(w[1, 1]) if w[1, 1] > 0 else float("nan")
        return 2.0 / math.log(ratio) if ratio > 1 else float("nan")


def outputs_mistake(o, own_weights) -> str | None:
    """和自己的 weights_1 比：转置了、不等于权重 × V；和它一致时 None（对不对由 outputs_explained 判断）。"""
    mine = own_weights @ V
    if fmt.close(o, mine, "hand_relation"):
        return None
    return "transposed" if fmt.close(o, mine.T, "hand_relation") else "not_own_outputs"


def _upstream_cause(w) -> str:
    """输出等于学生自己的 weights_1 × V、但权重错了：权重错在哪里。"""
    raw = Q @ K.T
    for wrong, cause in ((softmax_rows(raw), "错在打分没有除以 √2"),
                         (softmax_rows(raw * math.sqrt(D_K)), "错在打分乘了 √2，应该除以 √2"),
                         (softmax_rows(REF_SCORES, axis=0), "错在 softmax 按列做了，应按行做")):
        if fmt.close(w, wrong, "hand"):
            return cause
    if _sloppy(_implied_divisor(w)):
        return "错在 √2 取得太粗，√2 ≈ 1.414"
    return "错在上游的 weights_1（见 weights_1 的说明）"


def outputs_explained(o, own_weights=None) -> str | None:
    """outputs_1 为什么会被扣分（一句话，不含答案）；在 ±0.01 之内时 None。公开测试和评分说明共用。"""
    if fmt.close(o, REF_OUTPUTS, "hand"):
        return None
    if own_weights is None:
        return MISTAKES["transposed" if fmt.close(o, REF_OUTPUTS.T, "hand_relation") else "hand_off"]
    if fmt.close(o, own_weights @ V, "hand_relation") and not fmt.close(own_weights, REF_WEIGHTS, "hand"):
        return f"和你的 weights_1 一致；{_upstream_cause(own_weights)}（输出 = 权重 × V 这一步是对的）"
    return MISTAKES[outputs_mistake(o, own_weights) or "hand_off"]


def _optional_matrix(namespace, name):
    """上一步的答案（用来检查自洽）；还没填或格式不对时是 None（它自己的测试会说原因）。"""
    try:
        return array(namespace.get(name), name, (2, 2), returned=False)
    except FormatError:
        return None


def _no_mistake(name: str, key: str | None) -> None:
    expect(key is None, f"{name} {MISTAKES.get(key, '')}。")


def test_scores(namespace):
    _no_mistake("scores_1", scores_mistake(array(need(namespace, "scores_1"), "scores_1", (2, 2), returned=False)))


def test_weights(namespace):
    w = array(need(namespace, "weights_1"), "weights_1", (2, 2), returned=False)
    _no_mistake("weights_1", weights_mistake(w, _optional_matrix(namespace, "scores_1")))


def test_outputs(namespace):
    o = array(need(namespace, "outputs_1"), "outputs_1", (2, 2), returned=False)
    w = _optional_matrix(namespace, "weights_1")
    if w is None:  # 还没有权重可以对照：v_1、v_2 是单位向量，输出就是权重，每行之和为 1
        expect(fmt.close(o.sum(axis=1), [1.0, 1.0], "hand_relation"),
               "v_1、v_2 是单位向量 (1,0)、(0,1)：输出就是权重本身，每行之和应为 1")
    said = outputs_explained(o, w)
    expect(said is None, f"outputs_1 {said}。")


def _scaling_hint(w) -> str:
    """q = (1, 0)、键 (1, 0)、(0, 1)（d_k = 2）时的权重：打分的缩放错在哪里。"""
    for factor, key in ((1.0, "sa_unscaled"), (math.sqrt(D_K), "sa_times_sqrt"), (1.0 / D_K, "sa_over_d")):
        if np.allclose(w, softmax_rows(np.array([[factor, 0.0]])), atol=1e-3):
            return f"{MISTAKES[key]}。"
    return "打分除以 √d_k 了吗？"


def _shape(x):
    try:
        return tuple(fmt.describe(x).get("shape", ()))
    except Exception:  # noqa: BLE001
        return None


def out_and_weights(result, what, out_shape, w_shape, label="", nan_hint=""):
    """self_attention 的返回值 → (输出, 权重) 两个数组；形状正好对调时说“顺序反了”，而不只是“形状不对”。"""
    out, w = pair(result, what)
    if tuple(out_shape) != tuple(w_shape) and _shape(out) == tuple(w_shape) and _shape(w) == tuple(out_shape):
        raise CheckFailed(f"{what}：{MISTAKES['sa_swapped']}（第一个的形状 {tuple(w_shape)} 是权重的形状）")
    return (array(out, f"{label}输出", out_shape, nan_hint=nan_hint),
            array(w, f"{label}权重", w_shape, nan_hint=nan_hint))


def _reference(Q_, K_, V_, mask=None):
    s = Q_ @ np.swapaxes(K_, -1, -2) / math.sqrt(Q_.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    w = softmax_rows(s)
    return w @ V_, w


def test_self_attention(namespace):
    fn = need(namespace, "self_attention")
    name = fmt.borrowed(fn, namespace)
    if name is not None:
        raise CheckFailed(fmt.borrowed_message("self_attention", name))
    out, w = out_and_weights(call(fn, Q.copy(), K.copy(), V.copy(), what="self_attention(Q, K, V)"),
                             "self_attention(Q, K, V)", (2, 2), (2, 2))
    if not np.allclose(w.sum(axis=-1), 1.0):
        expect(not np.allclose(w.sum(axis=-2), 1.0), f"{MISTAKES['sa_columns']}。")
        raise CheckFailed("每一行的权重之和应为 1（softmax 按最后一维做）")
    expect(np.allclose(out, w @ V), "输出应是权重乘 V")
    q, keys = np.array([[1.0, 0.0]]), np.array([[1.0, 0.0], [0.0, 1.0]])
    _, w2 = out_and_weights(call(fn, q, keys, V.copy(), what="self_attention(q, K, V)"), "self_attention(q, K, V)",
                            (1, 2), (1, 2))
    expect(np.allclose(w2, [[0.6698, 0.3302]], atol=1e-3),
           f"q = (1, 0) 对键 (1, 0)、(0, 1) 的权重应约为 (0.670, 0.330)，得到 {np.round(w2, 4).tolist()}。"
           + _scaling_hint(w2))
    _distinct_sizes(fn)
    _batched_and_masked(fn)


def _distinct_sizes(fn):
    """n_q = 2、n_k = 5、d_k = 3、d_v = 4 各不相同：除以 √d_v、√n_k 的写法和返回顺序反了在这里才看得出。"""
    rng = np.random.default_rng(7)
    Qd, Kd, Vd = rng.normal(size=(2, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 4))
    what = "self_attention(Q, K, V)（n_q = 2、n_k = 5、d_k = 3、d_v = 4）"
    out, w = out_and_weights(call(fn, Qd.copy(), Kd.copy(), Vd.copy(), what=what), what, (2, 4), (2, 5),
                             label="n_k = 5、d_v = 4 时的")
    ref_out, ref_w = _reference(Qd, Kd, Vd)
    if not fmt.close(w, ref_w):
        raw = Qd @ Kd.T
        wrong_dim = any(fmt.close(w, softmax_rows(raw / math.sqrt(size))) for size in (4, 5, 2))
        raise CheckFailed(f"{what}：权重不对。" + (f"{MISTAKES['sa_wrong_dim']}。" if wrong_dim else
                                                  "检查打分 QK^T / √d_k（d_k 是 Q、K 的最后一维）和按行 softmax。"))
    expect(fmt.close(out, ref_out), f"{what}：权重正确，但输出不对（输出应是权重乘 V）")


def _batched_and_masked(fn):
    """有批维度 (2, 3, 4)，不加掩码和加 (3, 3) 的因果掩码（要靠广播）。"""
    causal = np.tril(np.ones((3, 3), dtype=bool))
    rng = np.random.default_rng(0)
    Q3, K3, V3 = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 5))
    plain = "self_attention(Q, K, V)（有批维度 (2, 3, 4)，无掩码）"
    try:
        result = call(fn, Q3.copy(), K3.copy(), V3.copy(), what=plain)
    except fmt.StudentCodeError as err:  # 二维都对、有批维度才出错：多半是 K.T
        text = str(err).lower()
        if "matmul" in text or "core dimension" in text or "aligned" in text:
            raise fmt.StudentCodeError(f"{err}。{MISTAKES['batch_transpose']}", err.error) from None
        raise
    _, w_plain = out_and_weights(result, "self_attention(Q, K, V)", (2, 3, 5), (2, 3, 3), label="有批维度时的")
    masked = "self_attention(Q, K, V, causal)（有批维度 (2, 3, 4)，因果掩码 (3, 3)）"
    out3, w3 = out_and_weights(call(fn, Q3.copy(), K3.copy(), V3.copy(), causal.copy(), what=masked),
                               "self_attention(Q, K, V, causal)", (2, 3, 5), (2, 3, 3),
                               label="有批维度 + 因果掩码时的", nan_hint=MISTAKES["mask_nan"])
    upper = w3[:, ~causal]
    if not np.all(upper == 0):
        expect(not np.allclose(w3, w_plain), f"{MISTAKES['mask_ignored']}。")
        raise CheckFailed("加了因果掩码后，右上角（mask 为 False、不许看的位置）的权重应恰好为 0："
                          "mask[..., i, j] 为 False 表示第 i 个查询不能看第 j 个键（True 表示“可以看”）")
    if not np.allclose(w3.sum(axis=-1), 1.0):
        expect(not np.allclose(w3, w_plain * causal), f"{MISTAKES['mask_after_softmax']}。")
    expect(np.allclose(out3[:, 0], V3[:, 0]), "因果掩码下第 1 个词只能看自己：它的输出应等于 v_1")


def _attention_weights(K, q):
    s = K @ q
    w = np.exp(s - s.max())
    return w / w.sum()


def _key_sets():
    """三组正交的单位键：坐标轴方向 (n = 3、d = 4)、最难的 n = d = 8、转过的（不沿坐标轴）。"""
    rotated = np.linalg.qr(np.random.default_rng(4).normal(size=(6, 6)))[0][:, :5].T
    return np.eye(4)[:3], np.eye(8), rotated


def test_copy_query(namespace):
    fn = need(namespace, "copy_query")
    for K_, a in zip(_key_sets(), (1, 5, 2)):
        n, d = K_.shape
        q = array(call(fn, K_, a, what=f"copy_query(K, {a})"), f"copy_query(K, {a})（n = {n}、d = {d}）", (d,))
        w = _attention_weights(K_, q)
        expect(w.argmax() == a, f"n = {n}：打分最大的应是 k_{a}（q 该指向哪里？），得到权重 {np.round(w, 3).tolist()}")
        expect(w[a] >= 0.99, f"n = {n}、d = {d}：k_{a} 的权重只有 {w[a]:.3f}，要求至少 0.99（q 的长度要多大？）")


def test_average_query(namespace):
    fn = need(namespace, "average_query")
    for K_, (a, b) in zip(_key_sets(), ((0, 2), (1, 6), (0, 3))):
        n, d = K_.shape
        q = array(call(fn, K_, a, b, what=f"average_query(K, {a}, {b})"),
                  f"average_query(K, {a}, {b})（n = {n}、d = {d}）", (d,))
        w = _attention_weights(K_, q)
        expect(abs(w[a] - w[b]) <= 0.01, f"n = {n}：k_{a}、k_{b} 的权重应几乎相等，得到 {w[a]:.3f} 和 {w[b]:.3f}")
        expect(w[a] + w[b] >= 0.99,
               f"n = {n}、d = {d}：k_{a}、k_{b} 的权重合计只有 {w[a] + w[b]:.3f}，要求至少 0.99（q 的方向和长度？）")


TESTS = {
    "ex1_scores": test_scores,
    "ex1_weights": test_weights,
    "ex1_outputs": test_outputs,
    "ex1_self_attention": test_self_attention,
    "ex4_copy_query": test_copy_query,
    "ex4_average_query": test_average_query,
}
