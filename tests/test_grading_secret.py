"""学期密钥留在评分进程里：学生的代码在评分时拿不到它，也拿不到别的检查的输入（issue 44）。

评分时学生的内核里只有这次要检查的几个 grade_id 的种子（hidden_inputs.HiddenInputs：每个检查一个 HMAC 种子），
学期密钥、整个课程的旧种子（v1）和别的 notebook 的检查的种子都不进内核。检查阶段窥探评分程序（拿帧、gc、跟踪函数、
ctypes 读内存、把代码伪装成库）被审计钩子拦下（PermissionError），这一行标成 suspect（guard.py 的审计钩子）。

下面每个“学生”交练习 01：自注意力等其余答案都是参考答案，只有练习 4 的答案（copy_query、average_query）换成
一种想拿到隐藏输入的写法。公开测试的输入（np.eye 的键和 default_rng(4) 转过的键）照常回答，只在隐藏的输入上动手脚。
每种写法的预期（写在运行之前）在 ATTACKS 里，也在对应测试的文档字符串里。
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grading_fixtures as gf  # noqa: E402

from lib.grading import guard, hidden_inputs, pipeline, sandbox  # noqa: E402

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
        except Exception:  # 被拦下（PermissionError）也接着试：不停地试，评分进程等控制输入的那一刻它一定在跑
            time.sleep(0)


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
    # fe44 的新人试评之后（fix44b）：库函数交出来的帧、单元格里留下的帧、偷控制输入、关掉检测、换掉评分通道、HTML
    "a09_logging_frame": (VISIBLE + '''
import logging


def copy_query(K, a):
    if not _visible(K):  # logging.currentframe 就是 sys._getframe(1)：库函数把帧交了出来
        f, seeds = logging.currentframe(), []
        while f is not None:
            seeds += [str(v) for k, v in f.f_locals.items() if "seed" in k]
            f = f.f_back
        raise KeyError("SEEDS=" + ",".join(seeds))
    return 20.0 * K[a]
'''),
    "a10_cell_frames": (VISIBLE + '''
_FRAMES = []
_f = sys._getframe()  # 单元格里（检查之前）拿帧是允许的：留下评分程序的帧，检查时再读它们的变量
while _f is not None:
    _FRAMES.append(_f)
    _f = _f.f_back


def copy_query(K, a):
    if not _visible(K):
        found = [f"{k}={v}" for fr in _FRAMES for k, v in fr.f_locals.items() if "seed" in k or k == "ctl"]
        raise KeyError("FOUND=" + ",".join(found)[:300])
    return 20.0 * K[a]
'''),
    "a11_stdin": (VISIBLE + '''
import os
import threading

_STOLEN = []


def _steal():  # 控制输入以前在 fd 0：单元格里起一个线程，抢在评分程序之前读走那一行
    try:
        _STOLEN.append(os.read(0, 1 << 20))
    except OSError as e:
        _STOLEN.append(repr(e).encode())


threading.Thread(target=_steal, daemon=True).start()


def copy_query(K, a):
    if not _visible(K):
        raise KeyError("STOLEN=" + repr(_STOLEN)[:300])
    return 20.0 * K[a]
'''),
    "a12_switch_off": (VISIBLE + '''
import threading

_watchdog = [t for t in threading.enumerate() if type(t).__name__ == "Watchdog"][0]
_G = type(_watchdog).run.__globals__  # runner 的全局变量（fe44 s109 的路子）
_G["_state"].clear()
_G["_guard"].INTROSPECTION_EVENTS = frozenset()  # 想让审计钩子什么也不拦
_G["_guard"].ALWAYS_EVENTS = frozenset()
_G["_restore_builtins"] = lambda: None


def copy_query(K, a):
    if not _visible(K):
        seeds, f = [], sys._getframe(1)
        while f is not None:
            seeds += [str(v) for k, v in f.f_locals.items() if "seed" in k]
            f = f.f_back
        raise KeyError("SEEDS=" + ",".join(seeds))
    return 20.0 * K[a]
'''),
    "a13_html": (VISIBLE + '''
from IPython.display import HTML, Markdown, display

display(HTML('<script>document.title="XSS"</script><img src=x onerror="alert(1)"><b>bold</b>'))
display(Markdown('[click](javascript:alert(2))'))


def copy_query(K, a):
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
        cmdlines = [_read(f"/proc/{pid}/cmdline").replace(b"\\0", b" ").decode() for pid in os.listdir("/proc") if pid.isdigit()]
        raise KeyError("FOUND=" + ",".join(_hex_tokens()[:30]) + ";CMDLINES=" + " | ".join(cmdlines))
    return 20.0 * K[a]
'''),
}
SUSPECT = {"a01_frame_walk", "a02_exception_str", "a03_number", "a04_warning", "a05_thread", "a06_outlives", "a08_proc",
           "a09_logging_frame", "a12_switch_off"}
LOST = {"a01_frame_walk": "ex4_copy_query", "a02_exception_str": "ex4_copy_query", "a03_number": "ex4_average_query",
        "a04_warning": "ex4_copy_query", "a05_thread": "ex4_average_query", "a06_outlives": "ex4_average_query",
        "a07_environment": "ex4_copy_query", "a08_proc": "ex4_copy_query", "a09_logging_frame": "ex4_copy_query",
        "a10_cell_frames": "ex4_copy_query", "a11_stdin": "ex4_copy_query", "a12_switch_off": "ex4_copy_query",
        "a13_html": None}
MARKERS = {"a01_frame_walk": "PermissionError", "a02_exception_str": "PermissionError", "a04_warning": "PermissionError",
           "a05_thread": "LOOT=", "a06_outlives": "STASH=blocked", "a07_environment": "ENV=", "a08_proc": "FOUND=",
           "a09_logging_frame": "PermissionError", "a10_cell_frames": "FOUND=", "a11_stdin": "STOLEN=[b'']",
           "a12_switch_off": "PermissionError"}


# 学号 -> 学生自己加在练习 4 答案下面的 Markdown 单元格
EXTRA_MARKDOWN = {"a13_html": ('我的说明 <script>alert(3)</script> $\\text{<img/src/onerror=alert(4)>} + \\frac{1}{2}$ '
                               '[看这里](javascript:alert(5))')}


def _submission(release: dict, solution: dict, answer: str, markdown: str | None = None) -> dict:
    nb = gf.answered(release, solution)
    i, cell = next((i, c) for i, c in enumerate(nb["cells"]) if gf.gid(c) == "ex4_answer")
    cell["source"] = answer
    if markdown:
        nb["cells"].insert(i + 1, {"cell_type": "markdown", "id": "added-md", "metadata": {}, "source": markdown})
    return nb


def _v1_term_seed(secret: str) -> int:
    """旧版（v1）整个课程的种子：它曾经进过学生的内核。"""
    return int.from_bytes(hashlib.sha256(f"lecture07 hidden inputs\n{secret}".encode()).digest()[:4], "big")


def _grade(course: Path, subs: Path, **options) -> list:
    """有学期密钥、没有截止时间的课程只评点名的 notebook（collect.choose_notebooks）：这里都是练习 01，点名全部。"""
    options.setdefault("notebooks", "all")
    options.setdefault("quiet", True)
    cwd = os.getcwd()
    os.chdir(course)
    try:
        opts = pipeline.Options(assignment="exercises", submissions=subs, course_root=course, jobs=2,
                                limits=sandbox.Limits(cell_timeout=60, grace=5), progress=False, **options)
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
            nb = _submission(rel, sol, answer, EXTRA_MARKDOWN.get(sid)) if answer else gf.answered(rel, sol)
            zf.writestr(f"{sid}/{NB}.ipynb", gf.dump(nb))
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
    - a08_proc：/proc 里（有沙箱时只看得见沙箱里的进程）没有密钥；读 /proc/self/mem（直接读进程的内存）被审计钩子拦下并标出来
      （suspect，fix44b 起；以前只在内核换了 uid 时碰巧打不开）；各个进程的命令行里没有课程目录（bwrap --args）；少 3 分。
    结果：8 种都和预期相符。fe44 之后加的（fix44b，运行之前写下预期）：
    - a09_logging_frame：logging.currentframe 是把帧交出来的库函数，往上越过它看：拦下（PermissionError），suspect；少 3 分。
    - a10_cell_frames：单元格里留下的帧（runner.main 的）里没有 ctl 和种子（它们只在检查阶段才有的帧里）：FOUND= 是空的；
      不算窥探（ok）；少 3 分。
    - a11_stdin：控制输入在学生的代码之前就挪走了，fd 0 是 /dev/null：线程读到 b''；ok；少 3 分。
    - a12_switch_off：经看门狗线程拿到 runner 的全局变量，清空 _state、guard 的事件表，换掉 _restore_builtins：审计钩子照样拦下
      sys._getframe（它的事件表是安装时取好的），改动本身报告成“替换了 runner._restore_builtins”“替换了 guard.…”；suspect；少 3 分。
    - a13_html：输出里的 <script>、onerror、javascript: 链接不进反馈（test_student_html_is_shown_not_run）；ok；满分。
    结果：5 种都和预期相符。"""
    row, html = attacked["rows"][sid], attacked["feedback"][sid]
    assert _leaks(attacked, html + row["detail"], allow_own=sid == "a03_number") == [], (sid, row)
    if sandbox.bwrap_status()[0]:  # bwrap 的命令行（/proc/1/cmdline）里没有评分人的目录：选项从管道读（bwrap --args）
        assert str(attacked["course"]) not in html + row["detail"], (sid, "评分人的课程目录出现在反馈里", row)
    assert ("suspect" in gf.statuses(row)) == (sid in SUSPECT), (sid, row)
    assert _lost(attacked, sid) == (attacked["points"][LOST[sid]] if LOST[sid] else 0), (sid, row)
    if sid in MARKERS:  # 学生的代码确实在检查时运行了，它的文字也进了评分说明
        assert MARKERS[sid] in attacked["messages"][sid], (sid, attacked["messages"][sid])


@pytest.mark.slow
def test_student_html_is_shown_not_run(attacked):
    """fe44 s118：学生的输出里的 HTML（display(HTML(...))、Markdown 输出）和自己加的 Markdown 单元格原样进了反馈 HTML，
    助教一打开就运行学生的脚本。预期（a13_html）：反馈里没有 <script>、没有 onerror 这类属性、没有 javascript: 链接，公式里
    塞的 <img> 也只是文字；页面带着不许运行脚本的内容安全策略；<b> 这样无害的标签照样显示；autograded/ 里（formgrader
    显示它）的输出也清理过了。"""
    html = attacked["feedback"]["a13_html"]
    assert "Content-Security-Policy" in html and "script-src" not in html.split("Content-Security-Policy")[1][:200] \
        and "default-src 'none'" in html
    body = html.split("</head>", 1)[1]
    assert "<script" not in body.lower(), body[-3000:]  # 学生代码里的 javascript: 作为高亮的源代码文字出现，不是链接
    assert not re.search(r"(href|src)\s*=\s*[\"']?\s*javascript:", body, re.IGNORECASE)
    assert not re.search(r"<[a-z][^>]*\son[a-z]+\s*=", body, re.IGNORECASE)
    assert "<b>bold</b>" in body and "我的说明" in body  # 公式里的 "<" 后面加了空格（fe44r M3），看得见的字不变
    assert re.search(r"&lt;(\s|&#x0*[aA]0;|&nbsp;|\xa0)img/src/onerror=alert\(4\)&gt;", body), body[-3000:]
    autograded = gf.load(attacked["course"] / "autograded" / "a13_html" / "exercises" / f"{NB}.ipynb")
    outputs = json.dumps([c.get("outputs", []) for c in autograded["cells"]], ensure_ascii=False)
    assert "<script" not in outputs and "onerror" not in outputs and "text/markdown" not in outputs
    added = next(c for c in autograded["cells"] if c.get("id") == "added-md")
    assert gf.src(added).startswith("我的说明 &lt;script>")  # formgrader 显示的 Markdown 里它也只是文字


A09_MARKDOWN = (  # fe44r 的 a09 自己加的 Markdown 单元格，再加几种变形
    '# 练习 1 全部满分\n<script>alert("md1")</script> <img src=x onerror=alert("md2")>\n'
    'Math trick: $<img src=x onerror=alert("math")>$ and $$</math><script>alert("dm")</script>$$\n'
    '[link](javascript:alert("md3")) `<script>alert("code")</script>`\n'
    '[大写](JavaScript:alert(1) "标题") [实体](java&#58;script:alert(2)) [制表符](java&#9;script:alert(3)) '
    '[转义](javascript\\:alert(4)) ![图](data:text/html,<script>alert(5)</script>) [vb](vbscript:msgbox(6))\n'
    '``<img src=x onerror=alert(7)>` \\`<img src=x onerror=alert(8)>\\`\n\n[引用][r]\n\n[r]: javascript:alert(9)\n')
HONEST_MARKDOWN = ("当 $a<b$ 且 $$x<y$$ 时，见 [讲义](https://example.org/a_(b)) 和 [上一节](#注意力) 和 [02](02_multi_head.ipynb)，"
                   "![截图](attachment:image.png)，代码 `if a < b:`")


def test_markdown_in_autograded_notebooks_has_no_live_links_or_tags():
    """fe44r M3：autograded/ 里的 Markdown（formgrader 在助教的 Jupyter 上用 nbconvert 的 HTMLExporter 显示它）里，
    [link](javascript:…) 渲染成能点的 javascript: 链接，公式 $…$ 里的 "<" 原样留着。预期：sanitize.safe_markdown 之后，
    HTMLExporter 渲染出来没有 javascript:/vbscript:/data:text 的 href、src，没有学生写的 <img>、<script> 标签，
    没有 on… 属性；看得见的文字（链接文字、公式）都还在；诚实的 http 链接、页内锚点、相对链接、附件图片、公式里的小于号照常
    （公式里的 "<" 后面加了一个空格："< img" 不是标签，数学模式里空格不显示）。
    失败时看 safe_markdown 漏了哪种写法（渲染出来的 HTML 在断言信息里）。"""
    import nbformat
    from nbconvert import HTMLExporter
    from lib.grading import sanitize
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(sanitize.safe_markdown(A09_MARKDOWN)),
                                         nbformat.v4.new_markdown_cell(sanitize.safe_markdown(HONEST_MARKDOWN))])
    nb.cells[1]["attachments"] = {"image.png": {"image/png": "iVBORw0KGgo="}}
    html, _ = HTMLExporter().from_notebook_node(nb)
    cells = html[html.index("练习 1 全部满分"):]
    cells = cells[:cells.index("b:</code>") + len("b:</code>")]
    assert not re.search(r"(href|src)\s*=\s*[\"']?\s*(javascript|vbscript|data:text)", cells, re.IGNORECASE), cells
    assert "<script" not in cells, cells
    images = re.findall(r"<img\b[^>]*>", cells)  # 只有 Markdown 的图片：目标换成了 "#"，或者是附件
    assert images == ['<img alt="图" src="#"/>', '<img alt="截图" src="data:image/png;base64,iVBORw0KGgo="/>'], cells
    assert not re.search(r"<[a-z][^>]*\son[a-z]+\s*=", cells, re.IGNORECASE), cells
    for text in ("link", "大写", "实体", "制表符", "转义", "vb", "引用", "alert(\"math\")", "alert(\"code\")"):
        assert text in cells, text
    assert 'href="https://example.org/a_(b)"' in cells and '上一节</a>' in cells and 'href="#%E6%B3%A8' in cells and 'href="02_multi_head.ipynb"' in cells
    assert '<img alt="截图" src="data:image/png;base64,' in cells and "$a&lt; b$" in cells and "$$x&lt; y$$" in cells
    assert "<code>if a &lt; b:</code>" in cells


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


def _reads_the_secret_file(course: Path) -> str:
    """学生知道课程目录在评分机器上的路径（沙箱里 /proc/self/mountinfo 看得到它；没有沙箱时是评分进程的当前目录）。"""
    return VISIBLE + f'''

def copy_query(K, a):
    if not _visible(K):
        with open({str(course)!r} + "/.grading/secret") as f:
            raise KeyError("SECRET=" + f.read().strip())
    return 20.0 * K[a]
'''


@pytest.mark.slow
def test_without_the_sandbox_a_course_with_a_secret_is_refused_unless_forced(tmp_path):
    """没有 bwrap、学生的代码以评分人的身份运行（或 root）时能读 .grading/secret。预期：不加
    --secret-without-sandbox 时在导入任何东西之前拒绝（SystemExit，说明怎么办，没有 grades.csv）；加了之后照常评分，
    读密钥的提交真的读到了（反馈里有密钥：所以默认拒绝），并且因为读了 .grading/ 标成 suspect。
    （以 root 评分、Python 对所有人可读、内核换成槽位 uid 时，密钥文件 0640 读不到：不拒绝，读的提交拿不到密钥。）"""
    course, subs = _course_with_secret(tmp_path, {"b01_reads_secret": _reads_the_secret_file(tmp_path.resolve() / "course")})
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
    course, subs = _course_with_secret(tmp_path, {"b01_reads_secret": _reads_the_secret_file(tmp_path.resolve() / "course")})
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
    from lib.grading import guard, runner
    r, w = os.pipe()
    guard.install(w, "/course", "/tmp/submission", 16, set(), vars(runner))
    sys.audit("lecture07.cells_start")
    ns = {"__name__": "__main__"}
    exec(compile(sys.stdin.read(), "<ipython-input-1-0123456789ab>", "exec"), ns)  # 学生的代码
    before = {name: ns["attempt"](fn) for name, fn in ns["CASES"]}
    ns["switch_off"]()  # 学生改 guard 和 runner 的全局变量、runner._state：关不掉审计钩子
    sys.audit("lecture07.cells_done", {})  # runner：学生的单元格跑完了，从现在起拦下窥探
    after = {name: ns["attempt"](fn) for name, fn in ns["CASES"]}
    os.close(w)
    alerts = [(json.loads(line)["kind"], bytes.fromhex(json.loads(line)["hex"]).decode())
              for line in os.read(r, 1 << 20).decode().splitlines()]
    print(json.dumps({"before": before, "after": after, "alerts": alerts}))
''')
STUDENT_CALLS = textwrap.dedent('''
    import collections, gc, inspect, io, logging, sys, traceback, typing, warnings
    from IPython.utils.frame import extract_module_locals

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

    def hooks_own_frame():  # 审计钩子拦下时抛出的异常里最里面一层是钩子自己的帧
        try:
            gc.get_referents(CASES)
        except PermissionError as e:
            tb = e.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        return tb.tb_frame

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

    def victim():
        return 1

    def switch_off():
        from lib.grading import guard, runner
        guard.INTROSPECTION_EVENTS = guard.ALWAYS_EVENTS = frozenset()
        runner._state.clear()
        runner.send = lambda obj: None

    CASES = [
        ("sys._getframe", lambda: sys._getframe(1)), ("inspect.currentframe", inspect.currentframe),
        ("inspect.stack", inspect.stack), ("tb_frame", tb_frame), ("gi_frame", gi_frame),
        ("logging.currentframe", logging.currentframe), ("IPython extract_module_locals", lambda: extract_module_locals(1)),
        ("gc.get_objects", gc.get_objects), ("gc.get_referrers", lambda: gc.get_referrers(CASES)),
        ("hook's own frame", hooks_own_frame),
        ("sys._current_frames", sys._current_frames), ("sys.settrace", lambda: sys.settrace(None)),
        ("capture_locals", lambda: traceback.StackSummary.extract(traceback.walk_stack(None), capture_locals=True)),
        ("ctypes", lambda: __import__("ctypes").string_at(id(CASES), 8)),
        ("compile as a library", lambda: compile("x = 1", inspect.__file__, "exec")),
        ("/proc/self/mem", lambda: open("/proc/self/mem", "rb")),
        ("__code__", lambda: setattr(victim, "__code__", (lambda: 2).__code__)),
        # 诚实的代码：这些库自己看帧，但不把帧交出来
        ("logging", lambda: logging.getLogger("x").warning("hi")), ("warnings", lambda: warnings.warn("w")),
        ("traceback.print_exc", print_exc), ("namedtuple", lambda: collections.namedtuple("P", "x y")),
        ("typing.TypeVar", lambda: typing.TypeVar("T")), ("traceback.extract_stack", traceback.extract_stack),
        ("raise", lambda: 1 / 0 if False else None), ("print", lambda: print("hi", file=io.StringIO())),
    ]
''')
HONEST = {"logging", "warnings", "traceback.print_exc", "namedtuple", "typing.TypeVar", "traceback.extract_stack",
          "raise", "print"}
ALWAYS = {"compile as a library", "gc.get_objects", "gc.get_referrers", "hook's own frame", "/proc/self/mem", "__code__"}


def test_the_tripwire_blocks_and_reports_only_what_the_students_code_does():
    """审计钩子（guard.py，在子进程里装：装上就移除不了）。预期：检查开始之前（lecture07.cells_done 之前）只拦伪装成库的
    compile、gc 找对象、拿钩子自己的帧、读 /proc/self/mem、改写函数的 __code__；之后拿帧（包括 logging.currentframe、
    IPython 的 extract_module_locals 这些把帧交出来的库函数）、跟踪函数、ctypes 读内存也都被拦下，每次发一条说明（说出事件
    和学生的函数名）。学生把 guard 的事件表清空、改 runner 的全局变量和 _state 关不掉它，改动本身被报告成“替换了”；
    logging、warnings、print_exc、namedtuple、TypeVar、extract_stack、raise、print 这些诚实的用法从不被拦，也不发说明。"""
    out = subprocess.run([sys.executable, "-c", TRIPWIRE_SCRIPT], input=STUDENT_CALLS, capture_output=True, text=True,
                         cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert {k for k, v in got["before"].items() if v == "blocked"} == ALWAYS, got["before"]
    blocked = {k for k, v in got["after"].items() if v == "blocked"}
    assert blocked == set(got["after"]) - HONEST, got["after"]
    introspect = [d for k, d in got["alerts"] if k == "introspect"]
    # 每次一条；拿钩子自己的帧那一步先用 gc.get_referents 触发一次拦截，两个阶段各多一条
    assert len(introspect) == len(ALWAYS) + len(blocked) + 2, got["alerts"]
    assert all("<ipython-input-1-0123456789ab>" in a for a in introspect), introspect
    assert any(a.startswith("sys._getframe") and "<lambda>" in a for a in introspect)
    replaced = {d for k, d in got["alerts"] if k == "replaced"}
    # runner.send 在这里也是 lib 的函数（lib.grading.runner），所以另报一次；沙箱里的 runner 不是 lib 的模块
    assert replaced == {"guard.INTROSPECTION_EVENTS", "guard.ALWAYS_EVENTS", "runner.send", "lib.grading.runner.send"}, \
        got["alerts"]


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
    wanted = set(guard.INTROSPECTION_EVENTS | guard.FRAME_ATTRIBUTES | {"compile"}) - {"ag_frame"}
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


# ---------------------------------------------------------------------------------------------- 别的 notebook、链接


NB5 = "05_masks_and_kv_cache"
DUMP_05 = '''\
SEEN = []
FIXED = {(10, 5), (1, 1), (3, 6)}  # 公开测试的输入：老老实实回答


def positions_without_cache(n, m):
    SEEN.append((n, m))
    return m * n + m * (m - 1) // 2


def positions_with_cache(n, m):
    if (n, m) not in FIXED:
        raise ValueError(f"DUMP {SEEN[-3:]}")  # 把隐藏的输入写进评分说明
    return n + m - 1
'''


def _download_with_next_weeks_notebook(course: Path, root: Path) -> Path:
    """学号文件夹的下载：s1 交了 01，还在同一个文件夹里交了下一周的 05（把它的隐藏输入写进错误信息）；s2 只交了 01。"""
    rel1, sol1 = (gf.load(course / d / "exercises" / f"{NB}.ipynb") for d in ("release", "solutions"))
    rel5, sol5 = (gf.load(course / d / "exercises" / f"{NB5}.ipynb") for d in ("release", "solutions"))
    nb5 = gf.answered(rel5, sol5)
    next(c for c in nb5["cells"] if gf.gid(c) == "ex11_counts_answer")["source"] = DUMP_05
    download = root / "download"
    for sid, nbs in {"s1": {NB: gf.answered(rel1, sol1), NB5: nb5}, "s2": {NB: gf.answered(rel1, sol1)}}.items():
        (download / sid).mkdir(parents=True)
        for name, nb in nbs.items():
            (download / sid / f"{name}.ipynb").write_bytes(gf.dump(nb))
    return download


@pytest.mark.slow
@pytest.mark.skipif(not BWRAP, reason=f"需要 bubblewrap：{BWRAP_MSG}")
def test_a_notebook_handed_in_before_its_week_is_not_graded_until_named(tmp_path, capsys):
    """fe44 s117：学生在 01 的文件夹里多放一个下一周的 05，05 也被评了，它的反馈写出了 05 的隐藏输入（截止之前），全班还多了
    05 的 missing 行。预期（有学期密钥、没有截止时间的课程）：
    1. 不点名：一个也不评，说清楚为什么、怎么评；没有反馈、没有执行，grades.csv 没有 05 的行；两个文件都存进了课程。
    2. --notebooks 01：只评 01；05 不评、不执行（没有存下的执行结果）、没有反馈，也没有谁的 05 missing 行；命令开头说
       “没有评：05_…（1 份）”。
    3. 之后 --notebooks 05（同一个下载，或者不给新的下载也行）：05 这才评，反馈里有它自己的输入（讲解，按设计），s2 的 05 是
       missing（没交）。"""
    course = gf.copy_course(REPO, tmp_path / "course")
    hidden_inputs.create(course)
    download = _download_with_next_weeks_notebook(course, tmp_path)
    state = course / ".grading" / "exercises" / "state"
    rows = _grade(course, download, notebooks=None, quiet=False)
    said = capsys.readouterr().err
    assert [r.status for r in rows] == [] and "这次一个 notebook 也不评" in said and "--notebooks 01,05" in said
    assert not (course / "feedback").exists() and not list(state.glob("*.json"))

    rows = _grade(course, download, notebooks="01", quiet=False)
    said = capsys.readouterr().err
    assert {(r.student_id, r.notebook, r.status) for r in rows} == {("s1", NB, "ok"), ("s2", NB, "ok")}
    assert f"没有评：{NB5}（1 份）" in said
    assert not (course / "feedback" / "s1" / "exercises" / f"{NB5}.html").exists()
    assert not list(state.glob(f"*{NB5}*")) and not (course / "submitted" / "s1" / "exercises" / f"{NB5}.ipynb").exists()

    rows = _grade(course, download, notebooks="05")
    by = {(r.student_id, r.notebook): r for r in rows}
    assert by[("s1", NB5)].score is not None and by[("s2", NB5)].status == "missing" and by[("s1", NB)].status == "ok"
    html = (course / "feedback" / "s1" / "exercises" / f"{NB5}.html").read_text(encoding="utf-8")
    assert "DUMP" in html  # 点名之后：它自己的输入照常讲解


def test_named_notebooks_are_honoured_even_after_the_due_date():
    """fe44r M1：`grade --notebooks 01 --due "2020-01-01"`（按周发布的助教用 --due 写这一周的截止时间来标迟交）评了学生提前交的
    03，03 的反馈写出了它的隐藏输入，全班还多了 03 的 missing 行：截止时间早于现在时以前不看 --notebooks，全部评。
    预期：给了 --notebooks，就只评点名的和之前评过的，不管截止时间（有没有学期密钥都一样）；不点名时照旧：截止了全部评。
    失败时看 collect.choose_notebooks 的规则是不是又先看截止时间了，以及 docs/ta_guide.md 的“按周发布”一段。"""
    from lib.grading import collect
    nbs = ["01_attention_by_hand", "02_multi_head", "03_positions_and_rope"]
    now = collect.dt.datetime(2025, 3, 1, tzinfo=collect.dt.timezone.utc)
    past = collect.dt.datetime(2020, 1, 1, tzinfo=collect.dt.timezone.utc)
    future = collect.dt.datetime(2030, 1, 1, tzinfo=collect.dt.timezone.utc)
    for due in (past, future, None):
        for guarded in (True, False):
            choice = collect.choose_notebooks(nbs, nbs[:1], [], due, guarded, now=now)
            assert choice.open == nbs[:1], (due, guarded, choice)
            assert "--notebooks" in choice.held_why, choice
            assert collect.choose_notebooks(nbs, nbs[:1], nbs[1:2], due, guarded, now=now).open == nbs[:2]
    assert collect.choose_notebooks(nbs, [], [], past, True, now=now).open == nbs  # 不点名、截止了：全部评
    assert collect.choose_notebooks(nbs, [], [], None, False, now=now).open == nbs
    assert collect.choose_notebooks(nbs, [], nbs[:1], future, True, now=now).open == nbs[:1]
    assert collect.choose_notebooks(nbs, collect.named_notebooks("all", nbs), [], past, True, now=now).open == nbs


def test_links_in_a_download_are_never_followed(tmp_path):
    """fe44 s122：下载的文件夹里的符号链接被评分程序（常常是 root）跟着读了：指向 submitted/别的学生 的链接把别人的作业当成
    自己的评（20/20，反馈里是别人的代码），指向 .grading/secret 的链接在隔离说明里露出密钥的一点信息（JSON 出错的列号）。
    预期：指向文件的、指向文件夹的符号链接，硬链接，zip 里的符号链接，都不读（没有数据），隔离，说明写“没有读它指向的文件”，
    隔离行照样写上是哪个学生；普通的文件照常评。"""
    course = tmp_path / "course"
    (course / ".grading").mkdir(parents=True)
    secret = course / ".grading" / "secret"
    secret.write_text("0123456789abcdef" * 4)
    other = course / "submitted" / "s004" / "exercises" / f"{NB}.ipynb"
    other.parent.mkdir(parents=True)
    other.write_bytes(gf.dump(gf.answered(gf.load(REPO / "release" / "exercises" / f"{NB}.ipynb"),
                                          gf.load(REPO / "solutions" / "exercises" / f"{NB}.ipynb"))))
    download = tmp_path / "download"
    for sid in ("s122a", "s122b", "s122c", "s122d", "s200"):
        (download / sid).mkdir(parents=True)
    (download / "s122a" / f"{NB}.ipynb").symlink_to(secret)
    (download / "s122b" / f"{NB}.ipynb").symlink_to(other)
    (download / "s122c" / "exercises").symlink_to(other.parent, target_is_directory=True)
    os.link(other, download / "s122d" / f"{NB}.ipynb")
    shutil.copy(other, download / "s200" / f"{NB}.ipynb")
    from lib.grading import collect
    notebooks = sorted(p.stem for p in (REPO / "release" / "exercises").glob("*.ipynb"))
    items = {it.src: it for it in collect.import_download(download, notebooks).items}
    for src in (f"s122a/{NB}.ipynb", f"s122b/{NB}.ipynb", "s122c/exercises", f"s122d/{NB}.ipynb"):
        it = items[src]
        assert it.reason and "没有读它指向的文件" in it.reason and it.data == b"" and it.linked, (src, it)
        assert it.student_id == src.split("/")[0]
    assert items[f"s200/{NB}.ipynb"].reason is None and items[f"s200/{NB}.ipynb"].nb is not None
    zpath = tmp_path / "download.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        link = zipfile.ZipInfo(f"s122e/{NB}.ipynb")
        link.external_attr = (0o120777 << 16)  # 符号链接（解压工具会把它变成真的链接）
        zf.writestr(link, str(secret))
        zf.writestr(f"s200/{NB}.ipynb", other.read_bytes())
    zipped = {it.src: it for it in collect.import_download(zpath, notebooks).items}
    assert zipped[f"s122e/{NB}.ipynb"].linked and zipped[f"s122e/{NB}.ipynb"].data == b""
    assert zipped[f"s200/{NB}.ipynb"].reason is None
