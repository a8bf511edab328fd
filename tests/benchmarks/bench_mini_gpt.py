"""速度基准（按需运行，不在默认测试里）：迷你 GPT 的训练吞吐量。

    make bench        # 或 PYTHONPATH=. python tests/benchmarks/bench_mini_gpt.py [--full]

在同一次运行里比较两件事，打印比值而不是断言时间：
1. 我们的 TransformerLM + train_lm 和一个最小的 nanoGPT 式参考实现（同样大小、同样的批，
   参考实现用它自己的最简训练循环）每秒处理的词元数；目标：比值 ≥ 0.95。
2. 线程策略：同一个训练在 1 个和 2 个线程下的速度（讲义的经验：小模型单线程更快）。
--full 再完整跑一遍 §11.1（20,000 句、8 轮），打印用时（目标：约一分钟）。
"""
from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from lib import toy_language as tl
from lib.transformer import TransformerLM, batches, count_parameters, torch_threads, train_lm


# ---------------------------------------------------------------- nanoGPT-style reference
class RefAttention(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.c_attn, self.c_proj, self.h = nn.Linear(d, 3 * d), nn.Linear(d, d), h

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class RefBlock(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(d), RefAttention(d, h), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class RefGPT(nn.Module):
    def __init__(self, V=79, L=64, d=64, h=4, n=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, d), nn.Embedding(L, d)
        self.blocks = nn.ModuleList(RefBlock(d, h) for _ in range(n))
        self.ln_f, self.lm_head = nn.LayerNorm(d), nn.Linear(d, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)


def train_reference(model, seqs, epochs, batch_size=64, lr=3e-3):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        for x, y in batches(seqs, batch_size, tl.PAD_ID, shuffle=True, generator=gen):
            loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()


def n_target_tokens(seqs):
    return sum(len(s) - 1 for s in seqs)


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=5000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="also time the full §11.1 run")
    args = ap.parse_args()

    train, _, _ = tl.standard_splits()
    seqs = train[: args.sentences]
    tokens = n_target_tokens(seqs) * args.epochs
    torch.manual_seed(0)
    ours, ref = TransformerLM(), RefGPT()
    print(f"parameters: ours {count_parameters(ours):,}  reference {count_parameters(ref):,}")
    print(f"workload: {args.sentences} sentences x {args.epochs} epochs = {tokens:,} target tokens, "
          f"best of {args.repeats}")

    def ours_run(threads):
        torch.manual_seed(0)
        return timed(lambda: train_lm(TransformerLM(), seqs, pad_id=tl.PAD_ID, epochs=args.epochs,
                                      threads=threads, progress=False))

    def ref_run(threads):
        torch.manual_seed(0)
        with torch_threads(threads):
            return timed(lambda: train_reference(RefGPT(), seqs, args.epochs))

    # warm-up: the first training step in a process pays one-off import and allocation costs
    train_lm(TransformerLM(), seqs[:256], pad_id=tl.PAD_ID, epochs=1, progress=False)
    train_reference(RefGPT(), seqs[:256], 1)
    results = {}
    for threads in (1, 2):
        for name, run in (("ours", ours_run), ("reference", ref_run)):
            results[name, threads] = min(run(threads) for _ in range(args.repeats))
    for (name, threads), sec in results.items():
        print(f"{name:>9}  threads={threads}: {tokens / sec:>9,.0f} tokens/s  ({sec:.2f} s)")
    for threads in (1, 2):
        ratio = results["reference", threads] / results["ours", threads]
        print(f"ratio ours/reference (threads={threads}): {ratio:.3f}  (goal >= 0.95)")
    print(f"thread policy: 1 thread is {results['ours', 2] / results['ours', 1]:.2f}x the speed of 2 threads")

    if args.full:
        torch.manual_seed(0)
        full_train, dev, _ = tl.standard_splits()
        sec = timed(lambda: train_lm(TransformerLM(), full_train, pad_id=tl.PAD_ID, epochs=8,
                                     dev_seqs=dev, progress=False))
        print(f"full §11.1 run (20,000 sentences, 8 epochs, dev ppl each epoch): {sec:.1f} s")


if __name__ == "__main__":
    main()
