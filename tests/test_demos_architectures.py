"""lib/demos_architectures.py（第 8–10 节 notebook 的演示函数）的单元测试。都很小：整个文件几秒钟。"""
import math

import pytest
import torch
import torch.nn.functional as F

from lib import demos_architectures as D
from lib.transformer import warmup_cosine

torch.set_num_threads(1)


# ---------------------------------------------------------------- §8 编码器 / 解码器


def test_encoder_padding_outputs_do_not_depend_on_padding():
    res = D.encoder_padding_demo(pad_counts=(0, 2, 7), seed=1)
    assert res["diff_with_mask"][0] == 0.0
    for k in (2, 7):
        assert res["diff_with_mask"][k] < 1e-5
        assert res["diff_without_mask"][k] > 1e-2  # 不传 pad_mask 时输出确实会变：检查本身能失败


def test_encoder_padding_rejects_bad_counts():
    with pytest.raises(ValueError):
        D.encoder_padding_demo(pad_counts=(0, -1))


def test_padded_batch_matches_sentences_alone():
    r = D.padded_batch_demo(n_sentences=5, seed=2)
    assert len(set(r["lengths"])) > 1 and r["batch_shape"] == (5, max(r["lengths"]))
    assert r["max_diff_with_mask"] < 1e-5
    assert r["max_diff_without_mask"] > 1e-2


def test_attention_patterns_masks():
    pat = D.attention_patterns(n_pad=2, seed=0)
    T = len(pat["labels"])
    assert pat["labels"][-2:] == ["<pad>", "<pad>"]
    assert pat["encoder"].shape == pat["decoder"].shape == (T, T)
    assert (pat["encoder"][:, -2:] == 0).all()
    assert (pat["encoder"][:, :-2] > 0).all()
    lower = torch.ones(T, T, dtype=torch.bool).tril()
    assert (pat["decoder"][~lower] == 0).all() and (pat["decoder"][lower] > 0).all()
    assert torch.allclose(pat["decoder"].sum(-1), torch.ones(T))


def test_causality_demo():
    ch = D.causality_demo(seed=3)
    assert ch["decoder_max_change"] < 1e-6
    assert ch["encoder_min_change"] > 1e-3


# ---------------------------------------------------------------- §8.3 编码器—解码器


def test_reverse_batch_layout():
    src, tgt_in, tgt_out = D.reverse_batch(50, torch.Generator().manual_seed(0), min_len=2, max_len=5)
    assert src.shape[0] == tgt_in.shape[0] == tgt_out.shape[0] == 50
    assert tgt_in.shape[1] == tgt_out.shape[1] == src.shape[1] + 1
    for i in range(50):
        L = int((src[i] != D.REVERSE_PAD).sum())
        assert 2 <= L <= 5 and (src[i, L:] == D.REVERSE_PAD).all()
        digits = src[i, :L]
        assert tgt_in[i, 0] == D.REVERSE_BOS and torch.equal(tgt_in[i, 1 : L + 1], digits.flip(0))
        assert torch.equal(tgt_out[i, :L], digits.flip(0)) and tgt_out[i, L] == D.REVERSE_EOS
        assert (tgt_out[i, L + 1 :] == -100).all()
    with pytest.raises(ValueError):
        D.reverse_batch(3, torch.Generator(), min_len=5, max_len=4)


def test_greedy_decode_agrees_with_teacher_forcing():
    torch.manual_seed(0)
    model = D.EncoderDecoder(D.REVERSE_VOCAB, D.REVERSE_VOCAB, **D.REVERSE_MODEL).eval()
    src, _, _ = D.reverse_batch(8, torch.Generator().manual_seed(1))
    pred = D.greedy_decode(model, src)  # (B, S+1)
    assert pred.shape == (8, src.size(1) + 1)
    tgt_in = torch.cat([torch.full((8, 1), D.REVERSE_BOS), pred[:, :-1]], dim=1)
    with torch.no_grad():
        logits = model(tgt_in=tgt_in, src=src, src_pad_mask=src != D.REVERSE_PAD).logits
    assert torch.equal(logits.argmax(-1), pred)  # 一次前向的 argmax = 逐步贪心的结果（因果性）


def test_train_reverser_learns_something_quickly():
    model, losses = D.train_reverser(steps=40, seed=0)
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < losses[0] - 0.3


def test_cross_attention_maps_and_untrained_score():
    torch.manual_seed(0)
    model = D.EncoderDecoder(D.REVERSE_VOCAB, D.REVERSE_VOCAB, **D.REVERSE_MODEL).eval()
    cross = D.cross_attention_maps(model, [1, 2, 3, 4])
    assert len(cross["maps"]) == D.REVERSE_MODEL["n_layers"]
    assert all(m.shape == (5, 4) for m in cross["maps"])
    assert torch.allclose(cross["maps"][0].sum(-1), torch.ones(5))
    assert cross["row_labels"] == ["<bos>", "4", "3", "2", "1"]
    score = D.anti_diagonal_score(model, n=50)
    assert score["argmax_hit"] < 0.5 and score["mean_weight"] < 0.35  # 没训练时没有反对角线
    with pytest.raises(ValueError):
        D.cross_attention_maps(model, [1, 12])


def test_tying_counts_gpt2_small_on_meta():
    c = D.tying_param_counts()
    assert c["tied"] == c["formula_tied"] == 124_439_808
    assert c["untied"] == c["formula_untied"]
    assert c["saved"] == 50257 * 768 == 38_597_376
    assert c["shares_storage"]
    mini = D.tying_param_counts(79, 64, 2, 4, 64, device="cpu")
    assert mini["tied"] == 109_248 and mini["saved"] == 79 * 64


# ---------------------------------------------------------------- §9 训练细节


def test_lr_schedule_matches_warmup_cosine():
    lrs = D.lr_schedule(1e-3, 10, 50)
    assert lrs == [warmup_cosine(s, 1e-3, 10, 50) for s in range(50)]
    assert lrs[9] == max(lrs) == 1e-3
    with pytest.raises(ValueError):
        D.lr_schedule(1e-3, 10, 0)


def test_adam_first_step_moves_every_parameter_by_lr():
    r = D.adam_first_step(lr=3e-3)
    assert abs(r["step_abs_median"] - 3e-3) < 3e-5
    assert r["frac_step_near_lr"] > 0.95
    assert r["grad_abs_median"] < 0.1


def test_warmup_experiment_structure_small():
    r = D.warmup_experiment(seeds=(0,), warmups=(0, 5), n_dev=20, n_layers=1, n_train=128, epochs=1,
                            batch_size=32)
    assert set(r) == {0, 5}
    assert len(r[5]["losses"][0]) == len(r[5]["lr"]) == 4
    assert r[0]["lr"][0] == pytest.approx(1e-2)  # 不预热：第 0 步就是最大学习率
    assert r[5]["lr"][0] == pytest.approx(1e-2 / 5)  # 预热：从 max_lr / warmup 开始
    assert all(math.isfinite(p) for p in r[0]["dev_ppl"] + r[5]["dev_ppl"])


def test_smoothed_cross_entropy_formula():
    torch.manual_seed(0)
    logits, targets = torch.randn(6, 7), torch.tensor([0, 1, 2, 3, -100, 6])
    assert torch.allclose(D.smoothed_cross_entropy(0.0)(logits, targets),
                          F.cross_entropy(logits, targets, ignore_index=-100))
    eps, keep = 0.2, targets != -100
    logp = torch.log_softmax(logits[keep], -1)
    manual = (1 - eps) * F.nll_loss(logp, targets[keep]) + eps * (-logp.mean(-1)).mean()
    assert torch.allclose(D.smoothed_cross_entropy(eps)(logits, targets), manual)


def test_confidence_stats_of_uniform_model():
    model = D.demo_model(0)
    with torch.no_grad():
        model.tok_emb.weight.zero_()  # 输出层和它共享：所有打分都是 0，预测是均匀分布
    seqs = [[1, 5, 6, 2], [1, 7, 2]]
    s = D.confidence_stats(model, seqs)
    assert s["mean_max_prob"] == pytest.approx(1 / 79, rel=1e-5)
    assert s["mean_entropy"] == pytest.approx(math.log(79), rel=1e-5)


def test_label_smoothing_experiment_small():
    r = D.label_smoothing_experiment(epsilons=(0.0, 0.3), n_train=256, n_test=64, steps=30)
    assert set(r) == {0.0, 0.3}
    for v in r.values():
        assert 1 < v["test_ppl"] < 79 and 0 < v["mean_max_prob"] < 1
    assert r[0.3]["mean_entropy"] > r[0.0]["mean_entropy"]  # ε 很大时，即使只训练 30 步也更不自信


def test_set_residual_init_std():
    model = D.demo_model(0, n_layers=8, d_model=64)
    for scaled, std in ((True, 0.02 / 4), (False, 0.02)):
        D.set_residual_init(model, scaled)
        w = torch.cat([model.blocks[i].ffn.fc_out.weight.flatten() for i in range(8)])
        assert w.std().item() == pytest.approx(std, rel=0.05)
        assert model.blocks[0].attn.qkv_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_residual_std_profile_grows_without_scaling():
    scaled = D.residual_std_profile(n_layers=8, d_model=64, scaled=True, n_sentences=8)
    plain = D.residual_std_profile(n_layers=8, d_model=64, scaled=False, n_sentences=8)
    assert len(scaled) == len(plain) == 9
    assert scaled[0] == plain[0]  # 嵌入之后还没有经过任何块
    assert plain[-1] > 2 * scaled[-1]


def test_grad_clipping_trace():
    r = D.grad_clipping_trace(steps=5, max_norm=0.5)
    assert len(r["before"]) == len(r["after"]) == 5
    assert max(r["after"]) <= 0.5 * (1 + 1e-4) < max(r["before"])
    assert r["min_cosine"] > 0.9999


# ---------------------------------------------------------------- §10 计算量与 KV 缓存


def test_compute_share_table_matches_lecture():
    lecture = ["2.7%", "10.0%", "18.2%", "47.1%", "78.0%", "93.4%"]
    assert [f"{row[3]:.1%}" for row in D.compute_share_table(768)] == lecture
    assert D.crossover_length(768) == 4608 and D.attention_share(4608, 768) == 0.5
    assert f"{D.attention_share(131072, 4096):.0%}" == "84%"  # 练习 7
    for n in (1, 100, 10_000):
        assert D.attention_share(n, 64) == pytest.approx(n / (n + 6 * 64))
    with pytest.raises(ValueError):
        D.attention_share(0, 768)


def test_time_layer_parts_runs():
    t = D.time_layer_parts(32, d=32, n_heads=2, repeats=1)
    assert t["linear"] > 0 and t["attention"] > 0


def test_attention_weight_bytes():
    assert D.attention_weight_bytes(1024) == 4 * 2**20
    assert D.attention_weight_bytes(10, n_heads=3, n_layers=2, batch_size=5) == 100 * 3 * 2 * 5 * 4
    assert D.attention_weight_bytes(10, dtype=torch.float16) == 200
    assert D.measured_attention_weight_bytes(20) == D.attention_weight_bytes(20, n_heads=4, n_layers=2)
    with pytest.raises(ValueError):
        D.attention_weight_bytes(0)


@pytest.mark.parametrize("n,m", [(1, 1), (5, 1), (7, 9), (12, 4)])
def test_kv_cache_position_counts_match_generate(n, m):
    model = D.demo_model(0)
    f = D.kv_cache_position_counts(n, m)
    assert f["without_cache"] == sum(n + i - 1 for i in range(1, m + 1))
    assert D.count_generate_positions(model, n, m, use_cache=False) == f["without_cache"]
    assert D.count_generate_positions(model, n, m, use_cache=True) == n + m - 1 == f["with_cache"] - 1


def test_generation_speed_same_tokens():
    r = D.generation_speed(prompt_len=4, new_tokens=12, d_model=32, n_layers=1)
    assert r["same_tokens"] and r["tokens"].shape == (1, 16)
    assert r["time_cached"] > 0 and r["time_uncached"] > 0
