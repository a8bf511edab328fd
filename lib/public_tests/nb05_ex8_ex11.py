"""notebook 05（05_masks_and_kv_cache.ipynb）= 练习 8（填充掩码）和练习 11（KV 缓存的计数和生成）：公开测试。

torch 只在测试函数里导入：评分进程导入 MISTAKES 时不导入 torch。
"""
from __future__ import annotations

import numpy as np

from lib.answer_format import CheckFailed, array, call, integer, torch_bool_mask
from lib.public_tests import expect, need

# 典型错误：公开测试和评分说明（lib/grading/exercises/nb05_ex8_ex11.py 的检查一段）用同一句话
MISTAKES = {
    "pad_rows": "这个掩码挡住的是行（查询），应该挡列（键）",
    "prompt_once": "用了缓存，提示只送进模型一次，之后每一步只送进最新的一个词",
}


def test_pad_mask(namespace):
    import torch

    from lib.transformer import Block, TransformerConfig

    fn = need(namespace, "key_padding_mask")
    pad = torch.tensor([[True, True, True, True], [True, True, False, False]])
    mask = torch_bool_mask(call(fn, pad.clone()), "key_padding_mask(pad)", ndim=4)
    rows = pad[:, None, :, None].expand(2, 1, 4, 4)
    try:
        expect(not torch.equal(mask.expand(2, 1, 4, 4), rows), f"{MISTAKES['pad_rows']}。")
    except RuntimeError:  # 形状不能广播：下面放进模型时会说明
        pass
    torch.manual_seed(0)
    block = Block(TransformerConfig(d_model=8, n_heads=2, causal=False)).eval()
    x = torch.randn(2, 4, 8)
    x[1, 2:] = 100.0  # 第 2 句的两个填充位置：很大的垃圾值
    try:
        with torch.no_grad():
            padded, _ = block(x, mask=mask, need_weights=True)
            alone, _ = block(x[1:, :2], need_weights=True)  # 第 2 句单独、不填充
    except RuntimeError as err:
        raise CheckFailed(f"把你的掩码（形状 {tuple(mask.shape)}）放进注意力时出错了：它要能广播到 (B, h, T, T) = "
                          f"(2, 2, 4, 4)。{type(err).__name__}: {err}") from err
    expect(torch.allclose(padded[1, :2], alone[0], atol=1e-5),
           "第 2 句真实词的输出和不填充时不同：它们还在关注填充位置。掩码挡住的是行还是列？")


def test_counts(namespace):
    without, with_cache = need(namespace, "positions_without_cache"), need(namespace, "positions_with_cache")
    a = integer(call(without, 1, 3), "positions_without_cache(1, 3)")
    expect(a == 1 + 2 + 3, f"n = 1、m = 3：三次生成分别送进 1、2、3 个位置，共 6 个，得到 {a}")
    b = integer(call(with_cache, 5, 1), "positions_with_cache(5, 1)")
    expect(b in (5, 5 + 1), f"positions_with_cache(5, 1) 得到 {b}：只生成 1 个词时，把 5 个位置的提示送进模型一次就得到了这个词，"
                            "是 5；按讲义把这个新词也送进模型（算出它的 K、V），是 6。两种都算对")
    b2 = integer(call(with_cache, 5, 2), "positions_with_cache(5, 2)")
    expect(b2 - b == 1, f"positions_with_cache 从 m = 1 到 m = 2 得到 {b} → {b2}：{MISTAKES['prompt_once']}，"
                        "每多生成一个词只多处理 1 个位置")
    expect(b2 < integer(call(without, 5, 2), "positions_without_cache(5, 2)"), "用了缓存之后应该算得更少")


def test_cached_generation(namespace):
    import torch

    from lib.transformer import TransformerLM, generate

    fn = need(namespace, "generate_cached")
    torch.manual_seed(0)
    lm = TransformerLM(vocab_size=11, d_model=16, n_heads=2, n_layers=2, max_len=32).eval()
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    calls = []  # 每次调用模型：(送进去几个位置, 有没有传 kv_cache)
    hook = lm.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(((args[0] if args else kwargs["idx"]).shape[1],
                                                   kwargs.get("kv_cache") is not None or len(args) > 4)),
        with_kwargs=True)
    try:
        with torch.no_grad():
            ours = call(fn, lm, prompt.clone(), 6, what="generate_cached(model, prompt, 6)")
    finally:
        hook.remove()
    reference = generate(lm, prompt, 6, use_cache=False, greedy=True)
    ours = array(ours, "generate_cached(model, prompt, 6)", (2, 9))
    expect(np.array_equal(ours, reference.numpy()),
           f"和不用缓存的贪心生成不同：你的 {ours.astype(int).tolist()}，参考 {reference.tolist()}")
    expect(calls and all(cached for _, cached in calls), "每次调用模型都要传 kv_cache=cache（同一个缓存）")
    total = sum(t for t, _ in calls)
    expect(total <= 3 + 6, f"模型一共处理了 {total} 个位置：提示只送一次，之后每步只送入最新的一个词"
                           "（应不超过 n + m = 9 个；参考答案只用 n + m − 1 = 8 个）")


TESTS = {"ex8_pad_mask": test_pad_mask, "ex11_counts": test_counts, "ex11_cached_generation": test_cached_generation}
