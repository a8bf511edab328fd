"""测试用：像 IPython 一样执行 notebook 里的某个代码单元格（tests/test_training_details.py、test_modern_transformer.py）。"""
import linecache
from pathlib import Path

import nbformat


def run_cell(notebook: Path, ns: dict, marker: str) -> None:
    """执行 notebook 里第一个含有 marker 的代码单元格，像 IPython 一样把源码放进 linecache（结果的键要读源码）。
    ns 里放 "__name__": "__main__"，单元格里定义的函数就和在 Jupyter 里一样属于 __main__。"""
    cells = [c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    source = next((s for s in cells if marker in s), None)
    assert source is not None, f"{notebook.name} 里找不到含有 {marker!r} 的单元格：notebook 改了结构，请同步这个测试"
    filename = f"<{notebook.name}: {marker}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), ns)


def notebook_namespace(notebook: Path, *markers: str) -> dict:
    """依次执行含有这些 marker 的单元格之后的命名空间（"__name__" 是 "__main__"，像 Jupyter 里一样）。"""
    ns: dict = {"__name__": "__main__"}
    for marker in markers:
        run_cell(notebook, ns, marker)
    return ns
