"""练习（assignment `exercises`）的探针：在学生的内核里调用学生写的函数、读取学生的变量，只记录数据。

契约（见 lib/grading/exercise_checks.py）：
- 本文件只导入标准库、numpy、torch（只在需要时才导入，这样不用 torch 的 notebook 评分时不必加载它），
  以及 ``lib.answer_format.describe``（把任意返回值变成纯 JSON 的无损描述；格式规则本身由干净的评分进程执行）。
  评分流水线把本文件的源码送进学生的内核（学生的单元格都跑完之后），然后对每个自动评分的
  测试单元格调用 ``PROBES[grade_id](namespace, seed)``。
- 输入是固定的：seed 在评分时是常数（exercise_checks.DEFAULT_SEED），每道题另有自己的 salt 和几组固定的
  “最坏情况”，所以同一份文件在任何人、任何一次运行、任何机器上得到同样的输入和同样的分数。
- 探针调用学生的名字，把结果记成 ``describe`` 的描述（类型、dtype、形状、数值）；出错时记录
  ``{"error": "NameError: ..."}``，从不抛出异常。
- 探针不做任何比较：学生可能改过 numpy（例如 np.allclose），比较一律在干净的进程里由
  exercise_checks.py 的 verify 完成，它用同一个 seed 重新生成输入、用可信的参考实现算出答案。
- 学生的代码可能打印、发出警告或写日志：每次调用都静音，免得 nbgrader 把 stderr 当成失败。

输入生成函数（``inputs_*``）和 ``tiny_lm_weights`` 也被 verify 导入，用来在干净的进程里重建同样的输入
（评分进程只用 NumPy，不导入 torch）。
"""
from __future__ import annotations

import json
import math

import numpy as np

from lib.answer_format import describe, has_own_code, silenced

__all__ = ["PROBES", "TinyLM", "quiet_call", "tiny_lm_weights"]


# ----------------------------------------------------------------------------
# 工具：静音地调用学生代码；把结果转换成纯数据
# ----------------------------------------------------------------------------


def quiet_call(fn, *args, **kwargs):
    """调用 fn，吞掉它的 print、警告和日志（nbgrader 把测试单元格里的任何 stderr 输出记为 0 分）。"""
    with silenced():
        return fn(*args, **kwargs)


def _error(err: BaseException, fn=None) -> dict:
    text = f"{type(err).__name__}: {err}"
    if isinstance(err, NotImplementedError) and fn is not None:
        try:
            if has_own_code(fn):  # 写了答案，却在 return 之前执行到了 raise NotImplementedError()
                text = "LeftoverRaise: " + text
        except Exception:  # noqa: BLE001
            pass
    return {"error": text[:500]}


def _get(namespace: dict, name: str):
    if name not in namespace:
        raise NameError(f"没有找到 {name}（运行过答题单元格了吗？名字拼对了吗？）")
    return namespace[name]


def _guarded(probe):
    """探针本身也从不抛出异常：任何意外都变成 {"error": ...}。"""

    def wrapper(namespace: dict, seed: int) -> dict:
        try:
            data = probe(namespace, int(seed))
            json.dumps(data)  # 必须是纯 JSON 数据
            return data
        except BaseException as err:  # noqa: BLE001  学生代码可能抛出任何东西（包括 SystemExit）
            if isinstance(err, KeyboardInterrupt):
                raise
            return _error(err)

    wrapper.__name__ = getattr(probe, "__name__", "probe")
    wrapper.__doc__ = probe.__doc__
    return wrapper


def _call_cases(fn, cases, convert=describe) -> list:
    """对每组参数调用学生的函数；单组出错只记在那一组里。"""
    out = []
    for args in cases:
        try:
            out.append({"result": convert(quiet_call(fn, *args))})
        except BaseException as err:  # noqa: BLE001
            if isinstance(err, KeyboardInterrupt):
                raise
            out.append(_error(err, fn))
    return out


def _rng(seed: int, salt: int) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, salt])


# ----------------------------------------------------------------------------
# 练习 1：手算自注意力；NumPy 的 self_attention(Q, K, V, mask=None)
# ----------------------------------------------------------------------------

# 四个部分（exercise_checks 给每部分 2 分）：二维无掩码、二维 + 掩码、批维度无掩码、批维度 + 掩码
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
    return {"cases": _call_cases(fn, args)}


def _variable_probe(name):
    @_guarded
    def probe(namespace, seed):
        return {"value": describe(_get(namespace, name))}

    probe.__name__ = f"probe_{name}"
    return probe


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


# ----------------------------------------------------------------------------
# 练习 6、7：参数量和计算量
# ----------------------------------------------------------------------------

GPT2_SMALL = (50257, 768, 12, 1024, True, "learned")
LLAMA_LIKE = (32000, 4096, 32, 4096, False, "rope")


def inputs_param_count(seed: int) -> list[tuple]:
    """三部分（exercise_checks 各给 2 分），每部分一组共享输出层、一组不共享：
    可学习的位置表（GPT-2 small + 随机）、正弦和不加位置（随机）、RoPE（LLaMA-7B 的形状 + 随机）。"""
    rng = _rng(seed, 601)

    def shape(tied, pos):
        return (int(rng.integers(10, 60000)), 8 * int(rng.integers(1, 200)), int(rng.integers(1, 40)),
                int(rng.integers(16, 9000)), tied, pos)

    return [GPT2_SMALL, shape(False, "learned"), shape(True, "sinusoidal"), shape(False, "none"),
            LLAMA_LIKE, shape(True, "rope")]


@_guarded
def probe_ex6_param_count(namespace, seed):
    fn = _get(namespace, "count_params")
    return {"cases": _call_cases(fn, inputs_param_count(seed))}


def inputs_compute(seed: int) -> list[tuple]:
    rng = _rng(seed, 701)
    cases = [(131072, 4096), (128, 768), (65536, 768)]
    for _ in range(4):
        cases.append((int(rng.integers(1, 300000)), 64 * int(rng.integers(1, 100))))
    return cases


@_guarded
def probe_ex7_crossover(namespace, seed):
    out = {"value": describe(namespace.get("crossover_4096"))}  # 讲义的问题：d = 4096 时 n 超过多少
    try:
        out["cases"] = _call_cases(_get(namespace, "crossover_length"), [(d,) for _, d in inputs_compute(seed)])
    except NameError as err:
        out["cases"] = _error(err)
    return out


@_guarded
def probe_ex7_share(namespace, seed):
    out = {"value": describe(namespace.get("share_128k"))}  # 讲义的问题：128K 时占多少
    try:
        out["cases"] = _call_cases(_get(namespace, "attention_share"), inputs_compute(seed))
    except NameError as err:
        out["cases"] = _error(err)
    return out


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
    """TinyLM 的权重（NumPy，float64）。评分进程用它和 exercise_checks.tiny_lm_logits 算参考答案，不必导入 torch。"""
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


# ----------------------------------------------------------------------------
# grade_id → 探针
# ----------------------------------------------------------------------------

PROBES = {
    "ex1_scores": _variable_probe("scores_1"),
    "ex1_weights": _variable_probe("weights_1"),
    "ex1_outputs": _variable_probe("outputs_1"),
    "ex1_self_attention": probe_ex1_self_attention,
    "ex4_copy_query": probe_ex4_copy_query,
    "ex4_average_query": probe_ex4_average_query,
    "ex2_variance": probe_ex2_variance,
    "ex2_divisor": probe_ex2_divisor,
    "ex2_monte_carlo": probe_ex2_monte_carlo,
    "ex3_equivariance": probe_ex3_equivariance,
    "ex5_numbers": None,  # 在下面定义：读 5 个变量
    "ex5_rotate_2d": probe_ex5_rotate_2d,
    "ex5_rope": probe_ex5_rope,
    "ex6_param_count": probe_ex6_param_count,
    "ex7_crossover": probe_ex7_crossover,
    "ex7_share": probe_ex7_share,
    "ex8_pad_mask": probe_ex8_pad_mask,
    "ex11_counts": probe_ex11_counts,
    "ex11_cached_generation": probe_ex11_cached_generation,
}

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


PROBES["ex5_numbers"] = probe_ex5_numbers
