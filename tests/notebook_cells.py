"""测试用：像 IPython 一样执行 notebook 里的某个代码单元格（test_toy_tasks.py、test_architectures.py、
test_training_details.py、test_modern_transformer.py 在没有展示的种子上执行页面自己的单元格）。"""
import ast
import linecache
import os
from pathlib import Path

import nbformat


def run_cell(notebook: Path, ns: dict, marker: str) -> None:
    """执行 notebook 里带 marker 这个标签（cell tag）的代码单元格，没有的话执行第一个含有 marker 的；像 IPython 一样把
    源码放进 linecache（结果的键要读源码）。ns 里放 "__name__": "__main__"，单元格里定义的函数就和在 Jupyter 里一样
    属于 __main__。断言单元格用标签（如 "seed-claims-warmup"）找：页面上改了界限，测试检查的就是改过的界限。"""
    cells = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    tagged = [c for c in cells if marker in c.metadata.get("tags", [])]
    assert len(tagged) <= 1, f"{notebook.name} 里有 {len(tagged)} 个单元格带标签 {marker!r}：应该只有一个"
    cell = tagged[0] if tagged else next((c for c in cells if marker in c.source), None)
    assert cell is not None, f"{notebook.name} 里找不到标签为或含有 {marker!r} 的单元格：notebook 改了结构，请同步这个测试"
    # IPython 的行魔法（%matplotlib inline）不是 Python：换成注释，行号不变（训练函数的源码按行从 linecache 读）
    source = "\n".join("# " + line if line.lstrip().startswith("%") else line for line in cell.source.split("\n"))
    if tagged:  # 结论单元格：标签挪到了没有断言的单元格上，测试就什么也不检查了（注释里的 assert 不算）
        assert any(_is_check(node) for node in ast.walk(ast.parse(source))), \
            f"{notebook.name} 里带标签 {marker!r} 的单元格既没有 assert 语句，也没有调用 lib.claims 的 check(...)"
    filename = f"<{notebook.name}: {marker}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), ns)


def _is_check(node) -> bool:
    """assert 语句，或者对 check(...)（lib.claims：结论不成立时抛出 AssertionError）的调用。"""
    return isinstance(node, ast.Assert) or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                                            and node.func.id == "check")


def notebook_namespace(notebook: Path, *markers: str) -> dict:
    """依次执行含有这些 marker 的单元格之后的命名空间（"__name__" 是 "__main__"，像 Jupyter 里一样）。"""
    ns: dict = {"__name__": "__main__"}
    for marker in markers:
        run_cell(notebook, ns, marker)
    return ns


UNSEEN_ENV = "COURSE_UNSEEN_SEEDS"


def unseen_seeds(default: tuple[int, ...]) -> tuple[int, ...]:
    """页面没有展示的种子（“每个种子都成立”的结论要在它们上面重新训练、再检查）。默认是每个测试自己的（CI 用它）；
    环境变量 COURSE_UNSEEN_SEEDS 换成别的，写成 "10-14" 或 "10,12,15"，例如发布一页之前多查几个种子：
        COURSE_UNSEEN_SEEDS=10-14 .venv/bin/python -m pytest tests/test_experiments.py -k outside_the_sweep"""
    text = os.environ.get(UNSEEN_ENV, "").strip()
    if not text:
        return default
    seeds = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    if any(s < 10 for s in seeds):  # 0–9 是页面上的 10 个种子
        raise ValueError(f"{UNSEEN_ENV}={text!r}：页面没有展示的种子要从 10 开始（0–9 是页面上的种子）")
    return tuple(seeds)
