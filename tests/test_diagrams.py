"""lib/diagrams.py：每个结构图函数都返回一张 Figure，图上没有中文（figure 只用英文和数学符号）。"""
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure

from lib import diagrams

CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")


@pytest.mark.parametrize("name", ["transformer_block_figure", "multihead_figure", "architectures_figure"])
def test_figure_draws_without_cjk_text(name, tmp_path):
    fig = getattr(diagrams, name)()
    assert isinstance(fig, Figure)
    texts = [t.get_text() for t in fig.findobj(matplotlib.text.Text)]
    assert sum(len(t.strip()) > 0 for t in texts) >= 5, "图上应当有标注"
    assert not [t for t in texts if CJK.search(t)], "图上的文字只用英文和数学符号"
    fig.savefig(tmp_path / f"{name}.png")  # 真的渲染一遍：数学公式写错会在这里报错
    plt.close(fig)


def test_multihead_figure_follows_its_arguments():
    fig = diagrams.multihead_figure(d=8, n_heads=2)
    texts = " ".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))
    assert "h = 2" in texts and "head 2" in texts and "head 3" not in texts
    plt.close(fig)


def test_multihead_figure_projection_label_clears_the_boxes_and_heads_count_from_one():
    from matplotlib.patches import Rectangle

    fig = diagrams.multihead_figure(d=12, n_heads=3)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    label = next(t for t in ax.texts if "W^Q" in t.get_text()).get_window_extent(renderer)
    boxes = [p for p in ax.patches if isinstance(p, Rectangle) and not p.get_fill()]
    assert boxes and not [p for p in boxes if p.get_window_extent(renderer).overlaps(label)], "W^Q, W^K, W^V 的标注不压在方框上"
    heads = [t.get_text() for t in ax.texts if t.get_text().startswith("head ") and ":" in t.get_text()]
    assert [h.split(":")[0] for h in heads] == ["head 1", "head 2", "head 3"]
    assert all(f"Q_{i}" in h and f"V_{i}" in h for i, h in enumerate(heads, start=1)), "公式里的下标和头的编号一致"
    # 每个头的输出都有一支箭头（头的颜色）进 concat，concat 上方标着每几列是哪个头
    from matplotlib.text import Annotation
    colors = diagrams.HEAD_COLORS[:3]
    into_concat = [t for t in ax.texts if isinstance(t, Annotation) and t.arrow_patch is not None
                   and t.arrowprops.get("color") in colors]
    assert sorted(t.arrowprops["color"] for t in into_concat) == sorted(colors), "三个头各有一支箭头进 concat"
    assert [t.get_text() for t in ax.texts if t.get_text() in ("head 1", "head 2", "head 3")] == ["head 1", "head 2", "head 3"]
    plt.close(fig)
