"""第 5–7 节 notebook 的演示函数（对应讲义代码 02 的演示 1–5、代码 03 的演示 1–6）。

每个函数就是 notebook 里的一个“演示 N”：它只调用 lib/transformer.py 里的零件，
把结果算好交给 notebook 显示和检查。模型本身的代码都在 transformer.py 里，这里不重写。

- §5 位置编码：sinusoidal_dot_products、shift_matrix_errors、rope_vs_sinusoidal、
  learned_overflow_message、plot_sinusoidal_heatmap
- §6 多头注意力：multihead_shape_walkthrough、compare_with_torch_mha、
  RetrievalNet / train_retrieval / retrieval_experiment（“同时看三个位置”的任务）
- §7 Transformer 块：layer_norm_demo、block_param_table、gpt2_small_breakdown、
  collapse_score / depth_experiment（残差与 Pre-LN/Post-LN）、ffn_grad_norms_at_init
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from .transformer import (
    Block,
    LearnedPositions,
    MultiHeadAttention,
    TransformerConfig,
    TransformerLM,
    apply_rope,
    block_param_formula,
    causal_mask,
    count_parameters,
    layer_norm,
    scaled_dot_product_attention,
    sinusoidal_positions,
    sinusoidal_shift_matrix,
    torch_threads,
    train_steps,
    warmup_cosine,
)

# ----------------------------------------------------------------------------
# §5 位置编码（代码 02 演示 1–5）
# ----------------------------------------------------------------------------


def plot_sinusoidal_heatmap(n_positions: int = 50, d: int = 16, path=None):
    """演示 1：把正弦位置编码画成热图（行 = 位置，列 = 维度）。给了 path 就另存成 PNG。

    返回 matplotlib 的 Figure。图上只用英文（CI 和 Colab 上没有中文字体）。
    """
    import matplotlib.pyplot as plt

    pe = sinusoidal_positions(n_positions, d)  # (P, d)
    fig, ax = plt.subplots(figsize=(6, 5))
    im = ax.imshow(pe.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1)
    ax.set_xlabel("dimension j (even: sin, odd: cos)")
    ax.set_ylabel("position p")
    ax.set_title(f"Sinusoidal positional encoding, d = {d}")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    if path is not None:
        # 去掉 PNG 里的软件版本信息：同样的图每次存出来的文件都一样，git 里不会出现无意义的改动
        fig.savefig(path, dpi=100, metadata={"Software": None})
    return fig


def sinusoidal_dot_products(d: int = 64, distances=(0, 1, 2, 4, 8, 16, 32, 64),
                            starts=(0, 20, 100)) -> dict:
    """演示 2：PE_p · PE_{p+k}（§5.2）。返回 {起点 p: [每个距离 k 的点积]}。

    理论值是 Σ_i cos(k ω_i)：只和 k 有关，和起点 p 无关。
    """
    pe = sinusoidal_positions(max(starts) + max(distances) + 1, d)  # (P, d)
    return {p: [float(pe[p] @ pe[p + k]) for k in distances] for p in starts}


def shift_matrix_errors(d: int = 16, shifts=(1, 3, 10), n_positions: int = 200) -> dict:
    """演示 3：对所有 p 检查 PE_{p+k} = M_k PE_p（§5.2），返回 {k: 最大绝对误差}。

    M_k 只依赖 k（每两维一个 2×2 旋转块），同一个矩阵对 n_positions 个起点都成立。
    """
    pe = sinusoidal_positions(n_positions + max(shifts), d)  # (P + K, d)
    errors = {}
    for k in shifts:
        m_k = sinusoidal_shift_matrix(k, d)  # (d, d)
        shifted = pe[:n_positions] @ m_k.T  # 每一行：M_k PE_p，(P, d)
        errors[k] = float((shifted - pe[k : k + n_positions]).abs().max())
    return errors


LECTURE_ROPE_PAIRS = ((5, 2), (10, 7), (100, 97), (5, 5), (50, 50), (2, 5), (60, 63))


def rope_vs_sinusoidal(pairs=LECTURE_ROPE_PAIRS, d: int = 8, seed: int = 0,
                       norm_positions=(0, 1, 10, 100, 1000)) -> dict:
    """演示 4：同一个查询 q、同一个键 k 放在不同位置 (m, n) 时的打分（§5.4）。

    - RoPE：旋转后的点积 R(mθ)q · R(nθ)k，只依赖 m − n；
    - 加正弦编码：(q + PE_m) · (k + PE_n)，展开后有三项带着绝对位置，随 m、n 变化。
    q、k 由 seed 决定（讲义用的是它自己的随机向量，所以具体数值和讲义不同）。
    返回 {"rows": [(m, n, m-n, RoPE 打分, 正弦打分)], "norms": [各位置旋转后 q 的长度], "q_norm": ‖q‖}。
    """
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(d, generator=gen), torch.randn(d, generator=gen)  # 各 (d,)
    pe = sinusoidal_positions(max(max(p) for p in pairs) + 1, d)  # (P, d)

    def rotate(x, pos):  # x: (d,) → 放在位置 pos 上旋转后的 (d,)
        return apply_rope(x[None, :], torch.tensor([pos]))[0]

    rows = []
    for m, n in pairs:
        rope_score = float(rotate(q, m) @ rotate(k, n))
        sin_score = float((q + pe[m]) @ (k + pe[n]))
        rows.append((m, n, m - n, rope_score, sin_score))
    norms = [float(rotate(q, p).norm()) for p in norm_positions]
    return {"rows": rows, "norms": norms, "q_norm": float(q.norm())}


def learned_overflow_message(max_len: int = 16, d: int = 8, seq_len: int = 20) -> str:
    """演示 5：可学习位置表只有 max_len 行，序列更长时 LearnedPositions 直接报错（§5.3）。

    返回 ValueError 的（中文）信息；如果没有报错，说明表够长，本函数自己报错提示参数不对。
    """
    if seq_len <= max_len:
        raise ValueError(f"seq_len={seq_len} 没有超过表长 max_len={max_len}：这样演示不出报错，请让 seq_len > max_len")
    table = LearnedPositions(max_len, d)
    try:
        table(torch.arange(seq_len))
    except ValueError as err:
        return str(err)
    raise AssertionError("LearnedPositions 应该对超出表长的位置报错，却没有报错")


# ----------------------------------------------------------------------------
# §6 多头注意力（代码 03 演示 1–3）
# ----------------------------------------------------------------------------


@torch.no_grad()  # 只看前向，不建计算图
def multihead_shape_walkthrough(B: int = 2, T: int = 5, d: int = 12, h: int = 3, seed: int = 0):
    """演示 1：一步一步走一遍 MultiHeadAttention 的拆头与拼回（§6.2），记录每一步的形状。

    用的是 lib 里那个模块自己的权重（qkv_proj、out_proj），最后和模块的 forward 比较，
    证明这几步就是模块里发生的事。返回 (rows, 和模块输出的最大差)，rows 是 [(步骤, 符号形状, 实际形状)]。
    """
    if d % h != 0:
        raise ValueError(f"d={d} 不能被 h={h} 整除：每个头的维度 d/h 必须是整数")
    torch.manual_seed(seed)
    mha = MultiHeadAttention(d, h)
    x = torch.randn(B, T, d)
    hs = d // h
    rows = [("x", "(B, T, d)", tuple(x.shape))]
    qkv = mha.qkv_proj(x)  # (B, T, 3d)
    rows.append(("qkv = qkv_proj(x)  (W^Q, W^K, W^V fused)", "(B, T, 3d)", tuple(qkv.shape)))
    q, k, v = qkv.split(d, dim=-1)  # 各 (B, T, d)
    rows.append(("q, k, v = qkv.split(d, dim=-1)", "(B, T, d)", tuple(q.shape)))
    q_view = q.view(B, T, h, hs)  # (B, T, h, hs)
    rows.append(("q.view(B, T, h, hs)", "(B, T, h, hs)", tuple(q_view.shape)))
    q = q_view.transpose(1, 2)  # (B, h, T, hs)
    k = k.view(B, T, h, hs).transpose(1, 2)  # (B, h, T, hs)
    v = v.view(B, T, h, hs).transpose(1, 2)  # (B, h, T, hs)
    rows.append((".transpose(1, 2)", "(B, h, T, hs)", tuple(q.shape)))
    scores = q @ k.transpose(-2, -1) / math.sqrt(hs)  # (B, h, T, hs) @ (B, h, hs, T) → (B, h, T, T)
    rows.append(("scores = q @ k.transpose(-2, -1) / sqrt(hs)", "(B, h, T, T)", tuple(scores.shape)))
    out, weights = scaled_dot_product_attention(q, k, v)  # (B, h, T, hs), (B, h, T, T)
    rows.append(("weights = softmax(scores, dim=-1)", "(B, h, T, T)", tuple(weights.shape)))
    rows.append(("heads = weights @ v", "(B, h, T, hs)", tuple(out.shape)))
    out = out.transpose(1, 2)  # (B, T, h, hs)
    rows.append(("heads.transpose(1, 2)", "(B, T, h, hs)", tuple(out.shape)))
    out = out.contiguous().view(B, T, d)  # (B, T, d)：h 个头拼回一个向量
    rows.append(("concat = .contiguous().view(B, T, d)", "(B, T, d)", tuple(out.shape)))
    y = mha.out_proj(out)  # (B, T, d)
    rows.append(("y = out_proj(concat)  (W^O)", "(B, T, d)", tuple(y.shape)))
    y_module, w_module = mha(x, need_weights=True)
    diff = max(float((y - y_module).abs().max()), float((weights - w_module).abs().max()))
    return rows, diff


def compare_with_torch_mha(d: int = 16, h: int = 4, B: int = 2, T: int = 6, causal: bool = False,
                           seed: int = 0) -> dict:
    """演示 2：把我们的参数复制进 torch.nn.MultiheadAttention，比较输出和（按头平均的）权重（§6.2）。

    两个约定要对上：PyTorch 的 in_proj_weight 就是 [W^Q; W^K; W^V] 按行拼起来，和我们的
    融合 qkv_proj 一样；但 PyTorch 的布尔 attn_mask 里 True 表示“不许看”，和我们相反，所以传 ~mask。
    返回 {"out": 输出最大差, "weights": 平均权重最大差}。
    """
    torch.manual_seed(seed)
    ours = MultiHeadAttention(d, h)
    ref = nn.MultiheadAttention(d, h, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.qkv_proj.weight)  # (3d, d)
        ref.in_proj_bias.copy_(ours.qkv_proj.bias)  # (3d,)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    x = torch.randn(B, T, d)
    mask = causal_mask(T) if causal else None  # (T, T)，True = 可以看
    with torch.no_grad():
        y, w = ours(x, mask=mask, need_weights=True)  # (B, T, d), (B, h, T, T)
        y_ref, w_ref = ref(x, x, x, attn_mask=None if mask is None else ~mask,
                           need_weights=True, average_attn_weights=True)  # w_ref: (B, T, T)
    return {"out": float((y - y_ref).abs().max()), "weights": float((w.mean(dim=1) - w_ref).abs().max())}


RETRIEVAL_OFFSETS = (1, 2, 4)  # 在位置 t 同时预测 x_{t-1}、x_{t-2}、x_{t-4}


class RetrievalNet(nn.Module):
    """演示 3 的模型（§6.1）：只有一层多头注意力，在每个位置同时取回三个过去的词。

    组成（讲义只给了总参数量 3,678，没给结构；下面这个组合恰好是 3,678）：
        词嵌入 10×24                          =   240
        可学习位置表 12×24（序列长度 12）       =   288
        MultiHeadAttention(24, h)：24→72 + 24→24 = 2,400（和头数无关）
        3 个输出层 24→10（含偏置）             =   750
    输出层只看注意力的输出，没有残差：要预测的词只能通过注意力取回来。
    """

    def __init__(self, n_heads: int, vocab_size: int = 10, d_model: int = 24, seq_len: int = 12,
                 offsets=RETRIEVAL_OFFSETS):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"总维度 d_model={d_model} 不能被头数 n_heads={n_heads} 整除：每个头的维度 d/h 必须是整数")
        if max(offsets) >= seq_len:
            raise ValueError(f"序列长度 seq_len={seq_len} 必须大于最大偏移 {max(offsets)}，否则没有可预测的位置")
        self.offsets, self.seq_len, self.vocab_size = tuple(offsets), seq_len, vocab_size
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = LearnedPositions(seq_len, d_model)
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.heads = nn.ModuleList(nn.Linear(d_model, vocab_size) for _ in offsets)

    def forward(self, idx, need_weights: bool = False):
        """idx: (B, T)。返回 (logits (B, T, 目标数, V), 注意力权重 (B, h, T, T) 或 None)。"""
        B, T = idx.shape
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T, device=idx.device))  # (B, T, d)
        if need_weights:  # 教学路径：显式的因果掩码，返回权重
            a, w = self.attn(x, mask=causal_mask(T, device=idx.device), need_weights=True)
        else:  # 快速路径：同一个计算
            a, w = self.attn(x, is_causal=True)
        logits = torch.stack([head(a) for head in self.heads], dim=2)  # (B, T, n_targets, V)
        return logits, w


def retrieval_batch(generator, batch_size: int, seq_len: int = 12, vocab_size: int = 10,
                    offsets=RETRIEVAL_OFFSETS):
    """随机词序列和它们的目标：y[b, t, j] = x[b, t - offsets[j]]；取不到的位置为 -100（不计损失）。"""
    x = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)  # (B, T)
    y = torch.full((batch_size, seq_len, len(offsets)), -100, dtype=torch.long)  # (B, T, n_targets)
    for j, o in enumerate(offsets):
        y[:, o:, j] = x[:, :-o]
    return x, y


def retrieval_accuracy(model: RetrievalNet, n_sequences: int = 1000, seed: int = 12345) -> list:
    """在新生成的序列上，每个目标的准确率（只看 t ≥ 最大偏移的位置，三个目标都存在）。"""
    gen = torch.Generator().manual_seed(seed)
    x, y = retrieval_batch(gen, n_sequences, model.seq_len, model.vocab_size, model.offsets)
    with torch.no_grad():
        logits, _ = model(x)
    start = max(model.offsets)
    pred = logits.argmax(dim=-1)[:, start:]  # (B, T - start, n_targets)
    return [float((pred[..., j] == y[:, start:, j]).float().mean()) for j in range(len(model.offsets))]


def train_retrieval(n_heads: int, seed: int = 0, steps: int = 400, batch_size: int = 64,
                    lr: float = 1e-2, warmup_steps: int = 20):
    """训练一个 RetrievalNet（AdamW，预热 + 余弦衰减）。返回 (模型, 每个目标的准确率)。"""
    torch.manual_seed(seed)  # 初始化
    model = RetrievalNet(n_heads)
    gen = torch.Generator().manual_seed(1000 + seed)  # 训练数据
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    def step_loss(step):
        x, y = retrieval_batch(gen, batch_size, model.seq_len, model.vocab_size, model.offsets)
        logits, _ = model(x)
        return F.cross_entropy(logits.reshape(-1, model.vocab_size), y.reshape(-1), ignore_index=-100)

    with torch_threads(1):
        train_steps(model, opt, step_loss, steps, lr, warmup_steps)
        model.eval()
        acc = retrieval_accuracy(model)
    return model, acc


def retrieval_experiment(head_counts=(1, 2, 3, 6), seeds=(0, 1, 2), **train_kwargs) -> dict:
    """演示 3 的整张表：每种头数、每个种子训练一次。

    返回 {头数: {"params": 参数量, "acc": [[每个目标的准确率] 每个种子], "models": [模型]}}。
    “最差的目标”= 每次训练里最差的那个目标，再对种子取平均（和讲义的表一致）。
    """
    results = {}
    for h in head_counts:
        runs = [train_retrieval(h, seed, **train_kwargs) for seed in seeds]
        results[h] = {"params": count_parameters(runs[0][0]), "acc": [a for _, a in runs],
                      "models": [m for m, _ in runs]}
    return results


def retrieval_table_rows(results: dict) -> list:
    """把 retrieval_experiment 的结果变成表格的行：头数、参数量、每个目标的平均准确率、最差目标。"""
    rows = []
    for h, r in results.items():
        acc = torch.tensor(r["acc"])  # (种子数, 目标数)
        per_target = acc.mean(dim=0).tolist()
        worst = acc.min(dim=1).values.mean().item()
        rows.append([h, f"{r['params']:,}"] + [f"{100 * a:.1f}%" for a in per_target] + [f"{100 * worst:.1f}%"])
    return rows


def head_offset_weights(model: RetrievalNet, n_sequences: int = 200, seed: int = 7):
    """每个头平均放在每个偏移上的注意力权重（§6.3）：返回 ((h, 偏移数) 的张量, 平均注意力图 (h, T, T))。

    只统计 t ≥ 最大偏移的查询位置。某个头在偏移 o 上的权重接近 1，就说它“负责” x_{t-o}。
    """
    gen = torch.Generator().manual_seed(seed)
    x, _ = retrieval_batch(gen, n_sequences, model.seq_len, model.vocab_size, model.offsets)
    with torch.no_grad():
        _, w = model(x, need_weights=True)  # (B, h, T, T)
    mean_map = w.mean(dim=0)  # (h, T, T)
    start = max(model.offsets)
    t = torch.arange(start, model.seq_len)
    per_offset = torch.stack([w[:, :, t, t - o].mean(dim=(0, 2)) for o in model.offsets], dim=1)  # (h, n_offsets)
    return per_offset, mean_map


# ----------------------------------------------------------------------------
# §7 Transformer 块（代码 03 演示 4–6）
# ----------------------------------------------------------------------------


def layer_norm_demo(rows=((2.0, 4.0, 6.0, 8.0), (100.0, 101.0, 102.0, 103.0))):
    """演示 4：手写的 layer_norm 和 nn.LayerNorm（初始 γ = 1、β = 0）对同样的输入（§7.2）。

    返回 (手写结果 (N, d), nn.LayerNorm 结果 (N, d))。
    """
    x = torch.tensor(rows)  # (N, d)
    ln = nn.LayerNorm(x.size(-1))
    with torch.no_grad():
        return layer_norm(x), ln(x)


def block_param_table(dims=(64, 128, 768)) -> list:
    """演示 5：每个 d 下，一个块的参数量：闭式公式 12d² + 13d 和从模块里数的结果（§7.5）。

    返回 [(d, 头数, 公式, 数出来的)]。块在 meta 设备上构造：只数参数，不分配内存。
    """
    rows = []
    for d in dims:
        n_heads = 12 if d % 12 == 0 else 4
        with torch.device("meta"):
            block = Block(TransformerConfig(d_model=d, n_heads=n_heads))
        rows.append((d, n_heads, block_param_formula(d), count_parameters(block)))
    return rows


@dataclass
class ParamBreakdown:
    total: int
    parts: dict = field(default_factory=dict)  # 部分名 → 参数量


def gpt2_small_breakdown() -> ParamBreakdown:
    """演示 5：GPT-2 small（V = 50257，L_max = 1024，d = 768，12 层 12 头，权重共享）各部分的参数量。

    在 meta 设备上构造（不分配 5 亿字节的内存，也不做初始化计算），然后从模块里数。
    """
    cfg = TransformerConfig(vocab_size=50257, max_len=1024, d_model=768, n_heads=12, n_layers=12)
    with torch.device("meta"):
        model = TransformerLM(cfg)
    parts = {
        "token embedding (tied with output)": model.tok_emb.weight.numel(),
        "position table": model.pos_emb.table.weight.numel(),
        "12 blocks": sum(p.numel() for p in model.blocks.parameters()),
        "final LayerNorm": sum(p.numel() for p in model.norm_f.parameters()),
    }
    return ParamBreakdown(count_parameters(model), parts)


DEPTH_VARIANTS = {  # 名字 → TransformerConfig 的覆盖项（§7.1、§7.4）
    "Pre-LN": {"norm_position": "pre", "residual": True},
    "Post-LN": {"norm_position": "post", "residual": True},
    "Pre-LN, no residual": {"norm_position": "pre", "residual": False},
}


def depth_config(variant: str, d_model: int = 32, n_heads: int = 4, n_layers: int = 8, seq_len: int = 16,
                 vocab_size: int = 10) -> TransformerConfig:
    """演示 6 用的模型配置：8 层的小解码器，词表 10，variant 见 DEPTH_VARIANTS。"""
    if variant not in DEPTH_VARIANTS:
        raise ValueError(f"未知的变体 {variant!r}：可选 {list(DEPTH_VARIANTS)}")
    return TransformerConfig(vocab_size=vocab_size, max_len=seq_len, d_model=d_model, n_heads=n_heads,
                             n_layers=n_layers, **DEPTH_VARIANTS[variant])


def offset_batch(generator, batch_size: int, seq_len: int = 16, vocab_size: int = 10, offset: int = 3):
    """“预测 x_{t-offset}”任务的一批：x (B, T) 随机词，y (B, T)，前 offset 个位置为 -100。"""
    x = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)
    y = torch.full((batch_size, seq_len), -100, dtype=torch.long)
    y[:, offset:] = x[:, :-offset]
    return x, y


def collapse_score(model: TransformerLM, x: torch.Tensor) -> float:
    """“坍缩程度”（§7.1）：最后一层（最后的归一化之后）同一序列里不同位置的表示之间的平均余弦相似度。

    x: (B, T)。1.0 表示所有位置的表示指向同一个方向。
    """
    with torch.no_grad():
        h, _ = model.hidden_states(x)  # (B, T, d)
    h = F.normalize(h, dim=-1)
    cos = h @ h.transpose(1, 2)  # (B, T, T)
    T = cos.size(-1)
    off_diag = ~torch.eye(T, dtype=torch.bool, device=x.device)  # 不算自己和自己
    return float(cos[:, off_diag].mean())


def train_depth_variant(variant: str, steps: int = 300, batch_size: int = 32, lr: float = 1e-2,
                        warmup_steps: int = 10, offset: int = 3, seed: int = 0, **cfg_kwargs) -> dict:
    """演示 6 的一行：初始化时的坍缩程度，训练 steps 步（AdamW，预热 + 余弦，梯度裁剪 1.0），
    前 50 步和最后 50 步的平均损失，在新数据上的准确率（只看 t ≥ offset 的位置）。"""
    cfg = depth_config(variant, **cfg_kwargs)
    torch.manual_seed(seed)
    model = TransformerLM(cfg)
    eval_x, eval_y = offset_batch(torch.Generator().manual_seed(99), 500, cfg.max_len, cfg.vocab_size, offset)
    gen = torch.Generator().manual_seed(1000 + seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    with torch_threads(1):
        model.eval()
        collapse = collapse_score(model, eval_x)
        losses = train_steps(
            model, opt, lambda step: model(*offset_batch(gen, batch_size, cfg.max_len, cfg.vocab_size, offset)).loss,
            steps, lr, warmup_steps, grad_clip=1.0)
        model.eval()
        with torch.no_grad():
            pred = model(eval_x).logits.argmax(dim=-1)  # (B, T)
    acc = float((pred[:, offset:] == eval_y[:, offset:]).float().mean())
    n = min(50, steps)
    return {"variant": variant, "collapse": collapse, "first50": sum(losses[:n]) / n,
            "last50": sum(losses[-n:]) / n, "accuracy": acc, "losses": losses}


def depth_experiment(variants=tuple(DEPTH_VARIANTS), **kwargs) -> list:
    """演示 6 的整张表：每个变体一行（见 train_depth_variant）。"""
    return [train_depth_variant(v, **kwargs) for v in variants]


def xavier_reinit(model: TransformerLM) -> TransformerLM:
    """把所有线性层改成 Xavier 正态初始化（原始 Transformer 和 Xiong 等 2020 的设定），偏置为 0。

    词嵌入保持不变；输出层如果和词嵌入共享同一个矩阵，也保持不变。就地修改并返回 model。
    """
    tied = model.lm_head.weight is model.tok_emb.weight
    for module in model.modules():
        if isinstance(module, nn.Linear):
            if tied and module is model.lm_head:
                continue
            nn.init.xavier_normal_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    return model


def ffn_grad_norms_at_init(norm_position: str, init: str = "xavier", n_layers: int = 8, d_model: int = 32,
                           batch_size: int = 64, offset: int = 3, seeds=(0, 1, 2, 3)) -> list:
    """初始化时每一层前馈网络第二个矩阵 W_2（fc_out）的梯度范数 ‖∂L/∂W_2‖（§7.4，Xiong 等 2020 图 3）。

    模型就是演示 6 的 8 层模型，但输出层不和词嵌入共享（论文的设定里输出层也是 Xavier 初始化）。
    init="xavier"：论文的设定；init="gpt2"：lib 的默认初始化（N(0, 0.02)，残差投影再缩小）。
    对几个种子（不同的初始化和数据）取平均。返回长度为 n_layers 的列表，第 0 个是最靠近输入的层。
    """
    if init not in ("xavier", "gpt2"):
        raise ValueError(f"未知的初始化 {init!r}：可选 'xavier' 或 'gpt2'")
    variant = {"pre": "Pre-LN", "post": "Post-LN"}.get(norm_position)
    if variant is None:
        raise ValueError(f"norm_position 只能是 'pre' 或 'post'，收到 {norm_position!r}")
    cfg = depth_config(variant, d_model=d_model, n_layers=n_layers)
    cfg.tie_weights = False
    total = torch.zeros(n_layers)
    with torch_threads(1):
        for seed in seeds:
            torch.manual_seed(seed)
            model = TransformerLM(cfg)
            if init == "xavier":
                xavier_reinit(model)
            x, y = offset_batch(torch.Generator().manual_seed(5 + seed), batch_size, cfg.max_len,
                                cfg.vocab_size, offset)
            model(x, y).loss.backward()
            total += torch.tensor([float(block.ffn.fc_out.weight.grad.norm()) for block in model.blocks])
    return (total / len(seeds)).tolist()
