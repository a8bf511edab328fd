"""Colab 徽章、引导单元格和内核（lib/tools/badges.py）：仓库里每个 notebook 的徽章都指向它自己的路径、图片是仓库里的，
存下的内核就是课程装的那个。"""
from __future__ import annotations

import copy
import re

import nbformat
import pytest

from lib.tools import badges
from lib.tools.badges import BADGE_IMAGE, COLAB_LINK, KERNELSPEC, badge_image, notebooks_to_stamp, stamp
from lib.tools.bootstrap import BOOTSTRAP_SOURCE, REPO_ROOT, colab_url

REPO_NOTEBOOKS = notebooks_to_stamp(REPO_ROOT)
ALL_NOTEBOOKS = notebooks_to_stamp(REPO_ROOT, ("notebooks", "source", "release", "solutions"))


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
def test_badge_image_is_the_local_file(path):
    """徽章的图片是仓库里的 assets/colab-badge.svg（离线、在国内也显示），相对路径从这个 notebook 出发能找到它。"""
    nb = nbformat.read(path, as_version=4)
    first_md = next(c for c in nb.cells if c.cell_type == "markdown")
    images = [m.group(2) for m in BADGE_IMAGE.finditer(first_md.source)]
    assert images == [badge_image(_rel(path))], f"{_rel(path)} 的徽章图片是 {images}；运行 make stamp-badges"
    assert (path.parent / images[0]).resolve() == (REPO_ROOT / badges.BADGE_FILE).resolve()
    assert (REPO_ROOT / badges.BADGE_FILE).read_text(encoding="utf-8").lstrip().startswith("<svg")


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=_rel)
def test_stored_kernelspec_is_the_installed_kernel(path):
    """存下的内核和 make lab 装的一模一样：否则 JupyterLab 一打开就改写它，自动保存后文件“被改了”。"""
    kernelspec = nbformat.read(path, as_version=4).metadata.get("kernelspec")
    assert kernelspec == KERNELSPEC, f"{_rel(path)} 的内核是 {kernelspec}，应该是 {KERNELSPEC}；运行 make stamp-badges"


def test_the_course_installs_the_kernel_the_notebooks_name():
    """Makefile（make lab）和 hub 的镜像装的内核，名字和显示名都是 KERNELSPEC 里的。"""
    want = f'--name {KERNELSPEC["name"]} --display-name "{KERNELSPEC["display_name"]}"'
    for installer in ("Makefile", "deploy/zero-to-jupyterhub/Dockerfile"):
        lines = [x for x in (REPO_ROOT / installer).read_text(encoding="utf-8").splitlines()
                 if "ipykernel install" in x]
        assert lines and all(want in x for x in lines), f"{installer} 装的内核应该是 {want}：{lines}"


def test_re_executing_a_page_keeps_the_installed_kernelspec(tmp_path):
    """lib.tools.run_notebooks 写回的 notebook 带着课程的内核，即使执行前是别的写法（例如维护者自己的 “Python 3 (ipykernel)”）。"""
    from lib.tools.run_notebooks import run
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1 + 1)")])
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    path = tmp_path / "page.ipynb"
    nbformat.write(nb, path)
    _, errors = run(path, timeout=60)
    stored = nbformat.read(path, as_version=4)
    assert errors == [] and stored.cells[0].outputs[0]["text"] == "2\n"
    assert stored.metadata["kernelspec"] == KERNELSPEC


def test_stamp_sets_the_kernelspec_that_regenerate_keeps():
    """regenerate 给生成的 release/、solutions/ 盖章（stamp）：盖章时内核换成课程的（nbgrader 从 source/ 照抄过来的也一样）。"""
    nb = _nb()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    stamp(nb, "release/exercises/01_attention_by_hand.ipynb")
    assert nb.metadata["kernelspec"] == KERNELSPEC
    assert stamp(nb, "release/exercises/01_attention_by_hand.ipynb") is False


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
    assert "(../assets/colab-badge.svg)" in nb.cells[0].source and "colab.research.google.com/assets" not in nb.cells[0].source
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
    untouched = _nb(md="# source 不盖徽章", code="print('source 的第一个代码单元格')")
    nbformat.write(untouched, tmp_path / "source" / "exercises" / "02_b.ipynb")

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
    source = nbformat.read(tmp_path / "source" / "exercises" / "02_b.ipynb", as_version=4)
    assert source.cells == untouched.cells  # source/ 只盖内核
    assert source.metadata["kernelspec"] == KERNELSPEC


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
