"""notebook 12 演示 7 的结论在它没有展示的种子上也成立：在跑测试的这台机器上重新训练。

notebook 12 展示的是随仓库发布的结果（lib/shipped.py，种子 0–9）。这里执行 notebook 自己的单元格（导入、两组零件、
训练函数），用 notebook 的训练函数在种子 10 上训练两组零件，再执行 notebook 自己的结论单元格（标签 seed-claims-modern，
每个种子都该成立的：都学到了东西；同一个种子上两组只差一点；RMSNorm + SwiGLU 起步慢、之后两条曲线基本重合）。
“RMSNorm + SwiGLU 更差”是频率（不带标签的单元格），不在这里检查。
"""
import contextlib
import io
import sys
from pathlib import Path

import nbformat
import pytest

from lib.shipped import ShippedResults

sys.path.insert(0, str(Path(__file__).resolve().parent))
from notebook_cells import notebook_namespace, run_cell, unseen_seeds  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "12_modern_transformer.ipynb"
UNSEEN = unseen_seeds((10,))


@pytest.fixture(scope="module")
def notebook():
    """notebook 的导入、两组零件和训练单元格执行之后的命名空间（种子 0–9 取随仓库发布的结果，很快）。"""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        ns = notebook_namespace(NOTEBOOK, "from lib.shipped import ShippedResults", "best_d_ff =", "def train_variant")
    assert isinstance(ns["shipped"], ShippedResults) and not set(UNSEEN) & set(ns["SEEDS"])
    assert "刚在这台机器上训练完" not in printed.getvalue(), \
        f"notebook 12 的训练单元格没有用上随仓库发布的结果：请运行 make artifact\n{printed.getvalue()}"
    return ns


def test_the_claim_cells_are_the_ones_this_test_runs():
    tags = {tag for cell in nbformat.read(NOTEBOOK, as_version=4).cells for tag in cell.metadata.get("tags", [])
            if tag.startswith("seed-claims-")}
    assert tags == {"seed-claims-modern"}, f"notebook 12 的结论单元格变了（{sorted(tags)}）：请同步这个测试"


@pytest.mark.slow
def test_modern_parts_claims_hold_on_a_seed_the_notebook_does_not_show(notebook):
    ns = dict(notebook, SEEDS=UNSEEN)
    results = {(name, seed): ns["train_variant"](ns["PARTS"][name], seed, ns["train"], ns["test"])
               for name in ns["configs"] for seed in UNSEEN}
    ns["test_ppl"] = {key: r["test_ppl"] for key, r in results.items()}
    ns["losses"] = {key: r["loss"] for key, r in results.items()}
    print({key: round(v, 3) for key, v in ns["test_ppl"].items()})
    run_cell(NOTEBOOK, ns, "seed-claims-modern")
