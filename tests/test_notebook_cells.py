"""tests/notebook_cells.py：在没有展示的种子上执行页面的结论单元格时，找对单元格，找不到或没有断言就说清楚。"""
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from notebook_cells import run_cell  # noqa: E402


def _notebook(tmp_path, *cells):
    """cells：(源码, 标签列表) 组成的 notebook 文件。"""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source, metadata={"tags": tags}) for source, tags in cells]
    path = tmp_path / "page.ipynb"
    nbformat.write(nb, path)
    return path


def test_claim_cell_is_found_by_its_tag_and_an_edited_bound_is_checked(tmp_path):
    path = _notebook(tmp_path, ("x = 3", []), ("%matplotlib inline\nassert x > 2, '界限'", ["seed-claims-x"]))
    ns = {}
    run_cell(path, ns, "x = 3")
    run_cell(path, ns, "seed-claims-x")  # 行魔法换成注释，断言照常执行
    ns["x"] = 1
    with pytest.raises(AssertionError, match="界限"):
        run_cell(path, ns, "seed-claims-x")


def test_a_claims_table_counts_as_a_check(tmp_path):
    """结论单元格也可以用 lib.claims 的 check(...)：一条不成立就 AssertionError，写明是哪一条。"""
    cell = "from lib.claims import always, check\ncheck(always('每个种子都大于 2', xs, low=2))"
    path = _notebook(tmp_path, (cell, ["seed-claims-x"]))
    run_cell(path, {"xs": [3, 4]}, "seed-claims-x")
    with pytest.raises(AssertionError, match="每个种子都大于 2"):
        run_cell(path, {"xs": [3, 1]}, "seed-claims-x")


@pytest.mark.parametrize("source", ["x = 1  # we no longer assert anything", "print('assert x > 0')",
                                    "print('check(x)')"])
def test_a_tagged_cell_without_an_assert_statement_is_refused(tmp_path, source):
    path = _notebook(tmp_path, (source, ["seed-claims-x"]))
    with pytest.raises(AssertionError, match="没有 assert 语句.*check"):
        run_cell(path, {}, "seed-claims-x")


def test_a_missing_or_doubled_tag_is_refused(tmp_path):
    path = _notebook(tmp_path, ("assert True", ["seed-claims-x"]), ("assert True", ["seed-claims-x"]))
    with pytest.raises(AssertionError, match="应该只有一个"):
        run_cell(path, {}, "seed-claims-x")
    with pytest.raises(AssertionError, match="找不到"):
        run_cell(path, {}, "seed-claims-y")


def test_unseen_seeds_come_from_the_environment_or_the_test(monkeypatch):
    """COURSE_UNSEEN_SEEDS 换掉测试默认的种子（"10-14"、"10,12"）；页面上的种子 0–9 不许用。"""
    from notebook_cells import UNSEEN_ENV, unseen_seeds
    monkeypatch.delenv(UNSEEN_ENV, raising=False)
    assert unseen_seeds((10,)) == (10,)
    monkeypatch.setenv(UNSEEN_ENV, "10-14")
    assert unseen_seeds((10,)) == (10, 11, 12, 13, 14)
    monkeypatch.setenv(UNSEEN_ENV, "10, 12,15-16")
    assert unseen_seeds((10,)) == (10, 12, 15, 16)
    monkeypatch.setenv(UNSEEN_ENV, "9-11")
    with pytest.raises(ValueError, match="从 10 开始"):
        unseen_seeds((10,))
