"""评分核心的各个零件，一个一个单独测（像 nbgrader 的 preprocessor：一步一个名字，单独可测）。不执行 notebook，几秒钟。

- flags.py：可疑迹象从学生的内核（guard.py 的审计钩子）发出，过评分进程的过滤（sandbox_supervisor.take_alert），到 detail 里
  的中文标签（pipeline.judge），一路用同一张表；状态的拼接和排序；
- sandbox_supervisor.Supervisor：评分通道上的事件（不启动进程）和杀掉内核的期限；
- sandbox_bwrap.bwrap_command：盖住哪些目录、放进沙箱的文件、换不换 uid；
- repair 的四步配对（match_by_grade_id … match_by_position），每一步单独；
- runner 的探针、单元格输出和错误的显示（_render_traceback_）；judge 不把学生自己调用的公开测试当成伪造的“测试通过”；
  班级报告的证据面板。
"""
from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from lib.grading import class_report_html, class_similarity, pipeline, repair, runner, sandbox, sandbox_bwrap
from lib.grading.flags import RUNNER_FLAGS, Flag, Status
from lib.grading.sandbox_kernel import SANDBOX_MPL, SANDBOX_RUNNER, SOURCES
from lib.grading.sandbox_supervisor import ExecResult, Supervisor, take_alert

REPO = Path(__file__).resolve().parents[1]


# ============================================================================ flags
def _judge_tamper(flags: list) -> list:
    """只有可疑迹象、没有评分单元格的一份提交，judge 写出的 tamper。"""
    empty = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    state = {"seeds": {}, "exec": {"records": {}, "flags": flags, "outputs": {}, "changed": [], "junk": 0}}
    return pipeline.judge(state, empty, empty, {}, "nb")["tamper"]


GUARD_SCRIPT = textwrap.dedent('''
    import os, sys
    from lib.grading import guard
    r, w = os.pipe()
    guard.install(w, "/course", sys.argv[1], int(sys.argv[2]), set(), {})
    try:
        exec(compile(sys.stdin.read(), "<ipython-input-1-0123456789ab>", "exec"), {})  # 学生的代码
    except PermissionError as e:
        print("拒绝：" + str(e), file=sys.stderr)
    os.close(w)
    sys.stdout.write(os.read(r, 1 << 20).decode())
''')
SANDBOX_SCRATCH = "/tmp/submission"  # bwrap 沙箱里临时副本的位置（sandbox_kernel）：guard 凭它知道自己在沙箱里
PLAIN_SCRATCH = "/tmp/lecture07-scratch-abc"  # 没有沙箱时（--no-sandbox）的临时副本


def _guard_alerts(student: str, scratch: str, max_forks: int = 16) -> tuple[list, str, int]:
    """在子进程里装上审计钩子、运行 student（像学生的单元格），返回 (评分通道收到的可疑迹象 [种类, 说明]……, stderr,
    通道报告的超过上限时的进程数)。"""
    out = subprocess.run([sys.executable, "-c", GUARD_SCRIPT, scratch, str(max_forks)], input="import sys\n" + student,
                         capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    res = ExecResult()
    for line in out.stdout.splitlines():
        take_alert(res, json.loads(line))
    return [[k, d] for k, d in res.flags], out.stderr, res.forks


def test_what_the_kernel_flags_reaches_the_detail_under_its_label():
    """审计钩子（guard.py，在子进程里装：装上就移除不了）发出的每一种都过得了 take_alert 的过滤，judge 用表里的中文标签
    写进 detail。学生的代码自己发出审计事件，钩子照样看调用栈：栈上有学生的代码才算。这里没有沙箱（临时副本不在
    /tmp/submission），创建子进程也报告（沙箱里不报告，见下一个测试）。"""
    student = ('sys.audit("open", "/course/solutions/01.ipynb", "r", 0)\n'
               'sys.audit("open", "/home/ta/out.txt", "w", 0)\n'
               f'sys.audit("open", "{PLAIN_SCRATCH}/ok.txt", "w", 0)\n'  # 临时副本里：不算
               'sys.audit("socket.connect", None, ("10.0.0.1", 80))\n'
               'sys.audit("os.system", b"ls")\n')
    sent, _, _ = _guard_alerts(student, PLAIN_SCRATCH)
    assert [k for k, _ in sent] == ["read", "write", "network", "process"]
    tamper = _judge_tamper(sent)
    assert tamper == [f"{Flag(k).label}：{d}" for k, d in sent]
    assert tamper[0] == "访问了评分相关路径：/course/solutions/01.ipynb"


def test_a_child_process_in_the_sandbox_is_counted_not_flagged():
    """fe44r S1：诚实的 !ls、!pip list（IPython 用 os.forkpty）被标成 suspect（“创建了子进程：os.forkpty”）。沙箱里子进程和
    内核一样看不到课程、别的学生和密钥，只创建进程不算可疑；但照样计数，超过 max_forks 的被拒绝，也算可疑（fork 炸弹）。
    没有沙箱时照旧报告（子进程读的文件审计钩子看不到）。失败时看 guard.install 的钩子里 process_events 那一段的 where[2]。"""
    forks = 'sys.audit("os.forkpty")\nsys.audit("subprocess.Popen", "ls", ["ls"], None, None)\n'
    assert _guard_alerts(forks, SANDBOX_SCRATCH) == ([], "", 0)
    assert _guard_alerts(forks, PLAIN_SCRATCH)[0] == [["process", "os.forkpty"]]
    sent, said, count = _guard_alerts(forks + 'sys.audit("os.system", b"ls")\n', SANDBOX_SCRATCH, max_forks=2)
    assert sent == [["process", "os.system（第 3 个，超过上限）"]] and count == 3 and "不允许再创建新进程" in said, \
        (sent, said, count)  # fork 炸弹照样可疑


EQ_CLASSES = textwrap.dedent('''
    __name__ = "__main__"  # 像学生的内核：类定义在 __main__ 里
    import dataclasses

    class Shape:                      # 诚实：普通的按内容比较（fe44r h05）
        def __init__(self, dims): self.dims = dims
        def __eq__(self, other): return self.dims == other.dims
        def __hash__(self): return hash(self.dims)

    class Near:                       # 诚实：other 只在里面的生成器里用到（LOAD_CLOSURE / LOAD_DEREF）
        def __eq__(self, o): return all(abs(a - b) < 1e-9 for a, b in zip(self.v, o.v) if o is not None)

    class Lazy:                       # 诚实：other 只在 lambda 里用到
        def __eq__(self, other):
            get = lambda: other.x
            return self.x == get()

    @dataclasses.dataclass
    class Config:                     # @dataclass 生成的 __eq__
        c: float = 10.0

    class Always:                     # 把戏：不看 other
        def __eq__(self, other): return True

    class Overwrites:                 # 把戏：先把 other 换掉再“比较”
        def __eq__(self, other):
            other = self
            return self is other

    AlwaysLambda = type("AlwaysLambda", (), {"__eq__": lambda self, other: True, "__module__": "__main__"})

    class Truthy:                     # __bool__、__array__ 照旧报告
        def __bool__(self): return True

    class Arrayish:
        def __array__(self, dtype=None): return None

    sys.audit("lecture07.cells_done", dict(globals()))
''')


def test_an_ordinary_eq_that_reads_other_is_not_flagged():
    """fe44r S2：诚实的辅助类自己写了 __eq__（return self.dims == other.dims）被标成“自定义了 __eq__/__bool__”（suspect）。
    “和什么都相等”的把戏不看第二个参数；guard 用安装时取好的 dis.get_instructions 看 __eq__ 读没读 other
    （LOAD_FAST*、LOAD_DEREF、LOAD_CLOSURE）：读了的不算，不读的、__bool__、__array__ 照旧报告。失败时看
    guard.reads_second_argument 在这个 Python 版本上认不认得读参数的指令（dis 的 opname 各版本不同）。"""
    sent, said, _ = _guard_alerts(EQ_CLASSES, PLAIN_SCRATCH)
    assert sorted(d for k, d in sent if k == "eq") == ["Always.__eq__", "AlwaysLambda.__eq__", "Arrayish.__eq__",
                                                       "Overwrites.__eq__", "Truthy.__eq__"], (sent, said)


def test_the_kernel_cannot_raise_what_only_the_grader_raises():
    """学生的代码伪造一条 alert：不认识的种类和只有评分进程才发的种类（channel）都记作评分通道异常。"""
    res = ExecResult()
    take_alert(res, {"ev": "alert", "kind": "channel", "hex": "6869"})
    take_alert(res, {"ev": "alert", "kind": "nothing", "hex": "6869"})
    take_alert(res, {"ev": "alert", "kind": "read"})  # 没有说明
    assert [k for k, _ in res.flags] == ["channel"] * 3
    assert "不认识的可疑迹象 'channel'" in res.flags[0][1] and res.flags[2][1] == "格式不对的可疑迹象"
    assert RUNNER_FLAGS == {"read", "write", "network", "process", "eq", "introspect"}
    assert _judge_tamper([["made_up", "x"]]) == ["made_up：x"]  # 记录里不认识的种类原样显示，不会被吞掉


def _judge_fake_pass(source: str, printed: str) -> list:
    """学生自己加的一个代码单元格（source）打印了 printed 时，judge 的 tamper。"""
    cell = {"cell_type": "code", "source": source, "metadata": {}, "outputs": [], "execution_count": None}
    release = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    state = {"seeds": {}, "exec": {"records": {}, "flags": [], "changed": [], "junk": 0,
                                   "outputs": {"0": [{"output_type": "stream", "name": "stdout", "text": printed}]}}}
    return pipeline.judge(state, dict(release, cells=[cell]), release, {}, "nb")["tamper"]


def test_a_public_test_called_in_the_students_own_cell_is_not_a_fake_pass():
    """公开测试通过时打印 PASSED（“✓ 通过公开测试……”）：学生在自己的单元格里调用 public_test 不算伪造；
    没有调用却打印同样的一行、或打印别的“测试通过”，照样标出来。"""
    from lib.public_tests import PASSED
    assert _judge_fake_pass('public_test("ex1_scores", globals())', PASSED + "\n") == []
    forged = ["第 1 个单元格打印了像“测试通过”的文字"]
    assert _judge_fake_pass(f"print({PASSED!r})", PASSED + "\n") == forged
    assert _judge_fake_pass('public_test("ex1_scores", globals())\nprint("全部通过")', PASSED + "\n全部通过\n") == forged


def test_every_flag_and_status_says_what_it_means():
    for row in [*Flag, *Status]:
        assert row.value.isascii() and row.value.isalpha() and row.label and len(row.meaning) > 10, row
    assert len({f.label for f in Flag}) == len(Flag)


def test_statuses_join_add_and_sort_like_grades_csv():
    assert Status.join([]) == "ok" and Status.join([Status.REPAIRED, Status.SUSPECT]) == "repaired+suspect"
    assert Status.add("ok", Status.LATE) == "late" and Status.add("timeout", Status.LATE) == "timeout+late"
    assert sorted(["late", "weird", "suspect", "ok", "missing"], key=Status.sort_key) == [
        "ok", "suspect", "missing", "late", "weird"]
    verdict = {"tamper": ["尝试联网：x"], "notes": []}
    assert pipeline.status_of(["补回 nbgrader 元数据：a"], {"killed_for_timeout": True}, verdict)[0] == \
        "repaired+timeout+suspect"
    rows = [pipeline.Row("s1", "nb", 1, 2, "repaired+late", ""), pipeline.Row("s2", "nb", None, None, "missing", "")]
    assert "状态：repaired 1，missing 1，late 1" in pipeline.summary(rows, 1.0, True)


# ============================================================================ Supervisor（不启动进程）
def _supervisor(n_checks: int = 1):
    control = {"nonce": "n1", "grade_ids": [f"g{i}" for i in range(n_checks)], "seeds": {}}
    pipe = io.BytesIO()
    sup = Supervisor(ExecResult(), None, -1, pipe, control, sandbox.Limits(cell_timeout=10, grace=2),
                     threading.Event(), time.monotonic(), n_code_cells=3)
    return sup, pipe


def _line(**ev) -> bytes:
    return json.dumps(ev).encode()


def test_the_supervisor_takes_events_only_in_their_phase_and_with_the_nonce():
    sup, pipe = _supervisor()
    res, w = sup.res, sup.watch
    sup.on_line(_line(ev="ready", pid=1))
    sup.on_line(_line(ev="start", cell=0))
    assert w.cell[0] == 0
    sup.on_line(_line(ev="record", nonce="n1", records={"g0": {"x": 1}}))  # 学生的单元格还没跑完：伪造的
    sup.on_line(_line(ev="end", cell=0, outputs=[{"output_type": "stream"}], memory=True, execution_count=1))
    sup.on_line(b"not json")
    assert res.records is None and res.junk == 2 and res.outputs == {0: [{"output_type": "stream"}]}
    assert res.memory_cells == [0] and w.cell is None
    sup.on_line(_line(ev="cells_done"))
    sup.on_line(_line(ev="cells_done"))
    sup.on_line(_line(ev="start", cell=2))  # 单元格跑完之后：不再计单元格的时
    assert pipe.getvalue() == (json.dumps(sup.control) + "\n").encode()  # 控制消息只发一次，而且在 cells_done 之后
    assert w.cells_done and w.cell is None and res.junk == 4
    sup.on_line(_line(ev="done", nonce="n1"))  # 还没有记录：不算完成
    sup.on_line(_line(ev="record", nonce="wrong", records={"g0": {"x": 2}}))
    sup.on_line(_line(ev="record", nonce="n1", records={"g0": {"x": 3}}, flags=[["eq", "A.__eq__"]], forks=2))
    sup.on_line(_line(ev="record", nonce="n1", records={"g0": {"x": 4}}))
    sup.on_line(_line(ev="done", nonce="n1"))
    assert res.records == {"g0": {"x": 3}} and res.flags == [["eq", "A.__eq__"]] and res.forks == 2 and w.done
    assert set(res.timings) == {"ready", "cells_done", "record", "done"} and res.junk == 7


def test_the_supervisor_kills_at_the_first_deadline_and_says_which_cell():
    sup, _ = _supervisor(n_checks=1)
    now = time.monotonic()
    assert sup.overdue(now) is None
    sup.watch.cell = (4, now)
    assert sup.overdue(now + 11.9) is None and sup.overdue(now + 12.1) == "timeout"  # cell_timeout + grace
    assert sup.res.fail_cell == 4 and sup.res.killed_for_timeout
    sup, _ = _supervisor(n_checks=1)
    sup.watch.probes_since = now
    assert sup.overdue(now + 23.9) is None and sup.overdue(now + 24.1) == "timeout"  # (检查数 + 1) × 12
    assert sup.res.fail_cell is None
    sup, _ = _supervisor(n_checks=1)
    assert sup.overdue(sup.watch.deadline + 0.1) == "timeout" and sup.res.fail_cell is None
    sup, _ = _supervisor()
    sup.stop.set()
    assert sup.overdue(now) == "interrupted" and not sup.res.killed_for_timeout


# ============================================================================ bwrap 的命令行
def test_the_bwrap_command_hides_the_course_and_ships_the_runner_with_its_flags(tmp_path):
    course, grading = tmp_path / "course", tmp_path / "grading"
    download, scratch = course / "downloads", grading / "sub-1"
    for d in (download, scratch / "work"):
        d.mkdir(parents=True)
    cmd = sandbox_bwrap.bwrap_command(course, grading, [download], scratch, drop_uid=-1)
    tmpfs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--tmpfs"]
    assert tmpfs[0] == "/tmp" and str(course.resolve()) in tmpfs and str(grading.resolve()) in tmpfs
    assert str(download.resolve()) not in tmpfs  # 已经在被盖住的课程目录里
    text = " ".join(cmd)
    assert f"--ro-bind {scratch / 'runner.py'} {SANDBOX_RUNNER}" in text
    for name in SOURCES:  # runner.py 旁边就是它导入的 _grader_guard（和 guard 导入的 _grader_flags）
        assert f"--ro-bind {scratch / name} {Path(SANDBOX_RUNNER).parent / name}" in text
    assert f"--bind {scratch / 'mpl'} {SANDBOX_MPL}" in text  # 预先建好的字体缓存
    assert "--unshare-user-try" in cmd and "CAP_SETUID" not in cmd and "--unshare-net" in cmd
    dropping = sandbox_bwrap.bwrap_command(course, grading, [], scratch, drop_uid=61000)
    assert "CAP_SETUID" in dropping and "--unshare-user-try" not in dropping


def test_a_hidden_python_is_bound_back_read_only():
    prefix = Path(sys.prefix).resolve()
    args = sandbox_bwrap.python_rebinds([prefix.parent])
    assert " ".join(["--ro-bind", str(prefix), str(prefix)]) in " ".join(args)


def test_shipped_runner_imports_its_guard_and_flags_without_lib(tmp_path):
    """沙箱里看不到 lib/：ship 写出的 runner.py 只靠旁边的 _grader_guard.py、_grader_flags.py 就能导入。"""
    import subprocess
    from lib.grading import sandbox_kernel
    runner_path = sandbox_kernel.ship(tmp_path)
    code = (f"import sys; sys.argv = ['x']; sys.path.insert(0, {str(tmp_path)!r}); import importlib.util as u; "
            f"s = u.spec_from_file_location('r', {str(runner_path)!r}); m = u.module_from_spec(s); "
            "s.loader.exec_module(m); print(m._guard.Flag.READ.label)")
    p = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.strip() == "访问了评分相关路径", p.stderr


# ============================================================================ repair 的四步配对
def _cell(kind: str, source: str, gid: str | None = None, cid: str | None = None, **meta) -> dict:
    cell = {"cell_type": kind, "source": source, "metadata": {}, "id": cid or f"c{abs(hash(source)) % 10**6}"}
    if gid:
        cell["metadata"]["nbgrader"] = {"grade_id": gid, **meta}
    if kind == "code":
        cell.update(outputs=[], execution_count=None)
    return cell


def _release() -> dict:
    cells = [_cell("markdown", "# 练习", cid="intro"),
             _cell("code", "def f(x):\n    raise NotImplementedError()", "a", "ra", solution=True, grade=False),
             _cell("code", "assert f(1) == 2", "ta", "rta", grade=True, points=1, locked=True),
             _cell("code", "def g(x):\n    raise NotImplementedError()", "b", "rb", solution=True, grade=False),
             _cell("code", "assert g(1) == 3", "tb", "rtb", grade=True, points=1, locked=True),
             _cell("code", "# 在这里写你的代码\nraise NotImplementedError()", "c", "rc", solution=True, grade=False),
             _cell("code", "assert h == 4", "tc", "rtc", grade=True, points=1, locked=True)]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _student(release: dict) -> dict:
    """说明单元格换了 id；答案 a 丢了元数据、id 还在；答案 b 丢了元数据和 id、签名行还在；答案 c 整个重写过；测试都完好。"""
    nb = copy.deepcopy(release)
    nb["cells"][0]["id"] = "other"
    a, b, c = nb["cells"][1], nb["cells"][3], nb["cells"][5]
    a.update(source="def f(x):\n    return 2 * x", metadata={})
    b.update(source="def g(x):\n    return x + 2", metadata={}, id="new-b")
    c.update(source="h = 4", metadata={}, id="new-c")
    return nb


@pytest.mark.parametrize("steps, claimed", [
    ((repair.match_by_grade_id,), {2: "gid", 4: "gid", 6: "gid"}),
    ((repair.match_by_grade_id, repair.match_by_cell_id), {1: "id", 2: "gid", 4: "gid", 6: "gid"}),
    (repair.MATCHERS[:3], {0: "content", 1: "id", 2: "gid", 3: "content", 4: "gid", 6: "gid"}),
    (repair.MATCHERS, {0: "content", 1: "id", 2: "gid", 3: "content", 4: "gid", 5: "position", 6: "gid"}),
])
def test_each_matching_step_adds_what_it_is_named_for(steps, claimed):
    rel = _release()
    m = repair.Match.of(_student(rel), rel)
    for step in steps:
        step(m)
    assert {rel_i: how for rel_i, cl in m.claims.items() for _, how in cl} == claimed
    assert all(m.rel_of[stu_i] == rel_i for rel_i, cl in m.claims.items() for stu_i, _ in cl)


def test_repair_keeps_the_matched_answers_and_restores_their_metadata():
    rel = _release()
    fixed, notes = repair.repair(_student(rel), rel)
    assert [repair._gid(c) for c in fixed["cells"]] == [None, "a", "ta", "b", "tb", "c", "tc"]
    assert [repair._src(c) for c in fixed["cells"][1::2]][:3] == ["def f(x):\n    return 2 * x",
                                                                  "def g(x):\n    return x + 2", "h = 4"]
    assert notes == ["补回 nbgrader 元数据：a、b、c"]


# ============================================================================ runner 的零件
class _Quiet:
    fired = False


def test_a_probe_records_what_the_function_returned_or_why_not():
    from IPython.utils.capture import capture_output
    calls = {"ok": lambda ns, seed: {"seed": seed, "x": ns["x"]}, "odd": lambda ns, seed: {"o": object()},
             "bad": lambda ns, seed: 1 / 0}
    got = {name: runner._probe(fn, {"x": 3}, {"g": "7"}, "g", _Quiet(), capture_output) for name, fn in calls.items()}
    assert got == {"ok": {"seed": 7, "x": 3}, "odd": {"o": "<不可序列化：object>"},
                   "bad": {"error": "ZeroDivisionError: division by zero"}}
    assert runner._probe(calls["ok"], {}, {}, "g", _Quiet(), capture_output) == {"error": "KeyError: 'g'"}
    probes, records = runner._load_probes("PROBES = {")
    assert probes == {} and records["__error__"].startswith("probes.py 无法加载：SyntaxError")


def test_cell_outputs_in_notebook_order():
    class Cap:
        stdout, stderr, outputs = "hi\n", "", []

    class Result:
        result, execution_count = 42, 3

    outs = runner._cell_outputs(Cap(), Result(), None, timed_out=False)
    assert [o["output_type"] for o in outs] == ["stream", "execute_result"] and outs[1]["data"] == {"text/plain": "42"}
    outs = runner._cell_outputs(Cap(), None, KeyboardInterrupt(), timed_out=True)
    assert outs[-1]["ename"] == "TimeoutError"


def test_an_error_that_renders_itself_reaches_the_feedback_as_it_renders_in_jupyter():
    """课程的 CheckFailed 在 JupyterLab 里是一行“✗ 说明”（_render_traceback_）：评分的输出里也是这一行；
    别的异常照常是去掉评分程序帧的 traceback；_render_traceback_ 自己出错时也退回 traceback。"""
    from lib.answer_format import CheckFailed

    out = runner._error_output(CheckFailed("scores_1 的形状不对"))
    assert out["traceback"] == ["✗ scores_1 的形状不对"] and out["ename"] == "CheckFailed"

    class Broken(Exception):
        def _render_traceback_(self):
            raise RuntimeError("oops")

    try:
        raise ValueError("坏了")
    except ValueError as e:
        plain = runner._error_output(e)
    assert plain["traceback"][-1] == "ValueError: 坏了" and plain["evalue"] == "坏了"
    assert runner._error_output(Broken("x"))["traceback"][-1].endswith("Broken: x")


# ============================================================================ 班级报告的证据面板
def test_the_evidence_panel_escapes_student_names_but_keeps_the_marks():
    side = class_similarity.Side([("ex1", "x = &lt;1&gt; <mark>+ y</mark>")], quiet=2)
    pair = class_similarity.Pair("nb", "<s1>", "s2", 0.9, 50, True, blocks=[("代码", side, side)])
    html = class_report_html.evidence_html(pair)
    assert "&lt;s1&gt; · 代码" in html and "<s1>" not in html
    assert "<pre>x = &lt;1&gt; <mark>+ y</mark></pre>" in html and "另有 2 个单元格没有相同的片段。" in html
    assert class_similarity.Pair("nb", "a", "b", 0.2, 5, False).html == ""  # 没有证据就没有面板
