"""随仓库发布的训练结果：notebook 06、07、08、09、12 里耗时的训练，结果按“算出它的代码”存档（issue 24）。

notebook 里的训练函数照常写在单元格里、学生照常读和改；调用时经过 ``ShippedResults.get``：

    results = ShippedResults("07_transformer_block", retrain=RETRAIN)
    runs = [results.get(run, variant, seed) for variant in VARIANTS for seed in SEEDS]
    print(results.describe())

每个结果的键是下面这些内容的 SHA-256：训练函数的源码；它读到的、在 notebook 里定义的数据（按内容）和函数
（按源码，再往下追）；调用的参数（列表、张量按内容）；lib 里训练用到的四个文件（``LIB_FILES``）。源码都按代码指纹
（lib/fingerprint.py）算：注释、文档字符串、排版不算，改了它们结果不过期。文件
``artifacts/<notebook>/results.json`` 里有这个键就直接用（在维护者的机器上算出的数，一个比特都不差；结果里的
张量，例如训练好的模型的 ``state_dict()``，存在旁边的 ``results.pt`` 里）；
没有（改了单元格、改了参数、改了 lib）或 ``retrain=True`` 就在这台机器上现场训练。所以：

- 改了代码、没有重新生成，notebook 打印的来源会变成“刚训练完”，nbval 核对这一行时失败；
- 不追踪的：别的单元格改了 torch 的全局状态（如 ``torch.set_default_dtype``），以及不认识的对象的内容（只记类型）；
- 结论在别的机器上是否成立，由 tests/ 在 notebook 没有展示的种子上重新训练来检查。

重新生成：``make artifact``（以 ``COURSE_WRITE_RESULTS=1`` 执行 notebook：每个结果都现场训练并写进文件）。
"""
from __future__ import annotations

import copy
import dataclasses
import dis
import hashlib
import inspect
import json
import os
import re
from pathlib import Path

import torch

from .fingerprint import code_fingerprint, code_text

REPO_ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO_ROOT / "artifacts"
WRITE_ENV = "COURSE_WRITE_RESULTS"  # =1：每个结果都现场训练，写进 results.json（make artifact 用）
RETRAIN_ENV = "COURSE_RETRAIN"  # =1：每一页都像 RETRAIN = True 一样现场训练，不写文件（lib/tools/sweep_report.py 用）
TENSOR = "__tensor__"  # results.json 里张量的占位 {"__tensor__": 名字}；张量本身按名字存在 results.pt 里


LIB_FILES = ("transformer.py", "rnn.py", "toy_language.py", "toy_tasks.py")  # notebook 里的训练用到的 lib 文件
# 随仓库发布的结果（这里的和 notebook 11 的权重）过期时，维护者该做的（测试和 nbval 的失败提示都用这一句）
REGENERATE_ALL = ("make artifact（重新训练 notebook 06–09、12 的结果和过期的 notebook 11 权重，再重新执行这些 notebook；"
                  "2 核上约 15–40 分钟），再提交 artifacts/ 和 notebooks/")


def lib_sources() -> list[str]:
    """lib 里训练用到的文件（LIB_FILES）的源码。每次都重新读：改了 lib 立刻生效。"""
    here = Path(__file__).resolve().parent
    return [(here / name).read_text(encoding="utf-8") for name in LIB_FILES]


def lib_fingerprint() -> str:
    """lib 里训练用到的文件的代码指纹（lib/fingerprint.py：注释、文档字符串和排版不算）。"""
    return code_fingerprint(*lib_sources())


def _code_names(code) -> set:
    """一段代码（连同其中的推导式、lambda、内部函数）读的全局名字（不含属性名：.logits 不是全局的 logits）。"""
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _code_names(const)
    return names


def _dependencies(fn, seen: set) -> dict:
    """fn 读到的、在 notebook 里定义的东西：数据按内容，函数和类按源码（再往下追它们读到的）。
    模块和别处（lib、torch……）定义的函数不算：lib 由 lib_fingerprint() 管。"""
    out = {}
    for name in sorted(_code_names(fn.__code__)):
        if name in seen or name not in fn.__globals__:
            continue
        seen.add(name)
        value = fn.__globals__[name]
        if inspect.ismodule(value):
            continue
        if inspect.isfunction(value) or inspect.isclass(value):
            if getattr(value, "__module__", None) == "__main__":  # 在 notebook 里定义的
                try:
                    out[name] = {"source": code_text(value)}
                except (OSError, TypeError):  # Python 3.11 读不到 notebook 里定义的类的源码
                    out[name] = {"class": value.__qualname__}
                if inspect.isfunction(value):
                    out[name]["uses"] = _dependencies(value, seen)
            continue
        try:
            out[name] = _canonical(value)
        except TypeError:
            out[name] = {"type": f"{type(value).__module__}.{type(value).__qualname__}"}  # 不认识的对象：只记类型
    return out


def _canonical(value):
    """参数的可哈希形式：张量按内容（形状、类型、数值的哈希），列表、元组、字典逐项。"""
    if isinstance(value, torch.Tensor):
        data = value.detach().cpu().contiguous()
        return {"tensor": [list(data.shape), str(data.dtype), hashlib.sha256(data.numpy().tobytes()).hexdigest()]}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"dataclass": type(value).__name__, "fields": _canonical(dataclasses.asdict(value))}
    raise TypeError(f"训练函数的参数只能是数、字符串、列表、字典或张量，收到了 {type(value).__name__}")


def _describe_call(fn, args, kwargs) -> str:
    """给人看的一次调用，如 train_setting('post', 150, 0, <4800 项>, <500 项>)。"""
    def short(v):
        if isinstance(v, torch.Tensor):
            return f"<张量 {tuple(v.shape)}>"
        return f"<{len(v)} 项>" if isinstance(v, (list, tuple, dict)) and len(v) > 8 else repr(v)
    parts = [short(a) for a in args] + [f"{k}={short(v)}" for k, v in (kwargs or {}).items()]
    return f"{fn.__name__}({', '.join(parts)})"


def result_key(fn, args=(), kwargs=None) -> str:
    """一个结果的键（前 16 位）：fn 的源码、fn 读到的 notebook 里的数据和函数、参数、lib 的指纹。"""
    text = json.dumps({"fn": fn.__name__, "source": code_text(fn), "uses": _dependencies(fn, {fn.__name__}),
                       "args": _canonical(list(args)), "kwargs": _canonical(kwargs or {}),
                       "lib": lib_fingerprint()}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _split(value, key: str, tensors: dict):
    """value 里的张量换成占位 {TENSOR: "键/编号"}，张量（CPU 上的副本）放进 tensors；其余原样（之后经过 JSON）。"""
    if isinstance(value, torch.Tensor):
        name = f"{key}/{len(tensors)}"
        tensors[name] = value.detach().cpu().clone()
        return {TENSOR: name}
    if isinstance(value, dict):
        return {k: _split(v, key, tensors) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_split(v, key, tensors) for v in value]
    return value


def _join(value, tensors: dict):
    """_split 的逆：占位换回张量（每次给一份新的副本，改它不影响存档）。"""
    if isinstance(value, dict):
        if set(value) == {TENSOR}:
            return tensors[value[TENSOR]].clone()
        return {k: _join(v, tensors) for k, v in value.items()}
    if isinstance(value, list):
        return [_join(v, tensors) for v in value]
    return value


class ShippedResults:
    """一个 notebook 的随仓库发布的训练结果（artifacts/<notebook>/results.json，张量在 results.pt）。"""

    def __init__(self, notebook: str, retrain: bool = False, directory: Path | None = None):
        self.path = Path(directory or ARTIFACTS / notebook) / "results.json"
        self.tensor_path = self.path.with_suffix(".pt")
        self.retrain = bool(retrain) or os.environ.get(RETRAIN_ENV) == "1"
        self.write = os.environ.get(WRITE_ENV) == "1"
        self.stored = json.loads(self.path.read_text(encoding="utf-8")) if self.path.exists() else {}
        self.tensors = self._load_tensors()
        self.counts = {"shipped": 0, "trained": 0}

    def _load_tensors(self) -> dict:
        """results.pt 里的张量；文件缺了或坏了就当作没有（用到它的结果现场训练），并说明原因。"""
        self.tensors_broken = False
        if not self.tensor_path.exists():
            if TENSOR in json.dumps(self.stored):
                self.tensors_broken = True
                print(f"找不到 {self.tensor_path.name}，用到其中权重的训练会在这台机器上重做", flush=True)
            return {}
        try:
            return torch.load(self.tensor_path, weights_only=True)
        except Exception as exc:  # noqa: BLE001  截断、不是 torch 的文件……：不让整页停下
            self.tensors_broken = True
            print(f"读不了 {self.tensor_path.name}（{type(exc).__name__}），用到其中权重的训练会在这台机器上重做", flush=True)
            return {}

    def _has(self, key: str) -> bool:
        """文件里有这个键，而且它引用的张量都在 results.pt 里。"""
        if key not in self.stored:
            return False
        names = re.findall(r'"%s": "([^"]+)"' % TENSOR, json.dumps(self.stored[key]["value"]))
        return all(name in self.tensors for name in names)

    def get(self, fn, *args, **kwargs):
        """fn(*args, **kwargs) 的结果：文件里有同样的代码、同样的参数算出的结果就直接用，否则现场算。
        结果由数、字符串、列表、字典和张量组成（例如 {"state_dict": model.state_dict(), "losses": [...]}）；
        现场算的结果也经过一次 JSON（元组变成列表），两条路给出同样的类型和同样的比特。"""
        key = result_key(fn, args, kwargs)
        if not (self.retrain or self.write) and self._has(key):
            self.counts["shipped"] += 1
            return _join(copy.deepcopy(self.stored[key]["value"]), self.tensors)
        if not os.environ.get("CI"):  # 现场训练要几十秒：告诉学生在做什么（CI 里安静，和进度条一样）
            print(f"在这台机器上训练 {_describe_call(fn, args, kwargs)} ……", flush=True)
        tensors: dict = {}
        value = json.loads(json.dumps(_split(fn(*args, **kwargs), key, tensors)))
        self.counts["trained"] += 1
        if self.write:  # "lib"：写下时 lib 的指纹（键里也有它），快速测试据此发现 lib 改过、结果过期
            self._save(key, {"call": _describe_call(fn, args, kwargs), "lib": lib_fingerprint(), "value": value}, tensors)
        return _join(value, tensors)

    def _save(self, key: str, entry: dict, tensors: dict) -> None:
        self.stored[key] = entry
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lines = [f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in sorted(self.stored.items())]
        self.path.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")  # 一个结果一行
        self.tensors = {n: t for n, t in self.tensors.items() if n.split("/")[0] in self.stored and
                        not n.startswith(key + "/")} | tensors  # 这个键的旧张量换成新的
        if self.tensors:
            torch.save(dict(sorted(self.tensors.items())), self.tensor_path)

    def describe(self) -> str:
        """一行话：上次 describe() 之后取的结果从哪里来（然后重新计数）。"""
        n, self.counts = self.counts, {"shipped": 0, "trained": 0}
        try:
            where = self.path.relative_to(REPO_ROOT)
        except ValueError:
            where = self.path
        parts = []
        if n["shipped"]:
            parts.append(f"这 {n['shipped']} 次训练用的是课程预先训练好的结果（{where.name}；"
                         "把 RETRAIN 改成 True 就在你的机器上重新训练）")
        if n["trained"]:
            why = ("RETRAIN = True" if self.retrain else f"{WRITE_ENV}=1：重新生成随仓库发布的结果" if self.write
                   else f"{self.tensor_path.name} 缺失或读不了" if self.tensors_broken
                   else "代码、数据或参数和随仓库发布时不同")
            parts.append(f"{n['trained']} 次刚在这台机器上训练完（{why}）")
            if not self.write:
                parts.append("页面文字里引用的数字来自随仓库发布的那次训练，你这里的表可能不同")
        return "；".join(parts) or "还没有取任何结果"
