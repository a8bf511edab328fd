"""评分流水线：导入 → 修复 → 沙箱执行 + 探针 → 干净进程里判分 → gradebook、反馈、grades.csv。

并行：N 个线程各自管理一个沙箱子进程（真正的计算都在子进程里）；主线程是 gradebook.db 的唯一写入者，
每完成一份就写入分数和反馈。断点续跑：每份提交的执行结果按“原始文件的 sha256 + 评分器版本”存进
.grading/ASSIGNMENT/state/，再次运行时直接复用（不再执行学生代码），重新判分、重写一切，
所以结果和第一次完全相同。检查用的随机种子是固定的（没有学期密钥时是 SEED，有时每个检查一个，见 hidden_inputs），
分数只取决于提交的文件。
"""
from __future__ import annotations

import contextlib
import copy
import csv
import getpass
import datetime as dt
import hashlib
import importlib
import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from concurrent.futures import CancelledError, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from . import collect as collect_mod
from . import gradebook_io, hidden_inputs, lms, repair, report, runner, sandbox, sanitize
from . import probes as probes_mod
from ..public_tests import PASSED
from .flags import Flag, Status

HERE = Path(__file__).resolve().parent
# 伪造的“测试通过”：学生自己的单元格打印出像课程的测试或评分的话。说“全部测试、满分、公开测试”的一定算；只说“测试通过、
# passed、✓”的，只有单元格里没有自己的检查（assert、raise、assert_* 函数）时才算——学生自己 assert 过再打印一句
# “my sanity test passed” 说的是真话（fe44 s006）
FAKE_PASS_RE = re.compile(r"(全部通过|所有测试|全部测试|通过了所有|通过所有|通过公开测试|all (the )?tests|every test|"
                          r"passes all|满分|full marks)", re.IGNORECASE)
OWN_PASS_RE = re.compile(r"(测试通过|tests? passed|\bpass(ed)?\b|✓|✔)", re.IGNORECASE)
CSV_FIELDS = ["student_id", "notebook", "score", "max_score", "status", "detail"]
SEED = 0  # 课程没有学期密钥时探针和检查的种子（= exercise_checks.DEFAULT_SEED）；有密钥时见 hidden_inputs.HiddenInputs


@dataclass
class Options:
    assignment: str
    submissions: Path
    course_root: Path = Path(".")
    jobs: int = 1
    limits: sandbox.Limits = field(default_factory=sandbox.Limits)
    name_regex: str | None = None
    roster: Path | None = None
    roster_id_column: str | None = None
    lms: str | None = None             # 强制的下载布局（None = 自动识别）
    due: str | None = None             # 截止时间（None = 用 gradebook 里的 duedate）
    notebooks: str | None = None       # --notebooks 01,02：这次点名评的 notebook（collect.choose_notebooks）
    submitted_at: str | None = None    # 没有 LMS 提交时间的下载：这一批的提交时间（判断迟交用）
    reuse_import: bool = False         # feedback：用上次导入的副本，不读下载路径
    checks_module: str = "lib.grading.exercise_checks"
    probes_file: Path = HERE / "probes.py"
    use_bwrap: bool | None = None      # None = 自动
    fork_server: bool = True           # 内核从预先导入库的模板 fork（sandbox.ForkServer）；False：全新 Python
    feedback: bool = True
    progress: bool = True
    quiet: bool = False
    fresh: bool = False                # 忘掉之前导入的下载（分批评分从头开始）；默认新的下载并进之前的
    secret_without_sandbox: bool = False  # 有学期密钥、没有沙箱、学生代码能读到密钥时也评分（助教明确要求时）


@dataclass
class Row:
    student_id: str
    notebook: str
    score: float | None
    max_score: float | None
    status: str
    detail: str
    blank_written: int = 0  # 没作答、自动记 0 分的文字题个数（只用于汇总，不写进 grades.csv）
    pending: int = 0        # 待人工评分的单元格个数（只用于汇总；detail 里也写了）

    def as_csv(self):
        fmt = lambda x: "" if x is None else (f"{x:g}")
        return {"student_id": self.student_id, "notebook": self.notebook, "score": fmt(self.score),
                "max_score": fmt(self.max_score), "status": self.status, "detail": self.detail}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _read_nb(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def release_notebooks(course_root: Path, assignment: str) -> dict:
    d = course_root / "release" / assignment
    if not d.is_dir():
        raise SystemExit(f"找不到 {d}：请在课程根目录运行，并先用 nbgrader generate_assignment 生成 release/。")
    nbs = {p.stem: _read_nb(p) for p in sorted(d.glob("*.ipynb"))}
    if not nbs:
        raise SystemExit(f"{d} 里没有 notebook。")
    return nbs


def load_checks(module: str):
    if module not in sys.modules and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    mod = importlib.import_module(module)
    return mod.CHECKS


# 决定执行结果的文件：runner.py、guard.py 和 flags.py 放进沙箱，repair 决定执行的是什么，sandbox* 执行它
EXECUTION_FILES = ("runner.py", "guard.py", "flags.py", "repair.py", "sandbox.py", "sandbox_bwrap.py",
                   "sandbox_kernel.py", "sandbox_forkserver.py", "sandbox_supervisor.py")


def grader_version(opts: Options, probes_source: str, inputs: str = "") -> str:
    """存下的执行结果能不能沿用：执行学生代码的程序、探针、限额，以及隐藏输入从哪里来（inputs =
    HiddenInputs.version()：换了学期密钥或派生方式就重新执行）。"""
    parts = [(HERE / name).read_text(encoding="utf-8") for name in EXECUTION_FILES]
    parts += [(HERE.parent / "answer_format.py").read_text(encoding="utf-8"),  # 探针用它记录返回值
              probes_source, repr((opts.limits.cell_timeout, opts.limits.memory_mb, opts.limits.max_procs))]
    if inputs:  # 没有学期密钥时（inputs 为空）版本号不含它
        parts.append(f"hidden inputs {inputs}")
    return _sha("\n".join(parts))[:16]


def execute_submission(nb: dict, auto_gids: list, opts: Options, slot: int, scratch_base: Path,
                       probes_source: str, seeds: dict, use_bwrap: bool, hide: list,
                       forkserver: sandbox.ForkServer | None = None) -> dict:
    """执行（必要时跳过让内核崩溃/卡死的单元格再试，最多 3 次）。返回可存盘的 dict。
    seeds：{grade_id: 这个检查的种子}，只有这次要检查的 grade_id（学期密钥本身从不发进内核）。"""
    skip: list[int] = []
    notes: list[str] = []
    ever_timeout = ever_crash = False
    for attempt in range(3):
        run_nb = copy.deepcopy(nb)
        for i in skip:
            run_nb["cells"][i]["source"] = (
                "raise RuntimeError('评分时跳过了这个单元格：它在上一次运行中让内核崩溃或超时')")
        control = {"nonce": secrets.token_hex(16), "seeds": seeds, "probes_source": probes_source,
                   "grade_ids": auto_gids, "probe_timeout": opts.limits.cell_timeout}
        res = sandbox.execute(run_nb, course_root=opts.course_root, scratch_base=scratch_base, hide=hide,
                              limits=opts.limits, slot=slot, control=control, use_bwrap=use_bwrap,
                              forkserver=forkserver)
        failed = res.crashed or res.killed_for_timeout
        ever_timeout |= res.killed_for_timeout
        ever_crash |= res.crashed
        if failed:
            what = "超时后被强制结束" if res.killed_for_timeout else "内核崩溃"
            where = f"第 {res.fail_cell + 1} 个单元格" if res.fail_cell is not None else "探针阶段"
            notes.append(f"{where}{what}" + ("，已跳过该单元格重新运行" if res.fail_cell is not None
                                              and attempt < 2 else ""))
        if failed and res.fail_cell is not None and res.fail_cell not in skip and attempt < 2:
            skip.append(res.fail_cell)
            continue
        break
    outputs = {str(k): v for k, v in res.outputs.items()}
    return {"outputs": outputs, "exec_counts": {str(k): v for k, v in res.exec_counts.items()},
            "timed_out_cells": res.timed_out_cells, "memory_cells": res.memory_cells, "records": res.records,
            "changed": res.changed, "flags": res.flags, "forks": res.forks, "junk": res.junk,
            "crashed": ever_crash, "killed_for_timeout": ever_timeout, "skipped": skip,
            "exec_notes": notes, "stderr_tail": res.stderr_tail[-600:], "seconds": round(res.seconds, 2),
            "max_forks": opts.limits.max_forks}


def _name_the_answer_cell_error(messages: dict, repaired: dict, ex: dict) -> None:
    """“没有找到 f”的真正原因常常是答题单元格本身运行出错（SyntaxError、IndentationError……：定义没执行到）。
    出错的答题单元格在测试单元格之前时，把它的错误写在说明的最前面，学生不用到下面的输出里去找。"""
    failed = []  # (单元格序号, "IndentationError: ...")：运行出错的答题单元格
    test_at = {}
    for i, cell in enumerate(repaired["cells"]):
        m = repair._meta(cell)
        if m.get("grade_id"):
            test_at[m["grade_id"]] = i
        if cell.get("cell_type") == "code" and m.get("solution"):
            err = next((o for o in ex.get("outputs", {}).get(str(i), []) if o.get("output_type") == "error"), None)
            if err is not None:
                first_line = (str(err.get("evalue", "")).splitlines() or [""])[0][:200]
                failed.append((i, f"{err.get('ename', '错误')}: {first_line}".rstrip(": ")))
    for gid, (got, points, msg) in list(messages.items()):
        if "没有找到" not in msg or gid not in test_at:
            continue
        before = [f for f in failed if f[0] < test_at[gid]]
        if before:
            i, what = before[-1]
            if what.startswith("NotImplementedError"):  # 单元格的顶层还是 raise NotImplementedError()：没作答
                messages[gid] = (got, points, f"还没有作答：第 {i + 1} 个单元格（答题单元格）仍是 raise NotImplementedError()")
                continue
            messages[gid] = (got, points, f"先修好第 {i + 1} 个单元格（答题单元格）：它运行时出错了（{what}），出错之后的定义都没有"
                                          f"执行到，所以检查时看到的是：{msg}")


def _checks_itself(source: str) -> bool:
    """单元格里有学生自己的检查：assert 语句、raise，或调用名字以 assert 开头的函数（np.testing.assert_allclose……）。"""
    import ast
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assert, ast.Raise)):
            return True
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name.lower().startswith("assert"):
                return True
    return False


def fakes_a_pass(source: str, text: str) -> bool:
    """学生自己的单元格（source）打印的 text 像伪造的“测试通过”（见 FAKE_PASS_RE）。"""
    text = _without_own_public_tests(source, text)
    return bool(FAKE_PASS_RE.search(text) or (OWN_PASS_RE.search(text) and not _checks_itself(source)))


def _without_own_public_tests(source: str, text: str) -> str:
    """学生在自己的单元格里调用 public_test(...) 时，它通过时打印的那一行（lib.public_tests.PASSED）是真的，
    不算伪造的“测试通过”：去掉这些行。单元格里没有调用 public_test、却打印了同样的一行，照样算。"""
    if "public_test(" not in source:
        return text
    return "\n".join(line for line in text.splitlines() if line.strip() != PASSED)


def judge(state: dict, repaired: dict, release: dict, checks: dict, notebook: str) -> dict:
    """在干净的评分进程里判分。学生代码从未在这个进程里运行过。"""
    seeds = state["seeds"]  # 每个检查自己的种子，和发进内核的相同
    ex = state["exec"]
    records = ex.get("records")
    cells = gradebook_io.grade_cells(release)
    scores: dict = {}
    messages: dict = {}
    notes: list = []
    tamper: list = []
    blank = report.unanswered_written(repaired, release)
    for gid, (points, auto) in cells.items():
        if not auto:  # 人工评分；没作答的文字题和 nbgrader 一样自动记 0 分
            scores[gid] = 0.0 if gid in blank else None
            if gid in blank:
                messages[gid] = (0.0, points, report.BLANK_MESSAGE)
            continue
        chk = checks.get(gid)
        if chk is None:
            scores[gid] = None
            notes.append(f"{gid} 没有对应的检查，需人工评分")
            continue
        rec = None if records is None else records.get(gid)
        if rec is None:
            frac, msg = 0.0, "没有记录到数据（内核在检查之前就崩溃或超时了）"
        else:
            try:
                frac, msg = chk.verify(rec, seeds[gid])
                frac = float(frac)
                if not math.isfinite(frac):
                    frac = 0.0
            except Exception as e:  # 检查本身出错：不给分，交给人看
                frac, msg = 0.0, f"检查程序出错（请助教查看）：{type(e).__name__}: {e}"
                notes.append(f"{gid} 的检查程序出错")
        frac = min(1.0, max(0.0, frac))
        scores[gid] = round(points * frac, 4)
        messages[gid] = (scores[gid], points, str(msg))
    _name_the_answer_cell_error(messages, repaired, ex)
    # 可疑迹象
    if ex.get("changed"):
        tamper.append("替换了 " + "、".join(sorted(set(ex["changed"]))[:8]))
    kinds = {}
    for kind, what in ex.get("flags") or []:
        kinds.setdefault(kind, []).append(what)
    for kind, whats in kinds.items():
        tamper.append(f"{Flag.label_of(kind)}：" + "、".join(sorted(set(whats))[:3]))
    if ex.get("junk"):
        tamper.append(f"向评分通道写入了 {ex['junk']} 行伪造数据")
    release_sources = {repair._src(c) for c in release["cells"]}
    for i, cell in enumerate(repaired["cells"]):
        if cell.get("cell_type") != "code" or repair.is_test(cell) or repair._src(cell) in release_sources:
            continue  # 只看学生自己写的单元格
        text = "".join(o.get("text", "") for o in ex["outputs"].get(str(i), []) if o.get("output_type") == "stream")
        if fakes_a_pass(repair._src(cell), text):
            tamper.append(f"第 {i + 1} 个单元格打印了像“测试通过”的文字")
            break
    # 可见测试通过、隐藏的检查没通过是正常情况（隐藏的输入发现了可见测试没发现的错误），不算可疑迹象
    if blank:
        notes.append(report.blank_note(blank))
    return {"scores": scores, "messages": messages, "notes": notes, "tamper": tamper, "blank": sorted(blank)}


def autograded_notebook(repaired: dict, ex: dict, messages: dict) -> dict:
    nb = copy.deepcopy(repaired)
    for i, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") == "markdown" and not repair._meta(cell).get("locked"):  # 学生能写的 Markdown
            cell["source"] = sanitize.safe_markdown(repair._src(cell))
        if cell.get("cell_type") != "code":
            continue
        # 输出来自学生的内核：从头重建，只留能安全显示的（反馈 HTML、formgrader 都显示它们，sanitize.py）
        cell["outputs"] = sanitize.safe_outputs(copy.deepcopy(ex["outputs"].get(str(i), [])))
        cell["execution_count"] = sanitize.safe_count(ex["exec_counts"].get(str(i)))
        for out in cell["outputs"]:
            if out.get("output_type") in ("display_data", "execute_result"):
                out.setdefault("metadata", {})
        gid = repair._gid(cell)
        if gid in messages and repair.is_test(cell):
            score, points, msg = messages[gid]
            cell["outputs"].append({"output_type": "stream", "name": "stdout",
                                    "text": f"【评分】{score:g} / {points:g} 分：{msg}\n"})
    for cell in nb["cells"]:  # 反馈顶部的汇总表读这里的说明（report.summary_rows）
        gid = repair._gid(cell)
        if gid in messages and repair._meta(cell).get("grade"):
            cell.setdefault("metadata", {})[report.GRADING_KEY] = {"message": messages[gid][2]}
    return nb


def opts_max_forks(ex: dict) -> int:
    return int(ex.get("max_forks") or sandbox.Limits.max_forks)


def status_of(repair_notes: list, ex: dict, verdict: dict) -> tuple[str, list]:
    """grades.csv 的 status（flags.Status 用 + 连接）和 detail 的各条：修复、超时、崩溃、可疑。"""
    tokens, detail = [], []
    if repair_notes:
        tokens.append(Status.REPAIRED)
        detail += repair_notes
    probe_timeouts = sorted(g for g, r in (ex.get("records") or {}).items()
                            if isinstance(r, dict) and str(r.get("error", "")).startswith("探针超时"))
    if ex.get("timed_out_cells") or ex.get("killed_for_timeout") or probe_timeouts:
        tokens.append(Status.TIMEOUT)
        if probe_timeouts:
            detail.append("检查时学生函数运行超时：" + "、".join(probe_timeouts))
        if ex.get("timed_out_cells"):
            detail.append("超时被中断的单元格：" + "、".join(str(int(i) + 1) for i in ex["timed_out_cells"]))
    fork_capped = int(ex.get("forks") or 0) > opts_max_forks(ex)
    if ex.get("crashed") or ex.get("memory_cells") or fork_capped:
        tokens.append(Status.CRASHED)
        if fork_capped:
            detail.append(f"创建的子进程超过上限（{opts_max_forks(ex)} 个），之后的创建被拒绝")
        if ex.get("memory_cells"):
            detail.append("内存超过上限的单元格：" + "、".join(str(int(i) + 1) for i in ex["memory_cells"]))
    detail += ex.get("exec_notes") or []
    if ex.get("crashed") and ex.get("stderr_tail"):
        tail = ex["stderr_tail"].strip().splitlines()[-1:] or [""]
        detail.append("内核最后的输出：" + tail[0][:200])
    if verdict["tamper"]:
        tokens.append(Status.SUSPECT)
        detail.append("疑似作弊，请人工查看：" + "；".join(verdict["tamper"]))
    detail += verdict["notes"]
    return Status.join(tokens), detail


def estimated_seconds(nb: dict) -> float:
    """粗略估计执行一份提交要几秒（这台 2 核机器上量的：全新内核导入 torch 约 1.4 秒，其余约 0.3 秒）。
    模板 fork 的内核（sandbox.ForkServer）不用导入，这个顺序只影响最后一两份。"""
    try:
        code = "\n".join(repair._src(c) for c in nb.get("cells", []) if c.get("cell_type") == "code")
        return 0.3 + (1.4 if runner.imports_torch(code) else 0.0)
    except Exception:  # noqa: BLE001 —— 只是排序用的估计，格式怪的提交照常评分
        return 0.3


def _safe_name(s: str) -> str:
    return re.sub(r"[^\w.@+-]", "_", s)[:150]


def _ensure_venv_on_path() -> None:
    """nbgrader 新建 gradebook 时会调用 PATH 上的 `alembic`；用 .venv/bin/python 直接运行时它不在 PATH 上。"""
    bindir = str(Path(sys.executable).parent)
    if shutil.which("alembic") is None and (Path(bindir) / "alembic").exists():
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


def _skip_slow_optional_imports() -> None:
    """jsonschema 导入可选的 rfc3987_syntax 时要现场编译一个语法（这台机器上约 4 秒）；nbformat 的校验
    用不到它检查的 iri 格式。没有它时 jsonschema 自己会跳过这个格式。只影响评分进程本身。"""
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)


def run(opts: Options) -> list[Row]:
    """grade 和 feedback 的全部流程，六步，每一步是 GradingRun 的一个方法：
    collect（认出下载里的学生和 notebook，坏文件进隔离区）→ repair → execute → judge（这三步在线程池里一份一份地做，
    见 GradingRun.prepare）→ record（写 gradebook、submitted/、autograded/、反馈；gradebook 忙时重试）→
    report（缺交和中断的行、grades.csv、汇总）。调用者负责课程的锁（lib/grading/course_lock.py）。"""
    g = GradingRun(opts)
    g.collect()
    with g.executing():
        for done in g.finished():
            g.record(done)
    return g.report()


@dataclass
class Done:
    """一份提交修复、执行、判分之后的结果（record 要写的一切）。"""

    item: object
    repaired: dict
    repair_notes: list
    state: dict
    verdict: dict
    autograded: dict
    unanswered: set


class GradingRun:
    """一次 grade 或 feedback 的运行：各步之间共用的东西（课程、release、gradebook、沙箱、线程池）放在这里。"""

    def __init__(self, opts: Options):
        _skip_slow_optional_imports()
        _ensure_venv_on_path()
        import warnings
        warnings.filterwarnings("ignore", module=r"nbgrader\..*")
        warnings.filterwarnings("ignore", message=r".*not in session.*")
        self.opts = opts
        self.course = opts.course_root = opts.course_root.resolve()
        if not (self.course / "nbgrader_config.py").exists():
            raise SystemExit(f"{self.course} 不是课程根目录（没有 nbgrader_config.py）。请在课程根目录运行。")
        self.release = release_notebooks(self.course, opts.assignment)
        self.notebooks = list(self.release)
        self.inputs = hidden_inputs.HiddenInputs.for_course(self.course)  # 每个检查的种子：没有学期密钥时是公开的 SEED
        self._refuse_secret_without_sandbox()
        self.ws = self.course / ".grading" / opts.assignment
        (self.ws / "state").mkdir(parents=True, exist_ok=True)
        self.db_url = gradebook_io.course_db_url(self.course)  # nbgrader_config.py 的 CourseDirectory.db_url
        self.say = (lambda *a: None) if opts.quiet else (lambda *a: print(*a, file=sys.stderr))
        self.rows: list[Row] = []
        self.previous = read_csv(self.course / "grades.csv")  # 写 gradebook 失败的行保留上次的分数
        self.interrupted = False
        self.db_stuck = False  # 上一次写 gradebook 等满了也没写进去
        self.t0 = time.monotonic()

    # ---- collect ----------------------------------------------------------------------------------------------
    def collect(self) -> None:
        """导入下载（lib/grading/collect.py），隔离认不出的文件，排好执行的顺序，后台开始准备 gradebook。"""
        opts = self.opts
        imported = collect_mod.gather(opts, self.notebooks, self.ws, gradebook_io.read_duedate(self.db_url, opts.assignment),
                                      guarded=not self.inputs.public)
        self.items, self.roster = imported.items, imported.roster_ids
        self.open = [nb for nb in self.notebooks if imported.is_open(nb)]  # 这次评的 notebook（别的还没到期）
        self.checks = load_checks(opts.checks_module)
        self.probes_source = probes_mod.kernel_source(opts.probes_file)  # probes.py + 每个练习模块的探针一段
        self.version = grader_version(opts, self.probes_source, self.inputs.version())
        self._report_previous_run()
        (self.ws / "last_run.json").write_text(json.dumps({
            "submissions": str(Path(opts.submissions).resolve()), "jobs": opts.jobs, "name_regex": opts.name_regex,
            "roster": str(opts.roster) if opts.roster else None, "cell_timeout": opts.limits.cell_timeout,
            "memory_mb": opts.limits.memory_mb, "max_procs": opts.limits.max_procs,
            "checks_module": opts.checks_module, "probes_file": str(opts.probes_file), "use_bwrap": opts.use_bwrap,
            "user": getpass.getuser(), "host": socket.gethostname(), "command": "feedback" if opts.reuse_import else "grade",
            "at": dt.datetime.now().astimezone().isoformat(timespec="seconds")}, ensure_ascii=False, indent=1), encoding="utf-8")
        self._start_gradebook_setup(imported)
        quarantine = self.ws / "quarantine"
        for it in self.items:
            if it.reason and not it.skip and (it.notebook is None or it.notebook in self.open):
                qp = quarantine / _safe_name(it.src.replace("/", "__"))
                qp.parent.mkdir(parents=True, exist_ok=True)
                if it.data:
                    qp.write_bytes(it.data)
                self.rows.append(Row(it.student_id or "", it.notebook or "", None, None, Status.QUARANTINED.value,
                                     f"{it.reason}；文件：{it.src}"))
        # 慢的先评（最长处理时间优先）：并行时不会在最后只剩一个槽位跑一份慢的、另一个槽位空等
        self.todo = sorted((it for it in self.items if it.reason is None and it.notebook in self.open),
                           key=lambda it: -estimated_seconds(it.nb))

    def _report_previous_run(self) -> None:
        """另一位助教（或上一次的自己）已经评过的：说清楚是谁、什么时候，这次哪些直接沿用执行结果。"""
        try:
            last = json.loads((self.ws / "last_run.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return
        todo = [it for it in self.items if it.reason is None and it.notebook in self.open]
        reused = sum(self._stored_state(it) is not None for it in todo)
        if last.get("user") and reused:
            self.say(f"{reused} 份提交已经评过（上一次是 {last['user']} 在 {last.get('host', '?')} 上于 "
                     f"{lms.course_time(last.get('at', '?'))} "
                     f"运行的 {last.get('command', 'grade')}）：沿用那次的执行结果，只重新判分、写入；"
                     f"{len(todo) - reused} 份要执行。")
        olds = [self._stored_header(it) for it in todo]
        stale = [old for old in olds if old is not None and old.get("version") != self.version]
        if stale:  # 同一份文件执行过，但评分器变了：说清楚为什么这次要重新执行
            self.say(f"{len(stale)} 份提交上次执行过，但这次要重新执行：评分程序、探针、限额或隐藏输入（学期密钥，"
                     "python -m lib.grading secret）和上次不同。" + self._what_a_rerun_changes(stale))

    def _what_a_rerun_changes(self, stale: list) -> str:
        """重新执行会不会改变分数：只有有学期密钥的课程第一次换到每个检查一个种子（hidden_inputs.DERIVATION）时，
        隐藏输入才会变（见 README“学期密钥”）。"""
        before_v2 = sum(bool(old.get("seed")) for old in stale)  # 旧版的状态存一个非零的学期种子
        if before_v2 and not self.inputs.public:
            return (f"其中 {before_v2} 份是上一版评的：那时整个课程一个种子，它会进学生的内核（学生能读到，"
                    f"从而算出所有隐藏输入），现在每个检查一个种子（{hidden_inputs.DERIVATION}），隐藏输入全部换新。"
                    "全对或全错的答案分数不变；只在部分输入上出错的答案，分数可能变（这一批里所有人都用新的输入）。")
        return "分数只取决于答案，重新执行之后应当不变。"

    def _stored_header(self, it) -> dict | None:
        """上次执行同一份文件（同样的内容）时存下的状态（评分器版本、种子……）；没有执行过时 None。"""
        sp = self.ws / "state" / f"{_safe_name(it.student_id)}__{_safe_name(it.notebook)}.json"
        try:
            old = json.loads(sp.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return old if old.get("sha") == it.sha else None

    def _start_gradebook_setup(self, imported) -> None:
        """新建 gradebook 里的作业结构要一两秒：放到后台线程里，和第一批提交的执行重叠（执行在子进程里，
        不占 GIL）；第一次写分数之前等它完成（gradebook_ready）。结构不一致时照样在写任何分数之前退出。"""
        self._setup_error: list = []

        def setup():
            try:
                gradebook_io.ensure_assignment(self.db_url, self.opts.assignment, self.release,
                                               collect_mod.utc_naive(imported.due) if imported.due_from_option else None)
            except Exception as e:  # noqa: BLE001 —— 交给主线程报告
                self._setup_error.append(e)

        self._setup_thread = threading.Thread(target=setup, daemon=True)
        self._setup_thread.start()

    def gradebook_ready(self) -> None:
        self._setup_thread.join()
        if self._setup_error:
            e = self._setup_error[0]
            if isinstance(e, RuntimeError):
                raise SystemExit(f"gradebook（{gradebook_io.describe(self.db_url)}）里的作业结构和现在的 release/ 不一致，"
                                 f"而且已经有提交（{e}）。如果 release/ 是有意修改的，请先备份 gradebook，"
                                 "再删除它（SQLite 是 gradebook.db 文件）后评分。")
            if gradebook_io.is_busy(e):
                raise SystemExit(f"gradebook（{gradebook_io.describe(self.db_url)}）一直被别的程序占着（{e}），"
                                 "还没有写任何分数。等它结束（例如关掉 formgrader 里没保存的编辑）再运行同一个命令。")
            raise e

    # ---- repair → execute → judge（线程池里，一份一份） ----------------------------------------------------
    def _stored_state(self, it) -> dict | None:
        """上次执行这份提交存下的结果：原始文件和评分器（含隐藏输入的种子）都没变时才用。"""
        sp = self.ws / "state" / f"{_safe_name(it.student_id)}__{_safe_name(it.notebook)}.json"
        try:
            old = json.loads(sp.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return old if old.get("sha") == it.sha and old.get("version") == self.version else None

    def prepare(self, turn: int, it) -> Done:
        """repair（按 release 修复）→ execute（沙箱里执行 + 探针；存下的结果能用就不执行）→ judge（干净的进程里判分）。"""
        try:
            rel = self.release[it.notebook]
            repaired, rnotes = repair.repair(it.nb, rel)
            state = self._stored_state(it)
            if state is not None:
                self.slots.pass_turn(turn)  # 用存下的执行结果：不用槽，马上让后面的开始执行（不等这一份判分）
            else:
                state = self.execute(turn, it, repaired, rel)
            verdict = judge(state, repaired, rel, self.checks, it.notebook)
            agnb = autograded_notebook(repaired, state["exec"], verdict["messages"])
            unanswered = set(gradebook_io.grade_cells(rel)) - repair.answered_cells(repaired, rel)
            return Done(it, repaired, rnotes, state, verdict, agnb, unanswered)
        finally:
            self.slots.pass_turn(turn)  # 出错或不用执行时也让出这一轮，后面的不用等

    def execute(self, turn: int, it, repaired: dict, rel: dict) -> dict:
        auto_gids = [g for g, (p, auto) in gradebook_io.grade_cells(rel).items() if auto]
        seeds = self.inputs.seeds(auto_gids)
        slot = self.slots.take(turn)  # Ctrl-C 之后还没开始的：抛出 Interrupted，不再执行
        try:
            ex = execute_submission(repaired, auto_gids, self.opts, slot, self.scratch, self.probes_source, seeds,
                                    self.use_bwrap, self.hide, self.forkserver)
        finally:
            self.slots.give_back(slot)
        state = {"sha": it.sha, "version": self.version, "seeds": seeds, "exec": ex, "src": it.src}
        sp = self.ws / "state" / f"{_safe_name(it.student_id)}__{_safe_name(it.notebook)}.json"
        tmp = sp.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, ensure_ascii=False), encoding="utf-8")
        tmp.replace(sp)
        return state

    @contextlib.contextmanager
    def executing(self):
        """沙箱、线程池、gradebook 的连接：进入时准备好并开始执行；Ctrl-C 时结束正在运行的沙箱，评完的照常写完；
        离开时全部收拾干净（临时文件夹、模板进程、连接）。"""
        self._choose_sandbox()
        self.hide = [Path(self.opts.submissions).resolve()]
        if Path(self.opts.submissions).is_file():
            self.hide = [Path(self.opts.submissions).resolve().parent]
        stale = clean_stale_scratch()
        if stale:
            self.say(f"清理了 {stale} 个上次评分被强制结束（kill -9、断电）后留下的临时文件夹。")
        self.scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
        (self.scratch / "owner.pid").write_text(str(os.getpid()), encoding="utf-8")
        if sandbox.is_under(self.scratch, self.course):
            raise SystemExit("临时目录在课程目录里面（TMPDIR），请把 TMPDIR 设到课程目录之外。")
        self.slots = InOrderSlots(max(1, self.opts.jobs))
        self.forkserver = sandbox.ForkServer(self.scratch / "templates") if self.use_bwrap and self.opts.fork_server else None
        # 线程数是槽位数的两倍：一个线程在判分、整理结果时，另一个已经修复好下一份、等着槽位，
        # 沙箱之间几乎没有空档（同时执行的提交仍然只有 jobs 份，由 slots 限制）
        self.pool = ThreadPoolExecutor(max_workers=2 * max(1, self.opts.jobs))
        sandbox.STOP.clear()
        ctrlc = CtrlC().__enter__()  # 第一次 Ctrl-C 只结束沙箱、不再开始新的；评完的照常写进 gradebook 和 grades.csv
        self.futures = [self.pool.submit(self.prepare, turn, it) for turn, it in enumerate(self.todo)]
        self.gb = None
        try:
            try:
                self._wait_for_gradebook()
                self.gb = gradebook_io.open_gradebook(self.db_url)
                self.late_penalties = gradebook_io.late_penalties(self.course)
                self.bar = None
                if self.opts.progress and not self.opts.quiet and self.todo and not self.interrupted:
                    from tqdm.auto import tqdm
                    self.bar = tqdm(total=len(self.todo), desc="反馈" if self.opts.reuse_import else "评分", unit="份",
                                    file=sys.stderr, dynamic_ncols=True)
                yield self
            except KeyboardInterrupt:  # Ctrl-C：结束正在运行的沙箱，保留评完的，马上写 grades.csv
                self._interrupt()
            except BaseException:
                sandbox.STOP.set()  # gradebook 出错等：已经开始的沙箱马上结束
                for f in self.futures:
                    f.cancel()
                raise
            finally:
                self.pool.shutdown(wait=True, cancel_futures=True)
        finally:
            ctrlc.__exit__()
            self.interrupted = self.interrupted or ctrlc.hit
            if getattr(self, "bar", None):
                self.bar.close()
            if self.gb is not None:
                self.gb.close()
            if self.forkserver is not None:
                self.forkserver.close()
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _sandbox_wanted(self) -> tuple[bool, bool, str]:
        """(用不用 bwrap, bwrap 能不能用, 不能用时的说明)。"""
        bw_ok, bw_msg = sandbox.bwrap_status()
        return (bw_ok if self.opts.use_bwrap is None else (self.opts.use_bwrap and bw_ok)), bw_ok, bw_msg

    def _refuse_secret_without_sandbox(self) -> None:
        """有学期密钥时，学生的代码不能读到它（.grading/secret，或以同一个用户读评分进程的内存）。有 bwrap 时读不到；
        没有 bwrap 时只有以 root 评分、内核换成槽位的 uid（而密钥对其他人不可读）才读不到。其余情况拒绝评分，
        除非助教明确加了 --secret-without-sandbox。在导入下载之前检查，拒绝时什么也没有写。"""
        if self.inputs.public:
            return
        use_bwrap = self._sandbox_wanted()[0]
        if not sandbox.kernel_can_read(hidden_inputs.secret_path(self.course), use_bwrap):
            return
        if self.opts.secret_without_sandbox:
            print("警告：没有 bubblewrap 沙箱，学生的代码以评分人的身份运行，能读到学期密钥（.grading/secret）"
                     "和评分进程的内存：读到密钥的人能算出这个学期所有的隐藏输入。已按 --secret-without-sandbox 照常评分；"
                     "读 .grading/ 的提交会标成 suspect。", file=sys.stderr)
            return
        raise SystemExit("这个课程有学期密钥（.grading/secret），但这次评分没有 bubblewrap 沙箱"
                         + ("（按要求关闭了）" if self.opts.use_bwrap is False else "（找不到可用的 bwrap）")
                         + "：学生的代码会以评分人的身份运行，能读到密钥文件和评分进程的内存，读到密钥就能算出这个学期"
                         "所有的隐藏输入。请安装 bubblewrap（sudo apt-get install bubblewrap）后再评分；或者以 root 评分"
                         "（Python 要装在所有用户都能读的地方，学生代码换成别的 uid）；确实要这样评，加 --secret-without-sandbox。")

    def _choose_sandbox(self) -> None:
        self.use_bwrap, bw_ok, bw_msg = self._sandbox_wanted()
        if not self.use_bwrap:
            self.say("注意：" + (bw_msg if not bw_ok else "已按要求关闭 bubblewrap 沙箱。"))
            if os.geteuid() == 0:
                self.say("警告：以 root 身份评分且没有沙箱，学生代码也以 root 身份运行。请改用普通用户，或安装 bubblewrap。")
        elif os.geteuid() == 0 and not sandbox.bwrap_can_drop_uid():
            self.say("注意：bwrap 在这里不能切换 uid，学生代码在沙箱里以 root 身份运行，进程数只靠审计钩子限制。")

    def _wait_for_gradebook(self) -> None:
        try:
            self.gradebook_ready()
        except KeyboardInterrupt:  # Ctrl-C 时 gradebook 还在准备：结束沙箱，等它准备好，把评完的写进去
            self._interrupt()
            self.gradebook_ready()

    def _interrupt(self) -> None:
        self.interrupted = True
        sandbox.STOP.set()
        for f in self.futures:
            f.cancel()
        if getattr(self, "bar", None):
            self.bar.close()
            self.bar = None
        self.say("\n正在中断：结束正在运行的沙箱，保存已经评完的……")

    def finished(self):
        """修复、执行、判分完的提交，按完成的顺序；一份出错不影响其他（出错的那份直接记一行 error）。"""
        for fut in as_completed(self.futures):
            try:
                yield fut.result()
            except (sandbox.Interrupted, CancelledError):  # Ctrl-C 之后没评完的：下次运行再评
                continue
            except Exception as e:  # 不记分、不存执行结果，下次运行会重评
                it = self.todo[self.futures.index(fut)]
                why = (f"沙箱里的内核没能启动（评分环境的问题，学生代码没有运行）：{e}"
                       if isinstance(e, sandbox.SandboxError) else f"评分器内部错误（请报告）：{type(e).__name__}: {e}")
                self.rows.append(Row(it.student_id, it.notebook, None, None, Status.ERROR.value, why))
                self._tick()

    def _tick(self) -> None:
        if getattr(self, "bar", None):
            self.bar.update(1)

    # ---- record ---------------------------------------------------------------------------------------------
    def record(self, done: Done) -> None:
        """写进 gradebook（分数、人工分的标记、迟交扣分）、submitted/、autograded/ 和反馈 HTML。gradebook 被
        formgrader 或别的程序占着时等、重试（gradebook_io.retrying）；一直写不进去时这一行记 error（评分这边的问题，
        不记分、不是 0 分），grades.csv 保留上次的分数，下次运行从存下的执行结果重写，不再执行。"""
        it, opts = done.item, self.opts
        status, detail = status_of(done.repair_notes, done.state["exec"], done.verdict)
        sub_dir = self.course / "submitted" / it.student_id / opts.assignment
        ag_dir = self.course / "autograded" / it.student_id / opts.assignment
        changed = gradebook_io.changed_answers(sub_dir / f"{it.notebook}.ipynb", done.repaired, self.release[it.notebook])

        def write():
            written = gradebook_io.write_scores(
                self.gb, opts.assignment, it.student_id, it.notebook, done.verdict["scores"], done.unanswered,
                commit=True, changed=changed, timestamp=collect_mod.utc_naive(it.submitted_at),
                late=self.late_penalties, submitted={p.stem for p in sub_dir.glob("*.ipynb")} | {it.notebook})
            if opts.feedback:
                gradebook_io.render_feedback(self.gb, self.db_url, opts.assignment, it.student_id, it.notebook,
                                             done.autograded, self.course / "feedback" / it.student_id / opts.assignment
                                             / f"{it.notebook}.html")
            return written

        try:  # 上一份已经等满了还写不进去：这一份只试一次（不再每份都等好几分钟），一写成功就恢复正常的重试
            written = gradebook_io.retrying(self.gb, write, attempts=1 if self.db_stuck else gradebook_io.RETRIES)
            self.db_stuck = False
            for d, nbd in ((sub_dir, done.repaired), (ag_dir, done.autograded)):
                d.mkdir(parents=True, exist_ok=True)
                (d / f"{it.notebook}.ipynb").write_text(json.dumps(nbd, ensure_ascii=False, indent=1), encoding="utf-8")
            collect_mod.write_timestamp(sub_dir, it)
        except Exception as e:  # noqa: BLE001 —— 评分这边的问题（gradebook 一直忙、磁盘满……）：不是学生的
            self.db_stuck = gradebook_io.is_busy(e)
            self._keep_previous(it, f"{gradebook_io.explain_failure(e, self.db_url)}这一份的分数没有写进 gradebook")
            self._tick()
            return
        status, detail = collect_mod.annotate(status, detail + written.notes, it)
        if written.pending:
            detail.append(f"{written.pending} 个单元格待人工评分（formgrader）")
        self.rows.append(Row(it.student_id, it.notebook, written.score, written.max_score, status, "；".join(detail),
                             len(done.verdict["blank"]), int(written.pending or 0)))
        self._tick()

    def _keep_previous(self, it, why: str) -> None:
        """这一份这次写不进去：记 error，分数沿用上一次 grades.csv 里的（有的话）。"""
        old = self.previous.get((it.student_id, it.notebook))
        kept = ""
        if old and old["score"] != "":
            kept = f"；grades.csv 里是上一次评分的结果（{old['score']} / {old['max_score']}，{old['status']}），反馈也还是上一次的"
        self.rows.append(Row(it.student_id, it.notebook, float(old["score"]) if kept else None,
                             float(old["max_score"]) if kept and old["max_score"] else None, Status.ERROR.value,
                             f"{why}{kept}。修好之后再运行同一个命令：不会重新执行，只重写这些"))

    # ---- report ---------------------------------------------------------------------------------------------
    def report(self) -> list[Row]:
        """缺交和中断的行、grades.csv（先写临时文件再改名：另一个进程读到的总是完整的一份）、汇总。"""
        rows = self.rows
        if self.interrupted:
            done_keys = {(r.student_id, r.notebook) for r in rows}
            for it in self.todo:
                if (it.student_id, it.notebook) not in done_keys:
                    rows.append(Row(it.student_id, it.notebook, None, None, Status.INTERRUPTED.value,
                                    "评分被中断（Ctrl-C），这份还没有评：再运行同一个命令会接着评"))
        counted = counted_notebooks(rows, self.open) if self.open else []
        rows += missing_rows(rows, self.roster, counted)
        rows.sort(key=lambda r: (r.student_id == "", r.student_id, r.notebook, r.status, r.detail))
        write_csv(self.course / "grades.csv", rows)
        if self.interrupted:
            not_graded = (Status.INTERRUPTED.value, Status.MISSING.value, Status.QUARANTINED.value)
            done = sum(r.status not in not_graded for r in rows)
            left = sum(r.status == Status.INTERRUPTED.value for r in rows)
            print(f"已中断：评完的 {done} 份已经保存（gradebook、反馈、grades.csv），还有 {left} 份没有评"
                  "（grades.csv 里 status 为 interrupted）。", file=sys.stderr)
            raise KeyboardInterrupt
        if not self.opts.quiet:
            print(summary(rows, time.monotonic() - self.t0, self.use_bwrap, what="反馈" if self.opts.reuse_import else "评分",
                          not_counted=[nb for nb in self.open if nb not in counted],
                          not_open=[nb for nb in self.notebooks if nb not in self.open]))
        return rows


class InOrderSlots:
    """jobs 个执行槽，严格按 todo 的顺序（慢的先评）发出去：第 i 份要等第 0…i-1 份都拿到了槽（或用不着槽）。

    线程数是槽数的两倍，如果让线程自己抢槽，谁先评由线程调度决定：“慢的先评”就不一定成立，
    --jobs 1 时的先后每次运行也可能不同。Ctrl-C（sandbox.STOP）之后还在等的抛出 sandbox.Interrupted。"""

    def __init__(self, n: int):
        self._free = list(range(n))
        self._next = 0  # 下一个可以拿槽的轮次
        self._passed: set[int] = set()
        self._cv = threading.Condition()

    def take(self, turn: int) -> int:
        with self._cv:
            while not (self._next == turn and self._free):
                if sandbox.STOP.is_set():
                    raise sandbox.Interrupted()
                self._cv.wait(timeout=0.5)
            if sandbox.STOP.is_set():
                raise sandbox.Interrupted()
            self._pass(turn)
            return self._free.pop(0)

    def pass_turn(self, turn: int) -> None:
        with self._cv:
            self._pass(turn)

    def give_back(self, slot: int) -> None:
        with self._cv:
            self._free.append(slot)
            self._cv.notify_all()

    def _pass(self, turn: int) -> None:
        self._passed.add(turn)
        while self._next in self._passed:
            self._next += 1
        self._cv.notify_all()


class CtrlC:
    """评分期间的 Ctrl-C（SIGINT）：第一次不打断主线程正在写的那一份，只让正在运行的沙箱在半秒内结束、
    不再开始新的（sandbox.STOP），评完的照常写进 gradebook、反馈和 grades.csv；再按一次立刻中断。"""

    def __init__(self):
        self.hit = False
        self.old = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        if self.hit:
            raise KeyboardInterrupt
        self.hit = True
        sandbox.STOP.set()
        try:  # 信号处理函数里不用 print（主线程可能正在往 stderr 写）
            os.write(2, "\n正在中断：结束正在运行的沙箱，保存已经评完的……（再按一次 Ctrl-C 立刻退出）\n".encode())
        except OSError:
            pass

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
            self.old = None


SCRATCH_PREFIX = "lecture07-grading-"


def clean_stale_scratch(base: Path | None = None) -> int:
    """上次评分被 kill -9 或断电时留下的临时文件夹（/tmp/lecture07-grading-*）：记下的评分进程已经不在了就删掉。
    没有 owner.pid 的（更早版本留下的）超过一小时才删。返回删了几个。"""
    base = Path(base or tempfile.gettempdir())
    n = 0
    for d in base.glob(SCRATCH_PREFIX + "*"):
        try:
            if not d.is_dir() or d.stat().st_uid != os.geteuid():
                continue
            owner = d / "owner.pid"
            if owner.exists():
                try:
                    os.kill(int(owner.read_text().strip()), 0)
                    continue  # 那次评分还在运行
                except ProcessLookupError:
                    pass
                except (ValueError, PermissionError):
                    continue
            elif time.time() - d.stat().st_mtime < 3600:
                continue
        except OSError:
            continue
        shutil.rmtree(d, ignore_errors=True)
        n += not d.exists()
    return n


def counted_notebooks(rows: list[Row], notebooks: list[str]) -> list[str]:
    """计入的 notebook：至少有一名学生交了（评过或进了隔离区）的。还没有人交的（学期中还没发布的）不算谁“没交”，
    导出时也不计入满分。一个也没有人交时全部计入。"""
    seen = {r.notebook for r in rows if r.notebook and r.status != Status.MISSING.value}
    return [nb for nb in notebooks if nb in seen] or list(notebooks)


def missing_rows(rows: list[Row], roster, notebooks: list[str]) -> list[Row]:
    """没交的 notebook：名单上的每个学生、以及交了别的 notebook 的学生，缺哪个 notebook 就加一行 missing，
    score 留空——没交不是交了得 0 分（导出里也写“未交”）。"""
    have = {(r.student_id, r.notebook) for r in rows if r.status != Status.QUARANTINED.value}
    held = {(r.student_id, r.notebook) for r in rows if r.status == Status.QUARANTINED.value}
    held_students = {r.student_id for r in rows if r.status == Status.QUARANTINED.value and r.student_id}
    handed = {r.student_id for r in rows if r.student_id and r.status != Status.QUARANTINED.value}
    out = []
    for sid in sorted(set(roster or ()) | handed):
        for nbname in notebooks:
            if (sid, nbname) in have or (sid, nbname) in held:
                continue  # 评过了，或者已经有一行 quarantined 说明这个 notebook 的文件为什么没评（一份一行）
            if sid in held_students:
                why = "没有可评分的提交：这个学生有文件进了隔离区（见同一学生的 quarantined 行），可能就是这个 notebook"
            else:
                why = "没有提交" if sid not in handed else "没有提交这个 notebook（交了别的）"
            out.append(Row(sid, nbname, None, None, Status.MISSING.value, why))
    return out


def read_csv(path: Path) -> dict:
    """上一次的 grades.csv：{(学号, notebook): 那一行}；没有或读不了时为空。"""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            return {(r["student_id"], r["notebook"]): r for r in csv.DictReader(f)}
    except (OSError, csv.Error, KeyError, UnicodeDecodeError):
        return {}


def write_csv(path: Path, rows: list[Row]) -> None:
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="", encoding="utf-8-sig") as f:  # 带 BOM：中文 Windows 上的 Excel 才不乱码
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow(r.as_csv())
    tmp.replace(path)


def summary(rows: list[Row], seconds: float, use_bwrap: bool, what: str = "评分", not_counted: list = (),
            not_open: list = ()) -> str:
    """运行结束时的汇总。what：“评分”（grade）或“反馈”（feedback：不重新执行，只重写反馈和 grades.csv）；
    not_counted：还没有人交、不计入的 notebook（counted_notebooks）；not_open：这次不评的 notebook
    （还没到截止时间、也没有点名，见 collect.choose_notebooks）。"""
    counts: dict = {}
    for r in rows:
        for tok in Status.split(r.status):
            counts[tok] = counts.get(tok, 0) + 1
    graded = [r for r in rows if r.score is not None and r.max_score]
    lines = [f"{what}完成：{len(rows)} 行，用时 {seconds:.1f} 秒" + ("" if use_bwrap else "（未使用 bwrap 沙箱）")]
    lines.append("状态：" + "，".join(f"{k} {counts[k]}" for k in sorted(counts, key=Status.sort_key)))
    if not_counted:
        counted = sorted({r.notebook for r in rows if r.notebook} - set(not_counted))
        lines.append(f"计入的 notebook：{'、'.join(counted)}（至少一名学生交了的）；还没有人交的 {'、'.join(not_counted)} "
                     "不计入，不算谁没交，导出时也不计入满分。")
    if not_open:
        lines.append(f"这次不评的 notebook：{'、'.join(not_open)}（给了 --notebooks 时它没有被点名；没给时作业还没截止或者没有截止时间）：不写反馈，"
                     "不算谁没交。")
    missing = [r for r in rows if r.status == Status.MISSING.value]
    if missing:
        lines.append(f"没交的 notebook：{len(missing)} 个（{len({r.student_id for r in missing})} 名学生），"
                     "grades.csv 里 status 为 missing、score 留空（不是 0 分），导出里写“未交”。")
    blank = [r.blank_written for r in rows if r.blank_written]
    if blank:
        lines.append(f"没作答的文字题：{sum(blank)} 个（{len(blank)} 份提交），已自动记 0 分，formgrader 里不用再打开。")
    pending = [r.pending for r in rows if r.pending]
    if pending:
        lines.append(f"待人工评分：{sum(pending)} 个单元格（{len(pending)} 份提交），分数里还没有这些题；"
                     "在 formgrader 里评完后运行 python -m lib.grading feedback 作业名。")
    else:
        lines.append("待人工评分：0 个单元格。")
    if graded:
        pct = [100 * r.score / r.max_score for r in graded]
        lines.append(f"平均得分率 {sum(pct) / len(pct):.1f}%（{len(graded)} 份已评分）")
        bins = [0] * 10
        for p in pct:
            bins[min(9, int(p // 10))] += 1
        top = max(bins) or 1
        for i, n in enumerate(bins):
            lo = i * 10
            rng = f"{lo:3d}-{lo + 10 if i < 9 else 100:3d}%"
            lines.append(f"  {rng} | {'#' * math.ceil(30 * n / top) if n else '':30s} {n}")
    lines.append("成绩表：grades.csv；可疑、超时、崩溃和隔离的行请人工查看 detail 列。")
    return "\n".join(lines)
