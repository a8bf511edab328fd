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
