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


def test_page_weight_counts_only_what_a_reader_sees():
    """lib/tools/page_weight.py：<details> 里的文字、收起的代码、引导单元格都不算；讲义不在手边时用存下的字数。"""
    from lib.tools import page_weight
    nb = {"cells": [{"cell_type": "markdown", "source": ["看得见 的\n<details><summary>摘要</summary>\n\n很长的推导\n\n</details>"]},
                    {"cell_type": "code", "source": ["x = 1"], "metadata": {}},
                    {"cell_type": "code", "source": ["check(...)"], "metadata": {"tags": ["hide-input"]}},
                    {"cell_type": "code", "source": ["# 引导单元格：……\nimport sys"], "metadata": {}}]}
    assert page_weight.visible(nb) == (len("看得见的"), len("x=1"))
    assert page_weight.section_sizes(Path("/nonexistent/lecture07.md")) == page_weight.LECTURE_CHARS
    names = [r[0] for r in page_weight.rows()]
    assert names[0].startswith("00_") and names[-1].startswith("12_") and len(names) == 13


def test_every_page_shows_at_most_three_times_its_lecture_section():
    """页面看得见的文字（不算收起的证据）不超过讲义对应小节的 3 倍（issue 43：页面先是一堂课，证据点一下才看见）。"""
    from lib.tools import page_weight
    heavy = {name: round(ratio, 2) for name, _, _, _, ratio, _ in page_weight.rows() if round(ratio, 1) > 3.0}
    assert not heavy, (f"这些页面看得见的文字超过了讲义小节的 3 倍：{heavy}。把推导、种子表、来源这类证据收进 <details> "
                       "或带 hide-input 标签的单元格，或者删掉重复的话；python -m lib.tools.page_weight 打印每一页的数")
