"""notebook 04（04_blocks_and_cost.ipynb）= 练习 6（参数量）和练习 7（计算量）：
探针和检查，写在同一个文件里。

约定（见 lib/grading/exercises/__init__.py 和 CONTRIBUTING.md 的“怎样加一道练习”）：
“探针”一段送进学生的内核运行（只用标准库、numpy、torch 和 lib.answer_format，工具来自 lib/grading/probes.py），
只记录数据；“检查”一段在从未运行过学生代码的评分进程里，用同一个 seed 重新生成输入、用可信的参考实现判分。
"""
from __future__ import annotations

import json  # noqa: F401
import math
from typing import Callable  # noqa: F401

import numpy as np

from lib.answer_format import describe  # noqa: F401

# ==== 评分进程才执行的导入（送进内核时跳过这一段：内核里同名的工具由 lib/grading/probes.py 提供）====
from lib import answer_format as fmt  # noqa: F401
from lib.answer_format import FormatError  # noqa: F401
from lib.grading.exercise_checks import (OK, Check, Wrong, _cases, _checked, _close, _error_text,  # noqa: F401
                                         _field, _fmt, _part, _result, _score, _vs, attention, softmax)
from lib.grading.probes import PROBES, _call_cases, _get, _guarded, _rng, _variable_probe, quiet_call  # noqa: F401

# ==== 探针：在学生的内核里运行 ====
# ----------------------------------------------------------------------------
# 练习 6、7：参数量和计算量
# ----------------------------------------------------------------------------

GPT2_SMALL = (50257, 768, 12, 1024, True, "learned")
LLAMA_LIKE = (32000, 4096, 32, 4096, False, "rope")


def inputs_param_count(seed: int) -> list[tuple]:
    """三部分（verify_ex6_param_count 各给 1.5 分，最后的层归一化另给 1.5 分），每部分一组共享输出层、一组不共享：
    可学习的位置嵌入（GPT-2 small + 随机）、正弦和不加位置（随机）、RoPE（LLaMA-7B 的形状 + 随机）。"""
    rng = _rng(seed, 601)

    def shape(tied, pos):
        return (int(rng.integers(10, 60000)), 8 * int(rng.integers(1, 200)), int(rng.integers(1, 40)),
                int(rng.integers(16, 9000)), tied, pos)

    return [GPT2_SMALL, shape(False, "learned"), shape(True, "sinusoidal"), shape(False, "none"),
            LLAMA_LIKE, shape(True, "rope")]


@_guarded
def probe_ex6_param_count(namespace, seed):
    fn = _get(namespace, "count_params")
    return {"cases": _call_cases(fn, inputs_param_count(seed))}


def inputs_compute(seed: int) -> list[tuple]:
    rng = _rng(seed, 701)
    cases = [(131072, 4096), (128, 768), (65536, 768)]
    for _ in range(4):
        cases.append((int(rng.integers(1, 300000)), 64 * int(rng.integers(1, 100))))
    return cases


@_guarded
def probe_ex7_crossover(namespace, seed):
    out = {"value": describe(namespace.get("crossover_4096"))}  # 讲义的问题：d = 4096 时 n 超过多少
    try:
        out["cases"] = _call_cases(_get(namespace, "crossover_length"), [(d,) for _, d in inputs_compute(seed)])
    except NameError as err:
        out["cases"] = _error(err)
    return out


@_guarded
def probe_ex7_share(namespace, seed):
    out = {"value": describe(namespace.get("share_128k"))}  # 讲义的问题：128K 时占多少
    try:
        out["cases"] = _call_cases(_get(namespace, "attention_share"), inputs_compute(seed))
    except NameError as err:
        out["cases"] = _error(err)
    return out


PROBES.update({
    "ex6_param_count": probe_ex6_param_count,
    "ex7_crossover": probe_ex7_crossover,
    "ex7_share": probe_ex7_share,
})

# ==== 检查：在干净的评分进程里运行 ====
# 典型错误的说法：和公开测试同一份（lib/public_tests/nb04_ex6_ex7.py）
from lib.public_tests.nb04_ex6_ex7 import MISTAKES  # noqa: E402

def count_params(V, d, n_layers, max_len, tied, positions):
    """§7.5：词嵌入 Vd + 位置表（只有 learned）+ N(12d² + 13d) + 最后的 LN 2d（+ 不共享时输出层 Vd）。

    和 lib.transformer.lm_param_formula 相同（测试里核对过）；这里不导入 torch，评分更快。
    """
    total = V * d + n_layers * (12 * d * d + 13 * d) + 2 * d
    if positions == "learned":
        total += max_len * d
    if not tied:
        total += V * d
    return total



PARAM_COUNT_PARTS = [("可学习的位置嵌入（GPT-2 small 等）", (0, 1)), ("正弦编码和不加位置（都没有参数）", (2, 3)),
                     ("RoPE（LLaMA-7B 的形状等，没有参数）", (4, 5))]
FINAL_LN_HINT = ("少了最后一个层归一化的 2d：讲义 §15 的答案用 12d² + 13d 估算、不算它，本题要求算上"
                 "（GPT-2 small 恰好 124,439,808 个就含这 2d）。")


@_checked
def verify_ex6_param_count(data, seed):
    """按位置编码分三部分，各 1.5 分；最后的层归一化 2d 另算 1.5 分（共 6 分）。
    每部分有一组共享输出层、一组不共享。按讲义 §15 的 12d² + 13d 估算、只差最后的 2d 的答案，三个部分都算对，
    只丢“最后的层归一化”这 1.5 分。"""
    specs = inputs_param_count(seed)
    cases = _cases(data, expected=len(specs))
    missing_ln: list = []
    exact: list = []

    def check(i):
        V, d, n_layers, max_len, tied, pos = spec = specs[i]
        label = "count_params(V={}, d={}, n_layers={}, max_len={}, tied={}, positions={!r})".format(*spec)
        got = fmt.read_integer(_result(cases[i], label), label)
        want = count_params(*spec)
        if got == want - 2 * d:
            missing_ln.append(label)
            return
        if got == want:
            exact.append(label)
        else:
            diff = got - want
            hint = {max_len * d: "只有可学习的位置嵌入（positions='learned'）才有 max_len·d 个参数。",
                    -max_len * d: "可学习的位置嵌入有 max_len·d 个参数。",
                    V * d: "输出层和词嵌入共享（tied=True）时不另算。",
                    -V * d: "输出层不和词嵌入共享（tied=False）时要另算 V·d。"}.get(diff, "")
            raise Wrong(f"{label} = {got:,}，应为 {want:,}。{hint}")

    parts = [_part(label, 1.5, lambda idx=idx: [check(i) for i in idx]) for label, idx in PARAM_COUNT_PARTS]

    def final_ln():
        if missing_ln:
            raise Wrong(f"{missing_ln[0]} 比应有的少 2d。{FINAL_LN_HINT}")
        if not exact:
            raise Wrong("没有一组完全正确，看不出有没有算最后的层归一化。")

    parts.append(_part("最后的层归一化（γ、β：2d 个参数）", 1.5, final_ln))
    return _score(parts)


def _compute_cases(data, specs) -> list:
    cases = _field(data, "cases")
    if isinstance(cases, dict) and "error" in cases:
        raise Wrong(_error_text(cases["error"]))
    if not isinstance(cases, list) or len(cases) != len(specs):
        raise Wrong(f"应有 {len(specs)} 组结果")
    return cases


def _lecture_value(data, name, want, kind, hint):
    """讲义 §15 练习 7 的问题本身（一个变量），按 kind 的容差。"""
    desc = _field(data, "value")
    got = fmt.read_number(desc, name, returned=False)
    if not _close(got, want, kind):
        raise Wrong(f"{name}：{_vs(got, want, kind)}。{hint}")


@_checked
def verify_ex7_crossover(data, seed):
    """crossover_length(d)（1.5 分）+ 讲义的问题 crossover_4096（0.5 分）。"""
    specs = inputs_compute(seed)

    def function():
        for (_, d), case in zip(specs, _compute_cases(data, specs)):
            got = fmt.read_number(_result(case, f"crossover_length({d})"), f"crossover_length({d})")
            if not _close(got, 6 * d):
                raise Wrong(f"crossover_length({d})：{_vs(got, 6 * d)}（注意力矩阵 2n²d 和线性部分 12nd² 相等时）。")

    return _score([_part("crossover_length(d)", 1.5, function),
                   _part("crossover_4096（d = 4096 时 n 超过多少）", 0.5, lambda: _lecture_value(
                       data, "crossover_4096", 6 * 4096, "computed", "n > 6d 时注意力矩阵占大头。"))])


@_checked
def verify_ex7_share(data, seed):
    """attention_share(n, d)（1.5 分）+ 讲义的问题 share_128k（0.5 分）。占比的容差是 answer_format 的 "share"。"""
    specs = inputs_compute(seed)

    def function():
        for (n, d), case in zip(specs, _compute_cases(data, specs)):
            what = f"attention_share({n}, {d})"
            got = fmt.read_number(_result(case, what), what)
            want = n / (n + 6 * d)
            if not _close(got, want, "share"):
                hint = f"（{MISTAKES['ratio_not_share']}。）" if _close(got, n / (6 * d)) else ""
                raise Wrong(f"{what}：{_vs(got, want, 'share')}{hint}。{MISTAKES['percent']}（误差不超过 0.005）。")

    return _score([_part("attention_share(n, d)", 1.5, function),
                   _part("share_128k（d = 4096、n = 131072 时的占比）", 0.5, lambda: _lecture_value(
                       data, "share_128k", 131072 / (131072 + 6 * 4096), "share",
                       "占比 = 比值 / (1 + 比值)，比值 n/6d ≈ 5.33；写成 0 到 1 之间的小数，例如 0.84。"))])


NOTEBOOK = "04_blocks_and_cost"
EXERCISES = (6, 7)  # 讲义 §15 的练习编号：grade_id 是 ex6_*、ex7_*；模块名 nb04_ex6_ex7 = notebook 04 + 这些练习
CHECKS = [
    Check("ex6_param_count", NOTEBOOK, 6, verify_ex6_param_count),
    Check("ex7_crossover", NOTEBOOK, 2, verify_ex7_crossover),
    Check("ex7_share", NOTEBOOK, 2, verify_ex7_share),
]
