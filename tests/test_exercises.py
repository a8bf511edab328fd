"""练习（nbgrader 作业 `exercises`）的测试：检查本身、source/ → release/ + solutions/、完整的评分往返。

- 快的（不启动内核）：每个 Check 的单元测试（参考答案 1.0，典型错误 0.0，坏数据 0.0 且不抛异常）；
  分值和 notebook 一致；release/ 里没有参考答案和隐藏测试。
- 慢的（@pytest.mark.slow，会启动 nbgrader 和内核）：在临时课程目录里
  重新生成并和仓库里的 release/、solutions/ 比较；source/ 通过 `nbgrader validate`（并且每个单元格都不报错）、
  release/ 不通过；四份提交走一遍 autograde → generate_feedback → export，grades.csv 的分数符合预期。
所有学生数据（gradebook.db、submitted/ ……）都只写在临时目录里。
"""
from __future__ import annotations

import copy
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import numpy as np
import pytest

from lib.grading import exercise_checks as ec
from lib.grading import probes
from lib.grading.exercises import nb01_ex1_ex4 as nb01  # noqa: F401  每个练习 notebook 的探针和检查（notebook 01 = 练习 1、4）
from lib.grading.exercises import nb03_ex5 as nb03  # notebook 03 = 练习 5
from lib.grading.exercises import nb04_ex6_ex7 as nb04  # notebook 04 = 练习 6、7
from lib.grading.exercises import nb05_ex8_ex11 as nb05  # notebook 05 = 练习 8、11

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "exercises"
NOTEBOOKS = sorted(p.stem for p in (ROOT / "source" / ASSIGNMENT).glob("*.ipynb"))
AUTOGRADED_NOTEBOOKS = sorted({c.notebook for c in ec.CHECKS.values()})  # 练习 10（06_hands_on）全是人工评分
SEEDS = (0, 1, 7, 2**31 - 1)
AUTOGRADED_POINTS = sum(c.points for c in ec.CHECKS.values())


def read_nb(path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)


def nbg(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def course_points() -> float:
    """整个作业的满分：source/ 里每个评分单元格（自动和人工）的分值之和。加一道练习不用改任何数。"""
    cells = [c for name in NOTEBOOKS for c in read_nb(ROOT / "source" / ASSIGNMENT / f"{name}.ipynb").cells]
    return sum(nbg(c)["points"] for c in cells if nbg(c).get("grade"))


# ----------------------------------------------------------------------------
# 参考答案的命名空间：在本进程里执行 source/ notebook 的代码单元格
# ----------------------------------------------------------------------------


def _exec_notebook(name: str) -> dict:
    nb = read_nb(ROOT / "source" / ASSIGNMENT / f"{name}.ipynb")
    ns: dict = {"__name__": "__main__"}
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    for cell in code_cells[1:]:  # 第一个是引导单元格（本进程已能导入 lib）
        if "check_this_notebook" in cell.source:
            continue
        exec(compile(cell.source, f"{name}:{cell.get('id')}", "exec"), ns)  # noqa: S102
    return ns


@pytest.fixture(scope="module")
def reference():
    """{notebook: 执行完参考答案之后的命名空间}（只有有自动评分单元格的 notebook；练习 10 没有）。"""
    return {name: _exec_notebook(name) for name in AUTOGRADED_NOTEBOOKS}


def _with(ns: dict, source: str) -> dict:
    """在参考命名空间的副本里执行一段“学生的错误答案”。"""
    new = dict(ns)
    exec(source, new)  # noqa: S102
    return new


# ----------------------------------------------------------------------------
# 分值、单元格、隐藏测试的一致性
# ----------------------------------------------------------------------------


def test_points_and_grade_ids_match_the_notebooks():
    seen, auto_total = {}, 0
    for name in NOTEBOOKS:
        nb = read_nb(ROOT / "source" / ASSIGNMENT / f"{name}.ipynb")
        ids = [nbg(c)["grade_id"] for c in nb.cells if nbg(c)]
        assert len(ids) == len(set(ids)), f"{name}：grade_id 重复"
        for cell in nb.cells:
            meta = nbg(cell)
            if not meta.get("grade"):
                continue
            if cell.cell_type == "code":  # 自动评分的测试单元格：恰好一个 Check，分值相同，隐藏测试调用它
                check = ec.CHECKS[meta["grade_id"]]
                assert check.notebook == name and check.points == meta["points"], meta["grade_id"]
                auto_total += meta["points"]
                hidden = cell.source.split("### BEGIN HIDDEN TESTS", 1)[1]
                assert f'run_check("{meta["grade_id"]}", globals())' in hidden
                visible = cell.source.split("### BEGIN HIDDEN TESTS", 1)[0]
                assert "lib.grading" not in visible, "可见的测试不能调用 lib.grading"
                seen[meta["grade_id"]] = name
            else:  # 人工评分：评分标准只在参考答案区域里
                assert meta["solution"] and "评分标准" in cell.source.split("### BEGIN SOLUTION", 1)[1]
    assert set(seen) == set(ec.CHECKS) == set(probes.PROBES)
    assert auto_total == AUTOGRADED_POINTS  # 自动评分单元格的分值之和 = 各练习模块 CHECKS 的分值之和
    assert 0 < AUTOGRADED_POINTS < course_points()  # 还有人工评分的文字题


def test_every_notebook_has_badge_bootstrap_howto_and_selfcheck():
    from lib.tools.bootstrap import BOOTSTRAP_SOURCE

    for top in ("release", "solutions"):
        for name in NOTEBOOKS:
            nb = read_nb(ROOT / top / ASSIGNMENT / f"{name}.ipynb")
            first_md = next(c for c in nb.cells if c.cell_type == "markdown")
            assert f"/blob/main/{top}/{ASSIGNMENT}/{name}.ipynb" in first_md.source, f"{top}/{name}：徽章路径不对"
            first_code = next(c for c in nb.cells if c.cell_type == "code")
            assert first_code.source.rstrip() == BOOTSTRAP_SOURCE.rstrip()
            assert any("下载" in c.source and "Validate" in c.source for c in nb.cells if c.cell_type == "markdown")
            last = nb.cells[-1]
            assert last.cell_type == "code" and not nbg(last)
            assert f'check_this_notebook("exercises/{name}.ipynb")' in last.source


# ----------------------------------------------------------------------------
# 每个 Check：参考答案满分
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("grade_id", sorted(ec.CHECKS))
def test_reference_answer_gets_full_marks(reference, grade_id):
    ns = reference[ec.CHECKS[grade_id].notebook]
    for seed in SEEDS:
        fraction, message = ec.grade(grade_id, ns, seed)
        assert fraction == 1.0, f"seed={seed}: {message}"
    ec.run_check(grade_id, ns)  # 隐藏测试的入口：不抛出


# ----------------------------------------------------------------------------
# 典型的错误答案：期望的得分比例（全错 0；一个单元格里有几个独立部分时，只给做对的部分），并有说明
# 每一条的意思见 tests/test_fairness.py 的表（那里通过真正的评分命令检查同样的规则）
# ----------------------------------------------------------------------------

PARTIAL = {  # (grade_id, 说明) → 得分比例；不在这里的都是 0
    ("ex1_self_attention", "忽略掩码"): 4 / 8,            # 二维无掩码、批维度无掩码对
    ("ex1_self_attention", "用 K.T（批维度时错）"): 4 / 8,  # 二维的两部分对
    ("ex4_copy_query", "长度不够（c = 1）"): 2 / 3,        # 方向对
    ("ex4_average_query", "长度不够"): 2 / 3,
    ("ex2_monte_carlo", "把 σ 当成方差"): 1 / 2,           # 用了 seed
    ("ex5_numbers", "顺时针转"): 0.8,                      # 五个数错一个
    ("ex5_numbers", "(c) 答成负数"): 0.8,
    ("ex5_rope", "相邻两维配对（原论文的排列）"): 2 / 6,   # 只有“打分只依赖 m − n”
    ("ex5_rope", "忽略 base"): 5 / 6,
    ("ex6_param_count", "RoPE 也算了位置表"): 3 / 6,       # 可学习位置嵌入那一部分、最后的层归一化对
    ("ex6_param_count", "忘了最后的层归一化"): 4.5 / 6,
    ("ex6_param_count", "忽略 tied"): 1.5 / 6,              # 三部分都有一组不共享的，都错；最后的层归一化对    # 讲义的 12d² + 13d：只丢最后的 2d 那 1.5 分
    ("ex7_crossover", "答成 d"): 0.5 / 2,                  # crossover_4096（参考答案的值）对
    ("ex7_share", "比值不是占比"): 0.5 / 2,                # share_128k（参考答案的值）对
    ("ex11_counts", "忘了新词的位置"): 1 / 2,
    ("ex11_counts", "有缓存时只数新词"): 1 / 2,
    ("ex11_counts", "有缓存时每一步都重送提示"): 1 / 2,
    ("ex11_cached_generation", "没用缓存（每步重算整个序列）"): 3 / 6,  # 词元对
}

WRONG = {
    "ex1_scores": {
        "没有除以 √d_k": "scores_1 = np.array([[1.0, 1.0], [1.0, -1.0]])",
        "形状不对": "scores_1 = np.array([0.707, 0.707, 0.707, -0.707])",
    },
    "ex1_weights": {
        "用了未缩放的打分": "weights_1 = np.array([[0.5, 0.5], [0.881, 0.119]])",
        "按列做 softmax": "weights_1 = np.array([[0.5, 0.804], [0.5, 0.196]])",
    },
    "ex1_outputs": {"转置了": "outputs_1 = np.array([[0.5, 0.804], [0.5, 0.196]])"},
    "ex1_self_attention": {
        "乘以 √d_k": """
def self_attention(Q, K, V, mask=None):
    s = Q @ np.swapaxes(K, -1, -2) * np.sqrt(Q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True)); w = w / w.sum(-1, keepdims=True)
    return w @ V, w
""",
        "不缩放": """
def self_attention(Q, K, V, mask=None):
    s = Q @ np.swapaxes(K, -1, -2)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True)); w = w / w.sum(-1, keepdims=True)
    return w @ V, w
""",
        "忽略掩码": """
def self_attention(Q, K, V, mask=None):
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    w = np.exp(s - s.max(-1, keepdims=True)); w = w / w.sum(-1, keepdims=True)
    return w @ V, w
""",
        "按列做 softmax": """
def self_attention(Q, K, V, mask=None):
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -1e30)
    w = np.exp(s - s.max(-2, keepdims=True)); w = w / w.sum(-2, keepdims=True)
    return w @ V, w
""",
        "用 K.T（批维度时错）": """
def self_attention(Q, K, V, mask=None):
    s = Q @ K.T / np.sqrt(Q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True)); w = w / w.sum(-1, keepdims=True)
    return w @ V, w
""",
        "只返回输出": """
_ref = self_attention
def self_attention(Q, K, V, mask=None):
    return _ref(Q, K, V, mask)[0]
""",
    },
    "ex4_copy_query": {"长度不够（c = 1）": "def copy_query(K, a):\n    return K[a]",
                       "方向不对": "def copy_query(K, a):\n    return 20.0 * K[0] if a else 20.0 * K[1]"},
    "ex4_average_query": {"只复制了一个": "def average_query(K, a, b):\n    return 20.0 * K[a]",
                          "长度不够": "def average_query(K, a, b):\n    return K[a] + K[b]"},
    "ex2_variance": {"σ² 而不是 σ⁴": "def score_variance(d_k, sigma):\n    return d_k * sigma**2"},
    "ex2_divisor": {"忘了 σ": "def score_divisor(d_k, sigma):\n    return math.sqrt(d_k)",
                    "σ 而不是 σ²": "def score_divisor(d_k, sigma):\n    return sigma * math.sqrt(d_k)"},
    "ex2_monte_carlo": {
        "直接返回公式": "def monte_carlo_variance(d_k, sigma, n_trials=20000, seed=0):\n    return d_k * sigma**4",
        "把 σ 当成方差": """
def monte_carlo_variance(d_k, sigma, n_trials=20000, seed=0):
    rng = np.random.default_rng(seed)
    q, k = rng.normal(0, sigma**2, (n_trials, d_k)), rng.normal(0, sigma**2, (n_trials, d_k))
    return float(np.var((q * k).sum(1)))
""",
    },
    "ex3_equivariance": {
        "输出用了逆置换": """
def equivariance_gap(X, W_q, W_k, W_v, perm, causal=False):
    return float(np.max(np.abs(sa_numpy(X[perm], W_q, W_k, W_v, causal) - sa_numpy(X, W_q, W_k, W_v, causal)[np.argsort(perm)])))
""",
        "总是返回 0": "def equivariance_gap(X, W_q, W_k, W_v, perm, causal=False):\n    return 0.0",
    },
    "ex5_numbers": {"顺时针转": "q_tilde_a = np.array([0.5, -0.866])",
                    "(c) 答成负数": "dot_c = -0.866"},
    "ex5_rotate_2d": {"转反了": """
def rotate_2d(x, angle):
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, s], [-s, c]]) @ x
"""},
    "ex5_rope": {
        "相邻两维配对（原论文的排列）": """
def rope(x, positions, base=10000.0):
    x = np.asarray(x, float); d = x.shape[-1]
    theta = base ** (-np.arange(0, d, 2) / d)
    ang = np.asarray(positions, float)[:, None] * theta
    c, s = np.cos(ang), np.sin(ang)
    out = x.copy()
    out[:, 0::2] = x[:, 0::2] * c - x[:, 1::2] * s
    out[:, 1::2] = x[:, 0::2] * s + x[:, 1::2] * c
    return out
""",
        "不旋转": "def rope(x, positions, base=10000.0):\n    return np.asarray(x, float)",
        "忽略 base": "_r = rope\ndef rope(x, positions, base=10000.0):\n    return _r(x, positions)",
    },
    "ex6_param_count": {
        "忘了最后的层归一化": "_c = count_params\ndef count_params(V, d, n_layers, max_len, tied, positions):\n"
                      "    return _c(V, d, n_layers, max_len, tied, positions) - 2 * d",
        "RoPE 也算了位置表": "_c = count_params\ndef count_params(V, d, n_layers, max_len, tied, positions):\n"
                        "    return _c(V, d, n_layers, max_len, tied, 'learned')",
        "忽略 tied": "_c = count_params\ndef count_params(V, d, n_layers, max_len, tied, positions):\n"
                   "    return _c(V, d, n_layers, max_len, True, positions)",
    },
    "ex7_crossover": {"答成 d": "def crossover_length(d):\n    return d"},
    "ex7_share": {"比值不是占比": "def attention_share(n, d):\n    return n / (6 * d)"},
    "ex8_pad_mask": {
        "挡住行": "def key_padding_mask(pad_mask):\n    return pad_mask[:, None, :, None]",
        "二维掩码": "def key_padding_mask(pad_mask):\n    return pad_mask",
        "不是布尔": "def key_padding_mask(pad_mask):\n    return pad_mask[:, None, None, :].float()",
        "全都能看": "def key_padding_mask(pad_mask):\n    return torch.ones_like(pad_mask)[:, None, None, :]",
    },
    "ex11_counts": {"忘了新词的位置": "def positions_without_cache(n, m):\n    return m * n",
                    "有缓存时只数新词": "def positions_with_cache(n, m):\n    return m",
                    "有缓存时每一步都重送提示": "def positions_with_cache(n, m):\n    return n * m + m"},
    "ex11_cached_generation": {
        "没用缓存（每步重算整个序列）": """
def generate_cached(model, prompt, max_new_tokens):
    idx = prompt
    for _ in range(max_new_tokens):
        nxt = model(idx).logits[:, -1, :].argmax(-1, keepdim=True)
        idx = torch.cat([idx, nxt], 1)
    return idx
""",
        "用了缓存却每步送入整个序列": """
def generate_cached(model, prompt, max_new_tokens):
    cache = model.new_kv_cache(); idx = prompt
    for _ in range(max_new_tokens):
        nxt = model(idx, kv_cache=cache).logits[:, -1, :].argmax(-1, keepdim=True)
        idx = torch.cat([idx, nxt], 1)
    return idx
""",
        "只返回新词": "_g = generate_cached\ndef generate_cached(model, prompt, max_new_tokens):\n"
                   "    return _g(model, prompt, max_new_tokens)[:, prompt.shape[1]:]",
    },
}


def test_one_numbering_module_names_carry_the_notebook_and_the_lecture_exercises():
    """nb03_ex5.py 是 notebook 03 = 练习 5（grade_id ex5_*）：模块名、NOTEBOOK、EXERCISES 和每个 grade_id 说同一组编号，
    公开测试（lib/public_tests/）的模块同名、测同样的 grade_id。名字不对时 collect_checks 说该改成什么。"""
    import importlib
    import types

    from lib.grading import exercises

    names = exercises.module_names()
    assert names == sorted(p.stem for p in (ROOT / "lib" / "public_tests").glob("nb*.py"))
    for name in names:
        module = importlib.import_module(f"lib.grading.exercises.{name}")
        assert name == exercises.module_name(module.NOTEBOOK, module.EXERCISES)
        public = importlib.import_module(f"lib.public_tests.{name}")
        assert set(public.TESTS) == {c.grade_id for c in module.CHECKS}, name
    rope = types.SimpleNamespace(NOTEBOOK="03_positions_and_rope", EXERCISES=(5,),
                                 CHECKS=[ec.Check("ex5_rope", "03_positions_and_rope", 6, None)])
    with pytest.raises(ValueError, match="改名为 nb03_ex5.py"):
        exercises._check_numbering("ex03", rope)
    rope.CHECKS.append(ec.Check("ex6_rope", "03_positions_and_rope", 6, None))
    with pytest.raises(ValueError, match="ex6_rope 不是练习 5 的"):
        exercises._check_numbering("nb03_ex5", rope)


def test_every_check_has_typical_wrong_answers():
    missing = sorted(set(ec.CHECKS) - set(WRONG))
    assert not missing, (f"tests/test_exercises.py 的 WRONG 里还没有这些检查的典型错误答案"
                         f"（见 CONTRIBUTING.md 的“怎样加一道练习”）：{missing}")
    assert set(WRONG) <= set(ec.CHECKS), f"WRONG 里有已经不存在的检查：{sorted(set(WRONG) - set(ec.CHECKS))}"
    assert all(label in WRONG[gid] for gid, label in PARTIAL)


@pytest.mark.parametrize("grade_id,label", [(g, lab) for g, cases in sorted(WRONG.items()) for lab in cases])
def test_typical_wrong_answer_gets_its_expected_score(reference, grade_id, label):
    ns = _with(reference[ec.CHECKS[grade_id].notebook], WRONG[grade_id][label])
    want = PARTIAL.get((grade_id, label), 0.0)
    for seed in SEEDS[:2]:
        fraction, message = ec.grade(grade_id, ns, seed)
        assert fraction == pytest.approx(want), f"{label}（seed={seed}）应得 {want:.3f}：{message}"
        assert isinstance(message, str) and len(message) > 5
        if 0 < want < 1:
            assert message.startswith("部分正确") and "✓" in message and "✗" in message, message
    if want == 0:
        with pytest.raises(AssertionError, match=grade_id):
            ec.run_check(grade_id, ns)
    else:  # 普通的 nbgrader：测试单元格最后一个表达式的数值就是部分分
        assert ec.run_check(grade_id, ns) == pytest.approx(want * ec.CHECKS[grade_id].points)


@pytest.mark.parametrize("grade_id,label,hint", [
    ("ex1_self_attention", "乘以 √d_k", "乘了 √d_k"),
    ("ex1_self_attention", "不缩放", "没有除以 √d_k"),
    ("ex1_self_attention", "忽略掩码", "掩码没有起作用"),
    ("ex1_self_attention", "用 K.T（批维度时错）", "np.swapaxes"),
    ("ex8_pad_mask", "挡住行", "应该挡列"),
    ("ex8_pad_mask", "不是布尔", "torch.bool"),
    ("ex6_param_count", "忘了最后的层归一化", "2d"),
    ("ex5_rope", "忽略 base", "要用参数 base"),
    ("ex5_numbers", "(c) 答成负数", "cos 是偶函数"),
    ("ex4_copy_query", "长度不够（c = 1）", "c ≥ ln(99 × 7)"),
    ("ex11_counts", "有缓存时每一步都重送提示", "每一步都把提示的 n 个位置重新送进了模型"),
    ("ex11_counts", "有缓存时只数新词", "只数了新词，忘了提示"),
])
def test_wrong_answers_name_the_likely_cause(reference, grade_id, label, hint):
    ns = _with(reference[ec.CHECKS[grade_id].notebook], WRONG[grade_id][label])
    assert hint in ec.grade(grade_id, ns, 0)[1]


def test_grading_is_deterministic_and_uses_the_pipeline_seed(reference):
    """分数只取决于答案：不传 seed 时（隐藏测试、评分流水线）用同一个固定的种子，结果和说明每次都一样。"""
    from lib.grading import pipeline

    assert pipeline.SEED == ec.DEFAULT_SEED
    ns = _with(reference["01_attention_by_hand"], "def copy_query(K, a):\n    return 5.0 * K[a]")
    first = ec.grade("ex4_copy_query", ns)
    assert first == ec.grade("ex4_copy_query", ns, ec.DEFAULT_SEED) == ec.grade("ex4_copy_query", ns)
    assert first[0] == pytest.approx(2 / 3)  # c = 5：方向对，n = 8 时权重 0.955 < 0.99


# ----------------------------------------------------------------------------
# 坏数据、坏命名空间：0 分，不抛异常
# ----------------------------------------------------------------------------


def _mutations(data):
    """从一份正确的探针数据派生出各种坏数据。"""
    def leaves(obj, fn):
        if isinstance(obj, dict):
            return {k: leaves(v, fn) for k, v in obj.items()}
        if isinstance(obj, list):
            return [leaves(v, fn) for v in obj]
        return fn(obj)

    def truncate(obj):
        if isinstance(obj, dict):
            return {k: truncate(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [truncate(v) for v in obj[:-1]] if len(obj) > 1 else []
        return obj

    yield "空 dict", {}
    yield "None", None
    yield "字符串", "hello"
    yield "探针记录的错误", {"error": "NameError: name 'x' is not defined"}
    yield "NaN", leaves(data, lambda v: float("nan") if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
    yield "无穷大", leaves(data, lambda v: float("inf") if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
    yield "数字换成字符串", leaves(data, lambda v: "7" if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
    yield "列表截短", truncate(data)
    yield "每个键都换成 None", {k: None for k in data} if isinstance(data, dict) else None
    if isinstance(data, dict) and isinstance(data.get("cases"), list):
        yield "每组都出错", {"cases": [{"error": "ValueError: boom"} for _ in data["cases"]]}
        yield "每组都缺结果", {"cases": [{} for _ in data["cases"]]}
        yield "多一组", {"cases": data["cases"] + data["cases"][:1]}


@pytest.mark.parametrize("grade_id", sorted(ec.CHECKS))
def test_malformed_data_scores_zero_without_raising(reference, grade_id):
    check = ec.CHECKS[grade_id]
    good = json.loads(json.dumps(probes.PROBES[grade_id](reference[check.notebook], 3)))
    assert check.verify(good, 3)[0] == 1.0
    for label, bad in _mutations(good):
        fraction, message = check.verify(copy.deepcopy(bad), 3)
        if label == "列表截短":  # 只截短了部分数据时，没被截短的部分照常得分（例如练习 5 的三个点积是标量）
            assert fraction < 1.0, f"{label}：坏数据不应得满分"
        else:
            assert fraction == 0.0, f"{label}：坏数据不应得分"
        assert isinstance(message, str) and message, label


@pytest.mark.parametrize("grade_id", sorted(ec.CHECKS))
def test_missing_or_crashing_answers_score_zero(grade_id):
    assert ec.grade(grade_id, {}, 0)[0] == 0.0  # 什么都没定义（NameError 被记录下来）

    def boom(*args, **kwargs):
        raise NotImplementedError()

    crashing = {name: boom for name in ["self_attention", "copy_query", "average_query", "score_variance",
                                        "score_divisor", "monte_carlo_variance", "equivariance_gap",
                                        "rotate_2d", "rope", "count_params", "crossover_length",
                                        "attention_share", "key_padding_mask", "positions_without_cache",
                                        "positions_with_cache", "generate_cached"]}
    crashing.update({name: None for name in ["scores_1", "weights_1", "outputs_1", *nb03.EX5_NAMES]})
    fraction, message = ec.grade(grade_id, crashing, 0)
    assert fraction == 0.0 and message


def test_probe_output_is_plain_json_and_silences_student_noise(reference, capfd):
    ns = _with(reference["01_attention_by_hand"], """
import logging, sys, warnings
logging.basicConfig()
_quiet_ref = self_attention
def self_attention(Q, K, V, mask=None):
    print("调试：我被调用了")
    print("写到 stderr", file=sys.stderr)
    warnings.warn("学生代码的警告")
    logging.getLogger("student").error("学生代码的日志")
    return _quiet_ref(Q, K, V, mask)
""")
    capfd.readouterr()
    data = probes.PROBES["ex1_self_attention"](ns, 0)
    out, err = capfd.readouterr()
    assert out == "" and err == "", "探针必须吞掉学生代码的输出"
    assert json.loads(json.dumps(data)) == data
    assert ec.CHECKS["ex1_self_attention"].verify(data, 0)[0] == 1.0


def test_probes_work_when_shipped_as_source_text(reference):
    """评分流水线把 probes.py 和每个练习模块的探针一段（probes.kernel_source）送进学生的内核执行：
    这样得到的 PROBES 和导入的模块结果相同。"""
    shipped: dict = {"__name__": "shipped_probes"}
    exec(compile(probes.kernel_source(), "probes.py", "exec"), shipped)
    for grade_id, check in ec.CHECKS.items():
        data = json.loads(json.dumps(shipped["PROBES"][grade_id](reference[check.notebook], 5)))
        assert data == json.loads(json.dumps(probes.PROBES[grade_id](reference[check.notebook], 5))), grade_id
        assert check.verify(data, 5)[0] == 1.0, grade_id


KV_COUNTS = {  # positions_with_cache 的写法 → 可见测试通过吗、评分的得分比例
    "n + m - 1": (True, 1.0),   # 生成循环处理的位置（参考答案）
    "n + m": (True, 1.0),       # 讲义 §15 的答案：最后一个新词也送进模型
    "n * m + m": (False, 0.5),  # 每一步都把提示重新送进去
    "m * n": (False, 0.5),
    "n + m if n > 100 else n + m - 1": (True, 0.5),  # 两种数法混着用：可见测试的小例子发现不了
}


@pytest.mark.parametrize("body", sorted(KV_COUNTS))
def test_lecture_kv_count_n_plus_m_is_accepted_everywhere(reference, body):
    """讲义的答案 n + m 和 n + m − 1 一样：可见测试不报错，评分满分，说明里解释差的那一个位置；错的计数照样丢分。"""
    passes, want = KV_COUNTS[body]
    nb5 = "05_masks_and_kv_cache"
    ns = _with(reference[nb5], f"def positions_with_cache(n, m):\n    return {body}\n")
    if passes:
        exec(_visible_test(nb5, "ex11_counts"), ns)  # noqa: S102
    else:
        with pytest.raises(AssertionError, match="提示只送进模型一次"):
            exec(_visible_test(nb5, "ex11_counts"), ns)  # noqa: S102
    for seed in SEEDS:
        fraction, message = ec.grade("ex11_counts", ns, seed)
        assert fraction == pytest.approx(want), message
    assert ("讲义的 n + m，和 n + m − 1 一样得满分" in message) == (body == "n + m"), message
    if body == "n + m":
        assert message.startswith("正确。") and "第 m 个新词" in message and ec.run_check("ex11_counts", ns) is None
    if want < 1:
        assert "两种" in message, message  # 说明里说清楚：两种数法都算对


def test_tiny_lm_matches_lib_generate_interface():
    """TinyLM 和 lib.transformer.generate 配合：用缓存和不用缓存生成相同的词元，缓存时处理 n + m - 1 个位置。"""
    import torch

    from lib.transformer import generate

    model = nb05.TinyLM(5)
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    uncached = generate(model, prompt, 6, use_cache=False, greedy=True)
    model.calls.clear()
    cached = generate(model, prompt, 6, use_cache=True, greedy=True)
    assert torch.equal(cached, uncached)
    assert sum(c["positions"] for c in model.calls) == 3 + 6 - 1
    assert cached.tolist() == nb05.greedy_reference(5, prompt, 6)


def test_numpy_tiny_lm_matches_the_torch_one():
    """评分进程用 NumPy 重算 TinyLM：logits 和学生内核里的 torch 版本一致，贪心生成也一致。"""
    import torch

    rng = np.random.default_rng(3)
    for seed in (0, 5, 2**31 - 2):
        idx = rng.integers(0, 13, size=(3, 9))
        with torch.no_grad():
            want = nb05.TinyLM(seed)(torch.as_tensor(idx)).logits.numpy()
        got = nb05.tiny_lm_logits(nb05.tiny_lm_weights(seed), idx)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_numpy_encoder_reference_sees_padding_only_through_the_mask():
    """ex8 的参考编码器：按键挡住填充时真实词的输出和不填充时相同；不挡、或挡行而不是挡列时不同。"""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 6, 8))
    x[0, 4:] = 50 * rng.normal(size=(2, 8))
    pad = np.arange(6) < 4
    alone = nb05.encoder_outputs(x[:, :4], None, 7)[0]
    keys = nb05.encoder_outputs(x, pad[None, None, None, :], 7)[0, :4]
    rows = nb05.encoder_outputs(x, np.broadcast_to(pad[None, None, :, None], (1, 1, 6, 6)), 7)[0, :4]
    np.testing.assert_allclose(keys, alone, rtol=1e-10, atol=1e-12)
    assert not np.allclose(rows, alone) and not np.allclose(nb05.encoder_outputs(x, None, 7)[0, :4], alone)
    assert np.isfinite(nb05.encoder_outputs(x, np.zeros((1, 1, 6, 6), bool), 7)).all()  # 整行被挡：权重为 0，不是 NaN


def test_judging_never_imports_torch(reference):
    """评分进程判分时只用 NumPy（导入 torch 要一秒多 CPU，2 个 job 时会拖慢学生代码的执行）。"""
    data = {gid: probes.PROBES[gid](reference[c.notebook], 11) for gid, c in ec.CHECKS.items()}
    code = ("import json, sys\n"
            "from lib.grading import exercise_checks as ec, pipeline\n"
            "data = json.load(sys.stdin)\n"
            "fractions = {g: ec.CHECKS[g].verify(d, 11)[0] for g, d in data.items()}\n"
            "print(json.dumps({'torch': 'torch' in sys.modules, 'fractions': fractions}))\n")
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(data), capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    result = json.loads(out)
    assert result["fractions"] == {gid: 1.0 for gid in ec.CHECKS}
    assert result["torch"] is False


def _copy_of(copy: str, original: str, what: str = "") -> str:
    """参考副本和 lib 对不上时该做什么。评分进程不导入 torch，检查用的是 lib 函数的 NumPy 副本；
    make artifact 不会更新它们。what：哪里不一样（可以不写）。"""
    return (f"{what}{copy} 是 {original} 的 NumPy 副本（评分进程不导入 torch），和 lib 现在的算法对不上了："
            f"改了 lib 里的这个函数（公式、默认参数），就把 {copy} 改成一样的（make artifact 不会改它），再运行这个测试")


def test_numpy_references_agree_with_lib():
    import inspect

    import torch

    from lib.transformer import apply_rope, layer_norm, scaled_dot_product_attention

    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 3, 5, 4)), rng.normal(size=(2, 3, 5, 4)), rng.normal(size=(2, 3, 5, 6))
    mask = np.tril(np.ones((5, 5), dtype=bool))
    out, w = ec.attention(q, k, v, mask)
    out_t, w_t = scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), torch.tensor(mask))
    assert np.allclose(out, out_t.numpy()) and np.allclose(w, w_t.numpy()), _copy_of(
        "lib/grading/exercise_checks.py 的 attention", "lib.transformer.scaled_dot_product_attention")
    x = rng.normal(size=(7, 8))
    assert np.allclose(nb03.rope(x, np.arange(7)), apply_rope(torch.tensor(x)).numpy(), atol=1e-6), _copy_of(
        "lib/grading/exercises/nb03_ex5.py 的 rope", "lib.transformer.apply_rope")
    ours, lib_eps = (inspect.signature(f).parameters["eps"].default for f in (nb05.layer_norm, layer_norm))
    assert ours == lib_eps, _copy_of("lib/grading/exercises/nb05_ex8_ex11.py 的 layer_norm", "lib.transformer.layer_norm",
                                     f"eps 不一样（副本 {ours}，lib {lib_eps}）：")
    assert np.allclose(nb05.layer_norm(x), layer_norm(torch.tensor(x)).numpy()), _copy_of(
        "lib/grading/exercises/nb05_ex8_ex11.py 的 layer_norm", "lib.transformer.layer_norm")
    from lib.transformer import lm_param_formula

    for V, d, n_layers, max_len, tied, pos in nb04.inputs_param_count(11):
        want = lm_param_formula(V, d, n_layers, max_len, pos, tied)
        assert nb04.count_params(V, d, n_layers, max_len, tied, pos) == want, _copy_of(
            "lib/grading/exercises/nb04_ex6_ex7.py 的 count_params", "lib.transformer.lm_param_formula")
    assert nb04.count_params(*nb04.GPT2_SMALL) == 124_439_808
    assert round(nb04.count_params(*nb04.LLAMA_LIKE) / 1e9, 1) == 6.7
    assert math.isclose(131072 / (131072 + 6 * 4096), 0.842, abs_tol=5e-4)


# ----------------------------------------------------------------------------
# release/ 里没有答案，没有隐藏测试
# ----------------------------------------------------------------------------


def _protected_lines(source_nb) -> set[str]:
    """source/ 里参考答案区域和隐藏测试区域的每一行（足够长、不是纯注释的）。"""
    lines = set()
    for cell in source_nb.cells:
        for begin, end in (("### BEGIN SOLUTION", "### END SOLUTION"), ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")):
            for block in re.findall(re.escape(begin) + r"(.*?)" + re.escape(end), cell.source, re.S):
                for line in block.splitlines():
                    line = line.strip()
                    if len(line) >= 12 and not line.startswith("#"):
                        lines.add(line)
    return lines


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_release_contains_no_solution_or_hidden_test_text(name):
    release_text = (ROOT / "release" / ASSIGNMENT / f"{name}.ipynb").read_text(encoding="utf-8")
    release = read_nb(ROOT / "release" / ASSIGNMENT / f"{name}.ipynb")
    sources = "\n".join(c.source for c in release.cells)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "run_check", "lib.grading", "评分标准"):
        assert marker not in release_text, f"release/{name} 里有 {marker!r}"
    leaked = [line for line in _protected_lines(read_nb(ROOT / "source" / ASSIGNMENT / f"{name}.ipynb"))
              if line in sources]
    assert not leaked, f"release/{name} 泄露了参考答案或隐藏测试：{leaked[:3]}"
    solutions_text = (ROOT / "solutions" / ASSIGNMENT / f"{name}.ipynb").read_text(encoding="utf-8")
    assert "HIDDEN TESTS" not in solutions_text and "run_check" not in solutions_text


# ----------------------------------------------------------------------------
# 慢的：nbgrader 本身（临时课程目录）
# ----------------------------------------------------------------------------


def nbgrader_env() -> dict:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # nbgrader 要调用 alembic
    env.update(CI="true", OMP_NUM_THREADS="1", MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)  # 内核靠引导单元格找到临时课程里的 lib/
    return env


# 内核没能启动，和学生代码、评分都无关：jupyter_client 先挑空闲端口、放开，再让内核去绑定，
# 这中间另一个进程（并行的第二个 nbgrader、另一个 pytest 进程里的 nbval）可能拿到同一个端口，
# 内核就以 "Address already in use" 退出（jupyter/jupyter_client#276）。在这台机器上 4 个进程同步
# 启动 240 个内核时出现过 1 次，CI 里也出现过一次。只为这种失败重跑一次（autograde 重跑时只重做
# 失败的那个学生），其余失败照常报告。
KERNEL_START_FAILED = re.compile(
    r"Kernel died before replying to kernel_info|Kernel didn't respond in \d+ seconds|Address already in use")


def run_with_kernels(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run，启动内核失败时重跑一次（见上）。"""
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if result.returncode != 0 and KERNEL_START_FAILED.search(result.stderr):
        print("内核没能启动（端口竞争），重跑一次：", " ".join(map(str, cmd))[:200])
        result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    return result


def test_only_a_kernel_that_never_started_is_rerun(tmp_path):
    """重跑只为内核没能启动：第一次这样失败、第二次成功的命令算成功；别的失败只跑一次，照常报告。"""
    flaky = ("import pathlib, sys; mark = pathlib.Path(sys.argv[1]); runs = int(mark.read_text() or 0) + 1; "
             "mark.write_text(str(runs)); runs > 1 or sys.exit(sys.argv[2])")
    for message, want_code, want_runs in [("RuntimeError: Kernel died before replying to kernel_info", 0, 2),
                                          ("NameError: name 'x' is not defined", 1, 1)]:
        mark = tmp_path / f"runs{want_runs}"
        mark.write_text("")
        result = run_with_kernels([sys.executable, "-c", flaky, str(mark), message], timeout=60)
        assert (result.returncode, int(mark.read_text())) == (want_code, want_runs), message


def test_nbval_retries_a_kernel_that_never_started(monkeypatch):
    import conftest  # 仓库根目录的 conftest.py（nbval 的内核启动重试）
    import nbval.kernel

    calls = []

    def start_once_dead(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise RuntimeError("Kernel died before replying to kernel_info")
        return "km", "kc"

    monkeypatch.setattr(conftest, "_start_new_kernel", start_once_dead)
    assert nbval.kernel.start_new_kernel(kernel_name="python3") == ("km", "kc")
    assert calls == [{"kernel_name": "python3"}] * 2


def nbgrader(course: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "nbgrader"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "nbgrader"]
    return run_with_kernels([*cmd, *args], cwd=course, env=nbgrader_env(), timeout=timeout)


def make_course(dest: Path, with_generated: bool = True) -> Path:
    """临时课程目录：lib/、source/、nbgrader_config.py、pyproject.toml（以及 release/、solutions/）的副本。"""
    ignore = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints")
    dest.mkdir(parents=True, exist_ok=True)
    for d in ["lib", "source"] + (["release", "solutions"] if with_generated else []):
        shutil.copytree(ROOT / d, dest / d, ignore=ignore)
    for f in ("nbgrader_config.py", "pyproject.toml"):
        shutil.copy2(ROOT / f, dest / f)
    return dest


VOLATILE_CELL_KEYS = {"execution", "collapsed", "scrolled", "jp-MarkdownHeadingCollapsed", "editable", "deletable"}


def _normalized(path: Path) -> dict:
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        for key in VOLATILE_CELL_KEYS:
            cell.get("metadata", {}).pop(key, None)
        cell.pop("execution_count", None)
        cell.pop("outputs", None)
    return nb


@pytest.mark.slow
def test_release_and_solutions_are_exactly_what_regenerate_produces(tmp_path):
    from lib.tools.regenerate import regenerate

    course = make_course(tmp_path / "course", with_generated=False)
    written = regenerate(course)
    assert len(written) == 2 * len(NOTEBOOKS)
    extra = sorted(p.name for p in course.iterdir())
    assert extra == ["lib", "nbgrader_config.py", "pyproject.toml", "release", "solutions", "source"], \
        f"regenerate 只应写 release/ 和 solutions/：{extra}"
    for top in ("release", "solutions"):
        got = sorted(p.relative_to(course / top).as_posix() for p in (course / top).rglob("*") if p.is_file())
        want = sorted(p.relative_to(ROOT / top).as_posix() for p in (ROOT / top).rglob("*") if p.is_file())
        assert got == want, f"{top}/ 的文件不同：请运行 make release"
        for rel in want:
            assert _normalized(course / top / rel) == _normalized(ROOT / top / rel), \
                f"{top}/{rel} 和 source/ 不同步：请运行 make release（python -m lib.tools.regenerate）"


VALIDATE_SCRIPT = r"""
import json, sys
from traitlets.config.loader import PyFileConfigLoader
from nbgrader.validator import Validator

config = PyFileConfigLoader("nbgrader_config.py", path=".").load_config()
results = {}
for path, validate_all in json.loads(sys.argv[1]):
    validator = Validator(config=config, validate_all=validate_all)
    results[path] = {k: [c.get("raw_error", c.get("source", ""))[-1500:] for c in v]
                     for k, v in validator.validate(path).items()}
print(json.dumps(results))
"""


def _validate_many(course: Path, jobs) -> dict:
    """用 nbgrader 的 Validator（JupyterLab 里 Validate 按钮用的同一个类）依次检查几个 notebook：
    一个进程里做完，省掉每次启动 nbgrader 命令的时间。返回 {路径: {"failed"/"changed"/...: [...]}}。"""
    result = run_with_kernels([sys.executable, "-c", VALIDATE_SCRIPT, json.dumps(jobs)], cwd=course,
                              env=nbgrader_env(), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_nbgrader_validate_source_passes_and_release_fails(tmp_path):
    """source/：每个测试（含隐藏测试）都通过，并且每个代码单元格都不报错、不写 stderr（validate_all）。
    release/：没有作答，validate 必须报告失败（代码题的测试失败；文字题的答题单元格没改动）。"""
    course = make_course(tmp_path / "course")
    lanes = [[(f"source/{ASSIGNMENT}/{n}.ipynb", True) for n in NOTEBOOKS[i::2]]
             + [(f"release/{ASSIGNMENT}/{n}.ipynb", False) for n in NOTEBOOKS[i::2]] for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        results = {k: v for r in pool.map(lambda lane: _validate_many(course, lane), lanes) for k, v in r.items()}
    for name in NOTEBOOKS:
        src = results[f"source/{ASSIGNMENT}/{name}.ipynb"]
        assert src == {}, f"source/{name} 没通过 nbgrader validate：{src}"
        rel = results[f"release/{ASSIGNMENT}/{name}.ipynb"]
        assert rel.get("failed"), f"release/{name} 不应通过 validate：{rel}"
    # 练习 10 只有人工评分的单元格：validate 报失败是因为答题单元格还是原样（校验和没变）
    release = read_nb(course / "release" / ASSIGNMENT / "06_hands_on.ipynb")
    answers = [c for c in release.cells if nbg(c).get("solution")]
    assert answers and all(c.source.strip() == "在这里写下你的答案。" for c in answers)


# --- 往返：四份提交 ------------------------------------------------------------


def _answer_cells(nb) -> dict:
    return {nbg(c)["grade_id"]: c for c in nb.cells if nbg(c).get("solution")}


def _submission(kind: str) -> dict:
    """从 release/ 搭出一份提交：{notebook 名: NotebookNode}。"""
    out = {}
    for name in NOTEBOOKS:
        nb = read_nb(ROOT / "release" / ASSIGNMENT / f"{name}.ipynb")
        if kind != "blank":
            solution = _answer_cells(read_nb(ROOT / "solutions" / ASSIGNMENT / f"{name}.ipynb"))
            for gid, cell in _answer_cells(nb).items():
                cell.source = solution[gid].source
                if "noisy" in kind and cell.cell_type == "code":
                    cell.source = _make_noisy(cell.source)
        out[name] = nb
    if "wrong" in kind:  # 典型错误：打分乘以 √d_k 而不是除以
        cell = _answer_cells(out["01_attention_by_hand"])["ex1_self_attention_answer"]
        assert "/ np.sqrt(d_k)" in cell.source
        cell.source = cell.source.replace("/ np.sqrt(d_k)", "* np.sqrt(d_k)")
    return out


def _make_noisy(source: str) -> str:
    """正确答案，但每次运行都打印、写 stderr、发警告、写日志（函数体里也是）。"""
    noise = ('print("调试输出"); print("写到 stderr", file=__import__("sys").stderr); '
             '__import__("warnings").warn("学生代码的警告"); __import__("logging").getLogger("student").error("日志")')
    lines = []
    for line in source.splitlines():
        lines.append(line)
        if line.strip() == "### BEGIN SOLUTION":
            lines.append(line[: len(line) - len(line.lstrip())] + noise)
    return "import logging\nlogging.basicConfig()\n" + "\n".join(lines)


EXPECTED = {  # 自动评分的分数（人工评分的单元格在 formgrader 里由助教打分，这里都还是 0）
    "correct": AUTOGRADED_POINTS,
    "blank": 0,
    # 吵闹的正确答案（每次运行都打印、写 stderr、发警告、写日志），只有练习 1 的打分乘了 √d_k：
    # 噪声不影响评分，错的那题恰好丢它自己的分
    "noisy_wrong": AUTOGRADED_POINTS - ec.CHECKS["ex1_self_attention"].points,
}


# 只看 nbgrader 自己的日志行（"[AutogradeApp | ERROR] ..."）。内核子进程在关闭时偶尔会把
# "ERROR:tornado.general ... ZMQError: Socket operation on non-socket" 写到同一个 stderr：
# 这是 ipykernel 关闭时的竞争（ipython/ipykernel#1518），不影响评分；分数下面逐一核对。
NBGRADER_ERROR = re.compile(r"^\[\w+ \| (?:ERROR|CRITICAL)\].*$", re.MULTILINE)


def _log_excerpt(stderr: str, limit: int = 3000) -> str:
    """失败时给人看的日志：第一个 Traceback（nbgrader 把学生的出错原因打印在前面）加上结尾。"""
    start = stderr.find("Traceback")
    if start < 0 or len(stderr) <= 2 * limit:
        return stderr[-2 * limit:]
    return stderr[start:start + limit] + "\n…\n" + stderr[-limit:]


def _grade_in_course(course: Path, students) -> dict:
    """像助教一样：发布（写 gradebook）→ 收作业 → autograde → generate_feedback → export。返回 grades.csv 的行。"""
    result = nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    assert result.returncode == 0, result.stderr[-3000:]
    for student in students:
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        for name, nb in _submission(student).items():
            nbformat.write(nb, folder / f"{name}.ipynb")
        (folder / "timestamp.txt").write_text("2026-11-20 12:00:00.000000 UTC")
    for step in (["autograde", ASSIGNMENT], ["generate_feedback", ASSIGNMENT], ["export"]):
        result = nbgrader(course, *step)
        assert result.returncode == 0, f"nbgrader {' '.join(step)} 失败：\n{_log_excerpt(result.stderr)}"
        errors = NBGRADER_ERROR.findall(result.stderr)
        assert not errors, f"nbgrader {' '.join(step)} 记录了错误：\n{_log_excerpt(result.stderr)}"
    with open(course / "grades.csv", newline="", encoding="utf-8") as f:
        return {row["student_id"]: row for row in csv.DictReader(f)}


@pytest.mark.slow
def test_round_trip_autograde_feedback_export(tmp_path):
    # nbgrader 的 autograde 是串行的：两个临时课程（各自的 gradebook）同时评，墙钟时间约减半
    groups = [("correct",), ("blank", "noisy_wrong")]  # 空白的那份很快：两个课程差不多同时评完
    courses = [make_course(tmp_path / f"course{i}", with_generated=False) for i in range(len(groups))]
    with ThreadPoolExecutor(len(groups)) as pool:
        results = list(pool.map(_grade_in_course, courses, groups))
    rows = {k: v for r in results for k, v in r.items()}
    scores = {s: float(rows[s]["score"]) for s in EXPECTED}
    print("grades.csv 的分数：", scores)
    assert scores == {s: float(v) for s, v in EXPECTED.items()}, scores
    assert all(float(rows[s]["max_score"]) == course_points() for s in EXPECTED)

    # 每个 notebook 的分数：错的那份只在 01 丢了 ex1_self_attention 的分
    from nbgrader.api import Gradebook

    for course, students in zip(courses, groups):
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            for student in students:
                per_nb = {nb.name: nb.score for nb in gb.find_submission(ASSIGNMENT, student).notebooks}
                for name in NOTEBOOKS:
                    want = sum(c.points for c in ec.CHECKS.values() if c.notebook == name)
                    if student == "blank":
                        want = 0
                    if student == "noisy_wrong" and name == "01_attention_by_hand":
                        want -= ec.CHECKS["ex1_self_attention"].points
                    assert per_nb[name] == want, f"{student}/{name}: {per_nb[name]} != {want}"
        for student in students:
            feedback = sorted((course / "feedback" / student / ASSIGNMENT).glob("*.html"))
            assert [p.stem for p in feedback] == NOTEBOOKS
    assert not (ROOT / "gradebook.db").exists() and not (ROOT / "submitted").exists()


# ----------------------------------------------------------------------------
# issue 20（两次新人试评）：分数都对，但这些说明说错了原因
# ----------------------------------------------------------------------------

_SA = """
def self_attention(Q, K, V, mask=None):
    s = {scores}
    if mask is not None:
        s = np.where({mask}, s, -np.inf)
    s = s - s.max({axis}, keepdims=True)
    w = np.exp(s); w = w / w.sum({axis}, keepdims=True)
    return w @ V, w
"""
_SWAP = "Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])"

FRESH_EYES = [  # (grade_id, 学生的答案, 得分比例, 说明里要有的话, 说明里不能有的话)
    ("ex1_outputs", "weights_1 = np.array([[0.5, 0.5], [0.881, 0.119]])\noutputs_1 = weights_1 @ np.eye(2)",
     0.0, "和你的 weights_1 一致；错在打分没有除以 √2", "第 i 行是 o_i"),
    ("ex1_self_attention", _SA.format(scores="Q @ K.T / np.sqrt(Q.shape[-1])", mask="mask", axis="-1"),
     4 / 8, "有批维度 + 掩码（每句不同的掩码、要广播的掩码）（2 分）：Q 的形状 (3, 3, 3)、掩码 (3, 3, 3)："
            "注意力权重和参考答案不一致。看起来用了 K.T", "检查打分"),
    ("ex1_self_attention", "def self_attention(Q, K, V, mask=None):\n    raise NotImplementedError()",
     0.0, "NotImplementedError", "有批维度时"),
    ("ex1_self_attention", _SA.format(scores=_SWAP, mask="np.swapaxes(mask, -1, -2)", axis="-1"),
     4 / 8, "掩码挡住的是行而不是列", "。；"),
    ("ex1_self_attention", _SA.format(scores=_SWAP, mask="mask", axis="-2"),
     0.0, "softmax 按列做了", "检查打分"),
    ("ex4_average_query", "def average_query(K, a, b):\n    return 20.0 * K[a]",
     0.0, "方向不对", "c 足够大"),
    ("ex4_copy_query", "def copy_query(K, a):\n    return 20.0 * K[(a + 1) % len(K)]", 0.0, "方向不对", "c ≥ ln"),
    ("ex11_cached_generation", """
_g = generate_cached
def generate_cached(model, prompt, max_new_tokens):
    model(prompt, kv_cache=model.new_kv_cache())   # 多送了一遍提示
    return _g(model, prompt, max_new_tokens)
""",
     3 / 6, "不超过 n + m = ", "应是 n + m − 1"),
    ("ex7_crossover", "def crossover_length(d):\n    return 4.0 * d", 0.5 / 2, "得到 16384，应为 24576", "16384."),
]


@pytest.mark.parametrize("grade_id,source,want,says,never", FRESH_EYES,
                         ids=[f"{g}-{i}" for i, (g, *_) in enumerate(FRESH_EYES)])
def test_fresh_eyes_messages_name_the_real_cause(reference, grade_id, source, want, says, never):
    ns = _with(reference[ec.CHECKS[grade_id].notebook], source)
    fraction, message = ec.grade(grade_id, ns, 0)
    assert fraction == pytest.approx(want), message
    assert says in message, message
    assert never not in message, message
    assert "。；" not in message and "。。" not in message, message


def test_integer_valued_floats_are_shown_without_a_trailing_dot():
    from lib import answer_format as fmt

    assert fmt.shown(4.0, 1.0) == ("4", "1")
    assert fmt.shown([4.0, 1.5], [1.0, 2.0]) == ("[4, 1.5]", "[1, 2]")
    assert fmt.shown(0.123456, 0.1235) == ("0.12346", "0.1235")


def _visible_test(name: str, grade_id: str) -> str:
    """source/ 里一个测试单元格的公开部分（去掉隐藏测试）。"""
    cell = next(c for c in read_nb(ROOT / "source" / ASSIGNMENT / f"{name}.ipynb").cells if nbg(c).get("grade_id") == grade_id)
    return re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "", cell.source, flags=re.S)


AXIS_ONLY = {  # 只对坐标轴方向的键成立
    "ex4_copy_query": "def copy_query(K, a):\n    q = np.zeros(K.shape[1]); q[a] = 20.0\n    return q\n",
    "ex4_average_query": "def average_query(K, a, b):\n    q = np.zeros(K.shape[1]); q[[a, b]] = 20.0\n    return q\n",
}


@pytest.mark.parametrize("grade_id", ["ex4_copy_query", "ex4_average_query"])
def test_visible_query_tests_catch_an_axis_only_answer(reference, grade_id):
    """公开测试里有一组转过的正交键：只对坐标轴方向成立的答案交之前就失败（评分时它得 0 分），参考答案照样通过。"""
    nb1 = "01_attention_by_hand"
    copy_test, test = _visible_test(nb1, "ex4_copy_query"), _visible_test(nb1, grade_id)
    ns = dict(reference[nb1])
    exec(copy_test, ns)  # noqa: S102  定义 attention_weights 和那几组键；参考答案通过
    exec(test, ns)  # noqa: S102
    exec(AXIS_ONLY[grade_id], ns)  # noqa: S102
    with pytest.raises(AssertionError):
        exec(test, ns)  # noqa: S102
    assert ec.grade(grade_id, _with(reference[nb1], AXIS_ONLY[grade_id]), 0)[0] < 1.0


@pytest.mark.parametrize("path", sorted((ROOT / "source" / "exercises").glob("*.ipynb")), ids=lambda p: p.stem)
def test_the_points_table_in_an_exercise_header_matches_its_graded_cells(path):
    """第一个单元格的分值表（“| 练习 | 内容 | 分值 |”，最后一行“合计”）：各行加起来是合计，合计是评分单元格的分数之和。
    加了或改了一个评分单元格而忘了改这张表，学生看到的分值就是错的。"""
    nb = nbformat.read(path, as_version=4)
    head = nb.cells[0].source
    total = re.search(r"合计\s*\|\s*\*{0,2}(\d+)", head)
    rows = [sum(int(x) for x in re.findall(r"\d+", cell)) for cell in
            re.findall(r"^\|[^|\n]*\|[^|\n]*\|\s*([\d\s+]+)\s*\|\s*$", head, re.M)]
    graded = sum(c.metadata.get("nbgrader", {}).get("points", 0) or 0 for c in nb.cells
                 if c.metadata.get("nbgrader", {}).get("grade"))
    assert total and rows, f"{path.name} 的第一个单元格里找不到分值表（最后一行“合计”）"
    assert rows[-1] == int(total.group(1)) and sum(rows[:-1]) == rows[-1] == graded, (
        f"{path.name}：分值表各行之和 {sum(rows[:-1])}、合计 {rows[-1]}、评分单元格的分数之和 {graded} 应该相同："
        "改第一个单元格里的分值表")


def test_the_exercise_map_in_the_grading_package_matches_the_notebooks():
    """lib/grading/exercises/__init__.py 的表（讲义练习 → notebook → 模块）和 source/ 里的 grade_id、模块名一致。"""
    import lib.grading.exercises as pkg
    rows = re.findall(r"^([\d、]+)\s+(\d\d_\w+)\s+(\S+)", pkg.__doc__, re.M)
    assert rows, "lib/grading/exercises/__init__.py 的文档字符串里找不到练习的表"
    table = {nb: ({int(x) for x in ex.split("、")}, module) for ex, nb, module in rows}
    for path in sorted((ROOT / "source" / "exercises").glob("*.ipynb")):
        ids = [c.metadata.get("nbgrader", {}).get("grade_id", "") for c in nbformat.read(path, as_version=4).cells]
        numbers = {int(m.group(1)) for gid in ids if (m := re.match(r"ex(\d+)", gid))}
        assert path.stem in table and table[path.stem][0] == numbers, (
            f"{path.stem}：grade_id 里的练习是 {sorted(numbers)}，lib/grading/exercises/__init__.py 的表里写的是 "
            f"{sorted(table.get(path.stem, (set(),))[0])}：改那张表")
        module = table[path.stem][1]
        assert module.startswith("没有模块") or (Path(pkg.__file__).parent / module.split("（")[0]).is_file(), (path.stem, module)
