"""提交前的自查：你的练习 notebook 里的评分单元格（nbgrader 单元格）还完整吗？

在练习 notebook 的最后一个单元格里运行：

    from lib.selfcheck import check_this_notebook
    check_this_notebook("release/exercises/01_attention_by_hand.ipynb")

它把你保存的 notebook（本地：当前目录里的那个 .ipynb 文件，所以先按 Ctrl+S 保存；
Colab：正在编辑的 notebook 本身）和课程发布的版本（release/）逐个评分单元格比较：
有没有评分单元格丢了、被复制了一份、单元格类型被改了、或者 nbgrader 元数据被抹掉了。
这些问题会让自动评分给出错误的分数，提交前修好最省事。

在 notebook 里运行时，它还用和评分**同一套**格式规则（lib/answer_format.py）检查你的答案：
变量是不是要求的形状，函数在一个小例子上返回的是不是一个数、一个整数、形状对的数组……（只看格式，不看对错）。

也可以在命令行检查一个下载下来的文件：

    python -m lib.selfcheck 下载/01_attention_by_hand.ipynb
"""
from __future__ import annotations

import argparse
import datetime as _dt
import inspect
import json
import subprocess
import sys
from pathlib import Path

from lib import answer_format as fmt

REPO_ROOT = Path(__file__).resolve().parents[1]
_VERSION_DIRS = ("release", "solutions", "source")
_FLAGS = ("grade", "solution", "locked", "points")


# ---------------------------------------------------------------- 读取 notebook

def _release_relpath(path_in_repo: str) -> str:
    """'release/exercises/01.ipynb'、'solutions/exercises/01.ipynb' 或 'exercises/01.ipynb' → 'exercises/01.ipynb'。"""
    parts = Path(str(path_in_repo).replace("\\", "/").lstrip("/")).parts
    if parts and parts[0] in _VERSION_DIRS:
        parts = parts[1:]
    if len(parts) < 1 or not parts[-1].endswith(".ipynb"):
        raise ValueError(f"path_in_repo 应该像 'release/exercises/01_attention_by_hand.ipynb'，得到的是 {path_in_repo!r}")
    return Path(*parts).as_posix()


def _load_json(text: str, where: str) -> dict:
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where} 不是合法的 notebook（JSON 出错：{err}）") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError(f"{where} 不是 notebook（没有 cells 列表）")
    return nb


def load_reference(path_in_repo: str, root: Path | None = None,
                   student_file: Path | None = None) -> tuple[dict, str]:
    """课程发布的版本。优先取 git 里提交的那一份（你可能正直接在 release/ 里的文件上作答）；
    没有 git 时取磁盘上的 release/ 文件——除非它就是你正在检查的文件，那就用 solutions/ 里的同名文件
    （评分单元格的编号、类型和分值与发布版相同）。返回 (notebook, 说明来源的字符串)。"""
    root = Path(root or REPO_ROOT)
    rel = _release_relpath(path_in_repo)
    try:
        out = subprocess.run(["git", "-C", str(root), "show", f"HEAD:release/{rel}"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0:
            return _load_json(out.stdout, f"git HEAD:release/{rel}"), f"git HEAD:release/{rel}"
    except (OSError, subprocess.SubprocessError):
        pass
    mine = student_file.resolve() if student_file else None
    for folder in ("release", "solutions"):
        path = root / folder / rel
        if path.is_file() and path.resolve() != mine:
            return _load_json(path.read_text(encoding="utf-8"), str(path)), str(path)
    if mine is not None and mine == (root / "release" / rel).resolve():
        raise FileNotFoundError(f"你正直接在发布版文件 release/{rel} 上作答，而这里没有 git 记录的原版可以对照；"
                                "请用 git clone 得到的课程目录，或在命令行用 python -m lib.selfcheck 检查")
    raise FileNotFoundError(f"找不到发布版 release/{rel}（课程根目录 {root}）：path_in_repo 写对了吗？")


def _colab_live_notebook(timeout_sec: int = 30) -> dict:
    """Colab 正在编辑的 notebook（含未保存的改动）。"""
    from google.colab import _message  # noqa: PLC0415  只在 Colab 上存在
    reply = _message.blocking_request("get_ipynb", request="", timeout_sec=timeout_sec)
    if not reply or "ipynb" not in reply:
        raise RuntimeError("Colab 没有返回 notebook 内容")
    return reply["ipynb"]


def session_notebook(namespace: dict | None = None) -> Path | None:
    """这个内核服务的 notebook 文件。JupyterLab / Jupyter Server（2.0 起）启动内核时把 notebook 的路径放进环境变量
    JPY_SESSION_NAME，ipykernel 把它放进全局变量 __session__；VS Code 用 __vsc_ipynb_file__。
    路径可能是绝对路径，也可能相对于 Jupyter 的根目录：都试一试，找不到就返回 None。"""
    import os

    namespace = namespace or {}
    for value in (namespace.get("__session__"), namespace.get("__vsc_ipynb_file__"), os.environ.get("JPY_SESSION_NAME")):
        if not isinstance(value, str) or not value.endswith(".ipynb"):
            continue
        path = Path(value)
        tries = [path] if path.is_absolute() else [Path.cwd() / path, *(p / path for p in Path.cwd().parents),
                                                   Path.cwd() / path.name]
        for p in tries:
            if p.is_file():
                return p
    return None


def _local_candidates(path_in_repo: str, namespace: dict | None = None):
    """本地：先找这个内核服务的 notebook（session_notebook：文件名可能是“… (1).ipynb”“Copy of …”），
    再找当前目录里的同名文件（JupyterLab 的内核在 notebook 所在目录运行）。"""
    name = Path(path_in_repo).name
    cwd = Path.cwd()
    rel = _release_relpath(path_in_repo)
    session = session_notebook(namespace)
    yield from ([session] if session else []) + [cwd / name, cwd / path_in_repo, cwd / "release" / rel]
    yield from renamed_copies(cwd, Path(name).stem)  # 只在前面都没有时才找


def renamed_copies(folder: Path, stem: str) -> list[Path]:
    """folder 里按评分时的文件名规则（lib.grading.collect.resolve_notebook：“… (1)”“Copy of …”“…的副本”）
    属于练习 stem、但名字不同的 notebook，最近保存的在前。"""
    try:  # 评分的沙箱里只有 lib/ 的一部分（没有 lib.grading）：那里找不到也无妨
        from lib.grading.collect import resolve_notebook

        found = [p for p in folder.glob("*.ipynb") if p.stem != stem and resolve_notebook(p.stem, [stem])[0] == stem]
        return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)
    except Exception:  # noqa: BLE001  自查从不因为找文件而出错
        return []


def _rename_note(path: Path, name: str) -> str:
    return "" if path.name == name else f"；文件名不是原来的 {name}：提交时请改回 {name}（或另存为 {name}）再上传"


# ---------------------------------------------------------------- 比较

def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _nbgrader(cell: dict) -> dict | None:
    meta = cell.get("metadata") or {}
    nbg = meta.get("nbgrader")
    return nbg if isinstance(nbg, dict) and nbg.get("grade_id") else None


def compare(student: dict, reference: dict) -> tuple[list[str], list[str]]:
    """比较两个 notebook 的评分单元格。返回 (problems, notes)：problems 会影响评分，notes 只是提醒。"""
    ref_cells = [(c, _nbgrader(c)) for c in reference["cells"]]
    ref_cells = [(c, m) for c, m in ref_cells if m]
    by_id: dict[str, list[dict]] = {}
    for c in student.get("cells", []):
        m = _nbgrader(c)
        if m:
            by_id.setdefault(m["grade_id"], []).append(c)
    plain = [c for c in student.get("cells", []) if not _nbgrader(c)]
    plain_ids = {c.get("id") for c in plain if c.get("id")}
    plain_sources = {_source(c).strip() for c in plain}

    problems, notes = [], []
    if ref_cells and not by_id:
        problems.append("整个 notebook 的 nbgrader 元数据都没了（常见原因：用别的编辑器打开后另存、"
                        "复制粘贴到新 notebook）。自动评分认不出任何答案。")
    else:
        for cell, meta in ref_cells:
            gid = meta["grade_id"]
            found = by_id.get(gid, [])
            what = _describe(cell, meta)
            if not found:
                if cell.get("id") in plain_ids or _source(cell).strip() in plain_sources:
                    problems.append(f"{what}还在，但它的 nbgrader 元数据被抹掉了：评分时认不出这个单元格。")
                else:
                    problems.append(f"{what}不见了（被删除或被合并了？）。")
                continue
            if len(found) > 1:
                problems.append(f"{what}出现了 {len(found)} 次（复制粘贴时多出来的？）。"
                                "只保留写着你答案的那一个，删掉其余的。")
            mine = found[0]
            if mine.get("cell_type") != cell.get("cell_type"):
                problems.append(f"{what}的类型从 {cell.get('cell_type')} 变成了 {mine.get('cell_type')}，"
                                "请在工具栏里把类型改回来。")
            changed = [k for k in _FLAGS if _nbgrader(mine).get(k) != meta.get(k)]
            if changed:
                problems.append(f"{what}的 nbgrader 元数据（{'、'.join(changed)}）被改动了。")
            if meta.get("solution") and mine.get("cell_type") == "code":
                broken = syntax_error(_source(mine))
                if broken:
                    problems.append(f"作答：{what}有语法错误（{broken}）：这个单元格运行不了，它定义的答案评分时都找不到。")
                    continue
            if meta.get("solution") and "NotImplementedError" in _source(mine) and mine.get("cell_type") == "code":
                state = _raise_state(_source(mine), _source(cell))
                if state == "unanswered":
                    elsewhere = _defined_elsewhere(_source(cell), plain)
                    if elsewhere:
                        notes.append(f"{what}没有改动，{'、'.join(elsewhere)} 的答案写在了新单元格里。评分时新单元格也会运行，"
                                     f"但请把它剪切到答题单元格“{gid}”里（替换掉 raise NotImplementedError() 那几行），再删掉新单元格。")
                    else:
                        notes.append(f"{what}还没有作答（里面仍是 raise NotImplementedError()）。")
                elif state == "before_return":
                    problems.append(f"作答：{what}：{fmt.LEFTOVER_RAISE}（它在 return 之前，函数运行到这里就出错）。")
                elif state == "in_cell":
                    problems.append(f"作答：{what}：{fmt.LEFTOVER_RAISE_CELL}。")
        known = {m["grade_id"] for _, m in ref_cells}
        extra = sorted(set(by_id) - known)
        if extra:
            problems.append(f"有发布版里没有的评分单元格：{'、'.join(extra)}（是从别的练习复制过来的吗？）。")
    return problems, notes


def syntax_error(source: str) -> str | None:
    """一个代码单元格的语法错误（“第 3 行：'(' was never closed”），没有时 None。%魔法和 !命令先按 IPython 的规则转换。"""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
        source = TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001  没有 IPython 或转换失败：按原样编译
        pass
    try:
        compile(source, "<答题单元格>", "exec")
    except SyntaxError as err:
        return f"第 {err.lineno} 行：{err.msg}"
    return None


def _raise_state(source: str, reference: str) -> str | None:
    """答题单元格里的 raise NotImplementedError()：unanswered（和发布版一样，没作答）、before_return（写了答案，
    但函数里的 raise 在 return 之前，会执行到）、in_cell（写了答案，但 raise 不在函数里：填变量的单元格，
    运行单元格时就出错）；在 return 之后的 raise 不会执行，没有影响（None）。"""
    import ast

    if source.strip() == reference.strip():
        return "unanswered"
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None  # 语法错误由测试单元格报告
    raises = lambda node: isinstance(node, ast.Raise) and "NotImplementedError" in ast.dump(node)  # noqa: E731
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in node.body:
                if isinstance(stmt, ast.Return):
                    break  # 之后的语句不会执行
                if raises(stmt):
                    return "unanswered" if not fmt_has_code(node) else "before_return"
    if any(raises(stmt) for stmt in tree.body):
        return "in_cell"
    return None


def leftover_raise_functions(student: dict, reference: dict) -> set[str]:
    """答题单元格里 raise 在 return 之前的那些函数（compare 已经按单元格报告了：格式检查不再重复说一遍）。"""
    import ast

    ref = {m["grade_id"]: _source(c) for c in reference.get("cells", []) if (m := _nbgrader(c))}
    names: set[str] = set()
    for c in student.get("cells", []):
        m = _nbgrader(c)
        if not (m and m.get("solution") and c.get("cell_type") == "code" and "NotImplementedError" in _source(c)):
            continue
        if _raise_state(_source(c), ref.get(m["grade_id"], "")) == "before_return":
            try:
                names |= {n.name for n in ast.walk(ast.parse(_source(c))) if isinstance(n, ast.FunctionDef)}
            except SyntaxError:
                continue
    return names


def fmt_has_code(func) -> bool:
    import ast

    skeleton = lambda n: (isinstance(n, ast.Pass) or (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))  # noqa: E731
                          or (isinstance(n, ast.Raise) and "NotImplementedError" in ast.dump(n)))
    return not all(skeleton(n) for n in func.body)


def _defined_elsewhere(reference: str, plain_cells: list) -> list:
    """发布版答题单元格里要写的函数，在学生自己加的代码单元格里定义了哪些。"""
    import ast

    try:
        wanted = {n.name for n in ast.parse(reference).body if isinstance(n, ast.FunctionDef)}
    except SyntaxError:
        return []
    found = set()
    for c in plain_cells:
        if c.get("cell_type") != "code":
            continue
        try:
            found |= {n.name for n in ast.parse(_source(c)).body if isinstance(n, ast.FunctionDef)} & wanted
        except SyntaxError:
            continue
    return sorted(found)


def added_answer_notes(student: dict, reference: dict) -> list[str]:
    """没作答的文字题旁边有学生自己加的、非空的单元格（和评分时的判断是同一段代码：lib/grading/repair.py）。
    评分时它会被移进答题单元格、交给助教，分数不受影响，所以只是提醒（不是“会影响评分的问题”）。"""
    from lib.grading import repair

    try:
        repaired, _ = repair.repair(student, reference, move_added=False)
        found = repair.added_answers(repaired, reference)
    except Exception:  # noqa: BLE001  自查从不因为 notebook 奇怪而出错
        return []
    return [f"文字题“{gid}”的" + repair.ADDED_ANSWER_HINT.format(gid=gid) for gid in sorted(found)]


def _describe(cell: dict, meta: dict) -> str:
    if meta.get("solution"):
        kind = "答题单元格"
    elif meta.get("grade") and cell.get("cell_type") == "code":
        kind = "测试单元格"
    else:
        kind = "单元格"
    return f"{kind} “{meta['grade_id']}”"


# ---------------------------------------------------------------- 答案的格式（和评分同一套规则）


def _examples() -> dict:
    """每个练习 notebook 的答案：名字 → (规则, 形状或维数, 小例子的参数；None 表示这是变量)。
    参数是函数（延迟构造，需要 torch 的例子只在用到时才导入 torch）。"""
    import numpy as np

    def q_k_v():
        return np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[1.0, 1.0], [1.0, -1.0]]), np.eye(2)

    def equivariance():
        rng = np.random.default_rng(3)
        return (rng.normal(size=(5, 4)), *(rng.normal(size=(4, 3)) for _ in range(3)), np.array([2, 0, 4, 1, 3]))

    def pad_mask():
        import torch
        return (torch.tensor([[True, True, False]]),)

    def tiny_lm():
        import torch
        from lib.transformer import TransformerLM
        torch.manual_seed(0)
        return TransformerLM(vocab_size=11, d_model=16, n_heads=2, n_layers=1, max_len=16).eval(), \
            torch.tensor([[1, 2]]), 2

    return {
        "01_attention_by_hand": {
            "scores_1": ("array", (2, 2), None), "weights_1": ("array", (2, 2), None),
            "outputs_1": ("array", (2, 2), None), "self_attention": ("attention", (2, 2), q_k_v),
            "copy_query": ("array", (4,), lambda: (np.eye(4)[:3], 1)),
            "average_query": ("array", (4,), lambda: (np.eye(4)[:3], 0, 2))},
        "02_scaling_and_equivariance": {
            "score_variance": ("number", None, lambda: (64, 1.0)), "score_divisor": ("number", None, lambda: (64, 1.0)),
            "monte_carlo_variance": ("number", None, lambda: (16, 0.5, 2000, 1)),
            "equivariance_gap": ("number", None, equivariance)},
        "03_positions_and_rope": {
            "q_tilde_a": ("array", (2,), None), "k_tilde_a": ("array", (2,), None), "dot_a": ("number", None, None),
            "dot_b": ("number", None, None), "dot_c": ("number", None, None),
            "rotate_2d": ("array", (2,), lambda: (np.array([1.0, 0.0]), 0.5)),
            "rope": ("array", (2, 4), lambda: (np.ones((2, 4)), np.array([0, 1])))},
        "04_blocks_and_cost": {
            "count_params": ("integer", None, lambda: (50257, 768, 12, 1024, True, "learned")),
            "crossover_length": ("number", None, lambda: (768,)),
            "attention_share": ("number", None, lambda: (128, 768)),
            "crossover_4096": ("number", None, None), "share_128k": ("number", None, None)},
        "05_masks_and_kv_cache": {
            "key_padding_mask": ("torch_bool_mask", 4, pad_mask),
            "positions_without_cache": ("integer", None, lambda: (1, 3)),
            "positions_with_cache": ("integer", None, lambda: (1, 3)),
            "generate_cached": ("array", (1, 4), tiny_lm)},
    }


def _check_format(value, rule, shape, what, returned):
    if rule == "attention":
        out, w = fmt.pair(value, what)
        fmt.array(out, f"{what} 的输出", shape)
        fmt.array(w, f"{what} 的权重", shape)
    elif rule == "array":
        fmt.array(value, what, shape, returned)
    elif rule == "torch_bool_mask":
        fmt.torch_bool_mask(value, what, shape)
    else:
        getattr(fmt, rule)(value, what, returned)


def check_formats(notebook: str, namespace: dict, reported: set[str] = frozenset()) -> tuple[list[str], list[str]]:
    """用评分的格式规则检查 namespace 里的答案。返回 (problems, notes)：problems 会让那一部分得 0 分。
    reported：单元格检查已经说过“return 之前的 raise”的函数，这里不再说第二遍。"""
    problems, notes = [], []
    for name, (rule, shape, example) in _examples().get(notebook, {}).items():
        if name not in namespace:
            notes.append(f"还没有定义 {name}（运行过答题单元格了吗？）。")
            continue
        value = namespace[name]
        what = name
        found = fmt.borrowed(value, namespace) if rule == "attention" else None
        if found:  # 练习 1：用了现成的注意力，评分时这一题 0 分（和公开测试同一句话）
            problems.append(f"作答：{fmt.borrowed_message(name, found)}")
            continue
        if example is not None:
            args = example()
            what = f"{name}({', '.join(_short(a) for a in args)})"
            try:
                value = fmt.call(value, *args, what=what)
            except fmt.NotAnswered:  # 函数还是 raise NotImplementedError()
                notes.append(f"{name} 还没有作答。")
                continue
            except AssertionError as err:  # call() 的说明：函数在小例子上出错了：评分时这一部分同样会出错、丢分
                if not (name in reported and fmt.LEFTOVER_RAISE in str(err)):
                    problems.append(f"作答：{err}")
                continue
        elif value is None:
            notes.append(f"{name} 还没有填写。")
            continue
        try:
            _check_format(value, rule, shape, what, returned=example is not None)
        except fmt.FormatError as err:
            problems.append(f"格式：{err}")
    return problems, notes


def _short(arg) -> str:
    shape = getattr(arg, "shape", None)
    if shape is not None:
        return f"<形状 {tuple(shape)}>"
    return "<模型>" if callable(arg) else repr(arg)


# ---------------------------------------------------------------- 报告

_HOW_TO_FIX = """怎么修：
  • 删掉多出来的副本。误删的单元格可以撤销找回：JupyterLab 在命令模式下按 Z；
    Colab 用 编辑 → 撤消删除单元格（Ctrl+M Z）。
  • 找不回来时：重新下载一份发布版 notebook，把你的答案逐格复制进去（复制单元格的内容，
    而不是整个单元格），再运行本自查。
  • 单元格类型：选中它，在工具栏的下拉框里改回 Code 或 Markdown。"""


def report(problems: list[str], notes: list[str], path_in_repo: str, checked: str) -> str:
    lines = [f"自查 {path_in_repo}（检查的是：{checked}）"]
    structure = [p for p in problems if not p.startswith(("格式：", "作答："))]
    if problems:
        lines.append(f"✗ 发现 {len(problems)} 个会影响评分的问题，提交前请修好：")
        lines += [f"  {i}. {p}" for i, p in enumerate(problems, 1)]
        if structure:
            lines.append(_HOW_TO_FIX)
        if any(p.startswith("格式：") for p in problems):  # 只在真有格式问题时才说格式的事
            lines.append("  • 格式问题：按上面的说明改你的答案（规则和评分时一样，见 lib/answer_format.py）；"
                         "格式不对的那一部分评分时得 0 分。")
    if not structure:
        lines.append("✓ 评分单元格完整：没有丢失、没有重复，类型和 nbgrader 元数据都没变。")
    if notes:
        lines.append("提醒（不影响上面的结论）：")
        lines += [f"  • {n}" for n in notes]
    if not problems:
        lines.append("提交：保存（Ctrl+S），下载 .ipynb 文件（Colab：文件 File → 下载 Download → 下载 .ipynb），"
                     "不要改文件名，上传到课程平台。")
    return "\n".join(lines)


def check_notebook(student: dict, path_in_repo: str, checked: str = "给定的 notebook",
                   root: Path | None = None, student_file: Path | None = None,
                   namespace: dict | None = None) -> bool:
    """比较 student（notebook 的 dict）和发布版，打印报告；没有问题时返回 True。
    给了 namespace（notebook 的全局变量）时，再用评分的规则检查答案的格式。"""
    reference, _ = load_reference(path_in_repo, root, student_file)
    problems, notes = compare(student, reference)
    notes += added_answer_notes(student, reference)
    if namespace is not None:
        more, more_notes = check_formats(Path(path_in_repo).stem, namespace,
                                         leftover_raise_functions(student, reference))
        problems, notes = problems + more, notes + more_notes
    print(report(problems, notes, path_in_repo, checked))
    return not problems


def check_this_notebook(path_in_repo: str, namespace: dict | None = None) -> None:
    """在练习 notebook 里调用：检查这个 notebook 的评分单元格和答案的格式，打印报告。不返回任何东西
    （单元格的最后一行不会多出一个 True）；要结论时用 self_check。namespace 默认是调用者的全局变量。"""
    if namespace is None:
        namespace = inspect.currentframe().f_back.f_globals
    self_check(path_in_repo, namespace)


def self_check(path_in_repo: str, namespace: dict) -> bool | None:
    """check_this_notebook 的检查本身：打印报告，返回 True（没问题）、False（有问题）、
    None（拿不到 notebook 内容，已说明怎么办；答案的格式照样检查）。"""
    if "google.colab" in sys.modules:
        try:
            student = _colab_live_notebook()
        except Exception as err:  # noqa: BLE001  拿不到就说明替代办法，不让单元格报错
            print(f"自查：这次没能从 Colab 读到 notebook 内容（{type(err).__name__}: {err}）。\n"
                  "替代办法：文件 File → 下载 Download → 下载 .ipynb，然后在装好课程的电脑上运行\n"
                  f"  python -m lib.selfcheck 下载的文件.ipynb --against {path_in_repo}")
            return _formats_only(path_in_repo, namespace)
        return check_notebook(student, path_in_repo, "Colab 里正在编辑的这个 notebook", namespace=namespace)
    for path in _local_candidates(path_in_repo, namespace):
        if path.is_file():
            when = _dt.datetime.fromtimestamp(path.stat().st_mtime).strftime("%H:%M:%S")
            try:
                student = _load_json(path.read_text(encoding="utf-8"), str(path))
            except ValueError as err:
                print(f"自查：✗ {err}")
                return False
            try:
                return check_notebook(student, path_in_repo,
                                      f"这个 notebook 的文件 {path}，保存于 {when}；先按 Ctrl+S 保存再自查"
                                      + _rename_note(path, Path(path_in_repo).name),
                                      student_file=path, namespace=namespace)
            except FileNotFoundError as err:
                print(f"自查：无法核对单元格：{err}")
                return _formats_only(path_in_repo, namespace)
    print(f"自查：在当前目录 {Path.cwd()} 里找不到这个 notebook 的文件（{Path(path_in_repo).name} 或改过名的副本），"
          "评分单元格没有核对（下面只检查了答案的格式）。请在 notebook 所在的目录里运行，"
          "或在命令行运行 python -m lib.selfcheck 文件.ipynb")
    return _formats_only(path_in_repo, namespace)


def _formats_only(path_in_repo: str, namespace: dict) -> None:
    """拿不到 notebook 文件时，至少检查答案的格式（不需要文件）。"""
    problems, notes = check_formats(Path(path_in_repo).stem, namespace)
    if problems or notes:
        print("答案的格式（和评分用同一套规则）：")
        print("\n".join([f"  ✗ {p}" for p in problems] + [f"  • {n}" for n in notes]))
    elif _examples().get(Path(path_in_repo).stem):
        print("答案的格式（和评分用同一套规则）：✓ 都符合要求。")
    return None


def _guess_release_path(student_file: Path, root: Path | None = None) -> str:
    """按文件名找发布版。文件名的规则和评分时相同（lib.grading.collect.resolve_notebook）：
    浏览器加的“ (1)”、Colab 的“Copy of …”、“…的副本”都认得出。"""
    from lib.grading.collect import resolve_notebook

    root = Path(root or REPO_ROOT)
    matches = sorted((root / "release").glob(f"*/{student_file.name}"))
    if not matches:
        for folder in sorted(p for p in (root / "release").glob("*") if p.is_dir()):
            name, _ = resolve_notebook(student_file.stem, [p.stem for p in folder.glob("*.ipynb")])
            if name:
                matches.append(folder / f"{name}.ipynb")
    if len(matches) != 1:
        raise SystemExit(f"认不出 {student_file.name} 属于哪个练习（release/ 里有 {len(matches)} 个同名文件）；"
                         "请用 --against release/练习/文件.ipynb 指定")
    return matches[0].relative_to(root).as_posix()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.selfcheck",
                                     description="检查一个练习 notebook 的评分单元格是否完整")
    parser.add_argument("notebook", type=Path, help="要检查的 .ipynb 文件")
    parser.add_argument("--against", help="对应的发布版，例如 release/exercises/01_attention_by_hand.ipynb"
                                          "（默认按文件名在 release/ 里找）")
    args = parser.parse_args(argv)
    if not args.notebook.is_file():
        print(f"找不到文件 {args.notebook}")
        return 2
    try:
        student = _load_json(args.notebook.read_text(encoding="utf-8"), str(args.notebook))
    except ValueError as err:
        print(f"✗ {err}")
        return 1
    path_in_repo = args.against or _guess_release_path(args.notebook)
    try:
        ok = check_notebook(student, path_in_repo, str(args.notebook), student_file=args.notebook)
    except FileNotFoundError as err:
        print(f"无法核对：{err}")
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
