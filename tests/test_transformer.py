"""lib/transformer.py：讲义里关于这些零件的每个论断，都变成一个可能失败的测试。"""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from lib.transformer import (
    Block, EncoderDecoder, LearnedPositions, MultiHeadAttention, TransformerConfig, TransformerLM,
    apply_rope, block_param_formula, causal_mask, count_parameters, evaluate_perplexity, generate,
    layer_norm, lm_param_formula, scaled_dot_product_attention, self_attention_loop,
    sinusoidal_positions, sinusoidal_shift_matrix, swiglu_hidden, train_lm, train_steps, warmup_cosine,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------- §2–§4 attention and masks
def test_attention_rows_sum_to_one_and_masked_weights_are_exactly_zero():
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    out, w = scaled_dot_product_attention(q, k, v, causal_mask(5))
    assert torch.allclose(w.sum(-1), torch.ones(2, 3, 5))
    upper = ~causal_mask(5)
    assert (w[..., upper] == 0).all()  # exactly 0, not "small"
    assert out.shape == (2, 3, 5, 8)


def test_mask_uses_minus_infinity_so_huge_scores_cannot_leak():
    # With a finite "-1e4" mask a score of +1e5 would still leak through; -inf never does.
    q = torch.tensor([[[1.0]]]) * 1e5
    k = torch.tensor([[[1.0], [1.0]]])
    v = torch.tensor([[[0.0], [1.0]]])
    mask = torch.tensor([[True, False]])
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert w[0, 0, 1].item() == 0.0 and out.item() == 0.0


def test_causal_mask_with_cache_offset():
    m = causal_mask(2, 5)
    assert m.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]


def test_loop_form_equals_matrix_form():
    x = torch.randn(4, 4)
    wq, wk, wv = torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3)
    loop = self_attention_loop(x, wq, wk, wv)
    matrix, _ = scaled_dot_product_attention(x @ wq, x @ wk, x @ wv)
    assert torch.allclose(loop, matrix, atol=1e-6)


def _sa_model(pos):
    return TransformerLM(vocab_size=20, d_model=16, n_heads=2, n_layers=1, pos=pos, causal=False,
                         max_len=16).eval()


def test_permutation_equivariance_without_positions_and_not_with_them():
    idx = torch.tensor([[3, 7, 11, 5, 2]])
    perm = torch.tensor([4, 2, 0, 3, 1])
    nope = _sa_model("none")
    h, _ = nope.hidden_states(idx)
    h_perm, _ = nope.hidden_states(idx[:, perm])
    assert torch.allclose(h_perm, h[:, perm], atol=1e-6)  # SA(PX) = P·SA(X)
    for pos in ("learned", "sinusoidal", "rope"):
        m = _sa_model(pos)
        if pos == "learned":  # the init scale (0.02) makes positions tiny; make them matter
            nn.init.normal_(m.pos_emb.table.weight, std=1.0)
        h, _ = m.hidden_states(idx)
        h_perm, _ = m.hidden_states(idx[:, perm])
        assert not torch.allclose(h_perm, h[:, perm], atol=1e-4), pos


def test_causal_model_earlier_outputs_ignore_future_tokens():
    model = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=2, max_len=16).eval()
    a = torch.tensor([[1, 5, 9, 4, 8, 2]])
    b = a.clone()
    b[0, -1] = 17
    la, lb = model(a).logits, model(b).logits
    assert torch.allclose(la[:, :-1], lb[:, :-1], atol=1e-6)
    assert not torch.allclose(la[:, -1], lb[:, -1])


def test_fast_path_equals_explicit_weights_path():
    model = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=2, max_len=16).eval()
    idx = torch.randint(0, 30, (3, 9))
    fast = model(idx).logits
    explicit = model(idx, return_attn=True)
    assert torch.allclose(fast, explicit.logits, atol=1e-5)
    assert len(explicit.attentions) == 2
    assert explicit.attentions[0]["self"].shape == (3, 4, 9, 9)


# ---------------------------------------------------------------- §5 positions
def test_sinusoidal_dot_products_depend_only_on_distance_and_match_lecture():
    pe = sinusoidal_positions(300, 64).double()
    lecture = {0: 32.0, 1: 30.9, 2: 28.3, 4: 23.9, 8: 22.4, 16: 19.4, 32: 19.6, 64: 13.9}
    for k, value in lecture.items():
        dots = [float(pe[p] @ pe[p + k]) for p in (0, 20, 100)]
        assert max(dots) - min(dots) < 1e-4
        assert round(dots[0], 1) == value


def test_shift_matrix_maps_every_position():
    pe = sinusoidal_positions(80, 16)
    for k in (1, 3, 7):
        m = sinusoidal_shift_matrix(k, 16)
        assert torch.allclose(pe[k:] , pe[:-k] @ m.T, atol=1e-5)


@pytest.mark.parametrize("d", [4, 8, 16, 64])
def test_rope_scores_depend_only_on_relative_position_and_keep_norms(d):
    q, k = torch.randn(1, 1, 1, d), torch.randn(1, 1, 1, d)

    def score(m, n):
        qm = apply_rope(q, torch.tensor([m]))
        kn = apply_rope(k, torch.tensor([n]))
        return float((qm * kn).sum())

    assert score(5, 2) == pytest.approx(score(10, 7), abs=1e-5) == pytest.approx(score(100, 97), abs=1e-5)
    assert score(5, 5) == pytest.approx(score(50, 50), abs=1e-5)
    assert abs(score(5, 2) - score(2, 5)) > 1e-3  # before vs after differ
    for p in (0, 1, 10, 100, 1000):
        assert apply_rope(q, torch.tensor([p])).norm() == pytest.approx(float(q.norm()), rel=1e-5)


def test_rope_and_sinusoidal_scores_reproduce_the_lecture_table():
    """§5.4 的表（notebook 05 演示 4）：讲义的 q、k 是 np.random.default_rng(0) 的两个 8 维正态向量。"""
    q, k = torch.tensor(np.random.default_rng(0).normal(size=(2, 8)), dtype=torch.float32)
    pe = sinusoidal_positions(101, 8)
    lecture = {(5, 2): ("-3.724", "1.177"), (10, 7): ("-3.724", "2.000"), (100, 97): ("-3.724", "-2.135"),
               (5, 5): ("-1.468", "3.041"), (50, 50): ("-1.468", "0.331"),
               (2, 5): ("-3.823", "0.829"), (60, 63): ("-3.823", "0.842")}
    for (m, n), (rope_score, sinusoidal_score) in lecture.items():
        qm, kn = apply_rope(q[None], torch.tensor([m]))[0], apply_rope(k[None], torch.tensor([n]))[0]
        assert f"{float(qm @ kn):.3f}" == rope_score, (m, n)
        assert f"{float((q + pe[m]) @ (k + pe[n])):.3f}" == sinusoidal_score, (m, n)
    assert f"{float(q.norm()):.4f}" == "1.8627"
    for p in (0, 1, 10, 100, 1000):
        assert f"{float(apply_rope(q[None], torch.tensor([p])).norm()):.4f}" == "1.8627", p


def test_rope_pairings_differ_but_agree_after_a_fixed_permutation():
    """apply_rope 的文档：前后两半配对和相邻配对（RoFormer）打分不同，重排 W^Q、W^K 的输出维度后相同。"""
    d = 8
    q, k = torch.randn(d), torch.randn(d)
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)

    def adjacent(x, pos):  # (x_2i, x_2i+1) 看成一个复数，乘 e^(i pos θ_i)
        z = torch.view_as_complex(x.double().reshape(d // 2, 2))
        return torch.view_as_real(z * torch.polar(torch.ones_like(theta), pos * theta)).flatten().float()

    def half(x, pos):
        return apply_rope(x[None], torch.tensor([pos]))[0]

    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    for m, n in ((5, 2), (40, 37), (2, 5)):
        assert float(adjacent(q, m) @ adjacent(k, n)) == pytest.approx(float(half(q[perm], m) @ half(k[perm], n)), abs=1e-5)
    assert abs(float(adjacent(q, 5) @ adjacent(k, 2)) - float(half(q, 5) @ half(k, 2))) > 1e-3


def test_rope_rotates_queries_and_keys_but_not_values():
    torch.manual_seed(1)
    with_rope = MultiHeadAttention(16, 2, rope=True).eval()
    without = MultiHeadAttention(16, 2, rope=False).eval()
    without.load_state_dict(with_rope.state_dict())
    x = torch.randn(1, 6, 16)
    # Q = K = 0 → uniform weights, output = mean of V: identical only if V is not rotated
    with torch.no_grad():
        with_rope.qkv_proj.weight[:32] = 0
        with_rope.qkv_proj.bias[:32] = 0
        without.load_state_dict(with_rope.state_dict())
    assert torch.allclose(with_rope(x)[0], without(x)[0], atol=1e-6)
    # with real Q and K, rope changes the weights
    a, b = MultiHeadAttention(16, 2, rope=True).eval(), MultiHeadAttention(16, 2).eval()
    b.load_state_dict(a.state_dict())
    assert not torch.allclose(a(x, need_weights=True)[1], b(x, need_weights=True)[1])


def test_config_overrides_apply_on_top_of_a_config():
    model = TransformerLM(TransformerConfig(d_model=32, n_heads=4), n_layers=3)
    assert model.cfg.n_layers == 3 and model.cfg.d_model == 32


def test_learned_table_fails_clearly_past_its_length():
    model = TransformerLM(max_len=8)
    with pytest.raises(ValueError, match="超出了可学习的位置嵌入的范围 8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="未知的位置编码"):
        TransformerConfig(pos="alibi")


# ---------------------------------------------------------------- §6 multi-head attention
def test_multihead_equals_torch_multiheadattention():
    d, h = 24, 4
    ours = MultiHeadAttention(d, h).eval()
    ref = nn.MultiheadAttention(d, h, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.qkv_proj.weight)
        ref.in_proj_bias.copy_(ours.qkv_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    x = torch.randn(3, 7, d)
    out, w = ours(x, need_weights=True)
    ref_out, ref_w = ref(x, x, x, need_weights=True, average_attn_weights=True)
    assert (out - ref_out).abs().max() < 1e-6
    assert (w.mean(dim=1) - ref_w).abs().max() < 1e-6
    # with a causal mask: torch's bool mask means "not allowed", ours means "allowed"
    out, _ = ours(x, mask=causal_mask(7), need_weights=True)
    ref_out, _ = ref(x, x, x, attn_mask=~causal_mask(7))
    assert (out - ref_out).abs().max() < 1e-6


def test_is_causal_holds_on_every_path_of_multihead_attention():
    mha = MultiHeadAttention(16, 2).eval()
    x = torch.randn(1, 6, 16)
    fast, _ = mha(x, is_causal=True)
    explicit, w = mha(x, is_causal=True, need_weights=True)
    assert (w[..., ~causal_mask(6)] == 0).all() and torch.allclose(fast, explicit, atol=1e-6)
    cache = {}  # feed the sequence in two chunks through the cache: same as one causal pass
    first, _ = mha(x[:, :2], cache=cache, is_causal=True)
    second, _ = mha(x[:, 2:], cache=cache, is_causal=True)
    assert torch.allclose(torch.cat([first, second], dim=1), fast, atol=1e-6)


def test_grouped_query_attention_shapes_and_cache_size():
    mha = MultiHeadAttention(32, 8, n_kv_heads=2)
    cache = {}
    out, _ = mha(torch.randn(2, 5, 32), cache=cache)
    assert out.shape == (2, 5, 32)
    assert cache["k"].shape == (2, 2, 5, 4)  # only 2 KV heads are cached


# ---------------------------------------------------------------- §7 block and parameter counts
def test_layer_norm_by_hand_matches_lecture_and_torch():
    x = torch.tensor([[2.0, 4.0, 6.0, 8.0], [100.0, 101.0, 102.0, 103.0]])
    expected = torch.tensor([-1.342, -0.447, 0.447, 1.342])
    ours = layer_norm(x)
    assert torch.allclose(ours, nn.LayerNorm(4)(x), atol=1e-6)
    assert torch.allclose(ours.round(decimals=3), expected.expand(2, 4))


@pytest.mark.parametrize("d", [64, 128, 768])
def test_block_parameter_formula(d):
    block = Block(TransformerConfig(d_model=d, n_heads=4))
    assert count_parameters(block) == block_param_formula(d) == 12 * d * d + 13 * d


def test_mini_gpt_and_gpt2_small_parameter_counts():
    assert count_parameters(TransformerLM()) == lm_param_formula(79, 64, 2, 64) == 109_248
    with torch.device("meta"):  # no memory for 124 M weights needed
        gpt2 = TransformerLM(vocab_size=50257, max_len=1024, d_model=768, n_heads=12, n_layers=12)
        untied = TransformerLM(vocab_size=50257, max_len=1024, d_model=768, n_heads=12, n_layers=12,
                               tie_weights=False)
    assert count_parameters(gpt2) == lm_param_formula(50257, 768, 12, 1024) == 124_439_808
    assert count_parameters(untied) - count_parameters(gpt2) == 50257 * 768
    post = TransformerLM(norm_position="post")  # no final LayerNorm
    assert count_parameters(post) == lm_param_formula(79, 64, 2, 64, norm_position="post") == 109_248 - 128


def test_llama_like_shape_counts_on_meta_device():
    cfg = dict(vocab_size=32000, d_model=4096, n_heads=32, n_layers=32, pos="rope", tie_weights=False)
    assert lm_param_formula(32000, 4096, 32, pos="rope", tied=False) == pytest.approx(6.7e9, rel=0.01)
    with torch.device("meta"):
        llama = TransformerLM(norm="rmsnorm", ffn="swiglu", bias=False, d_ff=11008, **cfg)
    assert count_parameters(llama) == 6_738_415_616
    assert swiglu_hidden(4096, multiple_of=256) == 11008


def test_gpt2_init_scales_residual_projections():
    model = TransformerLM(d_model=128, n_layers=8, n_heads=4)
    std_out = model.blocks[0].attn.out_proj.weight.std().item()
    std_in = model.blocks[0].attn.qkv_proj.weight.std().item()
    assert std_in == pytest.approx(0.02, rel=0.05)
    assert std_out == pytest.approx(0.02 / math.sqrt(16), rel=0.1)
    assert model.lm_head.weight is model.tok_emb.weight


@pytest.mark.parametrize("kw", [dict(norm_position="post"), dict(residual=False),
                                dict(norm="rmsnorm", ffn="swiglu", bias=False, n_kv_heads=2)])
def test_block_variants_run_and_stay_causal(kw):
    model = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=2, max_len=16, **kw).eval()
    a = torch.randint(0, 30, (2, 8))
    b = a.clone()
    b[:, -1] = (b[:, -1] + 1) % 30
    assert torch.allclose(model(a).logits[:, :-1], model(b).logits[:, :-1], atol=1e-6)


# ---------------------------------------------------------------- §8 encoder, cross-attention
def test_encoder_outputs_do_not_depend_on_padding():
    pad = 0
    model = TransformerLM(vocab_size=20, d_model=32, n_heads=4, n_layers=2, causal=False, max_len=16).eval()
    real = torch.tensor([[4, 9, 3, 7]])
    outs = []
    for n_pad in (0, 3, 8):
        idx = torch.cat([real, torch.full((1, n_pad), pad)], dim=1)
        h, _ = model.hidden_states(idx, pad_mask=idx != pad)
        outs.append(h[:, :4])
    assert torch.allclose(outs[0], outs[1], atol=1e-5) and torch.allclose(outs[0], outs[2], atol=1e-5)
    # without the mask the padding leaks in
    idx = torch.cat([real, torch.full((1, 3), pad)], dim=1)
    h, _ = model.hidden_states(idx)
    assert not torch.allclose(h[:, :4], outs[0], atol=1e-4)


def test_encoder_decoder_cross_attention_shapes_and_source_padding():
    model = EncoderDecoder(12, 12, d_model=32, n_heads=4, n_layers=2, max_len=16).eval()
    src = torch.tensor([[3, 4, 5, 0, 0]])
    tgt = torch.tensor([[1, 5, 4]])
    out = model(src, tgt, src_pad_mask=src != 0, return_attn=True)
    cross = out.attentions[0]["cross"]
    assert cross.shape == (1, 4, 3, 5)
    assert (cross[..., 3:] == 0).all()  # padded source positions get no weight
    assert torch.allclose(cross.sum(-1), torch.ones(1, 4, 3))


# ---------------------------------------------------------------- §9–§10 training, KV cache
def test_residual_dropout_is_applied_once_per_sublayer():
    torch.manual_seed(0)
    block = Block(TransformerConfig(d_model=64, n_heads=4, dropout=0.5)).train()
    ffn_out = block.ffn(torch.randn(4000, 64))  # the FFN itself does not drop
    assert (ffn_out == 0).float().mean() < 0.01
    y = block._sublayer(torch.zeros(4000, 64), nn.Identity(), lambda h: torch.ones_like(h))
    assert (y == 0).float().mean().item() == pytest.approx(0.5, abs=0.02)


def test_warmup_cosine_schedule():
    lrs = [warmup_cosine(s, 1.0, 10, 110) for s in range(110)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[60] == pytest.approx(0.5, abs=1e-9)  # halfway through the cosine
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert lrs[-1] < 1e-3


def test_training_reduces_perplexity_on_a_tiny_task():
    seqs = [[1] + [3 + (i + j) % 5 for j in range(8)] + [2] for i in range(64)]
    model = TransformerLM(vocab_size=10, d_model=32, n_heads=4, n_layers=1, max_len=16)
    before = evaluate_perplexity(model, seqs, pad_id=0)
    hist = train_lm(model, seqs, pad_id=0, epochs=15, batch_size=16, warmup_steps=5, progress=False,
                    dev_seqs=seqs)
    assert hist["dev_ppl"][-1] < before / 3
    assert len(hist["loss"]) == 15 * 4 and max(hist["lr"]) == pytest.approx(3e-3)


def test_train_steps_follows_the_schedule_and_learns():
    model = nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.0)
    x = torch.randn(64, 4)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0])
    seen_lr = []

    def step_loss(step):
        seen_lr.append(opt.param_groups[0]["lr"])
        return ((model(x).squeeze(-1) - y) ** 2).mean()

    losses = train_steps(model, opt, step_loss, 200, max_lr=0.3, warmup_steps=20, grad_clip=1.0)
    assert seen_lr == [warmup_cosine(s, 0.3, 20, 200) for s in range(200)]
    assert len(losses) == 200 and losses[-1] < losses[0] / 10


def test_train_steps_records_the_gradient_norm_before_clipping():
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # 学习率 0：参数不动，每步的梯度都一样
    x = torch.randn(64, 4)
    y = 100 * x.sum(-1)  # 梯度远大于裁剪上限

    def step_loss(step):
        return ((model(x).squeeze(-1) - y) ** 2).mean()

    norms = []
    train_steps(model, opt, step_loss, 3, max_lr=0.0, warmup_steps=1, grad_clip=1.0, grad_norms=norms)
    opt.zero_grad()
    step_loss(0).backward()
    expected = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()
    assert len(norms) == 3 and norms[0] == pytest.approx(expected, rel=1e-5) and expected > 1.0


def test_kv_cache_generation_equals_uncached_generation():
    model = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=2, max_len=64).eval()
    prompt = torch.randint(0, 30, (2, 5))
    for kw in (dict(greedy=True), dict(seed=123), dict(seed=7, temperature=0.7)):
        a = generate(model, prompt, 20, use_cache=True, **kw)
        b = generate(model, prompt, 20, use_cache=False, **kw)
        assert torch.equal(a, b), kw
    model.train()
    generate(model, prompt, 2, seed=0)
    assert model.training  # generate restores the mode it found
    rope = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=2, pos="rope").eval()
    assert torch.equal(generate(rope, prompt, 15, use_cache=True, seed=1),
                       generate(rope, prompt, 15, use_cache=False, seed=1))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="没有 CUDA：只在有 GPU 的机器上运行")
def test_runs_on_cuda_when_model_is_there():
    model = TransformerLM().cuda()
    idx = torch.randint(0, 79, (2, 10), device="cuda")
    assert model(idx, idx).loss.device.type == "cuda"
    assert generate(model, idx[:, :3], 5, seed=0).device.type == "cuda"


def test_minimal_transformer_parts_count_and_causality():
    from lib.transformer import MinimalTransformer
    V, d, L = 7, 16, 2
    torch.manual_seed(0)
    model = MinimalTransformer(V, d_model=d, n_layers=L)
    # 嵌入 Vd + 每层（1 头注意力 4d²+4d，前馈 8d²+5d）+ 不共享的输出层 dV+V；没有层归一化
    assert count_parameters(model) == V * d + L * (12 * d * d + 9 * d) + d * V + V
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    idx = torch.randint(0, V, (2, 6))
    states = model.hidden_states(idx)
    assert len(states) == L + 1 and all(s.shape == (2, 6, d) for s in states)
    changed = idx.clone()
    changed[:, -1] = (idx[:, -1] + 1) % V
    with torch.no_grad():
        a, b = model(idx).logits, model(changed).logits
    assert torch.allclose(a[:, :-1], b[:, :-1], atol=1e-6) and not torch.allclose(a[:, -1], b[:, -1])
    targets = idx.clone()
    targets[0, -2:] = -100  # 填充位置被忽略
    out = model(idx, targets)
    assert out.loss is not None and torch.isfinite(out.loss)


def test_apply_rope_adjacent_pairing_matches_complex_rotation():
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    pos = torch.tensor([0, 1, 7, 30, 100])
    theta = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)  # (4,)
    z = torch.view_as_complex(x.reshape(3, 5, 4, 2).contiguous())  # 相邻两维 (x_2i, x_2i+1) = x_2i + i·x_2i+1
    expected = torch.view_as_real(z * torch.polar(torch.ones(5, 4, dtype=torch.float64), pos[:, None] * theta))
    got = apply_rope(x.float(), pos, pairing="adjacent")
    assert torch.allclose(got.double(), expected.reshape(3, 5, 8), atol=1e-5)
    assert torch.equal(apply_rope(x.float(), pos), apply_rope(x.float(), pos, pairing="half"))  # 默认不变
    assert not torch.allclose(got, apply_rope(x.float(), pos), atol=1e-3)  # 两种配对确实不同
    with pytest.raises(ValueError, match="pairing"):
        apply_rope(x.float(), pos, pairing="interleaved")
