"""Colab 徽章与引导单元格（lib/tools/badges.py）：仓库里每个 notebook 的徽章都指向它自己的路径。"""
from __future__ import annotations

import copy
import re

import nbformat
import pytest

from lib.tools import badges
from lib.tools.badges import COLAB_LINK, notebooks_to_stamp, stamp
from lib.tools.bootstrap import BOOTSTRAP_SOURCE, REPO_ROOT, colab_url

REPO_NOTEBOOKS = notebooks_to_stamp(REPO_ROOT)


def _rel(path):
    return path.relative_to(REPO_ROOT).as_posix()


def test_there_are_notebooks_to_check():
    assert any(_rel(p) == "notebooks/00_start_here.ipynb" for p in REPO_NOTEBOOKS)


@pytest.mark.parametrize("path", REPO_NOTEBOOKS, ids=_rel)
def test_badge_points_at_this_notebook(path):
    nb = nbformat.read(path, as_version=4)
    first_md = next(c for c in nb.cells if c.cell_type == "markdown")
    links = COLAB_LINK.findall(first_md.source)
    assert links, f"{_rel(path)}：第一个 Markdown 单元格里没有 Colab 徽章；运行 make stamp-badges"
    assert set(links) == {colab_url(_rel(path))}, (
        f"{_rel(path)} 的 Colab 徽章指向 {links}，应该是 {colab_url(_rel(path))}；运行 make stamp-badges")


@pytest.mark.parametrize("path", REPO_NOTEBOOKS, ids=_rel)
def test_first_code_cell_is_the_bootstrap(path):
    nb = nbformat.read(path, as_version=4)
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code.source.rstrip("\n") == BOOTSTRAP_SOURCE.rstrip("\n"), (
        f"{_rel(path)} 的第一个代码单元格不是当前的引导单元格；运行 make stamp-badges")
    assert not stamp(copy.deepcopy(nb), _rel(path)), f"{_rel(path)} 需要重新盖章：make stamp-badges"


# ---------------------------------------------------------------- stamp() 本身

def _nb(md="# 标题\n\n讲义 §2", code=BOOTSTRAP_SOURCE, outputs=()):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(code)
    cell.outputs = list(outputs)
    nb.cells = [nbformat.v4.new_markdown_cell(md), cell, nbformat.v4.new_code_cell("x = 1")]
    return nb


def test_stamp_rewrites_a_wrong_badge_and_is_idempotent():
    old = colab_url("notebooks/99_old_name.ipynb")
    nb = _nb(md=f"# 标题\n[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({old})")
    assert stamp(nb, "notebooks/02_self_attention.ipynb") is True
    assert COLAB_LINK.findall(nb.cells[0].source) == [colab_url("notebooks/02_self_attention.ipynb")]
    assert stamp(nb, "notebooks/02_self_attention.ipynb") is False


def test_stamp_adds_a_missing_badge_under_the_title():
    nb = _nb()
    assert stamp(nb, "release/exercises/01_attention_by_hand.ipynb")
    lines = nb.cells[0].source.split("\n")
    assert lines[0] == "# 标题"
    assert lines[2] == badges.badge_markdown("release/exercises/01_attention_by_hand.ipynb")
    assert "讲义 §2" in nb.cells[0].source


def test_stamp_replaces_an_old_bootstrap_and_keeps_its_output():
    output = nbformat.v4.new_output("stream", name="stdout", text="本地运行：已找到课程根目录，lib/ 可以导入。\n")
    nb = _nb(code="# 引导单元格：旧版本\nCOURSE_REPO = 'x'", outputs=[output])
    assert stamp(nb, "notebooks/01_rnn_to_attention.ipynb")
    assert nb.cells[1].source == BOOTSTRAP_SOURCE.rstrip("\n")
    assert nb.cells[1].outputs == [output]
    assert nb.cells[2].source == "x = 1"


def test_stamp_refuses_to_overwrite_real_code():
    nb = _nb(code="import torch\nmodel = build()")
    with pytest.raises(ValueError, match="不是引导单元格"):
        stamp(nb, "notebooks/03_scaling.ipynb")
    assert nb.cells[1].source == "import torch\nmodel = build()"


def test_stamp_keeps_nbgrader_checksums_valid():
    from nbgrader.utils import compute_checksum
    nb = _nb(md=f"# 练习\n[![Open In Colab](x)]({colab_url('source/exercises/a.ipynb')})")
    nb.cells[0].metadata["nbgrader"] = {"grade_id": "header", "locked": True, "grade": False,
                                        "solution": False, "schema_version": 3}
    nb.cells[0].metadata["nbgrader"]["checksum"] = compute_checksum(nb.cells[0])
    assert stamp(nb, "release/exercises/a.ipynb")
    assert "release/exercises/a.ipynb" in nb.cells[0].source
    assert nb.cells[0].metadata["nbgrader"]["checksum"] == compute_checksum(nb.cells[0])


def test_cli_restamps_everything_when_the_config_changes(tmp_path, capsys):
    """改 [tool.course] 的 ref：--check 报出每个 notebook，--write 全部更新，之后 --check 通过。"""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.course]\nrepository = "https://github.com/someone/fork"\nref = "v9.9"\n', encoding="utf-8")
    paths = ["notebooks/01_a.ipynb", "release/exercises/02_b.ipynb", "solutions/exercises/02_b.ipynb"]
    for rel in paths:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        nb = _nb()
        stamp(nb, rel)  # 按仓库当前的配置盖章
        nbformat.write(nb, tmp_path / rel)
    (tmp_path / "source" / "exercises").mkdir(parents=True)
    untouched = _nb(md="# source 不盖章")
    nbformat.write(untouched, tmp_path / "source" / "exercises" / "02_b.ipynb")
    source_bytes = (tmp_path / "source" / "exercises" / "02_b.ipynb").read_bytes()

    assert badges.main(["--check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert all(rel in out for rel in paths)
    assert badges.main(["--write", "--root", str(tmp_path)]) == 0
    assert badges.main(["--check", "--root", str(tmp_path)]) == 0
    for rel in paths:
        nb = nbformat.read(tmp_path / rel, as_version=4)
        assert COLAB_LINK.findall(nb.cells[0].source) == [
            f"https://colab.research.google.com/github/someone/fork/blob/v9.9/{rel}"]
        assert 'COURSE_REPO = "https://github.com/someone/fork.git"' in nb.cells[1].source
        assert 'COURSE_REF = "v9.9"' in nb.cells[1].source
    assert (tmp_path / "source" / "exercises" / "02_b.ipynb").read_bytes() == source_bytes


# ---------------------------------------------------------------- 入口文档里的相对链接

LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", ["README.md", "notebooks/00_start_here.ipynb"])
def test_relative_links_in_the_front_doors_resolve(doc):
    """README 和欢迎 notebook 里的课程地图链接到的文件都存在（章节和练习的文件名与地图一致）。"""
    path = REPO_ROOT / doc
    if path.suffix == ".ipynb":
        text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    else:
        text = path.read_text(encoding="utf-8")
    targets = [t for t in LINK.findall(text) if not re.match(r"^[a-z]+:|^#", t)]
    assert targets, f"{doc} 里没有相对链接？"
    missing = [t for t in targets if not (path.parent / t.split("#")[0]).exists()]
    assert missing == [], f"{doc} 里这些链接指向不存在的文件：{missing}"
