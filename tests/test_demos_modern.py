"""lib/demos_modern.py：第 12 节（今天的 Transformer）的演示函数。"""
import math

import pytest
import torch

from lib import demos_modern as dm
from lib.transformer import TransformerConfig, TransformerLM, count_parameters, swiglu_hidden


def test_layernorm_and_rmsnorm_outputs_and_params():
    r = dm.compare_norms(torch.tensor([2.0, 4.0, 6.0, 8.0]))
    assert torch.allclose(r["layernorm"], torch.tensor([-1.342, -0.447, 0.447, 1.342]), atol=1e-3)
    assert torch.allclose(r["rmsnorm"], torch.tensor([2.0, 4.0, 6.0, 8.0]) / math.sqrt(30.0), atol=1e-5)
    assert (r["layernorm_params"], r["rmsnorm_params"]) == (8, 4)
    # 均值为 0 的输入：两者只差 eps
    z = dm.compare_norms(torch.tensor([-3.0, -1.0, 1.0, 3.0]))
    assert torch.allclose(z["layernorm"], z["rmsnorm"], atol=1e-5)


def test_swiglu_width_and_params_close_to_gelu():
    assert swiglu_hidden(4096, multiple_of=256) == dm.LLAMA_7B_D_FF == 11008
    gelu = dm.ffn_params(64, "gelu", bias=True)
    swiglu = dm.ffn_params(64, "swiglu", bias=False)
    assert gelu == {"d_ff": 256, "params": 8 * 64 * 64 + 5 * 64}
    assert swiglu == {"d_ff": 176, "params": 3 * 64 * 176}
    assert abs(swiglu["params"] / gelu["params"] - 1) < 0.03


@pytest.mark.parametrize("n_kv_heads", [8, 4, 2, 1])
def test_measured_kv_cache_matches_formula(n_kv_heads):
    cfg = TransformerConfig(d_model=64, n_heads=8, n_kv_heads=n_kv_heads, pos="rope")
    assert dm.measured_kv_cache_per_token(cfg) == dm.kv_cache_elements_per_token(2, n_kv_heads, 8)


def test_llama_7b_count_on_meta_device_is_exact():
    assert dm.count_parameters_meta(dm.llama_like_config()) == dm.LLAMA_7B_PARAMS == 6_738_415_616
    assert dm.llama_param_formula(32000, 4096, 32, 11008) == dm.LLAMA_7B_PARAMS
    parts = dm.llama_breakdown(dm.llama_like_config())
    assert sum(parts.values()) == dm.LLAMA_7B_PARAMS
    assert parts["norm"] == 65 * 4096  # 每块 2 个 RMSNorm + 最后 1 个，只有 γ


def test_exercise6_estimate_is_about_6_7_billion_and_matches_meta_model():
    est = dm.exercise6_estimate()
    assert est == 6_706_307_072 and round(est / 1e9, 1) == 6.7
    assert dm.count_parameters_meta(dm.gpt_style_config()) == est


@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_llama_formula_matches_small_real_model(n_kv_heads):
    cfg = TransformerConfig(vocab_size=79, d_model=64, n_heads=4, n_layers=2, d_ff=176, norm="rmsnorm",
                            ffn="swiglu", bias=False, pos="rope", tie_weights=False, n_kv_heads=n_kv_heads)
    real = count_parameters(TransformerLM(cfg))
    assert real == dm.llama_param_formula(79, 64, 2, 176, n_kv_heads=n_kv_heads, n_heads=4)
    assert real == dm.count_parameters_meta(cfg)


def test_rope_scores_depend_only_on_relative_position():
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(16, generator=gen), torch.randn(16, generator=gen)
    s = dm.rope_scores(q, k, [(5, 2), (10, 7), (100, 97), (2, 5)])
    assert max(s[:3]) - min(s[:3]) < 1e-4
    assert abs(s[0] - s[3]) > 1e-3


def test_head_to_head_configs_have_matched_budget():
    cfgs = dm.head_to_head_configs()
    old, new = (dm.count_parameters_meta(c) for c in cfgs.values())
    assert old == 109_248
    assert abs(new - old) / old < 0.005
    c = cfgs["RMSNorm + SwiGLU"]
    assert (c.norm, c.ffn, c.bias) == ("rmsnorm", "swiglu", False)


def test_head_to_head_tiny_run_and_summary():
    r = dm.head_to_head(n_train=128, epochs=1, seeds=(0, 1), progress=False)
    assert set(r) == {"LayerNorm + GELU", "RMSNorm + SwiGLU"}
    for res in r.values():
        assert len(res["test_ppl"]) == 2 and all(1 < p < 79 for p in res["test_ppl"])
    s = dm.summarize_head_to_head(r)
    names = list(r)
    assert s["difference"] == pytest.approx(s[names[1]]["mean"] - s[names[0]]["mean"])
    assert s["max_seed_spread"] >= 0
