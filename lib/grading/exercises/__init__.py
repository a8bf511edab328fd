"""每个练习 notebook 一个模块：exNN.py 里写着这个 notebook 的每个自动评分单元格的探针和检查，放在一起。

一个 exNN.py 有三段（用两行注释分开，见 CONTRIBUTING.md 的“怎样加一道练习”）：

1. 文件开头的导入：只在评分进程里执行（从 lib.grading.exercise_checks、lib.grading.probes 导入工具）；
2. ``# ==== 探针`` 到 ``# ==== 检查``：送进学生的内核运行（lib.grading.probes.kernel_source 把它拼在 probes.py 后面），
   定义输入（``inputs_*``）和探针，最后 ``PROBES.update({grade_id: 探针})``；
3. ``# ==== 检查`` 之后：在干净的评分进程里运行，定义参考实现和 verify，最后
   ``NOTEBOOK = "NN_名字"`` 和 ``CHECKS = [Check(grade_id, NOTEBOOK, 分值, verify), ...]``。

引擎（exercise_checks.py、probes.py、pipeline.py）不知道任何一道题：它们只认 ``CHECKS`` 和 ``PROBES``。
"""
from __future__ import annotations

import importlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def module_names() -> list[str]:
    return sorted(p.stem for p in HERE.glob("ex*.py"))


def collect_checks() -> dict:
    """{grade_id: Check}，来自每个 exNN.py 的 CHECKS。grade_id 重复、Check 的 notebook 和模块的 NOTEBOOK 不一致时报错。"""
    checks: dict = {}
    for name in module_names():
        module = importlib.import_module(f"{__name__}.{name}")
        for check in module.CHECKS:
            if check.grade_id in checks:
                raise ValueError(f"grade_id {check.grade_id!r} 在两个练习模块里都有（{name}.py）")
            if check.notebook != module.NOTEBOOK:
                raise ValueError(f"{name}.py：{check.grade_id} 的 notebook 应是 {module.NOTEBOOK}")
            checks[check.grade_id] = check
    return checks
