"""lib/shipped.py：随仓库发布的训练结果按“算出它的代码”取用，代码一变就现场重算。"""
import json
import linecache
import re
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


def test_lib_fingerprint_covers_every_function_of_the_training_files(monkeypatch, tmp_path):
    """train_steps 这类 notebook 11 用不到、notebook 07、09 要用的函数也在指纹里：改了它的代码，指纹就变；
    只改它的文档字符串，指纹不变。"""
    import lib

    fake = tmp_path / "lib"
    fake.mkdir()
    for name in shipped.LIB_FILES:
        (fake / name).write_text((Path(lib.__file__).parent / name).read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(shipped, "__file__", str(fake / "shipped.py"))
    before = shipped.lib_fingerprint()
    path = fake / "transformer.py"
    original = path.read_text(encoding="utf-8")
    path.write_text(original.replace('"""', '"""（改过的文档字符串）', 1), encoding="utf-8")
    assert shipped.lib_fingerprint() == before
    path.write_text(original.replace("for step in range(steps):", "for step in range(steps - 1):", 1), encoding="utf-8")
    assert "range(steps - 1)" in path.read_text(encoding="utf-8") and shipped.lib_fingerprint() != before


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
    assert "这 1 次训练用的是课程预先训练好的结果（results.json；把 RETRAIN 改成 True" in results.describe()
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


MODEL_CELL = ("import torch\n\ndef train(seed):\n    torch.manual_seed(seed)\n    model = torch.nn.Linear(3, 2)\n"
              "    return {'state_dict': model.state_dict(), 'losses': [1.5, 0.5], 'pair': (torch.ones(2), 7)}\n")


def test_tensors_in_a_result_come_back_bit_for_bit_from_results_pt(tmp_path, monkeypatch):
    """训练好的模型（notebook 06、08）：state_dict 里的张量存进 results.pt，读回来一个比特都不差，类型和现场算的相同。"""
    fn = _define(MODEL_CELL)
    monkeypatch.setenv(shipped.WRITE_ENV, "1")
    written = ShippedResults("nb", directory=tmp_path).get(fn, 4)
    ShippedResults("nb", directory=tmp_path).get(fn, 5)  # 第二个结果：两个键的张量都留在文件里
    monkeypatch.delenv(shipped.WRITE_ENV)
    fresh = ShippedResults("nb", retrain=True, directory=tmp_path).get(fn, 4)  # 现场训练，不经过文件
    results = ShippedResults("nb", directory=tmp_path)
    read = results.get(fn, 4)
    assert "这 1 次训练用的是课程预先训练好的结果（results.json；把 RETRAIN 改成 True" in results.describe()
    for value in (written, fresh):
        assert read.keys() == value.keys() and read["losses"] == value["losses"] == [1.5, 0.5]
        assert all(torch.equal(read["state_dict"][k], value["state_dict"][k]) for k in value["state_dict"])
        assert isinstance(read["pair"], list) and torch.equal(read["pair"][0], value["pair"][0]) and read["pair"][1] == 7
    model = torch.nn.Linear(3, 2)
    model.load_state_dict(read["state_dict"])  # 能直接装回模型
    read["state_dict"]["weight"].zero_()  # 改了拿到的张量，存档不变
    assert torch.equal(results.get(fn, 4)["state_dict"]["weight"], written["state_dict"]["weight"])
    assert not torch.equal(results.get(fn, 5)["state_dict"]["weight"], written["state_dict"]["weight"])
    stored = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    names = {v["value"]["state_dict"]["weight"][shipped.TENSOR] for v in stored.values()}
    assert len(names) == 2 and names <= set(torch.load(tmp_path / "results.pt", weights_only=True))


def test_missing_or_broken_results_pt_retrains_instead_of_crashing(tmp_path, monkeypatch, capsys):
    fn = _define(MODEL_CELL)
    monkeypatch.setenv(shipped.WRITE_ENV, "1")
    written = ShippedResults("nb", directory=tmp_path).get(fn, 4)
    monkeypatch.delenv(shipped.WRITE_ENV)
    (tmp_path / "results.pt").write_bytes(b"not a zip")  # 下载不完整、被别的工具改坏
    results = ShippedResults("nb", directory=tmp_path)
    assert "读不了 results.pt" in capsys.readouterr().out
    again = results.get(fn, 4)  # 现场训练：同一台机器上和存档的一样
    assert torch.equal(again["state_dict"]["weight"], written["state_dict"]["weight"])
    assert "刚在这台机器上训练完（results.pt 缺失或读不了）" in results.describe()
    (tmp_path / "results.pt").unlink()  # 文件缺了：同样现场训练，并说出是哪个文件
    results = ShippedResults("nb", directory=tmp_path)
    assert "找不到 results.pt" in capsys.readouterr().out
    results.get(fn, 4)
    assert results.describe().startswith("1 次刚在这台机器上训练完（results.pt 缺失或读不了）")


SHIPPED_PAGES = ("06_multihead_attention", "07_transformer_block", "08_architectures", "09_training_details",
                 "12_modern_transformer")


@pytest.mark.parametrize("page", SHIPPED_PAGES)
def test_stored_outputs_say_the_results_are_the_shipped_ones(page):
    """存下的输出里，训练单元格的来源一行必须是“来自随仓库发布的”：改了训练单元格之后只运行 make notebooks
    （没有 make artifact），存下的就是“刚在这台机器上训练完”，nbval 拿它和自己比会通过，这里不会。"""
    nb = json.loads((shipped.REPO_ROOT / "notebooks" / f"{page}.ipynb").read_text(encoding="utf-8"))
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    assert "来自随仓库发布的" in text, page
    assert "刚在这台机器上训练完" not in text, f"{page}：存下的结果是现场训练的，请运行 make artifact 再提交"


def test_shipped_results_files_are_valid_and_small():
    paths = sorted(shipped.ARTIFACTS.glob("*/results.json"))
    assert {p.parent.name for p in paths} == {"06_multihead_attention", "07_transformer_block", "08_architectures",
                                              "09_training_details", "12_modern_transformer"}
    for path in paths:
        stored = json.loads(path.read_text(encoding="utf-8"))
        assert stored and all(set(v) == {"call", "lib", "value"} for v in stored.values()), path
        assert path.stat().st_size < 1_000_000, path
        tensors = path.with_suffix(".pt")
        if tensors.exists():  # 训练好的权重（06、08）：每个张量都有一个结果引用它
            names = set(torch.load(tensors, weights_only=True))
            used = set(re.findall(r'"%s": "([^"]+)"' % shipped.TENSOR, path.read_text(encoding="utf-8")))
            assert names == used and tensors.stat().st_size < 4_000_000, tensors


@pytest.mark.parametrize("page", SHIPPED_PAGES)
def test_shipped_results_were_made_with_this_lib(page):
    """每个结果记着写下它时 lib 的指纹（键里也有它）。改了 lib/ 里训练用到的文件（连注释也算），这页的结果就全部
    过期，nbval 要等执行到训练单元格才发现；这里几毫秒就说清楚原因和该做什么（指纹是四个文件合在一起的，说不出是哪一个）。"""
    stored = json.loads((shipped.ARTIFACTS / page / "results.json").read_text(encoding="utf-8"))
    made_with = {entry["lib"] for entry in stored.values()}
    now = shipped.lib_fingerprint()
    assert made_with == {now}, (
        f"{page}：lib/ 里训练用到的文件（{'、'.join(shipped.LIB_FILES)} 之一）改过了（指纹 {'、'.join(sorted(made_with))} → "
        f"{now}），随仓库发布的训练结果全部过期。请运行 {shipped.REGENERATE_ALL}")


def test_a_result_records_its_lib_and_an_edited_lib_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv(shipped.WRITE_ENV, "1")
    ShippedResults("nb", directory=tmp_path).get(_define(CELL), 3)
    entries = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert [e["lib"] for e in entries.values()] == [shipped.lib_fingerprint()]
    monkeypatch.setattr(shipped, "lib_fingerprint", lambda: "0123456789ab")  # 像改过了 lib/transformer.py
    with pytest.raises(AssertionError, match="0123456789ab.*make artifact"):
        test_shipped_results_were_made_with_this_lib(SHIPPED_PAGES[0])
