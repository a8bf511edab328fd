"""第 1–4 节 notebook 的演示函数（对应讲义代码 01 的演示 1–5，以及 §1 的两个测量）。

notebook 只调用这里的函数、显示结果、用 assert 说出结论；计算本身都在这里，
而且尽量直接用 lib/transformer.py 的零件（scaled_dot_product_attention、
self_attention_loop、causal_mask、sinusoidal_positions、MultiHeadAttention、FeedForward）。
每个函数都固定随机种子：同一台机器上结果完全相同。
"""
from __future__ import annotations

import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from .rnn import RNNLM
from .transformer import (FeedForward, LMOutput, MultiHeadAttention, causal_mask, scaled_dot_product_attention,
                          self_attention_loop, sinusoidal_positions)

# ----------------------------------------------------------------------------
# §1.1 RNN 的两个结构性问题：梯度要穿过 n-1 步；计算要一步一步地做
# ----------------------------------------------------------------------------


def _jacobian_norm(fn, x1: torch.Tensor) -> float:
    """‖∂fn(x1)/∂x1‖_F：输出的每一维对 x1 的每一维求导，再取 Frobenius 范数。"""
    jac = torch.autograd.functional.jacobian(fn, x1)  # (输出维度, 输入维度)
    return float(jac.norm())


def rnn_gradient_to_first(lengths, seed: int = 0) -> list[float]:
    """第 5 讲的 tanh RNN（lib.rnn.RNNLM，刚初始化）：‖∂h_n/∂x_1‖_F 随 n 的变化（§1.1 问题一）。

    x_1 是第 1 个词的词向量（32 维），h_n 是读完第 n 个词后的隐藏状态（128 维）。
    中间的 n-1 个词是随机词元。梯度要连乘 n-1 个雅可比矩阵 diag(1-h_t²) W_hh。
    返回和 lengths 一一对应的范数。
    """
    torch.manual_seed(seed)
    model = RNNLM().double()  # float64：n 大时梯度小到 1e-30 以下，float32 会直接变成 0
    gen = torch.Generator().manual_seed(seed)
    norms = []
    for n in lengths:
        tokens = torch.randint(3, 79, (1, n), generator=gen)  # 不用 <pad>、<s>、</s>
        emb = model.embed(tokens).detach()  # (1, n, 32)

        def h_last(x1):
            x = torch.cat([x1.view(1, 1, -1), emb[:, 1:]], dim=1)  # 把第 1 个词的向量换成变量
            h, _ = model.rnn(x)  # (1, n, 128)
            return h[0, -1]  # (128,)

        norms.append(_jacobian_norm(h_last, emb[0, 0].clone()))
    return norms


def attention_gradient_to_first(lengths, d: int = 32, focus: bool = True, seed: int = 0,
                                score: float = 12.0, samples: int = 20) -> list[float]:
    """一层自注意力：第 n 个位置的输出 o_n 对第 1 个词 x_1 的梯度 ‖∂o_n/∂x_1‖_F（§1.2）。

    focus=True：假设这个头已经学会了“第 n 个词去找第 1 个词”（例如动词找主语）——
    我们把 x_1 设成它的键 k_1 和 q_n 同方向、缩放后的打分等于 score，其余词是随机向量。
    focus=False：x_1 也是随机向量，这个头没有特别要看谁，第 1 个词分到的权重大约是 1/n；
    这时对 samples 个随机句子取平均（单个句子的权重忽大忽小）。
    两种情况下 x_1 到 o_n 都只隔一步（o_n = Σ_j α_nj x_j W^V）：梯度里没有 n-1 个矩阵的连乘。
    """
    gen = torch.Generator().manual_seed(seed)
    w_q, w_k, w_v = (torch.randn(d, d, generator=gen) / math.sqrt(d) for _ in range(3))  # q、k、v 每维方差约 1
    norms = []
    for n in lengths:
        total = 0.0
        for _ in range(1 if focus else samples):
            x = torch.randn(n, d, generator=gen)  # (n, d)
            if focus:
                q_n = x[-1] @ w_q
                k_target = q_n * (score * math.sqrt(d) / q_n.dot(q_n))  # 使 q_n·k_1/√d = score
                x[0] = torch.linalg.solve(w_k.T, k_target)  # x_1 W^K = k_target

            def o_last(x1, x=x):
                xx = torch.cat([x1[None], x[1:]], dim=0)  # (n, d)
                out, _ = scaled_dot_product_attention(xx @ w_q, xx @ w_k, xx @ w_v)  # (n, d)
                return out[-1]

            total += _jacobian_norm(o_last, x[0].clone())
        norms.append(total / (1 if focus else samples))
    return norms


def _best_time(fn, repeats: int, device) -> float:
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":  # GPU 是异步的：等它真正算完再停表
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


@torch.no_grad()
def time_rnn_vs_attention(lengths, d: int = 64, n_heads: int = 4, repeats: int = 7, seed: int = 0,
                          device="cpu"):
    """一个句子（批大小 1）的前向时间（§1.1 问题二），单位秒，取 repeats 次里最快的一次。

    RNN：nn.RNN(d, d)，n 个位置必须一个接一个地算（第 t 步要等第 t-1 步的 h）。
    自注意力：lib 的 MultiHeadAttention（带因果掩码），n 个位置一次算完。
    两者交替测量，机器忙的时候受到的影响差不多。device="cuda" 可以在 GPU 上测（如 Colab）。
    返回 {"rnn": [...], "attention": [...]}。
    """
    device = torch.device(device)
    torch.manual_seed(seed)
    rnn = nn.RNN(d, d, batch_first=True).to(device)
    attn = MultiHeadAttention(d, n_heads).to(device)
    out = {"rnn": [], "attention": []}
    for n in lengths:
        x = torch.randn(1, n, d, device=device)  # (1, n, d)
        rnn(x), attn(x, is_causal=True)  # 预热一次
        out["rnn"].append(_best_time(lambda: rnn(x), repeats, device))
        out["attention"].append(_best_time(lambda: attn(x, is_causal=True), repeats, device))
    return out


# ----------------------------------------------------------------------------
# §2 自注意力：软的字典查找（演示 1）、the cat sat down（演示 2）、为什么要三个投影（§2.4）
# ----------------------------------------------------------------------------

LOOKUP_KEYS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]])  # (3, 2)
LOOKUP_VALUES = torch.tensor([[10.0], [20.0], [30.0]])  # (3, 1)
LOOKUP_QUERIES = torch.tensor([[10.0, 0.0], [1.0, 0.0], [0.5, 0.5]])  # (3, 2)


def soft_lookup(queries=LOOKUP_QUERIES, keys=LOOKUP_KEYS, values=LOOKUP_VALUES, scaled: bool = False):
    """软的字典查找（§2.1，代码 01 演示 1）：权重 = softmax(q·k)，输出 = Σ 权重 × 值。

    讲义表里的数字是**不除以 √d_k** 的点积（例如 (10,0) 的打分是 10、0、7）；
    scaled=True 时改用 lib 的 scaled_dot_product_attention（除以 √2），可以对比。
    返回 (权重 (n_q, n_k), 输出 (n_q,))。
    """
    if scaled:
        out, weights = scaled_dot_product_attention(queries, keys, values)
    else:
        weights = torch.softmax(queries @ keys.T, dim=-1)  # (n_q, n_k)：§2.1 的 softmax(q·k_j)
        out = weights @ values  # (n_q, 1)
    return weights, out.squeeze(-1)


SENTENCE = ["the", "cat", "sat", "down"]


def cat_sat_down(d: int = 4, d_k: int = 3, seed: int = 0) -> dict:
    """代码 01 演示 2：4 个词、d = 4、d_k = d_v = 3 的自注意力，每一步的中间结果（§2.2、§2.3）。

    词向量和 W^Q、W^K、W^V 都是随机的（权重没有语言学含义）。
    返回 dict：x (4, d)，w_q/w_k/w_v (d, d_k)，q/k/v (4, d_k)，scores (4, 4)（已除以 √d_k），
    weights (4, 4)，out (4, d_k)（矩阵写法），out_loop (4, d_k)（逐词循环写法）。
    """
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(len(SENTENCE), d, generator=gen)  # (n, d)：每行一个词
    w_q, w_k, w_v = (torch.randn(d, d_k, generator=gen) for _ in range(3))
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (n, d_k)
    out, weights = scaled_dot_product_attention(q, k, v)  # (n, d_k), (n, n)
    scores = q @ k.T / math.sqrt(d_k)  # (n, n)：只为了打印；scaled_dot_product_attention 内部算的是同一个
    return {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v, "q": q, "k": k, "v": v, "scores": scores,
            "weights": weights, "out": out, "out_loop": self_attention_loop(x, w_q, w_k, w_v)}


def raw_dot_attention(x: torch.Tensor):
    """§2.4 的反例：不用投影，直接用 x_i·x_j/√d 打分、对 x_j 加权求和。返回 (打分 (n, n), 权重 (n, n))。"""
    scores = x @ x.T / math.sqrt(x.size(-1))  # 对称：x_i·x_j = x_j·x_i
    return scores, torch.softmax(scores, dim=-1)


def self_is_row_max_rate(n_sentences: int = 1000, n: int = 4, d: int = 4, projections: bool = False,
                         seed: int = 0) -> float:
    """随机句子里“每个词最关注它自己”（打分矩阵的对角元是该行最大值）的比例（§2.4）。

    projections=False：x·x 打分；projections=True：用随机的 W^Q ≠ W^K 打分。
    """
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n_sentences, n, d, generator=gen)  # (S, n, d)
    if projections:
        w_q, w_k = torch.randn(d, d, generator=gen), torch.randn(d, d, generator=gen)
        scores = (x @ w_q) @ (x @ w_k).transpose(1, 2)
    else:
        scores = x @ x.transpose(1, 2)  # (S, n, n)
    is_max = scores.argmax(dim=-1) == torch.arange(n)  # (S, n)
    return float(is_max.float().mean())


# ----------------------------------------------------------------------------
# §3 缩放：点积的方差随 d_k 增长，softmax 饱和，梯度消失（代码 01 演示 3）
# ----------------------------------------------------------------------------


def softmax_jacobian(weights: torch.Tensor) -> torch.Tensor:
    """softmax 的雅可比矩阵 ∂α_i/∂e_j = α_i(δ_ij − α_j) = diag(α) − α αᵀ（§3.2）。weights: (..., n) → (..., n, n)。"""
    return torch.diag_embed(weights) - weights[..., :, None] * weights[..., None, :]


def scaling_experiment(d_ks=(4, 16, 64, 256, 1024), trials: int = 2000, n_keys: int = 10, seed: int = 0):
    """代码 01 演示 3（§3.3）：每个 d_k 做 trials 次实验，1 个查询、n_keys 个键，都是标准正态向量。

    “梯度范数”= softmax 雅可比矩阵 diag(α) − ααᵀ 的 Frobenius 范数，在 trials 次实验上取平均
    （这样算和讲义的表一致）。返回一个列表，每个 d_k 一个 dict：
    d_k、score_std（点积的标准差）、max_weight / grad_norm（不缩放）、
    scaled_max_weight / scaled_grad_norm（除以 √d_k 之后）。
    """
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for d_k in d_ks:
        q = torch.randn(trials, 1, d_k, generator=gen)  # (trials, 1, d_k)
        k = torch.randn(trials, n_keys, d_k, generator=gen)  # (trials, n_keys, d_k)
        scores = (q @ k.transpose(1, 2)).squeeze(1)  # (trials, n_keys)：不缩放的 q·k
        row = {"d_k": d_k, "score_std": float(scores.std())}
        for prefix, s in (("", scores), ("scaled_", scores / math.sqrt(d_k))):
            a = torch.softmax(s, dim=-1)  # (trials, n_keys)
            row[prefix + "max_weight"] = float(a.max(dim=-1).values.mean())
            row[prefix + "grad_norm"] = float(softmax_jacobian(a).flatten(1).norm(dim=1).mean())
        rows.append(row)
    return rows


# 讲义 §3.3 的表，notebook 和测试都拿它对照
LECTURE_SCALING_TABLE = {
    4: (2.0, 0.497, 0.335, 0.308, 0.340),
    16: (4.0, 0.733, 0.261, 0.317, 0.346),
    64: (8.1, 0.856, 0.169, 0.317, 0.349),
    256: (16.0, 0.934, 0.087, 0.319, 0.347),
    1024: (32.2, 0.965, 0.048, 0.320, 0.348),
}

# ----------------------------------------------------------------------------
# §4 三个缺陷与补丁（代码 01 演示 4、5）
# ----------------------------------------------------------------------------


def _random_projections(d: int, gen: torch.Generator):
    return tuple(torch.randn(d, d, generator=gen) / math.sqrt(d) for _ in range(3))


def word_order_demo(d: int = 8, seed: int = 0) -> dict:
    """代码 01 演示 4（§4.1）：“dog bites man” 和 “man bites dog” 每个词的输出。

    同一组词向量、同一组 W^Q、W^K、W^V。without 是不加位置的输出，with_pos 是加上正弦位置编码
    （lib 的 sinusoidal_positions）之后的输出。每个 dict 都是 词 → (句子 1 的输出, 句子 2 的输出)。
    """
    gen = torch.Generator().manual_seed(seed)
    emb = {w: torch.randn(d, generator=gen) for w in ("dog", "bites", "man")}
    w_q, w_k, w_v = _random_projections(d, gen)
    s1, s2 = ["dog", "bites", "man"], ["man", "bites", "dog"]

    def outputs(words, positions: bool):
        x = torch.stack([emb[w] for w in words])  # (3, d)
        if positions:
            x = x + sinusoidal_positions(len(words), d)  # §5 的补丁：每个位置加一个不同的向量
        out, _ = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)  # (3, d)
        return {w: out[i] for i, w in enumerate(words)}

    result = {"sentences": (s1, s2)}
    for key, pos in (("without", False), ("with_pos", True)):
        o1, o2 = outputs(s1, pos), outputs(s2, pos)
        result[key] = {w: (o1[w], o2[w]) for w in s1}
    return result


def causal_mask_demo(n: int = 4, d: int = 8, seed: int = 0) -> dict:
    """代码 01 演示 5（§4.3）：因果掩码、加掩码后的权重、把最后一个词换掉之后的输出。

    返回 dict：mask (n, n) 布尔，weights (n, n)，out (n, d)，out_changed (n, d)（最后一个词换成另一个随机向量）。
    """
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen)  # (n, d)
    w_q, w_k, w_v = _random_projections(d, gen)
    mask = causal_mask(n)  # (n, n)：下三角为 True
    out, weights = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, mask)
    x2 = x.clone()
    x2[-1] = torch.randn(d, generator=gen)  # 换掉最后一个词
    out_changed, _ = scaled_dot_product_attention(x2 @ w_q, x2 @ w_k, x2 @ w_v, mask)
    return {"mask": mask, "weights": weights, "out": out, "out_changed": out_changed}


def stacked_attention_without_ffn(n_layers: int = 3, n: int = 5, d: int = 6, seed: int = 0) -> dict:
    """§4.2：只叠自注意力（不加前馈网络）时，输出仍是“值”的加权平均。

    第 ℓ 层：X_ℓ = A_ℓ X_{ℓ-1} W^V_ℓ，A_ℓ 是这一层的注意力权重（行和为 1、非负）。
    叠起来：X_L = (A_L ⋯ A_1) X_0 (W^V_1 ⋯ W^V_L) = A_total · V_total：
    A_total 仍然每行非负、和为 1，所以每个输出都是同一组向量 V_total 的加权平均（落在它们的凸包里）。
    返回 dict：out (n, d)，a_total (n, n)，v_total (n, d)，layer_weights（每层的 A_ℓ）。
    """
    gen = torch.Generator().manual_seed(seed)
    x0 = torch.randn(n, d, generator=gen)
    x, a_total, w_total, layer_weights = x0, torch.eye(n), torch.eye(d), []
    for _ in range(n_layers):
        w_q, w_k, w_v = _random_projections(d, gen)
        x, a = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)  # (n, d), (n, n)
        layer_weights.append(a)
        a_total, w_total = a @ a_total, w_total @ w_v
    return {"out": x, "a_total": a_total, "v_total": x0 @ w_total, "layer_weights": layer_weights}


class MinimalTransformer(nn.Module):
    """§4.4 的“最小 Transformer”：三个补丁，其余什么都没有（没有多头、残差、层归一化）。

        词向量 + 正弦位置编码 → [因果自注意力 → 逐位置前馈网络] × N → 线性层 + softmax

    全部用 lib/transformer.py 的零件：MultiHeadAttention（1 个头）、FeedForward（GELU）、
    sinusoidal_positions、causal_mask。真正的 GPT 是 lib.transformer.TransformerLM（第 6、7 节补上其余部分）。
    接口和 TransformerLM 一样（forward(idx, targets) 返回 LMOutput），所以 lib 的 train_lm 可以直接训练它。
    """

    def __init__(self, vocab_size: int, d_model: int = 16, n_layers: int = 2):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.attns = nn.ModuleList(MultiHeadAttention(d_model, 1) for _ in range(n_layers))
        self.ffns = nn.ModuleList(FeedForward(d_model) for _ in range(n_layers))
        self.lm_head = nn.Linear(d_model, vocab_size)

    @torch.no_grad()
    def hidden_norms(self, idx: torch.Tensor) -> list[float]:
        """每一层之后隐藏状态的平均长度（位置上取平均）：看信号在没有残差和层归一化时怎样变化。"""
        x = self.tok_emb(idx) + sinusoidal_positions(idx.size(1), self.tok_emb.embedding_dim)
        norms = [float(x.norm(dim=-1).mean())]
        for attn, ffn in zip(self.attns, self.ffns):
            x = ffn(attn(x, mask=causal_mask(idx.size(1)))[0])
            norms.append(float(x.norm(dim=-1).mean()))
        return norms

    def forward(self, idx: torch.Tensor, targets=None) -> LMOutput:
        """idx: (B, T) → LMOutput(logits (B, T, V), loss)。概率 = softmax(logits)，见 next_token_probs。"""
        T = idx.size(1)
        x = self.tok_emb(idx) + sinusoidal_positions(T, self.tok_emb.embedding_dim)  # 补丁一：位置
        mask = causal_mask(T)  # 补丁三：因果掩码 (T, T)
        for attn, ffn in zip(self.attns, self.ffns):
            x, _ = attn(x, mask=mask)  # 位置之间“搬运”信息
            x = ffn(x)  # 补丁二：每个位置单独“加工”（GELU 非线性）
        logits = self.lm_head(x)  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        return LMOutput(logits, loss, None)

    @torch.no_grad()
    def next_token_probs(self, idx: torch.Tensor) -> torch.Tensor:
        """图里的最后一步“线性层 + softmax”：(B, T) → 每个位置下一个词的概率 (B, T, V)。"""
        return torch.softmax(self.forward(idx).logits, dim=-1)
