"""评分加速的测试：模板进程（sandbox.ForkServer）fork 出来的内核和全新内核一样隔离、给出一样的分数；
没有改动的重跑不重新渲染反馈，人工分改了的那份会重新渲染。都要执行 notebook，标记 slow。"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grading_fixtures as gf  # noqa: E402

from lib.grading import pipeline, sandbox  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BWRAP, BWRAP_MSG = sandbox.bwrap_status()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not BWRAP, reason=f"模板进程只在有 bubblewrap 时使用：{BWRAP_MSG}")]

STUDENT_A = """\
import json, subprocess
import numpy as np
open("/tmp/left_by_a", "w").write("a")
open("left_in_work_a", "w").write("a")
np.LEFT_BY_A = 1
json.LEFT_BY_A = 1
child = subprocess.Popen(["sleep", "300.25"])
print(json.dumps({"random": np.random.random()}))
"""
STUDENT_B = """\
import json, os
import numpy as np
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
procs = [open(f"/proc/{p}/cmdline").read().replace("\\0", " ") for p in os.listdir("/proc") if p.isdigit()]
print(json.dumps({"tmp": os.listdir("/tmp"), "work": os.listdir("."), "numpy_attr": hasattr(np, "LEFT_BY_A"),
                  "json_attr": hasattr(json, "LEFT_BY_A"), "procs": procs, "course": os.listdir(COURSE),
                  "cap": status["CapEff"].strip(), "bounding": status["CapBnd"].strip(),
                  "no_new_privs": status["NoNewPrivs"].strip(), "random": np.random.random()}))
"""
STUDENT_TORCH = "import sys, json, torch\nprint(json.dumps({'threads': torch.get_num_threads()}))\n"


def _execute(source: str, course: Path, tmp: Path, forkserver) -> dict:
    nb = {"cells": [{"cell_type": "code", "source": source, "metadata": {}, "outputs": [], "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    control = {"nonce": "n" * 32, "seeds": {}, "probes_source": "PROBES = {}", "grade_ids": [], "probe_timeout": 30}
    res = sandbox.execute(nb, course_root=course, scratch_base=tmp, hide=[], limits=sandbox.Limits(cell_timeout=60),
                          slot=0, control=control, use_bwrap=True, forkserver=forkserver)
    assert res.records == {} and not res.crashed, res.stderr_tail
    text = "".join(o.get("text", "") for o in res.outputs[0] if o.get("output_type") == "stream")
    assert not [o for o in res.outputs[0] if o.get("output_type") == "error"], res.outputs
    return json.loads(text)


def _host_processes_with(marker: str) -> list:
    found = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and marker in open(f"/proc/{p}/cmdline").read():
                found.append(p)
        except OSError:
            pass
    return found


def test_forked_kernels_share_nothing_with_earlier_students(tmp_path):
    """同一个槽位先后两份提交，都由同一个模板 fork：后一份看不到前一份留下的文件、进程和模块状态，
    没有任何 capability，看不到课程目录；前一份留下的后台进程在它评完时已经被杀掉。"""
    course = tmp_path / "course"
    (course / "lib").mkdir(parents=True)
    (course / "lib" / "__init__.py").write_text("")
    (course / "solutions.txt").write_text("secret")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    forkserver = sandbox.ForkServer(scratch / "templates")
    try:
        a = _execute(STUDENT_A, course, scratch, forkserver)
        assert _host_processes_with("300.25") == []  # 沙箱结束时学生的后台进程随之结束
        b = _execute(STUDENT_B.replace("COURSE", repr(str(course))), course, scratch, forkserver)
        t = _execute(STUDENT_TORCH, course, scratch, forkserver)
        assert forkserver.spawned == 3 and forkserver.error is None  # 三个内核都是 fork 出来的（没有退回全新进程）
    finally:
        forkserver.close()
    assert "left_by_a" not in b["tmp"] and "left_in_work_a" not in b["work"]
    assert not b["numpy_attr"] and not b["json_attr"]  # 模块状态来自从未运行过学生代码的模板
    assert not [p for p in b["procs"] if "300.25" in p]
    assert b["course"] == []
    assert b["cap"] == b["bounding"] == "0000000000000000" and b["no_new_privs"] == "1"
    assert a["random"] != b["random"]  # 每个内核的 numpy 全局随机状态都重新播种，和全新进程一样
    assert t["threads"] == 1


def test_fork_server_refuses_a_process_that_is_not_the_sandbox(tmp_path, capsys):
    """模板只加入 bwrap 报告的那些命名空间：pid 对不上（例如已经被别的进程重用）时拒绝，之后的提交
    改用全新的 Python 照常评分。"""
    course = tmp_path / "course"
    (course / "lib").mkdir(parents=True)
    (course / "lib" / "__init__.py").write_text("")
    forkserver = sandbox.ForkServer(tmp_path / "templates")
    r, w = os.pipe()
    try:
        with pytest.raises(sandbox.ForkServerError, match="命名空间"):
            forkserver.spawn("numpy", os.getpid(), {"mnt-namespace": 1}, [r, w, w])
        assert "改为每份启动全新的 Python" in capsys.readouterr().err
        got = _execute("import json\nprint(json.dumps({'ok': 1}))", course, tmp_path, forkserver)
        assert got == {"ok": 1} and forkserver.spawned == 0
    finally:
        os.close(r)
        os.close(w)
        forkserver.close()


LINKED_VENV_SCRIPT = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from test_grading_forkserver import _execute
from lib.grading import sandbox
course, tmp = Path(sys.argv[1]), Path(sys.argv[2])
forkserver = sandbox.ForkServer(tmp / "templates")
try:
    got = _execute(
        "import json, sys\\nimport latex2mathml.converter\\n"  # 模板没有预先导入的、venv 里的包
        "print(json.dumps({'prefix': sys.prefix, 'path': [p for p in sys.path if 'site-packages' in p]}))",
        course, tmp, forkserver)
    print(json.dumps(dict(got, spawned=forkserver.spawned, error=forkserver.error)))
finally:
    forkserver.close()
"""


def test_a_course_whose_venv_is_a_link_to_another_checkout(tmp_path):
    """fe44r S5：课程的 .venv 是指向另一个克隆的 .venv 的符号链接时，用模板进程（默认）评的每一行都是 error
    （“No module named 'IPython.core.oinspect'”）：模板以 sys.executable（课程目录里的链接，沙箱里被盖住）启动，
    sys.prefix、sys.path 都指向看不到的地方，内核后来才导入的模块找不到。预期：模板用解析过的解释器
    （sandbox_bwrap.sandbox_python）启动，fork 出来的内核导入模板没有导入过的包也照常，sys.prefix、site-packages
    都是解析过的（沙箱里看得见的）路径。失败时看 sandbox_forkserver.template_command。"""
    venv = Path(sys.executable).parent.parent.resolve()
    course = tmp_path / "course"
    (course / "lib").mkdir(parents=True)
    (course / "lib" / "__init__.py").write_text("")
    (course / ".venv").symlink_to(venv, target_is_directory=True)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    linked = course / ".venv" / "bin" / Path(sys.executable).name
    out = subprocess.run([str(linked), "-c", LINKED_VENV_SCRIPT, str(course), str(scratch), str(REPO / "tests")],
                         capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["spawned"] == 1 and got["error"] is None, got
    assert Path(got["prefix"]) == venv and got["path"] and all(p.startswith(str(venv)) for p in got["path"]), got


def _grade(course: Path, subs: Path, fork_server: bool) -> list[dict]:
    cwd = os.getcwd()
    os.chdir(course)
    try:
        pipeline.run(pipeline.Options(assignment="exercises", submissions=subs, course_root=course, jobs=2,
                                      limits=sandbox.Limits(cell_timeout=60, grace=5), progress=False, quiet=True,
                                      fork_server=fork_server))
    finally:
        os.chdir(cwd)
    with open(course / "grades.csv", encoding="utf-8", newline="") as f:
        return [r for r in csv.DictReader(f) if r["status"] != "missing"]  # 没交的 notebook 各占一行 missing（issue 20 §6）


def _feedback(course: Path) -> dict:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (course / "feedback").rglob("*.html")}


def test_same_grades_with_and_without_fork_server_and_feedback_reuse(tmp_path):
    """同一批提交（正确、空白、部分答错、各种作弊、崩溃，numpy 和 torch 的 notebook）：模板 fork 的内核和
    全新内核给出的 grades.csv 完全相同。然后：没有改动的重跑不重新执行、不重新渲染任何反馈；
    改了一个人工分，只有那一份反馈重新渲染，并且显示新的分数。"""
    fast = gf.copy_course(REPO, tmp_path / "fast")
    kinds = {"01_attention_by_hand": ["s01", "s02", "s03", "s04", "s05", "s06", "s08", "s09", "s10", "s16", "s17"],
             "05_masks_and_kv_cache": ["s01", "s02", "s07"]}
    subs = tmp_path / "subs.zip"
    with zipfile.ZipFile(subs, "w") as zf:
        for nb, keep in kinds.items():
            rel = gf.load(fast / "release" / "exercises" / f"{nb}.ipynb")
            sol = gf.load(fast / "solutions" / "exercises" / f"{nb}.ipynb")
            for f in gf.build_fixtures(rel, sol, nb, fast, "exercises", multi=True):
                if f["name"][:3] in keep:
                    zf.writestr(f["path"], f["data"])
    slow = tmp_path / "slow"
    shutil.copytree(fast, slow)
    rows = _grade(fast, subs, fork_server=True)
    assert len(rows) == sum(map(len, kinds.values()))
    assert rows == _grade(slow, subs, fork_server=False)

    before = _feedback(fast)
    assert len(before) == len(rows)
    calls = []
    orig = sandbox.execute
    sandbox.execute = lambda *a, **k: calls.append(1) or orig(*a, **k)
    try:
        assert _grade(fast, subs, fork_server=True) == rows
        assert calls == [] and _feedback(fast) == before
        from nbgrader.api import Gradebook
        with Gradebook("sqlite:///" + str(fast / "gradebook.db")) as gb:
            gb.find_grade("ex8_answer", "05_masks_and_kv_cache", "exercises", "s01_correct").manual_score = 3.5
            gb.db.commit()
        _grade(fast, subs, fork_server=True)
    finally:
        sandbox.execute = orig
    after = _feedback(fast)
    changed = [p for p in before if after[p] != before[p]]
    assert [(p.parts[-3], p.stem) for p in changed] == [("s01_correct", "05_masks_and_kv_cache")]
    assert "3.5" in changed[0].read_text(encoding="utf-8")
