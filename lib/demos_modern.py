"""第 12 节 notebook 的演示函数：今天的 Transformer（LLaMA 式）改了哪些零件。

讲义 §12 的表里每一行，在 lib/transformer.py 里都是 TransformerConfig 的一个选项：
    norm="rmsnorm"、ffn="swiglu"、bias=False、n_kv_heads（GQA）、pos="rope"。
这里的函数把这些选项逐一拿出来比较（输出、参数量、KV 缓存），数出 LLaMA-7B 形状的参数量
（在 meta 设备上建模型，不真的分配 67 亿个参数），并在玩具语言上做一次小规模的对比训练。
"""
from __future__ import annotations

import statistics

import torch

from .toy_language import PAD_ID, VOCAB_SIZE, standard_splits
from .transformer import (FeedForward, TransformerConfig, TransformerLM, apply_rope, count_parameters,
                          evaluate_perplexity, lm_param_formula, make_norm, train_lm)

# ----------------------------------------------------------------------------
# 归一化：LayerNorm vs RMSNorm
# ----------------------------------------------------------------------------


@torch.no_grad()
def compare_norms(x: torch.Tensor) -> dict:
    """同一个输入分别过 LayerNorm 和 RMSNorm（刚初始化：γ = 1，β = 0）。

    LayerNorm：(x − 均值) / 标准差；RMSNorm：x / 均方根 sqrt(mean(x²))，不减均值（§12）。
    返回 dict：layernorm、rmsnorm（输出，形状同 x），layernorm_params、rmsnorm_params（d 维时的参数量）。
    """
    d = x.size(-1)
    ln, rms = make_norm("layernorm", d), make_norm("rmsnorm", d)
    return {"layernorm": ln(x), "rmsnorm": rms(x),
            "layernorm_params": count_parameters(ln), "rmsnorm_params": count_parameters(rms)}


# ----------------------------------------------------------------------------
# 前馈网络：GELU（4d）vs SwiGLU（约 8/3·d）；偏置
# ----------------------------------------------------------------------------


def ffn_params(d_model: int, kind: str, bias: bool, d_ff: int | None = None) -> dict:
    """一个前馈网络的隐藏宽度和参数量（从模块里数）。

    GELU：两个矩阵 d×4d、4d×d，约 8d²；SwiGLU：三个矩阵 d×h、d×h、h×d，h ≈ 8/3·d，也约 8d²。
    """
    ffn = FeedForward(d_model, d_ff, kind, bias)
    return {"d_ff": ffn.fc_out.in_features, "params": count_parameters(ffn)}


# ----------------------------------------------------------------------------
# GQA：KV 缓存每个词元占多少
# ----------------------------------------------------------------------------


def kv_cache_elements_per_token(n_layers: int, n_kv_heads: int, head_dim: int) -> int:
    """KV 缓存每个词元要存的数：每层 K 和 V 各 n_kv_heads × head_dim 个（§10.2、§12）。"""
    return 2 * n_layers * n_kv_heads * head_dim


@torch.no_grad()
def measured_kv_cache_per_token(cfg: TransformerConfig, n_tokens: int = 10, seed: int = 0) -> int:
    """真的跑一次带 KV 缓存的前向传播，数缓存里存了多少个数，再除以词元数。"""
    torch.manual_seed(seed)
    model = TransformerLM(cfg).eval()
    cache = model.new_kv_cache()
    idx = torch.randint(0, cfg.vocab_size, (1, n_tokens))
    model(idx, kv_cache=cache)
    total = sum(layer["k"].numel() + layer["v"].numel() for layer in cache)
    return total // n_tokens


# ----------------------------------------------------------------------------
# RoPE：没有位置表，打分只看相对位置
# ----------------------------------------------------------------------------


def rope_scores(q: torch.Tensor, k: torch.Tensor, pairs) -> list[float]:
    """同一个查询 q 放在位置 m、同一个键 k 放在位置 n，RoPE 之后的点积（§5.4）。q, k: (hs,)。"""
    out = []
    for m, n in pairs:
        qm = apply_rope(q[None], torch.tensor([m]))[0]  # (hs,)
        kn = apply_rope(k[None], torch.tensor([n]))[0]
        out.append(float(qm @ kn))
    return out


# ----------------------------------------------------------------------------
# LLaMA-7B 形状的参数量（练习 6）
# ----------------------------------------------------------------------------

LLAMA_7B_SHAPE = dict(vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, max_len=4096)
LLAMA_7B_D_FF = 11008  # swiglu_hidden(4096, multiple_of=256)：8/3·4096 = 10922.7，向上取整到 256 的倍数
LLAMA_7B_PARAMS = 6_738_415_616  # LLaMA-7B 论文里的“6.7B”的精确值


def llama_like_config(n_kv_heads: int | None = None, **overrides) -> TransformerConfig:
    """LLaMA-7B 的形状和零件：RMSNorm、SwiGLU（d_ff = 11008）、无偏置、RoPE、输出层不共享。"""
    kw = dict(LLAMA_7B_SHAPE, d_ff=LLAMA_7B_D_FF, norm="rmsnorm", ffn="swiglu", bias=False, pos="rope",
              tie_weights=False, n_kv_heads=n_kv_heads)
    kw.update(overrides)
    return TransformerConfig(**kw)


def gpt_style_config(**overrides) -> TransformerConfig:
    """同样的形状，2017/GPT-2 的零件：LayerNorm、GELU（4d）、有偏置。位置仍用 RoPE（不占参数），输出层不共享。

    这正是练习 6 的设定：每块 12d² + 13d。
    """
    kw = dict(LLAMA_7B_SHAPE, norm="layernorm", ffn="gelu", bias=True, pos="rope", tie_weights=False)
    kw.update(overrides)
    return TransformerConfig(**kw)


def count_parameters_meta(cfg: TransformerConfig) -> int:
    """在 meta 设备上建模型再数参数：只有形状、没有数据，67 亿个参数也不占内存。"""
    with torch.device("meta"):
        model = TransformerLM(cfg)
    return count_parameters(model)


def llama_param_formula(vocab_size: int, d_model: int, n_layers: int, d_ff: int,
                        n_kv_heads: int | None = None, n_heads: int | None = None, tied: bool = False) -> int:
    """LLaMA 式解码器的参数量闭式公式（无偏置、RMSNorm 只有 γ、SwiGLU 三个矩阵、RoPE 无参数）。

    每块：W^Q 和 W^O 各 d²，W^K、W^V 各 d × kv_dim（GQA 时 kv_dim = n_kv_heads × d/n_heads），
    前馈 3·d·d_ff，两个 RMSNorm 2d。整个模型再加词嵌入 Vd、最后的 RMSNorm d、输出层 Vd（不共享时）。
    """
    kv_dim = d_model if n_kv_heads is None else n_kv_heads * (d_model // n_heads)
    block = 2 * d_model * d_model + 2 * d_model * kv_dim + 3 * d_model * d_ff + 2 * d_model
    total = vocab_size * d_model + n_layers * block + d_model
    return total if tied else total + vocab_size * d_model


def llama_breakdown(cfg: TransformerConfig) -> dict:
    """按零件分的参数量（在 meta 设备上数）：词嵌入、注意力、前馈网络、归一化、输出层。"""
    with torch.device("meta"):
        model = TransformerLM(cfg)
    parts = {"embedding": 0, "attention": 0, "ffn": 0, "norm": 0, "output": 0}
    for name, p in model.named_parameters():
        if name.startswith("tok_emb") or name.startswith("pos_emb"):
            parts["embedding"] += p.numel()
        elif ".attn." in name or ".cross_attn." in name:
            parts["attention"] += p.numel()
        elif ".ffn." in name:
            parts["ffn"] += p.numel()
        elif "norm" in name:
            parts["norm"] += p.numel()
        elif name.startswith("lm_head"):
            parts["output"] += p.numel()
        else:
            raise ValueError(f"没有归类的参数 {name}")
    return parts


def exercise6_estimate() -> int:
    """练习 6：用每块 12d² + 13d 估算（V = 32000，d = 4096，32 层，RoPE 无位置表，输出层不共享）。"""
    s = LLAMA_7B_SHAPE
    return lm_param_formula(s["vocab_size"], s["d_model"], s["n_layers"], pos="rope", tied=False)


# ----------------------------------------------------------------------------
# 小规模对比：LayerNorm + GELU vs RMSNorm + SwiGLU（参数预算相同）
# ----------------------------------------------------------------------------


def matched_swiglu_d_ff(base: TransformerConfig, **modern) -> int:
    """找一个 SwiGLU 宽度，使 RMSNorm + SwiGLU（+ modern 里的其他改动）模型的参数量最接近 base。

    参数量是 d_ff 的一次函数（每层 3·d·d_ff，有偏置时再加 2·d_ff），量两个点就能解出来。
    """
    target = count_parameters_meta(base)

    def count(d_ff):
        return count_parameters_meta(TransformerConfig(**{**base.__dict__, "norm": "rmsnorm", "ffn": "swiglu",
                                                          "d_ff": d_ff, **modern}))

    p8, p9 = count(8), count(9)
    d_ff = 8 + round((target - p8) / (p9 - p8))
    return min((d_ff - 1, d_ff, d_ff + 1), key=lambda h: abs(count(h) - target))


def head_to_head_configs(d_ff_modern: int | None = None) -> dict:
    """两个模型：§11 的迷你 GPT（LayerNorm + GELU，有偏置）和 LLaMA 式的零件（RMSNorm + SwiGLU，无偏置）。

    其余完全相同（d = 64，4 个头，2 层，可学习的位置嵌入，Pre-LN，权重共享）；
    SwiGLU 的宽度选成让两个模型的参数量几乎相同。
    """
    base = TransformerConfig()  # 迷你 GPT：109,248 个参数
    modern = dict(norm="rmsnorm", ffn="swiglu", bias=False)
    d_ff = d_ff_modern or matched_swiglu_d_ff(base, bias=False)
    return {"LayerNorm + GELU": base,
            "RMSNorm + SwiGLU": TransformerConfig(**{**base.__dict__, **modern, "d_ff": d_ff})}


def head_to_head(n_train: int = 5000, epochs: int = 2, seeds=(0, 1, 2), max_lr: float = 3e-3,
                 warmup_steps: int = 30, progress: bool = True) -> dict:
    """在玩具语言上训练两种模型（每种 len(seeds) 个随机种子），比较测试集困惑度。

    数据：standard_splits 的 n_train 句训练、2,000 句测试集（同一份数据给所有模型）。
    返回 {名字: {"params": 参数量, "test_ppl": [每个种子的测试集困惑度], "loss": [[每个种子每一步的训练损失]]}}。
    """
    train, _, test = standard_splits(n_train=n_train, n_dev=1)
    results = {}
    for name, cfg in head_to_head_configs().items():
        res = {"params": None, "test_ppl": [], "loss": []}
        for seed in seeds:
            torch.manual_seed(seed)
            model = TransformerLM(cfg)
            res["params"] = count_parameters(model)
            hist = train_lm(model, train, pad_id=PAD_ID, epochs=epochs, max_lr=max_lr,
                            warmup_steps=warmup_steps, seed=seed, progress=progress, desc=f"{name} seed {seed}")
            res["loss"].append(hist["loss"])
            res["test_ppl"].append(evaluate_perplexity(model, test, PAD_ID))
        results[name] = res
    return results


def summarize_head_to_head(results: dict) -> dict:
    """每个模型的平均测试集困惑度、种子之间的极差，以及两者均值之差和种子波动的比较。"""
    out = {}
    for name, res in results.items():
        ppl = res["test_ppl"]
        out[name] = {"mean": statistics.mean(ppl), "spread": max(ppl) - min(ppl)}
    names = list(out)
    out["difference"] = out[names[1]]["mean"] - out[names[0]]["mean"]  # 负数：后者更好
    out["max_seed_spread"] = max(out[n]["spread"] for n in names)
    return out

