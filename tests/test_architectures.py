"""notebook 08 演示 3、4 的结论在它没有展示的种子上也成立：在跑测试的这台机器上重新训练。

notebook 08 展示随仓库发布的 3 个倒序模型（lib/shipped.py，种子 0–2），“10 个种子”一节在种子 0–9 上各训练一个、
只存读数（`reverser_readings`）。这里执行 notebook 自己的单元格（导入、数据、训练函数、贪心解码、反对角线、
`reverser_readings`），用 notebook 的 `reverser_readings` 在种子 10 上训练一个，再执行 notebook 自己的结论单元格
（标签 seed-claims-reverser）：第 1 步的损失接近 ln 13、训练损失降到接近 0、贪心解码几乎整串全对、有一层交叉注意力
对准反对角线而另一层没有。对准的是哪一层是频率（不带标签的单元格），不在这里检查。
"""
import sys
from pathlib import Path

import nbformat
import pytest

from lib.shipped import ShippedResults

sys.path.insert(0, str(Path(__file__).resolve().parent))
from notebook_cells import notebook_namespace, run_cell, unseen_seeds  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "08_architectures.ipynb"
UNSEEN = unseen_seeds((10,))  # 页面展示种子 0–2 的模型，10 个种子的结论用 0–9


@pytest.fixture(scope="module")
def notebook():
    """notebook 的导入、数据、训练、解码、对齐和 10 个种子的单元格执行之后的命名空间（都取随仓库发布的结果，很快）。"""
    ns = notebook_namespace(NOTEBOOK, "from lib.shipped import ShippedResults", "def reverse_batch", "def train_reverser",
                            "def greedy_decode", "def anti_diagonal", "def reverser_readings")
    assert isinstance(ns["shipped"], ShippedResults)
    assert not set(UNSEEN) & (set(ns["SEEDS"]) | set(ns["SWEEP_SEEDS"]))
    return ns


def test_the_claim_cells_are_the_ones_this_test_runs():
    tags = {tag for cell in nbformat.read(NOTEBOOK, as_version=4).cells for tag in cell.metadata.get("tags", [])
            if tag.startswith("seed-claims-")}
    assert tags == {"seed-claims-reverser"}, f"notebook 08 的结论单元格变了（{sorted(tags)}）：请同步这个测试"


@pytest.mark.slow
def test_reverser_claims_hold_on_a_seed_the_notebook_does_not_show(notebook):
    ns = dict(notebook)
    ns["sweep"] = {seed: ns["reverser_readings"](seed) for seed in UNSEEN}  # 在这台机器上训练，用页面自己的函数读数
    print(ns["sweep"])
    run_cell(NOTEBOOK, ns, "seed-claims-reverser")
