"""lib/shipped.py：随仓库发布的训练结果按“算出它的代码”取用，代码一变就现场重算。"""
import json
import linecache
from pathlib import Path

import pytest
import torch

from lib import shipped
from lib.shipped import ShippedResults, result_key


def _define(source: str, name: str = "train"):
    """像 IPython 一样执行一个“单元格”：源码进 linecache，返回其中的函数。"""
    filename = f"<cell {abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = {"__name__": "__main__"}
    exec(compile(source, filename, "exec"), ns)
    return ns[name]


CELL = ("class Log:  # 记下训练函数被调用了几次（类只按源码进键，里面的列表变了不影响键）\n    calls = []\n\n"
        "def train(seed, steps=3):\n    Log.calls.append(seed)\n    return {'seed': seed, 'loss': [0.1 * steps, (1, 2)]}\n")


def test_key_follows_the_cell_the_arguments_and_lib(monkeypatch):
    fn = _define(CELL)
    key = result_key(fn, (1,), {"steps": 3})
    assert key == result_key(_define(CELL), (1,), {"steps": 3})  # 同样的单元格、同样的参数
    assert key != result_key(fn, (2,), {"steps": 3}) != result_key(fn, (1,), {"steps": 4})
    assert key != result_key(_define(CELL.replace("0.1", "0.2")), (1,), {"steps": 3})  # 改了函数
    assert key == result_key(_define(CELL + "\nOTHER = 1\n"), (1,), {"steps": 3})  # 函数不读的定义不算
    monkeypatch.setattr(shipped, "lib_fingerprint", lambda: "changed")
    assert key != result_key(fn, (1,), {"steps": 3})  # lib 里决定训练的代码变了


USES = "SCALE = {scale}\nDATA = [1, 2, 3]\n\ndef helper(x):\n    return x * SCALE\n\ndef train(seed):\n    return [helper(v) for v in DATA] + [seed]\n"


def test_key_follows_notebook_data_and_functions_the_function_reads():
    """在别的单元格里改了训练函数读到的数据或调用的函数（一层层往下追），键也要变。"""
    base = result_key(_define(USES.format(scale=2)), (0,))
    assert base == result_key(_define(USES.format(scale=2)), (0,))
    assert base != result_key(_define(USES.format(scale=3)), (0,))  # 推导式里经 helper 读到的 SCALE
    fn = _define(USES.format(scale=2))
    fn.__globals__["DATA"] = [1, 2, 4]  # 像在后面的单元格里重新赋值
    assert base != result_key(fn, (0,))
    fn = _define(USES.format(scale=2))
    exec("def helper(x):\n    return x + SCALE\n", fn.__globals__)  # 重新定义它调用的函数
    assert base != result_key(fn, (0,))


def test_attribute_names_are_not_globals():
    """函数里的 out.logits 不读全局的 logits：别的单元格定义了同名变量，键不变（notebook 09 就有一个 logits）。"""
    cell = "import types\n\ndef train(seed):\n    out = types.SimpleNamespace(logits=[seed])\n    return out.logits\n"
    fn = _define(cell)
    before = result_key(fn, (0,))
    fn.__globals__["logits"] = [1, 2, 3]
    assert result_key(fn, (0,)) == before


def test_lib_fingerprint_covers_every_line_of_the_training_files(monkeypatch, tmp_path):
    """train_steps 这类 notebook 11 用不到、notebook 07、09 要用的函数也在指纹里：四个文件的每一行都算。"""
    import lib

    fake = tmp_path / "lib"
    fake.mkdir()
    for name in shipped.LIB_FILES:
        (fake / name).write_text((Path(lib.__file__).parent / name).read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(shipped, "__file__", str(fake / "shipped.py"))
    before = shipped.lib_fingerprint()
    path = fake / "transformer.py"
    path.write_text(path.read_text(encoding="utf-8").replace("def train_steps(", "def train_steps(  ", 1), encoding="utf-8")
    assert "def train_steps(  " in path.read_text(encoding="utf-8") and shipped.lib_fingerprint() != before


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
    assert fn.__globals__["Log"].calls == [5]
    monkeypatch.delenv(shipped.WRITE_ENV)
    results = ShippedResults("nb", directory=tmp_path)
    assert results.get(fn, 5) == written == {"seed": 5, "loss": [0.30000000000000004, [1, 2]]}  # 元组经 JSON 成列表
    assert fn.__globals__["Log"].calls == [5]  # 第二次没有训练
    assert "1 次训练的结果来自随仓库发布的" in results.describe()
    assert results.describe() == "还没有取任何结果"  # describe() 之后重新计数
    assert json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))  # 合法的 JSON


def test_changed_code_and_retrain_train_again_and_say_so(tmp_path, monkeypatch):
    monkeypatch.setenv(shipped.WRITE_ENV, "1")
    ShippedResults("nb", directory=tmp_path).get(_define(CELL), 1)
    monkeypatch.delenv(shipped.WRITE_ENV)
    changed = _define(CELL.replace("0.1", "0.5"))
    results = ShippedResults("nb", directory=tmp_path)
    assert results.get(changed, 1)["loss"][0] == 1.5 and changed.__globals__["Log"].calls == [1]
    assert results.describe().startswith("1 次刚在这台机器上训练完（代码、数据或参数和随仓库发布时不同）；页面文字里引用的数字")
    same = _define(CELL)
    again = ShippedResults("nb", retrain=True, directory=tmp_path)
    again.get(same, 1)
    assert same.__globals__["Log"].calls == [1] and "刚在这台机器上训练完（RETRAIN = True）" in again.describe()
    assert len(json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))) == 1  # 只有写模式才写文件


def test_shipped_results_files_are_valid_and_small():
    paths = sorted(shipped.ARTIFACTS.glob("*/results.json"))
    assert {p.parent.name for p in paths} == {"07_transformer_block", "09_training_details", "12_modern_transformer"}
    for path in paths:
        stored = json.loads(path.read_text(encoding="utf-8"))
        assert stored and all(set(v) == {"call", "value"} for v in stored.values()), path
        assert path.stat().st_size < 1_000_000, path
