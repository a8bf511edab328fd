"""公平性：诚实的学生得到助教也会给的分数（issue 11）。

下面的 TABLE 就是规格：每一行是一份提交里的一个评分单元格、期望的得分和理由。每份提交从参考答案出发，只改表里写到的
答案（别的写法的正确答案、讲义引出的典型错误、做对一半的答案）；表里没写到的自动评分单元格都应得满分。
全部提交打成一个 LMS 的 zip，用助教的命令评分一次：

    python -m lib.grading grade exercises --submissions fairness.zip --jobs 2

然后逐行比较期望和 gradebook 里的实际分数；任何一行不同，test_every_row_of_the_table 就失败并打印整张表。
另外检查：每份的 status 都是 ok（诚实的提交不带“可疑”）；没作答的文字题自动 0 分并写进 detail；
同一个格式问题在公开测试、自检单元格和评分说明里说的是同一句话（AGREE）；公开测试和评分说明能说出典型错误的原因
（HINTS）；公开测试的报错都是中文。`make grade-demo`（tests/grading_demo.py）也打印这张表。
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grading_fixtures as gf  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# ============================================================================ 答案
# 每份提交：notebook 和要替换的答案单元格（按答案单元格的 grade_id）；没写到的答案单元格用参考答案，
# 文字题保持发布版的样子（没作答），除非写在这里。

HAND_LISTS = """\
q = np.array([[1.0, 0.0], [0.0, 1.0]])
k = np.array([[1.0, 1.0], [1.0, -1.0]])
scores_1 = (q @ k.T / np.sqrt(2)).tolist()      # 列表也可以
e = np.exp(np.array(scores_1))
weights_1 = e / e.sum(axis=1, keepdims=True)
outputs_1 = weights_1 @ np.eye(2)
"""
HAND_SINGLETON = """\
scores_1 = ((0.7071, 0.7071), (0.7071, -0.7071))
weights_1 = [[[0.5, 0.5], [0.8044, 0.1956]]]     # 多了一个长度为 1 的维度：(1, 2, 2)
outputs_1 = np.array([[0.5, 0.5], [0.8044, 0.1956]])
"""
HAND_WRONG = """\
scores_1 = np.array([[1.0, 1.0], [1.0, -1.0]])                  # 没有除以 √2
weights_1 = np.array([[0.5, 0.804], [0.5, 0.196]])              # 按列做了 softmax
outputs_1 = np.array([[0.5, 0.804], [0.5, 0.196]])              # 转置了
"""
HAND_ROUNDED = """\
scores_1 = np.array([[0.7, 0.7], [0.7, -0.7]])                  # 一位小数：离 0.7071 只差 0.0071
weights_1 = np.array([[0.5, 0.5], [0.8, 0.2]])
outputs_1 = [[0.5, 0.5], [0.8, 0.2]]
"""
HAND_OVER_D = """\
scores_1 = np.array([[0.5, 0.5], [0.5, -0.5]])                  # 除以 d_k = 2，不是 √2
weights_1 = np.array([[0.5, 0.5], [0.731, 0.269]])              # 这个打分的 softmax
outputs_1 = np.array([[0.5, 0.731], [0.5, 0.269]])              # 自己的权重 × V，转置了
"""
HAND_SIGN = """\
scores_1 = np.array([[0.707, 0.707], [0.707, 0.707]])           # q_2·k_2 的符号错了
weights_1 = np.exp(scores_1)                                    # 忘了除以每行之和
outputs_1 = weights_1 @ np.eye(2)
"""
HAND_FLAT = """\
scores_1 = np.array([0.707, 0.707, 0.707, -0.707])              # 形状 (4,)，不是 2×2
weights_1 = np.array([[0.5, 0.5], [0.804, 0.196]])
outputs_1 = np.array([[0.5, 0.5], [0.804, 0.196]])
"""


def attention_src(score_line: str, mask_line: str, softmax_axis: str = "-1") -> str:
    return f"""\
def self_attention(Q, K, V, mask=None):
    scores = {score_line}
    if mask is not None:
        {mask_line}
    scores = scores - scores.max(axis={softmax_axis}, keepdims=True)
    weights = np.exp(scores)
    weights = weights / weights.sum(axis={softmax_axis}, keepdims=True)
    return weights @ V, weights
"""


SCALED = "Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])"
MASKED = "scores = np.where(mask, scores, -np.inf)"
ATTENTION_EINSUM = """\
def self_attention(Q, K, V, mask=None):
    scores = np.einsum("...qd,...kd->...qk", Q, K) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -1e9)       # 很大的负数也行：exp 之后恰好是 0
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return np.einsum("...qk,...kv->...qv", weights, V), weights
"""
ATTENTION_LOOPS = """\
def self_attention(Q, K, V, mask=None):
    Q, K, V = (np.asarray(t, dtype=float) for t in (Q, K, V))
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    n_q, n_k = Q.shape[-2], K.shape[-2]
    allowed = np.broadcast_to(np.ones((n_q, n_k), bool) if mask is None else mask, batch + (n_q, n_k))
    Qb, Kb, Vb = (np.broadcast_to(t, batch + t.shape[-2:]) for t in (Q, K, V))
    out, w = np.zeros(batch + (n_q, V.shape[-1])), np.zeros(batch + (n_q, n_k))
    for b in np.ndindex(*batch):                    # 每个批元素、每个查询一行
        for i in range(n_q):
            s = np.array([Qb[b][i] @ Kb[b][j] / math.sqrt(Q.shape[-1]) if allowed[b][i, j] else -np.inf
                          for j in range(n_k)])
            e = np.exp(s - s.max())
            w[b][i] = e / e.sum()
            out[b][i] = w[b][i] @ Vb[b]
    return out, w
"""


def queries_src(copy_expr: str, average_expr: str) -> str:
    return f"""\
def copy_query(K, a):
    return {copy_expr}


def average_query(K, a, b):
    return {average_expr}
"""


QUERIES_LOOPS = """\
def copy_query(K, a):
    q = np.zeros(K.shape[1])
    for j in range(K.shape[1]):
        q[j] = 30.0 * K[a, j]
    return q


def average_query(K, a, b):
    q = np.zeros(K.shape[1])
    for j in range(K.shape[1]):
        q[j] = 15.0 * (K[a, j] + K[b, j])
    return q
"""
COPY_NO_RETURN = """\
def copy_query(K, a):
    q = 20.0 * K[a]          # 忘了 return


def average_query(K, a, b):
    return 20.0 * (K[a] + K[b])
"""

SCALING_ALT = """\
def score_variance(d_k, sigma):
    return float(d_k) * (sigma ** 2) ** 2


def score_divisor(d_k, sigma):
    return math.sqrt(score_variance(d_k, sigma))
"""
SCALING_NUMPY = """\
def score_variance(d_k, sigma):
    return np.array([d_k * sigma**4])               # 只有一个元素的数组也是一个数


def score_divisor(d_k, sigma):
    return np.float64(sigma) ** 2 * np.sqrt(d_k)
"""
SCALING_WRONG = """\
def score_variance(d_k, sigma):
    return d_k * sigma**2


def score_divisor(d_k, sigma):
    return math.sqrt(d_k)
"""
SCALING_HALF = """\
def score_variance(d_k, sigma):
    return f"{d_k * sigma**4}"                      # 字符串


def score_divisor(d_k, sigma):
    return sigma * math.sqrt(d_k)
"""


def monte_carlo_src(body: str) -> str:
    return "def monte_carlo_variance(d_k, sigma, n_trials=20000, seed=0):\n" + body


MC_EINSUM = monte_carlo_src("""\
    rng = np.random.default_rng(seed)
    q = sigma * rng.standard_normal((n_trials, d_k))
    k = sigma * rng.standard_normal((n_trials, d_k))
    return np.var(np.einsum("td,td->t", q, k), ddof=1)
""")
MC_LOOP = monte_carlo_src("""\
    rng = np.random.default_rng(seed)
    dots = [float(rng.normal(0, sigma, d_k) @ rng.normal(0, sigma, d_k)) for _ in range(n_trials)]
    return float(np.var(dots))
""")
MC_FORMULA = monte_carlo_src("    return d_k * sigma**4\n")
MC_SIGMA_AS_VARIANCE = monte_carlo_src("""\
    rng = np.random.default_rng(seed)
    q, k = rng.normal(0, sigma**2, (n_trials, d_k)), rng.normal(0, sigma**2, (n_trials, d_k))
    return float(np.var((q * k).sum(axis=1)))
""")
MC_FIXED_SEED = monte_carlo_src("""\
    rng = np.random.default_rng(0)                  # 没用参数 seed
    q, k = rng.normal(0, sigma, (n_trials, d_k)), rng.normal(0, sigma, (n_trials, d_k))
    return float(np.var((q * k).sum(axis=1)))
""")


def gap_src(body: str) -> str:
    return "def equivariance_gap(X, W_q, W_k, W_v, perm, causal=False):\n" + body


GAP_OWN_ATTENTION = gap_src("""\
    P = np.eye(len(perm))[perm]                     # 置换矩阵：P @ X == X[perm]

    def sa(Z):
        Q, K, V = Z @ W_q, Z @ W_k, Z @ W_v
        s = Q @ K.T / np.sqrt(K.shape[1])
        if causal:
            s = s + np.triu(np.full(s.shape, -1e9), 1)
        w = np.exp(s - s.max(axis=1, keepdims=True))
        return (w / w.sum(axis=1, keepdims=True)) @ V

    return np.abs(sa(P @ X) - P @ sa(X)).max()
""")
GAP_MATRIX = gap_src("""\
    P = np.zeros((len(perm), len(perm)))
    P[np.arange(len(perm)), perm] = 1
    return float(np.max(np.abs(sa_numpy(P @ X, W_q, W_k, W_v, causal) - P @ sa_numpy(X, W_q, W_k, W_v, causal))))
""")
GAP_NO_CAUSAL = gap_src("    return float(np.max(np.abs(sa_numpy(X[perm], W_q, W_k, W_v) - sa_numpy(X, W_q, W_k, W_v)[perm])))\n")
GAP_MEAN = gap_src("""\
    diff = sa_numpy(X[perm], W_q, W_k, W_v, causal) - sa_numpy(X, W_q, W_k, W_v, causal)[perm]
    return float(np.mean(np.abs(diff)))             # 平均值，不是最大值
""")
GAP_ONE_SIDE = gap_src("""\
    return float(np.max(np.abs(sa_numpy(X[perm], W_q, W_k, W_v, causal) - sa_numpy(X, W_q, W_k, W_v)[perm])))
""")

NUMBERS_COMPLEX = """\
import cmath

q_tilde_a = np.array([math.cos(math.pi / 3), math.sin(math.pi / 3)])
k_tilde_a = np.array([math.cos(math.pi / 6), math.sin(math.pi / 6)])
dot_a = np.array([[q_tilde_a @ k_tilde_a]])         # 1×1 的数组也是一个数
dot_b = math.cos(math.pi / 6)
dot_c = np.cos(-np.pi / 6)
"""
NUMBERS_LISTS = """\
q_tilde_a = [0.5, 0.866]
k_tilde_a = (0.866, 0.5)
dot_a = dot_b = dot_c = 0.866
"""
NUMBERS_CLOCKWISE = """\
q_tilde_a = np.array([0.5, -0.866])                 # 两个都顺时针转了
k_tilde_a = np.array([0.866, -0.5])
dot_a = dot_b = dot_c = 0.866
"""
NUMBERS_DOT_C = """\
q_tilde_a = np.array([0.5, 0.866])
k_tilde_a = np.array([0.866, 0.5])
dot_a = dot_b = 0.866
dot_c = -0.866                                      # (c) 答成负数
"""
ROTATE_COMPLEX = """\
import cmath


def rotate_2d(x, angle):
    z = complex(x[0], x[1]) * cmath.exp(1j * angle)  # 乘 e^{iφ} 就是逆时针转 φ
    return np.array([z.real, z.imag])
"""
ROTATE_COLUMN = """\
def rotate_2d(x, angle):
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c * x[0] - s * x[1]], [s * x[0] + c * x[1]]])   # 列向量 (2, 1)
"""
ROTATE_REVERSED = """\
def rotate_2d(x, angle):
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, s], [-s, c]]) @ np.asarray(x, dtype=float)
"""


def rope_src(body: str) -> str:
    return "def rope(x, positions, base=10000.0):\n" + body


ROPE_COMPLEX = rope_src("""\
    x = np.asarray(x, dtype=float)
    h = x.shape[1] // 2
    theta = base ** (-2 * np.arange(h) / x.shape[1])
    z = (x[:, :h] + 1j * x[:, h:]) * np.exp(1j * np.outer(positions, theta))
    return np.concatenate([z.real, z.imag], axis=1)
""")
ROPE_LOOPS = rope_src("""\
    x = np.asarray(x, dtype=float)
    T, d = x.shape
    out = np.empty_like(x)
    for t in range(T):
        for i in range(d // 2):
            angle = positions[t] * base ** (-2 * i / d)
            out[t, [i, i + d // 2]] = np.ravel(rotate_2d(x[t, [i, i + d // 2]], angle))
    return out
""")


def rope_variant(theta: str, pairs: str = "half") -> str:
    if pairs == "half":
        rot = ("    x1, x2 = x[:, : d // 2], x[:, d // 2 :]\n"
               "    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)\n")
    else:  # 相邻两维配对（原论文）
        rot = ("    out = x.copy()\n"
               "    out[:, 0::2] = x[:, 0::2] * cos - x[:, 1::2] * sin\n"
               "    out[:, 1::2] = x[:, 0::2] * sin + x[:, 1::2] * cos\n"
               "    return out\n")
    return rope_src(f"""\
    x = np.asarray(x, dtype=float)
    d = x.shape[-1]
    theta = {theta}
    angles = np.asarray(positions, dtype=float)[:, None] * theta
    cos, sin = np.cos(angles), np.sin(angles)
""" + rot)


ROPE_ADJACENT = rope_variant("base ** (-np.arange(0, d, 2) / d)", pairs="adjacent")
ROPE_FREQ = rope_variant("base ** (-np.arange(d // 2) / d)")           # 指数 -i/d
ROPE_NO_BASE = rope_variant("10000.0 ** (-np.arange(0, d, 2) / d)")     # 没用参数 base


def count_src(body: str) -> str:
    return "def count_params(V, d, n_layers, max_len, tied, positions):\n" + body


def compute_src(crossover: str, share: str) -> str:
    return f"""\
def crossover_length(d):
{crossover}


def attention_share(n, d):
{share}
"""


COUNT_COMPONENTS = count_src("""\
    attention = 4 * (d * d + d)                     # W_Q、W_K、W_V、W_O 和偏置
    ffn = (d * 4 * d + 4 * d) + (4 * d * d + d)     # d → 4d → d
    norms = 2 * (2 * d)                             # 块里的两个层归一化
    embeddings = V * d + (max_len * d if positions == "learned" else 0)
    head = 0 if tied else V * d
    return embeddings + n_layers * (attention + ffn + norms) + 2 * d + head
""")
COUNT_NUMPY = count_src("""\
    parts = {"tok": V * d, "pos": max_len * d * (positions == "learned"),
             "blocks": n_layers * (12 * d**2 + 13 * d), "ln_f": 2 * d, "head": V * d * (not tied)}
    return np.int64(sum(parts.values()))
""")
COUNT_LECTURE = count_src("""\
    total = V * d + n_layers * (12 * d * d + 13 * d)   # 讲义的估算：没有最后的层归一化
    if positions == "learned":
        total += max_len * d
    if not tied:
        total += V * d
    return total
""")
COUNT_ROPE_TABLE = count_src("""\
    total = V * d + n_layers * (12 * d * d + 13 * d) + 2 * d
    if positions in ("learned", "rope"):            # RoPE 也算了位置表
        total += max_len * d
    if not tied:
        total += V * d
    return total
""")
COUNT_STRING = count_src("""\
    total = V * d + n_layers * (12 * d * d + 13 * d) + 2 * d
    total += max_len * d if positions == "learned" else 0
    total += 0 if tied else V * d
    return f"{total:,}"                             # 带千位分隔符的字符串
""")
COMPUTE_FLOAT = compute_src("    return 12 * d**2 / (2 * d)   # 浮点数 6d",
                            "    ratio = n / (6 * d)\n    return ratio / (1 + ratio)")
COMPUTE_NUMPY = compute_src("    return np.array([6 * d])     # 只有一个元素的数组",
                            "    attn, linear = 2 * n**2 * d, 12 * n * d**2\n    return attn / (attn + linear)")
COMPUTE_WRONG = compute_src("    return d", "    return n / (6 * d)")
COMPUTE_STRING = compute_src("    return str(6 * d)            # 字符串", "    return n / (n + 6 * d)")

MASK_UNSQUEEZE = "def key_padding_mask(pad_mask):\n    return pad_mask.unsqueeze(1).unsqueeze(2)\n"
MASK_EXPAND = """\
def key_padding_mask(pad_mask):
    B, T = pad_mask.shape
    return pad_mask.view(B, 1, 1, T).expand(B, 1, T, T)
"""
MASK_ROWS = "def key_padding_mask(pad_mask):\n    return pad_mask[:, None, :, None]\n"
MASK_NUMPY = "def key_padding_mask(pad_mask):\n    return pad_mask.numpy()[:, None, None, :]\n"
MASK_FLOAT = "def key_padding_mask(pad_mask):\n    return pad_mask[:, None, None, :].float()\n"


def counts_src(without: str, with_cache: str) -> str:
    return f"""\
def positions_without_cache(n, m):
{without}


def positions_with_cache(n, m):
{with_cache}
"""


COUNTS_LOOPS = counts_src("    return sum(n + i - 1 for i in range(1, m + 1))", """\
    total = n                   # 提示送进去一次
    for _ in range(m - 1):      # 第 1..m-1 个新词各送一次；第 m 个新词生成后就结束了
        total += 1
    return total""")
COUNTS_FLOAT = counts_src("    return m * n + m * (m - 1) / 2   # 浮点数，但值是整数",
                          "    return np.int64(n + m - 1)")
COUNTS_LECTURE = counts_src("    return m * n + m * (m - 1) // 2", "    return n + m   # 讲义的答案：最后一个新词也送进模型")
COUNTS_PROMPT_EACH_STEP = counts_src("    return m * n + m * (m - 1) // 2",
                                     "    return n * m + m   # 每一步都把提示重新送进去，再加上新词")
COUNTS_NO_GROWTH = counts_src("    return m * n", "    return n + m - 1")
COUNTS_STRING = counts_src("    return m * n + m * (m - 1) // 2", "    return str(n + m - 1)")


def generate_src(body: str) -> str:
    return "def generate_cached(model, prompt, max_new_tokens):\n" + body


GENERATE_ARGMAX = generate_src("""\
    cache = model.new_kv_cache()
    pieces = [prompt]
    logits = model(prompt, kv_cache=cache).logits
    for step in range(max_new_tokens):
        nxt = torch.argmax(logits[:, -1], dim=-1).unsqueeze(1)
        pieces.append(nxt)
        if step + 1 < max_new_tokens:               # 最后一个新词不必再送进模型
            logits = model(nxt, kv_cache=cache).logits
    return torch.cat(pieces, dim=1)
""")
GENERATE_FEEDS_LAST = generate_src("""\
    cache = model.new_kv_cache()
    idx, step = prompt, prompt
    for _ in range(max_new_tokens):
        nxt = model(step, kv_cache=cache).logits[:, -1, :].argmax(-1, keepdim=True)
        idx, step = torch.cat([idx, nxt], 1), nxt
    model(step, kv_cache=cache)                     # 讲义的数法：最后一个新词也送进去（共 n + m 个位置）
    return idx
""")
GENERATE_NO_CACHE = generate_src("""\
    idx = prompt
    for _ in range(max_new_tokens):
        nxt = model(idx).logits[:, -1, :].argmax(-1, keepdim=True)
        idx = torch.cat([idx, nxt], 1)
    return idx
""")
GENERATE_NEW_ONLY = generate_src("""\
    cache, step, new = model.new_kv_cache(), prompt, []
    for _ in range(max_new_tokens):
        step = model(step, kv_cache=cache).logits[:, -1, :].argmax(-1, keepdim=True)
        new.append(step)
    return torch.cat(new, 1)                        # 只返回了新词
""")
GENERATE_FULL_SEQUENCE = generate_src("""\
    cache, idx = model.new_kv_cache(), prompt
    for _ in range(max_new_tokens):
        nxt = model(idx, kv_cache=cache).logits[:, -1, :].argmax(-1, keepdim=True)   # 每步都送整个序列
        idx = torch.cat([idx, nxt], 1)
    return idx
""")
# ---------------------------------------------------------------------------- issue 20：float32、讲义的精度、新单元格、
# 没删掉的 raise、按真实原因给的提示
ATTENTION_FLOAT32 = """\
def self_attention(Q, K, V, mask=None):
    Q, K, V = (np.asarray(t, dtype=np.float32) for t in (Q, K, V))   # 全程 float32
    scores = np.matmul(Q, np.swapaxes(K, -1, -2)) / np.float32(math.sqrt(Q.shape[-1]))
    if mask is not None:
        scores = np.where(mask, scores, np.float32(-np.inf))
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return weights @ V, weights
"""
ATTENTION_TORCH = """\
import torch


def self_attention(Q, K, V, mask=None):
    Q, K, V = (torch.as_tensor(t, dtype=torch.float32) for t in (Q, K, V))   # torch 的默认 dtype
    scores = Q @ K.transpose(-1, -2) / Q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~torch.as_tensor(mask), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights @ V).numpy(), weights.numpy()
"""
ATTENTION_FROM_LIB = """\
import torch
from lib.transformer import scaled_dot_product_attention


def self_attention(Q, K, V, mask=None):
    m = None if mask is None else torch.as_tensor(mask)
    out, w = scaled_dot_product_attention(torch.as_tensor(Q), torch.as_tensor(K), torch.as_tensor(V), m)
    return out.numpy(), w.numpy()
"""
ATTENTION_BOOL_INDEX = """\
def self_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores[~mask] = -np.inf                     # 布尔索引：掩码要和打分同形状，不能广播
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ V, weights
"""
QUERIES_LEFTOVER = """\
def copy_query(K, a):
    q = 30.0 * K[a]
    raise NotImplementedError()                     # 写了答案，却忘了删掉这一行（在 return 之前）
    return q


def average_query(K, a, b):
    return 12.0 * (K[a] + K[b])
    raise NotImplementedError()                     # 在 return 之后：不会执行
"""
SCALING_FLOAT32 = """\
def score_variance(d_k, sigma):
    return np.float32(d_k) * np.float32(sigma) ** 4


def score_divisor(d_k, sigma):
    return np.sqrt(np.float32(d_k)) * np.float32(sigma) ** 2
"""
SCALING_TORCH = """\
import torch


def score_variance(d_k, sigma):
    return torch.tensor(float(d_k)) * torch.tensor(sigma) ** 4      # 0 维的 float32 张量


def score_divisor(d_k, sigma):
    return torch.sqrt(score_variance(d_k, sigma))
"""
GAP_FLOAT32 = gap_src("""\
    X32 = X.astype(np.float32)                      # float32：不加掩码时差是 1e-7 左右，不是恰好 0
    W = [w.astype(np.float32) for w in (W_q, W_k, W_v)]

    def sa(Z):
        s = (Z @ W[0]) @ (Z @ W[1]).T / np.float32(np.sqrt(W[1].shape[1]))
        if causal:
            s = np.where(np.tril(np.ones(s.shape, bool)), s, -np.inf)
        w = np.exp(s - s.max(axis=1, keepdims=True))
        return (w / w.sum(axis=1, keepdims=True)) @ (Z @ W[2])

    return float(np.abs(sa(X32[perm]) - sa(X32)[perm]).max())
""")
GAP_INVERSE_PERM = gap_src("""\
    P = np.eye(len(perm))[:, perm]                  # 反方向的置换：P @ X == X[np.argsort(perm)]
    return float(np.abs(sa_numpy(P @ X, W_q, W_k, W_v, causal) - P @ sa_numpy(X, W_q, W_k, W_v, causal)).max())
""")
ROTATE_TORCH = """\
import torch


def rotate_2d(x, angle):
    a = torch.tensor(angle)                         # float32
    R = torch.stack([torch.stack([a.cos(), -a.sin()]), torch.stack([a.sin(), a.cos()])])
    return R @ torch.as_tensor(x, dtype=torch.float32)
"""
ROTATE_FLOAT32 = """\
def rotate_2d(x, angle):
    c, s = np.cos(np.float32(angle)), np.sin(np.float32(angle))
    x = np.asarray(x, dtype=np.float32)
    return np.array([c * x[0] - s * x[1], s * x[0] + c * x[1]], dtype=np.float32)
"""
ROPE_TORCH = rope_src("""\
    import torch
    x = torch.as_tensor(x, dtype=torch.float32)     # 和 lib.transformer.apply_rope 一样用 float32
    d = x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2).float() / d)
    angles = torch.as_tensor(positions).float()[:, None] * inv_freq
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * angles.cos() - x2 * angles.sin(), x1 * angles.sin() + x2 * angles.cos()], dim=-1)
""")
ROPE_FLOAT32 = rope_src("""\
    x = np.asarray(x, dtype=np.float32)
    h = x.shape[1] // 2
    theta = (base ** (-2 * np.arange(h) / x.shape[1])).astype(np.float32)
    ang = np.asarray(positions, dtype=np.float32)[:, None] * theta
    out = np.empty_like(x)
    out[:, :h] = x[:, :h] * np.cos(ang) - x[:, h:] * np.sin(ang)
    out[:, h:] = x[:, :h] * np.sin(ang) + x[:, h:] * np.cos(ang)
    return out
""")
COUNT_LECTURE_BLOCKS = count_src("""\
    per_block = 12 * d**2 + 13 * d                  # 讲义 §15：用 12d² + 13d 估算，不算最后的层归一化
    embeddings = V * d + (max_len * d if positions == "learned" else 0)
    return embeddings + sum(per_block for _ in range(n_layers)) + (0 if tied else V * d)
""")
COMPUTE_ROUNDED = compute_src("    return np.float32(6 * d)", "    return round(n / (n + 6 * d), 3)   # 讲义的精度")
COMPUTE_PERCENT = compute_src("    return 6.0 * d", "    return 100 * n / (n + 6 * d)        # 百分数，不是 0 到 1 的小数")
LECTURE_ROUNDED = "crossover_4096 = 6 * 4096\nshare_128k = 0.84                                   # 讲义写的 84%\n"
LECTURE_PERCENT = "crossover_4096 = 24576.0\nshare_128k = 84                                     # 百分数\n"
LECTURE_FLOAT32 = ("crossover_4096 = crossover_length(4096)\n"
                   "share_128k = np.float32(attention_share(131072, 4096))\n")
COUNTS_LEFTOVER = counts_src("    return m * n + m * (m - 1) // 2\n    raise NotImplementedError()",
                             "    return n + m - 1\n    raise NotImplementedError()")
GENERATE_LEFTOVER = GENERATE_ARGMAX + "    raise NotImplementedError()                     # return 之后：不会执行\n"
GENERATE_LEFTOVER_BEFORE = generate_src("""\
    cache, idx, step = model.new_kv_cache(), prompt, prompt
    raise NotImplementedError()                     # 忘了删掉：在 return 之前
    for _ in range(max_new_tokens):
        step = model(step, kv_cache=cache).logits[:, -1, :].argmax(-1, keepdim=True)
        idx = torch.cat([idx, step], 1)
    return idx
""")
HAND_UPSTREAM = """\
s = np.array([[1.0, 0.0], [0.0, 1.0]]) @ np.array([[1.0, 1.0], [1.0, -1.0]]).T   # 忘了除以 √2
weights_1 = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
scores_1 = s
outputs_1 = weights_1 @ np.eye(2)                                                  # 这一步是对的
"""
GENERATE_EXTRA_PROMPT = generate_src("""\
    model(prompt, kv_cache=model.new_kv_cache())    # 多送了一遍提示（词元还是对的）
    cache, idx, step = model.new_kv_cache(), prompt, prompt
    for _ in range(max_new_tokens):
        step = model(step, kv_cache=cache).logits[:, -1, :].argmax(-1, keepdim=True)
        idx = torch.cat([idx, step], 1)
    return idx
""")
ADDED_PRE_LN = ("**(a)** 一定包含单位矩阵 $I$：残差主干把 $x^{(0)}$ 原样加到输出上，梯度沿这条路不衰减。\n\n"
                "**(b)** Post-LN 里主干每层都经过 LN，$I$ 被 $J_{LN}$ 连乘取代，所以需要预热、深了难训练。")
ADDED_MASK_1 = "(a) 双向注意力会看到填充位置，填充是无意义的向量，会污染真实词的表示。"
ADDED_MASK_2 = "(b) 加在列（键）上。(c) 因果掩码下真实的词本来就看不到右边的填充。"

PROOF = "$Q' = PQ$，$K' = PK$，$V' = PV$；打分变成 $PSP^\\top$，按行 softmax 和置换交换，所以 $SA(PX) = P\\,SA(X)$。加因果掩码后不成立。"

# fe44 的新人试评（issue 44 之后）：这三种诚实的写法曾被标成 suspect，现在必须是 ok、满分
QUERIES_DATACLASS = """\
from dataclasses import dataclass


@dataclass
class QueryConfig:                     # 一个小配置对象：@dataclass 自己生成 __eq__（逐个字段比较）
    scale: float = 10.0


CFG = QueryConfig()


def copy_query(K, a):
    return CFG.scale * K[a]


def average_query(K, a, b):
    return CFG.scale * (K[a] + K[b])
"""
QUERIES_OWN_CHECK = queries_src("10.0 * K[a]", "10.0 * (K[a] + K[b])") + """
# 我自己的小检查
_K = np.eye(3)
assert np.argmax(_K @ copy_query(_K, 1)) == 1
print("my sanity test passed")
"""
ATTENTION_NAMEDTUPLE = """\
from collections import namedtuple

AttnOut = namedtuple("AttnOut", ["output", "weights"])


def self_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return AttnOut(weights @ V, weights)
"""
OWN_PLOT = """\
import matplotlib.pyplot as plt
_, w = self_attention(np.random.default_rng(0).normal(size=(4, 3)), np.random.default_rng(1).normal(size=(4, 3)), np.eye(4))
plt.imshow(w); plt.title("attention weights"); plt.show()
print("row sums:", w.sum(-1))
"""

NB1, NB2, NB3, NB4, NB5 = ("01_attention_by_hand", "02_scaling_and_equivariance", "03_positions_and_rope",
                           "04_blocks_and_cost", "05_masks_and_kv_cache")
SUBMISSIONS = {  # 学号 → (notebook, {答案单元格的 grade_id: 内容})
    "f01_einsum": (NB1, {"ex1_hand_answer": HAND_LISTS, "ex1_self_attention_answer": ATTENTION_EINSUM,
                         "ex4_answer": QUERIES_LOOPS}),
    "f01_loops": (NB1, {"ex1_hand_answer": HAND_SINGLETON, "ex1_self_attention_answer": ATTENTION_LOOPS,
                        "ex4_answer": queries_src("7.0 * K[a : a + 1]   # (1, d)", "6.0 * (K[a] + K[b])")}),
    "f01_mistakes": (NB1, {"ex1_hand_answer": HAND_WRONG,
                           "ex1_self_attention_answer": attention_src(
                               "Q @ np.swapaxes(K, -1, -2) * np.sqrt(Q.shape[-1])", MASKED),
                           "ex4_answer": queries_src("K[a]", "np.zeros(K.shape[1])")}),
    "f01_moderate": (NB1, {"ex1_hand_answer": HAND_FLAT,
                           "ex1_self_attention_answer": attention_src("Q @ np.swapaxes(K, -1, -2)", MASKED),
                           "ex4_answer": queries_src("5.0 * K[a]", "2.0 * (K[a] + K[b])")}),
    "f01_transpose": (NB1, {"ex1_self_attention_answer": attention_src("Q @ K.T / np.sqrt(Q.shape[-1])", MASKED),
                            "ex4_answer": COPY_NO_RETURN}),
    "f01_nomask": (NB1, {"ex1_self_attention_answer": attention_src(SCALED, "pass")}),
    "f01_inverted": (NB1, {"ex1_self_attention_answer": attention_src(
        SCALED, "scores = np.where(mask, -np.inf, scores)")}),
    "f02_alt": (NB2, {"ex2_answer": SCALING_ALT, "ex2_monte_carlo_answer": MC_EINSUM,
                      "ex3_equivariance_answer": GAP_OWN_ATTENTION, "ex3_proof": PROOF}),
    "f02_numpy": (NB2, {"ex2_answer": SCALING_NUMPY, "ex2_monte_carlo_answer": MC_LOOP,
                        "ex3_equivariance_answer": GAP_MATRIX}),
    "f02_mistakes": (NB2, {"ex2_answer": SCALING_WRONG, "ex2_monte_carlo_answer": MC_FORMULA,
                           "ex3_equivariance_answer": GAP_NO_CAUSAL}),
    "f02_half": (NB2, {"ex2_answer": SCALING_HALF, "ex2_monte_carlo_answer": MC_SIGMA_AS_VARIANCE,
                       "ex3_equivariance_answer": GAP_MEAN}),
    "f02_half_b": (NB2, {"ex2_monte_carlo_answer": MC_FIXED_SEED, "ex3_equivariance_answer": GAP_ONE_SIDE}),
    "f03_complex": (NB3, {"ex5_numbers_answer": NUMBERS_COMPLEX, "ex5_rotate_2d_answer": ROTATE_COMPLEX,
                          "ex5_rope_answer": ROPE_COMPLEX}),
    "f03_loops": (NB3, {"ex5_numbers_answer": NUMBERS_LISTS, "ex5_rotate_2d_answer": ROTATE_COLUMN,
                        "ex5_rope_answer": ROPE_LOOPS}),
    "f03_mistakes": (NB3, {"ex5_numbers_answer": NUMBERS_CLOCKWISE, "ex5_rotate_2d_answer": ROTATE_REVERSED,
                           "ex5_rope_answer": ROPE_ADJACENT}),
    "f03_half": (NB3, {"ex5_numbers_answer": NUMBERS_DOT_C, "ex5_rope_answer": ROPE_FREQ}),
    "f03_half_b": (NB3, {"ex5_rope_answer": ROPE_NO_BASE}),
    "f04_components": (NB4, {"ex6_answer": COUNT_COMPONENTS, "ex7_answer": COMPUTE_FLOAT}),
    "f04_numpy": (NB4, {"ex6_answer": COUNT_NUMPY, "ex7_answer": COMPUTE_NUMPY}),
    "f04_mistakes": (NB4, {"ex6_answer": COUNT_LECTURE, "ex7_answer": COMPUTE_WRONG}),
    "f04_half": (NB4, {"ex6_answer": COUNT_ROPE_TABLE, "ex7_answer": COMPUTE_STRING}),
    "f04_half_b": (NB4, {"ex6_answer": COUNT_STRING}),
    "f05_alt": (NB5, {"ex8_pad_mask_answer": MASK_UNSQUEEZE, "ex11_counts_answer": COUNTS_LOOPS,
                      "ex11_generation_answer": GENERATE_ARGMAX}),
    "f05_lecture_count": (NB5, {"ex8_pad_mask_answer": MASK_EXPAND, "ex11_counts_answer": COUNTS_FLOAT,
                                "ex11_generation_answer": GENERATE_FEEDS_LAST}),
    "f05_mistakes": (NB5, {"ex8_pad_mask_answer": MASK_ROWS, "ex11_counts_answer": COUNTS_PROMPT_EACH_STEP,
                           "ex11_generation_answer": GENERATE_NO_CACHE}),
    "f05_half": (NB5, {"ex8_pad_mask_answer": MASK_NUMPY, "ex11_counts_answer": COUNTS_NO_GROWTH,
                       "ex11_generation_answer": GENERATE_NEW_ONLY}),
    "f05_half_b": (NB5, {"ex8_pad_mask_answer": MASK_FLOAT, "ex11_counts_answer": COUNTS_STRING,
                         "ex11_generation_answer": GENERATE_FULL_SEQUENCE}),
    # issue 20。"+after:GID" / "+before:GID"：在那个答案单元格的下面 / 上面加一个学生自己的 Markdown 单元格
    "f01_float32": (NB1, {"ex1_self_attention_answer": ATTENTION_FLOAT32, "ex4_answer": QUERIES_LEFTOVER}),
    "f01_torch": (NB1, {"ex1_self_attention_answer": ATTENTION_TORCH}),
    "f01_bool_index": (NB1, {"ex1_self_attention_answer": ATTENTION_BOOL_INDEX}),
    "f02_float32": (NB2, {"ex2_answer": SCALING_FLOAT32, "ex3_equivariance_answer": GAP_FLOAT32,
                          "+after:ex3_proof": PROOF}),
    "f02_torch": (NB2, {"ex2_answer": SCALING_TORCH, "ex3_equivariance_answer": GAP_INVERSE_PERM}),
    "f03_torch": (NB3, {"ex5_rotate_2d_answer": ROTATE_TORCH, "ex5_rope_answer": ROPE_TORCH}),
    "f03_float32": (NB3, {"ex5_rotate_2d_answer": ROTATE_FLOAT32, "ex5_rope_answer": ROPE_FLOAT32}),
    "f04_lecture": (NB4, {"ex6_answer": COUNT_LECTURE_BLOCKS, "ex7_answer": COMPUTE_ROUNDED,
                          "ex7_lecture_answer": LECTURE_ROUNDED, "+after:ex9_answer": ADDED_PRE_LN}),
    "f04_float32": (NB4, {"ex7_answer": COMPUTE_ROUNDED, "ex7_lecture_answer": LECTURE_FLOAT32}),
    "f04_percent": (NB4, {"ex7_answer": COMPUTE_PERCENT, "ex7_lecture_answer": LECTURE_PERCENT}),
    "f05_leftover": (NB5, {"ex11_counts_answer": COUNTS_LEFTOVER, "ex11_generation_answer": GENERATE_LEFTOVER,
                           "+after:ex8_answer": ADDED_MASK_1, "+after:ex8_answer ": ADDED_MASK_2}),
    "f05_leftover_before": (NB5, {"ex11_generation_answer": GENERATE_LEFTOVER_BEFORE, "+before:ex8_answer": "   "}),
    # issue 20 的两次新人试评：分数对，但说明要说出真正的原因（FRESH_EYES）
    "f01_rowmask": (NB1, {"ex1_self_attention_answer": attention_src(
        SCALED, "scores = np.where(np.swapaxes(mask, -1, -2), scores, -np.inf)   # 掩码转置了：挡住的是行")}),
    "f01_upstream": (NB1, {"ex1_hand_answer": HAND_UPSTREAM, "ex4_answer": queries_src("20.0 * K[a]", "20.0 * K[a]")}),
    "f05_extra_prompt": (NB5, {"ex11_generation_answer": GENERATE_EXTRA_PROMPT}),
    # issue 42：手算的典型错误在交之前（公开测试的自洽检查）和交之后（评分说明）说同一句话
    "f01_hand_rounded": (NB1, {"ex1_hand_answer": HAND_ROUNDED}),
    "f01_hand_over_d": (NB1, {"ex1_hand_answer": HAND_OVER_D}),
    "f01_hand_sign": (NB1, {"ex1_hand_answer": HAND_SIGN}),
    # 讲义 §15 的答案 n + m（用缓存时把最后一个新词也送进模型）：“写讲义答案的学生从不丢分”
    "f05_lecture": (NB5, {"ex11_counts_answer": COUNTS_LECTURE}),
    # fe44（issue 44 的新人试评）：@dataclass、自己检查过再打印一句“passed”、自己画一张图，都是诚实的写法
    # "+code:after:GID"：在那个答案单元格的下面加一个学生自己的代码单元格
    "f01_dataclass": (NB1, {"ex4_answer": QUERIES_DATACLASS}),
    "f01_own_check": (NB1, {"ex4_answer": QUERIES_OWN_CHECK}),
    "f01_plot": (NB1, {"+code:after:ex1_self_attention_answer": OWN_PLOT}),
    # fs42（新人试评）：公开的例子曾都是 d_k = d_v = n_k，除以 √d_v、√n_k 曾得到 ✓；namedtuple 曾只得 12/20
    "f01_scale_dv": (NB1, {"ex1_self_attention_answer": attention_src(
        "Q @ np.swapaxes(K, -1, -2) / np.sqrt(V.shape[-1])   # 除以了 √d_v", MASKED)}),
    "f01_scale_nk": (NB1, {"ex1_self_attention_answer": attention_src(
        "Q @ np.swapaxes(K, -1, -2) / np.sqrt(K.shape[-2])   # 除以了 √n_k", MASKED)}),
    "f01_namedtuple": (NB1, {"ex1_self_attention_answer": ATTENTION_NAMEDTUPLE}),
    # helper-21（攻击者试评）：把 self_attention 交给 lib 的现成实现，曾拿到 8 分
    "f01_from_lib": (NB1, {"ex1_self_attention_answer": ATTENTION_FROM_LIB}),
}

# ============================================================================ 规格：期望的分数
# 提交            单元格                  期望    理由（助教会这样给分吗？）
TABLE = """
f01_einsum       ex1_scores              2      手算值写成嵌套列表（用 NumPy 算出来的）
f01_einsum       ex1_weights             2      用 np.exp 按行算出来
f01_einsum       ex1_outputs             2      权重乘 V 算出来
f01_einsum       ex1_self_attention      8      einsum 写法，掩码填 -1e9 而不是 -inf
f01_einsum       ex4_copy_query          3      循环逐维写出 q = 30·k_a
f01_einsum       ex4_average_query       3      循环逐维写出 q = 15·(k_a + k_b)
f01_loops        ex1_scores              2      tuple 的 tuple，保留 4 位小数
f01_loops        ex1_weights             2      形状 (1, 2, 2)：只多了一个长度为 1 的维度
f01_loops        ex1_outputs             2      4 位小数
f01_loops        ex1_self_attention      8      逐个批元素、逐个查询的 Python 循环
f01_loops        ex4_copy_query          3      c = 7 刚好够（n = 8 时权重 0.994），返回 (1, d)
f01_loops        ex4_average_query       3      c = 6 刚好够（n = 8 时合计 0.993）
f01_mistakes     ex1_scores              0      没有除以 √2
f01_mistakes     ex1_weights             0      按列做了 softmax
f01_mistakes     ex1_outputs             0      输出 = 自己的（按列 softmax 的）权重 × V：错在上游
f01_mistakes     ex1_self_attention      0      乘了 √d_k：每一部分都错
f01_mistakes     ex4_copy_query          2      q = k_a：方向对，长度不够（c = 1）
f01_mistakes     ex4_average_query       0      q = 0：方向就不对（均匀的权重）
f01_moderate     ex1_scores              0      形状 (4,)：格式不对
f01_moderate     ex1_self_attention      0      没有除以 √d_k：每一部分都错
f01_moderate     ex4_copy_query          2      c = 5：方向对，n = 8 时权重只有 0.955（每次都一样，不再看运气）
f01_moderate     ex4_average_query       2      c = 2：方向对，长度不够
f01_transpose    ex1_self_attention      4      用 K.T：二维的两部分对，有批维度的两部分错
f01_transpose    ex4_copy_query          0      忘了 return（返回 None）
f01_nomask       ex1_self_attention      4      忽略掩码：两个无掩码的部分对
f01_inverted     ex1_self_attention      4      掩码用反了：两个无掩码的部分对
f02_alt          ex2_variance            2      float(d_k)·(σ²)²
f02_alt          ex2_divisor             2      对 score_variance 开平方
f02_alt          ex2_monte_carlo         2      einsum 求点积，ddof=1 的样本方差
f02_alt          ex3_equivariance        5      自己写的注意力，置换矩阵 P @ X，因果掩码加 -1e9
f02_alt          ex3_proof               人工   写了证明：留给助教
f02_numpy        ex2_variance            2      返回只有一个元素的数组
f02_numpy        ex2_divisor             2      NumPy 标量
f02_numpy        ex2_monte_carlo         2      Python 循环做 20000 次实验
f02_numpy        ex3_equivariance        5      用置换矩阵而不是下标
f02_numpy        ex3_proof               0      没作答：自动 0 分
f02_mistakes     ex2_variance            0      d_k·σ²
f02_mistakes     ex2_divisor             0      忘了 σ
f02_mistakes     ex2_monte_carlo         0      直接返回公式，不是实验
f02_mistakes     ex3_equivariance        0      causal 没有传下去：两种情况都返回 0
f02_half         ex2_variance            0      返回字符串：格式不对
f02_half         ex2_divisor             0      σ√d_k
f02_half         ex2_monte_carlo         1      把 σ 当成方差（结果不对），但用了 seed
f02_half         ex3_equivariance        3      取了平均值而不是最大值：不加掩码的部分对
f02_half_b       ex2_monte_carlo         1      实验对，但没用参数 seed
f02_half_b       ex3_equivariance        3      只有一边加了因果掩码：不加掩码的部分对
f03_complex      ex5_numbers             3      用 cos/sin 算，dot_a 写成 1×1 的数组
f03_complex      ex5_rotate_2d           3      复数乘 e^{iφ}
f03_complex      ex5_rope                6      复数写法
f03_loops        ex5_numbers             3      list 和 tuple
f03_loops        ex5_rotate_2d           3      返回列向量 (2, 1)
f03_loops        ex5_rope                6      逐个位置、逐个平面调用 rotate_2d
f03_mistakes     ex5_numbers             1.8    q̃、k̃ 都顺时针转了（三个点积对）
f03_mistakes     ex5_rotate_2d           0      转反了方向
f03_mistakes     ex5_rope                2      相邻两维配对（原论文）：只有“打分只依赖 m − n”对
f03_half         ex5_numbers             2.4    (c) 答成负数：五个数错一个
f03_half         ex5_rope                4      频率写成 base^(−i/d)：配对和相对位置对
f03_half_b       ex5_rope                5      没用参数 base：只有 base ≠ 10000 的部分错
f04_components   ex6_param_count         6      按组件逐项相加
f04_components   ex7_crossover           2      返回浮点数 6d
f04_components   ex7_share               2      先算比值 r = n/6d，再 r/(1+r)
f04_numpy        ex6_param_count         6      dict 求和，返回 np.int64
f04_numpy        ex7_crossover           2      返回只有一个元素的数组
f04_numpy        ex7_share               2      直接用两部分的乘加次数
f04_numpy        ex9_answer              0      没作答：自动 0 分
f04_mistakes     ex6_param_count         4.5    讲义的 12d² + 13d 估算，只少了最后的层归一化 2d：只丢那 1.5 分
f04_mistakes     ex7_crossover           0.5    答成 d；讲义的问题 crossover_4096 答对（0.5）
f04_mistakes     ex7_share               0.5    比值 n/6d 不是占比；share_128k 答对（0.5）
f04_half         ex6_param_count         4.5    RoPE 也算了位置表：可学习、正弦/无位置、最后的层归一化三部分对
f04_half         ex7_crossover           0.5    返回字符串：格式不对；crossover_4096 答对
f04_half_b       ex6_param_count         0      返回带千位分隔符的字符串：格式不对
f05_alt          ex8_pad_mask            6      unsqueeze 两次
f05_alt          ex11_counts             3      求和的循环；用缓存时 n + m − 1
f05_alt          ex11_cached_generation  6      先送提示，最后一个新词不再送进模型
f05_lecture_count ex8_pad_mask           6      显式 expand 到 (B, 1, T, T)
f05_lecture_count ex11_counts            3      浮点数（值是整数）和 np.int64
f05_lecture_count ex11_cached_generation 6      按讲义的数法把最后一个新词也送进去（n + m 个位置）：也对
f05_mistakes     ex8_pad_mask            0      挡住了行而不是列
f05_mistakes     ex11_counts             1.5    用缓存时每一步都把提示重新送进模型（n·m + m）
f05_mistakes     ex11_cached_generation  3      没用缓存：词元对，缓存的 3 分没有
f05_half         ex8_pad_mask            0      NumPy 数组：lib.transformer 不接受，格式不对
f05_half         ex11_counts             1.5    不用缓存时忘了序列在变长（m·n）
f05_half         ex11_cached_generation  0      只返回了新词：形状不对
f05_half_b       ex8_pad_mask            0      浮点的 0/1 掩码：格式不对
f05_half_b       ex11_counts             1.5    用缓存的计数返回字符串：那一半格式不对
f05_half_b       ex11_cached_generation  0      用了缓存却每步送入整个序列：词元不对
f01_float32      ex1_self_attention      8      全程 np.float32
f01_float32      ex4_copy_query          0      写了答案但 raise NotImplementedError() 在 return 之前
f01_float32      ex4_average_query       3      raise NotImplementedError() 在 return 之后：不会执行，不影响
f01_torch        ex1_self_attention      8      torch 的默认 float32、masked_fill、torch.softmax
f01_bool_index   ex1_self_attention      6      scores[~mask] 布尔索引：只有要广播的掩码那一部分出错
f02_float32      ex2_variance            2      np.float32
f02_float32      ex2_divisor             2      np.float32
f02_float32      ex3_equivariance        5      float32：不加掩码时的差是 1e-7 左右
f02_float32      ex3_proof               人工   证明写在了答案单元格下面新加的单元格里：交给助教，不是 0
f02_torch        ex2_variance            2      0 维的 torch float32 张量
f02_torch        ex2_divisor             2      torch.sqrt
f02_torch        ex3_equivariance        3      置换方向反了（np.eye(n)[:, perm]）：不加掩码的部分对
f02_torch        ex3_proof               0      没作答：自动 0 分
f03_torch        ex5_rotate_2d           3      torch float32 的旋转矩阵
f03_torch        ex5_rope                6      torch float32，inv_freq 和 chunk（apply_rope 的写法）
f03_float32      ex5_rotate_2d           3      np.float32
f03_float32      ex5_rope                6      np.float32，逐半写进 empty_like
f04_lecture      ex6_param_count         4.5    逐层加讲义的 12d² + 13d：只差最后的 2d
f04_lecture      ex7_crossover           2      np.float32(6d)；crossover_4096 = 6 * 4096
f04_lecture      ex7_share               2      保留 3 位小数；share_128k = 0.84（讲义的 84%）
f04_lecture      ex9_answer              人工   答案写在了新加的单元格里：交给助教，不是 0
f04_float32      ex7_crossover           2      crossover_4096 调用自己的函数（np.float32）
f04_float32      ex7_share               2      share_128k 是 np.float32
f04_float32      ex9_answer              0      没作答：自动 0 分
f04_percent      ex7_crossover           2      6.0 * d
f04_percent      ex7_share               0      函数和 share_128k 都给了百分数（84），不是 0 到 1 的小数
f05_leftover     ex11_counts             3      return 后面剩下的 raise NotImplementedError() 不影响
f05_leftover     ex11_cached_generation  6      同上
f05_leftover     ex8_answer              人工   答案分两段写在了新加的两个单元格里
f05_leftover_before ex11_cached_generation 0   raise NotImplementedError() 在 return 之前：说要删掉那一行
f05_leftover_before ex8_answer           0      答案单元格上面只加了一个空白单元格：还是没作答
f01_rowmask      ex1_self_attention      4      掩码转置了（挡住的是行）：没有掩码的两部分对
f01_upstream     ex1_scores              0      没有除以 √2
f01_upstream     ex1_weights             0      用了没缩放的打分
f01_upstream     ex1_outputs             0      输出 = 自己的权重 × V：错在上游
f01_upstream     ex4_average_query       0      平均时只指向 k_a：方向错（权重 1.000 / 0.000）
f05_extra_prompt ex11_cached_generation  3      词元对；多送了一遍提示，处理的位置超过 n + m
f05_lecture      ex11_counts             3      讲义的答案：用缓存时 n + m（最后一个新词也送进模型），也是满分
f01_dataclass    ex4_copy_query          3      @dataclass 的配置对象给出 c = 10（dataclass 生成的 __eq__ 不是“和什么都相等”）
f01_dataclass    ex4_average_query       3      同一个配置对象
f01_own_check    ex4_copy_query          3      答题单元格里自己 assert 过再打印 “my sanity test passed”：不是伪造的“测试通过”
f01_own_check    ex4_average_query       3      同上
f01_plot         ex1_self_attention      8      答案下面自己画了注意力权重的图（matplotlib 不用再现场运行 fc-list 建字体缓存）
f01_scale_dv     ex1_self_attention      0      除以 √d_v：每一部分都有 d_v ≠ d_k 的输入（二维 + 掩码那组 d_v = 1，等于没缩放）
f01_scale_nk     ex1_self_attention      2      除以 √n_k：只有二维 + 掩码那组碰巧 n_k = d_k
f01_namedtuple   ex1_self_attention      8      返回 AttnOut(输出, 权重)：namedtuple 是 tuple 的子类
f01_from_lib     ex1_self_attention      0      调用 lib.transformer 的 scaled_dot_product_attention：题目要自己写出每一步
f01_hand_rounded ex1_scores              2      讲义的 0.707 写成一位小数 0.7：在 ±0.01 之内
f01_hand_rounded ex1_weights             2      0.8 / 0.2
f01_hand_rounded ex1_outputs             2      0.8 / 0.2，列表
f01_hand_over_d  ex1_scores              0      除以 d_k = 2，不是 √2
f01_hand_over_d  ex1_weights             0      这个打分的 softmax（和自己的打分一致，但打分错了）
f01_hand_over_d  ex1_outputs             0      自己的权重 × V，转置了
f01_hand_sign    ex1_scores              0      q_2·k_2 的符号错了：不是每个点积都除以同一个数
f01_hand_sign    ex1_weights             0      只取了 exp，忘了除以每行之和
f01_hand_sign    ex1_outputs             0      输出 = 自己的权重 × V：错在上游
"""

# 同一个格式问题，三处说同一句话；None = 这种格式三处都接受（公开测试不报错、自检没有 ✗、评分给满分）
# 提交、单元格、答案的名字、说明里的一句话
AGREE = [
    ("f01_moderate", "ex1_scores", "scores_1", "的形状应是 (2, 2)"),
    ("f01_transpose", "ex4_copy_query", "copy_query", "返回了 None：忘了写 return？"),
    ("f02_half", "ex2_variance", "score_variance", "应返回一个数，得到字符串"),
    ("f04_half", "ex7_crossover", "crossover_length", "应返回一个数，得到字符串"),
    ("f04_half_b", "ex6_param_count", "count_params", "应返回整数，得到字符串"),
    ("f05_half", "ex8_pad_mask", "key_padding_mask", "应返回 torch 的布尔张量"),
    ("f05_half_b", "ex8_pad_mask", "key_padding_mask", "应是布尔张量（torch.bool"),
    ("f05_half_b", "ex11_counts", "positions_with_cache", "应返回整数，得到字符串"),
    ("f01_loops", "ex1_weights", "weights_1", None),
    ("f01_loops", "ex4_copy_query", "copy_query", None),
    ("f02_numpy", "ex2_variance", "score_variance", None),
    ("f03_complex", "ex5_numbers", "dot_a", None),
    ("f03_loops", "ex5_rotate_2d", "rotate_2d", None),
    ("f04_numpy", "ex6_param_count", "count_params", None),
    ("f04_numpy", "ex7_crossover", "crossover_length", None),
    ("f05_lecture_count", "ex11_counts", "positions_without_cache", None),
    ("f01_float32", "ex1_self_attention", "self_attention", None),
    ("f01_hand_rounded", "ex1_scores", "scores_1", None),
    ("f01_hand_rounded", "ex1_weights", "weights_1", None),
    ("f01_hand_rounded", "ex1_outputs", "outputs_1", None),
    ("f01_torch", "ex1_self_attention", "self_attention", None),
    ("f01_namedtuple", "ex1_self_attention", "self_attention", None),
    ("f02_float32", "ex2_variance", "score_variance", None),
    ("f02_float32", "ex3_equivariance", "equivariance_gap", None),
    ("f02_torch", "ex2_divisor", "score_divisor", None),
    ("f03_torch", "ex5_rotate_2d", "rotate_2d", None),
    ("f03_torch", "ex5_rope", "rope", None),
    ("f03_float32", "ex5_rotate_2d", "rotate_2d", None),
    ("f03_float32", "ex5_rope", "rope", None),
    ("f04_lecture", "ex7_share", "attention_share", None),
    ("f04_float32", "ex7_crossover", "crossover_length", None),
    ("f05_leftover", "ex11_counts", "positions_with_cache", None),
    ("f01_float32", "ex4_copy_query", "copy_query", "删掉 raise NotImplementedError() 这一行"),
    ("f05_leftover_before", "ex11_cached_generation", "generate_cached", "删掉 raise NotImplementedError() 这一行"),
]

# 典型错误：公开测试（交之前）和评分说明（交之后）都说出原因
# 提交、单元格、公开测试里的一句话（None：公开测试的小例子发现不了这个错误，它不报错）、评分说明里的一句话
HINTS = [
    ("f01_mistakes", "ex1_self_attention", "看起来打分乘了 √d_k", "看起来打分乘了 √d_k"),
    ("f01_moderate", "ex1_self_attention", "看起来打分没有除以 √d_k", "看起来打分没有除以 √d_k"),
    ("f01_transpose", "ex1_self_attention", "只转置最后两维，用 np.swapaxes(K, -1, -2)", "np.swapaxes"),
    ("f01_scale_dv", "ex1_self_attention", "除以的应是 √d_k（Q、K 的最后一维）", "除以的应是 √d_k（Q、K 的最后一维）"),
    ("f01_scale_nk", "ex1_self_attention", "除以的应是 √d_k（Q、K 的最后一维）", "除以的应是 √d_k（Q、K 的最后一维）"),
    ("f01_nomask", "ex1_self_attention", "看起来掩码没有起作用", "看起来掩码没有起作用"),
    ("f01_inverted", "ex1_self_attention", "mask 里 True 表示“可以看”，是不是用反了", "mask 里 True 表示“可以看”，是不是用反了"),
    ("f01_moderate", "ex4_copy_query", "要求至少 0.99", "c ≥ ln(99 × 7)"),
    ("f01_mistakes", "ex4_average_query", "q 的方向和长度", "打分应比其他键都大"),
    ("f02_mistakes", "ex2_monte_carlo", "恰好等于公式", "恰好等于公式"),
    ("f02_mistakes", "ex3_equivariance", "causal 传给 sa_numpy 了吗", "causal 传给 sa_numpy 了吗"),
    ("f02_half_b", "ex2_monte_carlo", "用参数 seed", "用参数 seed"),
    ("f03_half", "ex5_rope", "指数是 -2i/d 吗", "base^(−i/d)"),
    ("f03_half_b", "ex5_rope", "用了参数 base 吗", "要用参数 base"),
    ("f03_mistakes", "ex5_rotate_2d", "转反了方向", "转反了方向"),
    ("f04_mistakes", "ex6_param_count", "124,439,808", "少了最后一个层归一化的 2d"),
    ("f04_half", "ex6_param_count", "都没有参数", "只有可学习的位置嵌入"),
    ("f05_mistakes", "ex8_pad_mask", "这个掩码挡住的是行（查询），应该挡列（键）", "这个掩码挡住的是行（查询），应该挡列（键）"),
    ("f05_mistakes", "ex11_counts", "提示只送进模型一次", "每一步都把提示的 n 个位置重新送进了模型"),
    ("f05_mistakes", "ex11_cached_generation", "kv_cache", "kv_cache"),
    ("f01_bool_index", "ex1_self_attention", "因果掩码 (3, 3)", "不能用布尔索引 scores[~mask]"),
    ("f01_from_lib", "ex1_self_attention", "现成的注意力（scaled_dot_product_attention，在 self_attention 里）",
     "现成的注意力（scaled_dot_product_attention，在 self_attention 里）"),
    ("f02_torch", "ex3_equivariance", None, "置换的方向反了"),
    ("f04_lecture", "ex6_param_count", "124,439,808", "讲义 §15 的答案用 12d² + 13d 估算"),
    ("f04_percent", "ex7_share", "d = 768、n = 128 时占比应约为 2.7%", "占比是 0 到 1 之间的小数"),
    ("f01_float32", "ex4_copy_query", "删掉 raise NotImplementedError() 这一行", "删掉 raise NotImplementedError() 这一行"),
    # issue 42：手算的典型错误，公开测试（自洽检查，不透露答案）和评分说明说同一句话
    ("f01_mistakes", "ex1_scores", "和 q·k 相等：没有除以 √d_k = √2", "和 q·k 相等：没有除以 √d_k = √2"),
    ("f01_mistakes", "ex1_weights", "softmax 按列做了，应按行做", "softmax 按列做了，应按行做"),
    ("f01_mistakes", "ex1_outputs", "和你的 weights_1 一致；错在 softmax 按列做了", "和你的 weights_1 一致；错在 softmax 按列做了"),
    ("f01_upstream", "ex1_scores", "和 q·k 相等：没有除以 √d_k = √2", "和 q·k 相等：没有除以 √d_k = √2"),
    ("f01_upstream", "ex1_weights", "是没有缩放的 q·k 做 softmax 的结果", "是没有缩放的 q·k 做 softmax 的结果"),
    ("f01_hand_over_d", "ex1_scores", "是 q·k 除以了 d_k = 2：应该除以 √d_k = √2",
     "是 q·k 除以了 d_k = 2：应该除以 √d_k = √2"),
    ("f01_hand_over_d", "ex1_weights", "是 q·k 除以 d_k = 2 之后做 softmax 的结果",
     "是 q·k 除以 d_k = 2 之后做 softmax 的结果"),
    ("f01_hand_over_d", "ex1_outputs", "看起来转置了", "看起来转置了"),
    ("f01_hand_sign", "ex1_scores", "不是每个 q_i·k_j 都除以同一个正数", "不是每个 q_i·k_j 都除以同一个正数"),
    ("f01_hand_sign", "ex1_weights", "有一行之和不是 1", "有一行之和不是 1"),
    ("f01_hand_sign", "ex1_outputs", "和你的 weights_1 一致；错在上游的 weights_1", "和你的 weights_1 一致；错在上游的 weights_1"),
]


def expected_status(sid: str) -> str:
    """诚实的提交都是 ok；答案写在新的 Markdown 单元格里的（"+after:"/"+before:" 且不是空白）是 repaired：评分器把它
    移进了答题单元格。学生自己加的代码单元格（"+code:"）原样留着，还是 ok。"""
    answers = SUBMISSIONS[sid][1]
    moved = [k for k in answers if k.startswith("+") and not k.startswith("+code:") and answers[k].strip()]
    return "repaired" if moved else "ok"


def parse_table() -> list[tuple]:
    rows = []
    for line in TABLE.strip().splitlines():
        sid, gid, want, why = line.split(maxsplit=3)
        rows.append((sid, gid, None if want == "人工" else float(want), why.strip()))
    return rows


# ============================================================================ 造提交、评分、读结果


def build_zip(course: Path, path: Path) -> dict:
    """按 SUBMISSIONS 造出每份提交（LMS 的样子：学号/NOTEBOOK.ipynb），写进 zip。返回 {学号: notebook}。"""
    with zipfile.ZipFile(path, "a" if path.exists() else "w") as zf:
        for sid, (notebook, answers) in SUBMISSIONS.items():
            rel = gf.load(course / "release" / "exercises" / f"{notebook}.ipynb")
            nb = gf.answered(rel, gf.load(course / "solutions" / "exercises" / f"{notebook}.ipynb"))
            for cell in nb["cells"]:
                if cell["cell_type"] == "markdown" and gf.is_solution(cell):
                    cell["source"] = next(c["source"] for c in rel["cells"] if gf.gid(c) == gf.gid(cell))
                if gf.gid(cell) in answers:
                    cell["source"] = answers[gf.gid(cell)]
            for key, text in answers.items():  # 学生自己加的单元格（JupyterLab 里选中答案单元格按 B / A）
                if key.startswith("+"):
                    kind = "code" if key.startswith("+code:") else "markdown"
                    where, gid = key.removeprefix("+code:").removeprefix("+").strip().split(":")
                    i = next(i for i, c in enumerate(nb["cells"]) if gf.gid(c) == gid)
                    at = i + 1 if where == "after" else i
                    while where == "after" and at < len(nb["cells"]) and not gf.gid(nb["cells"][at]) \
                            and nb["cells"][at].get("id", "").startswith("added-"):
                        at += 1  # 第二个新单元格加在第一个的下面
                    cell = {"cell_type": kind, "id": f"added-{len(nb['cells'])}", "metadata": {}, "source": text}
                    if kind == "code":
                        cell.update(outputs=[], execution_count=None)
                    nb["cells"].insert(at, cell)
            plain = {k for k in answers if not k.startswith("+")}
            assert {gf.gid(c) for c in nb["cells"]} >= plain, sid
            zf.writestr(f"{sid}/{notebook}.ipynb", gf.dump(nb))
    return {sid: nb for sid, (nb, _) in SUBMISSIONS.items()}


def grade(course: Path, zpath: Path, jobs: int = 2) -> subprocess.CompletedProcess:
    """助教的命令，原样运行。"""
    env = dict(os.environ, PYTHONPATH=str(course), OMP_NUM_THREADS="1",
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    cmd = [sys.executable, "-m", "lib.grading", "grade", "exercises", "--submissions", str(zpath),
           "--jobs", str(jobs)]
    return subprocess.run(cmd, cwd=course, env=env, capture_output=True, text=True, timeout=1800)


def _text(outputs, kind) -> str:
    stdout = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stdout")
    if kind == "error":  # 公开测试没通过：评分时（NBGRADER_EXECUTION=autograde）打印 “✗ …”，不抛出（lib/public_tests）
        errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in outputs if o.get("output_type") == "error"]
        return "\n".join(errors + [line for line in stdout.splitlines() if line.startswith("✗ ")])
    return stdout


def results(course: Path) -> dict:
    """{学号: {"row": grades.csv 的行, "cells": {grade_id: 分数或 None（待人工评分）},
    "visible": {grade_id: 公开测试的报错}, "hidden": {grade_id: 评分说明}, "selfcheck": 自检单元格的输出}}。"""
    from nbgrader.api import Gradebook

    rows = {r["student_id"]: r for r in gf.read_grades(course) if r["status"] != "missing"}  # 没交的其他 notebook 不算
    out = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for sid, (notebook, _) in SUBMISSIONS.items():
            if sid not in rows:
                out[sid] = {"row": None}
                continue
            grades = gb.find_submission_notebook(notebook, "exercises", sid).grades
            cells = {g.cell.name: (None if g.auto_score is None and g.manual_score is None else float(g.score))
                     for g in grades}
            nb = gf.load(course / "autograded" / sid / "exercises" / f"{notebook}.ipynb")
            visible, hidden, selfcheck = {}, {}, ""
            for cell in nb["cells"]:
                if gf.is_test(cell):
                    visible[gf.gid(cell)] = _text(cell.get("outputs", []), "error")
                if gf.gid(cell) and "grading" in cell.get("metadata", {}):
                    hidden[gf.gid(cell)] = cell["metadata"]["grading"]["message"]
                if "check_this_notebook(" in gf.src(cell):
                    selfcheck = _text(cell.get("outputs", []), "stdout")
            out[sid] = {"row": rows[sid], "cells": cells, "visible": visible, "hidden": hidden, "selfcheck": selfcheck}
    return out


def compare(res: dict) -> list[dict]:
    """表的每一行（加上表里没写、应得满分的自动评分单元格）：期望、实际、是否一致。"""
    from lib.grading import exercise_checks as ec

    listed = {(sid, gid) for sid, gid, _, _ in parse_table()}
    lines = [{"sid": sid, "gid": gid, "want": want, "why": why} for sid, gid, want, why in parse_table()]
    for sid, (notebook, _) in SUBMISSIONS.items():
        for gid, check in ec.CHECKS.items():
            if check.notebook == notebook and (sid, gid) not in listed:
                lines.append({"sid": sid, "gid": gid, "want": float(check.points), "why": "参考答案（表里没写）"})
    for line in lines:
        r = res.get(line["sid"], {})
        got = (r.get("cells") or {}).get(line["gid"], "缺")
        line["got"] = got
        line["ok"] = (got == line["want"] if line["want"] is None or got in (None, "缺")
                      else got == pytest.approx(line["want"]))
    return lines


def format_table(lines: list[dict], only_listed: bool = True) -> str:
    from grading_demo import pad

    fmt = lambda x: "人工" if x is None else (x if isinstance(x, str) else f"{x:g}")  # noqa: E731
    out = [pad("提交", 21) + pad("单元格", 24) + pad("期望", 6, True) + pad("得分", 6, True) + "  理由"]
    for line in lines:
        if only_listed and line["why"] == "参考答案（表里没写）" and line["ok"]:
            continue
        out.append(pad(line["sid"], 21) + pad(line["gid"], 24) + pad(fmt(line["want"]), 6, True)
                   + pad(fmt(line["got"]), 6, True) + "  " + line["why"] + ("" if line["ok"] else "   ✗ 不符合期望"))
    return "\n".join(out)


# ============================================================================ 测试


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("fairness")
    course = gf.copy_course(REPO, root / "course")
    zpath = root / "fairness.zip"
    build_zip(course, zpath)
    proc = grade(course, zpath)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"course": course, "results": results(course), "summary": proc.stdout}


@pytest.mark.slow
def test_every_row_of_the_table(graded):
    lines = compare(graded["results"])
    bad = [line for line in lines if not line["ok"]]
    assert not bad, f"{len(bad)} 行不符合期望：\n" + format_table(lines, only_listed=False)


@pytest.mark.slow
def test_honest_work_is_never_suspect_and_blank_written_answers_are_zero(graded):
    from lib.grading import exercise_checks as ec

    for sid, r in graded["results"].items():
        row = r["row"]
        assert row is not None, f"{sid} 不在 grades.csv 里"
        moved = "的答案写在了新单元格里，已移进答题单元格、交给助教人工评分" in row["detail"]
        assert row["status"] == expected_status(sid), (sid, row["status"], row["detail"])
        assert moved == (expected_status(sid) == "repaired"), (sid, row["detail"])
        assert "可疑" not in row["detail"] and "作弊" not in row["detail"], (sid, row["detail"])
        blank = [g for g, score in r["cells"].items() if g not in ec.CHECKS and score == 0.0]  # 文字题
        if blank:
            assert f"{len(blank)} 个文字题没有作答，自动记 0 分" in row["detail"], (sid, row["detail"])
        graded_so_far = sum(score for score in r["cells"].values() if score is not None)
        assert float(row["score"]) == pytest.approx(graded_so_far), sid
    assert "1 个单元格待人工评分" in graded["results"]["f02_alt"]["row"]["detail"]
    blank = [(sid, g) for sid, r in graded["results"].items() for g, score in r["cells"].items()
             if g not in ec.CHECKS and score == 0.0]
    submissions = len({sid for sid, _ in blank})
    assert f"没作答的文字题：{len(blank)} 个（{submissions} 份提交），已自动记 0 分" in graded["summary"], graded["summary"]


@pytest.mark.slow
@pytest.mark.parametrize("sid,gid,texts", [("f02_float32", "ex3_proof", [PROOF]),
                                           ("f04_lecture", "ex9_answer", [ADDED_PRE_LN]),
                                           ("f05_leftover", "ex8_answer", [ADDED_MASK_1, ADDED_MASK_2])])
def test_answers_written_in_added_cells_reach_the_ta(graded, sid, gid, texts):
    """答案写在了新单元格里：助教在 formgrader 的答题单元格里看到它（autograded/ 里的答题单元格就是这段文字），
    这道题待人工评分，grades.csv 的 detail 里有它的开头；新单元格不再重复出现。"""
    notebook = SUBMISSIONS[sid][0]
    nb = gf.load(graded["course"] / "autograded" / sid / "exercises" / f"{notebook}.ipynb")
    answer = next(gf.src(c) for c in nb["cells"] if gf.gid(c) == gid)
    assert all(t.strip() in answer for t in texts), answer
    assert sum(texts[0].strip() in gf.src(c) for c in nb["cells"]) == 1
    r = graded["results"][sid]
    assert r["cells"][gid] is None
    assert f"{gid} 的答案写在了新单元格里" in r["row"]["detail"] and " ".join(texts[0].split())[:20] in r["row"]["detail"]


@pytest.mark.slow
@pytest.mark.parametrize("sid,gid,name,phrase", AGREE, ids=[f"{a[0]}-{a[2]}" for a in AGREE])
def test_format_policy_is_the_same_in_visible_tests_selfcheck_and_grading(graded, sid, gid, name, phrase):
    r = graded["results"][sid]
    flagged = [line for line in r["selfcheck"].splitlines() if "✗" in line and name in line]
    if phrase is None:
        assert r["visible"][gid] == "", r["visible"][gid]
        assert not flagged, r["selfcheck"]
        assert r["hidden"][gid] == "正确。", r["hidden"][gid]
    else:
        assert phrase in r["visible"][gid], r["visible"][gid]
        assert any(phrase in line for line in flagged), r["selfcheck"]
        assert phrase in r["hidden"][gid], r["hidden"][gid]


@pytest.mark.slow
@pytest.mark.parametrize("sid,gid,visible,hidden", HINTS, ids=[f"{h[0]}-{h[1]}" for h in HINTS])
def test_typical_mistakes_are_named_before_and_after_submitting(graded, sid, gid, visible, hidden):
    r = graded["results"][sid]
    if visible is None:
        assert r["visible"][gid] == "", r["visible"][gid]
    else:
        assert visible in r["visible"][gid], r["visible"][gid]
    assert hidden in r["hidden"][gid], r["hidden"][gid]


@pytest.mark.slow
def test_visible_tests_explain_in_chinese(graded):
    """公开测试的报错都是中文的断言（格式问题、答错的提示、你的函数出错时是哪一次调用），没有裸的英文异常。
    评分时公开测试不抛出，只打印 “✗ 说明”（分数由隐藏检查决定）：这些行也是中文。"""
    cjk = re.compile(r"[\u4e00-\u9fff]")
    for sid, r in graded["results"].items():
        for gid, text in r["visible"].items():
            for line in filter(None, text.splitlines()):
                if line.startswith("✗ "):
                    assert cjk.search(line), (sid, gid, line)
                    continue
                ename, _, evalue = line.partition(": ")
                assert ename in ("AssertionError", "CheckFailed", "FormatError", "NotAnswered", "StudentCodeError",
                                 "NotImplementedError"), (sid, gid, line)
                assert cjk.search(evalue), (sid, gid, line)


def test_table_covers_every_autograded_cell_with_alternatives_mistakes_and_half_right_work():
    """每个自动评分单元格：至少两份别的写法的满分答案，至少一份错误或做对一半的答案。"""
    from lib.grading import exercise_checks as ec

    rows = parse_table()
    assert {sid for sid, *_ in rows} == set(SUBMISSIONS)
    for gid, check in ec.CHECKS.items():
        full = [sid for sid, g, want, _ in rows if g == gid and want == check.points]
        less = [sid for sid, g, want, _ in rows if g == gid and want is not None and want < check.points]
        assert len(full) >= 2 and less, (
            f"{gid}：公平性的表里要有至少两份满分、写法不同的答案（现在 {full}）和至少一份只得部分分的答案（现在 {less}）："
            f"在 SUBMISSIONS 里加答案（键是答题单元格的 grade_id，例如 '{gid}_answer'），在 TABLE 里加行"
            f"（提交编号、测试单元格的 grade_id '{gid}'、期望的分数、理由），见 CONTRIBUTING.md 的“怎样加一道练习”")
        assert all(0 <= want <= check.points for _, g, want, _ in rows if g == gid)
    assert len({(sid, gid) for sid, gid, *_ in rows}) == len(rows), "表里有重复的行"
    for sid, gid, *_ in AGREE + HINTS:
        assert sid in SUBMISSIONS and (gid in ec.CHECKS), (sid, gid)



@pytest.mark.slow
def test_notebooks_a_student_never_submitted_are_not_in_the_formgrader_queue(graded):
    """每份提交只交了一个 notebook：其余 notebook 在 gradebook 里（nbgrader 的 add_submission 建的）不标“需要人工评分”。"""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{graded['course'] / 'gradebook.db'}") as gb:
        for sid, (notebook, _) in SUBMISSIONS.items():
            for sn in gb.find_submission("exercises", sid).notebooks:
                if sn.name != notebook:
                    assert not sn.needs_manual_grade and sn.score == 0, (sid, sn.name)


# 新人试评（issue 20）：评分说明里要有的话、不能有的话
FRESH_EYES = [
    ("f01_rowmask", "ex1_self_attention", "掩码挡住的是行而不是列", "检查打分"),
    ("f01_upstream", "ex1_outputs", "和你的 weights_1 一致；错在打分没有除以 √2", "第 i 行是 o_i"),
    ("f01_upstream", "ex4_average_query", "方向不对", "c 足够大"),
    ("f05_extra_prompt", "ex11_cached_generation", "不超过 n + m = ", "应是 n + m − 1"),
    ("f05_lecture", "ex11_counts", "你写的是讲义的 n + m，和 n + m − 1 一样得满分", "应为"),
    ("f01_transpose", "ex1_self_attention", "np.swapaxes", "检查打分"),
]


@pytest.mark.slow
@pytest.mark.parametrize("sid,gid,says,never", FRESH_EYES, ids=[f"{f[0]}-{f[1]}" for f in FRESH_EYES])
def test_fresh_eyes_messages_name_the_real_cause(graded, sid, gid, says, never):
    message = graded["results"][sid]["hidden"][gid]
    assert says in message and never not in message, message
    assert "。；" not in message and not re.search(r"\d\.[，。；）]", message), message
