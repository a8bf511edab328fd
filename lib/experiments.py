"""§11 的实验：迷你 GPT vs RNN（讲义代码 04、05 对应的部分）。

notebook 11 只调用这里的函数，模型和训练循环都来自 lib/transformer.py、lib/rnn.py：

- ``RunSpec``：一次训练的全部设定（模型、位置编码、随机种子、数据、优化器）。
- ``load_or_train`` / ``run_many``：训练，或者从缓存里取回训练好的权重。
  缓存放在仓库根目录下被 git 忽略的 ``.cache/experiments/``，文件名是设定的哈希
  （``cache_key``）：设定、随机种子、数据、或者 lib 里模型与训练的代码，任何一样变了，
  哈希就变，就会重新训练。全新的克隆（CI、Colab）里没有缓存，一切从头训练。
  互相独立的几次训练可以用几个进程同时跑（每个进程 1 个线程）：同一台机器上，
  结果和在本进程里训练逐位相同。
- ``language_perplexity``：这门玩具语言本身的困惑度（用生成句子的真实概率算），
  是任何模型在同一份数据上的困惑度“下限”（§11.1）。
- ``agreement_accuracy`` / ``agreement_table``：主谓一致准确率（§11.2、§11.3）。
- ``subject_attention`` / ``example_attention``：在预测主动词的位置，每个头分给主语、
  干扰名词的注意力权重（§11.4）。
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
    lib/toy_language.py 整个文件，以及本文件里建模型、取数据、训练的三个函数。
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
    for fn in (build_model, splits_for, train_run):  # RunSpec 的字段已经全在 to_dict() 里
        h.update(inspect.getsource(fn).encode())
    return h.hexdigest()[:12]


def cache_key(spec: RunSpec) -> str:
    """缓存的键：完整设定（含种子和数据）+ 代码指纹 + 缓存格式 的 SHA-256（前 16 位）。"""
    payload = {"spec": spec.to_dict(), "code": code_fingerprint(), "format": CACHE_FORMAT,
               "torch": torch.__version__}
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


def splits_for(spec: RunSpec):
    """这次训练用的 (训练, 开发, 测试) 词元序列。"""
    return toy.standard_splits(seed=spec.data_seed, n_train=spec.n_train, n_dev=spec.n_dev,
                               n_test=spec.n_test, modifier_probs=spec.modifier_probs)


def train_run(spec: RunSpec, progress: bool = True):
    """从头训练一次（单线程）：返回 (模型, history)。history 多一项 "seconds"（训练用时）。"""
    train, dev, _ = splits_for(spec)
    model = build_model(spec)
    start = time.perf_counter()
    history = train_lm(model, train, pad_id=toy.PAD_ID, epochs=spec.epochs, batch_size=spec.batch_size,
                       max_lr=spec.max_lr, warmup_steps=spec.warmup_steps, weight_decay=spec.weight_decay,
                       grad_clip=spec.grad_clip, dev_seqs=dev, seed=spec.seed, threads=1,
                       progress=progress, desc=spec.name)
    history["seconds"] = time.perf_counter() - start
    return model, history


@dataclass
class RunResult:
    """一次训练的结果：模型（eval 模式）、history（每步 loss、学习率，每轮开发集困惑度）。"""

    spec: RunSpec
    model: torch.nn.Module
    history: dict
    from_cache: bool
    key: str


def _cache_path(spec: RunSpec, cache_dir) -> Path:
    return Path(cache_dir) / f"{cache_key(spec)}.pt"


def save_run(spec: RunSpec, state_dict: dict, history: dict, cache_dir=DEFAULT_CACHE_DIR) -> Path | None:
    """把权重和 history 写进缓存（先写临时文件再改名：中途被打断也不会留下半个文件）。"""
    path = _cache_path(spec, cache_dir)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"spec": spec.to_dict(), "state_dict": state_dict, "history": history}, tmp)
        os.replace(tmp, path)
    except OSError as err:  # 只读的目录等：不缓存也能继续，只是下次要重新训练
        print(f"没能写入缓存 {path}（{err}）：结果照常使用，下次运行会重新训练。")
        return None
    return path


def load_run(spec: RunSpec, cache_dir=DEFAULT_CACHE_DIR) -> RunResult | None:
    """从缓存里取回一次训练；没有（或文件损坏）时返回 None。"""
    path = _cache_path(spec, cache_dir)
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
    return RunResult(spec, model, blob["history"], True, cache_key(spec))


def load_or_train(spec: RunSpec, cache_dir=DEFAULT_CACHE_DIR, use_cache: bool = True,
                  progress: bool = True) -> RunResult:
    """有缓存就取回，没有就在本进程里训练（并写进缓存）。"""
    if use_cache:
        hit = load_run(spec, cache_dir)
        if hit is not None:
            return hit
    model, history = train_run(spec, progress)
    if use_cache:
        save_run(spec, model.state_dict(), history, cache_dir)
    return RunResult(spec, model, history, False, cache_key(spec))


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


def _worker_train(spec: RunSpec):
    """子进程里训练一次，返回 (state_dict, history)。"""
    from . import transformer

    if _PROGRESS_QUEUE is not None:  # train_lm 的进度条换成发回主进程的计数
        transformer._progress = lambda iterable, total, desc, progress: _QueueBar(_PROGRESS_QUEUE)
    model, history = train_run(spec, progress=True)
    return model.state_dict(), history


def run_many(specs, cache_dir=DEFAULT_CACHE_DIR, use_cache: bool = True, workers: int = 2,
             progress: bool = True, desc: str = "training") -> list[RunResult]:
    """训练（或从缓存取回）一组互相独立的设定，按 specs 的顺序返回结果。

    workers > 1 时缺的那几次用 workers 个子进程（spawn）同时训练，每个进程 1 个线程；
    进度条显示所有要训练的步数（CI 环境里安静）。
    """
    from .transformer import _progress

    specs = list(specs)
    results: list[RunResult | None] = [load_run(s, cache_dir) if use_cache else None for s in specs]
    missing = [i for i, r in enumerate(results) if r is None]
    workers = max(1, min(workers, len(missing), os.cpu_count() or 1))
    if missing and workers == 1:
        for i in missing:
            results[i] = load_or_train(specs[i], cache_dir, use_cache=False, progress=progress)
            if use_cache:
                save_run(specs[i], results[i].model.state_dict(), results[i].history, cache_dir)
    elif missing:
        ctx = multiprocessing.get_context("spawn")
        q = ctx.Queue()
        total = sum(specs[i].steps for i in missing)
        bar = _progress(range(total), total, f"{desc} ({len(missing)} runs, {workers} processes)", progress)
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init, initargs=(q,)) as pool:
            futures = {pool.submit(_worker_train, specs[i]): i for i in missing}
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
                        save_run(specs[i], state_dict, history, cache_dir)
                    model = build_model(specs[i])
                    model.load_state_dict(state_dict)
                    model.eval()
                    results[i] = RunResult(specs[i], model, history, False, cache_key(specs[i]))
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


def agreement_table(model, modifiers=AGREEMENT_MODIFIERS, n: int = 1000, seed: int = 0) -> dict:
    """{修饰语个数: 准确率}，每个个数 n 道题（toy_language.agreement_test_set）。"""
    return {k: agreement_accuracy(model, toy.agreement_test_set(k, n, seed)) for k in modifiers}


def agreement_rows(modifiers=AGREEMENT_MODIFIERS, n: int = 1000, seed: int = 0) -> dict:
    """§11.2 表的前两行：{修饰语个数: (平均距离, 最长前缀)}。"""
    out = {}
    for k in modifiers:
        s = toy.agreement_stats(toy.agreement_test_set(k, n, seed))
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
    ref = subject_attention(model, toy.agreement_test_set(reference, n, seed))["subject"]  # (L, h)
    best = divmod(int(ref.argmax()), ref.shape[1])
    return best, {k: float(subject_attention(model, toy.agreement_test_set(k, n, seed))["subject"][best])
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
