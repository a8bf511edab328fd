"""lib/demos_attention.py：第 1–4 节 notebook 的演示函数，每条讲义结论一个测试。"""
import math

import pytest
import torch

from lib import demos_attention as da
from lib.transformer import count_parameters


def test_rnn_gradient_vanishes_but_attention_gradient_does_not():
    lengths = [2, 8, 32, 64]
    rnn = da.rnn_gradient_to_first(lengths)
    focus = da.attention_gradient_to_first(lengths)
    assert all(a > b for a, b in zip(rnn, rnn[1:])), rnn  # 每长一段都更小
    assert rnn[-1] / rnn[0] < 1e-10
    assert max(focus) / min(focus) < 1.05  # 只隔一步：和距离无关
    uniform = da.attention_gradient_to_first(lengths, focus=False)
    assert uniform[-1] < uniform[0]  # 权重被 n 个词平分 ...
    assert uniform[-1] * lengths[-1] > 0.2 * uniform[0] * lengths[0]  # ... 但只按 1/n 变小，不是指数


def test_timing_returns_positive_times_for_each_length():
    t = da.time_rnn_vs_attention([4, 16], repeats=2)
    assert set(t) == {"rnn", "attention"}
    assert all(len(v) == 2 and all(x > 0 for x in v) for v in t.values())


def test_soft_lookup_matches_lecture_table_unscaled():
    weights, out = da.soft_lookup()
    lecture_w = torch.tensor([[0.953, 0.000, 0.047], [0.474, 0.174, 0.351], [0.31, 0.31, 0.379]])
    assert torch.allclose(weights, lecture_w, atol=5e-3)
    assert torch.allclose(out, torch.tensor([10.95, 18.77, 20.69]), atol=5e-3)
    # 讲义用的是不除以 √2 的点积：除以 √2 之后第一行就不是 0.953 了
    w_scaled, _ = da.soft_lookup(scaled=True)
    assert abs(float(w_scaled[0, 0]) - 0.953) > 0.05
    assert torch.allclose(weights.sum(-1), torch.ones(3))


def test_cat_sat_down_shapes_and_loop_equals_matrix():
    r = da.cat_sat_down()
    assert r["q"].shape == (4, 3) and r["scores"].shape == (4, 4) and r["out"].shape == (4, 3)
    assert torch.allclose(r["out"], r["out_loop"], atol=1e-6)
    assert torch.allclose(r["weights"], torch.softmax(r["scores"], -1))
    assert torch.allclose(r["weights"].sum(-1), torch.ones(4))


def test_raw_dot_scores_symmetric_and_self_attention_dominates():
    x = da.cat_sat_down()["x"]
    scores, weights = da.raw_dot_attention(x)
    assert torch.equal(scores, scores.T)
    assert da.self_is_row_max_rate(d=64) == 1.0
    assert da.self_is_row_max_rate(d=4) > 0.7
    assert da.self_is_row_max_rate(d=4, projections=True) < 0.5


def test_softmax_jacobian_matches_autograd():
    e = torch.randn(6, dtype=torch.float64)
    auto = torch.autograd.functional.jacobian(lambda z: torch.softmax(z, -1), e)
    assert torch.allclose(da.softmax_jacobian(torch.softmax(e, -1)), auto)


def test_scaling_table_within_tolerance_of_lecture():
    for row in da.scaling_experiment():
        std, mx, g, smx, sg = da.LECTURE_SCALING_TABLE[row["d_k"]]
        assert abs(row["score_std"] / std - 1) < 0.02, row
        assert abs(row["score_std"] / math.sqrt(row["d_k"]) - 1) < 0.03, row  # Var(q·k) = d_k
        for ours, lecture in ((row["max_weight"], mx), (row["grad_norm"], g),
                              (row["scaled_max_weight"], smx), (row["scaled_grad_norm"], sg)):
            assert abs(ours - lecture) <= 0.02, (row, lecture)


def test_word_order_equivariance_and_positions_break_it():
    r = da.word_order_demo()
    for w, (a, b) in r["without"].items():
        assert torch.allclose(a, b, atol=1e-6), w
    assert all(not torch.allclose(a, b, atol=1e-3) for w, (a, b) in r["with_pos"].items() if w != "bites")


def test_causal_mask_zero_upper_triangle_and_future_change_invisible():
    r = da.causal_mask_demo()
    upper = ~r["mask"]
    assert upper.sum() == 6 and bool((r["weights"][upper] == 0).all())
    assert torch.equal(r["out"][:-1], r["out_changed"][:-1])
    assert not torch.allclose(r["out"][-1], r["out_changed"][-1])


def test_stacked_attention_is_weighted_average():
    r = da.stacked_attention_without_ffn()
    assert torch.allclose(r["out"], r["a_total"] @ r["v_total"], atol=1e-5)
    assert bool((r["a_total"] >= 0).all())
    assert torch.allclose(r["a_total"].sum(-1), torch.ones(r["a_total"].size(0)))


def test_minimal_transformer_is_causal_and_outputs_probabilities():
    torch.manual_seed(0)
    model = da.MinimalTransformer(vocab_size=10)
    idx = torch.tensor([[1, 2, 3, 4]])
    p = model.next_token_probs(idx)
    assert p.shape == (1, 4, 10)
    assert torch.allclose(p.sum(-1), torch.ones(1, 4))
    p2 = model.next_token_probs(torch.tensor([[1, 2, 3, 9]]))
    assert torch.allclose(p[:, :3], p2[:, :3], atol=1e-7)
    out = model(idx[:, :-1], targets=idx[:, 1:])
    assert out.logits.shape == (1, 3, 10) and out.loss.item() > 0
    norms = model.hidden_norms(idx)  # 没有残差和层归一化：信号逐层缩小
    assert len(norms) == 3 and norms[-1] < norms[0]
    # 词嵌入 Vd + 每层（注意力 4d²+4d，前馈 8d²+5d）+ 输出层 dV+V：没有层归一化，输出层不共享
    V, d = 10, 16
    assert count_parameters(model) == V * d + 2 * (12 * d * d + 9 * d) + d * V + V


@pytest.mark.parametrize("d", [4, 8])
def test_word_order_demo_other_sizes(d):
    r = da.word_order_demo(d=d, seed=1)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in r["without"].values())
