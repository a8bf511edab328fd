"""lib/demos_blocks.py 的测试：第 5–7 节 notebook 里每个演示的结论都在这里断言一遍。"""
import math

import pytest
import torch

from lib.demos_blocks import (
    LECTURE_ROPE_PAIRS,
    RetrievalNet,
    block_param_table,
    collapse_score,
    compare_with_torch_mha,
    depth_config,
    ffn_grad_norms_at_init,
    gpt2_small_breakdown,
    head_offset_weights,
    layer_norm_demo,
    learned_overflow_message,
    multihead_shape_walkthrough,
    offset_batch,
    retrieval_batch,
    retrieval_table_rows,
    rope_vs_sinusoidal,
    shift_matrix_errors,
    sinusoidal_dot_products,
    train_depth_variant,
    train_retrieval,
)
from lib.transformer import TransformerLM, count_parameters, sinusoidal_positions, sinusoidal_shift_matrix

LECTURE_DOTS = [32.0, 30.9, 28.3, 23.9, 22.4, 19.4, 19.6, 13.9]


# ---------------------------------------------------------------- §5


def test_sinusoidal_dot_products_match_lecture_for_every_start():
    dots = sinusoidal_dot_products(d=64)
    assert set(dots) == {0, 20, 100}
    for p, values in dots.items():
        assert [round(v, 1) for v in values] == LECTURE_DOTS, p
    # 和理论值 Σ_i cos(k ω_i) 一致
    omega = 10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    for k, v in zip((0, 1, 2, 4, 8, 16, 32, 64), dots[20]):
        assert v == pytest.approx(float(torch.cos(k * omega).sum()), abs=1e-4)


def test_shift_matrix_maps_every_position_and_a_wrong_shift_fails():
    errors = shift_matrix_errors(d=16, shifts=(1, 3, 10))
    assert max(errors.values()) < 1e-5
    pe = sinusoidal_positions(50, 16)
    wrong = (pe[:40] @ sinusoidal_shift_matrix(1, 16).T - pe[2:42]).abs().max()
    assert wrong > 0.1  # M_1 不会把 PE_p 变成 PE_{p+2}：这个检查是能失败的


def test_rope_scores_depend_only_on_distance_and_sinusoidal_do_not():
    r = rope_vs_sinusoidal(LECTURE_ROPE_PAIRS, d=8, seed=0)
    by_dist = {}
    for m, n, dist, rope, sin in r["rows"]:
        assert dist == m - n
        by_dist.setdefault(dist, []).append((rope, sin))
    for dist, vals in by_dist.items():
        ropes = [v[0] for v in vals]
        assert max(ropes) - min(ropes) < 1e-5, dist
    sins3 = [v[1] for v in by_dist[3]]
    assert max(sins3) - min(sins3) > 0.5  # 加正弦编码：随绝对位置变
    assert abs(by_dist[3][0][0] - by_dist[-3][0][0]) > 0.1  # m−n = 3 和 −3 不同
    assert all(abs(n - r["q_norm"]) < 1e-5 for n in r["norms"])


def test_rope_claims_hold_for_other_seeds_and_dims():
    for seed, d in ((1, 4), (2, 16), (3, 64)):
        r = rope_vs_sinusoidal(((7, 3), (40, 36), (3, 3), (90, 90)), d=d, seed=seed)
        rows = r["rows"]
        assert abs(rows[0][3] - rows[1][3]) < 1e-4 and abs(rows[2][3] - rows[3][3]) < 1e-4


def test_learned_table_overflow_message_is_chinese_and_clear():
    msg = learned_overflow_message(max_len=16, d=8, seq_len=20)
    assert "超出" in msg and "16" in msg and "19" in msg
    with pytest.raises(ValueError, match="没有超过表长"):
        learned_overflow_message(max_len=16, seq_len=16)


# ---------------------------------------------------------------- §6


def test_multihead_walkthrough_shapes_and_equality():
    rows, diff = multihead_shape_walkthrough(B=2, T=5, d=12, h=3)
    shapes = [r[2] for r in rows]
    assert shapes == [(2, 5, 12), (2, 5, 36), (2, 5, 12), (2, 5, 3, 4), (2, 3, 5, 4), (2, 3, 5, 5),
                      (2, 3, 5, 5), (2, 3, 5, 4), (2, 5, 3, 4), (2, 5, 12), (2, 5, 12)]
    assert diff < 1e-6
    with pytest.raises(ValueError, match="整除"):
        multihead_shape_walkthrough(d=10, h=3)


@pytest.mark.parametrize("causal", [False, True])
def test_equal_to_torch_multihead_attention(causal):
    diffs = compare_with_torch_mha(d=16, h=4, causal=causal, seed=3)
    assert diffs["out"] < 1e-5 and diffs["weights"] < 1e-5


def test_retrieval_net_has_3678_parameters_for_every_head_count():
    for h in (1, 2, 3, 6):
        assert count_parameters(RetrievalNet(h)) == 3678
    with pytest.raises(ValueError, match="整除"):
        RetrievalNet(5)
    with pytest.raises(ValueError, match="最大偏移"):
        RetrievalNet(3, seq_len=4)


def test_retrieval_batch_targets_are_the_past_tokens():
    x, y = retrieval_batch(torch.Generator().manual_seed(0), 8)
    assert x.shape == (8, 12) and y.shape == (8, 12, 3)
    assert torch.equal(y[:, 5, 0], x[:, 4]) and torch.equal(y[:, 5, 1], x[:, 3]) and torch.equal(y[:, 5, 2], x[:, 1])
    assert (y[:, :4, 2] == -100).all() and (y[:, 0, 0] == -100).all()


def test_retrieval_three_heads_solve_it_one_head_cannot():
    model3, acc3 = train_retrieval(3, seed=0)
    assert min(acc3) > 0.99
    per_offset, mean_map = head_offset_weights(model3)
    assert per_offset.shape == (3, 3) and mean_map.shape == (3, 12, 12)
    # 每个偏移都有一个头几乎把全部权重放在它上面
    assert sorted(per_offset.argmax(dim=1).tolist()) == [0, 1, 2]
    assert (per_offset.max(dim=1).values > 0.9).all()
    _, acc1 = train_retrieval(1, seed=0)
    assert min(acc1) < 0.3  # 一个头：总有目标接近瞎猜
    rows = retrieval_table_rows({1: {"params": 3678, "acc": [acc1]}, 3: {"params": 3678, "acc": [acc3]}})
    assert rows[1][-1] == "100.0%" and rows[0][1] == "3,678"


# ---------------------------------------------------------------- §7


def test_layer_norm_by_hand_equals_nn_layernorm_and_lecture():
    mine, ref = layer_norm_demo()
    assert torch.allclose(mine, ref, atol=1e-6)
    for row in mine:
        assert [round(v, 3) for v in row.tolist()] == [-1.342, -0.447, 0.447, 1.342]


def test_block_params_formula_and_gpt2_small():
    for d, _, formula, counted in block_param_table((64, 128, 768)):
        assert formula == counted == 12 * d * d + 13 * d
    b = gpt2_small_breakdown()
    assert b.total == 124_439_808 == sum(b.parts.values())
    assert round(100 * b.parts["token embedding (tied with output)"] / b.total, 1) == 31.0
    assert round(100 * b.parts["12 blocks"] / b.total, 1) == 68.3


def test_collapse_at_init_without_residual():
    x, _ = offset_batch(torch.Generator().manual_seed(0), 64)
    scores = {}
    for variant in ("Pre-LN", "Post-LN", "Pre-LN, no residual"):
        torch.manual_seed(0)
        scores[variant] = collapse_score(TransformerLM(depth_config(variant)), x)
    assert scores["Pre-LN, no residual"] > 0.99
    assert scores["Pre-LN"] < 0.5 and scores["Post-LN"] < 0.5
    with pytest.raises(ValueError, match="未知的变体"):
        depth_config("Sandwich-LN")


def test_depth_training_short():
    # 短一点的版本（2 层）：有残差时学得会，没有残差的 8 层学不动
    ok = train_depth_variant("Pre-LN", steps=150, n_layers=2)
    assert ok["last50"] < 0.5 * ok["first50"] and ok["accuracy"] > 0.9
    stuck = train_depth_variant("Pre-LN, no residual", steps=60)
    assert abs(stuck["last50"] - math.log(10)) < 0.1 and stuck["accuracy"] < 0.2


def test_gradient_norms_post_ln_grow_toward_output_with_xavier_init():
    pre = ffn_grad_norms_at_init("pre", "xavier")
    post = ffn_grad_norms_at_init("post", "xavier")
    assert len(pre) == len(post) == 8
    assert post[-1] / post[0] > 1.2 and pre[-1] / pre[0] < 1.0 and post[-1] > pre[-1]
    with pytest.raises(ValueError):
        ffn_grad_norms_at_init("middle")
    with pytest.raises(ValueError):
        ffn_grad_norms_at_init("pre", init="kaiming")
