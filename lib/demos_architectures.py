"""第 8–10 节 notebook 的演示函数：三种结构、训练细节、计算量与 KV 缓存。

每个函数对应 notebook 里的一个“演示”，只调用 lib/transformer.py 里的零件，自己不实现模型。
notebook 调用它们、画图、用 assert 写出讲义的结论；tests/test_demos_architectures.py 测试它们。

- §8  encoder_padding_demo、padded_batch_demo、attention_patterns、causality_demo、reverse_batch / train_reverser /
      greedy_decode / reverse_accuracy / cross_attention_maps、tying_param_counts
- §9  lr_schedule、adam_first_step、warmup_experiment、label_smoothing_experiment、
      residual_std_profile / final_std_vs_depth、grad_clipping_trace
- §10 attention_share / compute_share_table、time_layer_parts / measured_shares、
      attention_weight_bytes、kv_cache_position_counts / count_generate_positions、generation_speed
"""
from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from lib.toy_language import PAD_ID, VOCAB_SIZE, decode, encode, generate_corpus, standard_splits
from lib.transformer import (
    EncoderDecoder,
    FeedForward,
    MultiHeadAttention,
    TransformerConfig,
    TransformerLM,
    batches,
    count_parameters,
    evaluate_perplexity,
    generate,
    lm_param_formula,
    pad_mask_from_tokens,
    scaled_dot_product_attention,
    torch_threads,
    train_lm,
    train_steps,
    warmup_cosine,
)

# ============================================================================
# §8.1 编码器：填充过的一批句子，pad_mask 加在键（列）上
# ============================================================================


def demo_model(seed: int, **overrides) -> TransformerLM:
    """演示用的小模型（d = 64，4 个头，2 层，79 个词元的玩具语言词表），固定随机种子。"""
    torch.manual_seed(seed)
    return TransformerLM(**overrides).eval()


def encoder_padding_demo(pad_counts=(0, 3, 10), seed: int = 0) -> dict:
    """§8.1：同一个句子后面跟 0、3、10 个填充词元，编码器给真实词元的输出是否一样？

    返回 dict：
      words                句子的词（不含填充）
      diff_with_mask[k]    传了 pad_mask 时，跟 k 个填充的输出和不填充时的最大差（应为浮点误差）
      diff_without_mask[k] 不传 pad_mask 时的最大差（填充被当成了真实的词，输出会变）
    """
    if not pad_counts or min(pad_counts) < 0:
        raise ValueError("pad_counts 必须是非负整数的列表，例如 (0, 3, 10)")
    sentence = generate_corpus(1, seed=seed)[0]
    ids = torch.tensor([encode(sentence.words)])  # (1, n)
    n = ids.size(1)
    encoder = demo_model(seed, causal=False)
    ref_masked = ref_plain = None
    diff_with, diff_without = {}, {}
    with torch.no_grad():
        for k in pad_counts:
            padded = torch.cat([ids, torch.full((1, k), PAD_ID)], dim=1)  # (1, n + k)
            pad_mask = pad_mask_from_tokens(padded, PAD_ID)  # (1, n + k)，真实词元为 True
            h_masked, _ = encoder.hidden_states(padded, pad_mask=pad_mask)  # (1, n + k, d)
            h_plain, _ = encoder.hidden_states(padded)  # 不告诉模型哪里是填充
            h_masked, h_plain = h_masked[:, :n], h_plain[:, :n]  # 只比较真实词元
            if ref_masked is None:
                ref_masked, ref_plain = h_masked, h_plain
            diff_with[k] = (h_masked - ref_masked).abs().max().item()
            diff_without[k] = (h_plain - ref_plain).abs().max().item()
    return {"words": sentence.words, "diff_with_mask": diff_with, "diff_without_mask": diff_without}


def padded_batch_demo(n_sentences: int = 4, seed: int = 0) -> dict:
    """§8.1：长短不一的几个句子补齐成一批送进编码器，每句真实词元的输出和它单独送进去时是否一样？

    返回 dict：lengths（每句的长度）、batch_shape（补齐后的 (B, T)）、
    max_diff_with_mask / max_diff_without_mask（所有句子、所有真实词元上的最大差）。
    """
    sents = [encode(s.words) for s in generate_corpus(n_sentences, seed=seed)]
    T = max(len(s) for s in sents)
    batch = torch.tensor([s + [PAD_ID] * (T - len(s)) for s in sents])  # (B, T)，右侧补 <pad>
    encoder = demo_model(seed, causal=False)
    with torch.no_grad():
        h_masked, _ = encoder.hidden_states(batch, pad_mask=pad_mask_from_tokens(batch, PAD_ID))  # (B, T, d)
        h_plain, _ = encoder.hidden_states(batch)
        diff_with = diff_without = 0.0
        for b, s in enumerate(sents):
            alone, _ = encoder.hidden_states(torch.tensor([s]))  # (1, n, d)：单独一句，没有填充
            diff_with = max(diff_with, (h_masked[b, : len(s)] - alone[0]).abs().max().item())
            diff_without = max(diff_without, (h_plain[b, : len(s)] - alone[0]).abs().max().item())
    return {"lengths": [len(s) for s in sents], "batch_shape": tuple(batch.shape),
            "max_diff_with_mask": diff_with, "max_diff_without_mask": diff_without}


def attention_patterns(n_pad: int = 3, seed: int = 0) -> dict:
    """§8.1–8.2：同一个句子在编码器（带填充）和解码器里的第 1 层注意力权重（4 个头的平均）。

    初始化时注意力几乎是均匀的，正好看清“能看哪些位置”：编码器每行均匀分给所有真实词元、
    填充的列全是 0；解码器是下三角，第 t 行均匀分给前 t + 1 个位置。
    返回 dict：labels（词元），encoder (T, T)，decoder (T, T)。
    """
    sentence = generate_corpus(1, seed=seed)[0]
    padded = torch.tensor([encode(sentence.words) + [PAD_ID] * n_pad])  # (1, T)
    labels = decode(padded[0])
    with torch.no_grad():
        enc = demo_model(seed, causal=False)(padded, pad_mask=pad_mask_from_tokens(padded, PAD_ID),
                                               return_attn=True)
        dec = demo_model(seed, causal=True)(padded, return_attn=True)
    return {"labels": labels,
            "encoder": enc.attentions[0]["self"][0].mean(0),  # (h, T, T) → (T, T)
            "decoder": dec.attentions[0]["self"][0].mean(0)}


def causality_demo(seed: int = 0) -> dict:
    """§8.1–8.2：把句子的最后一个词换掉，其余位置的输出变了多少？

    解码器（因果）：前面的位置一点都不变；编码器（双向）：每个位置都变。
    返回 dict：decoder_max_change、encoder_min_change（前 n−1 个位置上的最大 / 最小变化）。
    """
    ids = torch.tensor([encode(generate_corpus(1, seed=seed)[0].words)])  # (1, n)
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % VOCAB_SIZE  # 只改最后一个词元
    out = {}
    with torch.no_grad():
        for name, causal in (("decoder", True), ("encoder", False)):
            model = demo_model(seed, causal=causal)
            a, _ = model.hidden_states(ids)
            b, _ = model.hidden_states(changed)
            per_pos = (a - b)[0, :-1].abs().amax(dim=-1)  # (n-1,)：每个前面位置的最大变化
            out[name] = per_pos
    return {"decoder_max_change": out["decoder"].max().item(),
            "encoder_min_change": out["encoder"].min().item()}


# ============================================================================
# §8.3 编码器—解码器：把一串数字倒过来（一个小小的“翻译”任务）
# ============================================================================
REVERSE_PAD, REVERSE_BOS, REVERSE_EOS = 10, 11, 12  # 0–9 是数字
REVERSE_VOCAB = 13
REVERSE_MODEL = dict(d_model=64, n_heads=4, n_layers=2, max_len=16)


def reverse_batch(n: int, generator: torch.Generator, min_len: int = 3, max_len: int = 8):
    """n 个随机数字串（长度 min_len..max_len）及其倒序，右侧填充。

    返回 (src (n, S), tgt_in (n, S+1), tgt_out (n, S+1))：
      src     源序列，填充为 REVERSE_PAD
      tgt_in  解码器输入：<bos> + 倒序的数字（教师强制，teacher forcing）
      tgt_out 解码器目标：倒序的数字 + <eos>，填充处为 -100（不计损失）
    """
    if not 1 <= min_len <= max_len:
        raise ValueError(f"需要 1 <= min_len <= max_len，收到 min_len={min_len}, max_len={max_len}")
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=generator)
    S = int(lengths.max())
    src = torch.full((n, S), REVERSE_PAD)
    tgt_in = torch.full((n, S + 1), REVERSE_PAD)
    tgt_out = torch.full((n, S + 1), -100)
    for i, L in enumerate(lengths.tolist()):
        digits = torch.randint(0, 10, (L,), generator=generator)
        src[i, :L] = digits
        tgt_in[i, 0], tgt_in[i, 1 : L + 1] = REVERSE_BOS, digits.flip(0)
        tgt_out[i, :L], tgt_out[i, L] = digits.flip(0), REVERSE_EOS
    return src, tgt_in, tgt_out


def train_reverser(steps: int = 400, batch_size: int = 64, max_lr: float = 3e-3, warmup_steps: int = 50,
                   seed: int = 0, threads: int | None = 1):
    """训练一个编码器—解码器（lib.transformer.EncoderDecoder）学会倒序。返回 (模型, 每步的 loss)。

    AdamW + 预热 + 余弦衰减 + 梯度裁剪（§9），源序列的填充用 src_pad_mask 挡在交叉注意力之外。
    """
    torch.manual_seed(seed)
    model = EncoderDecoder(REVERSE_VOCAB, REVERSE_VOCAB, **REVERSE_MODEL)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=max_lr, betas=(0.9, 0.95), weight_decay=0.0)

    def step_loss(step):
        src, tgt_in, tgt_out = reverse_batch(batch_size, gen)
        return model(src, tgt_in, tgt_out, src_pad_mask=src != REVERSE_PAD).loss

    with torch_threads(threads):
        losses = train_steps(model, opt, step_loss, steps, max_lr, warmup_steps, grad_clip=1.0)
    model.eval()
    return model, losses


@torch.no_grad()
def greedy_decode(model: EncoderDecoder, src: torch.Tensor, max_new_tokens: int | None = None) -> torch.Tensor:
    """贪心解码：编码器只跑一次，解码器每步取概率最大的词。src: (B, S)。返回 (B, max_new_tokens)。"""
    src_pad_mask = src != REVERSE_PAD  # (B, S)
    memory, _ = model.encoder.hidden_states(src, pad_mask=src_pad_mask)  # (B, S, d)
    max_new_tokens = max_new_tokens or src.size(1) + 1
    out = torch.full((src.size(0), 1), REVERSE_BOS)  # (B, 1)
    for _ in range(max_new_tokens):
        logits = model.decoder(out, memory=memory, memory_pad_mask=src_pad_mask).logits[:, -1]  # (B, V)
        out = torch.cat([out, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return out[:, 1:]


def reverse_accuracy(model: EncoderDecoder, n: int = 500, seed: int = 123) -> dict:
    """在没见过的 n 个数字串上贪心解码：整串全对的比例、逐词元的正确率（含 <eos>）。"""
    src, _, tgt_out = reverse_batch(n, torch.Generator().manual_seed(seed))
    pred = greedy_decode(model, src)
    real = tgt_out != -100
    correct = (pred == tgt_out) | ~real
    return {"sequence_acc": correct.all(dim=1).float().mean().item(),
            "token_acc": ((pred == tgt_out) & real).sum().item() / real.sum().item()}


@torch.no_grad()
def cross_attention_maps(model: EncoderDecoder, digits) -> dict:
    """一个例子的交叉注意力（每层 4 个头的平均）：行 = 解码器的位置，列 = 源序列的位置。

    返回 dict：maps（每层一个 (L+1, L)），row_labels（解码器输入），col_labels（源序列）。
    """
    digits = list(digits)
    if not digits or any(not (0 <= d <= 9) for d in digits):
        raise ValueError("digits 必须是非空的 0–9 数字列表")
    src = torch.tensor([digits])  # (1, L)
    tgt_in = torch.tensor([[REVERSE_BOS] + digits[::-1]])  # (1, L+1)
    out = model(src, tgt_in, return_attn=True)
    maps = [layer["cross"][0].mean(0) for layer in out.attentions]  # 每层 (L+1, L)
    return {"maps": maps, "row_labels": ["<bos>"] + [str(d) for d in digits[::-1]],
            "col_labels": [str(d) for d in digits]}


@torch.no_grad()
def anti_diagonal_score(model: EncoderDecoder, n: int = 200, seed: int = 7, layer: int = -1) -> dict:
    """反对角线有多清楚：解码器第 t 个位置（要输出源序列倒数第 t+1 个数字）是否最关注源位置 L−1−t。

    返回 dict：argmax_hit（这一层头平均之后，argmax 恰好在反对角线上的行的比例），
    mean_weight（反对角线上的平均权重）。只统计真实数字的行（不含输出 <eos> 的那一行）。
    """
    src, tgt_in, _ = reverse_batch(n, torch.Generator().manual_seed(seed))
    src_pad_mask = src != REVERSE_PAD
    out = model(src, tgt_in, src_pad_mask=src_pad_mask, return_attn=True)
    w = out.attentions[layer]["cross"].mean(1)  # (B, T, S)
    lengths = src_pad_mask.sum(1).tolist()
    hits, weights, rows = 0, 0.0, 0
    for b, L in enumerate(lengths):
        for t in range(L):
            hits += int(w[b, t].argmax().item() == L - 1 - t)
            weights += w[b, t, L - 1 - t].item()
            rows += 1
    return {"argmax_hit": hits / rows, "mean_weight": weights / rows}


# ============================================================================
# §8.2 权重共享：输出层和词嵌入共用一个 V × d 矩阵
# ============================================================================


def tying_param_counts(vocab_size: int = 50257, d_model: int = 768, n_layers: int = 12, n_heads: int = 12,
                       max_len: int = 1024, device: str = "meta") -> dict:
    """数一数共享和不共享输出层时的参数量（默认 GPT-2 small）。

    device="meta"：只建“形状”，不分配内存也不初始化，1 亿多个参数也是瞬间完成；数出的个数和真模型一样。
    返回 dict：tied、untied（从模块里数）、formula_tied、formula_untied（lm_param_formula），
    saved（= untied − tied，应等于 V·d），shares_storage（共享时两个权重是否是同一个张量）。
    """
    counts = {}
    for tied in (True, False):
        cfg = TransformerConfig(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                                max_len=max_len, tie_weights=tied)
        with torch.device(device):
            model = TransformerLM(cfg)
        counts["tied" if tied else "untied"] = count_parameters(model)
        counts["formula_tied" if tied else "formula_untied"] = lm_param_formula(
            vocab_size, d_model, n_layers, max_len=max_len, tied=tied)
        if tied:
            counts["shares_storage"] = model.lm_head.weight is model.tok_emb.weight
    counts["saved"] = counts["untied"] - counts["tied"]
    return counts


# ============================================================================
# §9 训练细节
# ============================================================================


def lr_schedule(max_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> list[float]:
    """warmup_cosine 在每一步的学习率（画图用）。"""
    if total_steps <= 0 or warmup_steps < 0:
        raise ValueError("需要 total_steps > 0 且 warmup_steps >= 0")
    return [warmup_cosine(s, max_lr, warmup_steps, total_steps, min_lr) for s in range(total_steps)]


def adam_first_step(lr: float = 1e-2, seed: int = 0) -> dict:
    """§9 为什么要预热（之一）：Adam 的第一步，每个参数都移动约 lr，和梯度大小无关。

    第一步时二阶矩估计只有一个样本：m̂ = g，v̂ = g²，更新量 = lr · g / (|g| + ε) ≈ lr · sign(g)。
    初始化的权重标准差只有 0.02，lr = 1e-2 的一步就改变了权重的一大截。
    返回 dict：grad_abs_median（梯度绝对值的中位数）、step_abs_median（更新量绝对值的中位数）、
    frac_step_near_lr（更新量在 lr ± 10% 以内的参数所占比例）、init_std（初始化标准差 0.02）。
    只统计梯度不为 0 的参数。
    """
    model = demo_model(seed, causal=True).train()
    ids = [encode(s.words) for s in generate_corpus(64, seed=seed)]
    x, y = next(batches(ids, 64, PAD_ID))
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model(x, y).loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    opt.step()
    steps = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])
    nonzero = grads != 0  # 没出现在这批里的词，嵌入的梯度是 0，不会动
    step_abs = steps[nonzero].abs()
    return {"grad_abs_median": grads[nonzero].abs().median().item(),
            "step_abs_median": step_abs.median().item(),
            "frac_step_near_lr": ((step_abs - lr).abs() < 0.1 * lr).float().mean().item(),
            "init_std": 0.02}


WARMUP_DEMO = dict(n_layers=6, norm_position="post", max_lr=1e-2, n_train=4800, epochs=4, batch_size=64)


def _train_steps(model, train_seqs, steps, *, max_lr, warmup_steps, seed, loss_fn=None, betas=(0.9, 0.95),
                 weight_decay=0.1, grad_clip=1.0, batch_size=64):
    """固定步数的小训练循环，和 train_lm 同样的配方（AdamW、预热 + 余弦、梯度裁剪，矩阵才做权重衰减），
    只是损失可以换：loss_fn(logits (N, V), targets (N,))，默认普通交叉熵。

    train_lm 的损失固定是普通交叉熵；标签平滑的实验要换损失，所以用这个循环。
    """
    gen = torch.Generator().manual_seed(seed)
    decay = [p for p in model.parameters() if p.dim() >= 2]  # 和 train_lm 一样：偏置和归一化不衰减
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=max_lr, betas=betas)
    def stream():  # 一轮接一轮地取批
        while True:
            yield from batches(train_seqs, batch_size, PAD_ID, shuffle=True, generator=gen)

    data = stream()

    def step_loss(step):
        x, y = next(data)
        logits = model(x).logits.flatten(0, 1)  # (B·T, V)
        if loss_fn is None:
            return F.cross_entropy(logits, y.flatten(), ignore_index=-100)
        return loss_fn(logits, y.flatten())

    losses = train_steps(model, opt, step_loss, steps, max_lr, warmup_steps, grad_clip)
    model.eval()
    return losses


def warmup_experiment(seeds=(0,), warmups=(0, 150), n_dev: int = 500, threads: int | None = 1,
                      **overrides) -> dict:
    """§9 为什么要预热（之二）：Post-LN、6 层、较大的学习率（1e-2），有无预热各训练一次。

    用的就是 lib 的 train_lm（AdamW、β = (0.9, 0.95)、权重衰减 0.1、梯度裁剪 1.0、余弦衰减），
    4800 个句子 × 4 轮 = 300 步；两次训练只有 warmup_steps 不同（同样的初始化、同样的数据顺序）。
    配置见 WARMUP_DEMO（可用关键字参数覆盖）。
    编写时的实测（种子 0–3）：warmup_steps=0 时 4 次全部卡在开发集困惑度 ≈ 20.7（只看词频的水平）；
    warmup_steps=150 时 4 次分别是 5.31、4.86、7.27、4.91。预热 100 步不够稳：种子 3 仍然卡住。
    返回 {warmup_steps: {"losses": [每个种子每一步的 loss], "lr": [学习率曲线], "dev_ppl": [每个种子的开发集困惑度]}}。
    """
    cfg = {**WARMUP_DEMO, **overrides}
    train, dev, _ = standard_splits(seed=0, n_train=cfg["n_train"], n_dev=n_dev, n_test=1)
    results = {}
    for warmup in warmups:
        runs = {"losses": [], "lr": None, "dev_ppl": []}
        for seed in seeds:
            model = demo_model(seed, n_layers=cfg["n_layers"], norm_position=cfg["norm_position"])
            history = train_lm(model, train, pad_id=PAD_ID, epochs=cfg["epochs"], batch_size=cfg["batch_size"],
                               max_lr=cfg["max_lr"], warmup_steps=warmup, seed=seed, threads=threads,
                               progress=False)
            runs["losses"].append(history["loss"])
            runs["lr"] = history["lr"]
            runs["dev_ppl"].append(evaluate_perplexity(model, dev, PAD_ID))
        results[warmup] = runs
    return results


def smoothed_cross_entropy(epsilon: float):
    """标签平滑的损失（§9）：目标是 1−ε 给正确答案、ε 平分给所有 V 个词（PyTorch 的定义）。"""
    def loss_fn(logits, targets):
        return F.cross_entropy(logits, targets, ignore_index=-100, label_smoothing=epsilon)
    return loss_fn


@torch.no_grad()
def confidence_stats(model, sequences) -> dict:
    """模型有多自信：每个被预测位置上最大概率的平均值、预测分布的平均熵（nat）。"""
    probs_max, entropy, count = 0.0, 0.0, 0
    for x, y in batches(sequences, 256, PAD_ID):
        logp = torch.log_softmax(model(x).logits, dim=-1)  # (B, T, V)
        real = y != -100
        p = logp.exp()
        probs_max += p.amax(-1)[real].sum().item()
        entropy += -(p * logp).sum(-1)[real].sum().item()
        count += int(real.sum())
    return {"mean_max_prob": probs_max / count, "mean_entropy": entropy / count}


def label_smoothing_experiment(epsilons=(0.0, 0.1), n_train: int = 6000, n_test: int = 1000, steps: int = 400,
                               seed: int = 0, threads: int | None = 1) -> dict:
    """§9 标签平滑：同一个迷你 GPT 用 ε = 0 和 ε = 0.1 的损失各训练一次，然后用“真正的”困惑度比较。

    真正的困惑度 = exp(普通交叉熵)，不含平滑项（evaluate_perplexity）。
    返回 {ε: {"test_ppl", "mean_max_prob", "mean_entropy", "final_train_loss"}}。
    """
    train, _, test = standard_splits(seed=0, n_train=n_train, n_dev=1, n_test=n_test)
    out = {}
    with torch_threads(threads):
        for eps in epsilons:
            model = demo_model(seed)
            losses = _train_steps(model, train, steps, max_lr=3e-3, warmup_steps=50, seed=seed,
                                  loss_fn=smoothed_cross_entropy(eps))
            out[eps] = {"test_ppl": evaluate_perplexity(model, test, PAD_ID), **confidence_stats(model, test),
                        "final_train_loss": sum(losses[-20:]) / 20}
    return out


def set_residual_init(model: TransformerLM, scaled: bool) -> TransformerLM:
    """重新初始化残差路径上的最后一个线性层（注意力的 W^O 和前馈网络的 W_2）。

    scaled=True：GPT-2 的做法 N(0, (0.02/√(2N))²)（lib 的默认值，N = 层数，每块 2 个子层）；
    scaled=False：和其他线性层一样 N(0, 0.02²)。其余参数不动。
    """
    std = 0.02 / math.sqrt(2 * model.cfg.n_layers) if scaled else 0.02
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("out_proj.weight", "fc_out.weight")):
                p.normal_(0.0, std)
    return model


@torch.no_grad()
def residual_std_profile(n_layers: int = 24, d_model: int = 128, scaled: bool = True, seed: int = 0,
                         n_sentences: int = 32) -> list[float]:
    """初始化时残差主干上的数值大小：嵌入之后、每个块之后，所有元素的标准差。

    返回长度 n_layers + 1 的列表（第 0 个是嵌入 + 位置之后，第 l 个是第 l 个块之后）。
    """
    torch.manual_seed(seed)
    model = TransformerLM(d_model=d_model, n_heads=4, n_layers=n_layers).eval()
    set_residual_init(model, scaled)
    ids = [encode(s.words) for s in generate_corpus(n_sentences, seed=seed)]
    x, _ = next(batches(ids, n_sentences, PAD_ID))
    stds = []

    def record(module, args, output):  # Block.forward 返回 (x, attn)
        stds.append(output[0].std().item())

    def record_input(module, args):  # 第一个块的输入 = 嵌入 + 位置
        stds.append(args[0].std().item())

    hooks = [model.blocks[0].register_forward_pre_hook(record_input)]
    hooks += [b.register_forward_hook(record) for b in model.blocks]
    try:
        model(x)
    finally:
        for h in hooks:
            h.remove()
    return stds


def final_std_vs_depth(depths=(2, 4, 8, 16, 32), d_model: int = 128, seed: int = 0) -> dict:
    """最后一个块之后主干的标准差随层数怎么变：{"scaled": [...], "unscaled": [...]}，和 depths 对齐。"""
    return {name: [residual_std_profile(L, d_model, scaled, seed)[-1] for L in depths]
            for name, scaled in (("scaled", True), ("unscaled", False))}


def grad_clipping_trace(steps: int = 60, max_norm: float = 1.0, max_lr: float = 3e-3, seed: int = 0,
                        threads: int | None = 1) -> dict:
    """§9 梯度裁剪：训练迷你 GPT 若干步，记录每步裁剪前后的梯度范数。

    clip_grad_norm_ 把所有参数的梯度当成一个长向量：范数超过 max_norm 时整体乘以 max_norm/范数，
    方向不变。返回 dict：before、after（每步的范数），min_cosine（裁剪前后梯度方向的最小余弦相似度）。
    """
    train, _, _ = standard_splits(seed=0, n_train=steps * 32, n_dev=1, n_test=1)
    model = demo_model(seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=max_lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(seed)
    before, after, cosines = [], [], []
    with torch_threads(threads):
        for step, (x, y) in enumerate(batches(train, 32, PAD_ID, shuffle=True, generator=gen)):
            for group in opt.param_groups:
                group["lr"] = warmup_cosine(step, max_lr, 10, steps)
            opt.zero_grad(set_to_none=True)
            model(x, y).loss.backward()
            raw = torch.cat([p.grad.flatten() for p in model.parameters()]).clone()
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # 返回裁剪前的范数
            clipped = torch.cat([p.grad.flatten() for p in model.parameters()])
            before.append(total.item())
            after.append(clipped.norm().item())
            cosines.append(F.cosine_similarity(raw, clipped, dim=0).item())
            opt.step()
    model.eval()
    return {"before": before, "after": after, "min_cosine": min(cosines), "max_norm": max_norm}


# ============================================================================
# §10 计算量与长序列
# ============================================================================


def attention_share(n: int, d: int) -> float:
    """§10.1：一层里注意力矩阵部分（QK^T 和 AV，2n²d）占全部乘加（2n²d + 4nd² + 8nd²）的比例。"""
    if n <= 0 or d <= 0:
        raise ValueError(f"n 和 d 必须是正整数，收到 n={n}, d={d}")
    attn = 2 * n * n * d
    return attn / (attn + 12 * n * d * d)  # 化简后 = n / (n + 6d)


def crossover_length(d: int) -> int:
    """注意力矩阵部分和线性部分一样多的长度：2n²d = 12nd² ⇒ n = 6d。"""
    return 6 * d


def compute_share_table(d: int = 768, ns=(128, 512, 1024, 4096, 16384, 65536)) -> list[tuple]:
    """讲义 §10.1 的表（代码 01 演示 6）：(n, 注意力 2n²d, 线性 12nd², 占比)。"""
    return [(n, 2 * n * n * d, 12 * n * d * d, attention_share(n, d)) for n in ns]


def _best_time(fn, repeats: int) -> float:
    fn()  # 预热一次：第一次调用会分配内存
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@torch.no_grad()
def time_layer_parts(n: int, d: int = 128, n_heads: int = 4, repeats: int = 3, seed: int = 0) -> dict:
    """在本机上量一层的两部分各用多久（秒，repeats 次里最快的一次）。

    linear：Q、K、V 和输出投影（MultiHeadAttention 的 qkv_proj、out_proj）+ 前馈网络（FeedForward）；
    attention：每个头的 softmax(QK^T/√d_k) V（lib 的 scaled_dot_product_attention，显式算出 n×n 权重）。
    """
    torch.manual_seed(seed)
    mha, ffn = MultiHeadAttention(d, n_heads).eval(), FeedForward(d).eval()
    x = torch.randn(1, n, d)  # (1, n, d)
    q, k, v = (mha._split_heads(t, n_heads) for t in mha.qkv_proj(x).split(d, dim=-1))  # 各 (1, h, n, hs)
    o = torch.randn(1, n, d)

    def linear_part():
        mha.qkv_proj(x)  # 3nd² 次乘加
        mha.out_proj(o)  # nd²
        ffn(x)  # 8nd²

    def attention_part():
        scaled_dot_product_attention(q, k, v)  # QK^T 和 AV：2n²d

    return {"linear": _best_time(linear_part, repeats), "attention": _best_time(attention_part, repeats)}


def measured_shares(ns=(64, 128, 256, 512, 1024, 2048), d: int = 128, n_heads: int = 4, repeats: int = 3,
                    threads: int | None = 1) -> list[dict]:
    """对每个 n 量一次 time_layer_parts，返回 [{n, linear, attention, measured_share, theory_share}]。"""
    rows = []
    with torch_threads(threads):
        for n in ns:
            t = time_layer_parts(n, d, n_heads, repeats)
            rows.append({"n": n, **t, "measured_share": t["attention"] / (t["attention"] + t["linear"]),
                         "theory_share": attention_share(n, d)})
    return rows


def attention_weight_bytes(n: int, n_heads: int = 1, n_layers: int = 1, batch_size: int = 1,
                           dtype: torch.dtype = torch.float32) -> int:
    """n×n 注意力权重占的字节数：每个序列、每层、每个头一个 n×n 矩阵（§10.1 末尾）。"""
    if n <= 0:
        raise ValueError(f"n 必须是正整数，收到 {n}")
    return n * n * n_heads * n_layers * batch_size * torch.finfo(dtype).bits // 8


def measured_attention_weight_bytes(n: int, seed: int = 0) -> int:
    """真的让迷你 GPT 返回每层的注意力权重，数它们一共占多少字节（和 attention_weight_bytes 对照）。"""
    model = demo_model(seed, max_len=max(64, n))
    with torch.no_grad():
        out = model(torch.randint(0, VOCAB_SIZE, (1, n)), return_attn=True)
    return sum(a["self"].numel() * a["self"].element_size() for a in out.attentions)


def kv_cache_position_counts(n: int, m: int) -> dict:
    """练习 11(b)：提示 n 个词元、生成 m 个新词，一共要“算”多少个位置。

    不用缓存：第 i 步重算 n+i−1 个位置，共 mn + m(m−1)/2；用缓存：讲义的答案 n + m。
    """
    if n < 1 or m < 0:
        raise ValueError(f"需要 n >= 1、m >= 0，收到 n={n}, m={m}")
    return {"without_cache": m * n + m * (m - 1) // 2, "with_cache": n + m}


def count_generate_positions(model: TransformerLM, n: int, m: int, use_cache: bool, seed: int = 0) -> int:
    """真的调用 lib.transformer.generate，用钩子数模型一共处理了多少个位置（每个序列）。"""
    counted = []
    hook = model.register_forward_pre_hook(lambda module, args, kwargs: counted.append(args[0].size(1)),
                                           with_kwargs=True)
    try:
        prompt = torch.randint(0, model.cfg.vocab_size, (1, n), generator=torch.Generator().manual_seed(seed))
        generate(model, prompt, m, use_cache=use_cache, seed=seed)
    finally:
        hook.remove()
    return sum(counted)


def generation_speed(prompt_len: int = 16, new_tokens: int = 120, seed: int = 0, repeats: int = 1,
                     threads: int | None = 1, **overrides) -> dict:
    """§10.2 KV 缓存：同一个模型、同一个提示、同一个种子，有无缓存各生成一次。

    返回 dict：same_tokens（两者生成的词元是否完全相同）、time_cached、time_uncached（秒，最快的一次）、
    speedup（uncached / cached）、tokens（生成的序列，(1, prompt_len + new_tokens)）。
    """
    cfg = dict(d_model=128, n_heads=4, n_layers=4, max_len=prompt_len + new_tokens)
    cfg.update(overrides)
    model = demo_model(seed, **cfg)
    prompt = torch.randint(0, model.cfg.vocab_size, (1, prompt_len), generator=torch.Generator().manual_seed(seed))
    with torch_threads(threads):
        cached = generate(model, prompt, new_tokens, use_cache=True, seed=seed)
        uncached = generate(model, prompt, new_tokens, use_cache=False, seed=seed)
        t_cached = _best_time(lambda: generate(model, prompt, new_tokens, use_cache=True, seed=seed), repeats)
        t_uncached = _best_time(lambda: generate(model, prompt, new_tokens, use_cache=False, seed=seed), repeats)
    return {"same_tokens": torch.equal(cached, uncached), "time_cached": t_cached, "time_uncached": t_uncached,
            "speedup": t_uncached / t_cached, "tokens": cached}
