"""按 CONTRIBUTING.md 的“怎样加一道练习”加一道小练习，再用助教的命令给它评分（issue 20 §7）。

练习模块的代码就是 CONTRIBUTING.md 里的那一段（原样取出来写进 lib/grading/exercises/nb07_ex12.py：notebook 07 = 练习 12），
所以文档和引擎不会各说各的。引擎的文件一个也不改：exercise_checks.py、probes.py、pipeline.py 不知道任何一道题。
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grading_fixtures as gf  # noqa: E402

from lib.tools.bootstrap import BOOTSTRAP_SOURCE  # noqa: E402  每个练习 notebook 的第一个代码单元格

REPO = Path(__file__).resolve().parents[1]


def contributing_module() -> str:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("## 怎样加一道练习", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def _nbg(**kw) -> dict:
    return {"nbgrader": {"schema_version": 3, "grade": False, "solution": False, "locked": False, "task": False, **kw}}


def double_notebook() -> dict:
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": "# 练习 12：乘 2\n\n`double(x)` 返回 2x（相对误差不超过 1e-4）。"
                                                            "正数、负数两部分各 1 分。"},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": BOOTSTRAP_SOURCE},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
         "source": "import numpy as np\n\nfrom lib.answer_format import call, close, number"},
        {"cell_type": "code", "metadata": _nbg(solution=True, grade_id="ex12_answer"), "outputs": [],
         "execution_count": None, "source": "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"},
        {"cell_type": "code", "metadata": _nbg(grade=True, locked=True, grade_id="ex12_double", points=2), "outputs": [],
         "execution_count": None,
         "source": "# 测试：double\nassert close(number(call(double, 1.5), \"double(1.5)\"), 3.0), \"double(1.5) 应为 3\"\n\n"
                   "### BEGIN HIDDEN TESTS\nfrom lib.grading.exercise_checks import run_check\n"
                   "run_check(\"ex12_double\", globals())\n### END HIDDEN TESTS"},
    ]
    for i, c in enumerate(cells):
        c["id"] = f"double{i}"
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                       "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}


ANSWERS = {  # 学号 → (double 的写法, 期望得分)
    "d_float": ("def double(x):\n    return x * 2.0", 2.0),
    "d_float32": ("def double(x):\n    return np.float32(x) + np.float32(x)   # float32", 2.0),
    "d_abs": ("def double(x):\n    return abs(2 * x)   # 负数错了", 1.0),
    "d_raise": ("def double(x):\n    y = 2 * x\n    raise NotImplementedError()\n    return y", 0.0),
}


@pytest.mark.slow
def test_an_exercise_added_as_contributing_says_is_graded(tmp_path):
    course = gf.copy_course(REPO, tmp_path / "course")
    engine = {p.name: p.read_bytes() for p in (REPO / "lib" / "grading").glob("*.py")}
    (course / "source" / "exercises" / "07_double.ipynb").write_text(json.dumps(double_notebook(), ensure_ascii=False),
                                                                     encoding="utf-8")
    (course / "lib" / "grading" / "exercises" / "nb07_ex12.py").write_text(contributing_module(), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(course), OMP_NUM_THREADS="1",
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    run = lambda *cmd: subprocess.run([sys.executable, *cmd], cwd=course, env=env, capture_output=True,  # noqa: E731
                                      text=True, timeout=1800)
    gen = run("-m", "lib.tools.regenerate", "--root", str(course))
    assert gen.returncode == 0, gen.stdout[-2000:] + gen.stderr[-2000:]
    probe = run("-c", "from lib.grading import exercise_checks as ec, probes\n"
                      "print(ec.CHECKS['ex12_double'].points, 'probe_ex12_double' in probes.kernel_source())")
    assert probe.stdout.split() == ["2", "True"], probe.stderr[-2000:]

    rel = gf.load(course / "release" / "exercises" / "07_double.ipynb")
    zpath = tmp_path / "double.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for sid, (answer, _) in ANSWERS.items():
            nb = json.loads(json.dumps(rel))
            next(c for c in nb["cells"] if gf.gid(c) == "ex12_answer")["source"] = answer
            zf.writestr(f"{sid}/07_double.ipynb", gf.dump(nb))
    proc = run("-m", "lib.grading", "grade", "exercises", "--submissions", str(zpath), "--jobs", "2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for sid, (_, want) in ANSWERS.items():
            grades = {g.cell.name: g.score for g in gb.find_submission_notebook("07_double", "exercises", sid).grades}
            assert grades["ex12_double"] == pytest.approx(want), (sid, grades)
    ag = gf.load(course / "autograded" / "d_abs" / "exercises" / "07_double.ipynb")
    message = next(c for c in ag["cells"] if gf.gid(c) == "ex12_double")["metadata"]["grading"]["message"]
    assert "✓ 正数" in message and "✗ 负数" in message, message
    assert {p.name: p.read_bytes() for p in (REPO / "lib" / "grading").glob("*.py")} == engine  # 引擎没有改动
