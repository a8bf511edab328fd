"""第 7 讲《自注意力与 Transformer》的全部零件：一个文件，从注意力到能训练、能生成的 GPT。

读法：从上往下读，顺序和讲义一致（§2 注意力 → §4 掩码 → §5 位置编码 → §6 多头 →
§7 块 → §8 三种结构 → §9 训练 → §10 KV 缓存）。每个公式旁边标了讲义的小节号。
形状约定：B = 批大小，T = 序列长度，d = 模型维度，h = 头数，hs = 每个头的维度 d/h。

掩码只有一个约定：布尔张量，True 表示“可以看”，False 表示“不许看”。
不许看的位置在 softmax 之前填 -inf。为什么不填 -1e4 这样的有限数？在 float32 里
-1e4 经过 softmax 也是精确的 0，问题不在这里；问题是填充值**替换**了原来的打分。
训练中若允许看的打分本身跌到 -1e4 以下，被掩住的位置反而成了全行最大的打分，
拿走大部分权重——模型偷看到了未来。Hugging Face 的 GPT-2 用过 masked_bias = -1e4，
就有人在训练后撞上这个问题（transformers #3181、#15199，PR #17306 改掉了它）。
-inf 永远小于任何打分，不会出这种事（notebook 04 有一个小演示）。

默认在 CPU 上运行；模型或输入放到 CUDA 上时一切照常，没有任何地方假定设备。
后续第 9、10 讲会复用本文件，公开的名字和参数请保持稳定。
"""
from __future__ import annotations

import dataclasses
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------
# §2–§4 缩放点积注意力与掩码
# ----------------------------------------------------------------------------


def causal_mask(n_queries: int, n_keys: int | None = None, device=None) -> torch.Tensor:
    """因果掩码（§4.3）：下三角为 True。

    有 KV 缓存时，新来的 n_queries 个查询排在 n_keys 个键的最后，
    所以第 i 个查询能看到前 i + (n_keys - n_queries) + 1 个键。
    """
    n_keys = n_queries if n_keys is None else n_keys
    ones = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device)
    return ones.tril(diagonal=n_keys - n_queries)  # (Tq, Tk)


def pad_mask_from_tokens(idx: torch.Tensor, pad_id: int) -> torch.Tensor:
    """填充掩码：(B, T)，真实词元为 True，填充为 False。

    用在注意力矩阵的“列”（键）上：pad_mask[:, None, None, :]（练习 8）。
    """
    return idx != pad_id


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p: float = 0.0):
    """softmax(Q K^T / sqrt(d_k)) V（§2.3、§3.3），返回 (输出, 注意力权重)。

    q: (..., Tq, d_k)，k: (..., Tk, d_k)，v: (..., Tk, d_v)；
    mask: 可广播到 (..., Tq, Tk) 的布尔张量，True = 可以看。
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # 按行 softmax，每行和为 1
    # 整行都被掩住（例如全是填充的句子）时 softmax 得到 nan：把这些行置 0。
    weights = torch.nan_to_num(weights, nan=0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights  # (..., Tq, d_v), (..., Tq, Tk)


def self_attention_loop(x, w_q, w_k, w_v):
    """自注意力的“逐词循环”写法（§2.2），只用于教学：和矩阵写法结果完全一致。

    x: (n, d)；w_q, w_k: (d, d_k)；w_v: (d, d_v)。返回 (n, d_v)。
    """
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    outputs = []
    for i in range(x.size(0)):  # 每个词当一次查询
        e = torch.stack([q[i] @ k[j] for j in range(x.size(0))]) / math.sqrt(k.size(1))
        alpha = torch.softmax(e, dim=0)  # α_ij
        outputs.append(sum(alpha[j] * v[j] for j in range(x.size(0))))  # o_i = Σ_j α_ij v_j
    return torch.stack(outputs)


def layer_norm(x, eps: float = 1e-5):
    """手写的层归一化（§7.2，不含 γ、β）：每个位置单独减均值、除以标准差。"""
    mu = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, unbiased=False, keepdim=True)  # 1/d Σ (x_j - μ)^2，不是 1/(d-1)
    return (x - mu) / torch.sqrt(var + eps)


# ----------------------------------------------------------------------------
# §5 位置编码：sinusoidal / learned / rope / none
# ----------------------------------------------------------------------------
POSITION_KINDS = ("learned", "sinusoidal", "rope", "none")


def sinusoidal_positions(n_positions: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """正弦位置编码（§5.2）：PE[p, 2i] = sin(p ω_i)，PE[p, 2i+1] = cos(p ω_i)，ω_i = base^(-2i/d)。"""
    p = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    pe = torch.zeros(n_positions, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(p * omega)  # 偶数维：sin，相邻两维组成一根“时钟指针”
    pe[:, 1::2] = torch.cos(p * omega)  # 奇数维：cos
    return pe.float()  # 用 float64 算角度再转 float32：位置很大时更准


def sinusoidal_shift_matrix(k: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """平移矩阵 M_k（§5.2）：对所有 p 都有 PE_{p+k} = M_k PE_p。每两维一个 2×2 旋转块。"""
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    m = torch.zeros(d, d, dtype=torch.float64)
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    idx = torch.arange(0, d, 2)
    m[idx, idx], m[idx, idx + 1] = c, s  # sin((p+k)ω) = cos(kω) sin(pω) + sin(kω) cos(pω)
    m[idx + 1, idx], m[idx + 1, idx + 1] = -s, c  # cos((p+k)ω) = -sin(kω) sin(pω) + cos(kω) cos(pω)
    return m.float()


def rope_cos_sin(positions: torch.Tensor, head_dim: int, base: float = 10000.0):
    """RoPE 的 cos/sin 表（§5.4）：第 i 个平面的角速度 θ_i = base^(-2i/d_k)。返回两个 (T, hs)。"""
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device) / head_dim)
    angles = positions.to(torch.float64)[:, None] * theta  # (T, hs/2)：位置 m 转过 m θ_i
    angles = torch.cat([angles, angles], dim=-1)  # (T, hs)：前一半和后一半共用角度
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0,
               pairing: str = "half"):
    """把 x 的最后一维按位置旋转（§5.4），x: (..., T, hs)。

    配对方式是“前一半和后一半”（GPT-NeoX、LLaMA 的写法）：第 i 维和第 i + hs/2 维组成一个平面。
    原论文（RoFormer）是相邻两维 (2i, 2i+1) 配对。对同一对 q、k，两种配对的打分**不同**；
    它们只差一个固定的维度排列：把 W^Q、W^K 的输出维度按这个排列重排，两种写法就算出同样的打分。
    从头训练时这个排列被权重吸收，两种写法一样好；转换别人训练好的权重时必须重排，否则结果是错的。
    两种写法都只依赖 m - n，旋转都不改变向量长度。

    pairing="half"（默认，模型里用的）：第 i 维和第 i + hs/2 维配对。
    pairing="adjacent"：RoFormer 的写法，第 2i 维和第 2i+1 维配对（第 i 个平面同样用 θ_i）。
    """
    T, hs = x.size(-2), x.size(-1)
    if positions is None:
        positions = torch.arange(T, device=x.device)
    if pairing == "adjacent":  # 把 (x_0, x_2, …, x_1, x_3, …) 排成前后两半，用 half 的写法转完再排回去
        order = torch.cat([torch.arange(0, hs, 2), torch.arange(1, hs, 2)]).to(x.device)
        return apply_rope(x[..., order], positions, base)[..., torch.argsort(order)]
    if pairing != "half":
        raise ValueError(f"pairing 只能是 'half' 或 'adjacent'，收到 {pairing!r}")
    cos, sin = rope_cos_sin(positions, hs, base)
    x1, x2 = x[..., : hs // 2], x[..., hs // 2 :]
    rotated = torch.cat([-x2, x1], dim=-1)  # 每个平面内转 90°：(a, b) → (-b, a)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)  # R(mθ) 作用在每个平面上


class LearnedPositions(nn.Module):
    """可学习的位置嵌入（§5.3）：一张 max_len × d 的表，和词嵌入一起训练。"""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        max_len = self.table.num_embeddings
        if int(positions.max()) >= max_len:
            raise ValueError(
                f"位置 {int(positions.max())} 超出了可学习的位置嵌入的范围 {max_len}（§5.3）："
                f"它只有 L_max = {max_len} 个位置（0–{max_len - 1}），更长的序列没有对应的位置向量。"
                f"请截短输入，或改用 pos='sinusoidal' / 'rope' / 'none'。"
            )
        return self.table(positions)


# ----------------------------------------------------------------------------
# §6 多头注意力（含交叉注意力、分组查询注意力 GQA、KV 缓存）
# ----------------------------------------------------------------------------


class MultiHeadAttention(nn.Module):
    """多头注意力（§6.2）。一个融合的 d → 3d 投影算出 Q、K、V，再 view/transpose 成 h 个头。

    cross=True 时是交叉注意力（§8.3）：查询来自 x（解码器），键和值来自 memory（编码器输出）。
    n_kv_heads < n_heads 时是分组查询注意力（GQA，§12）：几个查询头共用一组 K、V。
    """

    def __init__(self, d_model, n_heads, n_kv_heads=None, bias=True, dropout=0.0,
                 rope=False, rope_base=10000.0, cross=False):
        super().__init__()
        assert d_model % n_heads == 0, "d_model 必须能被 n_heads 整除"
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.n_kv_heads = n_kv_heads or n_heads
        assert n_heads % self.n_kv_heads == 0, "n_heads 必须是 n_kv_heads 的整数倍"
        kv_dim = self.n_kv_heads * self.head_dim
        self.cross, self.rope, self.rope_base, self.dropout = cross, rope, rope_base, dropout
        if cross:  # 查询和键值来自不同的序列，只能分开投影
            self.q_proj = nn.Linear(d_model, d_model, bias=bias)
            self.kv_proj = nn.Linear(d_model, 2 * kv_dim, bias=bias)
        else:  # W^Q、W^K、W^V 拼成一个矩阵：一次矩阵乘法
            self.qkv_proj = nn.Linear(d_model, d_model + 2 * kv_dim, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O

    def _split_heads(self, t, n):  # (B, T, n*hs) → (B, n, T, hs)
        B, T, _ = t.shape
        return t.view(B, T, n, self.head_dim).transpose(1, 2)

    def forward(self, x, memory=None, mask=None, cache=None, need_weights=False, is_causal=False):
        """x: (B, T, d)。mask: 可广播到 (B, h, T, Tk) 的布尔张量。

        cache: 一个 dict（KV 缓存，§10.2），存放之前位置的 K、V；就地更新。
        is_causal=True 表示 mask 恰好是普通的因果掩码，可以走 PyTorch 的快速路径。
        返回 (输出 (B, T, d), 注意力权重 (B, h, T, Tk) 或 None)。
        """
        B, T, d = x.shape
        kv_dim = self.n_kv_heads * self.head_dim
        if self.cross:
            q = self.q_proj(x)  # (B, T, d)
            k, v = self.kv_proj(memory).split(kv_dim, dim=-1)  # 各 (B, S, kv_dim)
        else:
            q, k, v = self.qkv_proj(x).split([d, kv_dim, kv_dim], dim=-1)
        q = self._split_heads(q, self.n_heads)  # (B, h, T, hs)
        k = self._split_heads(k, self.n_kv_heads)  # (B, h_kv, Tk, hs)
        v = self._split_heads(v, self.n_kv_heads)  # (B, h_kv, Tk, hs)

        past = 0 if cache is None or "k" not in cache else cache["k"].size(2)
        if self.rope:  # §5.4：只旋转 Q 和 K，不动 V；位置从缓存的长度接着数
            pos = torch.arange(past, past + T, device=x.device)
            q, k = apply_rope(q, pos, self.rope_base), apply_rope(k, pos, self.rope_base)
        if cache is not None:  # 把新位置的 K、V 接在缓存后面
            if past:
                k = torch.cat([cache["k"], k], dim=2)  # (B, h_kv, past+T, hs)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        if is_causal and mask is None and (need_weights or past > 0):
            mask = causal_mask(T, past + T, device=x.device)  # (T, past+T)：显式路径也要因果
            is_causal = False
        if self.n_kv_heads != self.n_heads:  # GQA：每组 K、V 复制给组内的查询头
            rep = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)  # (B, h, Tk, hs)

        p = self.dropout if self.training else 0.0
        if need_weights:  # 教学路径：显式算出权重，方便画图
            out, weights = scaled_dot_product_attention(q, k, v, mask, p)
        else:  # 快速路径：同一个公式，PyTorch 的融合实现，不保存 T×T 的权重
            weights = None
            if is_causal:
                out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        out = out.transpose(1, 2).contiguous().view(B, T, d)  # (B, h, T, hs) → (B, T, h*hs)
        return self.out_proj(out), weights


# ----------------------------------------------------------------------------
# §7 Transformer 块：前馈网络、归一化、残差
# ----------------------------------------------------------------------------


def swiglu_hidden(d_model: int, multiple_of: int = 8) -> int:
    """SwiGLU 的隐藏宽度（§12）：约 8/3·d，向上取整到 multiple_of 的倍数（LLaMA 用 256）。"""
    h = int(8 * d_model / 3)
    return multiple_of * math.ceil(h / multiple_of)


class FeedForward(nn.Module):
    """逐位置的前馈网络（§4.2、§7.3）。

    kind="gelu"：W_2 GELU(W_1 x + b_1) + b_2，宽度 4d（GPT-2 的结构）。这里用精确的 GELU
        x·Φ(x)；GPT-2 原版用的是 tanh 近似（F.gelu(h, approximate="tanh")），两者最多差约 5e-4，
        参数量和结构完全相同，但加载 GPT-2 的权重时要换成近似版才能逐位复现。
    kind="swiglu"：W_2 (SiLU(W_1 x) ⊙ W_3 x)，宽度约 8/3·d（LLaMA，§12）。
    """

    def __init__(self, d_model, d_ff=None, kind="gelu", bias=True):
        super().__init__()
        self.kind = kind
        if kind == "gelu":
            d_ff = d_ff or 4 * d_model
            self.fc_in = nn.Linear(d_model, d_ff, bias=bias)
        elif kind == "swiglu":
            d_ff = d_ff or swiglu_hidden(d_model)
            self.fc_in = nn.Linear(d_model, 2 * d_ff, bias=bias)  # W_1 和 W_3 拼在一起
        else:
            raise ValueError(f"未知的前馈网络类型 {kind!r}：可选 'gelu' 或 'swiglu'")
        self.fc_out = nn.Linear(d_ff, d_model, bias=bias)  # W_2：残差路径上的最后一层

    def forward(self, x):
        h = self.fc_in(x)
        if self.kind == "gelu":
            h = F.gelu(h)
        else:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up  # 门控：一半决定“开多少”，一半是内容
        return self.fc_out(h)  # dropout 由 Block 统一加在每个子层的输出上（只加一次）


def make_norm(kind: str, d_model: int, bias: bool = True) -> nn.Module:
    """归一化层：'layernorm'（§7.2，γ 和 β）或 'rmsnorm'（§12，只除以均方根，只有 γ）。"""
    if kind == "layernorm":
        return nn.LayerNorm(d_model, bias=bias)
    if kind == "rmsnorm":
        return nn.RMSNorm(d_model, eps=1e-5)
    raise ValueError(f"未知的归一化类型 {kind!r}：可选 'layernorm' 或 'rmsnorm'")


@dataclass
class TransformerConfig:
    """一个模型的全部超参数。默认值就是 §11 的迷你 GPT（109,248 个参数）。"""

    vocab_size: int = 79
    max_len: int = 64  # 可学习的位置嵌入有几个位置 L_max（只对 pos="learned" 有意义）
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int | None = None  # None：gelu 取 4d，swiglu 取 swiglu_hidden(d)
    dropout: float = 0.0
    pos: str = "learned"  # "learned" | "sinusoidal" | "rope" | "none"（§5）
    causal: bool = True  # True：解码器（GPT）；False：编码器（BERT，§8.1）
    norm_position: str = "pre"  # "pre"（GPT-2 及以后）| "post"（2017 原版，§7.4）
    residual: bool = True  # False 只用于 §7.1 的演示：去掉残差连接
    norm: str = "layernorm"  # "layernorm" | "rmsnorm"（§12）
    ffn: str = "gelu"  # "gelu" | "swiglu"（§12）
    bias: bool = True  # False：线性层和 LayerNorm 都不要偏置（§12）
    n_kv_heads: int | None = None  # < n_heads 时为 GQA（§12）
    tie_weights: bool = True  # 输出层和词嵌入共用一个矩阵（§8.2）
    cross_attention: bool = False  # 每块多一个交叉注意力子层（编码器—解码器的解码器，§8.3）
    rope_base: float = 10000.0
    # 正弦位置编码加到词向量上之前乘的系数（§5.1、§11.3）。默认 1：原论文的编码，每个位置向量的长度是
    # sqrt(d/2)（d = 64 时约 5.7），而 GPT-2 初始化下词向量的长度只有约 0.02·sqrt(d) = 0.16，位置“淹没”了词。
    # 取 0.02·sqrt(2) ≈ 0.028 时编码的每一维均方根是 0.02，和初始化时的词向量、可学习的位置表一样大。
    pe_scale: float = 1.0

    def __post_init__(self):
        if self.pos not in POSITION_KINDS:
            raise ValueError(f"未知的位置编码 {self.pos!r}：可选 {POSITION_KINDS}")
        if self.pe_scale != 1.0 and self.pos != "sinusoidal":
            raise ValueError(f"pe_scale 只对 pos='sinusoidal' 有意义（收到 pos={self.pos!r}）")
        if self.norm_position not in ("pre", "post"):
            raise ValueError(f"norm_position 只能是 'pre' 或 'post'，收到 {self.norm_position!r}")


class Block(nn.Module):
    """一个 Transformer 块（§7.4）：自注意力子层 +（交叉注意力子层）+ 前馈子层。

    Pre-LN：x = x + Sublayer(LN(x))     Post-LN：x = LN(x + Sublayer(x))
    residual=False 时去掉“x +”（§7.1 的演示：表示会坍缩成同一个向量）。
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        d = cfg.d_model
        self.pre, self.residual = cfg.norm_position == "pre", cfg.residual
        self.norm1 = make_norm(cfg.norm, d, cfg.bias)
        self.attn = MultiHeadAttention(d, cfg.n_heads, cfg.n_kv_heads, cfg.bias, cfg.dropout,
                                       rope=cfg.pos == "rope", rope_base=cfg.rope_base)
        if cfg.cross_attention:
            self.norm_cross = make_norm(cfg.norm, d, cfg.bias)
            self.cross_attn = MultiHeadAttention(d, cfg.n_heads, cfg.n_kv_heads, cfg.bias,
                                                 cfg.dropout, cross=True)
        self.norm2 = make_norm(cfg.norm, d, cfg.bias)
        self.ffn = FeedForward(d, cfg.d_ff, cfg.ffn, cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def _sublayer(self, x, norm, fn):
        if self.pre:
            y = self.drop(fn(norm(x)))
            return x + y if self.residual else y
        y = self.drop(fn(x))
        return norm(x + y if self.residual else y)

    def forward(self, x, mask=None, is_causal=False, memory=None, memory_mask=None,
                cache=None, need_weights=False):
        attn = {}

        def self_attn(h):
            out, attn["self"] = self.attn(h, mask=mask, cache=cache, need_weights=need_weights,
                                          is_causal=is_causal)
            return out

        x = self._sublayer(x, self.norm1, self_attn)
        if memory is not None:
            def cross_attn(h):
                out, attn["cross"] = self.cross_attn(h, memory, mask=memory_mask,
                                                     need_weights=need_weights)
                return out

            x = self._sublayer(x, self.norm_cross, cross_attn)
        x = self._sublayer(x, self.norm2, self.ffn)
        return x, attn


# ----------------------------------------------------------------------------
# §8 整个模型：解码器（causal=True）或编码器（causal=False + pad_mask）
# ----------------------------------------------------------------------------


class LMOutput(NamedTuple):
    logits: torch.Tensor  # (B, T, V)
    loss: torch.Tensor | None  # 给了 targets 时的平均交叉熵
    attentions: list | None  # return_attn=True 时：每层一个 dict，"self"（和 "cross"）→ (B, h, T, Tk)


class TransformerLM(nn.Module):
    """GPT 式的 Transformer（§7–§8、§11）：词嵌入 + 位置 + N 个块 + 最后的归一化 + 输出层。"""

    def __init__(self, cfg: TransformerConfig | None = None, **overrides):
        super().__init__()
        cfg = dataclasses.replace(cfg, **overrides) if cfg is not None else TransformerConfig(**overrides)
        self.cfg = cfg
        d = cfg.d_model
        self.tok_emb = nn.Embedding(cfg.vocab_size, d)
        self.pos_emb = LearnedPositions(cfg.max_len, d) if cfg.pos == "learned" else None
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        # Pre-LN 的主干最后要再归一化一次；Post-LN 每个子层之后已经归一化过了
        self.norm_f = make_norm(cfg.norm, d, cfg.bias) if cfg.norm_position == "pre" else nn.Identity()
        self.lm_head = nn.Linear(d, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.lm_head.weight = self.tok_emb.weight  # §8.2：省下 V·d 个参数
        self.apply(self._init_weights)
        # GPT-2 初始化（§9）：残差路径上的最后一个线性层再乘 1/sqrt(2N)，
        # 让主干上的方差在初始化时不随层数增长（每块有 2 个子层往主干上加东西；
        # 带交叉注意力的块有 3 个）。
        branches = (3 if cfg.cross_attention else 2) * cfg.n_layers
        for name, p in self.named_parameters():
            if name.endswith(("out_proj.weight", "fc_out.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(branches))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)  # N(0, 0.02²)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def hidden_states(self, idx, pad_mask=None, kv_cache=None, memory=None,
                      memory_pad_mask=None, return_attn=False):
        """最后一层（归一化之后）的表示 (B, T, d)，以及每层的注意力权重。"""
        B, T = idx.shape
        past = 0
        if kv_cache is not None and kv_cache[0].get("k") is not None:
            past = kv_cache[0]["k"].size(2)
        positions = torch.arange(past, past + T, device=idx.device)
        x = self.tok_emb(idx)  # (B, T, d)
        if self.cfg.pos == "learned":
            x = x + self.pos_emb(positions)
        elif self.cfg.pos == "sinusoidal":  # 固定的编码，乘 pe_scale（默认 1）再加到词向量上
            pe = sinusoidal_positions(past + T, self.cfg.d_model)[past:].to(x.device, x.dtype)  # (T, d)
            x = x + self.cfg.pe_scale * pe
        x = self.drop(x)

        mask, is_causal = None, False
        if self.cfg.causal:
            if pad_mask is None and past == 0 and not return_attn:
                is_causal = True  # 普通因果掩码：交给快速路径，不必物化 T×T 矩阵
            else:
                mask = causal_mask(T, past + T, device=idx.device)  # (T, Tk)
        if pad_mask is not None:  # 填充掩码加在列（键）上：pad_mask[:, None, None, :]
            cols = pad_mask[:, None, None, :]  # (B, 1, 1, Tk)
            mask = cols if mask is None else mask & cols  # (B, 1, T, Tk)
        memory_mask = None if memory_pad_mask is None else memory_pad_mask[:, None, None, :]

        attentions = [] if return_attn else None
        for i, block in enumerate(self.blocks):
            cache = None if kv_cache is None else kv_cache[i]
            x, attn = block(x, mask, is_causal, memory, memory_mask, cache, need_weights=return_attn)
            if return_attn:
                attentions.append(attn)
        return self.norm_f(x), attentions

    def forward(self, idx, targets=None, pad_mask=None, return_attn=False, kv_cache=None,
                memory=None, memory_pad_mask=None, ignore_index: int = -100) -> LMOutput:
        """idx: (B, T) 词元编号。targets 给出时计算交叉熵（ignore_index 的位置不计）。

        pad_mask: (B, Tk) 布尔，True = 真实词元；用 kv_cache 时 Tk = 缓存长度 + T。
        """
        h, attentions = self.hidden_states(idx, pad_mask, kv_cache, memory, memory_pad_mask, return_attn)
        logits = self.lm_head(h)  # (B, T, V)：和每个词嵌入的点积（权重共享时）
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=ignore_index)
        return LMOutput(logits, loss, attentions)

    def new_kv_cache(self) -> list:
        """一个空的 KV 缓存：每层一个 dict，生成时就地填入 K、V。"""
        return [{} for _ in self.blocks]


class MinimalTransformer(nn.Module):
    """§4.4 的“最小”Transformer：只装了三个补丁，没有多头、残差连接和层归一化（第 6、7 节才加）。

    词向量 + 正弦位置编码（补丁一）→ [因果自注意力（补丁三，1 个头）→ 逐位置前馈网络（补丁二）] × N
    → 线性层（+ softmax 就是下一个词的概率）。输出层不和词嵌入共享。
    forward(idx, targets) 的接口和 TransformerLM 一样，返回 LMOutput，所以 train_lm 可以直接训练它。
    只用于第 4 节的演示；真正的模型用 TransformerLM。
    """

    def __init__(self, vocab_size: int, d_model: int = 16, n_layers: int = 2):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.attns = nn.ModuleList(MultiHeadAttention(d_model, n_heads=1) for _ in range(n_layers))
        self.ffns = nn.ModuleList(FeedForward(d_model) for _ in range(n_layers))
        self.lm_head = nn.Linear(d_model, vocab_size)

    def hidden_states(self, idx):
        """idx: (B, T) → [嵌入之后, 第 1 层之后, …, 第 N 层之后]，每个 (B, T, d)。"""
        T = idx.size(1)
        x = self.tok_emb(idx) + sinusoidal_positions(T, self.tok_emb.embedding_dim).to(self.tok_emb.weight.device)
        states = [x]
        for attn, ffn in zip(self.attns, self.ffns):
            x, _ = attn(x, mask=causal_mask(T, device=idx.device))  # 位置之间“搬运”信息，只看左边
            x = ffn(x)  # 每个位置单独“加工”
            states.append(x)
        return states

    def forward(self, idx, targets=None) -> LMOutput:
        logits = self.lm_head(self.hidden_states(idx)[-1])  # (B, T, V)
        loss = None  # 填充位置的目标是 -100，cross_entropy 默认忽略它们
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return LMOutput(logits, loss, None)


class EncoderDecoder(nn.Module):
    """编码器—解码器（§8.3）：编码器双向读源序列，解码器因果生成，并用交叉注意力看编码器。"""

    def __init__(self, src_vocab, tgt_vocab, **overrides):
        super().__init__()
        self.encoder = TransformerLM(vocab_size=src_vocab, causal=False, **overrides)
        self.decoder = TransformerLM(vocab_size=tgt_vocab, causal=True, cross_attention=True, **overrides)

    def forward(self, src, tgt_in, tgt_out=None, src_pad_mask=None, return_attn=False) -> LMOutput:
        memory, _ = self.encoder.hidden_states(src, pad_mask=src_pad_mask)  # (B, S, d)
        return self.decoder(tgt_in, tgt_out, return_attn=return_attn, memory=memory,
                            memory_pad_mask=src_pad_mask)


# ----------------------------------------------------------------------------
# §7.5 参数量：闭式公式 和 从模块里数，两者必须一致
# ----------------------------------------------------------------------------


def block_param_formula(d: int) -> int:
    """一个 Pre-LN 块（含偏置、GELU、4d 宽的前馈网络）：(3d²+3d) + (d²+d) + (8d²+5d) + 4d = 12d² + 13d。"""
    return 12 * d * d + 13 * d


def lm_param_formula(vocab_size, d_model, n_layers, max_len=0, pos="learned", tied=True,
                     norm_position="pre") -> int:
    """整个解码器：词嵌入 Vd + 可学习的位置嵌入 L_max·d（只有 learned 有）+ N 块 + 最后的 LN 2d（+ 不共享时输出层 Vd）。

    最后的 LN 只有 Pre-LN 才有（Post-LN 的每个子层之后已经归一化过了）。
    """
    total = vocab_size * d_model + n_layers * block_param_formula(d_model)
    if norm_position == "pre":
        total += 2 * d_model
    if pos == "learned":
        total += max_len * d_model
    if not tied:
        total += vocab_size * d_model
    return total


def count_parameters(module: nn.Module) -> int:
    """从模块里数参数：共享的矩阵只数一次（module.parameters() 本来就去重）。"""
    return sum(p.numel() for p in module.parameters())


# ----------------------------------------------------------------------------
# §9 训练：预热 + 余弦衰减、AdamW、梯度裁剪、dropout；困惑度；生成（含 KV 缓存）
# ----------------------------------------------------------------------------


def warmup_cosine(step: int, max_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> float:
    """学习率：前 warmup_steps 步从 0 线性升到 max_lr，之后按余弦降到 min_lr（§9）。"""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def train_steps(model, opt, step_loss, steps: int, max_lr: float, warmup_steps: int,
                grad_clip: float | None = None, grad_norms: list | None = None) -> list[float]:
    """固定步数的训练循环（§9）：每步按 warmup_cosine 设学习率，step_loss(step) 算出这一步的 loss，
    反传，（可选）裁剪梯度，更新参数。返回每步的 loss。notebook 里的小实验都用它。

    grad_norms：给一个列表时，每步把裁剪之前的全局梯度范数追加进去（要求 grad_clip）。"""
    model.train()
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = warmup_cosine(step, max_lr, warmup_steps, steps)
        loss = step_loss(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            if grad_norms is not None:
                grad_norms.append(norm.item())
        opt.step()
        losses.append(loss.item())
    return losses


@contextmanager
def torch_threads(n: int | None):
    """临时设置 PyTorch 的线程数（None 表示不改）。

    小模型的线程数取舍（2 核机器上实测，见 README 和 tests/benchmarks/bench_mini_gpt.py）：机器空闲时
    迷你 GPT 用 2 个线程比 1 个线程快约 1.3 倍；机器上还有别的负载时（两个训练同时跑、CI 并行跑测试），
    2 个线程反而慢好几倍。所以 train_lm 默认 threads=1。
    """
    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def batches(sequences, batch_size: int, pad_id: int, shuffle: bool = False, generator=None):
    """把一组长短不一的词元序列切成批，右侧填充到本批最长。产出 (输入, 目标)：目标左移一位，填充处为 -100。"""
    order = torch.randperm(len(sequences), generator=generator).tolist() if shuffle else range(len(sequences))
    order = list(order)
    for start in range(0, len(order), batch_size):
        chunk = [sequences[i] for i in order[start : start + batch_size]]
        T = max(len(s) for s in chunk)
        data = torch.full((len(chunk), T), pad_id, dtype=torch.long)
        for row, s in enumerate(chunk):
            data[row, : len(s)] = torch.as_tensor(s)
        targets = data[:, 1:].clone()
        targets[targets == pad_id] = -100  # 填充位置不算损失
        yield data[:, :-1], targets


def _progress(iterable, total, desc, progress):
    """tqdm 进度条：在 CI（环境变量 CI）里或 progress=False 时完全安静。"""
    from tqdm.auto import tqdm

    disable = (not progress) or bool(os.environ.get("CI"))
    return tqdm(iterable, total=total, desc=desc, disable=disable, leave=False, mininterval=0.5)


@torch.no_grad()
def evaluate_perplexity(model, sequences, pad_id: int, batch_size: int = 256) -> float:
    """困惑度 = exp(每个被预测词元的平均负对数似然)（第 5 讲），填充不计。"""
    was_training = model.training
    model.eval()
    device = model_device(model)
    nll, count = 0.0, 0
    for x, y in batches(sequences, batch_size, pad_id):
        x, y = x.to(device), y.to(device)
        logits = model(x).logits
        nll += F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100, reduction="sum").item()
        count += int((y != -100).sum())
    model.train(was_training)
    return math.exp(nll / count)


def train_lm(model, train_seqs, *, pad_id: int, epochs: int = 8, batch_size: int = 64,
             max_lr: float = 3e-3, warmup_steps: int = 200, min_lr: float = 0.0,
             weight_decay: float = 0.1, grad_clip: float | None = 1.0, dev_seqs=None,
             seed: int = 0, threads: int | None = 1, progress: bool = True, desc: str = "train"):
    """训练一个语言模型（§9、§11.1）：AdamW + 预热 + 余弦衰减 + 梯度裁剪。

    任何 forward(idx, targets) 返回 .loss 的模型都能用（迷你 GPT、第 5 讲的 RNN）。
    threads=1：小模型单线程更快；None 表示不改线程数。
    返回 history：每步的 loss 和学习率，每轮结束时的开发集困惑度。
    """
    device = model_device(model)
    gen = torch.Generator().manual_seed(seed)
    steps_per_epoch = math.ceil(len(train_seqs) / batch_size)
    total = epochs * steps_per_epoch
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]  # 矩阵衰减，偏置和归一化不衰减
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=max_lr, betas=(0.9, 0.95))
    history = {"loss": [], "lr": [], "dev_ppl": []}
    step = 0
    model.train()
    with torch_threads(threads):
        bar = _progress(range(total), total, desc, progress)
        for epoch in range(epochs):
            for x, y in batches(train_seqs, batch_size, pad_id, shuffle=True, generator=gen):
                lr = warmup_cosine(step, max_lr, warmup_steps, total, min_lr)
                for group in opt.param_groups:
                    group["lr"] = lr
                loss = model(x.to(device), y.to(device)).loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if grad_clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
                opt.step()
                history["loss"].append(loss.item())
                history["lr"].append(lr)
                step += 1
                bar.update(1)
            if dev_seqs is not None:
                history["dev_ppl"].append(evaluate_perplexity(model, dev_seqs, pad_id))
                bar.set_postfix(epoch=epoch + 1, dev_ppl=f"{history['dev_ppl'][-1]:.3f}")
        bar.close()
    model.eval()
    return history


@torch.no_grad()
def generate(model, prompt, max_new_tokens: int, use_cache: bool = True, temperature: float = 1.0,
             greedy: bool = False, seed: int | None = None, eos_id: int | None = None):
    """自回归生成（§4.3、§10.2、练习 11）。prompt: (B, T) 词元。

    use_cache=False：每一步把整个序列重新送进模型（第 i 步算 n+i-1 个位置）。
    use_cache=True：提示只算一次，之后每步只算 1 个新位置，旧位置的 K、V 从缓存里取。
    同一个 seed 下两种方式生成的词元相同。生成结束后模型恢复原来的 train/eval 状态。
    """
    was_training = model.training
    model.eval()
    gen = None
    if seed is not None:
        gen = torch.Generator(device=prompt.device).manual_seed(seed)
    idx = prompt
    cache = model.new_kv_cache() if use_cache else None
    step_input = idx
    for _ in range(max_new_tokens):
        if use_cache:
            logits = model(step_input, kv_cache=cache).logits[:, -1, :]  # 只算新位置
        else:
            logits = model(idx).logits[:, -1, :]  # 每步重算整个序列
        if greedy:
            nxt = logits.argmax(dim=-1, keepdim=True)
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=gen)
        idx = torch.cat([idx, nxt], dim=1)
        step_input = nxt
        if eos_id is not None and bool((nxt == eos_id).all()):
            break
    model.train(was_training)
    return idx
