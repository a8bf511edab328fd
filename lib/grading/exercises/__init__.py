"""每个练习 notebook 一个模块，名字里有两个编号：notebook 的编号和它里面的讲义练习（§15）的编号。
nb03_ex5.py 是 notebook 03（03_positions_and_rope.ipynb）= 练习 5：它的 grade_id 是 ex5_*；nb01_ex1_ex4.py 是
notebook 01 = 练习 1 和练习 4。按哪个编号都找得到一道检查（grade_id 永远用讲义的练习编号，学生手里的 notebook 带着它，
不改名）。lib/public_tests/ 里同名的模块是同一个 notebook 的公开测试。

讲义的练习在哪个 notebook（模块名只写自动评分的练习；人工评分的练习没有检查代码）：

==========  ======================================  =========================================
讲义练习    notebook                                模块
==========  ======================================  =========================================
1、4        01_attention_by_hand                    nb01_ex1_ex4.py
2、3        02_scaling_and_equivariance             nb02_ex2_ex3.py（练习 3 的证明人工评分）
5           03_positions_and_rope                   nb03_ex5.py
6、7、9     04_blocks_and_cost                      nb04_ex6_ex7.py（练习 9 人工评分：没有检查）
8、11       05_masks_and_kv_cache                   nb05_ex8_ex11.py
10          06_hands_on                             没有模块（整道题人工评分）
==========  ======================================  =========================================

一个模块有三段（用两行注释分开，见 CONTRIBUTING.md 的“怎样加一道练习”）：

1. 文件开头的导入：只在评分进程里执行（从 lib.grading.exercise_checks、lib.grading.probes 导入工具）；
2. ``# ==== 探针`` 到 ``# ==== 检查``：送进学生的内核运行（lib.grading.probes.kernel_source 把它拼在 probes.py 后面），
   定义输入（``inputs_*``）和探针，最后 ``PROBES.update({grade_id: 探针})``；
3. ``# ==== 检查`` 之后：在干净的评分进程里运行，定义参考实现和 verify，最后
   ``NOTEBOOK = "NN_名字"``、``EXERCISES = (讲义的练习编号, ...)`` 和 ``CHECKS = [Check(grade_id, NOTEBOOK, 分值, verify), ...]``。
   collect_checks 核对这三者和模块名一致（module_name）。

引擎（exercise_checks.py、probes.py、pipeline.py）不知道任何一道题：它们只认 ``CHECKS`` 和 ``PROBES``。
"""
from __future__ import annotations

import importlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


PATTERN = "nb*.py"  # 练习模块（lib/public_tests/ 的公开测试模块同名）


def module_names() -> list[str]:
    return sorted(p.stem for p in HERE.glob(PATTERN))


def module_name(notebook: str, exercises) -> str:
    """一个练习 notebook 的模块名：nb + notebook 的编号 + 每个讲义练习的编号（"03_positions_and_rope", (5,) → nb03_ex5）。"""
    return f"nb{notebook[:2]}_" + "_".join(f"ex{n}" for n in exercises)


def _check_numbering(name: str, module) -> None:
    """模块名、NOTEBOOK、EXERCISES 和每个 grade_id 说的是同一组编号；不一致时说该改哪里。"""
    exercises = getattr(module, "EXERCISES", None)
    if not exercises:
        raise ValueError(f"{name}.py：在 NOTEBOOK 旁边写上 EXERCISES = (讲义的练习编号, ...)，例如 notebook 03 里是练习 5："
                         "EXERCISES = (5,)")
    want = module_name(module.NOTEBOOK, exercises)
    if name != want:
        raise ValueError(f"{name}.py 是 notebook {module.NOTEBOOK[:2]} = 练习 {'、'.join(map(str, exercises))}："
                         f"把它（和 lib/public_tests/ 里的同名模块）改名为 {want}.py")
    for check in module.CHECKS:
        if not any(check.grade_id.startswith(f"ex{n}_") for n in exercises):
            raise ValueError(f"{name}.py：grade_id {check.grade_id} 不是练习 {'、'.join(map(str, exercises))} 的"
                             f"（应以 ex{exercises[0]}_ 这样开头）：把它的练习编号加进 EXERCISES（模块名随之改）")


def collect_checks() -> dict:
    """{grade_id: Check}，来自每个模块的 CHECKS。grade_id 重复、Check 的 notebook 和模块的 NOTEBOOK 不一致、
    模块名和编号对不上时报错。"""
    checks: dict = {}
    for name in module_names():
        module = importlib.import_module(f"{__name__}.{name}")
        _check_numbering(name, module)
        for check in module.CHECKS:
            if check.grade_id in checks:
                raise ValueError(f"grade_id {check.grade_id!r} 在两个练习模块里都有（{name}.py）")
            if check.notebook != module.NOTEBOOK:
                raise ValueError(f"{name}.py：{check.grade_id} 的 notebook 应是 {module.NOTEBOOK}")
            checks[check.grade_id] = check
    return checks
