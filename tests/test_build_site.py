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

