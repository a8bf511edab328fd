"""lib/shipped.py：随仓库发布的训练结果按“算出它的代码”取用，代码一变就现场重算。"""
import json
import linecache

import pytest
import torch

from lib import shipped
from lib.shipped import ShippedResults, result_key


def _define(source: str, name: str = "train"):
    """像 IPython 一样执行一个“单元格”：源码进 linecache，返回其中的函数。"""
    filename = f"<cell {abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = {}
    exec(compile(source, filename, "exec"), ns)
    return ns[name]


CELL = "calls = []\n\ndef train(seed, steps=3):\n    calls.append(seed)\n    return {'seed': seed, 'loss': [0.1 * steps, (1, 2)]}\n"


def test_key_follows_the_cell_the_arguments_and_lib(monkeypatch):
    fn = _define(CELL)
    key = result_key(fn, (1,), {"steps": 3})
    assert key == result_key(_define(CELL), (1,), {"steps": 3})  # 同样的单元格、同样的参数
    assert key != result_key(fn, (2,), {"steps": 3}) != result_key(fn, (1,), {"steps": 4})
    assert key != result_key(_define(CELL.replace("0.1", "0.2")), (1,), {"steps": 3})  # 改了单元格的任何一处
    assert key != result_key(_define(CELL + "\nOTHER = 1\n"), (1,), {"steps": 3})  # 同一个单元格里的别的定义也算
    monkeypatch.setattr(shipped, "lib_fingerprint", lambda: "changed")
    assert key != result_key(fn, (1,), {"steps": 3})  # lib 里决定训练的代码变了


def test_tensors_are_keyed_by_content_and_other_objects_are_refused():
    fn = _define(CELL)
    a = torch.arange(6).view(2, 3)
    assert result_key(fn, (a,)) == result_key(fn, (a.clone(),)) != result_key(fn, (a + 1,))
    assert result_key(fn, ([[1, 2], [3]],)) != result_key(fn, ([[1, 2], [4]],))
    with pytest.raises(TypeError, match="参数只能是"):
        result_key(fn, (object(),))


def test_write_then_read_gives_the_same_values_without_training(tmp_path, monkeypatch):
    fn = _define(CELL)
    monkeypatch.setenv(shipped.WRITE_ENV, "1")
    written = ShippedResults("nb", directory=tmp_path).get(fn, 5)
    assert fn.__globals__["calls"] == [5]
    monkeypatch.delenv(shipped.WRITE_ENV)
    results = ShippedResults("nb", directory=tmp_path)
    assert results.get(fn, 5) == written == {"seed": 5, "loss": [0.30000000000000004, [1, 2]]}  # 元组经 JSON 成列表
    assert fn.__globals__["calls"] == [5]  # 第二次没有训练
    assert "1 次训练的结果来自随仓库发布的" in results.describe()
    assert results.describe() == "还没有取任何结果"  # describe() 之后重新计数
    assert json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))  # 合法的 JSON


def test_changed_code_and_retrain_train_again_and_say_so(tmp_path, monkeypatch):
    monkeypatch.setenv(shipped.WRITE_ENV, "1")
    ShippedResults("nb", directory=tmp_path).get(_define(CELL), 1)
    monkeypatch.delenv(shipped.WRITE_ENV)
    changed = _define(CELL.replace("0.1", "0.5"))
    results = ShippedResults("nb", directory=tmp_path)
    assert results.get(changed, 1)["loss"][0] == 1.5 and changed.__globals__["calls"] == [1]
    assert results.describe() == "1 次刚在这台机器上训练完"
    same = _define(CELL)
    again = ShippedResults("nb", retrain=True, directory=tmp_path)
    again.get(same, 1)
    assert same.__globals__["calls"] == [1] and "刚在这台机器上训练完" in again.describe()
    assert len(json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))) == 1  # 只有写模式才写文件


def test_shipped_results_files_are_valid_and_small():
    paths = sorted(shipped.ARTIFACTS.glob("*/results.json"))
    assert {p.parent.name for p in paths} == {"07_transformer_block", "09_training_details", "12_modern_transformer"}
    for path in paths:
        stored = json.loads(path.read_text(encoding="utf-8"))
        assert stored and all(set(v) == {"call", "value"} for v in stored.values()), path
        assert path.stat().st_size < 1_000_000, path
