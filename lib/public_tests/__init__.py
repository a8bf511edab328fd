"""公开测试：练习 notebook 里每个测试单元格的可见部分（学生作答时运行；nbgrader 的 Validate 也运行它）。

测试单元格里只有一行 ``public_test("GRADE_ID", globals())``：Validate 没通过时先打印整个单元格的源码，
单元格短，原因才在眼前。测试本身在这里，每个练习 notebook 一个模块（``nbNN_exK.py``：notebook 的编号和
讲义练习的编号，和评分的 ``lib/grading/exercises/`` 里的同名模块一一对应）：

- **通过**：打印一行 “✓ 通过公开测试（评分时还有隐藏测试）”，不返回任何东西（nbgrader 会把测试单元格最后一个
  表达式的数值当成部分分）。
- **没通过**：抛出 ``answer_format.CheckFailed``（或它的子类）。在 Jupyter 里只显示 “✗ 中文说明”；
  你的函数自己出错时，再显示你的代码里出错的位置（见 ``answer_format.StudentCodeError``）。
- **评分时**（``NBGRADER_EXECUTION=autograde``：nbgrader autograde 和 lib/grading 的沙箱都这样设置）：同样的说明
  打印出来（进反馈），但不抛出，分数只由后面的隐藏检查决定。否则普通的 nbgrader 会因为公开测试出错给这个单元格
  0 分：一个做对一半的函数丢掉部分分，一个对的答案因为和上一步的错答案不自洽而丢分。
- **手算的数**（练习 1、5）：不检查数值（那会透露答案），只检查格式、自洽（权重是不是你自己的打分按行做的
  softmax、输出是不是你的权重乘 V……）和典型错误（打分等于没有缩放的 q·k……）。
- **典型错误的说法**：每个模块的 ``MISTAKES`` 和评分时的隐藏检查是同一句话（检查一段从这里导入它）。
- **格式**：和评分、自查同一套规则（``lib/answer_format.py``）。两个手算的数之间的关系用 ``"hand_relation"`` 的容差。

这个包只用 numpy 和 ``lib.answer_format``（用到 torch 的测试在函数里才导入）：评分进程导入 ``MISTAKES`` 时不导入 torch。
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Callable

from lib.answer_format import CheckFailed

PASSED = "✓ 通过公开测试（评分时还有隐藏测试）"


def need(namespace: dict, name: str):
    """namespace 里的 name；没有时用中文说明（而不是 NameError）。"""
    if name not in namespace:
        raise CheckFailed(f"还没有定义 {name}：先运行上面的答题单元格；运行过了的话，看它下面有没有红字（语法错误？），名字拼对了吗？")
    return namespace[name]


def expect(condition, message: str) -> None:
    """condition 不成立时没通过，message 是给学生看的中文说明。"""
    if not condition:
        raise CheckFailed(message)


def _collect() -> dict[str, Callable[[dict], None]]:
    """{grade_id: 测试}，来自每个 nbNN_exK.py 的 TESTS。"""
    tests: dict = {}
    for path in sorted(Path(__file__).resolve().parent.glob("nb*.py")):
        module = importlib.import_module(f"{__name__}.{path.stem}")
        for grade_id, test in module.TESTS.items():
            if grade_id in tests:
                raise ValueError(f"公开测试 {grade_id!r} 在两个模块里都有（{path.name}）")
            tests[grade_id] = test
    return tests


def public_test(grade_id: str, namespace: dict) -> None:
    """运行一个测试单元格的公开测试。namespace 是 notebook 的全局变量（在单元格里写 globals()）。"""
    try:
        _run(TESTS[grade_id], namespace)
    except CheckFailed as failure:
        if os.environ.get("NBGRADER_EXECUTION") != "autograde":
            raise
        print("\n".join(failure._render_traceback_()))  # 评分时：只报告，分数由隐藏检查决定（见模块说明）
        return
    print(PASSED)


def _run(test: Callable[[dict], None], namespace: dict) -> None:
    try:
        test(namespace)
    except CheckFailed:
        raise
    except Exception as err:  # noqa: BLE001  答案古怪到测试本身没法算下去：说明是哪一步，不显示 lib/ 里的调用栈
        raise CheckFailed(f"公开测试没能检查你的答案（{type(err).__name__}: {err}）：先看答案的格式和形状对不对") from err


TESTS = _collect()
