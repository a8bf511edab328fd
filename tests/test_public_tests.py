"""公开测试（lib/public_tests/）：学生作答时看到的反馈（issue 42 第 3 项）。

- 手算的答案：公开测试不透露答案，查格式、自洽、典型错误和是否在容差 ±0.01 之内（评分时会扣分的，公开测试一定
  不通过，只说原因）。下面的表先写下“应该抓住哪些错、必须放过哪些对的写法”（包括按题目的容差 ±0.01 四舍五入的
  手写值），再逐行检查；典型错误在评分说明里是同一句话（MISTAKES）。
- 反馈的样子：没通过时 Jupyter 里只显示 “✗ 中文说明”（``_render_traceback_``），不显示 lib/ 里的调用栈；
  学生自己的函数出错时，显示出错的位置（学生的代码）；通过时打印一行 ✓。用 nbclient 真的执行一次来检查。
"""
from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

from lib import answer_format as fmt
from lib import selfcheck
from lib.grading import exercise_checks as ec
from lib.public_tests import PASSED, TESTS, public_test
from lib.public_tests import nb01_ex1_ex4 as nb01  # notebook 01 = 练习 1、4（grade_id ex1_*、ex4_*）
from lib.public_tests import nb02_ex2_ex3 as nb02
from lib.public_tests import nb03_ex5 as nb03
from lib.public_tests import nb04_ex6_ex7 as nb04
from lib.public_tests import nb05_ex8_ex11 as nb05

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

RIGHT_HAND = {"scores_1": [[0.707, 0.707], [0.707, -0.707]], "weights_1": [[0.5, 0.5], [0.804, 0.196]],
              "outputs_1": [[0.5, 0.5], [0.804, 0.196]]}
RIGHT_ROPE = {"q_tilde_a": [0.5, 0.866], "k_tilde_a": [0.866, 0.5], "dot_a": 0.866, "dot_b": 0.866, "dot_c": 0.866}


def _hand(**changes) -> dict:
    ns = {k: np.array(v) for k, v in {**RIGHT_HAND, **RIGHT_ROPE}.items()}
    ns.update(changes)
    return ns


# ---------------------------------------------------------------------------- 预测：必须放过的对的写法
# (grade_id, 说明, 答案)：公开测试通过；评分也是满分（在“hand”的 ±0.01 之内）
RIGHT = [
    ("ex1_scores", "讲义的答案 0.707", _hand()),
    ("ex1_scores", "两位小数 0.71", _hand(scores_1=np.array([[0.71, 0.71], [0.71, -0.71]]))),
    ("ex1_scores", "一位小数 0.7（差 0.0071，仍在 ±0.01 内）", _hand(scores_1=np.array([[0.7, 0.7], [0.7, -0.7]]))),
    ("ex1_scores", "四舍五入不一致 0.71 / 0.70", _hand(scores_1=[[0.71, 0.70], [0.70, -0.71]])),
    ("ex1_scores", "算出来的 1/√2，形状 (1, 2, 2)", _hand(scores_1=[(np.array([[1, 1], [1, -1]]) / math.sqrt(2)).tolist()])),
    ("ex1_weights", "讲义的答案 (0.5, 0.5), (0.804, 0.196)", _hand()),
    ("ex1_weights", "0.8 / 0.2", _hand(weights_1=np.array([[0.5, 0.5], [0.8, 0.2]]))),
    ("ex1_weights", "0.81 / 0.20（行和 1.01，每个数都在 ±0.01 内）", _hand(weights_1=np.array([[0.5, 0.5], [0.81, 0.2]]))),
    ("ex1_weights", "0.80 / 0.19（行和 0.99）", _hand(weights_1=np.array([[0.5, 0.5], [0.80, 0.19]]))),
    ("ex1_weights", "打分写 0.71，权重是它的 softmax", _hand(scores_1=np.array([[0.71, 0.71], [0.71, -0.71]]),
                                                    weights_1=np.array([[0.5, 0.5], [0.805, 0.195]]))),
    ("ex1_weights", "打分还没填", _hand(scores_1=None)),
    ("ex1_outputs", "讲义的答案（= 权重）", _hand()),
    ("ex1_outputs", "0.8 / 0.2，权重写 0.804 / 0.196", _hand(outputs_1=np.array([[0.5, 0.5], [0.8, 0.2]]))),
    ("ex1_outputs", "权重还没填", _hand(weights_1=None)),
    ("ex5_numbers", "讲义精度", _hand()),
    ("ex5_numbers", "两位小数 0.87", _hand(q_tilde_a=[0.5, 0.87], k_tilde_a=[0.87, 0.5], dot_a=0.87)),
    ("ex5_numbers", "每个数都偏 0.009（|q̃| = 1.012，q̃·k̃ − dot_a = 0.034）",
     _hand(q_tilde_a=[0.509, 0.875], k_tilde_a=[0.875, 0.509], dot_a=0.857)),
    ("ex5_numbers", "点积写成 1×1 的数组", _hand(dot_a=np.array([[0.866]]))),
]

# (grade_id, 说明, 答案, MISTAKES 的键或一句话)：公开测试没通过，说出这个错误
WRONG = [
    ("ex1_scores", "没有除以 √2", _hand(scores_1=np.array([[1.0, 1.0], [1.0, -1.0]])), "unscaled"),
    ("ex1_scores", "乘了 √2（两位小数）", _hand(scores_1=np.array([[1.41, 1.41], [1.41, -1.41]])), "times_sqrt"),
    ("ex1_scores", "除以 d_k = 2", _hand(scores_1=np.array([[0.5, 0.5], [0.5, -0.5]])), "over_d"),
    ("ex1_scores", "最后一个的符号错了", _hand(scores_1=np.array([[0.707, 0.707], [0.707, 0.707]])), "not_one_divisor"),
    ("ex1_scores", "全部变号", _hand(scores_1=-np.array(RIGHT_HAND["scores_1"])), "not_one_divisor"),
    ("ex1_weights", "按列做 softmax", _hand(weights_1=np.array([[0.5, 0.804], [0.5, 0.196]])), "columns"),
    ("ex1_weights", "用了没缩放的打分", _hand(weights_1=np.array([[0.5, 0.5], [0.881, 0.119]])), "weights_unscaled"),
    ("ex1_weights", "一行之和不是 1", _hand(weights_1=np.array([[0.5, 0.5], [0.804, 0.3]])), "rows"),
    ("ex1_weights", "负数", _hand(weights_1=np.array([[0.5, 0.5], [1.2, -0.2]])), "negative"),
    ("ex1_weights", "不是自己打分的 softmax", _hand(weights_1=np.array([[0.5, 0.5], [0.7, 0.3]])), "not_own_softmax"),
    ("ex1_weights", "除以 √2 两次（= 除以 d_k，0.731）", _hand(weights_1=np.array([[0.5, 0.5], [0.731, 0.269]])),
     "weights_over_d"),
    ("ex1_weights", "乘了 √2（0.944）", _hand(weights_1=np.array([[0.5, 0.5], [0.944, 0.056]])), "weights_times_sqrt"),
    # 对的权重、错的打分：两者不一致（说“至少有一个不对”），评分时权重照样满分
    ("ex1_weights", "权重对、打分没缩放", _hand(scores_1=np.array([[1.0, 1.0], [1.0, -1.0]])), "not_own_softmax"),
    ("ex1_outputs", "转置了", _hand(outputs_1=np.array([[0.5, 0.804], [0.5, 0.196]])), "transposed"),
    ("ex1_outputs", "不等于权重乘 V", _hand(outputs_1=np.eye(2)), "not_own_outputs"),
    ("ex1_outputs", "没有权重时每行之和不是 1", _hand(weights_1=None, outputs_1=np.array([[1.0, 1.0], [0.0, 0.0]])),
     "每行之和应为 1"),
    # fs42 H4：√2 取成 1.5（差 0.013，超出 ±0.01）：评分会扣分，公开测试也要说（不说应是多少）
    ("ex1_scores", "√2 取成 1.5", _hand(scores_1=np.array([[0.667, 0.667], [0.667, -0.667]])), "sloppy_sqrt"),
    ("ex1_weights", "√2 取成 1.5", _hand(scores_1=np.array([[0.667, 0.667], [0.667, -0.667]]),
                                        weights_1=np.array([[0.5, 0.5], [0.791, 0.209]])), "sloppy_sqrt"),
    ("ex1_outputs", "√2 取成 1.5：输出 = 自己的权重 × V", _hand(weights_1=np.array([[0.5, 0.5], [0.791, 0.209]]),
                                                          outputs_1=np.array([[0.5, 0.5], [0.791, 0.209]])),
     "错在 √2 取得太粗"),
    ("ex1_scores", "处处一致、但除数错了（0.6·q·k）", _hand(scores_1=np.array([[0.6, 0.6], [0.6, -0.6]])), "wrong_divisor"),
    ("ex1_weights", "差了 0.1、又没有打分可对照", _hand(scores_1=None, weights_1=np.array([[0.5, 0.5], [0.7, 0.3]])),
     "hand_off"),
    ("ex1_outputs", "输出 = 自己的权重 × V，权重按列 softmax",
     _hand(weights_1=np.array([[0.5, 0.804], [0.5, 0.196]]), outputs_1=np.array([[0.5, 0.804], [0.5, 0.196]])),
     "和你的 weights_1 一致；错在 softmax 按列做了"),
    ("ex5_numbers", "两个都顺时针转", _hand(q_tilde_a=[0.5, -0.866], k_tilde_a=[0.866, -0.5]), "clockwise"),
    ("ex5_numbers", "只有 k̃ 顺时针", _hand(k_tilde_a=[0.866, -0.5], dot_a=0.0), "clockwise"),
    ("ex5_numbers", "q̃ 只转了 θ", _hand(q_tilde_a=[0.866, 0.5], dot_a=1.0), "same_angle"),
    ("ex5_numbers", "没有归一的旋转", _hand(q_tilde_a=[1.0, 1.732]), "旋转不改变长度"),
    ("ex5_numbers", "dot_a 不是 q̃·k̃", _hand(dot_a=0.5), "dot_a 应等于 q_tilde_a · k_tilde_a"),
]
# 公开测试有意放过、评分时才发现的错误：dot_b、dot_c 的数值（dot_c = −0.866 是 (c) 要你想的问题）。
# 练习 1 的手算没有这样的错误：评分会扣分的，公开测试一定不通过（见 test_the_public_hand_test_fails_whenever_grading_takes_points）
NOT_CAUGHT = [
    ("ex5_numbers", _hand(dot_c=-0.866)),
]
NOTEBOOK_OF = {"ex1": "01_attention_by_hand", "ex5": "03_positions_and_rope"}


def _message(grade_id, ns) -> str:
    with pytest.raises(fmt.CheckFailed) as err:
        TESTS[grade_id](ns)
    return str(err.value)


@pytest.mark.parametrize("grade_id,label,ns", RIGHT, ids=[f"{g}-{lab}" for g, lab, _ in RIGHT])
def test_right_hand_answers_pass_the_public_test_and_get_full_marks(grade_id, label, ns, capsys):
    public_test(grade_id, ns)
    assert capsys.readouterr().out == PASSED + "\n"
    if label not in ("打分还没填", "权重还没填"):
        fraction, message = ec.grade(grade_id, ns)
        assert fraction == 1.0, message


def _mistakes(grade_id):
    return (nb01 if grade_id.startswith("ex1") else nb03).MISTAKES


@pytest.mark.parametrize("grade_id,label,ns,key", WRONG, ids=[f"{g}-{lab}" for g, lab, _, _ in WRONG])
def test_typical_hand_mistakes_are_named_without_revealing_the_answer(grade_id, label, ns, key):
    message = _message(grade_id, ns)
    said = _mistakes(grade_id).get(key, key)
    assert said in message, message
    for answer in ("0.707", "0.804", "0.196", "0.866", "0.5,"):  # 答案的数值不出现在说明里
        assert answer not in message.replace(" ", ""), message
    fraction, hidden = ec.grade(grade_id, ns)
    if key in _mistakes(grade_id) and key != "not_own_softmax":  # 评分时没有记录学生的打分，看不出这一条
        assert said in hidden, hidden  # 交之后，评分说明说的是同一句话
    if label != "权重对、打分没缩放":
        assert fraction < 1.0, hidden


@pytest.mark.parametrize("grade_id,ns", NOT_CAUGHT, ids=[g for g, _ in NOT_CAUGHT])
def test_what_the_public_test_cannot_see_is_caught_when_grading(grade_id, ns):
    TESTS[grade_id](ns)
    assert ec.grade(grade_id, ns)[0] < 1.0


@pytest.mark.parametrize("divisor", np.round(np.linspace(1.0, 2.1, 45), 4))
def test_the_public_hand_test_fails_whenever_grading_takes_points(divisor):
    """一个规则（fs42 H4）：手算的三个答案，评分时会扣分的，公开测试一定不通过；在 ±0.01 之内的一定通过。
    用各种除数（√2 取得粗细不同）算出的、保留 3 位小数的答案来核对。"""
    scores = np.round(nb01.Q @ nb01.K.T / divisor, 3)
    weights = np.round(nb01.softmax_rows(scores), 3)
    ns = _hand(scores_1=scores, weights_1=weights, outputs_1=np.round(weights @ nb01.V, 3))
    for grade_id in ("ex1_scores", "ex1_weights", "ex1_outputs"):
        fraction, hidden = ec.grade(grade_id, ns)
        try:
            TESTS[grade_id](ns)
            passed, message = True, ""
        except fmt.CheckFailed as err:
            passed, message = False, str(err)
        assert passed == (fraction == 1.0), (grade_id, divisor, message, hidden)
        for answer in ("0.707", "0.804", "0.196"):
            assert answer not in message, message


def test_a_string_answer_is_told_what_is_accepted():
    """fs42 H6：字符串的列表曾得到“应是数组，得到list”，而数的列表是接受的：说出里面是字符串、接受什么。"""
    message = _message("ex1_scores", _hand(scores_1=[["0.707", "0.707"], ["0.707", "-0.707"]]))
    assert "里面是字符串" in message and "list、tuple、NumPy 数组" in message, message
    assert "0.707" not in message


def test_a_namedtuple_from_self_attention_gets_full_marks_everywhere(capsys):
    """fs42 / fe44r：return AttnOut(out, w)（namedtuple，tuple 的子类）是对的答案：公开测试 ✓、评分满分。"""
    ns = {"np": np}
    exec("from collections import namedtuple\nAttnOut = namedtuple('AttnOut', ['output', 'weights'])\n"  # noqa: S102
         + sa_src().replace("return w @ V, w", "return AttnOut(w @ V, w)"), ns)
    public_test("ex1_self_attention", ns)
    assert capsys.readouterr().out == PASSED + "\n"
    assert ec.grade("ex1_self_attention", ns) == (1.0, "正确。")
    assert fmt.read_pair(fmt.describe(ns["self_attention"](np.eye(2), np.eye(2), np.eye(2))), "x")


_TO_T = "T = lambda a: None if a is None else torch.as_tensor(a)\n"
_NUMPY_STEPS = ("    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])\n"
                "    s = s if mask is None else np.where(mask, s, -np.inf)\n"
                "    w = np.exp(s - s.max(-1, keepdims=True))\n    w = w / w.sum(-1, keepdims=True)\n    return w @ V, w\n")
_LIB = "from lib.transformer import scaled_dot_product_attention as sdpa\n" + _TO_T
_CALL_LIB = "o, w = sdpa(T(Q), T(K), T(V), T(mask))\n        return o.numpy(), w.numpy()\n"
READY_MADE_ANSWERS = {  # 把 self_attention 交给现成的实现（helper-21、helper-34 试过的写法）：每一种都被认出来
    "module alias": "import lib.transformer as tf\n" + _TO_T + (
        "def self_attention(Q, K, V, mask=None):\n"
        "    o, w = tf.scaled_dot_product_attention(T(Q), T(K), T(V), T(mask))\n    return o.numpy(), w.numpy()\n"),
    "torch functional": "import torch.nn.functional as F\n" + _TO_T + (
        "def self_attention(Q, K, V, mask=None):\n"
        "    w = torch.softmax(T(Q) @ T(K).transpose(-1, -2) / Q.shape[-1] ** 0.5, -1)\n"
        "    return F.scaled_dot_product_attention(T(Q), T(K), T(V), T(mask)).numpy(), w.numpy()\n"),
    "torch alias": "import torch.nn.functional as F\nsdpa = F.scaled_dot_product_attention\n" + _TO_T + (
        "def self_attention(Q, K, V, mask=None):\n"
        "    w = torch.softmax(T(Q) @ T(K).transpose(-1, -2) / Q.shape[-1] ** 0.5, -1)\n"
        "    return sdpa(T(Q), T(K), T(V), T(mask)).numpy(), w.numpy()\n"),
    "torch private": _TO_T + (
        "def self_attention(Q, K, V, mask=None):\n"
        "    m = None if mask is None else T(mask)\n"
        "    o, w = torch._scaled_dot_product_attention_math(T(Q), T(K), T(V), attn_mask=m)\n"
        "    return o.numpy(), w.numpy()\n"),
    "helper function": _LIB + (
        "def _attend(Q, K, V, mask):\n    if True:\n        " + _CALL_LIB +
        "def self_attention(Q, K, V, mask=None):\n    return _attend(Q, K, V, mask)\n"),
    "import inside": _TO_T + (
        "def self_attention(Q, K, V, mask=None):\n    from lib import transformer\n"
        "    o, w = transformer.scaled_dot_product_attention(T(Q), T(K), T(V), T(mask))\n"
        "    return o.numpy(), w.numpy()\n"),
    "callable object": _LIB + (
        "class Attention:\n    def __call__(self, Q, K, V, mask=None):\n        " + _CALL_LIB +
        "self_attention = Attention()\n"),
    "static helper": _LIB + (
        "class Helper:\n    @staticmethod\n    def attend(Q, K, V, mask):\n        " + _CALL_LIB +
        "def self_attention(Q, K, V, mask=None):\n    return Helper.attend(Q, K, V, mask)\n"),
    "default argument": _LIB + (
        "def self_attention(Q, K, V, mask=None, _impl=sdpa):\n"
        "    o, w = _impl(T(Q), T(K), T(V), T(mask))\n    return o.numpy(), w.numpy()\n"),
    "switched-off check": "import torch.nn.functional as F\nCHECK = False\n" + _TO_T + (
        "def self_attention(Q, K, V, mask=None):\n"
        "    if CHECK:\n        print(F.scaled_dot_product_attention(T(Q), T(K), T(V)))\n" + _NUMPY_STEPS),
}
_OWN = "def _own(Q, K, V, mask=None):\n" + _NUMPY_STEPS
READY_MADE_ANSWERS.update({  # helper-35 试过的接法：容器、属性、装饰器、字符串、函数里 import
    "in a dict": _LIB + "IMPL = {'lib': sdpa}\ndef self_attention(Q, K, V, mask=None):\n"
                 "    o, w = IMPL['lib'](T(Q), T(K), T(V), T(mask))\n    return o.numpy(), w.numpy()\n",
    "in a list": _TO_T + "IMPL = [torch._scaled_dot_product_attention_math]\ndef self_attention(Q, K, V, mask=None):\n"
                 "    o, w = IMPL[0](T(Q), T(K), T(V), attn_mask=None if mask is None else T(mask))\n"
                 "    return o.numpy(), w.numpy()\n",
    "getattr with a string": _TO_T + "def self_attention(Q, K, V, mask=None):\n"
                 "    f = getattr(torch.ops.aten, '_scaled_dot_product_attention_math')\n"
                 "    o, w = f(T(Q), T(K), T(V), attn_mask=None if mask is None else T(mask))\n    return o.numpy(), w.numpy()\n",
    "class attribute": _LIB + "class Impl:\n    f = staticmethod(sdpa)\ndef self_attention(Q, K, V, mask=None):\n"
                 "    o, w = Impl.f(T(Q), T(K), T(V), T(mask))\n    return o.numpy(), w.numpy()\n",
    "attribute of a plain object": "import torch.nn.functional as F\n" + _TO_T + "class Box:\n    pass\n"
                 "tools = Box()\ntools.attend = F.scaled_dot_product_attention\n" + _OWN +
                 "def self_attention(Q, K, V, mask=None):\n    _, w = _own(Q, K, V, mask)\n"
                 "    return tools.attend(T(Q), T(K), T(V), T(mask)).numpy(), w\n",
    "singledispatch": "import functools\n" + _LIB + "@functools.singledispatch\n"
                 "def self_attention(Q, K, V, mask=None):\n    " + _CALL_LIB.replace("        ", "    "),
    "own name then the real one": _TO_T + "def scaled_dot_product_attention(Q, K, V, mask):  # 自己的，只算权重\n"
                 "    return _own(Q, K, V, mask)[1]\n" + _OWN + "def self_attention(Q, K, V, mask=None):\n"
                 "    import torch.nn.functional as F\n    w = scaled_dot_product_attention(Q, K, V, mask)\n"
                 "    return F.scaled_dot_product_attention(T(Q), T(K), T(V), T(mask)).numpy(), w\n",
    "the course's softmax": "from lib.public_tests.nb01_ex1_ex4 import softmax_rows\ndef self_attention(Q, K, V, mask=None):\n"
                 "    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])\n"
                 "    w = softmax_rows(s if mask is None else np.where(mask, s, -np.inf))\n    return w @ V, w\n",
})
_MHA = ("def _mha(m, Q, K, V):\n"
        "    q, k, v = (T(x).float().unsqueeze(0) for x in (Q, K, V))\n"
        "    o, w = m(q, k, v)\n    return o[0].detach().numpy(), w[0].detach().numpy()\n")
READY_MADE_ANSWERS.update({  # helper-36 试过的接法：nn.MultiheadAttention 的实例、子类、子模块；按字符串找对象
    "MultiheadAttention instance": _TO_T + "mha = torch.nn.MultiheadAttention(4, 1)\n" + _MHA +
                 "def self_attention(Q, K, V, mask=None):\n    return _mha(mha, Q, K, V)\n",
    "MultiheadAttention subclass": _TO_T + "class Mine(torch.nn.MultiheadAttention):\n    pass\n" + _MHA +
                 "def self_attention(Q, K, V, mask=None):\n    return _mha(Mine(4, 1), Q, K, V)\n",
    "module holding a MultiheadAttention": _TO_T + "class Wrap(torch.nn.Module):\n"
                 "    def __init__(self, m):\n        super().__init__()\n        self.m = m\n"
                 "wrap = Wrap(torch.nn.MultiheadAttention(4, 1))\n" + _MHA +
                 "def self_attention(Q, K, V, mask=None):\n    return _mha(wrap.m, Q, K, V)\n",
})
_F_STEPS = ("    w = torch.softmax(T(Q) @ T(K).transpose(-1, -2) / Q.shape[-1] ** 0.5, -1)\n"
            "    return {F}.scaled_dot_product_attention(T(Q), T(K), T(V), T(mask)).numpy(), w.numpy()\n")
READY_MADE_ANSWERS.update({  # helper-40：torch.nn.functional 这个模块先放在别处，再从它上面取
    "module as a default argument": "import torch.nn.functional as F\n" + _TO_T +
        "def self_attention(Q, K, V, mask=None, backend=F):\n" + _F_STEPS.format(F="backend"),
    "module as an instance attribute": "import torch.nn.functional as F\n" + _TO_T +
        "class Ops:\n    def __init__(self):\n        self.F = F\nOPS = Ops()\n"
        "def self_attention(Q, K, V, mask=None):\n" + _F_STEPS.format(F="OPS.F"),
    "module in a dict": "import torch.nn.functional as F\n" + _TO_T + "BACKENDS = {'torch': F}\n"
        "def self_attention(Q, K, V, mask=None):\n" + _F_STEPS.format(F="BACKENDS['torch']"),
    "module as a parameter": "import torch.nn.functional as F\n" + _TO_T +
        "def _attend(ops, Q, K, V, mask):\n" + _F_STEPS.format(F="ops") +
        "def self_attention(Q, K, V, mask=None):\n    return _attend(F, Q, K, V, mask)\n",
})
OWN_ANSWERS = {  # 自己写的：名字和库函数一样、写成类或可调用对象、用 torch 的张量运算和 torch.softmax
    "own function with lib's name": (
        "def scaled_dot_product_attention(Q, K, V, mask):\n" + _NUMPY_STEPS +
        "def self_attention(Q, K, V, mask=None):\n    return scaled_dot_product_attention(Q, K, V, mask)\n"),
    "own static method with lib's name": (
        "class Attn:\n    @staticmethod\n    def scaled_dot_product_attention(Q, K, V, mask):\n"
        + _NUMPY_STEPS.replace("\n    ", "\n        ").replace("    s = Q", "        s = Q", 1) +
        "def self_attention(Q, K, V, mask=None):\n    return Attn.scaled_dot_product_attention(Q, K, V, mask)\n"),
    "callable object": (
        "class MultiheadAttention:  # 自己的类，名字和 torch 的一样\n"
        "    def __call__(self, Q, K, V, mask=None):\n"
        + _NUMPY_STEPS.replace("\n    ", "\n        ").replace("    s = Q", "        s = Q", 1) +
        "self_attention = MultiheadAttention()\n"),
    "own helper module with lib's name": "import types\nhelpers = types.ModuleType('helpers')\n" + _OWN + (
        "helpers.scaled_dot_product_attention = _own\n"
        "def self_attention(Q, K, V, mask=None):\n    return helpers.scaled_dot_product_attention(Q, K, V, mask)\n"),
    "SimpleNamespace with lib's name": "from types import SimpleNamespace\n" + _OWN + (
        "ns = SimpleNamespace(scaled_dot_product_attention=_own)\n"
        "def self_attention(Q, K, V, mask=None):\n    return ns.scaled_dot_product_attention(Q, K, V, mask)\n"),
    "inherited method with lib's name": _OWN + (
        "class Base:\n    def scaled_dot_product_attention(self, Q, K, V, mask):\n        return _own(Q, K, V, mask)\n"
        "class Child(Base):\n    def __call__(self, Q, K, V, mask=None):\n"
        "        return self.scaled_dot_product_attention(Q, K, V, mask)\nself_attention = Child()\n"),
    "instance attribute with lib's name": _OWN + (
        "class Attn:\n    def __init__(self):\n        self.scaled_dot_product_attention = _own\n"
        "    def __call__(self, Q, K, V, mask=None):\n        return self.scaled_dot_product_attention(Q, K, V, mask)\n"
        "self_attention = Attn()\n"),
    "library names as text": _OWN + (
        "def self_attention(Q, K, V, mask=None):\n    label = 'scaled_dot_product_attention'  # 和 torch 的对照用\n"
        "    print('MultiheadAttention', label, end='')\n    return _own(Q, K, V, mask)\n"),
    "own method named like torch's, model.eval()": _TO_T + (
        "class Head(torch.nn.Module):\n"
        "    def scaled_dot_product_attention(self, q, k, v, m):\n"
        "        s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5\n"
        "        s = s if m is None else s.masked_fill(~m, float('-inf'))\n"
        "        w = torch.softmax(s, -1)\n        return w @ v, w\n"
        "    def forward(self, Q, K, V, mask=None):\n"
        "        return self.scaled_dot_product_attention(T(Q), T(K), T(V), T(mask))\n"
        "HEAD = Head()\nCONFIG = {'scaled_dot_product_attention': 'mine', 'lib.transformer': 'not used'}\n"
        "def self_attention(Q, K, V, mask=None):\n    HEAD.eval()\n    assert CONFIG['lib.transformer']\n"
        "    print(list(HEAD.modules()), 'MultiheadAttention')\n"
        "    o, w = HEAD(Q, K, V, mask)\n    return o.numpy(), w.numpy()\n"),
    "getattr, vars, globals on own things": _OWN + (  # helper-38 的 h16、h36、h41
        "class Settings:\n    debug = False\nCFG = Settings()\nCFG.scaled_dot_product_attention = 'mine'\n"
        "def self_attention(Q, K, V, mask=None):\n"
        "    if getattr(Settings, 'debug') or globals().get('VERBOSE'):\n"
        "        print(vars(CFG)['scaled_dot_product_attention'], 'torch.nn.functional.scaled_dot_product_attention')\n"
        "    return _own(Q, K, V, mask)\n"),
    "sys.modules and an own engine": "import sys\n" + _OWN + (  # helper-38 的 h42
        "class Engine:\n    scaled_dot_product_attention = staticmethod(_own)\nENGINE = Engine()\n"
        "def self_attention(Q, K, V, mask=None):\n"
        "    if sys.modules.get('torch') is None:\n        return _own(Q, K, V, mask)\n"
        "    return ENGINE.scaled_dot_product_attention(Q, K, V, mask)\n"),
    "getattr on self, own method with torch's name": _OWN + (  # helper-39 的 h07、h30、h38
        "class Attention:\n    debug = False\n"
        "    def scaled_dot_product_attention(self, Q, K, V, mask):\n        return _own(Q, K, V, mask)\n"
        "    def multi_head_attention_forward(self, Q, K, V, mask):\n        return self.scaled_dot_product_attention(Q, K, V, mask)\n"
        "    def __call__(self, Q, K, V, mask=None):\n"
        "        if getattr(self, 'debug', False) or vars(self).get('verbose'):\n            print('debug')\n"
        "        return self.multi_head_attention_forward(Q, K, V, mask)\n"
        "self_attention = Attention()\n"),
    "import_module for an array backend": "import importlib\n" + (  # helper-39 的 h16、h41
        "CONFIG = {'lib': 'numpy'}\nDEBUG = False\n"
        "def self_attention(Q, K, V, mask=None):\n    xp = importlib.import_module(CONFIG['lib'])\n"
        "    if DEBUG:\n        print('reference: lib.transformer.scaled_dot_product_attention')\n"
        + _NUMPY_STEPS.replace("np.", "xp.")),
    "hasattr report next to getattr": "import torch.nn.functional as F\n" + _OWN + (  # helper-40
        "class Settings:\n    verbose = False\n"
        "def self_attention(Q, K, V, mask=None):\n"
        "    if getattr(Settings, 'verbose', False):\n"
        "        print('torch has sdpa:', hasattr(F, 'scaled_dot_product_attention'))\n"
        "    return _own(Q, K, V, mask)\n"),
    "torch steps": _TO_T + (
        "def self_attention(Q, K, V, mask=None):\n"
        "    s = T(Q) @ T(K).transpose(-1, -2) / Q.shape[-1] ** 0.5\n"
        "    s = s if mask is None else s.masked_fill(~T(mask), float('-inf'))\n"
        "    w = torch.softmax(s, dim=-1)\n    return (w @ T(V)).numpy(), w.numpy()\n"),
}


@pytest.mark.parametrize("how", sorted(READY_MADE_ANSWERS))
def test_using_a_ready_made_attention_is_named_and_scores_zero(how):
    """练习 1 要自己写出每一步：代码里用到 lib 或 torch 现成的注意力，公开测试 ✗、评分 0 分，说的是同一句话。"""
    ns = {"np": np, "torch": __import__("torch")}
    exec(READY_MADE_ANSWERS[how], ns)  # noqa: S102
    with pytest.raises(fmt.CheckFailed) as err:
        public_test("ex1_self_attention", ns)
    assert "现成的注意力（" in str(err.value), err.value
    fraction, message = ec.grade("ex1_self_attention", ns)
    assert fraction == 0.0 and "现成的注意力（" in message, message
    problems, _ = selfcheck.check_formats("01_attention_by_hand", ns)  # 提交前自检也说同一句话
    assert any(str(err.value) in p for p in problems), problems


@pytest.mark.parametrize("how", sorted(OWN_ANSWERS))
def test_own_code_with_library_names_or_torch_steps_gets_full_marks(how, capsys):
    """自己写的每一步，哪怕函数、方法、类和库里的同名，或者用 torch 的张量运算：不是“现成的实现”，满分。"""
    ns = {"np": np, "torch": __import__("torch")}
    exec(OWN_ANSWERS[how], ns)  # noqa: S102
    public_test("ex1_self_attention", ns)
    assert capsys.readouterr().out == PASSED + "\n"
    assert ec.grade("ex1_self_attention", ns) == (1.0, "正确。")


def _reference(notebook: str) -> dict:
    import test_exercises as te

    return te._exec_notebook(notebook)


@pytest.fixture(scope="module")
def nb4():
    return _reference("04_blocks_and_cost")


# 讲义的两个问题（练习 7）：和自己的函数一致。对的写法（含讲义的 84%）都过；和自己的函数对不上时说出来
LECTURE = [
    ("ex7_crossover", "crossover_4096 = 24576", None),
    ("ex7_crossover", "crossover_4096 = 6 * 4096", None),
    ("ex7_crossover", "crossover_4096 = np.float32(crossover_length(4096))", None),
    ("ex7_crossover", "crossover_4096 = 4096", "和你的 crossover_length(4096) = 24576 不一致"),
    ("ex7_crossover", "crossover_4096 = 24000", "和你的 crossover_length(4096) = 24576 不一致"),
    ("ex7_share", "share_128k = 0.84", None),
    ("ex7_share", "share_128k = 0.842", None),
    ("ex7_share", "share_128k = np.float32(attention_share(131072, 4096))", None),
    ("ex7_share", "share_128k = 84", nb04.MISTAKES["percent"]),
    ("ex7_share", "share_128k = 0.83", "和你的 attention_share(131072, 4096) = 0.8421 不一致"),
]


@pytest.mark.parametrize("grade_id,source,says", LECTURE, ids=[s for _, s, _ in LECTURE])
def test_lecture_answers_agree_with_the_students_own_function(nb4, grade_id, source, says):
    ns = dict(nb4)
    exec(source, ns)  # noqa: S102
    if says is None:
        TESTS[grade_id](ns)
        assert ec.grade(grade_id, ns)[0] == 1.0
    else:
        assert says in _message(grade_id, ns)
        assert ec.grade(grade_id, ns)[0] < 1.0


def sa_src(scale: str = "/ np.sqrt(Q.shape[-1])", mask: str = "mask") -> str:
    """self_attention 的一种写法：打分的缩放和掩码的用法可以换成典型的错误。"""
    return f"""
def self_attention(Q, K, V, mask=None):
    s = Q @ np.swapaxes(K, -1, -2) {scale}
    if mask is not None:
        s = np.where({mask}, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return w @ V, w
"""


M1, M2, M3, M4, M5 = nb01.MISTAKES, nb02.MISTAKES, nb03.MISTAKES, nb04.MISTAKES, nb05.MISTAKES
FUNCTIONS = [  # (notebook, grade_id, 学生的答案, 公开测试里的一句话, 评分说明里的一句话)
    ("01_attention_by_hand", "ex1_self_attention", sa_src(scale=""), M1["sa_unscaled"], M1["sa_unscaled"]),
    ("01_attention_by_hand", "ex1_self_attention", sa_src(scale="* np.sqrt(Q.shape[-1])"),
     M1["sa_times_sqrt"], M1["sa_times_sqrt"]),
    ("01_attention_by_hand", "ex1_self_attention", sa_src(scale="/ Q.shape[-1]"), M1["sa_over_d"], M1["sa_over_d"]),
    ("01_attention_by_hand", "ex1_self_attention", sa_src(mask="np.ones_like(mask)"),
     M1["mask_ignored"], M1["mask_ignored"]),
    ("01_attention_by_hand", "ex1_self_attention", sa_src(mask="~mask"), M1["mask_nan"], M1["mask_nan"]),
    ("01_attention_by_hand", "ex1_self_attention", sa_src(mask="np.swapaxes(mask, -1, -2)"),
     "右上角", "掩码挡住的是行而不是列"),
    # fs42：公开的例子都是 d_k = d_v = n_k 时，除以 √d_v、√n_k 曾得到 ✓
    ("01_attention_by_hand", "ex1_self_attention", sa_src(scale="/ np.sqrt(V.shape[-1])"),
     M1["sa_wrong_dim"], M1["sa_wrong_dim"]),
    ("01_attention_by_hand", "ex1_self_attention", sa_src(scale="/ np.sqrt(K.shape[-2])"),
     M1["sa_wrong_dim"], M1["sa_wrong_dim"]),
    # fs42：只说出症状的错误，现在说出原因
    ("01_attention_by_hand", "ex1_self_attention", sa_src().replace("return w @ V, w", "return w, w @ V"),
     M1["sa_swapped"], M1["sa_swapped"]),
    ("01_attention_by_hand", "ex1_self_attention", sa_src().replace("np.swapaxes(K, -1, -2)", "K.T"),
     M1["batch_transpose"], M1["batch_transpose"]),
    ("01_attention_by_hand", "ex1_self_attention",
     sa_src(mask="True").replace("return w @ V, w", "w = w if mask is None else w * mask\n    return w @ V, w"),
     M1["mask_after_softmax"], M1["mask_after_softmax"]),
    ("01_attention_by_hand", "ex1_self_attention", sa_src().replace("-1, keepdims", "-2, keepdims"),
     M1["sa_columns"], M1["sa_columns"]),
    ("02_scaling_and_equivariance", "ex2_variance", "def score_variance(d_k, sigma):\n    return d_k * sigma**2",
     M2["sigma_squared"], M2["sigma_squared"]),
    ("02_scaling_and_equivariance", "ex2_divisor", "def score_divisor(d_k, sigma):\n    return math.sqrt(d_k)",
     M2["forgot_sigma"], M2["forgot_sigma"]),
    ("02_scaling_and_equivariance", "ex2_divisor", "def score_divisor(d_k, sigma):\n    return d_k * sigma**4",
     M2["variance_not_std"], M2["variance_not_std"]),
    ("02_scaling_and_equivariance", "ex3_equivariance",
     "def equivariance_gap(X, W_q, W_k, W_v, perm, causal=False):\n"
     "    return float(np.abs(sa_numpy(X[perm], W_q, W_k, W_v) - sa_numpy(X, W_q, W_k, W_v)[perm]).max())",
     M2["no_causal"], M2["no_causal"]),
    ("03_positions_and_rope", "ex5_rotate_2d",
     "def rotate_2d(x, angle):\n    c, s = math.cos(angle), math.sin(angle)\n    return np.array([[c, s], [-s, c]]) @ x",
     M3["clockwise"], M3["clockwise"]),
    ("04_blocks_and_cost", "ex7_share", "def attention_share(n, d):\n    return n / (6 * d)",
     M4["ratio_not_share"], M4["ratio_not_share"]),
    ("05_masks_and_kv_cache", "ex8_pad_mask", "def key_padding_mask(pad_mask):\n    return pad_mask[:, None, :, None]",
     M5["pad_rows"], M5["pad_rows"]),
    ("05_masks_and_kv_cache", "ex11_counts", "def positions_with_cache(n, m):\n    return n * m + m",
     M5["prompt_once"], M5["prompt_once"]),
]


@pytest.fixture(scope="module")
def references():
    return {}


@pytest.mark.parametrize("notebook,grade_id,source,visible,hidden", FUNCTIONS,
                         ids=[f"{row[1]}-{i}" for i, row in enumerate(FUNCTIONS)])
def test_function_mistakes_are_named_the_same_before_and_after_submitting(references, notebook, grade_id, source,
                                                                          visible, hidden):
    if notebook not in references:
        references[notebook] = _reference(notebook)
    ns = dict(references[notebook])
    exec(source, ns)  # noqa: S102
    message = _message(grade_id, ns)
    assert visible in message, message
    fraction, said = ec.grade(grade_id, ns)
    assert fraction < 1.0 and hidden in said, said


# ---------------------------------------------------------------------------- 反馈的样子


def test_check_failures_render_as_one_chinese_line():
    err = fmt.CheckFailed("scores_1 和 q·k 相等：没有除以 √d_k = √2。")
    assert err._render_traceback_() == ["✗ scores_1 和 q·k 相等：没有除以 √d_k = √2。"]
    assert isinstance(err, AssertionError) and issubclass(fmt.FormatError, fmt.CheckFailed)


def test_the_students_own_error_keeps_their_frames_and_drops_the_course_frames():
    namespace: dict = {}
    exec(compile("def self_attention(Q, K, V, mask=None):\n    return Q @ K.T / undefined_name\n",  # noqa: S102
                 "<学生的单元格>", "exec"), namespace)
    with pytest.raises(fmt.StudentCodeError) as err:
        fmt.call(namespace["self_attention"], np.eye(2), np.eye(2), np.eye(2))
    lines = err.value._render_traceback_()
    text = "\n".join(lines)
    assert lines[0] == "✗ 调用 self_attention(...) 时你的函数出错了：NameError: name 'undefined_name' is not defined"
    assert "<学生的单元格>" in text and "undefined_name" in text
    assert "answer_format.py" not in text and "public_tests" not in text


def test_an_unanswered_function_says_so_in_one_line():
    def copy_query(K, a):
        raise NotImplementedError()

    with pytest.raises(fmt.NotAnswered) as err:
        public_test("ex4_copy_query", {"copy_query": copy_query})
    assert err.value._render_traceback_() == ["✗ copy_query(K, 1)：还没有作答（仍是 raise NotImplementedError()）"]



@pytest.mark.parametrize("grade_id,ns,points", [
    ("ex1_weights", _hand(scores_1=np.array([[1.0, 1.0], [1.0, -1.0]])), None),  # 权重对，和错的打分不自洽
    ("ex5_numbers", _hand(q_tilde_a=[0.5, -0.866], k_tilde_a=[0.866, -0.5]), 1.8),  # 三个点积对：部分分
], ids=["right-weights-wrong-scores", "clockwise-partial"])
def test_when_grading_the_public_test_reports_and_the_hidden_check_scores(grade_id, ns, points, monkeypatch, capsys):
    """评分时（nbgrader autograde、lib/grading 的沙箱：NBGRADER_EXECUTION=autograde）公开测试只打印 “✗ 说明”、不抛出：
    普通的 nbgrader 给的分数就是隐藏检查的分数（对的答案不因为别的答案错而丢分，做对一部分的照样有部分分）。"""
    with pytest.raises(fmt.CheckFailed):  # 作答、Validate 时：照常没通过
        public_test(grade_id, ns)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    public_test(grade_id, ns)
    printed = capsys.readouterr().out
    assert printed.startswith("✗ ") and PASSED not in printed, printed
    assert ec.run_check(grade_id, ns) == points  # 单元格最后一个表达式：None = 满分，数值 = 部分分

# ---------------------------------------------------------------------------- 真的在内核里执行（nbclient）

WRONG_ANSWERS = """\
scores_1 = np.array([[1.0, 1.0], [1.0, -1.0]])             # 忘了除以 √2
weights_1 = np.array([[0.5, 0.5], [0.804, 0.196]])
outputs_1 = np.array([[0.5, 0.5], [0.804, 0.196]])


def self_attention(Q, K, V, mask=None):
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        s = np.where(mask, -np.inf, s)                          # 掩码用反了
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ V, w / w.sum(-1, keepdims=True)


def copy_query(K, a):
    return 20.0 * K[a] / not_defined_anywhere                   # 学生自己的 NameError


def average_query(K, a, b):
    raise NotImplementedError()
"""


def test_the_stored_outputs_of_the_release_notebook_show_the_chinese_message_only():
    """发布版练习 01，填上错误的答案，用 nbclient 执行（nbgrader 的 Validate 也是这样执行的），看存下来的输出。"""
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "release" / "exercises" / "01_attention_by_hand.ipynb", as_version=4)
    first_answer = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("solution"))
    answer_ids = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
                  if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") in answer_ids:
            cell.source = WRONG_ANSWERS if cell.metadata["nbgrader"]["grade_id"] == answer_ids[0] else "pass"
    assert first_answer > 1
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(ROOT / "release" / "exercises")}}).execute()
    outputs = {c.metadata.get("nbgrader", {}).get("grade_id"): c.outputs for c in nb.cells if c.cell_type == "code"}
    errors = {gid: [o for o in outs if o.output_type == "error"] for gid, outs in outputs.items()}

    def traceback(gid):
        (error,) = errors[gid]
        return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error.traceback))  # 去掉颜色（ANSI 转义）

    # 手算：一行中文，没有 lib/ 里的调用栈
    assert traceback("ex1_scores") == f"✗ scores_1 {nb01.MISTAKES['unscaled']}。"
    assert errors["ex1_scores"][0].ename == "CheckFailed"
    # 掩码用反了：以前先进入 lib/answer_format.py 的三层（array → read_array → _finite）
    text = traceback("ex1_self_attention")
    assert nb01.MISTAKES["mask_nan"] in text and text.startswith("✗ ")
    for internal in ("answer_format.py", "public_tests", "Traceback", "read_array"):
        assert internal not in text, text
    # 学生自己的 NameError：中文说明 + 学生的单元格里出错的那一行
    text = traceback("ex4_copy_query")
    assert text.startswith("✗ 调用 copy_query(K, 1) 时你的函数出错了：NameError") and "not_defined_anywhere" in text
    assert "Cell In[" in text and "answer_format.py" not in text and "public_tests" not in text
    # 没作答：一行
    assert traceback("ex4_average_query") == "✗ average_query(K, 0, 2)：还没有作答（仍是 raise NotImplementedError()）"
    # 权重本身是对的，但和（错的）打分不一致：说“至少有一个不对”
    assert traceback("ex1_weights") == f"✗ weights_1 {nb01.MISTAKES['not_own_softmax']}。"
    # 通过：一行 ✓，没有别的输出（nbgrader 会把最后一个表达式的数值当成部分分）
    assert [(o.output_type, o.get("text")) for o in outputs["ex1_outputs"]] == [("stream", PASSED + "\n")]
    # 自查单元格：只有打印的报告，没有多出来的 True
    selfcheck = next(c for c in nb.cells if "check_this_notebook(" in c.source)
    assert selfcheck.outputs and all(o.output_type == "stream" for o in selfcheck.outputs), selfcheck.outputs
