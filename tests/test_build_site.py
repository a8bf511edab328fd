"""lib/tools/build_site.py 里不用浏览器、不用 Sphinx 就能查的部分（快）。整站在 tests/test_site.py 里构建和打开。"""
from __future__ import annotations

import json
import re

import pytest

from lib.tools import build_site


def _page(root, rel, markdown: str):
    src = root / rel
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": markdown}]}), encoding="utf-8")
    return src


def test_images_referenced_by_relative_path_are_copied_next_to_the_page(tmp_path):
    """notebook 里用相对路径引用的图片（比如放在仓库里的 Colab 徽章）照同样的相对位置复制到网站的源文件夹，
    网址和 data: 不管。"""
    root, build = tmp_path / "repo", tmp_path / "build"
    (root / "assets").mkdir(parents=True)
    (root / "assets" / "colab badge.svg").write_text("<svg/>", encoding="utf-8")
    (root / "notebooks" / "img").mkdir(parents=True)
    (root / "notebooks" / "img" / "plot.png").write_bytes(b"png")
    text = ("# 标题\n\n[![Open In Colab](../assets/colab%20badge.svg)](https://colab.research.google.com/x)\n"
            '<img src="img/plot.png" width="200"> ![远程](https://example.org/a.png) ![内嵌](data:image/png;base64,AA==)')
    src = _page(root, "notebooks/01.ipynb", text)
    copied = build_site.copy_relative_images(text, src, build / "notebooks" / "01.ipynb", root=root)
    assert sorted(p.relative_to(build).as_posix() for p in copied) == ["assets/colab badge.svg", "notebooks/img/plot.png"]
    assert (build / "assets" / "colab badge.svg").read_text(encoding="utf-8") == "<svg/>"


@pytest.mark.parametrize("ref", ["img/missing.png", "../../outside.png"])
def test_a_missing_or_outside_image_stops_the_build_with_its_path(tmp_path, ref):
    root = tmp_path / "repo"
    (tmp_path / "outside.png").write_bytes(b"png")
    src = _page(root, "notebooks/01.ipynb", f"![图]({ref})")
    with pytest.raises(SystemExit, match=re.escape(ref)):
        build_site.copy_relative_images(f"![图]({ref})", src, tmp_path / "build" / "notebooks" / "01.ipynb", root=root)



def test_guide_links_to_site_pages_stay_and_links_to_repository_files_go_to_github(tmp_path, monkeypatch):
    """Markdown 指南里：指向网站页面的相对链接（连同 #标题）不动；指向仓库里别的文件、文件夹的换成 GitHub 上的地址；
    代码里的 [x](y) 不是链接，不动；图片由 copy_relative_images 管。"""
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "deploy" / "hub").mkdir(parents=True)
    (root / "deploy" / "hub" / "config.py").write_text("", encoding="utf-8")
    (root / "notebooks").mkdir()
    (root / "notebooks" / "05_x.ipynb").write_text("{}", encoding="utf-8")
    src = root / "docs" / "guide.md"
    src.write_text("", encoding="utf-8")
    monkeypatch.setattr(build_site, "_course", lambda: {"repository": "https://github.com/o/r.git", "ref": "v1"})
    text = ("[页](../notebooks/05_x.ipynb#演示-1) [配置](../deploy/hub/config.py) [目录](../deploy/hub/) "
            "[外](https://example.org/a) [本页](#小节) ![图](../deploy/hub/config.py) `[代码](../nowhere.py)`\n"
            "```python\nx = a[0](1)\n```\n")
    pages = {(root / "notebooks" / "05_x.ipynb").resolve()}
    got = build_site.site_links(text, src, pages, root=root)
    assert "[页](../notebooks/05_x.ipynb#演示-1)" in got
    assert "[配置](https://github.com/o/r/blob/v1/deploy/hub/config.py)" in got
    assert "[目录](https://github.com/o/r/tree/v1/deploy/hub)" in got
    for unchanged in ("[外](https://example.org/a)", "[本页](#小节)", "![图](../deploy/hub/config.py)",
                      "`[代码](../nowhere.py)`", "x = a[0](1)"):
        assert unchanged in got, unchanged


def test_a_guide_link_to_a_missing_file_stops_the_build_with_its_page_and_target(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    src = root / "docs" / "guide.md"
    monkeypatch.setattr(build_site, "_course", lambda: {"repository": "https://github.com/o/r", "ref": "main"})
    with pytest.raises(SystemExit, match=r"docs/guide.md 的链接 \.\./gone\.md"):
        build_site.site_links("见[旧的一页](../gone.md)", src, set(), root=root)


def test_a_part_orders_its_pages_and_places_extra_pages_where_they_are_in_the_repository(tmp_path):
    (tmp_path / "docs").mkdir()
    for name in ("b.md", "a.md", "first.md"):
        (tmp_path / "docs" / name).write_text("# x\n", encoding="utf-8")
    (tmp_path / "CONTRIBUTING.md").write_text("# x\n", encoding="utf-8")
    part = build_site.Part("docs", "教师与助教", "", pattern="*.md", order=("first",), extra=("CONTRIBUTING.md",))
    assert [p.name for p in part.pages(tmp_path)] == ["first.md", "a.md", "b.md", "CONTRIBUTING.md"]
    assert part.toctree_names(tmp_path) == ["first", "a", "b", "../CONTRIBUTING"]


def test_the_guides_part_names_every_guide_in_its_order():
    """PARTS 里“教师与助教”的 order 只列 docs/ 里有的页（改了文件名忘了改这里，那一页会排到最后）。"""
    part = next(p for p in build_site.PARTS if p.folder == "docs")
    stems = {p.stem for p in (build_site.ROOT / "docs").glob("*.md")}
    assert set(part.order) == stems, f"lib/tools/build_site.py 的 PARTS 里 docs 的 order 和 docs/*.md 不一致：{sorted(set(part.order) ^ stems)}"
