"""lib/tools/cell_marks.py：收起证据只用一个标记（标签），JupyterLab 的收起标记由它写出，存下的页面都一致。"""
from pathlib import Path

import nbformat
import pytest

from lib.tools import cell_marks

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "release" / "exercises").glob("*.ipynb"))


def test_tags_become_jupyterlab_flags_and_stale_flags_go():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("check(...)", metadata={"tags": ["hide-input", "seed-claims-x"]}),
                nbformat.v4.new_code_cell("table", metadata={"tags": ["hide-cell"]}),
                nbformat.v4.new_code_cell("plot()", metadata={"jupyter": {"source_hidden": True, "other": 1}}),
                nbformat.v4.new_markdown_cell("<details><summary>为什么</summary>\n\n……\n\n</details>")]
    assert cell_marks.sync(nb)
    assert nb.cells[0].metadata.jupyter == {"source_hidden": True}
    assert nb.cells[1].metadata.jupyter == {"source_hidden": True, "outputs_hidden": True}
    assert nb.cells[2].metadata.jupyter == {"other": 1}  # 没有标签就不收起；别的键不动
    assert "jupyter" not in nb.cells[3].metadata
    assert not cell_marks.sync(nb)  # 第二次没有改动


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_stored_pages_fold_exactly_what_their_tags_say(path):
    nb = nbformat.read(path, as_version=4)
    assert not cell_marks.sync(nb), (
        f"{path.name}：JupyterLab 的收起标记和标签不一致。运行 python -m lib.tools.cell_marks {path.relative_to(ROOT)}")
