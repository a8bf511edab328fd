"""第 6、7 节 notebook 的两个玩具任务：数据、小模型和训练循环（不是这两节要讲的东西）。

演示本身（量什么、怎样比较、和讲义对照）写在 notebooks/06、07 里；这里只放 notebook 不必展示、
又被练习和测试复用的部分。模型的零件都来自 lib/transformer.py。

- §6 演示 3“同时取回三个位置”：RetrievalNet、retrieval_batch、retrieval_accuracy、train_retrieval
  （练习 10(a) 也用它们）
- §7 演示 6“预测 x_{t-3}”：offset_batch、train_offset_task；Xiong 等 2020 的设定：xavier_reinit
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .transformer import (
    LearnedPositions,
    MultiHeadAttention,
    TransformerConfig,
    TransformerLM,
    causal_mask,
    torch_threads,
    train_steps,
)

# ----------------------------------------------------------------------------
# §6 演示 3：在每个位置同时预测 x_{t-1}、x_{t-2}、x_{t-4}
# ----------------------------------------------------------------------------

RETRIEVAL_OFFSETS = (1, 2, 4)


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


# ----------------------------------------------------------------------------
# §7 演示 6：8 层的小解码器，在每个位置预测 x_{t-3}
# ----------------------------------------------------------------------------


def offset_batch(generator, batch_size: int, seq_len: int = 16, vocab_size: int = 10, offset: int = 3):
    """“预测 x_{t-offset}”任务的一批：x (B, T) 随机词，y (B, T)，前 offset 个位置为 -100。"""
    x = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)
    y = torch.full((batch_size, seq_len), -100, dtype=torch.long)
    y[:, offset:] = x[:, :-offset]
    return x, y


def train_offset_task(model: TransformerLM, seed: int = 0, steps: int = 300, batch_size: int = 32,
                      lr: float = 1e-2, warmup_steps: int = 10, offset: int = 3, grad_norms: list | None = None) -> list:
    """演示 6 的训练循环：AdamW，预热 warmup_steps 步后余弦衰减，梯度裁剪 1.0，每步一批新的随机序列
    （数据的种子是 1000 + seed）。就地训练 model，训练完切换到 eval 模式，返回每步的 loss。
    grad_norms：给一个列表时，每步追加裁剪之前的全局梯度范数。"""
    cfg = model.cfg
    gen = torch.Generator().manual_seed(1000 + seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)

    def step_loss(step):
        return model(*offset_batch(gen, batch_size, cfg.max_len, cfg.vocab_size, offset)).loss

    with torch_threads(1):
        losses = train_steps(model, opt, step_loss, steps, lr, warmup_steps, grad_clip=1.0, grad_norms=grad_norms)
    model.eval()
    return losses


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
