"""评分流水线的测试数据生成器（不是测试文件）：从 release/ 和 solutions/ 造出各种“学生提交”。

每个 fixture 是 (文件相对路径, 文件内容 bytes, 期望)；期望由测试根据 release 的分值计算。
变换都是通用的（按 nbgrader 元数据找单元格），所以同样的代码既用于测试里临时建的小课程，
也用于仓库里真正的 `exercises` 作业。另有 make_tiny_course()：一个两题的小课程，用于在 release/
还没有生成时开发和测试。
"""
from __future__ import annotations

import ast
import copy
import csv
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

NBG = "nbgrader"


# ----------------------------------------------------------------------------- 读写 notebook
def load(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def dump(nb: dict) -> bytes:
    return json.dumps(nb, ensure_ascii=False, indent=1).encode("utf-8")


def src(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def meta(cell) -> dict:
    return (cell.get("metadata") or {}).get(NBG) or {}


def gid(cell):
    return meta(cell).get("grade_id")


def is_solution(cell):
    return bool(meta(cell).get("solution"))


def is_test(cell):
    m = meta(cell)
    return bool(m.get("grade")) and not m.get("solution") and cell.get("cell_type") == "code"


def code_cell(source: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "id": None, "metadata": {}, "outputs": [],
            "source": source}


def _fix_ids(nb: dict) -> dict:
    seen = set()
    for i, c in enumerate(nb["cells"]):
        cid = c.get("id")
        if not cid or cid in seen:
            cid = f"fx{i:04d}"
            while cid in seen:
                cid += "x"
            c["id"] = cid
        seen.add(cid)
    return nb


# ----------------------------------------------------------------------------- 基本提交
def answered(release: dict, solution: dict) -> dict:
    """release 的副本，答案单元格换成 solutions/ 里同一 grade_id 的内容（学生全部答对）。"""
    sol = {gid(c): src(c) for c in solution["cells"] if gid(c) and is_solution(c)}
    nb = copy.deepcopy(release)
    for c in nb["cells"]:
        if is_solution(c) and gid(c) in sol:
            c["source"] = _strip_solution_markers(sol[gid(c)])
    return nb


def _strip_solution_markers(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")]
    return "\n".join(lines)


def test_points(release: dict) -> dict:
    """自动评分测试单元格的 grade_id -> 分值。"""
    return {gid(c): float(meta(c).get("points", 0)) for c in release["cells"] if is_test(c)}


def insert_after_last_solution(nb: dict, source: str) -> dict:
    nb = copy.deepcopy(nb)
    idx = max(i for i, c in enumerate(nb["cells"]) if is_solution(c) and c["cell_type"] == "code")
    nb["cells"].insert(idx + 1, code_cell(source))
    return _fix_ids(nb)


def insert_first(nb: dict, source: str) -> dict:
    nb = copy.deepcopy(nb)
    idx = min(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")
    nb["cells"].insert(idx + 1, code_cell(source))
    return _fix_ids(nb)


def append_cell(nb: dict, source: str) -> dict:
    nb = copy.deepcopy(nb)
    nb["cells"].append(code_cell(source))
    return _fix_ids(nb)


def defined_names(text: str) -> tuple[list, list]:
    """答案单元格里定义的 (函数名, 变量名)。"""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return [], []
    funcs, names = [], []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            funcs.append(node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    names.append(t.id)
    return funcs, names


# ----------------------------------------------------------------------------- 变换（每个都返回新 notebook）
def with_prints_and_warnings(nb: dict) -> dict:
    """每个答案函数的开头打印、发警告、写日志；答案单元格末尾也各来一次。"""
    nb = copy.deepcopy(nb)
    noise = 'print("调试输出"); __import__("warnings").warn("学生代码的警告"); __import__("logging").warning("日志")'
    for c in nb["cells"]:
        if not (is_solution(c) and c["cell_type"] == "code"):
            continue
        lines = src(c).splitlines()
        out = []
        for i, line in enumerate(lines):
            out.append(line)
            if re.match(r"^def \w+\(.*\).*:\s*$", line):
                nxt = next((lines[j] for j in range(i + 1, len(lines)) if lines[j].strip()), "    pass")
                indent = re.match(r"^(\s*)", nxt).group(1) or "    "
                out.append(indent + noise)
        out.append(noise)
        c["source"] = "\n".join(out)
    return nb


def strip_metadata(nb: dict) -> dict:
    """编辑器丢掉了所有 nbgrader 元数据和单元格 id。"""
    nb = copy.deepcopy(nb)
    for i, c in enumerate(nb["cells"]):
        c.get("metadata", {}).pop(NBG, None)
        c["id"] = f"lost{i:03d}"
    return nb


def duplicate_graded_cell(nb: dict) -> dict:
    """复制粘贴：第一个代码答案单元格出现两次，上面一份是原来的空白版本，下面一份有答案。"""
    nb = copy.deepcopy(nb)
    blank = None
    for i, c in enumerate(nb["cells"]):
        if is_solution(c) and c["cell_type"] == "code":
            blank = copy.deepcopy(c)
            blank["source"] = "# 在这里写你的代码\nraise NotImplementedError()"
            nb["cells"].insert(i, blank)
            break
    return _fix_ids(nb)


def delete_test_cell(nb: dict) -> dict:
    nb = copy.deepcopy(nb)
    i = next(i for i, c in enumerate(nb["cells"]) if is_test(c))
    del nb["cells"][i]
    return nb


def change_cell_type(nb: dict) -> dict:
    """一个代码答案单元格被误改成了 markdown。"""
    nb = copy.deepcopy(nb)
    c = next(c for c in nb["cells"] if is_solution(c) and c["cell_type"] == "code")
    c["cell_type"] = "markdown"
    c.pop("outputs", None)
    c.pop("execution_count", None)
    return nb


def colab_style(nb: dict) -> dict:
    """Colab 下载的样子：colab 元数据、每个单元格的 outputId/executionInfo、不同的内核名。"""
    nb = copy.deepcopy(nb)
    nb["metadata"] = {"colab": {"provenance": [], "name": "exercise.ipynb"},
                      "kernelspec": {"name": "python3", "display_name": "Python 3"},
                      "language_info": {"name": "python"}, "accelerator": "GPU"}
    for i, c in enumerate(nb["cells"]):
        c.setdefault("metadata", {})["id"] = f"colab{i}"
        if c["cell_type"] == "code":
            c["metadata"]["executionInfo"] = {"status": "ok", "timestamp": 1700000000000 + i}
            c["metadata"]["outputId"] = f"out{i}"
    return nb


def always_equal(nb: dict) -> dict:
    """每个答案单元格里的函数都返回一个“和什么都相等”的对象，变量也都是它。"""
    nb = copy.deepcopy(nb)
    header = textwrap.dedent("""\
        class Anything:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            def __bool__(self): return True
            def __float__(self): return 0.0
            def __abs__(self): return 0.0
            def __sub__(self, other): return self
            __rsub__ = __sub__
            def __lt__(self, other): return True
            __le__ = __gt__ = __ge__ = __lt__
        """)
    first = True
    for c in nb["cells"]:
        if not (is_solution(c) and c["cell_type"] == "code"):
            continue
        funcs, names = defined_names(src(c))
        body = [header] if first else []
        first = False
        body += [f"def {f}(*args, **kwargs):\n    return Anything()" for f in funcs]
        body += [f"{n} = Anything()" for n in names]
        c["source"] = "\n".join(body) or "pass"
    return nb


def read_solutions(nb: dict, course_root: Path, assignment: str) -> dict:
    """从课程目录的 solutions/ 和 source/ 读出参考答案并执行（只有没有沙箱时才能读到）。"""
    code = textwrap.dedent(f"""\
        import json, glob, os
        _found = []
        for _base in [{str(course_root)!r}, '../..', '..', os.path.expanduser('~')]:
            for _sub in ('solutions', 'source'):
                for _p in glob.glob(os.path.join(_base, _sub, {assignment!r}, '*.ipynb')):
                    _found.append(_p)
                    try:
                        for _c in json.load(open(_p))['cells']:
                            if _c['cell_type'] == 'code' and _c.get('metadata', {{}}).get('nbgrader', {{}}).get('solution'):
                                exec(''.join(_c['source']).replace('### BEGIN SOLUTION', '').replace('### END SOLUTION', ''))
                    except Exception:
                        pass
        open({str(course_root / 'gradebook.db')!r}, 'rb').read(10) if os.path.exists({str(course_root / 'gradebook.db')!r}) else None
        """)
    return insert_after_last_solution(nb, code)


def write_files(nb: dict, course_root: Path) -> dict:
    return insert_after_last_solution(nb, textwrap.dedent(f"""\
        import os
        for _p in [{str(course_root / 'grades.csv')!r}, {str(course_root / 'owned_by_student.txt')!r}]:
            try:
                open(_p, 'a').write('student,100\\n')
            except OSError:
                pass
        """))


MONKEYPATCH_NUMPY = """\
import numpy as np
np.allclose = lambda *a, **k: True
np.testing.assert_allclose = lambda *a, **k: None
np.isclose = lambda *a, **k: True
"""
MONKEYPATCH_BUILTINS = """\
import builtins
class _Quiet(Exception):
    pass
builtins.AssertionError = _Quiet
builtins.isinstance = lambda *a: True
"""
MONKEYPATCH_HELPERS = """\
import lib.transformer as _T
_T.scaled_dot_product_attention = lambda q, k, v, mask=None: (v, None)
_T.causal_mask = lambda *a, **k: None
"""
FAKE_OUTPUT = """\
print("✓ 所有测试通过！")
print("All tests passed. 满分 100/100")
"""
INFINITE_LOOP = "while True:\n    pass\n"
STUBBORN_LOOP = "import time\nwhile True:\n    try:\n        time.sleep(0.2)\n    except BaseException:\n        pass\n"
MEMORY_HOG = "import numpy as np\n_big = np.ones((60000, 60000))\n"
FORK_BOMB = "import os\nwhile True:\n    if os.fork() == 0:\n        pass\n"
KERNEL_EXIT = "import os\nos._exit(3)\n"
SEGFAULT = "import ctypes\nctypes.string_at(0)\n"


def build_fixtures(release: dict, solution: dict, notebook: str, course_root: Path, assignment: str,
                   multi: bool) -> list[dict]:
    """返回 fixture 列表：{name, path, data, expect_score(None=隔离), expect_status(集合：status 必须包含的词),
    forbid_status(不能出现的词)}。路径按 STUDENT_ID/NOTEBOOK.ipynb（multi）或 STUDENT_ID.ipynb。"""
    full = answered(release, solution)
    blank = copy.deepcopy(release)
    pts = test_points(release)
    total = sum(pts.values())
    name = (lambda sid: f"{sid}/{notebook}.ipynb") if multi else (lambda sid: f"{sid}.ipynb")
    F = []

    def add(sid, nb_or_bytes, score, must=(), forbid=()):
        data = nb_or_bytes if isinstance(nb_or_bytes, bytes) else dump(nb_or_bytes)
        F.append({"name": sid, "path": name(sid), "data": data, "expect_score": score,
                  "must": set(must), "forbid": set(forbid)})

    add("s01_correct", full, total, must={"ok"}, forbid={"suspect", "repaired"})
    add("s02_blank", blank, 0.0, must={"ok"}, forbid={"suspect"})
    # 部分答错：第一个代码答案单元格保持空白（相当于那道题没做对）
    # 部分答错：第一个代码答案单元格保持空白，失去紧跟其后的测试单元格的分（直到下一个代码答案单元格）
    partly = copy.deepcopy(full)
    cells = partly["cells"]
    i0 = next(i for i, c in enumerate(cells) if is_solution(c) and c["cell_type"] == "code")
    cells[i0]["source"] = "# 在这里写你的代码\nraise NotImplementedError()"
    lost = 0.0
    for c in cells[i0 + 1:]:
        if is_solution(c) and c["cell_type"] == "code":
            break
        if is_test(c):
            lost += pts[gid(c)]
    add("s03_partly_wrong", partly, total - lost, forbid={"suspect"})
    add("s04_prints_warnings", with_prints_and_warnings(full), total, forbid={"suspect", "crashed"})
    add("s05_patch_numpy", insert_first(blank, MONKEYPATCH_NUMPY), 0.0, must={"suspect"})
    add("s06_patch_builtins", insert_first(blank, MONKEYPATCH_BUILTINS), 0.0, must={"suspect"})
    add("s07_patch_helpers", insert_first(blank, MONKEYPATCH_HELPERS), 0.0, must={"suspect"})
    add("s08_fake_output", append_cell(blank, FAKE_OUTPUT), 0.0, must={"suspect"})
    add("s09_always_equal", always_equal(blank), 0.0, must={"suspect"})
    add("s10_read_solutions", read_solutions(blank, course_root, assignment), "sandbox", must={"suspect"})
    add("s11_write_files", write_files(full, course_root), total, must={"suspect"})
    add("s12_infinite_loop", insert_after_last_solution(full, INFINITE_LOOP), total, must={"timeout"})
    add("s13_stubborn_loop", append_cell(full, STUBBORN_LOOP), total, must={"timeout"})
    add("s14_memory_hog", insert_after_last_solution(full, MEMORY_HOG), total, must={"crashed"})
    add("s15_fork_bomb", append_cell(full, FORK_BOMB), total, must={"suspect", "crashed"})
    add("s16_kernel_exit", append_cell(full, KERNEL_EXIT), total, must={"crashed"})
    add("s17_segfault", append_cell(full, SEGFAULT), total, must={"crashed"})
    add("s18_stripped_metadata", strip_metadata(full), total, must={"repaired"}, forbid={"suspect"})
    add("s19_duplicated_cell", duplicate_graded_cell(full), total, must={"repaired"}, forbid={"suspect"})
    add("s20_deleted_test", delete_test_cell(full), total, must={"repaired"}, forbid={"suspect"})
    add("s21_changed_type", change_cell_type(full), total, must={"repaired"}, forbid={"suspect"})
    add("s22_colab", colab_style(full), total, must={"ok"}, forbid={"suspect", "repaired"})
    add("s23_malformed_json", dump(full)[:-40], None, must={"quarantined"})
    F.append({"name": "s24_unexpected_name", "path": ("s24_unexpected_name/my homework.ipynb" if multi
                                                      else "s24 unexpected name!.ipynb"),
              "data": dump(full), "expect_score": None, "must": {"quarantined"}, "forbid": set()})
    F.append({"name": "s25_not_a_notebook", "path": name("s25_not_a_notebook")[:-6] + ".txt",
              "data": b"hello", "expect_score": None, "must": {"quarantined"}, "forbid": set()})
    return F


def write_fixtures(fixtures: list[dict], folder: Path) -> None:
    for f in fixtures:
        p = folder / f["path"]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(f["data"])


# ----------------------------------------------------------------------------- 小课程（开发和单元测试用）
def copy_course(repo: Path, course: Path) -> Path:
    """把仓库里评分需要的部分（lib、release、solutions、source、nbgrader_config.py、pyproject.toml）复制成一个临时课程目录。"""
    import shutil
    course.mkdir(parents=True)
    for d in ("lib", "release", "solutions", "source"):
        shutil.copytree(repo / d, course / d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(repo / "nbgrader_config.py", course)
    shutil.copy(repo / "pyproject.toml", course)  # [tool.course] timezone：课程的时区
    return course


def statuses(row: dict) -> set:
    return set(row["status"].split("+"))


def expected_score(fx: dict, use_bwrap: bool):
    """fixture 的期望分数；None = 应被隔离。fx["full"] 是满分。"""
    s = fx["expect_score"]
    if s == "sandbox":  # 读参考答案：有沙箱时读不到（0 分），没有沙箱时读到了（满分，但一定标记可疑）
        return 0.0 if use_bwrap else fx["full"]
    return s



def read_grades(course: Path) -> list[dict]:
    """课程根目录下 grades.csv 的全部行（文件带 BOM，给中文 Windows 上的 Excel）。"""
    return read_csv(Path(course) / "grades.csv")


def read_csv(path: Path) -> list[dict]:
    """一个带 BOM 的 UTF-8 CSV（grades.csv、export 写的表）的全部行。"""
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.DictReader(f))


def rows_for(fx: dict, rows: list[dict]) -> list[dict]:
    """grades.csv 里属于这个 fixture（一个交了的文件）的行：按学号，或（隔离的行没有学号时）按 detail 里的文件路径。
    同一学生没交的其他 notebook 的 missing 行不算。"""
    return [r for r in rows if r["status"] != "missing" and (r["student_id"] == fx["name"] or fx["path"] in r["detail"])]


def row_matches(fx: dict, row: dict, use_bwrap: bool) -> bool:
    """grades.csv 的一行是否符合 fixture 的期望：状态包含必需的词、不含禁止的词，分数（自动评分部分）相同。"""
    st = statuses(row)
    if not (fx["must"] <= st) or (fx["forbid"] & st):
        return False
    want = expected_score(fx, use_bwrap)
    if want is None:
        return row["score"] == "" and row["status"] == "quarantined"
    return row["score"] != "" and abs(float(row["score"]) - want) < 1e-9


TINY_CHECKS = '''\
"""小课程的检查：和 lib/grading/exercise_checks.py 同样的接口。"""
from dataclasses import dataclass
from typing import Callable
import math
import numpy as np


@dataclass(frozen=True)
class Check:
    grade_id: str
    notebook: str
    points: float
    verify: Callable


def _inputs(seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(3, 4))


def verify_double(data, seed):
    try:
        got = np.asarray(data["y"], dtype=float)
        want = 2 * _inputs(seed)
        if got.shape == want.shape and np.allclose(got, want):
            return 1.0, "正确。"
        return 0.0, "在随机输入上结果不对。"
    except Exception as e:
        return 0.0, f"没有得到可用的结果：{data.get('error', e) if isinstance(data, dict) else e}"


def verify_answer(data, seed):
    try:
        return (1.0, "正确。") if float(data["answer"]) == 42.0 else (0.0, "答案不对。")
    except Exception:
        return 0.0, f"没有得到可用的结果：{data.get('error') if isinstance(data, dict) else data}"


CHECKS = {c.grade_id: c for c in [
    Check("test_double", "tiny", 3, verify_double),
    Check("test_answer", "tiny", 1, verify_answer),
]}
'''

TINY_PROBES = '''\
import numpy as np


def _p_double(ns, seed):
    try:
        x = np.random.default_rng(seed).normal(size=(3, 4))
        return {"y": np.asarray(ns["double"](x.copy()), dtype=float).tolist()}
    except BaseException as e:
        return {"error": f"{type(e).__name__}: {e}"}


def _p_answer(ns, seed):
    try:
        return {"answer": float(ns["answer"])}
    except BaseException as e:
        return {"error": f"{type(e).__name__}: {e}"}


PROBES = {"test_double": _p_double, "test_answer": _p_answer}
'''

HIDDEN_MARKER = "HIDDEN_TEST_MARKER_7f3a"
REFERENCE_MARKER = "REFERENCE_ANSWER_MARKER_91c2"


def _nbg(**kw):
    d = {"schema_version": 3, "locked": False, "solution": False, "grade": False, "task": False}
    d.update(kw)
    return {NBG: d}


def tiny_source_notebook() -> dict:
    cells = [
        {"cell_type": "markdown", "metadata": _nbg(locked=True, grade_id="intro"), "source": "# 小练习\n做两道题。"},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
         "source": "import numpy as np"},
        {"cell_type": "code", "metadata": _nbg(solution=True, grade_id="double_impl"), "outputs": [],
         "execution_count": None,
         "source": f"def double(x):\n    ### BEGIN SOLUTION\n    # {REFERENCE_MARKER}\n    return 2 * np.asarray(x)\n"
                   "    ### END SOLUTION"},
        {"cell_type": "code", "metadata": _nbg(grade=True, locked=True, grade_id="test_double", points=3),
         "outputs": [], "execution_count": None,
         "source": "assert np.allclose(double(np.array([1.0, 2.0])), [2.0, 4.0]), 'double 的结果不对'\n"
                   "print('可见测试通过')\n"
                   f"### BEGIN HIDDEN TESTS\nassert double(5) == 10  # {HIDDEN_MARKER}\n### END HIDDEN TESTS"},
        {"cell_type": "code", "metadata": _nbg(solution=True, grade_id="answer_cell"), "outputs": [],
         "execution_count": None, "source": "### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION"},
        {"cell_type": "code", "metadata": _nbg(grade=True, locked=True, grade_id="test_answer", points=1),
         "outputs": [], "execution_count": None,
         "source": f"assert answer == 42, '答案不对'\n### BEGIN HIDDEN TESTS\nassert answer + 0 == 42  # {HIDDEN_MARKER}\n"
                   "### END HIDDEN TESTS"},
        {"cell_type": "markdown", "metadata": _nbg(solution=True, grade=True, grade_id="explain", points=2),
         "source": f"### BEGIN SOLUTION\n因为乘以 2。{REFERENCE_MARKER}\n### END SOLUTION"},
    ]
    for i, c in enumerate(cells):
        c["id"] = f"tiny{i}"
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                       "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def make_tiny_course(root: Path, repo: Path, assignment: str = "tiny") -> Path:
    """在 root 建一个 nbgrader 课程：source/ → nbgrader 生成 release/ 和 solutions/；lib/ 从 repo 复制
    （不含 grading），检查和探针写在 root/tiny_checks.py、root/tiny_probes.py。"""
    import shutil
    root.mkdir(parents=True, exist_ok=True)
    (root / "nbgrader_config.py").write_text(textwrap.dedent("""\
        c = get_config()
        c.CourseDirectory.root = "."
        c.CourseDirectory.course_id = "tiny-course"
        c.CourseDirectory.solution_directory = "solutions"
        c.CourseDirectory.db_url = "sqlite:///gradebook.db"
        c.ClearSolutions.code_stub = {"python": "# 在这里写你的代码\\nraise NotImplementedError()"}
        c.ClearSolutions.text_stub = "在这里写下你的答案。"
        """), encoding="utf-8")
    shutil.copytree(repo / "lib", root / "lib", ignore=shutil.ignore_patterns("grading", "__pycache__"))
    (root / "source" / assignment).mkdir(parents=True)
    (root / "source" / assignment / "tiny.ipynb").write_bytes(dump(tiny_source_notebook()))
    (root / "tiny_checks.py").write_text(TINY_CHECKS, encoding="utf-8")
    (root / "tiny_probes.py").write_text(TINY_PROBES, encoding="utf-8")
    import os
    # 和 `python -m nbgrader` 相同；先屏蔽 jsonschema 的可选依赖 rfc3987_syntax（导入时要现场编译语法，约 4 秒）
    nbg = [sys.executable, "-c", "import sys; sys.modules['rfc3987_syntax'] = None; sys.argv[0] = 'nbgrader'; "
           "from nbgrader.apps.nbgraderapp import main; main()"]
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    for args in (["generate_assignment", assignment, "--force"], ["generate_solution", assignment, "--force"]):
        p = subprocess.run(nbg + args + ["--log-level=ERROR"], cwd=root, capture_output=True, text=True, env=env)
        if p.returncode:
            raise RuntimeError(f"nbgrader {args[0]} 失败：\n{p.stdout}\n{p.stderr}")
    (root / "gradebook.db").unlink(missing_ok=True)  # 评分流水线自己建 gradebook
    return root
