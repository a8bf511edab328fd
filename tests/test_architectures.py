"""notebook 08 演示 3、4 的结论在它没有展示的种子上也成立：在跑测试的这台机器上重新训练。

notebook 08 展示的是随仓库发布的 3 个倒序模型（lib/shipped.py，种子 0–2）。这里执行 notebook 自己的单元格（导入、
数据、训练函数、贪心解码、反对角线），用 notebook 的训练函数在种子 3 上训练一个，再执行 notebook 自己的两个断言单元格：
训练损失降到接近 0、贪心解码几乎全对、一次前向和逐步生成一致；有一层交叉注意力对准反对角线，没训练过的模型没有。
"""
import sys
from pathlib import Path

import pytest

from lib.shipped import ShippedResults

sys.path.insert(0, str(Path(__file__).resolve().parent))
from notebook_cells import notebook_namespace, run_cell  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "08_architectures.ipynb"
UNSEEN_SEED = 3


@pytest.fixture(scope="module")
def notebook():
    """notebook 的导入、数据和训练单元格执行之后的命名空间（种子 0–2 取随仓库发布的结果，很快）。"""
    ns = notebook_namespace(NOTEBOOK, "from lib.shipped import ShippedResults", "def reverse_batch", "def train_reverser")
    assert isinstance(ns["shipped"], ShippedResults) and UNSEEN_SEED not in ns["SEEDS"]
    return ns


@pytest.mark.slow
def test_reverser_claims_hold_on_a_seed_the_notebook_does_not_show(notebook):
    ns = dict(notebook, SEEDS=(UNSEEN_SEED,))
    result = ns["train_reverser"](UNSEEN_SEED)
    model = ns["new_reverser"]()
    model.load_state_dict(result["state_dict"])
    ns["reversers"], ns["losses"] = {UNSEEN_SEED: model.eval()}, {UNSEEN_SEED: result["losses"]}
    run_cell(NOTEBOOK, ns, "def greedy_decode")  # 在 500 个没见过的串上解码（只有种子 3）
    print(ns["accuracy"])
    run_cell(NOTEBOOK, ns, "seed-claims-decoding")
    run_cell(NOTEBOOK, ns, "def anti_diagonal")
    print(ns["align"])
    run_cell(NOTEBOOK, ns, "seed-claims-alignment")
