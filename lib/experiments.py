"""§11 的实验机器：训练设定、权重从哪里来、多进程训练。训练一步做什么、怎样测注意力，写在 notebook 11 的页面上。

- ``RunSpec`` / ``arm_spec``：一次训练的全部设定；notebook 11 的各组（``ARMS``、RNN、对照组 ``learned_4mod``）。
- **随仓库发布的权重**（``ARTIFACT_DIR``，每组一个 float32 文件）：notebook 11 默认评估它们。清单里每个模型的键是
  “完整设定 + 代码指纹”的哈希（``artifact_key``、``code_fingerprint``）：改了模型、训练循环或数据生成器，键就
  对不上，notebook 改为重新训练，tests/test_experiments.py 的快速测试失败，直到运行
  ``make artifact``（它也重新生成 notebook 06–12 的结果；只要这 21 个模型：``python -m lib.experiments --write-artifact``）。
- ``load_or_train`` / ``run_many``：训练，或从本机缓存 ``.cache/experiments/``（git 忽略，键里还有设备和 torch
  版本）取回；CPU 上几次训练用几个进程同时跑。同一台机器上逐位可重复；换一台机器或 GPU，权重就不同。
测量（主谓一致、注意力统计、困惑度下限）在 lib/agreement.py。
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from . import fingerprint
from . import toy_language as toy
# 练习 10 和旧代码用 ex.agreement_table(...) 这样的写法：测量函数在 lib/agreement.py，这里转一手
from .agreement import (AGREEMENT_MODIFIERS, LENGTH_MODIFIERS, agreement_accuracy, agreement_table,  # noqa: F401
                        evaluate_run, moving_average, subject_attention)
from .rnn import RNNLM
from .shipped import REGENERATE_ALL, RETRAIN_ENV, lib_sources
from .transformer import TransformerConfig, TransformerLM, count_parameters, train_lm

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE_DIR = REPO_ROOT / ".cache" / "experiments"
CACHE_FORMAT = 1


# --- 一次训练的设定和缓存的键 ------------------------------------
@dataclass(frozen=True)
class RunSpec:
    """一次训练的全部设定，默认值就是 §11.1 的迷你 GPT。model："gpt" 或 "rnn"（第 5 讲的 RNNLM）；
    model_args：TransformerConfig 的覆盖项，如 (("pos", "rope"),)；seed：初始化和打乱顺序的种子。"""

    model: str = "gpt"
    model_args: tuple = ()
    seed: int = 0
    data_seed: int = 0
    n_train: int = 20000
    n_dev: int = 2000
    n_test: int = 2000
    modifier_probs: tuple = toy.DEFAULT_MODIFIER_PROBS
    epochs: int = 8
    batch_size: int = 64
    max_lr: float = 3e-3
    warmup_steps: int = 200
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    label: str = field(default="", compare=False)  # 只用于显示，不进缓存的键

    def __post_init__(self):
        # 列表、字典也接受，统一成元组（冻结的 dataclass 要可哈希）
        args = self.model_args.items() if isinstance(self.model_args, dict) else self.model_args
        object.__setattr__(self, "model_args", tuple(tuple(pair) for pair in args))
        object.__setattr__(self, "modifier_probs", tuple(self.modifier_probs))
        if self.model not in ("gpt", "rnn"):
            raise ValueError(f"未知的模型 {self.model!r}：可选 'gpt'（迷你 GPT）或 'rnn'（第 5 讲的 RNN）")
        if self.model == "rnn" and self.model_args:
            raise ValueError("RNN 没有可以覆盖的设定：model_args 请留空")
        TransformerConfig(**dict(self.model_args))  # 设定有误时在这里就报错，而不是训练到一半

    @property
    def steps(self) -> int:
        return self.epochs * math.ceil(self.n_train / self.batch_size)

    @property
    def name(self) -> str:
        return self.label or f"{self.model} {dict(self.model_args)} seed={self.seed}"

    def to_dict(self) -> dict:
        """可以写进 JSON 的设定（不含 label）：缓存和发布的权重的键都是它加代码指纹的哈希。"""
        d = asdict(self)
        d.pop("label")
        d["model_args"] = sorted([k, v] for k, v in self.model_args)
        d["modifier_probs"] = list(self.modifier_probs)
        return d


def gpt_spec(pos: str = "learned", seed: int = 0, model_args=(), **changes) -> RunSpec:
    """§11 的迷你 GPT，位置编码为 pos；model_args 如 (("n_layers", 1),)，changes 如 modifier_probs=(0.6, 0.4)。"""
    extra = tuple(model_args.items() if isinstance(model_args, dict) else model_args)
    label = f"GPT pos={pos} seed={seed}" + "".join(f" {k}={v}" for k, v in extra)
    return RunSpec(model="gpt", model_args=(("pos", pos),) + extra, seed=seed, label=label, **changes)


def replace_spec(spec: RunSpec, **changes) -> RunSpec:
    """复制一份设定，只改 changes 里的字段，例如 replace_spec(spec, modifier_probs=(0.6, 0.4))（练习 10）。"""
    return replace(spec, **changes)


def rnn_spec(seed: int = 0, **changes) -> RunSpec:
    """第 5 讲的 RNN 语言模型，训练设定和迷你 GPT 完全相同。"""
    return RunSpec(model="rnn", seed=seed, label=f"RNN seed={seed}", **changes)


@functools.lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """决定训练结果的代码的指纹（lib/fingerprint.py：注释、文档字符串和排版不算）：lib 里训练用到的四个文件
    （lib/shipped.py 的 LIB_FILES，notebook 06–09、12 的结果也按它们存档），加上本文件里建模型、取数据、训练的
    四个函数。和 Python、torch 的版本无关；每个进程只算一次。"""
    return fingerprint.code_fingerprint(*lib_sources(), build_model, splits_for, _standard_splits, train_run)


def default_device() -> torch.device:
    """训练用的设备：有 CUDA（例如 Colab 的 GPU 运行时）就用 GPU，否则用 CPU。"""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _device(device=None) -> torch.device:
    return torch.device(device) if device is not None else default_device()


def _kernels(device) -> str:
    """CPU 上用的是哪一套向量化的计算核（AVX512、AVX2……，可以用环境变量 ATEN_CPU_CAPABILITY 和
    MKL_ENABLE_INSTRUCTIONS 换）：换一套就是换了浮点运算的顺序，和换一台 CPU 一样，训练出的权重不同。"""
    if device.type != "cpu":
        return device.type
    return f"{torch.backends.cpu.get_cpu_capability()}/{os.environ.get('MKL_ENABLE_INSTRUCTIONS', '')}"


def cache_key(spec: RunSpec, device=None) -> str:
    """本机缓存的键：完整设定 + 代码指纹 + 缓存格式 + torch 版本 + 训练设备类型和 CPU 的计算核（各存各的）。"""
    device = _device(device)
    payload = {"spec": spec.to_dict(), "code": code_fingerprint(), "format": CACHE_FORMAT,
               "torch": torch.__version__, "device": device.type, "kernels": _kernels(device)}
    text = json.dumps(payload, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --- 训练、缓存 --------------------------------------------------
def build_model(spec: RunSpec) -> torch.nn.Module:
    """按设定建一个新模型。先按 seed 设随机种子：同一个 seed 同一份初始权重。"""
    torch.manual_seed(spec.seed)
    if spec.model == "rnn":
        return RNNLM(vocab_size=toy.VOCAB_SIZE)
    return TransformerLM(TransformerConfig(vocab_size=toy.VOCAB_SIZE, **dict(spec.model_args)))


@functools.lru_cache(maxsize=4)
def _standard_splits(data_seed, n_train, n_dev, n_test, modifier_probs):
    return toy.standard_splits(seed=data_seed, n_train=n_train, n_dev=n_dev, n_test=n_test,
                               modifier_probs=modifier_probs)


def splits_for(spec: RunSpec):
    """这次训练用的 (训练, 开发, 测试) 词元序列（只读）。同一份数据在一个进程里只生成一次：§11 的模型都用它。"""
    return _standard_splits(spec.data_seed, spec.n_train, spec.n_dev, spec.n_test, spec.modifier_probs)


def train_run(spec: RunSpec, progress: bool = True, device=None):
    """从头训练一次（CPU 上单线程；device 默认 default_device()）：返回 (CPU 上的模型, history)。

    初始权重在 CPU 上按 seed 生成、打乱顺序也由 CPU 上的生成器决定，所以 GPU 和 CPU 从同一个起点、
    按同样的顺序训练，只是浮点运算的细节不同。history 多一项 "seconds"（训练用时）。
    """
    device = _device(device)
    train, dev, _ = splits_for(spec)
    model = build_model(spec).to(device)
    start = time.perf_counter()
    history = train_lm(model, train, pad_id=toy.PAD_ID, epochs=spec.epochs, batch_size=spec.batch_size,
                       max_lr=spec.max_lr, warmup_steps=spec.warmup_steps, weight_decay=spec.weight_decay,
                       grad_clip=spec.grad_clip, dev_seqs=dev, seed=spec.seed, threads=1,
                       progress=progress, desc=spec.name)
    history["seconds"] = time.perf_counter() - start
    return model.cpu(), history  # 分析都在 CPU 上做（模型很小）


@dataclass
class RunResult:
    """一次训练的结果：模型（eval 模式，在 CPU 上）、history（每步 loss、学习率，每轮开发集困惑度）。"""

    spec: RunSpec
    model: torch.nn.Module
    history: dict
    from_cache: bool
    key: str
    device: str = "cpu"  # 在哪种设备上训练的
    source: str = "trained"  # "artifact"（随仓库发布）、"cache"（本机缓存）或 "trained"（刚训练完）


def _cache_path(spec: RunSpec, cache_dir, device) -> Path:
    return Path(cache_dir) / f"{cache_key(spec, device)}.pt"


def save_run(spec: RunSpec, state_dict: dict, history: dict, cache_dir=DEFAULT_CACHE_DIR,
             device=None) -> Path | None:
    """把权重和 history 写进缓存（先写临时文件再改名：中途被打断也不会留下半个文件）。"""
    path = _cache_path(spec, cache_dir, device)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"spec": spec.to_dict(), "state_dict": state_dict, "history": history}, tmp)
        os.replace(tmp, path)
    except OSError as err:  # 只读的目录等：不缓存也能继续，只是下次要重新训练
        print(f"没能写入缓存 {path}（{err}）：结果照常使用，下次运行会重新训练。")
        return None
    return path


def load_run(spec: RunSpec, cache_dir=DEFAULT_CACHE_DIR, device=None) -> RunResult | None:
    """从缓存里取回在 device（默认 default_device()）上训练的那一次；没有（或文件损坏）时返回 None。"""
    device = _device(device)
    try:
        blob = torch.load(_cache_path(spec, cache_dir, device), map_location="cpu", weights_only=True)
    except Exception:  # 没有或损坏的缓存文件：当作没有，重新训练
        return None
    if blob.get("spec") != spec.to_dict():
        return None
    (model := build_model(spec)).load_state_dict(blob["state_dict"])
    return RunResult(spec, model.eval(), blob["history"], True, cache_key(spec, device), device.type, "cache")


def load_or_train(spec: RunSpec, cache_dir=DEFAULT_CACHE_DIR, use_cache: bool = True,
                  progress: bool = True, device=None) -> RunResult:
    """有缓存就取回，没有就在本进程里训练（并写进缓存）。device 默认 default_device()。"""
    device = _device(device)
    if use_cache and (hit := load_run(spec, cache_dir, device)) is not None:
        return hit
    model, history = train_run(spec, progress, device)
    if use_cache:
        save_run(spec, model.state_dict(), history, cache_dir, device)
    return RunResult(spec, model, history, False, cache_key(spec, device), device.type)


# --- 多进程：每个进程单线程地训练一次 ------------------------------------------------
def _worker_train(spec: RunSpec, device):
    """子进程里训练一次（1 个线程，不显示进度条），返回 (state_dict, history)。"""
    torch.set_num_threads(1)  # 一个进程一个核：小模型单线程最快，两个进程也不抢核
    model, history = train_run(spec, progress=False, device=device)
    return model.state_dict(), history


def run_many(specs, cache_dir=DEFAULT_CACHE_DIR, use_cache: bool = True, workers: int = 2,
             progress: bool = True, desc: str = "training", device=None) -> list[RunResult]:
    """训练（或从本机缓存取回）一组互相独立的设定，按 specs 的顺序返回。CPU 上缺的那几次用 workers 个子进程
    （spawn，每个 1 个线程）同时训练，进度条按完成的模型数走（CI 里安静）；GPU 上在本进程里一个接一个地训练。"""
    from .transformer import _progress

    device = _device(device)
    specs = list(specs)
    results: list[RunResult | None] = [load_run(s, cache_dir, device) if use_cache else None for s in specs]
    missing = [i for i, r in enumerate(results) if r is None]
    workers = 1 if device.type != "cpu" else max(1, min(workers, len(missing), os.cpu_count() or 1))
    if missing and workers == 1:
        for i in missing:
            results[i] = load_or_train(specs[i], cache_dir, use_cache=use_cache, progress=progress, device=device)
    elif missing:
        bar = _progress(range(len(missing)), len(missing), f"{desc} ({len(missing)} runs, {workers} processes)",
                        progress)
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_worker_train, specs[i], device): i for i in missing}
            for fut in as_completed(futures):
                i = futures[fut]
                state_dict, history = fut.result()  # 子进程里的异常在这里重新抛出
                if use_cache:
                    save_run(specs[i], state_dict, history, cache_dir, device)
                (model := build_model(specs[i])).load_state_dict(state_dict)
                results[i] = RunResult(specs[i], model.eval(), history, False, cache_key(specs[i], device), device.type)
                bar.update(1)
        bar.close()
    return results


def describe_sources(results, readings: dict | None = None) -> str:
    """一句话：这些模型（和 sweep_readings 的读数，readings 是它返回的来源计数）从哪里来。"""
    n = {s: sum(r.source == s for r in results) for s in ("artifact", "cache", "trained")}
    readings = readings or {"shipped": 0, "trained": 0}
    seconds = sum(r.history.get("seconds", 0.0) for r in results if r.source == "trained")
    parts = []
    if readings["shipped"] or n["artifact"]:
        what = "、".join(x for x in (f"{readings['shipped']} 个模型的读数" if readings["shipped"] else "",
                                     f"{n['artifact']} 个模型的权重" if n["artifact"] else "") if x)
        parts.append(f"这页用的 {what}是课程预先训练好的（{ARTIFACT_DIR.relative_to(REPO_ROOT)}/；"
                     "把 RETRAIN 改成 True 就在你的机器上重新训练）")
    if n["cache"]:
        parts.append(f"{n['cache']} 个模型从本机缓存 .cache/experiments/ 取回")
    if n["trained"] or readings["trained"]:
        parts.append(f"{n['trained'] + readings['trained']} 个模型刚在这台机器上训练完"
                     + (f"（各次训练的用时相加 {seconds:.0f} s）" if n["trained"] else ""))
    return "；".join(parts)


def parameter_count(spec: RunSpec) -> int:
    """这个设定的模型有多少参数（§11.1：迷你 GPT 109,248，RNN 33,455）。"""
    return count_parameters(build_model(spec))


# --- notebook 11 的各组实验 --------------------------

# 正弦编码每个位置向量长 sqrt(d/2) ≈ 5.7，初始化时的词向量约 0.02·sqrt(d) = 0.16：乘这个系数之后编码每一维的
# 均方根是 0.02，和初始化时的词向量、可学习的位置嵌入一样大（§5.1、§11.3）
PE_SCALE_MATCHED = 0.02 * math.sqrt(2)
# §11.3 的各组（名字 → 在 §11 的迷你 GPT 上改的设定）：讲义的四种位置编码，加上缩小了的正弦编码
ARMS = {
    "learned": (("pos", "learned"),),
    "sinusoidal": (("pos", "sinusoidal"),),
    "sinusoidal_small": (("pos", "sinusoidal"), ("pe_scale", PE_SCALE_MATCHED)),
    "rope": (("pos", "rope"),),
    "none": (("pos", "none"),),
}
# 对照组（演示 3）：训练句最多 4 个修饰语（4 个的占 1/11），主动词在训练中也在位置 16–19 被预测；别的都不变
CONTROL_MODIFIER_PROBS = (0.4, 0.3, 0.2, 0.1, 0.1)
# 只在 10 个种子的汇总里（没有随仓库发布的权重）：加了 dropout 的迷你 GPT（讲义代码 04 的 train_gpt 用 dropout），
# 和缩到中间大小的正弦编码（位置向量长约 0.8，和训练后的词向量一样长）
PE_SCALE_MID = 5 * PE_SCALE_MATCHED
# §11.3 的设定搜索（lib/tools/position_search.py）里找到的两组：RoPE 的 base 从 10000（讲义 §5.4 的公式）换成 100、10。
# base 10 时每个 16 维的头的 8 个角速度 10^(-2i/16) = 10000^(-2i/64)，正是 d = 64 的正弦编码最快的 8 个频率。
SWEEP_ONLY_ARMS = {
    "learned_dropout": (("pos", "learned"), ("dropout", 0.1)),
    "sinusoidal_mid": (("pos", "sinusoidal"), ("pe_scale", PE_SCALE_MID)),
    "rope_base100": (("pos", "rope"), ("rope_base", 100.0)),
    "rope_base10": (("pos", "rope"), ("rope_base", 10.0)),
}
ARM_NAMES = {"learned": "可学习的位置嵌入", "sinusoidal": "正弦编码", "sinusoidal_small": "正弦编码 × 0.028",
             "rope": "RoPE，base 10000", "none": "无位置信息", "rnn": "RNN", "learned_4mod": "可学习的位置嵌入，训练句到 4 个修饰语",
             "learned_dropout": "可学习的位置嵌入，dropout 0.1", "sinusoidal_mid": "正弦编码 × 0.14",
             "rope_base100": "RoPE，base 100", "rope_base10": "RoPE，base 10"}
NOTEBOOK_SEEDS = (0, 1, 2)  # notebook 11 里逐题、逐句地看的模型：它们的权重随仓库发布
NOTEBOOK_ARMS = ("learned", "rnn", "none", "learned_4mod")  # 这几组在 notebook 11 里要用到模型本身
# 另外随仓库发布的模型：§11.4 的图里唯一有偏向干扰名词的头的种子（按 sweep.json 的读数选出）；§11.3 里拿掉
# RoPE 的几个平面再测主谓一致的那个 base 100 的模型
EXTRA_NOTEBOOK_RUNS = (("learned", 4), ("rope_base100", 0))
SWEEP_SEEDS = tuple(range(10))  # 10 个种子的汇总：每组每个种子的全部读数（结论按它们检查）
SWEEP_ARMS = (*ARMS, "rnn", "learned_4mod", *SWEEP_ONLY_ARMS)


def notebook_keys() -> list[tuple[str, int]]:
    """notebook 11 要用到模型本身的 (组, 种子)：它们的权重随仓库发布。"""
    return [(arm, seed) for arm in NOTEBOOK_ARMS for seed in NOTEBOOK_SEEDS] + list(EXTRA_NOTEBOOK_RUNS)


def arm_spec(arm: str, seed: int) -> RunSpec:
    """一组实验（ARMS、SWEEP_ONLY_ARMS 的名字、"rnn" 或对照组 "learned_4mod"）在一个种子上的设定。"""
    if arm == "rnn":
        return rnn_spec(seed)
    if arm == "learned_4mod":
        return replace(gpt_spec("learned", seed, modifier_probs=CONTROL_MODIFIER_PROBS), label=f"{arm} seed={seed}")
    (_, pos), *extra = ARMS[arm] if arm in ARMS else SWEEP_ONLY_ARMS[arm]
    return replace(gpt_spec(pos, seed, model_args=tuple(extra)), label=f"{arm} seed={seed}")


# --- 随仓库发布的权重 --------------------------------------------

ARTIFACT_DIR = REPO_ROOT / "artifacts" / "11_mini_gpt"
REGENERATE = "python -m lib.experiments --write-artifact"  # 只重新生成这 21 个模型（清单里记着这条命令）


def artifact_key(spec: RunSpec) -> str:
    """发布的权重的键：完整设定 + 代码指纹的 SHA-256（前 16 位）。不含设备和 torch 版本：权重在哪里都能评估。"""
    text = json.dumps({"spec": spec.to_dict(), "code": code_fingerprint()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_manifest(directory=ARTIFACT_DIR) -> dict | None:
    path = Path(directory) / "manifest.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


@functools.lru_cache(maxsize=16)
def _artifact_file(path: str, sha256: str) -> dict | None:
    """一个权重文件的内容（每个进程只读一次）；文件缺失、损坏或和清单里的 SHA-256 不符时为 None。"""
    try:
        return torch.load(path, map_location="cpu", weights_only=True) if _sha256(path) == sha256 else None
    except Exception:
        return None


def load_artifact(spec: RunSpec, directory=ARTIFACT_DIR) -> RunResult | None:
    """发布的权重里这个设定的模型；没有（代码或设定变了、文件缺失或不符）时返回 None。"""
    manifest, key = read_manifest(directory), artifact_key(spec)
    entry = (manifest or {}).get("runs", {}).get(key)
    if entry is None or manifest.get("code_fingerprint") != code_fingerprint():
        return None
    blob = _artifact_file(str(Path(directory) / entry["file"]), manifest["files"][entry["file"]]["sha256"])
    run = (blob or {}).get(key)
    if run is None:
        return None
    (model := build_model(spec)).load_state_dict(run["state_dict"])
    history = {"loss": run["loss"].tolist(), "lr": run["lr"].tolist(), "dev_ppl": run["dev_ppl"], "seconds": run["seconds"]}
    return RunResult(spec, model.eval(), history, True, key, manifest["trained_on"]["device"], "artifact")


def artifact_problems(directory=ARTIFACT_DIR) -> list[str]:
    """发布的权重和现在的代码对不上的地方，一条一句；空列表表示 notebook 11 的模型全部可用。"""
    manifest = read_manifest(directory)
    if manifest is None:
        return [f"没有找到 {directory}/manifest.json：请运行 {REGENERATE_ALL}"]
    old, now = manifest.get("code_fingerprint"), code_fingerprint()
    if old != now:  # 一条就够：指纹一变，每个模型都过期
        return [f"训练代码或数据生成器改过了（代码指纹 {old} → {now}）：随仓库发布的 {len(manifest.get('runs', {}))} 个"
                f"模型全部过期。请运行 {REGENERATE_ALL}"]
    return [f"{arm} 种子 {seed}：发布的权重里没有这个设定，或文件和清单不符（请运行 {REGENERATE_ALL}）"
            for arm, seed in notebook_keys() if load_artifact(arm_spec(arm, seed), directory) is None]


def notebook_runs(keys, retrain: bool = False, workers: int = 2, progress: bool = True, desc: str = "training",
                  directory=None, cache_dir=DEFAULT_CACHE_DIR) -> dict:
    """{(组, 种子): RunResult}。默认用发布的权重（directory 默认 ARTIFACT_DIR）；retrain=True、或发布的权重对不上
    现在的代码时训练（本机缓存里有就取回，见 run_many）。"""
    retrain = retrain or os.environ.get(RETRAIN_ENV) == "1"
    out = {} if retrain else {key: load_artifact(arm_spec(*key), directory or ARTIFACT_DIR) for key in keys}
    missing = [key for key in keys if out.get(key) is None]
    if missing:
        out.update(zip(missing, run_many([arm_spec(*key) for key in missing], cache_dir, workers=workers,
                                         progress=progress, desc=desc)))
    return {key: out[key] for key in keys}


def write_artifact(directory=ARTIFACT_DIR, workers: int = 2, device="cpu", cache_dir=DEFAULT_CACHE_DIR) -> dict:
    """notebook 11 的全部模型（notebook_keys()），每组写一个文件（float32 权重 + history），再写清单。

    已经发布、键还对得上的模型照原样留下（键里有代码指纹：代码一改就全部重新训练）；一个文件里的模型都没变时，
    文件本身也不重写。其余的训练（或从本机缓存取回）。"""
    directory = Path(directory)
    keys = notebook_keys()
    old = read_manifest(directory) or {}
    results = {key: load_artifact(arm_spec(*key), directory) for key in keys}
    missing = [key for key in keys if results[key] is None]
    results.update(zip(missing, run_many([arm_spec(*key) for key in missing], cache_dir, workers=workers,
                                         device=device, desc="notebook 11 artifact")))
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {"format": 1, "code_fingerprint": code_fingerprint(), "regenerate": REGENERATE,
                "trained_on": old.get("trained_on") if not missing else
                {"device": torch.device(device).type, "torch": torch.__version__, "python": sys.version.split()[0]},
                "files": {}, "runs": {}}
    for arm in dict.fromkeys(arm for arm, _ in keys):
        runs = {artifact_key(results[a, seed].spec): (seed, results[a, seed]) for a, seed in keys if a == arm}
        path = directory / f"{arm}.pt"
        unchanged = (path.name in old.get("files", {}) and all(results[arm, seed].source == "artifact" for seed, _ in runs.values())
                     and {k for k, e in old.get("runs", {}).items() if e["file"] == path.name} == set(runs))
        if not unchanged:
            torch.save({key: _artifact_entry(r) for key, (_, r) in runs.items()}, path)
        manifest["files"][path.name] = {"sha256": _sha256(path), "bytes": path.stat().st_size}
        manifest["runs"].update({key: {"arm": arm, "seed": seed, "file": path.name} for key, (seed, _) in runs.items()})
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    _artifact_file.cache_clear()
    return manifest


def _artifact_entry(r: RunResult) -> dict:
    return {"spec": r.spec.to_dict(), "state_dict": {k: v.float() for k, v in r.model.state_dict().items()},
            "loss": torch.tensor(r.history["loss"], dtype=torch.float32),
            "lr": torch.tensor(r.history["lr"], dtype=torch.float64),
            "dev_ppl": list(r.history["dev_ppl"]), "seconds": float(r.history["seconds"])}


# --- 10 个种子的汇总：每组每个种子的全部读数（不存权重，只存 evaluate_run 读出的数） ------------------

SWEEP_FILE = ARTIFACT_DIR / "sweep.json"
REGENERATE_SWEEP = "python -m lib.experiments --write-sweep"


def readings_fingerprint() -> str:
    """读数的键里还有算读数的代码（lib/agreement.py）：测量改了，读数就过期，权重不过期。"""
    return fingerprint.code_fingerprint((Path(__file__).resolve().parent / "agreement.py").read_text(encoding="utf-8"))


def sweep_key(spec: RunSpec) -> str:
    """一个读数的键：发布的权重的键（设定 + 训练代码）加上测量代码的指纹。"""
    text = json.dumps({"run": artifact_key(spec), "readings": readings_fingerprint()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _to_json(x):
    """读数 → 能写进 JSON 的形式（张量、元组、整数作键的字典都做了记号，读回时还原，见 _from_json）。"""
    if isinstance(x, torch.Tensor):
        return {"tensor": x.tolist()}
    if isinstance(x, tuple):
        return {"tuple": [_to_json(v) for v in x]}
    if isinstance(x, dict):
        if x and all(isinstance(k, int) for k in x):
            return {"int_keys": [[k, _to_json(v)] for k, v in x.items()]}
        return {k: _to_json(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_to_json(v) for v in x]
    return x


def _from_json(x):
    if isinstance(x, dict):
        if set(x) == {"tensor"}:
            return torch.tensor(x["tensor"])
        if set(x) == {"tuple"}:
            return tuple(_from_json(v) for v in x["tuple"])
        if set(x) == {"int_keys"}:
            return {k: _from_json(v) for k, v in x["int_keys"]}
        return {k: _from_json(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_from_json(v) for v in x]
    return x


def _worker_readings(spec: RunSpec, cache_dir, use_cache: bool, device, shipped_ok: bool = False) -> tuple[dict, str]:
    """子进程里：读出一个模型的 evaluate_run 的全部读数（1 个线程），和模型从哪里来。shipped_ok 时，权重随仓库发布的
    模型（notebook_keys()）就读那份权重：页面上看的模型和表里的读数是同一个；否则训练（或从本机缓存取回）。"""
    torch.set_num_threads(1)
    run = load_artifact(spec) if shipped_ok else None
    run = run or load_or_train(spec, cache_dir, use_cache=use_cache, progress=False, device=device)
    return _to_json(evaluate_run(run)), run.source


def sweep_readings(arms=None, seeds=None, retrain: bool = False, workers: int = 2,
                   path=SWEEP_FILE, cache_dir=DEFAULT_CACHE_DIR, use_cache: bool = True, progress: bool = True):
    """{(组, 种子): evaluate_run 的读数}，以及来源 {"shipped": 取自 path 的个数, "trained": 刚训练、读数的个数}
    （给 describe_sources；arms、seeds 默认 SWEEP_ARMS、SWEEP_SEEDS）。
    默认取随仓库发布的 sweep.json（键对得上的）；
    retrain=True（或环境变量 COURSE_RETRAIN=1）、或键对不上时在这台机器上训练并读数（workers 个进程）。"""
    from .transformer import _progress

    retrain = retrain or os.environ.get(RETRAIN_ENV) == "1"
    arms, seeds = arms or SWEEP_ARMS, seeds or SWEEP_SEEDS
    stored = json.loads(Path(path).read_text(encoding="utf-8")).get("runs", {}) if Path(path).exists() else {}
    keys = [(arm, seed) for arm in arms for seed in seeds]
    specs = {key: arm_spec(*key) for key in keys}
    out = {} if retrain else {key: _from_json(stored[sweep_key(specs[key])]["readings"])
                              for key in keys if sweep_key(specs[key]) in stored}
    missing = [key for key in keys if key not in out]
    device, trained = default_device(), 0
    if missing:
        bar = _progress(range(len(missing)), len(missing), f"10-seed sweep ({len(missing)} runs)", progress)
        with ProcessPoolExecutor(max(1, min(workers, len(missing))), mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_worker_readings, specs[key], cache_dir, use_cache, device, not retrain): key
                       for key in missing}
            for fut in as_completed(futures):
                reading, where = fut.result()
                out[futures[fut]] = _from_json(reading)
                trained += where != "artifact"
                bar.update(1)
        bar.close()
    return {key: out[key] for key in keys}, {"shipped": len(keys) - trained, "trained": trained}


def write_sweep(path=SWEEP_FILE, workers: int = 2, use_cache: bool = True, cache_dir=DEFAULT_CACHE_DIR) -> dict:
    """SWEEP_ARMS × SWEEP_SEEDS 的读数，写出 sweep.json（每个模型一行）。path 里键还对得上的读数照原样留下
    （键里有训练和测量代码的指纹）；其余的训练（或从本机缓存取回）、读数。use_cache=False：全部重新训练、读数。"""
    readings, _ = sweep_readings(retrain=not use_cache, workers=workers, path=path, cache_dir=cache_dir,
                                 use_cache=use_cache)
    runs = {sweep_key(arm_spec(*key)): {"arm": key[0], "seed": key[1], "readings": _to_json(r)}
            for key, r in readings.items()}
    head = {"format": 1, "code_fingerprint": code_fingerprint(), "readings_fingerprint": readings_fingerprint(),
            "regenerate": REGENERATE_SWEEP, "trained_on": {"device": default_device().type, "torch": torch.__version__,
                                                           "kernels": _kernels(default_device())}}
    lines = [f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in sorted(runs.items())]
    text = "{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()) + \
        ',\n"runs": {\n' + ",\n".join(lines) + "\n}\n}\n"
    Path(path).write_text(text, encoding="utf-8")
    return readings


def sweep_problems(path=SWEEP_FILE) -> list[str]:
    """随仓库发布的 10 个种子的读数和现在的代码对不上的地方；空列表表示全部可用。"""
    if not Path(path).exists():
        return [f"没有找到 {Path(path).name}：请运行 {REGENERATE_ALL}"]
    stored = json.loads(Path(path).read_text(encoding="utf-8")).get("runs", {})
    stale = [key for key in ((a, s) for a in SWEEP_ARMS for s in SWEEP_SEEDS) if sweep_key(arm_spec(*key)) not in stored]
    if stale:
        return [f"{len(stale)} 个读数过期（训练代码或 lib/agreement.py 改过了，或者多了组、种子）：请运行 {REGENERATE_ALL}"]
    return []


def main(argv=None) -> int:
    from lib import experiments  # 用 python -m 运行时本文件是 __main__：子进程要认得同一个模块

    parser = argparse.ArgumentParser(prog="python -m lib.experiments", description="notebook 11 随仓库发布的权重：检查；"
                                     "--write-artifact 时先训练（或从本机缓存取回）全部模型，重新写出")
    parser.add_argument("--write-artifact", action="store_true", help=f"重新生成 {ARTIFACT_DIR.relative_to(REPO_ROOT)}/")
    parser.add_argument("--write-sweep", action="store_true", help="重新生成 10 个种子的读数（sweep.json）")
    parser.add_argument("--output", help="--write-sweep 写到这个文件（默认 artifacts/11_mini_gpt/sweep.json）")
    parser.add_argument("--no-cache", action="store_true", help="不用本机缓存（每个模型都重新训练）")
    parser.add_argument("--workers", type=int, default=2, help="同时训练的进程数（每个进程 1 个线程）")
    args = parser.parse_args(argv)
    if args.write_artifact:
        experiments.write_artifact(workers=args.workers)
    if args.write_sweep:
        experiments.write_sweep(Path(args.output) if args.output else experiments.SWEEP_FILE, workers=args.workers,
                                use_cache=not args.no_cache)
        if args.output:
            return 0
    problems = experiments.artifact_problems() + experiments.sweep_problems()
    print("\n".join(problems) or f"发布的权重和现在的代码一致（代码指纹 {experiments.code_fingerprint()}）。")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
