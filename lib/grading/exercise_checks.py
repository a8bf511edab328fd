"""练习（assignment `exercises`）每个自动评分测试单元格的检查：唯一的真相来源。

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

**确定性**：评分时 seed 固定为 ``DEFAULT_SEED``，输入只取决于 seed 和题目，所以同一份文件的分数只取决于文件本身。

``run_check(grade_id, namespace, seed=None)`` 在一个进程里跑探针 + 检查：全对时不返回任何东西，全错时抛出
AssertionError(说明)，部分正确时打印说明并返回得分（nbgrader 把测试单元格最后一个表达式的数值当作部分分）。
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
from lib.answer_format import FormatError

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
    return np.array2string(np.asarray(x, dtype=float), precision=4, suppress_small=True, separator=", ")


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
    lines = [f"✓ {label}（{p:g} 分）" if why is None else f"✗ {label}（{p:g} 分）：{why}" for label, p, why in parts]
    head = f"部分正确，{got:g} / {total:g} 分" if got else f"0 / {total:g} 分"
    return got / total, head + "。" + "；".join(lines)


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


# 练习 1 的手算答案（q、k、v 见讲义 §15 练习 1）
EX1_Q = np.array([[1.0, 0.0], [0.0, 1.0]])
EX1_K = np.array([[1.0, 1.0], [1.0, -1.0]])
EX1_V = np.array([[1.0, 0.0], [0.0, 1.0]])
EX1_SCORES = EX1_Q @ EX1_K.T / math.sqrt(2)
EX1_OUTPUTS, EX1_WEIGHTS = attention(EX1_Q, EX1_K, EX1_V)
HAND_TOL = fmt.TOLERANCES["hand"]["atol"]  # 手算答案保留两三位小数即可

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


def _hand_value(name, expected, hint, typical=()):
    """手算的数值（变量）：和答案相差不超过 HAND_TOL。typical：[(常见的错误答案, 原因)]，用来说出原因。"""

    @_checked
    def verify(data, seed):
        got = fmt.read_array(_field(data, "value"), name, expected.shape, returned=False)
        if not _close(got, expected, "hand"):
            why = next((w for value, w in typical if _close(got, value, "hand")), hint)
            raise Wrong(f"{name} 不对：得到 {_fmt(got)}。{why}")
        return 1.0, OK

    verify.__name__ = f"verify_{name}"
    return verify


SELF_ATTENTION_LABELS = {"2d": "二维输入、无掩码", "2d_mask": "二维输入 + 因果掩码", "batch": "有批维度、无掩码",
                         "batch_mask": "有批维度 + 掩码（每句不同的掩码、要广播的掩码）"}


def _attention_hint(w, spec) -> str:
    """权重不对时，最可能的原因。"""
    Q, K, V, mask = spec["Q"], spec["K"], spec["V"], spec["mask"]
    d_k = Q.shape[-1]
    same = lambda other: _close(w, other)  # noqa: E731
    if same(attention(Q * math.sqrt(d_k), K, V, mask)[1]):
        return "看起来打分没有除以 √d_k。"
    if same(attention(Q * d_k, K, V, mask)[1]):
        return "看起来打分乘了 √d_k，应该除以 √d_k。"
    if mask is not None and same(attention(Q, K, V)[1]):
        return "看起来掩码没有起作用：mask 为 False 的位置权重应为 0（softmax 之前填 −∞）。"
    if mask is not None and same(attention(Q, K, V, ~np.asarray(mask))[1]):
        return "看起来掩码用反了：mask 里 True 表示“可以看”。"
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_k)
    if mask is None and same(softmax(scores, axis=-2)):
        return "看起来 softmax 按列做了：应按最后一维（每一行）做，每行之和为 1。"
    return "检查打分 QK^T/√d_k、按行 softmax 和掩码。"


def _check_attention_case(spec, res, label):
    out_ref, w_ref = attention(spec["Q"], spec["K"], spec["V"], spec["mask"])
    out_d, w_d = fmt.read_pair(res, f"{label}：self_attention")
    nan_hint = ("某一行的位置全被挡住了？mask 里 True 表示“可以看”，是不是用反了？" if spec["mask"] is not None
                else "exp 溢出了？softmax 之前先减去每行的最大值")
    w = fmt.read_array(w_d, f"{label}：权重", w_ref.shape, nan_hint=nan_hint)
    out = fmt.read_array(out_d, f"{label}：输出", out_ref.shape, nan_hint=nan_hint)
    if not _close(w, w_ref):
        raise Wrong(f"{label}：注意力权重和参考答案不一致。{_attention_hint(w, spec)}")
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
        return "（有批维度时转置最后两维要用 np.swapaxes(K, -1, -2)；K.T 会把所有维度都倒过来）"
    return "（有批维度时：只对最后两维做矩阵运算和 softmax，前面的维度原样保留）"


@_checked
def verify_ex1_self_attention(data, seed):
    """四部分各 2 分：二维无掩码、二维 + 掩码、批维度无掩码、批维度 + 掩码。"""
    specs = probes.inputs_self_attention(seed)
    cases = _cases(data, expected=len(specs))

    def check_part(part):
        for spec, case in zip(specs, cases):
            if spec["part"] != part:
                continue
            label = f"Q 的形状 {spec['Q'].shape}" + ("" if spec["mask"] is None else f"、掩码 {spec['mask'].shape}")
            if "error" in case and part.startswith("batch"):
                raise Wrong(f"{label}：{_error_text(case['error'])}{_batch_error_hint(str(case['error']), spec)}")
            _check_attention_case(spec, _result(case, label), label)

    return _score([_part(SELF_ATTENTION_LABELS[p], 2, lambda p=p: check_part(p)) for p in probes.SELF_ATTENTION_PARTS])


def _verify_query(kind):
    """方向对（2 分）+ 长度够（1 分）。只看注意力权重，和值 V 无关：
    copy：k_a 的打分最大，权重至少 0.99；average：k_a、k_b 的打分相等且最大，两者权重合计至少 0.99、相差不超过 0.01。"""

    @_checked
    def verify(data, seed):
        specs = probes.inputs_orthonormal_keys(seed, 401 if kind == "copy" else 402)
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

        def length():
            for where, s, a, b in scores:
                w = softmax(s)
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


def _verify_formula(name, formula, typical):
    """typical：[(常见的错误公式, 原因)]。"""

    @_checked
    def verify(data, seed):
        specs = probes.inputs_variance(seed)
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
    specs = probes.inputs_monte_carlo(seed)
    cases = _cases(data, expected=len(specs))
    values = []
    for (d_k, sigma, n, s), case in zip(specs, cases):
        what = f"monte_carlo_variance({d_k}, {sigma}, {n}, seed={s})"
        values.append((what, d_k * sigma**4, fmt.read_number(_result(case, what), what)))
    if any(math.isclose(got, theory, rel_tol=1e-12) for _, theory, got in values):
        raise Wrong("结果恰好等于公式 d_k·σ⁴：这道题要的是真的抽随机数做实验，返回样本方差。")

    def accurate():
        for what, theory, got in values:
            if abs(got - theory) > 0.08 * theory:
                raise Wrong(f"{what} = {got:.4g}，离理论值 d_k·σ⁴ = {theory:.4g} 太远（超过 8%）。"
                            "是 q·k 的方差吗？每一维的标准差是 σ 吗（方差是 σ²）？")

    def uses_seed():
        if values[0][2] == values[1][2]:
            raise Wrong("同样的 d_k、σ 换一个 seed，结果一模一样：要用参数 seed 建随机数生成器 np.random.default_rng(seed)。")

    return _score([_part("结果接近 d_kσ⁴", 1, accurate), _part("用了参数 seed", 1, uses_seed)])


@_checked
def verify_ex3_equivariance(data, seed):
    """不加掩码时差为 0（3 分）+ 加因果掩码时差等于参考值（2 分）。
    “总是返回 0”在不加掩码时也是 0：所以前一部分只有在加掩码时返回的不全是 0（函数真的在算）时才给分；
    加掩码时出错（例如自己写的注意力不支持掩码）不算“返回 0”。"""
    specs = probes.inputs_equivariance(seed)
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
                    hint = "加因果掩码后等变性不成立，差不是 0：causal 传给 sa_numpy 了吗？"
                elif _close(value, float(np.mean(np.abs(diff)))):
                    hint = "这是平均值：要的是最大的差 max|SA(PX) − P·SA(X)|。"
                elif _close(value, float(np.max(np.abs(diff_inv)))):
                    hint = ("置换的方向反了：题目的 PX 是 X[perm]（第 i 行是 X 的第 perm[i] 行，P = np.eye(n)[perm]）；"
                            "np.eye(n)[:, perm] @ X 是 X[np.argsort(perm)]，是反方向的置换。")
                mine, ref = fmt.shown(value, want)
                raise Wrong(f"{label}：差应为 {ref}（加因果掩码后等变性不成立），你算出 {mine}。{hint}")

    return _score([_part("不加掩码：差为 0", 3, unmasked), _part("加因果掩码：差等于参考值", 2, causal)])


EX5_HINTS = {
    "q_tilde_a": [(rotate_2d([1.0, 0.0], -math.pi / 3), "转反了方向：R(φ) 是逆时针旋转。"),
                  (rotate_2d([1.0, 0.0], math.pi / 6), "位置 m = 2 要转 mθ = π/3。")],
    "k_tilde_a": [(rotate_2d([1.0, 0.0], -math.pi / 6), "转反了方向：R(φ) 是逆时针旋转。")],
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
    specs = probes.inputs_rotate_2d(seed)
    cases = _cases(data, expected=len(specs))
    for (x, angle), case in zip(specs, cases):
        what = f"rotate_2d({_fmt(x)}, {angle:.4f})"
        got = fmt.read_array(_result(case, what), what, (2,))
        want = rotate_2d(x, angle)
        if not _close(got, want):
            hint = "（转反了方向？）" if _close(got, rotate_2d(x, -angle)) else ""
            raise Wrong(f"{what}：{_vs(got, want)}{hint}。")
    return 1.0, OK


@_checked
def verify_ex5_rope(data, seed):
    """打分只依赖 m − n（2 分）+ 配对方式（2 分）+ base = 10000 时和参考一致（1 分）+ 用参数 base（1 分）。"""
    spec = probes.inputs_rope(seed)
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


PARAM_COUNT_PARTS = [("可学习的位置嵌入（GPT-2 small 等）", (0, 1)), ("正弦编码和不加位置（都没有参数）", (2, 3)),
                     ("RoPE（LLaMA-7B 的形状等，没有参数）", (4, 5))]
FINAL_LN_HINT = ("少了最后一个层归一化的 2d：讲义 §15 的答案用 12d² + 13d 估算、不算它，本题要求算上"
                 "（GPT-2 small 恰好 124,439,808 个就含这 2d）。")


@_checked
def verify_ex6_param_count(data, seed):
    """按位置编码分三部分，各 1.5 分；最后的层归一化 2d 另算 1.5 分（共 6 分）。
    每部分有一组共享输出层、一组不共享。按讲义 §15 的 12d² + 13d 估算、只差最后的 2d 的答案，三个部分都算对，
    只丢“最后的层归一化”这 1.5 分。"""
    specs = probes.inputs_param_count(seed)
    cases = _cases(data, expected=len(specs))
    missing_ln: list = []
    exact: list = []

    def check(i):
        V, d, n_layers, max_len, tied, pos = spec = specs[i]
        label = "count_params(V={}, d={}, n_layers={}, max_len={}, tied={}, positions={!r})".format(*spec)
        got = fmt.read_integer(_result(cases[i], label), label)
        want = count_params(*spec)
        if got == want - 2 * d:
            missing_ln.append(label)
            return
        if got == want:
            exact.append(label)
        else:
            diff = got - want
            hint = {max_len * d: "只有可学习的位置嵌入（positions='learned'）才有 max_len·d 个参数。",
                    -max_len * d: "可学习的位置嵌入有 max_len·d 个参数。",
                    V * d: "输出层和词嵌入共享（tied=True）时不另算。",
                    -V * d: "输出层不和词嵌入共享（tied=False）时要另算 V·d。"}.get(diff, "")
            raise Wrong(f"{label} = {got:,}，应为 {want:,}。{hint}")

    parts = [_part(label, 1.5, lambda idx=idx: [check(i) for i in idx]) for label, idx in PARAM_COUNT_PARTS]

    def final_ln():
        if missing_ln:
            raise Wrong(f"{missing_ln[0]} 比应有的少 2d。{FINAL_LN_HINT}")
        if not exact:
            raise Wrong("没有一组完全正确，看不出有没有算最后的层归一化。")

    parts.append(_part("最后的层归一化（γ、β：2d 个参数）", 1.5, final_ln))
    return _score(parts)


def _compute_cases(data, specs) -> list:
    cases = _field(data, "cases")
    if isinstance(cases, dict) and "error" in cases:
        raise Wrong(_error_text(cases["error"]))
    if not isinstance(cases, list) or len(cases) != len(specs):
        raise Wrong(f"应有 {len(specs)} 组结果")
    return cases


def _lecture_value(data, name, want, kind, hint):
    """讲义 §15 练习 7 的问题本身（一个变量），按 kind 的容差。"""
    desc = _field(data, "value")
    got = fmt.read_number(desc, name, returned=False)
    if not _close(got, want, kind):
        raise Wrong(f"{name}：{_vs(got, want, kind)}。{hint}")


@_checked
def verify_ex7_crossover(data, seed):
    """crossover_length(d)（1.5 分）+ 讲义的问题 crossover_4096（0.5 分）。"""
    specs = probes.inputs_compute(seed)

    def function():
        for (_, d), case in zip(specs, _compute_cases(data, specs)):
            got = fmt.read_number(_result(case, f"crossover_length({d})"), f"crossover_length({d})")
            if not _close(got, 6 * d):
                raise Wrong(f"crossover_length({d})：{_vs(got, 6 * d)}（注意力矩阵 2n²d 和线性部分 12nd² 相等时）。")

    return _score([_part("crossover_length(d)", 1.5, function),
                   _part("crossover_4096（d = 4096 时 n 超过多少）", 0.5, lambda: _lecture_value(
                       data, "crossover_4096", 6 * 4096, "computed", "n > 6d 时注意力矩阵占大头。"))])


@_checked
def verify_ex7_share(data, seed):
    """attention_share(n, d)（1.5 分）+ 讲义的问题 share_128k（0.5 分）。占比的容差是 answer_format 的 "share"。"""
    specs = probes.inputs_compute(seed)

    def function():
        for (n, d), case in zip(specs, _compute_cases(data, specs)):
            what = f"attention_share({n}, {d})"
            got = fmt.read_number(_result(case, what), what)
            want = n / (n + 6 * d)
            if not _close(got, want, "share"):
                hint = "（这是比值 n/6d，不是占比。）" if _close(got, n / (6 * d)) else ""
                raise Wrong(f"{what}：{_vs(got, want, 'share')}{hint}。占比是 0 到 1 之间的小数（误差不超过 0.005）。")

    return _score([_part("attention_share(n, d)", 1.5, function),
                   _part("share_128k（d = 4096、n = 131072 时的占比）", 0.5, lambda: _lecture_value(
                       data, "share_128k", 131072 / (131072 + 6 * 4096), "share",
                       "占比 = 比值 / (1 + 比值)，比值 n/6d ≈ 5.33；写成 0 到 1 之间的小数，例如 0.84。"))])


@_checked
def verify_ex8_pad_mask(data, seed):
    specs = probes.inputs_pad_mask(seed)
    cases = _cases(data, expected=len(specs))
    rng = np.random.default_rng([seed & 0xFFFFFFFF, 802])
    for i, (pad, case) in enumerate(zip(specs, cases), 1):
        B, T = pad.shape
        m = fmt.read_torch_bool_mask(_result(case, f"第 {i} 批"), f"key_padding_mask（第 {i} 批）", ndim=4)
        try:
            np.broadcast_shapes(m.shape, (B, 1, T, T))
        except ValueError:
            raise Wrong(f"第 {i} 批：形状 {tuple(m.shape)} 不能广播到 (B, h, T, T) = ({B}, h, {T}, {T})。") from None
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
                elif np.array_equal(rows, np.broadcast_to(~pad[b][None, :], (T, T))):
                    hint = "这个掩码用反了：True 表示“可以看”，真实词元才是 True。"
                raise Wrong(f"第 {i} 批第 {b} 句（{L} 个真实词、{T - L} 个填充）：真实词的编码器输出和不填充时不同，"
                            f"说明它们还在关注填充位置或被挡住了真实的词。{hint}")
    return 1.0, OK


KV_OFF_BY_ONE = ("讲义的 n + m 把最后一个新词也算了进去；但它生成之后不必再送进模型（已经没有下一个词要预测），"
                 "所以参考的生成循环一共处理 n + m − 1 个位置（见 notebook 10 演示 4）。")


@_checked
def verify_ex11_counts(data, seed):
    """不用缓存（1.5 分）+ 用缓存（1.5 分）。"""
    specs = probes.inputs_kv_counts(seed)

    def check(key, name, formula, hint):
        cases = _cases(data, key, len(specs))
        for (n, m), case in zip(specs, cases):
            what = f"{name}({n}, {m})"
            got, want = fmt.read_integer(_result(case, what), what), formula(n, m)
            if got != want:
                raise Wrong(f"{what} = {got:,}，应为 {want:,}。{hint(n, m, got)}")

    def hint_without(n, m, got):
        if got == m * n:
            return "第 i 次生成要重算 n + i − 1 个位置：序列在变长。"
        return "第 i 次生成要重算 n + i − 1 个位置（i = 1, …, m）。"

    def hint_with(n, m, got):
        if got == n + m:
            return KV_OFF_BY_ONE
        return "提示的 n 个位置算一次；之后每生成一个词，只把这个新词送进模型（最后一个新词不必再送）。"

    return _score([
        _part("不用缓存", 1.5, lambda: check("without", "positions_without_cache", lambda n, m: m * n + m * (m - 1) // 2,
                                         hint_without)),
        _part("用 KV 缓存", 1.5, lambda: check("with", "positions_with_cache", lambda n, m: n + m - 1, hint_with))])


@_checked
def verify_ex11_cached_generation(data, seed):
    """生成的词元正确（3 分）+ 用了 KV 缓存（3 分，词元正确时才检查）。"""
    specs = probes.inputs_generation(seed)
    cases = _cases(data, expected=len(specs))

    def tokens():
        for i, (spec, case) in enumerate(zip(specs, cases), 1):
            prompt, m = spec["prompt"], spec["m"]
            B, n = prompt.shape
            res = _result(case, f"第 {i} 组")
            if not isinstance(res, dict) or not isinstance(res.get("calls"), list):
                raise Wrong(f"第 {i} 组：记录的数据格式不对")
            got = fmt.read_array(res.get("tokens"), f"generate_cached（第 {i} 组，B = {B}、n = {n}、m = {m}）",
                                 (B, n + m))
            if not np.array_equal(got, greedy_reference(spec["model_seed"], prompt, m)):
                raise Wrong(f"第 {i} 组：生成的词元和不用缓存的贪心生成不同。检查：每步取 logits[:, -1, :] 最大的词，"
                            "提示只送进模型一次，之后每步只送最新的一个词，并且每次都传同一个 kv_cache。")

    def cache():
        try:
            tokens()
        except (Wrong, FormatError):
            raise Wrong("词元不对时不检查缓存的用法。") from None
        for i, (spec, case) in enumerate(zip(specs, cases), 1):
            n, m, calls = spec["prompt"].shape[1], spec["m"], case["result"]["calls"]
            try:
                total = sum(int(c["positions"]) for c in calls)
                used = all(bool(c["cache"]) for c in calls)
            except (TypeError, KeyError, ValueError):
                raise Wrong(f"第 {i} 组：记录的调用信息格式不对") from None
            if not calls or not used or total > n + m:
                raise Wrong(f"第 {i} 组：模型一共处理了 {total} 个位置（用缓存时应是 n + m − 1 = {n + m - 1}）："
                            "每一步都要把同一个 kv_cache 传给模型，提示只送一次，之后只送入新的词。")

    return _score([_part("生成的词元正确", 3, tokens), _part("用了 KV 缓存", 3, cache)])


# ----------------------------------------------------------------------------
# grade_id → Check（points 和 source/ 里测试单元格的 nbgrader points 一致）
# ----------------------------------------------------------------------------

_NB1, _NB2, _NB3 = "01_attention_by_hand", "02_scaling_and_equivariance", "03_positions_and_rope"
_NB4, _NB5 = "04_blocks_and_cost", "05_masks_and_kv_cache"

CHECKS: dict[str, Check] = {c.grade_id: c for c in [
    Check("ex1_scores", _NB1, 2, _hand_value(
        "scores_1", EX1_SCORES, "打分是 q_i·k_j 除以 √d_k = √2。",
        [(EX1_Q @ EX1_K.T, "没有除以 √d_k = √2。"), (EX1_Q @ EX1_K.T * math.sqrt(2), "乘了 √2，应该除以 √2。")])),
    Check("ex1_weights", _NB1, 2, _hand_value(
        "weights_1", EX1_WEIGHTS, "每一行做 softmax，每行之和为 1。",
        [(softmax(EX1_Q @ EX1_K.T), "用的是没有缩放的打分：先除以 √2 再做 softmax。"),
         (softmax(EX1_SCORES, axis=0), "softmax 应该按行做（每一行之和为 1），不是按列。")])),
    Check("ex1_outputs", _NB1, 2, _hand_value(
        "outputs_1", EX1_OUTPUTS, "第 i 行是 o_i = Σ_j α_ij v_j。",
        [(EX1_OUTPUTS.T, "看起来转置了：第 i 行应是第 i 个词的输出 o_i = Σ_j α_ij v_j。")])),
    Check("ex1_self_attention", _NB1, 8, verify_ex1_self_attention),
    Check("ex4_copy_query", _NB1, 3, _verify_query("copy")),
    Check("ex4_average_query", _NB1, 3, _verify_query("average")),
    Check("ex2_variance", _NB2, 2, _verify_formula(
        "score_variance", lambda d, s: d * s**4,
        [(lambda d, s: d * s**2, "这是 d_k·σ²：每一项 q_j k_j 的方差是 E[q_j²]E[k_j²] = σ⁴。")])),
    Check("ex2_divisor", _NB2, 2, _verify_formula(
        "score_divisor", lambda d, s: s**2 * math.sqrt(d),
        [(lambda d, s: math.sqrt(d), "忘了 σ：要除以打分的标准差 √(d_k σ⁴) = σ²√d_k。"),
         (lambda d, s: s * math.sqrt(d), "是 σ²√d_k，不是 σ√d_k（方差是 d_kσ⁴）。"),
         (lambda d, s: d * s**4, "这是方差：要除以标准差（方差的平方根）。")])),
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


def run_check(grade_id: str, namespace: dict, seed: int | None = None) -> float | None:
    """隐藏测试调用的入口：全对时返回 None（nbgrader 给满分）；全错时抛出 AssertionError(中文说明)；
    部分正确时打印说明、返回得分（单元格最后一个表达式的数值，nbgrader 把它当作部分分）。"""
    if grade_id not in CHECKS:
        raise KeyError(f"未知的 grade_id {grade_id!r}")
    fraction, message = grade(grade_id, namespace, seed)
    if fraction >= 1.0:
        return None
    if fraction <= 0.0:
        raise AssertionError(f"[{grade_id}] {message}")
    print(f"[{grade_id}] {message}")
    return round(CHECKS[grade_id].points * fraction, 4)
