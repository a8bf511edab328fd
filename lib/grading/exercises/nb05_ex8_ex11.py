"""notebook 05（05_masks_and_kv_cache.ipynb）= 练习 8（填充掩码）和练习 11（KV 缓存）：
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
# 练习 8：填充掩码（加在键的列上）
# ----------------------------------------------------------------------------


def inputs_pad_mask(seed: int) -> list[np.ndarray]:
    """(B, T) 的布尔数组，True = 真实词元；右侧填充；每批里至少一句没有填充、一句有填充。"""
    rng = _rng(seed, 801)
    out = []
    for _ in range(2):
        B, T = int(rng.integers(3, 6)), int(rng.integers(5, 10))
        lengths = rng.integers(1, T + 1, size=B)
        lengths[0], lengths[1] = T, int(rng.integers(1, T - 1))
        out.append(np.arange(T)[None, :] < lengths[:, None])
    return out


@_guarded
def probe_ex8_pad_mask(namespace, seed):
    import torch

    fn = _get(namespace, "key_padding_mask")
    cases = [(torch.from_numpy(pm.copy()),) for pm in inputs_pad_mask(seed)]
    return {"cases": _call_cases(fn, cases)}


# ----------------------------------------------------------------------------
# 练习 11：KV 缓存
# ----------------------------------------------------------------------------


def inputs_kv_counts(seed: int) -> list[tuple]:
    rng = _rng(seed, 1101)
    cases = [(10, 5), (1, 1), (3, 6)]
    for _ in range(3):
        cases.append((int(rng.integers(1, 5000)), int(rng.integers(1, 3000))))
    return cases


@_guarded
def probe_ex11_counts(namespace, seed):
    without, with_cache = _get(namespace, "positions_without_cache"), _get(namespace, "positions_with_cache")
    cases = inputs_kv_counts(seed)
    return {"without": _call_cases(without, cases), "with": _call_cases(with_cache, cases)}


class _LMOutput:
    def __init__(self, logits):
        self.logits = logits
        self.loss = None


def tiny_lm_weights(seed: int, vocab_size: int = 13, d: int = 16, max_len: int = 64) -> dict:
    """TinyLM 的权重（NumPy，float64）。评分进程用它和本文件的 tiny_lm_logits 算参考答案，不必导入 torch。"""
    rng = np.random.default_rng(int(seed) & 0x7FFFFFFF)
    w = {"tok": rng.normal(size=(vocab_size, d)), "pos": 0.5 * rng.normal(size=(max_len, d))}
    for name in ("w_q", "w_k", "w_v"):
        w[name] = rng.normal(size=(d, d)) / math.sqrt(d)
    w["w_out"] = rng.normal(size=(d, vocab_size))
    return w


_TINY_LM_CLASS = None


def _tiny_lm_class():
    global _TINY_LM_CLASS
    if _TINY_LM_CLASS is not None:
        return _TINY_LM_CLASS
    import torch

    class _TinyLM(torch.nn.Module):
        def __init__(self, seed: int, vocab_size: int = 13, d: int = 16, max_len: int = 64):
            super().__init__()
            self.vocab_size, self.max_len = vocab_size, max_len
            for name, w in tiny_lm_weights(seed, vocab_size, d, max_len).items():
                setattr(self, name, torch.from_numpy(w))
            self.calls: list[dict] = []

        def new_kv_cache(self) -> list:
            return [{}]

        def forward(self, idx, targets=None, kv_cache=None, **unused):
            idx = torch.as_tensor(idx)
            B, T = idx.shape
            layer = None if kv_cache is None else kv_cache[0]
            past = 0 if layer is None or layer.get("k") is None else layer["k"].size(1)
            self.calls.append({"positions": int(T), "past": int(past), "cache": kv_cache is not None})
            if past + T > self.max_len:
                raise ValueError(f"序列太长：{past + T} > {self.max_len}")
            x = self.tok[idx] + self.pos[past:past + T]  # (B, T, d)
            q, k, v = x @ self.w_q, x @ self.w_k, x @ self.w_v
            if layer is not None:
                if past:
                    k, v = torch.cat([layer["k"], k], dim=1), torch.cat([layer["v"], v], dim=1)
                layer["k"], layer["v"] = k, v
            scores = q @ k.transpose(1, 2) / math.sqrt(q.size(-1))  # (B, T, past+T)
            allowed = torch.ones(T, past + T, dtype=torch.bool).tril(diagonal=past)
            scores = scores.masked_fill(~allowed, float("-inf"))
            h = x + torch.softmax(scores, dim=-1) @ v
            return _LMOutput(h @ self.w_out)

    _TINY_LM_CLASS = _TinyLM
    return _TINY_LM_CLASS


def TinyLM(seed: int, vocab_size: int = 13, d: int = 16, max_len: int = 64):
    """一个极小的、确定性的解码器（torch.nn.Module），接口和 lib.transformer.TransformerLM 一样：

    ``model(idx, kv_cache=cache).logits``（(B, T, V)）和 ``model.new_kv_cache()``。
    一层单头因果自注意力 + 可学习位置；有缓存时位置从缓存的长度接着数。
    它记下每次调用处理了几个位置（``model.calls``），用来判断学生是否真的用了缓存。
    """
    return _tiny_lm_class()(seed, vocab_size, d, max_len)


def inputs_generation(seed: int) -> list[dict]:
    rng = _rng(seed, 1102)
    cases = []
    for _ in range(2):
        B, n, m = int(rng.integers(1, 4)), int(rng.integers(2, 7)), int(rng.integers(3, 9))
        cases.append({"model_seed": int(rng.integers(0, 2**31)), "prompt": rng.integers(0, 13, size=(B, n)), "m": m})
    return cases


@_guarded
def probe_ex11_cached_generation(namespace, seed):
    import torch

    fn = _get(namespace, "generate_cached")
    out = []
    for case in inputs_generation(seed):
        model = TinyLM(case["model_seed"])
        prompt = torch.as_tensor(case["prompt"].copy(), dtype=torch.long)
        try:
            with torch.no_grad():
                tokens = quiet_call(fn, model, prompt, case["m"])
            out.append({"result": {"tokens": describe(tokens), "calls": list(model.calls)}})
        except BaseException as err:  # noqa: BLE001
            if isinstance(err, KeyboardInterrupt):
                raise
            out.append(_error(err, fn))
    return {"cases": out}


PROBES.update({
    "ex8_pad_mask": probe_ex8_pad_mask,
    "ex11_counts": probe_ex11_counts,
    "ex11_cached_generation": probe_ex11_cached_generation,
})

# ==== 检查：在干净的评分进程里运行 ====
# 典型错误的说法：和公开测试同一份（lib/public_tests/nb05_ex8_ex11.py）
from lib.public_tests.nb05_ex8_ex11 import MISTAKES  # noqa: E402

def layer_norm(x, eps=1e-5):
    """lib.transformer.layer_norm 的 NumPy 版（不含 γ、β；eps 和 lib 的相同，tests/test_exercises.py 核对，make artifact 不改它）。"""
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
    """TinyLM 的前向（NumPy 版，不用缓存）：整个序列一次送进去，返回 (B, T, V) 的 logits。"""
    idx = np.asarray(idx)
    T = idx.shape[1]
    x = w["tok"][idx] + w["pos"][:T]
    out, _ = attention(x @ w["w_q"], x @ w["w_k"], x @ w["w_v"], np.tril(np.ones((T, T), dtype=bool)))
    return (x + out) @ w["w_out"]


def greedy_reference(model_seed: int, prompt, m: int) -> list:
    """不用缓存的贪心生成（每步把整个序列送进 TinyLM(model_seed)）：可信的参考。"""
    w = tiny_lm_weights(model_seed)
    idx = np.asarray(prompt, dtype=np.int64)
    for _ in range(m):
        nxt = tiny_lm_logits(w, idx)[:, -1, :].argmax(axis=-1)
        idx = np.concatenate([idx, nxt[:, None]], axis=1)
    return idx.tolist()



@_checked
def verify_ex8_pad_mask(data, seed):
    specs = inputs_pad_mask(seed)
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
                    hint = f"{MISTAKES['pad_rows']}：pad_mask[:, None, None, :]。"
                elif np.array_equal(rows, np.broadcast_to(~pad[b][None, :], (T, T))):
                    hint = "这个掩码用反了：True 表示“可以看”，真实词元才是 True。"
                raise Wrong(f"第 {i} 批第 {b} 句（{L} 个真实词、{T - L} 个填充）：真实词的编码器输出和不填充时不同，"
                            f"说明它们还在关注填充位置或被挡住了真实的词。{hint}")
    return 1.0, OK


# 用 KV 缓存时的两种数法（都给满分）：生成循环真正处理的位置 n + m − 1（参考答案，和 lib.transformer.generate、
# notebook 10 演示 4 一致），和讲义 §15 的 n + m（把第 m 个新词也送进模型，算出并缓存它的 K、V）
KV_READINGS = {"loop": lambda n, m: n + m - 1, "lecture": lambda n, m: n + m}
KV_LECTURE_NOTE = ("用 KV 缓存的计数你写的是讲义的 n + m，和 n + m − 1 一样得满分。两者只差最后一个新词："
                   "n + m 把第 m 个新词也送进了模型，算出并缓存它的 K、V（如果还要接着生成，下一步就要用到它们）；"
                   "“生成 m 个词”的循环在得到第 m 个新词之后就结束了，它本身只需要处理 n + m − 1 个位置"
                   "（lib.transformer.generate、notebook 10 演示 4 就是这样数的）。")


def hint_with_cache(n: int, m: int, got: int) -> str:
    """用 KV 缓存的计数答错时，最可能的原因（got 是学生的数，n、m 是这一组的提示长度和新词个数）。"""
    if m > 1 and got == m * n + m * (m - 1) // 2:
        return "这是不用缓存时的数（每一步重新送进整个序列）：用了缓存，之前位置的 K、V 已经存着，每一步只送进最新的一个词。"
    if m > 1 and got in (m * n + m, m * n + m - 1):
        return f"看起来每一步都把提示的 n 个位置重新送进了模型：{MISTAKES['prompt_once']}。"
    if m > 1 and got == m * n:
        return f"看起来每一步都送进了 n 个位置：{MISTAKES['prompt_once']}。"
    if got in (m, m - 1):
        return "只数了新词，忘了提示：提示的 n 个位置也要送进模型一次（它们的 K、V 要先算出来放进缓存）。"
    if got == n:
        return "只数了提示：之后每生成一个词，还要把这个新词送进模型（最后一个新词可以不送）。"
    return "提示的 n 个位置送进模型一次；之后每生成一个词，只把这个新词送进模型（最后一个新词送不送都算对）。"


@_checked
def verify_ex11_counts(data, seed):
    """不用缓存（1.5 分）+ 用缓存（1.5 分）。用缓存时 n + m − 1（生成循环处理的位置）和讲义的 n + m 都给满分。"""
    specs = inputs_kv_counts(seed)
    reading = {}

    def values(key, name):
        cases = _cases(data, key, len(specs))
        return [(n, m, f"{name}({n}, {m})", fmt.read_integer(_result(case, f"{name}({n}, {m})"), f"{name}({n}, {m})"))
                for (n, m), case in zip(specs, cases)]

    def without():
        for n, m, what, got in values("without", "positions_without_cache"):
            want = m * n + m * (m - 1) // 2
            if got != want:
                hint = ("第 i 次生成要重算 n + i − 1 个位置：序列在变长。" if got == m * n
                        else "第 i 次生成要重算 n + i − 1 个位置（i = 1, …, m）。")
                raise Wrong(f"{what} = {got:,}，应为 {want:,}。{hint}")

    def with_cache():
        got = values("with", "positions_with_cache")
        for name, formula in KV_READINGS.items():  # 每一组都符合同一种数法才算对
            if all(value == formula(n, m) for n, m, _, value in got):
                reading["with"] = name
                return
        wrong = [(n, m, what, value) for n, m, what, value in got if value not in (n + m - 1, n + m)]
        if not wrong:
            raise Wrong("有的组是 n + m − 1、有的组是 n + m：两种数法都算对，但每一组都要用同一种。")
        n, m, what, value = wrong[0]
        raise Wrong(f"{what} = {value:,}，应为 {n + m - 1:,}（按讲义把最后一个新词也送进模型，是 {n + m:,}；两种都算对）。"
                    f"{hint_with_cache(n, m, value)}")

    fraction, message = _score([_part("不用缓存", 1.5, without), _part("用 KV 缓存", 1.5, with_cache)])
    if reading.get("with") == "lecture":
        message += KV_LECTURE_NOTE
    return fraction, message


@_checked
def verify_ex11_cached_generation(data, seed):
    """生成的词元正确（3 分）+ 用了 KV 缓存（3 分，词元正确时才检查）。"""
    specs = inputs_generation(seed)
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
                raise Wrong(f"第 {i} 组：模型一共处理了 {total} 个位置（用缓存时应不超过 n + m = {n + m}；参考答案是 n + m − 1 = {n + m - 1}）："
                            "每一步都要把同一个 kv_cache 传给模型，提示只送一次，之后只送入新的词。")

    return _score([_part("生成的词元正确", 3, tokens), _part("用了 KV 缓存", 3, cache)])


NOTEBOOK = "05_masks_and_kv_cache"
EXERCISES = (8, 11)  # 讲义 §15 的练习编号：grade_id 是 ex8_*、ex11_*；模块名 nb05_ex8_ex11 = notebook 05 + 这些练习
CHECKS = [
    Check("ex8_pad_mask", NOTEBOOK, 6, verify_ex8_pad_mask),
    Check("ex11_counts", NOTEBOOK, 3, verify_ex11_counts),
    Check("ex11_cached_generation", NOTEBOOK, 6, verify_ex11_cached_generation),
]
