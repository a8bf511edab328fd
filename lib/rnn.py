"""第 5 讲的 RNN 语言模型：§11 里和迷你 GPT 对比的基线。

tanh RNN，32 维词嵌入，128 维隐藏状态，输出层不和词嵌入共享。
79 个词的词表下共 33,455 个参数：
    词嵌入 79×32 = 2,528；RNN 32×128 + 128×128 + 2×128 = 20,736；输出层 128×79 + 79 = 10,191。
接口和 TransformerLM 一样：forward(idx, targets) 返回 LMOutput，所以 train_lm、
evaluate_perplexity 对两种模型通用。
"""
from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from .transformer import LMOutput


class RNNLM(nn.Module):
    """h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)，logits_t = W_out h_t + b_out。"""

    def __init__(self, vocab_size: int = 79, d_emb: int = 32, d_hidden: int = 128):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_emb)
        self.rnn = nn.RNN(d_emb, d_hidden, nonlinearity="tanh", batch_first=True)
        self.out = nn.Linear(d_hidden, vocab_size)

    def forward(self, idx, targets=None, ignore_index: int = -100) -> LMOutput:
        h, _ = self.rnn(self.embed(idx))  # (B, T, d_hidden)：必须一步一步地算
        logits = self.out(h)  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=ignore_index)
        return LMOutput(logits, loss, None)
