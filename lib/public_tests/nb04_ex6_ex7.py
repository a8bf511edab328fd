"""notebook 04（04_blocks_and_cost.ipynb）= 练习 6（参数量）和练习 7（计算量）：公开测试。

讲义的两个问题（crossover_4096、share_128k）不和参考值比较：检查格式，以及和你自己的函数是否一致。
"""
from __future__ import annotations

from lib.answer_format import CheckFailed, call, close, integer, number
from lib.public_tests import expect, need

# 典型错误：公开测试和评分说明（lib/grading/exercises/nb04_ex6_ex7.py 的检查一段）用同一句话
MISTAKES = {
    "crossover_is_d": "不是 d：线性部分有 12 个 d×d 的乘加（每个位置），注意力矩阵部分是 2nd",
    "ratio_not_share": "这是比值 n/6d，不是占比",
    "percent": "占比是 0 到 1 之间的小数",
}


def test_param_count(namespace):
    fn = need(namespace, "count_params")
    n = integer(call(fn, 50257, 768, 12, 1024, True, "learned"), "count_params(GPT-2 small)")
    expect(n == 124_439_808, f"GPT-2 small（V=50257, d=768, 12 层, L_max=1024, 共享）应恰好是 124,439,808，得到 {n:,}")
    V, d, N, L = 32000, 4096, 32, 4096  # LLaMA-7B 的形状（不共享输出层）
    count = {pos: integer(call(fn, V, d, N, L, False, pos), f"count_params(..., positions={pos!r})")
             for pos in ("learned", "sinusoidal", "rope", "none")}
    expect(count["rope"] == count["sinusoidal"] == count["none"],
           f"RoPE、正弦编码和不加位置都没有参数，三者的参数量应相同，得到 {count}")
    expect(count["learned"] - count["rope"] == L * d,
           f"可学习的位置表比 RoPE 多 L_max·d = {L * d:,} 个参数，得到差 {count['learned'] - count['rope']:,}")
    tied = integer(call(fn, V, d, N, L, True, "rope"), "count_params(..., tied=True)")
    expect(count["rope"] - tied == V * d, f"不共享输出层时多一个 V·d = {V * d:,} 的输出矩阵，得到差 {count['rope'] - tied:,}")
    expect(6.6e9 < count["rope"] < 6.8e9, f"LLaMA-7B 的形状（RoPE，不共享）应约为 6.7e9，得到 {count['rope']:.3e}")


def _own(namespace, name, *args):
    """你的函数在讲义的问题上的值；函数还没写好时是 None（它自己的检查已经说了原因）。"""
    try:
        return number(call(need(namespace, name), *args), f"{name}{args}")
    except CheckFailed:
        return None


def test_crossover(namespace):
    fn = need(namespace, "crossover_length")
    c = number(call(fn, 768), "crossover_length(768)")
    expect(c != 768, MISTAKES["crossover_is_d"])
    expect(close(2 * c**2 * 768, 12 * c * 768**2),
           f"在 n = crossover_length(768) = {c:g} 处，注意力矩阵 2n²d 和线性部分 12nd² 应该一样多")
    answer = number(need(namespace, "crossover_4096"), "crossover_4096", returned=False)
    mine = _own(namespace, "crossover_length", 4096)
    if mine is not None:
        expect(close(answer, mine),
               f"crossover_4096 = {answer:g}，和你的 crossover_length(4096) = {mine:g} 不一致（d = 4096 时 n 超过多少？）")


def test_share(namespace):
    fn = need(namespace, "attention_share")
    lecture = {128: 0.027, 512: 0.100, 1024: 0.182, 4096: 0.471, 16384: 0.780, 65536: 0.934}  # 讲义 §10.1，d = 768
    for n, want in lecture.items():
        got = number(call(fn, n, 768), f"attention_share({n}, 768)")
        if not close(got, want, "share"):
            hint = f"（{MISTAKES['ratio_not_share']}）" if close(got, n / (6 * 768)) else ""
            raise CheckFailed(f"d = 768、n = {n} 时占比应约为 {want:.1%}，得到 {got:.4f}{hint}")
    share = number(need(namespace, "share_128k"), "share_128k", returned=False)
    expect(0 < share < 1, f"share_128k = {share:g}：{MISTAKES['percent']}（84% 写成 0.84）")
    mine = _own(namespace, "attention_share", 131072, 4096)
    if mine is not None:
        expect(close(share, mine, "share"),
               f"share_128k = {share:g}，和你的 attention_share(131072, 4096) = {mine:.4f} 不一致（相差超过 0.005）")


TESTS = {"ex6_param_count": test_param_count, "ex7_crossover": test_crossover, "ex7_share": test_share}
