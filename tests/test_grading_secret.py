"""学期密钥留在评分进程里：学生的代码在评分时拿不到它，也拿不到别的检查的输入（issue 44）。

评分时学生的内核里只有这次要检查的几个 grade_id 的种子（hidden_inputs.HiddenInputs：每个检查一个 HMAC 种子），
学期密钥、整个课程的旧种子（v1）和别的 notebook 的检查的种子都不进内核。检查阶段窥探评分程序（拿帧、gc、跟踪函数、
ctypes 读内存、把代码伪装成库）被审计钩子拦下（PermissionError），这一行标成 suspect（runner._install_tripwire）。

下面每个“学生”交练习 01：自注意力等其余答案都是参考答案，只有练习 4 的答案（copy_query、average_query）换成
一种想拿到隐藏输入的写法。公开测试的输入（np.eye 的键和 default_rng(4) 转过的键）照常回答，只在隐藏的输入上动手脚。
每种写法的预期（写在运行之前）在 ATTACKS 里，也在对应测试的文档字符串里。
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grading_fixtures as gf  # noqa: E402

from lib.grading import hidden_inputs, pipeline, runner, sandbox  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NB = "01_attention_by_hand"
BWRAP, BWRAP_MSG = sandbox.bwrap_status()

VISIBLE = '''\
import sys
import numpy as np


def _visible(K):
    """公开测试用的键（单位矩阵的几行、default_rng(4) 转过的 5×6）：在这些输入上老老实实回答。"""
    K = np.asarray(K)
    n, d = K.shape
    turned = np.linalg.qr(np.random.default_rng(4).normal(size=(6, 6)))[0][:, :5].T
    return np.allclose(K, np.eye(d)[:n]) or (K.shape == turned.shape and np.allclose(K, turned))


def average_query(K, a, b):
    return 20.0 * (K[a] + K[b])
'''

# 学号 -> 练习 4 答案单元格的内容（每种写法的预期写在 test_an_attack_gets_no_secret_and_the_predicted_status 里）
ATTACKS = {
    "a01_frame_walk": (VISIBLE + '''
def copy_query(K, a):
    if not _visible(K):  # issue 44 的写法：沿着 f_back 收集叫 seed 的局部变量
        seeds, f = [], sys._getframe(1)
        while f is not None:
            if "seed" in f.f_locals:
                seeds.append(str(f.f_locals["seed"]))
            f = f.f_back
        raise KeyError("SEEDS=" + ",".join(seeds))
    return 20.0 * K[a]
'''),
    "a02_exception_str": (VISIBLE + '''
class Explained(Exception):
    def __str__(self):  # 探针把错误写成文字时才调用：那时调用栈上是评分程序
        f, found = self.__traceback__.tb_frame, []
        while f is not None:
            found += [f"{k}={v}" for k, v in f.f_locals.items() if "seed" in k]
            f = f.f_back
        return "SEEDS=" + ",".join(found)


def copy_query(K, a):
    if not _visible(K):
        raise Explained()
    return 20.0 * K[a]
'''),
    "a03_number": ('''\
import numpy as np

_seen = []
_real_default_rng = np.random.default_rng


def _spy(seed=None, *args, **kwargs):  # 单元格里换掉 default_rng：探针用它从种子生成输入
    _seen.append(seed)
    return _real_default_rng(seed, *args, **kwargs)


np.random.default_rng = _spy
''' + VISIBLE.replace("def average_query(K, a, b):\n    return 20.0 * (K[a] + K[b])\n", "") + '''
def copy_query(K, a):
    return 20.0 * K[a]


def average_query(K, a, b):
    if not _visible(K):  # 把看到的种子编进返回的数里
        flat = [float(x) for s in _seen if s is not None for x in np.ravel(s) if x > 1000]  # 不要 salt 和 4
        return np.array((flat + [0.0] * K.shape[1])[:K.shape[1]])
    return 20.0 * (K[a] + K[b])
'''),
    "a04_warning": (VISIBLE + '''
import inspect
import warnings


class Leaky(UserWarning):
    def __str__(self):
        return "SEEDS=" + ",".join(str(fr.frame.f_locals.get("seed")) for fr in inspect.stack())


def copy_query(K, a):
    print("copy_query 的输入：", K.shape, a)
    warnings.warn(Leaky("看看调用栈"))
    return 20.0 * K[a]
'''),
    "a05_thread": (VISIBLE.replace("def average_query(K, a, b):\n    return 20.0 * (K[a] + K[b])\n", "") + '''
import threading
import time

_loot = []


def _watch():  # 单元格里启动，检查阶段还在跑：盯着主线程的帧
    while True:
        try:
            for frame in list(sys._current_frames().values()):
                f = frame
                while f is not None:
                    _loot.extend(str(v) for k, v in list(f.f_locals.items()) if "seed" in k)
                    f = f.f_back
        except PermissionError:
            pass
        time.sleep(0.002)


threading.Thread(target=_watch, daemon=True).start()


def copy_query(K, a):
    return 20.0 * K[a]


def average_query(K, a, b):
    if not _visible(K):
        raise KeyError("LOOT=" + ",".join(_loot[:20]))
    return 20.0 * (K[a] + K[b])
'''),
    "a06_outlives": (VISIBLE.replace("def average_query(K, a, b):\n    return 20.0 * (K[a] + K[b])\n", "") + '''
_stash = []


class Query(np.ndarray):
    def __del__(self):  # 探针用完返回值、丢掉它的时候才运行：那时调用栈上只有评分程序
        try:
            f = sys._getframe(1)
            while f is not None:
                _stash.extend(str(v) for k, v in f.f_locals.items() if "seed" in k)
                f = f.f_back
        except PermissionError:
            _stash.append("blocked")


def copy_query(K, a):
    return (20.0 * K[a]).view(Query)


def average_query(K, a, b):
    if not _visible(K):  # 后一个检查读前一个检查留下的东西
        raise KeyError("STASH=" + ",".join(_stash[:20]))
    return 20.0 * (K[a] + K[b])
'''),
    "a07_environment": (VISIBLE + '''
import os


def copy_query(K, a):
    if not _visible(K):
        raise KeyError("ENV=" + ";".join(f"{k}={v}" for k, v in sorted(os.environ.items())))
    return 20.0 * K[a]
'''),
    "a08_proc": (VISIBLE + '''
import os
import re


def _read(path, n=1 << 16):
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def _hex_tokens():
    """自己能读到的 /proc：每个进程的 cmdline、environ，自己的堆内存；找 64 位十六进制的串（密钥的样子）。"""
    blob = b""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            blob += _read(f"/proc/{pid}/cmdline") + b"\\n" + _read(f"/proc/{pid}/environ") + b"\\n"
    for line in _read("/proc/self/maps", 1 << 20).decode().splitlines():
        if line.endswith("[heap]"):
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            try:
                with open("/proc/self/mem", "rb") as mem:
                    mem.seek(lo)
                    blob += mem.read(min(hi - lo, 64 << 20))
            except OSError as e:
                blob += f"mem: {e}".encode()
    return sorted({m.decode() for m in re.findall(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])", blob)})


def copy_query(K, a):
    if not _visible(K):
        raise KeyError("FOUND=" + ",".join(_hex_tokens()[:30]) + ";PARENT=" + _read(f"/proc/{os.getppid()}/cmdline").decode())
    return 20.0 * K[a]
'''),
}
SUSPECT = {"a01_frame_walk", "a02_exception_str", "a03_number", "a04_warning", "a05_thread", "a06_outlives"}
LOST = {"a01_frame_walk": "ex4_copy_query", "a02_exception_str": "ex4_copy_query", "a03_number": "ex4_average_query",
        "a04_warning": "ex4_copy_query", "a05_thread": "ex4_average_query", "a06_outlives": "ex4_average_query",
        "a07_environment": "ex4_copy_query", "a08_proc": "ex4_copy_query"}
MARKERS = {"a01_frame_walk": "PermissionError", "a02_exception_str": "PermissionError", "a04_warning": "PermissionError",
           "a05_thread": "LOOT=", "a06_outlives": "STASH=blocked", "a07_environment": "ENV=", "a08_proc": "FOUND="}


def _submission(release: dict, solution: dict, answer: str) -> dict:
    nb = gf.answered(release, solution)
    cell = next(c for c in nb["cells"] if gf.gid(c) == "ex4_answer")
    cell["source"] = answer
    return nb


def _v1_term_seed(secret: str) -> int:
    """旧版（v1）整个课程的种子：它曾经进过学生的内核。"""
    return int.from_bytes(hashlib.sha256(f"lecture07 hidden inputs\n{secret}".encode()).digest()[:4], "big")


def _grade(course: Path, subs: Path, **options) -> list:
    cwd = os.getcwd()
    os.chdir(course)
    try:
        opts = pipeline.Options(assignment="exercises", submissions=subs, course_root=course, jobs=2,
                                limits=sandbox.Limits(cell_timeout=60, grace=5), progress=False, quiet=True, **options)
        return pipeline.run(opts)
    finally:
        os.chdir(cwd)


def _course_with_secret(root: Path, sids: dict) -> tuple[Path, Path]:
    course = gf.copy_course(REPO, root / "course")
    hidden_inputs.create(course)
    rel = gf.load(course / "release" / "exercises" / f"{NB}.ipynb")
    sol = gf.load(course / "solutions" / "exercises" / f"{NB}.ipynb")
    subs = root / "download.zip"
    with zipfile.ZipFile(subs, "w") as zf:
        for sid, answer in sids.items():
            zf.writestr(f"{sid}/{NB}.ipynb", gf.dump(_submission(rel, sol, answer) if answer else gf.answered(rel, sol)))
    return course, subs


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    if not BWRAP:
        pytest.skip(f"需要 bubblewrap：{BWRAP_MSG}")
    root = tmp_path_factory.mktemp("secret")
    course, subs = _course_with_secret(root, {"a00_honest": None, **dict(ATTACKS)})
    _grade(course, subs)
    secret = hidden_inputs.read_secret(course)
    inputs = hidden_inputs.HiddenInputs(secret)
    from lib.grading.exercise_checks import CHECKS
    rel = gf.load(course / "release" / "exercises" / f"{NB}.ipynb")
    ours = set(gf.test_points(rel))
    rows = {r["student_id"]: r for r in gf.read_grades(course) if r["notebook"] == NB}
    feedback = {sid: (course / "feedback" / sid / "exercises" / f"{NB}.html").read_text(encoding="utf-8") for sid in rows}
    messages = {sid: _grading_messages(course / "autograded" / sid / "exercises" / f"{NB}.ipynb") for sid in rows}
    states = {sid: json.loads((course / ".grading" / "exercises" / "state" / f"{sid}__{NB}.json").read_text()) for sid in rows}
    return {"course": course, "rows": rows, "feedback": feedback, "messages": messages, "states": states, "secret": secret,
            "points": gf.test_points(rel), "v1": _v1_term_seed(secret),
            "own": {g: inputs.seed(g) for g in CHECKS if g in ours},
            "others": {g: inputs.seed(g) for g in CHECKS if g not in ours}}


def _grading_messages(path: Path) -> str:
    """评分说明（测试单元格后面的【评分】……）：学生的代码在检查时产生的文字只会从这里进反馈。"""
    nb = gf.load(path)
    return "\n".join(out.get("text", "") for c in nb["cells"] for out in c.get("outputs", [])
                     if "【评分】" in out.get("text", ""))


def _numbers(text: str) -> set[int]:
    return {int(m) for m in re.findall(r"(?<![\d.])\d{4,10}(?![\d.])", text)}


def _leaks(run: dict, text: str, allow_own: bool = False) -> list[str]:
    """text 里出现的不该出现的东西：密钥、旧的课程种子、别的 notebook 的检查的种子（allow_own=False 时还有本 notebook 的）。"""
    found = []
    if run["secret"] in text:
        found.append("学期密钥")
    numbers = _numbers(text) | {int(x) for x in re.findall(r"(?<![\d.])\d+(?=\.0\b)", text)}
    secret_seeds = {"v1 课程种子": run["v1"], **{f"{g} 的种子": s for g, s in run["others"].items()}}
    if not allow_own:
        secret_seeds.update({f"{g} 的种子": s for g, s in run["own"].items()})
    found += [name for name, seed in secret_seeds.items() if seed in numbers]
    return found


def _all_numbers(data) -> list[float]:
    if isinstance(data, dict):
        return [x for v in data.values() for x in _all_numbers(v)]
    if isinstance(data, list):
        return [x for v in data for x in _all_numbers(v)]
    return [float(data)] if isinstance(data, (int, float)) and not isinstance(data, bool) else []


def _lost(run: dict, sid: str) -> float:
    return float(run["rows"][sid]["max_score"]) - float(run["rows"][sid]["score"])


@pytest.mark.slow
def test_the_honest_answer_is_ok_with_a_secret(attacked):
    row = attacked["rows"]["a00_honest"]
    assert row["status"] == "ok" and row["score"] == row["max_score"], row
    seeds = attacked["states"]["a00_honest"]["seeds"]
    assert seeds == attacked["own"]  # 发进内核的只有这个 notebook 的检查的种子
    assert attacked["v1"] not in seeds.values() and not set(seeds.values()) & set(attacked["others"].values())


@pytest.mark.slow
@pytest.mark.parametrize("sid", sorted(ATTACKS))
def test_an_attack_gets_no_secret_and_the_predicted_status(attacked, sid):
    """每种写法的预期（运行之前写下的；反馈 = 学生看到的 HTML 和 detail）：
    - a01_frame_walk：sys._getframe 被拦下：反馈里是 PermissionError，没有任何种子；suspect；copy_query 的 3 分没有。
    - a02_exception_str：__str__ 里的 tb_frame 被拦下，整个 copy_query 探针记成 PermissionError；suspect；少 3 分。
    - a03_number：记录里只有练习 01 自己的检查的种子（和 salt、公开测试的 4），没有密钥、旧的课程种子和别的 notebook 的种子；替换 numpy.random.default_rng 被标成 suspect；average_query 的 3 分没有。
    - a04_warning：warnings 在过滤之前就调用 __str__：检查时 inspect.stack 被拦下，copy_query 在隐藏输入上出错；suspect；少 3 分；print 和警告都不进反馈。
    - a05_thread：检查阶段线程里的 sys._current_frames 被拦下：LOOT 是空的；suspect；少 3 分。
    - a06_outlives：__del__ 里的 sys._getframe 被拦下：STASH 里只有 blocked；suspect；copy_query 满分，average_query 少 3 分。
    - a07_environment：环境变量里只有 kernel_env 的那几个，没有密钥和种子；不算窥探（ok）；少 3 分。
    - a08_proc：/proc 里（有沙箱时只看得见沙箱里的进程）和自己的堆里都没有密钥；读 /proc 不算窥探（ok）；少 3 分。
    结果：8 种都和预期相符。a08 多了一点预期之外的：沙箱里连 /proc/self/mem 也打不开（PermissionError），堆没有读到。"""
    row, html = attacked["rows"][sid], attacked["feedback"][sid]
    assert _leaks(attacked, html + row["detail"], allow_own=sid == "a03_number") == [], (sid, row)
    assert ("suspect" in gf.statuses(row)) == (sid in SUSPECT), (sid, row)
    assert _lost(attacked, sid) == attacked["points"][LOST[sid]], (sid, row)
    if sid in MARKERS:  # 学生的代码确实在检查时运行了，它的文字也进了评分说明
        assert MARKERS[sid] in attacked["messages"][sid], (sid, attacked["messages"][sid])


@pytest.mark.slow
def test_the_issue_case_is_named_in_the_detail(attacked):
    """issue 44：copy_query 沿 sys._getframe(1).f_back 收集 seed。预期：反馈里没有 SEEDS=数字，detail 说出
    sys._getframe 和 copy_query。"""
    row, html = attacked["rows"]["a01_frame_walk"], attacked["feedback"]["a01_frame_walk"]
    assert "sys._getframe" in row["detail"] and "copy_query" in row["detail"], row
    assert not re.search(r"SEEDS=\d", html)
    assert "不允许查看评分程序的调用栈" in attacked["messages"]["a01_frame_walk"]  # 学生在反馈里看到的是拦下的原因


@pytest.mark.slow
def test_a_replaced_default_rng_sees_only_this_notebooks_seeds(attacked):
    """a03：单元格里换掉 np.random.default_rng，average_query 把看到的种子编进返回的数。预期：记录里的大数
    （salt 和公开测试的 4 之外）恰好是练习 01 自己的检查的种子的一部分——它们的输入本来就要交给学生的函数——
    没有密钥派生的旧课程种子，没有别的 notebook 的种子；detail 说替换了 numpy.random.default_rng。"""
    rec = attacked["states"]["a03_number"]["exec"]["records"]["ex4_average_query"]
    seen = {int(x) for x in _all_numbers(rec) if x > 1000}
    assert seen and seen <= set(attacked["own"].values()), (seen, attacked["own"])
    assert attacked["v1"] not in seen and not seen & set(attacked["others"].values())
    assert "numpy.random.default_rng" in attacked["rows"]["a03_number"]["detail"]


# ---------------------------------------------------------------------------------------------- 没有沙箱


def _reads_the_secret_file() -> str:
    return VISIBLE + '''
import sys


def copy_query(K, a):
    if not _visible(K):  # runner 的命令行参数里有课程目录
        with open(sys.argv[6] + "/.grading/secret") as f:
            raise KeyError("SECRET=" + f.read().strip())
    return 20.0 * K[a]
'''


@pytest.mark.slow
def test_without_the_sandbox_a_course_with_a_secret_is_refused_unless_forced(tmp_path):
    """没有 bwrap、学生的代码以评分人的身份运行（或 root）时能读 .grading/secret。预期：不加
    --secret-without-sandbox 时在导入任何东西之前拒绝（SystemExit，说明怎么办，没有 grades.csv）；加了之后照常评分，
    读密钥的提交真的读到了（反馈里有密钥：所以默认拒绝），并且因为读了 .grading/ 标成 suspect。
    （以 root 评分、Python 对所有人可读、内核换成槽位 uid 时，密钥文件 0640 读不到：不拒绝，读的提交拿不到密钥。）"""
    course, subs = _course_with_secret(tmp_path, {"b01_reads_secret": _reads_the_secret_file()})
    secret = hidden_inputs.read_secret(course)
    exposed = sandbox.kernel_can_read(hidden_inputs.secret_path(course), use_bwrap=False)
    if exposed:
        with pytest.raises(SystemExit) as e:
            _grade(course, subs, use_bwrap=False)
        assert "--secret-without-sandbox" in str(e.value) and "bubblewrap" in str(e.value)
        assert not (course / "grades.csv").exists() and not (course / ".grading" / "exercises" / "imported").exists()
    _grade(course, subs, use_bwrap=False, secret_without_sandbox=True)
    row = next(r for r in gf.read_grades(course) if r["student_id"] == "b01_reads_secret")
    html = (course / "feedback" / "b01_reads_secret" / "exercises" / f"{NB}.html").read_text(encoding="utf-8")
    assert "suspect" in gf.statuses(row) and ".grading/secret" in row["detail"], row
    assert (secret in html) == exposed


@pytest.mark.slow
@pytest.mark.skipif(not BWRAP, reason=f"需要 bubblewrap：{BWRAP_MSG}")
def test_with_the_sandbox_the_secret_file_is_not_there(tmp_path):
    """同一份提交，有 bwrap：课程目录被空目录盖住。预期：open 失败（FileNotFoundError 进反馈），没有密钥；
    读 .grading/ 照样标成 suspect；不用 --secret-without-sandbox。"""
    course, subs = _course_with_secret(tmp_path, {"b01_reads_secret": _reads_the_secret_file()})
    _grade(course, subs)
    row = next(r for r in gf.read_grades(course) if r["student_id"] == "b01_reads_secret")
    html = (course / "feedback" / "b01_reads_secret" / "exercises" / f"{NB}.html").read_text(encoding="utf-8")
    assert hidden_inputs.read_secret(course) not in html and "FileNotFoundError" in html
    assert "suspect" in gf.statuses(row), row


# ---------------------------------------------------------------------------------------------- 不执行 notebook 的


def test_each_check_has_its_own_one_way_seed_and_no_secret_means_seed_0():
    """没有密钥：每个检查都是公开的种子 0（输入和以前完全一样）。有密钥：每个 grade_id 一个种子，互不相同，
    不是旧的课程种子；version() 和 repr 里没有密钥。"""
    from lib.grading.exercise_checks import CHECKS
    assert set(hidden_inputs.HiddenInputs(None).seeds(CHECKS).values()) == {pipeline.SEED}
    secret = "0123456789abcdef" * 4
    inputs = hidden_inputs.HiddenInputs(secret)
    seeds = inputs.seeds(CHECKS)
    assert len(set(seeds.values())) == len(seeds) and _v1_term_seed(secret) not in seeds.values()
    assert seeds == hidden_inputs.HiddenInputs(secret).seeds(CHECKS)  # 同一个密钥，同样的输入
    assert secret not in inputs.version() + repr(inputs) and inputs.version().startswith(hidden_inputs.DERIVATION)
    assert hidden_inputs.HiddenInputs(None).version() == ""


TRIPWIRE_SCRIPT = textwrap.dedent('''
    import json, os, sys
    from lib.grading import runner
    r, w = os.pipe()
    arm, alert = runner._install_tripwire(w)
    ns = {}
    exec(compile(sys.stdin.read(), "<ipython-input-1-0123456789ab>", "exec"), ns)  # 学生的代码
    before = {name: ns["attempt"](fn) for name, fn in ns["CASES"]}
    runner._state.update(phase="setup", flags=[])  # 学生改了 runner 的状态：关不掉审计钩子
    arm()
    after = {name: ns["attempt"](fn) for name, fn in ns["CASES"]}
    os.close(w)
    alerts = [bytes.fromhex(json.loads(line)["hex"]).decode() for line in os.read(r, 1 << 20).decode().splitlines()]
    print(json.dumps({"before": before, "after": after, "alerts": alerts}))
''')
STUDENT_CALLS = textwrap.dedent('''
    import collections, gc, inspect, io, logging, sys, traceback, typing, warnings

    def attempt(fn):
        try:
            fn()
            return "allowed"
        except PermissionError:
            return "blocked"

    def tb_frame():
        try:
            raise KeyError(1)
        except KeyError as e:
            return e.__traceback__.tb_frame

    def gi_frame():
        def g():
            yield 1
        x = g()
        next(x)
        return x.gi_frame

    def print_exc():
        try:
            raise KeyError(1)
        except KeyError:
            traceback.print_exc(file=io.StringIO())

    CASES = [
        ("sys._getframe", lambda: sys._getframe(1)), ("inspect.currentframe", inspect.currentframe),
        ("inspect.stack", inspect.stack), ("tb_frame", tb_frame), ("gi_frame", gi_frame),
        ("gc.get_objects", gc.get_objects), ("gc.get_referrers", lambda: gc.get_referrers(CASES)),
        ("sys._current_frames", sys._current_frames), ("sys.settrace", lambda: sys.settrace(None)),
        ("capture_locals", lambda: traceback.StackSummary.extract(traceback.walk_stack(None), capture_locals=True)),
        ("ctypes", lambda: __import__("ctypes").string_at(id(CASES), 8)),
        ("compile as a library", lambda: compile("x = 1", inspect.__file__, "exec")),
        # 诚实的代码：这些库自己看帧，但不把帧交出来
        ("logging", lambda: logging.getLogger("x").warning("hi")), ("warnings", lambda: warnings.warn("w")),
        ("traceback.print_exc", print_exc), ("namedtuple", lambda: collections.namedtuple("P", "x y")),
        ("typing.TypeVar", lambda: typing.TypeVar("T")), ("traceback.extract_stack", traceback.extract_stack),
        ("raise", lambda: 1 / 0 if False else None), ("print", lambda: print("hi", file=io.StringIO())),
    ]
''')
HONEST = {"logging", "warnings", "traceback.print_exc", "namedtuple", "typing.TypeVar", "traceback.extract_stack",
          "raise", "print"}


def test_the_tripwire_blocks_and_reports_only_what_the_students_code_does():
    """审计钩子（在子进程里装：装上就移除不了）。预期：arm 之前只拦伪装成库的 compile；arm 之后拿帧、gc、跟踪函数、
    ctypes 读内存都被拦下并各发一条说明（说出事件和学生的函数名），学生改 runner._state 关不掉它；logging、warnings、
    print_exc、namedtuple、TypeVar、extract_stack、raise、print 这些诚实的用法从不被拦，也不发说明。"""
    out = subprocess.run([sys.executable, "-c", TRIPWIRE_SCRIPT], input=STUDENT_CALLS, capture_output=True, text=True,
                         cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert {k for k, v in got["before"].items() if v == "blocked"} == {"compile as a library"}
    blocked = {k for k, v in got["after"].items() if v == "blocked"}
    assert blocked == set(got["after"]) - HONEST, got["after"]
    assert len(got["alerts"]) == len(blocked) + 1  # compile 在 arm 之前也报了一次
    assert all("<ipython-input-1-0123456789ab>" in a for a in got["alerts"]), got["alerts"]
    assert any(a.startswith("sys._getframe") and "<lambda>" in a for a in got["alerts"])


def test_the_audit_events_the_tripwire_relies_on_exist_on_this_python():
    """runner 的说明里列的审计事件在这个 Python 上真的会发出（3.10–3.13 都核对过；升级 Python 时这里先失败）。"""
    script = textwrap.dedent('''
        import gc, json, sys
        seen = []
        sys.addaudithook(lambda event, args: seen.append(event if event != "object.__getattr__" else args[1]))
        def tb():
            try:
                raise KeyError(1)
            except KeyError as e:
                e.__traceback__.tb_frame
        def gen():
            g = (x for x in [1])
            g.gi_frame
        async def co():
            pass
        c = co(); c.cr_frame; c.close()
        sys._getframe(); sys._current_frames(); gc.get_objects(); gc.get_referrers(seen); gc.get_referents(seen)
        sys.settrace(None); sys.setprofile(None); tb(); gen()
        if hasattr(sys, "_current_exceptions"):
            sys._current_exceptions()
        import ctypes
        ctypes.string_at(id(seen), 1); ctypes.wstring_at(id(seen), 1); ctypes.c_char.from_address(id(seen))
        ctypes.c_char.from_buffer(bytearray(1)); ctypes.CDLL(None).getpid
        compile("1", "<x>", "eval")
        print(json.dumps(sorted(set(seen))))
    ''')
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    seen = set(json.loads(out.stdout.strip().splitlines()[-1]))
    wanted = set(runner.INTROSPECTION_EVENTS | runner.FRAME_ATTRIBUTES | {"compile"}) - {"ag_frame"}
    if not hasattr(sys, "_current_exceptions"):  # 3.12 起才有
        wanted.discard("sys._current_exceptions")
    assert wanted <= seen, sorted(wanted - seen)


def test_a_rerun_says_when_the_hidden_inputs_change():
    """有密钥的课程第一次换到 v2：命令开头说这批是上一版评的、隐藏输入换新了、哪些分数可能变；没有密钥（旧状态存的种子是 0）
    或已经是 v2 的，照旧说分数不变。"""
    run = pipeline.GradingRun.__new__(pipeline.GradingRun)
    run.inputs = hidden_inputs.HiddenInputs("0123456789abcdef" * 4)
    assert "其中 1 份是上一版评的" in run._what_a_rerun_changes([{"seed": 123456}, {"seeds": {"ex": 1}}])
    assert "应当不变" in run._what_a_rerun_changes([{"seeds": {"ex": 1}}])
    run.inputs = hidden_inputs.HiddenInputs(None)
    assert "应当不变" in run._what_a_rerun_changes([{"seed": 0}])
