"""§11 的实验：迷你 GPT vs RNN（讲义代码 04、05 对应的部分）。

notebook 11 只调用这里的函数，模型和训练循环都来自 lib/transformer.py、lib/rnn.py：

- ``RunSpec``：一次训练的全部设定（模型、位置编码、随机种子、数据、优化器）。
- ``load_or_train`` / ``run_many``：训练，或者从缓存里取回训练好的权重。
  缓存放在仓库根目录下被 git 忽略的 ``.cache/experiments/``，文件名是设定的哈希
  （``cache_key``）：设定、随机种子、数据、训练设备（CPU / GPU）、或者 lib 里模型与训练的代码，
  任何一样变了，哈希就变，就会重新训练。全新的克隆（CI、Colab）里没有缓存，一切从头训练。
  有 CUDA 时在 GPU 上训练（``default_device``），取回的模型一律在 CPU 上。
  CPU 上互相独立的几次训练可以用几个进程同时跑（每个进程 1 个线程）：同一台机器上，
  结果和在本进程里训练逐位相同；换一台机器（或 GPU）训练出的权重不同。
- ``language_perplexity``：这门玩具语言本身的困惑度（用生成句子的真实概率算），
  是任何模型在同一份数据上的困惑度“下限”（§11.1）。
- ``agreement_accuracy`` / ``agreement_table``：主谓一致准确率（§11.2、§11.3）。
- ``subject_attention`` / ``example_attention``：在预测主动词的位置，每个头分给主语、
  干扰名词的注意力权重（§11.4）。
- ``ARMS`` / ``arm_spec`` / ``evaluate_run``：notebook 11 的各组实验（包括去掉尺度混杂的正弦编码）
  和每个模型的全部读数；``*_claims`` / ``check_claims``：notebook 11 的结论，每一条对所有种子检查。
  tests/test_experiments.py 在 notebook 没有展示的种子上检查同一批结论。
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
import multiprocessing
import os
import queue as queue_module
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from . import toy_language as toy
from .rnn import RNNLM
from .transformer import TransformerConfig, TransformerLM, count_parameters, evaluate_perplexity, train_lm
from .viz import Table

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE_DIR = REPO_ROOT / ".cache" / "experiments"
CACHE_FORMAT = 1
# lib/transformer.py 里和训练结果无关的名字（公式、计数、生成、教学用的逐词循环……）：
# 改它们不让缓存失效。其余每个函数和类的源码都进代码指纹（见 code_fingerprint）。
_NOT_TRAINING = {"block_param_formula", "lm_param_formula", "count_parameters", "generate",
                 "self_attention_loop", "layer_norm", "sinusoidal_shift_matrix", "EncoderDecoder",
                 "pad_mask_from_tokens", "_progress"}

# §11.2 的修饰语个数；§11.3 测到 10 个
AGREEMENT_MODIFIERS = (0, 1, 2, 3, 4, 6, 8)
LENGTH_MODIFIERS = (0, 1, 2, 3, 4, 6, 8, 10)


# ----------------------------------------------------------------------------
# 一次训练的设定和缓存的键
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSpec:
    """一次训练的全部设定。默认值就是 §11.1 的迷你 GPT（讲义代码 04）。

    model: "gpt"（TransformerLM）或 "rnn"（第 5 讲的 RNNLM）。
    model_args: 传给 TransformerConfig 的覆盖项，例如 (("pos", "rope"),)；写成元组是为了可哈希。
    data_*: 数据（toy_language.standard_splits 的参数）；seed: 模型初始化和打乱顺序的种子。
    """

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
        """总训练步数 = 轮数 × 每轮的批数。"""
        return self.epochs * math.ceil(self.n_train / self.batch_size)

    @property
    def name(self) -> str:
        return self.label or f"{self.model} {dict(self.model_args)} seed={self.seed}"

    def to_dict(self) -> dict:
        """可以写进 JSON 的设定（不含 label）：缓存的键就是它（加代码指纹）的哈希。"""
        d = asdict(self)
        d.pop("label")
        d["model_args"] = sorted([k, v] for k, v in self.model_args)
        d["modifier_probs"] = list(self.modifier_probs)
        return d


def gpt_spec(pos: str = "learned", seed: int = 0, model_args=(), **changes) -> RunSpec:
    """§11 的迷你 GPT（d=64，4 头，2 层，Pre-LN，权重共享），位置编码为 pos。

    model_args 里可以再覆盖 TransformerConfig 的其他设定，例如 (("n_layers", 1),)（练习 10(b)）；
    changes 是 RunSpec 的其他字段，例如 modifier_probs=(0.6, 0.4)（练习 10(d)）。
    """
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
    """决定训练结果的代码的哈希（前 12 位）。

    包括：lib/transformer.py 里除 _NOT_TRAINING 以外每个函数和类的源码，lib/rnn.py 和
    lib/toy_language.py 整个文件，以及本文件里建模型、取数据、训练的几个函数。
    所以改了模型或训练循环，缓存自动失效；只改参数公式、生成函数或本文件的分析函数则不会。
    每个进程只算一次：运行中途有人改了文件，这次运行的键也不变。
    """
    from . import transformer

    h = hashlib.sha256()
    for name, obj in sorted(vars(transformer).items()):
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == transformer.__name__ \
                and name not in _NOT_TRAINING:
            h.update(name.encode())
            h.update(inspect.getsource(obj).encode())
    for name in ("rnn.py", "toy_language.py"):
        h.update((Path(__file__).resolve().parent / name).read_bytes())
    for fn in (build_model, splits_for, _standard_splits, train_run):  # RunSpec 的字段已经全在 to_dict() 里
        h.update(inspect.getsource(fn).encode())
    return h.hexdigest()[:12]


def default_device() -> torch.device:
    """训练用的设备：有 CUDA（例如 Colab 的 GPU 运行时）就用 GPU，否则用 CPU。"""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _device(device=None) -> torch.device:
    """参数 device 的统一处理：None 表示 default_device()，其余交给 torch.device（"cpu"、"cuda:0"……）。"""
    return torch.device(device) if device is not None else default_device()


def cache_key(spec: RunSpec, device=None) -> str:
    """缓存的键：完整设定（含种子和数据）+ 代码指纹 + 缓存格式 + 训练设备 的 SHA-256（前 16 位）。

    device（默认 default_device()）只记类型 "cpu" / "cuda"：同一台机器上 CPU 和 GPU 训练出的权重
    不同（浮点运算的顺序不同），所以各存各的；缓存只在本机，不同机器的 CPU 之间不会混用。
    """
    device = _device(device)
    payload = {"spec": spec.to_dict(), "code": code_fingerprint(), "format": CACHE_FORMAT,
               "torch": torch.__version__, "device": device.type}
    text = json.dumps(payload, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------
# 训练、缓存
# ----------------------------------------------------------------------------


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
    """一次训练的结果：模型（eval 模式）、history（每步 loss、学习率，每轮开发集困惑度）。"""

    spec: RunSpec
    model: torch.nn.Module
    history: dict
    from_cache: bool
    key: str
    device: str = "cpu"  # 在哪种设备上训练的（模型本身总在 CPU 上）


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
    path = _cache_path(spec, cache_dir, device)
    if not path.exists():
        return None
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # 损坏的缓存文件：当作没有，重新训练
        return None
    if blob.get("spec") != spec.to_dict():
        return None
    model = build_model(spec)
    model.load_state_dict(blob["state_dict"])
    model.eval()
    return RunResult(spec, model, blob["history"], True, cache_key(spec, device), device.type)


def load_or_train(spec: RunSpec, cache_dir=DEFAULT_CACHE_DIR, use_cache: bool = True,
                  progress: bool = True, device=None) -> RunResult:
    """有缓存就取回，没有就在本进程里训练（并写进缓存）。device 默认 default_device()。"""
    device = _device(device)
    if use_cache:
        hit = load_run(spec, cache_dir, device)
        if hit is not None:
            return hit
    model, history = train_run(spec, progress, device)
    if use_cache:
        save_run(spec, model.state_dict(), history, cache_dir, device)
    return RunResult(spec, model, history, False, cache_key(spec, device), device.type)


# --- 多进程：每个进程单线程地训练一次，进度汇总到主进程的一个进度条 ---------------

_PROGRESS_QUEUE = None


class _QueueBar:
    """子进程里代替 tqdm 的“进度条”：每隔几步把完成的步数发回主进程。"""

    def __init__(self, q, every: int = 20):
        self.q, self.every, self.pending = q, every, 0

    def update(self, n: int = 1):
        self.pending += n
        if self.pending >= self.every:
            self.q.put(self.pending)
            self.pending = 0

    def set_postfix(self, **kwargs):
        pass

    def close(self):
        if self.pending:
            self.q.put(self.pending)
            self.pending = 0


def _worker_init(q):
    global _PROGRESS_QUEUE
    _PROGRESS_QUEUE = q
    torch.set_num_threads(1)  # 一个进程一个核：小模型单线程最快，两个进程也不抢核


def _worker_train(spec: RunSpec, device):
    """子进程里训练一次，返回 (state_dict, history)。"""
    from . import transformer

    if _PROGRESS_QUEUE is not None:  # train_lm 的进度条换成发回主进程的计数
        transformer._progress = lambda iterable, total, desc, progress: _QueueBar(_PROGRESS_QUEUE)
    model, history = train_run(spec, progress=True, device=device)
    return model.state_dict(), history


def run_many(specs, cache_dir=DEFAULT_CACHE_DIR, use_cache: bool = True, workers: int = 2,
             progress: bool = True, desc: str = "training", device=None) -> list[RunResult]:
    """训练（或从缓存取回）一组互相独立的设定，按 specs 的顺序返回结果。

    CPU 上（device 默认 default_device()），workers > 1 时缺的那几次用 workers 个子进程（spawn）
    同时训练，每个进程 1 个线程；进度条显示所有要训练的步数（CI 环境里安静）。
    GPU 上在本进程里一个接一个地训练（只有一块 GPU，每个子进程还要各自初始化一次 CUDA）。
    """
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
        ctx = multiprocessing.get_context("spawn")
        q = ctx.Queue()
        total = sum(specs[i].steps for i in missing)
        bar = _progress(range(total), total, f"{desc} ({len(missing)} runs, {workers} processes)", progress)
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init, initargs=(q,)) as pool:
            futures = {pool.submit(_worker_train, specs[i], device): i for i in missing}
            pending = set(futures)
            while pending:
                try:
                    bar.update(q.get(timeout=0.2))
                except queue_module.Empty:
                    pass
                for fut in [f for f in pending if f.done()]:
                    pending.discard(fut)
                    i = futures[fut]
                    state_dict, history = fut.result()  # 子进程里的异常在这里重新抛出
                    if use_cache:
                        save_run(specs[i], state_dict, history, cache_dir, device)
                    model = build_model(specs[i])
                    model.load_state_dict(state_dict)
                    model.eval()
                    results[i] = RunResult(specs[i], model, history, False, cache_key(specs[i], device),
                                           device.type)
        while True:  # 收完队列里剩下的计数，进度条停在 100%
            try:
                bar.update(q.get_nowait())
            except queue_module.Empty:
                break
        bar.close()
    return results


def describe_sources(results) -> str:
    """一行话：哪些结果来自缓存、哪些是刚训练的（放在 NBVAL_IGNORE_OUTPUT 的单元格里打印）。"""
    cached = sum(r.from_cache for r in results)
    seconds = sum(r.history.get("seconds", 0.0) for r in results if not r.from_cache)
    parts = []
    if cached:
        parts.append(f"{cached} 个从缓存 .cache/experiments/ 取回")
    if len(results) - cached:
        parts.append(f"{len(results) - cached} 个刚训练完（各次训练的用时相加 {seconds:.0f} s）")
    return "；".join(parts)


def moving_average(xs, k: int = 50) -> list[float]:
    """学习曲线用的滑动平均：第 i 个值是 xs[i-k+1 .. i] 的平均（开头不足 k 个时有几个算几个）。"""
    out, total = [], 0.0
    for i, x in enumerate(xs):
        total += x
        if i >= k:
            total -= xs[i - k]
        out.append(total / min(i + 1, k))
    return out


def test_perplexity(result: RunResult) -> float:
    """在这次训练的测试集上的困惑度。"""
    _, _, test = splits_for(result.spec)
    return evaluate_perplexity(result.model, test, toy.PAD_ID)


# ----------------------------------------------------------------------------
# §11.1 这门语言本身的困惑度
# ----------------------------------------------------------------------------


def _zipf(items) -> dict:
    w = [1.0 / (r + 1) ** toy.ZIPF_EXPONENT for r in range(len(items))]
    total = sum(w)
    return {item: wi / total for item, wi in zip(items, w)}


def _noun_dist(p_sg: float = 0.5) -> dict:
    z = _zipf(toy.NOUNS)
    out = {}
    for (sg, pl), p in z.items():
        out[sg] = out.get(sg, 0.0) + p_sg * p
        out[pl] = out.get(pl, 0.0) + (1 - p_sg) * p
    return out


def _mix(*weighted) -> dict:
    out = {}
    for w, dist in weighted:
        for k, v in dist.items():
            out[k] = out.get(k, 0.0) + w * v
    return out


def next_word_distribution(prefix: list[str], modifier_probs=toy.DEFAULT_MODIFIER_PROBS) -> dict:
    """生成器（toy_language.generate_sentence）在前缀 prefix 之后给下一个词的真实概率。

    只看前缀本身（不偷看句子后面），照着文法一步一步地走：返回 {词: 概率}，和为 1。
    """
    adj, prep = _zipf(toy.ADJECTIVES), _zipf(toy.PREPOSITIONS)
    trans = {n: _zipf([p[i] for p in toy.TRANSITIVE]) for i, n in enumerate(("sg", "pl"))}
    intrans = {n: _zipf([p[i] for p in toy.INTRANSITIVE]) for i, n in enumerate(("sg", "pl"))}
    nouns = _noun_dist()
    probs = list(modifier_probs)
    total = sum(probs)
    probs = [p / total for p in probs]
    if not prefix or prefix[0] != toy.BOS:
        raise ValueError("前缀必须以 <s> 开头")
    words = list(prefix[1:])
    state = {"pos": 0, "dist": {}}

    def step(dist):
        """下一个词按 dist 分布；前缀到头了就停（StopIteration），否则读入它并检查它可能出现。"""
        state["dist"] = dist
        if state["pos"] >= len(words):
            raise StopIteration
        w = words[state["pos"]]
        state["pos"] += 1
        if dist.get(w, 0.0) == 0.0:
            raise ValueError(f"前缀 {prefix} 不符合文法：{w!r} 不可能出现在这里")
        return w

    the = {toy.DETERMINER: 1.0}
    try:
        step(the)  # 主语的限定词
        w = step(_mix((toy.P_SUBJECT_ADJ, adj), (1 - toy.P_SUBJECT_ADJ, nouns)))
        if w in adj:
            w = step(nouns)
        number = "sg" if w in toy.NOUNS_NUMBER["sg"] else "pl"
        main_verb = _mix((toy.P_OBJECT, trans[number]), (1 - toy.P_OBJECT, intrans[number]))
        k = 0
        while True:  # 主语名词或修饰语名词之后：再来一个修饰语，还是主动词？
            rest = sum(probs[k:])
            p_more = sum(probs[k + 1 :]) / rest if rest > 0 else 0.0
            w = step(_mix((p_more * toy.P_PP, prep), (p_more * (1 - toy.P_PP), {toy.RELATIVE: 1.0}),
                          (1 - p_more, main_verb)))
            if w in prep:  # 介词短语：介词 the (形容词) 名词（单复数随机）
                step(the)
                if step(_mix((toy.P_PP_ADJ, adj), (1 - toy.P_PP_ADJ, nouns))) in adj:
                    step(nouns)
            elif w == toy.RELATIVE:  # 关系从句：that 动词（随主语） the 名词（没有形容词）
                step(trans[number])
                step(the)
                step(nouns)
            else:
                break
            k += 1
        if w in trans[number]:  # 及物的主动词带宾语：the 名词
            step(the)
            step(nouns)
        step({toy.EOS: 1.0})
        state["dist"] = {}
        if state["pos"] < len(words):
            raise ValueError(f"前缀 {prefix} 在 </s> 之后还有词")
    except StopIteration:
        pass
    return state["dist"]


def language_perplexity(sequences, modifier_probs=toy.DEFAULT_MODIFIER_PROBS) -> float:
    """用生成器的真实概率算的困惑度：和 evaluate_perplexity 数的是同一批词元（<s> 之后的每个词）。

    交叉熵不小于熵：在同一份数据上，任何模型的困惑度平均来说都不会低于它（§11.1 的“不确定性下限”）。
    """
    nll, count = 0.0, 0
    for ids in sequences:
        words = toy.decode(ids)
        for t in range(1, len(words)):
            nll -= math.log(next_word_distribution(words[:t], modifier_probs)[words[t]])
            count += 1
    return math.exp(nll / count)


# ----------------------------------------------------------------------------
# §11.2、§11.3 主谓一致
# ----------------------------------------------------------------------------


def _pad(seqs, pad_id=toy.PAD_ID):
    T = max(len(s) for s in seqs)
    x = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        x[i, : len(s)] = torch.as_tensor(s)
    return x  # (B, T)，右侧填充：因果模型里真实位置看不到后面的填充


@torch.no_grad()
def verb_logits(model, items, batch_size: int = 500) -> torch.Tensor:
    """每道题在前缀最后一个位置（预测主动词的位置）的 (正确形式, 错误形式) 两个 logit：(N, 2)。"""
    model.eval()
    out = []
    for start in range(0, len(items), batch_size):
        chunk = items[start : start + batch_size]
        x = _pad([it.prefix for it in chunk])  # (B, T)
        logits = model(x).logits  # (B, T, V)
        last = torch.tensor([len(it.prefix) - 1 for it in chunk])
        at_verb = logits[torch.arange(len(chunk)), last]  # (B, V)
        pair = torch.tensor([[it.correct, it.wrong] for it in chunk])  # (B, 2)
        out.append(at_verb.gather(1, pair))
    return torch.cat(out)


def agreement_accuracy(model, items) -> float:
    """主谓一致准确率：正确形式的主动词概率严格大于错误形式的题目所占的比例（§11.2）。

    同一个位置上两个词的概率之比等于 logit 之差的指数，所以比 logit 就够了。
    """
    if not items:
        raise ValueError("没有题目：items 为空")
    pair = verb_logits(model, items)
    return int((pair[:, 0] > pair[:, 1]).sum()) / len(items)


@functools.lru_cache(maxsize=64)
def agreement_items(n_modifiers: int, n: int = 1000, seed: int = 0) -> list:
    """toy_language.agreement_test_set 的结果（只读）：同一组题在一个进程里只生成一次，所有模型共用。"""
    return toy.agreement_test_set(n_modifiers, n, seed)


def agreement_table(model, modifiers=AGREEMENT_MODIFIERS, n: int = 1000, seed: int = 0) -> dict:
    """{修饰语个数: 准确率}，每个个数 n 道题（toy_language.agreement_test_set）。"""
    return {k: agreement_accuracy(model, agreement_items(k, n, seed)) for k in modifiers}


def agreement_rows(modifiers=AGREEMENT_MODIFIERS, n: int = 1000, seed: int = 0) -> dict:
    """§11.2 表的前两行：{修饰语个数: (平均距离, 最长前缀)}。"""
    out = {}
    for k in modifiers:
        s = toy.agreement_stats(agreement_items(k, n, seed))
        out[k] = (s["mean_distance"], s["max_prefix"])
    return out


def agreement_by_prefix_length(model, items) -> dict:
    """按前缀长度（= 预测主动词的位置 + 1）分组的准确率：{前缀长度: (题数, 准确率)}。

    用来看错误是不是集中在某些位置上（§11.2、§11.3 的长度泛化）。
    """
    pair = verb_logits(model, items)
    right = (pair[:, 0] > pair[:, 1]).tolist()
    groups: dict[int, list[bool]] = {}
    for it, ok in zip(items, right):
        groups.setdefault(len(it.prefix), []).append(ok)
    return {n: (len(v), sum(v) / len(v)) for n, v in sorted(groups.items())}


def pooled_accuracy(table: dict, modifiers) -> float:
    """几个修饰语个数合在一起的准确率（每个个数题数相同，所以就是平均）。"""
    return sum(table[k] for k in modifiers) / len(modifiers)


# ----------------------------------------------------------------------------
# §11.4 注意力在看哪里
# ----------------------------------------------------------------------------


@torch.no_grad()
def verb_position_attention(model, prefixes) -> torch.Tensor:
    """每个前缀在最后一个位置（预测主动词处）的注意力权重：(N, 层数, 头数, T_max)，填充处为 0。"""
    model.eval()
    x = _pad(prefixes)  # (N, T)
    attns = model(x, return_attn=True).attentions  # 每层 {"self": (N, h, T, T)}
    last = torch.tensor([len(p) - 1 for p in prefixes])
    rows = [a["self"][torch.arange(len(prefixes)), :, last, :] for a in attns]  # 每层 (N, h, T)
    return torch.stack(rows, dim=1)  # (N, L, h, T)


def subject_attention(model, items, batch_size: int = 500) -> dict:
    """§11.4 的表：每层每个头在预测主动词的位置分给主语名词、分给每个干扰名词的平均权重。

    返回 {"subject": (L, h), "distractor": (L, h)（每个干扰名词平均分到的权重），
          "uniform": 平均分配时每个位置分到的权重, "n_items", "n_distractors"}。
    """
    subj_sum = dist_sum = None
    n_dist, uniform = 0, 0.0
    for start in range(0, len(items), batch_size):
        chunk = items[start : start + batch_size]
        w = verb_position_attention(model, [it.prefix for it in chunk])  # (B, L, h, T)
        if subj_sum is None:
            subj_sum = torch.zeros(w.shape[1:3], dtype=torch.float64)
            dist_sum = torch.zeros_like(subj_sum)
        for b, it in enumerate(chunk):
            s = it.sentence
            assert len(it.prefix) == s.verb_pos, "前缀必须正好停在主动词之前"
            subj_sum += w[b, :, :, s.subject_pos].double()
            for p in s.distractor_pos:
                dist_sum += w[b, :, :, p].double()
            n_dist += len(s.distractor_pos)
            uniform += 1.0 / len(it.prefix)
    n = len(items)
    return {"subject": (subj_sum / n).float(), "distractor": (dist_sum / max(n_dist, 1)).float(),
            "uniform": uniform / n, "n_items": n, "n_distractors": n_dist}


def subject_head_by_length(model, modifiers=(2, 4, 6, 10), n: int = 300, seed: int = 0,
                           reference: int = 2) -> tuple[tuple[int, int], dict]:
    """长度泛化的“机制”：找出最关注主语的头，再看它在更长的句子里还看不看主语。

    先在 reference 个修饰语的句子上找出分给主语的平均权重最大的头 (层, 头)（从 0 数），
    再对每个修饰语个数 k 算这个头在预测主动词处分给主语的平均权重。返回 ((层, 头), {k: 权重})。
    """
    ref = subject_attention(model, agreement_items(reference, n, seed))["subject"]  # (L, h)
    best = divmod(int(ref.argmax()), ref.shape[1])
    return best, {k: float(subject_attention(model, agreement_items(k, n, seed))["subject"][best])
                  for k in modifiers}


@dataclass
class Example:
    """一个手写的例句（不含主动词）及其标注：主语和干扰名词在 tokens 里的位置。"""

    tokens: list[str]  # 以 <s> 开头
    subject_pos: int
    distractor_pos: list[int]
    number: str


def make_example(text: str) -> Example:
    """把 "the old girl near the houses ..." 变成例句：第一个名词是主语，之后单复数不同的名词是干扰名词。"""
    words = text.split()
    unknown = [w for w in words if w not in toy.STOI]
    if unknown:
        raise ValueError(f"这些词不在玩具语言的词表里：{unknown}")
    tokens = [toy.BOS] + words
    nouns = [i for i, w in enumerate(tokens) if w in toy.NOUNS_NUMBER["sg"] | toy.NOUNS_NUMBER["pl"]]
    if not nouns:
        raise ValueError(f"句子里没有名词，找不到主语：{text!r}")
    subject = nouns[0]
    number = "sg" if tokens[subject] in toy.NOUNS_NUMBER["sg"] else "pl"
    distractors = [i for i in nouns[1:] if tokens[i] not in toy.NOUNS_NUMBER[number]]
    return Example(tokens, subject, distractors, number)


@torch.no_grad()
def example_attention(model, example: Example) -> dict:
    """一个例句的全部注意力矩阵和预测主动词处的判断。

    返回 {"weights": (L, h, T, T), "last_row": (L, h, T), "p_singular", "p_plural"}：
    后两项是最后一个位置上所有单数 / 复数动词形式的概率之和。
    """
    model.eval()
    x = torch.tensor([toy.encode(example.tokens)])  # (1, T)
    out = model(x, return_attn=True)
    weights = torch.stack([a["self"][0] for a in out.attentions])  # (L, h, T, T)
    probs = torch.softmax(out.logits[0, -1], dim=-1)  # (V,)
    verbs = toy.TRANSITIVE + toy.INTRANSITIVE
    p_sg = float(sum(probs[toy.STOI[s]] for s, _ in verbs))
    p_pl = float(sum(probs[toy.STOI[p]] for _, p in verbs))
    return {"weights": weights, "last_row": weights[:, :, -1, :], "p_singular": p_sg, "p_plural": p_pl}


def parameter_count(spec: RunSpec) -> int:
    """这个设定的模型有多少参数（§11.1：迷你 GPT 109,248，RNN 33,455）。"""
    return count_parameters(build_model(spec))


# ----------------------------------------------------------------------------
# notebook 11 的各组实验和每个模型的读数
# ----------------------------------------------------------------------------

# 正弦编码每个位置向量的长度是 sqrt(d/2)（d = 64 时约 5.7），GPT-2 初始化下词向量只有约 0.02·sqrt(d) = 0.16。
# 乘这个系数之后编码每一维的均方根是 0.02：和初始化时的词向量、可学习的位置表一样大（§5.1、§11.3）。
PE_SCALE_MATCHED = 0.02 * math.sqrt(2)

# §11.3 的各组（名字 → 在 §11 的迷你 GPT 上改的设定）：讲义的四种位置编码，加上缩小了的正弦编码
ARMS = {
    "learned": (("pos", "learned"),),
    "sinusoidal": (("pos", "sinusoidal"),),
    "sinusoidal_small": (("pos", "sinusoidal"), ("pe_scale", PE_SCALE_MATCHED)),
    "rope": (("pos", "rope"),),
    "none": (("pos", "none"),),
}
ARM_NAMES = {"learned": "可学习的位置嵌入", "sinusoidal": "正弦编码", "sinusoidal_small": "正弦编码 × 0.028",
             "rope": "RoPE", "none": "无位置信息", "rnn": "RNN"}

# §11.4 讲义的两个例句（词都在我们的词表里）
LECTURE_EXAMPLES = ("the old girl near the houses near the angry trees",
                    "the cat that sees the boys that likes the teacher")


def arm_spec(arm: str, seed: int) -> RunSpec:
    """一组实验（ARMS 的名字，或 "rnn"）在一个种子上的设定。"""
    if arm == "rnn":
        return rnn_spec(seed)
    (_, pos), *extra = ARMS[arm]
    return replace(gpt_spec(pos, seed, model_args=tuple(extra)), label=f"{arm} seed={seed}")


def evaluate_run(result: RunResult) -> dict:
    """一个训练好的模型在 notebook 11 里用到的全部读数（notebook 的表、图和结论都从这里来）。

    "test_ppl"、"dev_ppl"（每轮）、"agreement"（{修饰语个数: 准确率}，LENGTH_MODIFIERS，每个 1000 题）；
    迷你 GPT 还有：
    "token_norm"：训练后词向量的平均长度；"position_norm"（只有可学习的位置表）：训练中用到的位置 0–18
    那几行的平均长度；"by_prefix_4"：4 个修饰语的题按前缀长度分组的准确率；
    "heads"：2 个修饰语的 1000 句上每个头分给主语 / 干扰名词的权重（subject_attention）；
    "subject_head"、"subject_head_by_k"：subject_head_by_length 的结果（找主语的头，和它在 2、4、6、10 个
    修饰语时分给主语的平均权重）；"examples"：讲义的两个例句上 P(单数动词)、P(复数动词)，以及找主语的头
    分给主语、分给所有干扰名词的权重。
    """
    model = result.model
    out = {"test_ppl": test_perplexity(result), "dev_ppl": list(result.history["dev_ppl"]),
           "agreement": agreement_table(model, LENGTH_MODIFIERS)}
    if result.spec.model != "gpt":
        return out
    out["token_norm"] = float(model.tok_emb.weight.detach().norm(dim=1).mean())  # 训练后词向量的平均长度
    if model.pos_emb is not None:  # 可学习的位置表：训练中用到的那些行（位置 0–18）的平均长度
        out["position_norm"] = float(model.pos_emb.table.weight.detach()[: toy.MAX_TRAIN_LEN - 1].norm(dim=1).mean())
    out["by_prefix_4"] = agreement_by_prefix_length(model, agreement_items(4))
    out["heads"] = subject_attention(model, agreement_items(2))
    best, out["subject_head_by_k"] = subject_head_by_length(model, (2, 4, 6, 10))
    out["subject_head"] = best
    out["examples"] = []
    for text in LECTURE_EXAMPLES:
        ex = make_example(text)
        att = example_attention(model, ex)
        row = att["last_row"][best]  # 找主语的头在预测主动词处的一行
        out["examples"].append({"p_singular": att["p_singular"], "p_plural": att["p_plural"],
                                "subject": float(row[ex.subject_pos]),
                                "distractors": float(row[ex.distractor_pos].sum())})
    return out


# ----------------------------------------------------------------------------
# notebook 11 的结论：每一条对所有种子都要成立（notebook 和 tests/test_experiments.py 检查同一批陈述）
# ----------------------------------------------------------------------------


@dataclass
class Claim:
    """一条结论。values 是每个种子（或每个种子 × 每个修饰语个数）一个数，全部落在 [low, high] 里才算成立。

    kind："讲义"——讲义的结论，我们复现了；"回归检查"——本课程自己的结果（和讲义不同，或讲义没说），
    锁住它是为了发现代码改动带来的变化，不是讲义的主张。
    """

    section: str
    kind: str
    text: str
    values: list
    low: float | None = None
    high: float | None = None

    @property
    def holds(self) -> bool:
        return all((self.low is None or v >= self.low) and (self.high is None or v <= self.high)
                   for v in self.values)

    @property
    def observed(self) -> str:
        """所有值里离界限最近的那个（最不利的情况）。"""
        if self.low is not None and self.high is not None:
            return f"{min(self.values):.3f} … {max(self.values):.3f}"
        return f"{min(self.values):.3f}" if self.low is not None else f"{max(self.values):.3f}"

    @property
    def bound(self) -> str:
        if self.low is not None and self.high is not None:
            return f"[{self.low:g}, {self.high:g}]"
        return f"≥ {self.low:g}" if self.low is not None else f"≤ {self.high:g}"


def check_claims(claims) -> Table:
    """把结论列成一张表（小节、类型、陈述、所有种子里最不利的值、要求）；有不成立的就 AssertionError。"""
    claims = list(claims)
    table = Table([[c.section, c.kind, c.text, c.observed, c.bound, "✓" if c.holds else "✗"] for c in claims],
                  ["", "类型", "结论（对每个种子）", "观察到（最不利）", "要求", ""])
    failed = [c for c in claims if not c.holds]
    if failed:
        raise AssertionError("这些结论不成立：\n" + "\n".join(f"{c.section} {c.text}：{c.values}（要求 {c.bound}）"
                                                        for c in failed) + "\n\n" + repr(table))
    return table


def _per_seed(readings: dict, arm: str, fn) -> list:
    """这一组每个种子的 fn(读数)，按种子的顺序。readings：{(组名, 种子): evaluate_run 的结果}。"""
    return [fn(r) for (a, _), r in sorted(readings.items()) if a == arm]


def _accuracies(readings: dict, arm: str, modifiers) -> list:
    """这一组每个种子、每个修饰语个数的主谓一致准确率（种子在外层）。"""
    return [r["agreement"][k] for r in _per_seed(readings, arm, lambda r: r) for k in modifiers]


def perplexity_claims(readings: dict, floor_test: float) -> list[Claim]:
    """§11.1 的结论（可学习位置的迷你 GPT 和 RNN，每个种子）。floor_test：这门语言在测试集上的困惑度。"""
    gpt = _per_seed(readings, "learned", lambda r: r["test_ppl"])
    rnn = _per_seed(readings, "rnn", lambda r: r["test_ppl"])
    return [
        Claim("§11.1", "讲义", "迷你 GPT 和 RNN 的测试集困惑度很接近：任意两个种子相差", [abs(g - r) for g in gpt for r in rnn],
              high=0.1),
        Claim("§11.1", "讲义", "迷你 GPT 略好：迷你 GPT − RNN（任意两个种子）", [g - r for g in gpt for r in rnn], high=0.0),
        Claim("§11.1", "回归检查", "迷你 GPT 离这门语言的下限不到 0.05：测试集困惑度 − 下限", [g - floor_test for g in gpt],
              low=-0.02, high=0.05),
        Claim("§11.1", "回归检查", "RNN 离下限不到 0.1：测试集困惑度 − 下限", [r - floor_test for r in rnn], low=-0.02, high=0.1),
        Claim("§11.1", "回归检查", "迷你 GPT 第 1 轮的开发集困惑度已经比讲义的 4.57 低得多",
              _per_seed(readings, "learned", lambda r: r["dev_ppl"][0]), high=4.45),
    ]


def agreement_claims(readings: dict) -> list[Claim]:
    """§11.2 的结论：主谓一致准确率（可学习位置的迷你 GPT 和 RNN，每个种子）。"""
    acc = functools.partial(_accuracies, readings)

    def by_prefix(inside: bool):  # 4 个修饰语：前缀长度 17–19 的题合起来 / 其余的题合起来 的准确率
        out = []
        for r in _per_seed(readings, "learned", lambda r: r):
            groups = [(n, acc) for length, (n, acc) in r["by_prefix_4"].items() if (17 <= length <= 19) == inside]
            out.append(sum(n * a for n, a in groups) / sum(n for n, _ in groups))
        return out

    return [
        Claim("§11.2", "讲义", "RNN：0–8 个修饰语都对（讲义 100%）", acc("rnn", AGREEMENT_MODIFIERS), low=0.98),
        Claim("§11.2", "讲义", "迷你 GPT：训练见过的 0–3 个修饰语都对", acc("learned", (0, 1, 2, 3)), low=0.98),
        Claim("§11.2", "讲义", "迷你 GPT：6、8 个修饰语几乎全对（讲义 98.8%、99.2%）", acc("learned", (6, 8)), low=0.95),
        Claim("§11.2", "回归检查", "迷你 GPT：4 个修饰语明显变差（讲义 98.5%，没有复现）", acc("learned", (4,)), high=0.8),
        Claim("§11.2", "回归检查", "4 个修饰语的错误出在前缀长度 17–19：那里的准确率", by_prefix(True), high=0.8),
        Claim("§11.2", "回归检查", "4 个修饰语、其余前缀长度的准确率", by_prefix(False), low=0.95),
    ]


def length_claims(readings: dict, floor_test: float) -> list[Claim]:
    """§11.3 的结论：各组位置编码的困惑度、长度泛化和找主语的头（每个种子）。"""
    acc = functools.partial(_accuracies, readings)
    head = lambda arm, k: _per_seed(readings, arm, lambda r: r["subject_head_by_k"][k])
    others = [arm for arm in ARMS if arm != "sinusoidal"]
    ppl = lambda arms: [r["test_ppl"] for (arm, _), r in readings.items() if arm in arms]
    dev2 = lambda arms: [r["dev_ppl"][1] for (arm, _), r in readings.items() if arm in arms]
    return [
        Claim("§11.3", "讲义", "训练分布内每组都接近这门语言的下限：测试集困惑度 − 下限",
              [p - floor_test for p in ppl(ARMS)], low=-0.02, high=0.1),
        Claim("§11.3", "讲义", "除原版正弦编码外，各组的测试集困惑度几乎一样：最大 − 最小",
              [max(ppl(others)) - min(ppl(others))], high=0.02),
        Claim("§11.3", "回归检查", "原版正弦编码前两轮学得慢（位置淹没了词向量）：第 2 轮的开发集困惑度",
              dev2(["sinusoidal"]), low=4.6),
        Claim("§11.3", "回归检查", "其余各组（包括缩小的正弦编码）：第 2 轮的开发集困惑度", dev2(others), high=4.45),
        Claim("§11.3", "讲义", "训练见过的 0–3 个修饰语：每组都对", [a for arm in ARMS for a in acc(arm, (0, 1, 2, 3))],
              low=0.98),
        Claim("§11.3", "讲义", "无位置信息：4–10 个修饰语都对（讲义 99.6%–100%）", acc("none", (4, 6, 8, 10)), low=0.95),
        Claim("§11.3", "回归检查", "可学习的位置嵌入：6–10 个修饰语都对", acc("learned", (6, 8, 10)), low=0.95),
        Claim("§11.3", "回归检查", "可学习的位置嵌入：找主语的头在 4 个修饰语时“失明”：权重 ÷ 2 个修饰语时",
              [a / b for a, b in zip(head("learned", 4), head("learned", 2))], high=0.5),
        Claim("§11.3", "回归检查", "RoPE：4、6 个修饰语都对（讲义 84.9%、72.5%，没有复现）", acc("rope", (4, 6)), low=0.95),
        Claim("§11.3", "回归检查", "原版正弦编码：每个种子在 6–10 个修饰语里最差的一处（讲义 83.5%–99.9%）",
              [min(r["agreement"][k] for k in (6, 8, 10)) for r in _per_seed(readings, "sinusoidal", lambda r: r)],
              high=0.9),
        Claim("§11.3", "回归检查", "缩小的正弦编码（去掉尺度混杂）：4–10 个修饰语都对", acc("sinusoidal_small", (4, 6, 8, 10)),
              low=0.95),
        Claim("§11.3", "回归检查", "缩小的正弦编码：10 个修饰语时找主语的头仍在看主语", head("sinusoidal_small", 10), low=0.5),
    ]


def attention_claims(readings: dict) -> list[Claim]:
    """§11.4 的结论：可学习位置的迷你 GPT 在预测主动词处的注意力（每个种子）。"""
    runs = _per_seed(readings, "learned", lambda r: r)
    heads = [r["heads"] for r in runs]
    best = [divmod(int(h["subject"].argmax()), h["subject"].shape[1]) for h in heads]  # 分给主语最多的头
    return [
        Claim("§11.4", "讲义", "有一个头学会了找主语：它分给主语的权重 ÷ 均匀分配",
              [float(h["subject"][b]) / h["uniform"] for h, b in zip(heads, best)], low=3.0),
        Claim("§11.4", "讲义", "这个头几乎不理干扰名词：分给主语的 ÷ 分给每个干扰名词的",
              [float(h["subject"][b] / max(h["distractor"][b], 1e-6)) for h, b in zip(heads, best)], low=3.0),
        Claim("§11.4", "回归检查", "没有头盯着干扰名词：任何一个头分给每个干扰名词的平均权重（均匀 0.09，讲义最多 0.12）",
              [float(r["heads"]["distractor"].max()) for r in runs], high=0.25),
        Claim("§11.4", "讲义", "两个例句都选对了单数：P(单数动词) ÷ P(复数动词)",
              [e["p_singular"] / e["p_plural"] for r in runs for e in r["examples"]], low=100.0),
        Claim("§11.4", "回归检查", "P(单数) + P(复数) − 2/3（按文法，2 个修饰语之后接主动词的真实概率是 2/3）",
              [e["p_singular"] + e["p_plural"] - 2 / 3 for r in runs for e in r["examples"]], low=-0.15, high=0.15),
        Claim("§11.4", "讲义", "例句里找主语的头：分给主语的 − 分给所有干扰名词的",
              [e["subject"] - e["distractors"] for r in runs for e in r["examples"]], low=0.0),
    ]
