"""lib/experiments.py 的测试：缓存的键和往返、多进程训练的确定性、主谓一致准确率、
§11.4 的注意力统计、玩具语言本身的概率。全部用很小的设定，几秒钟跑完。"""
from __future__ import annotations

import collections
import functools
import math
import os
import random
import subprocess
import sys
from dataclasses import dataclass, replace

import pytest
import torch

from lib import toy_language as toy
from lib import experiments
from lib.agreement import (
    AGREEMENT_MODIFIERS, LENGTH_MODIFIERS, agreement_accuracy, agreement_by_prefix_length, agreement_items,
    evaluate_run, example_attention, language_perplexity, make_example, moving_average, next_word_distribution,
    subject_attention, subject_head_by_length, verb_logits, verb_position_attention,
)
from lib.experiments import (
    ARMS, NOTEBOOK_ARMS, NOTEBOOK_SEEDS, PE_SCALE_MATCHED, RunSpec, arm_spec, artifact_key, artifact_problems,
    cache_key, default_device, gpt_spec, load_artifact, load_or_train, load_run, run_many, splits_for,
)
from lib.transformer import LMOutput, TransformerLM, evaluate_perplexity, sinusoidal_positions
from lib.viz import Table

TINY = dict(n_train=192, n_dev=32, n_test=32, epochs=1, batch_size=32, warmup_steps=2)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_spec(**changes):
    return RunSpec(**{**TINY, **changes})


# ---------------------------------------------------------------------------- 缓存的键


def test_cache_key_same_spec_same_key_and_label_ignored():
    a = tiny_spec(model_args=(("pos", "rope"), ("n_layers", 1)))
    b = tiny_spec(model_args=(("n_layers", 1), ("pos", "rope")), label="just a name")
    assert cache_key(a) == cache_key(b)
    assert len(cache_key(a)) == 16 and int(cache_key(a), 16) >= 0


@pytest.mark.parametrize("change", [
    dict(seed=1), dict(data_seed=1), dict(n_train=193), dict(epochs=2), dict(max_lr=1e-3),
    dict(model_args=(("pos", "none"),)), dict(model="rnn"), dict(modifier_probs=(0.6, 0.4)),
])
def test_cache_key_changes_with_every_setting(change):
    assert cache_key(tiny_spec(**change)) != cache_key(tiny_spec())


def test_cache_key_is_stable_across_processes():
    """不能依赖 Python 的 hash 随机化：另一个进程（不同的 PYTHONHASHSEED）算出同一个键。"""
    code = ("from lib.experiments import RunSpec, cache_key; "
            "print(cache_key(RunSpec(n_train=192, n_dev=32, n_test=32, epochs=1, batch_size=32, "
            "warmup_steps=2, model_args=(('pos', 'rope'),))))")
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == cache_key(tiny_spec(model_args=(("pos", "rope"),)))


def test_cache_key_tells_cpu_and_gpu_training_apart(monkeypatch, tmp_path):
    """GPU 和 CPU 训练出的权重不同：缓存的键按设备区分，取回时不会混用。"""
    spec = tiny_spec(model="rnn")
    assert cache_key(spec, "cpu") != cache_key(spec, "cuda")
    assert cache_key(spec, "cuda") == cache_key(spec, torch.device("cuda:0"))  # 只看设备类型
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_device() == torch.device("cpu") and cache_key(spec) == cache_key(spec, "cpu")
    res = load_or_train(spec, cache_dir=tmp_path, progress=False)
    assert res.device == "cpu" and (tmp_path / f"{cache_key(spec, 'cpu')}.pt").exists()
    assert load_run(spec, tmp_path, device="cuda") is None  # CPU 训练的权重不冒充 GPU 的
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_device() == torch.device("cuda") and cache_key(spec) == cache_key(spec, "cuda")
    assert load_run(spec, tmp_path) is None  # 有 GPU 时默认找 GPU 训练的那一份
    assert load_run(spec, tmp_path, device="cpu").from_cache


@pytest.mark.skipif(not torch.cuda.is_available(), reason="没有 CUDA：只在有 GPU 的机器上运行")
def test_training_runs_on_cuda_and_returns_a_cpu_model(tmp_path):
    spec = tiny_spec()
    res = load_or_train(spec, cache_dir=tmp_path, progress=False, device="cuda")
    assert res.device == "cuda" and next(res.model.parameters()).device.type == "cpu"
    assert (tmp_path / f"{cache_key(spec, 'cuda')}.pt").exists()
    again = run_many([spec], cache_dir=tmp_path, progress=False, device="cuda")[0]
    assert again.from_cache and _same_weights(again.model, res.model)
    cpu = load_or_train(spec, cache_dir=tmp_path, progress=False, device="cpu")
    assert not cpu.from_cache  # CPU 上另外训练一份


def test_spec_normalises_lists_and_dicts():
    a = RunSpec(model_args={"pos": "rope"}, modifier_probs=[0.6, 0.4])
    b = RunSpec(model_args=[("pos", "rope")], modifier_probs=(0.6, 0.4))
    assert a == b and hash(a) == hash(b) and cache_key(a) == cache_key(b)
    assert gpt_spec("rope", model_args=(("n_layers", 1),)).model_args == (("pos", "rope"), ("n_layers", 1))


def test_code_fingerprint_covers_training_code_only():
    from lib import experiments, transformer

    fp = experiments.code_fingerprint()
    assert len(fp) == 12 and int(fp, 16) >= 0
    # 名单里的名字都真的存在（拼错了就等于没排除）
    assert all(hasattr(transformer, name) for name in experiments._NOT_TRAINING)
    for name in ("TransformerLM", "train_lm", "batches", "warmup_cosine", "MultiHeadAttention"):
        assert name not in experiments._NOT_TRAINING


def test_bad_specs_are_rejected_clearly():
    with pytest.raises(ValueError, match="未知的模型"):
        RunSpec(model="lstm")
    with pytest.raises(ValueError, match="位置编码"):
        RunSpec(model_args=(("pos", "alibi"),))
    with pytest.raises(ValueError, match="RNN"):
        RunSpec(model="rnn", model_args=(("pos", "none"),))


# ---------------------------------------------------------------------------- 缓存往返、确定性


def _same_weights(m1, m2):
    s1, s2 = m1.state_dict(), m2.state_dict()
    return s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)


def test_cache_round_trip(tmp_path):
    spec = tiny_spec()
    first = load_or_train(spec, cache_dir=tmp_path, progress=False)
    assert not first.from_cache
    assert (tmp_path / f"{cache_key(spec)}.pt").exists()
    second = load_or_train(spec, cache_dir=tmp_path, progress=False)
    assert second.from_cache
    assert _same_weights(first.model, second.model)
    assert second.history["dev_ppl"] == first.history["dev_ppl"]
    assert second.history["loss"] == first.history["loss"]
    x = torch.tensor([toy.encode("<s> the cat near the dogs".split())])
    assert torch.equal(first.model(x).logits, second.model(x).logits)
    # 从头再训练一次（不用缓存）：同一个种子，逐位相同
    again = load_or_train(spec, cache_dir=tmp_path, use_cache=False, progress=False)
    assert _same_weights(first.model, again.model)


def test_corrupt_cache_file_is_retrained(tmp_path):
    spec = tiny_spec(model="rnn")
    load_or_train(spec, cache_dir=tmp_path, progress=False)
    (tmp_path / f"{cache_key(spec)}.pt").write_bytes(b"not a checkpoint")
    assert load_run(spec, tmp_path) is None
    assert not load_or_train(spec, cache_dir=tmp_path, progress=False).from_cache


def test_unwritable_cache_still_returns_the_run(tmp_path, capsys):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the cache folder should be")
    res = load_or_train(tiny_spec(model="rnn"), cache_dir=blocker / "sub", progress=False)
    assert not res.from_cache and len(res.history["dev_ppl"]) == 1
    assert "没能写入缓存" in capsys.readouterr().out


def test_two_processes_give_the_same_weights_as_one(tmp_path):
    specs = [tiny_spec(), tiny_spec(seed=1, model_args=(("pos", "rope"),))]
    parallel = run_many(specs, cache_dir=tmp_path / "a", workers=2, progress=False)
    serial = [load_or_train(s, cache_dir=tmp_path / "b", progress=False) for s in specs]
    for p, s in zip(parallel, serial):
        assert not p.from_cache and p.spec == s.spec
        assert _same_weights(p.model, s.model)
        assert p.history["dev_ppl"] == s.history["dev_ppl"]
    assert not _same_weights(parallel[0].model, parallel[1].model)  # 不同设定确实不同
    cached = run_many(specs, cache_dir=tmp_path / "a", workers=2, progress=False)
    assert all(r.from_cache for r in cached)
    assert all(_same_weights(c.model, p.model) for c, p in zip(cached, parallel))


# ---------------------------------------------------------------------------- 主谓一致准确率

SG_VERBS = [toy.STOI[s] for s, _ in toy.TRANSITIVE + toy.INTRANSITIVE]
PL_VERBS = [toy.STOI[p] for _, p in toy.TRANSITIVE + toy.INTRANSITIVE]


class ParityLM(torch.nn.Module):
    """手工模型：在偶数位置偏爱单数动词，在奇数位置偏爱复数动词（不看输入的内容）。"""

    def __init__(self):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, idx, targets=None, return_attn=False):
        B, T = idx.shape
        logits = torch.zeros(B, T, toy.VOCAB_SIZE)
        even = (torch.arange(T) % 2 == 0)[None, :, None]  # (1, T, 1)
        logits[:, :, SG_VERBS] = torch.where(even, 1.0, -1.0).expand(B, T, len(SG_VERBS))
        logits[:, :, PL_VERBS] = torch.where(even, -1.0, 1.0).expand(B, T, len(PL_VERBS))
        return LMOutput(logits, None, None)


def test_agreement_accuracy_reads_the_last_prefix_position():
    items = toy.agreement_test_set(1, n=400, seed=3) + toy.agreement_test_set(2, n=400, seed=3)
    random.Random(0).shuffle(items)  # 长短混在一批里：填充不能影响结果
    model = ParityLM()
    expected = sum(((len(it.prefix) - 1) % 2 == 0) == (it.sentence.number == "sg") for it in items) / len(items)
    assert 0.2 < expected < 0.8  # 这个检查有区分度
    assert agreement_accuracy(model, items) == pytest.approx(expected, abs=1e-12)
    pair = verb_logits(model, items[:5])
    assert pair.shape == (5, 2)


def test_agreement_by_prefix_length_splits_the_same_answers():
    items = toy.agreement_test_set(4, n=300, seed=4)
    model = ParityLM()
    groups = agreement_by_prefix_length(model, items)
    assert sum(n for n, _ in groups.values()) == len(items)
    for length, (n, acc) in groups.items():
        mine = [it for it in items if len(it.prefix) == length]
        assert n == len(mine)
        assert acc == pytest.approx(agreement_accuracy(model, mine), abs=1e-12)
    total = sum(n * acc for n, acc in groups.values()) / len(items)
    assert total == pytest.approx(agreement_accuracy(model, items), abs=1e-12)


def test_agreement_accuracy_counts_ties_as_wrong_and_rejects_empty():
    class Flat(ParityLM):
        def forward(self, idx, targets=None, return_attn=False):
            return LMOutput(torch.zeros(*idx.shape, toy.VOCAB_SIZE), None, None)

    assert agreement_accuracy(Flat(), toy.agreement_test_set(0, n=20)) == 0.0
    with pytest.raises(ValueError):
        agreement_accuracy(Flat(), [])


# ---------------------------------------------------------------------------- §11.4 注意力


def test_verb_position_attention_shape_and_padding():
    torch.manual_seed(0)
    model = TransformerLM(n_layers=2, n_heads=4, d_model=16).eval()
    items = toy.agreement_test_set(2, n=6, seed=1) + toy.agreement_test_set(0, n=2, seed=1)
    prefixes = [it.prefix for it in items]
    w = verb_position_attention(model, prefixes)
    T = max(len(p) for p in prefixes)
    assert w.shape == (len(items), 2, 4, T)
    for i, p in enumerate(prefixes):  # 和单独算这一句（不填充）的最后一行一样
        alone = model(torch.tensor([p]), return_attn=True).attentions
        for layer in range(2):
            torch.testing.assert_close(w[i, layer, :, : len(p)], alone[layer]["self"][0, :, -1, :])
        assert torch.all(w[i, :, :, len(p):] == 0)  # 填充的位置分不到权重
        torch.testing.assert_close(w[i].sum(-1), torch.ones(2, 4))


def test_subject_attention_matches_a_manual_count():
    torch.manual_seed(1)
    model = TransformerLM(n_layers=2, n_heads=4, d_model=16).eval()
    items = toy.agreement_test_set(2, n=30, seed=2)
    res = subject_attention(model, items, batch_size=7)
    assert res["subject"].shape == res["distractor"].shape == (2, 4)
    subj = torch.zeros(2, 4)
    dist, n_dist = torch.zeros(2, 4), 0
    for it in items:
        s = it.sentence
        assert it.prefix == toy.encode(s.words[: s.verb_pos])
        row = torch.stack([a["self"][0, :, -1, :] for a in
                           model(torch.tensor([it.prefix]), return_attn=True).attentions])  # (L, h, T)
        subj += row[:, :, s.subject_pos]
        for p in s.distractor_pos:
            assert toy.decode([it.prefix[p]])[0] not in toy.NOUNS_NUMBER[s.number]
            dist += row[:, :, p]
        n_dist += len(s.distractor_pos)
    assert n_dist == res["n_distractors"] > 0
    torch.testing.assert_close(res["subject"], subj / len(items))
    torch.testing.assert_close(res["distractor"], dist / n_dist)
    assert res["uniform"] == pytest.approx(sum(1 / len(it.prefix) for it in items) / len(items))


def test_subject_head_by_length_follows_the_best_head():
    torch.manual_seed(2)
    model = TransformerLM(n_layers=2, n_heads=4, d_model=16).eval()
    best, by_k = subject_head_by_length(model, modifiers=(2, 3), n=40)
    ref = subject_attention(model, toy.agreement_test_set(2, 40))["subject"]
    assert ref[best] == ref.max()
    assert by_k[2] == pytest.approx(float(ref[best]))
    assert by_k[3] == pytest.approx(float(subject_attention(model, toy.agreement_test_set(3, 40))["subject"][best]))


def test_lecture_examples_are_in_the_vocabulary():
    ex1 = make_example("the old girl near the houses near the angry trees")
    assert ex1.tokens[ex1.subject_pos] == "girl" and ex1.number == "sg"
    assert [ex1.tokens[p] for p in ex1.distractor_pos] == ["houses", "trees"]
    ex2 = make_example("the cat that sees the boys that likes the teacher")
    assert ex2.tokens[ex2.subject_pos] == "cat"
    assert [ex2.tokens[p] for p in ex2.distractor_pos] == ["boys"]  # teacher 和主语同为单数
    with pytest.raises(ValueError, match="词表"):
        make_example("the unicorn sleeps")
    torch.manual_seed(0)
    out = example_attention(TransformerLM(d_model=16, n_heads=4).eval(), ex1)
    T = len(ex1.tokens)
    assert out["weights"].shape == (2, 4, T, T) and out["last_row"].shape == (2, 4, T)
    assert 0 < out["p_singular"] < 1 and 0 < out["p_plural"] < 1


# ---------------------------------------------------------------------------- 这门语言本身的概率


def test_next_word_distribution_is_normalised_and_covers_every_sentence():
    for s in toy.generate_corpus(300, seed=11):
        for t in range(1, len(s.words)):
            dist = next_word_distribution(s.words[:t])
            assert sum(dist.values()) == pytest.approx(1.0, abs=1e-12)
            assert dist.get(s.words[t], 0.0) > 0.0
        assert next_word_distribution(s.words) == {}  # </s> 之后什么也没有
    with pytest.raises(ValueError, match="不符合文法"):
        next_word_distribution(["<s>", "the", "cat", "the"])


def test_next_word_distribution_matches_the_generator():
    """和生成器的实际频率比：主语名词之后（0 个修饰语时）下一个词的分布。"""
    sents = toy.generate_corpus(20000, seed=7)
    counts = collections.Counter(s.words[s.subject_pos + 1] for s in sents if s.number == "sg")
    n = sum(counts.values())
    dist = next_word_distribution(["<s>", "the", "cat"])
    for w, p in dist.items():
        assert abs(counts[w] / n - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-3, w
    assert set(counts) <= set(dist)


def test_language_perplexity_is_near_the_documented_floor():
    seqs = [toy.encode(s.words) for s in toy.generate_corpus(3000, seed=5)]
    assert 4.15 < language_perplexity(seqs) < 4.35  # toy_language.py：下限约 4.26


def test_moving_average():
    xs = [float(x) for x in range(10)]
    assert moving_average(xs, 3) == pytest.approx([0, 0.5, 1, 2, 3, 4, 5, 6, 7, 8])
    assert moving_average(xs, 1) == xs


def test_replace_spec_changes_only_the_given_fields():
    from lib import experiments as ex
    base = ex.gpt_spec("learned")
    short = ex.replace_spec(base, modifier_probs=(0.6, 0.4), model_args=(("pos", "rope"),), label="x")
    assert short.modifier_probs == (0.6, 0.4) and dict(short.model_args) == {"pos": "rope"}
    assert short.epochs == base.epochs and ex.cache_key(short) != ex.cache_key(base)


# ---------------------------------------------------------------------------- notebook 11 的各组、读数和结论

# notebook 11 的结论，每一条对每个种子都要成立：test_notebook_11_claims_hold_on_seeds_it_does_not_show 在 CI 的机器上
# 重新训练 notebook 没有展示的种子，逐条检查。"讲义"：讲义的结论，我们复现了；"本课程的结果"：和讲义不同或讲义没说，
# 锁住它是为了发现代码改动带来的变化。


@dataclass
class Claim:
    """一条结论。values 是每个种子（或每个种子 × 每个修饰语个数）一个数，全部落在 [low, high] 里才算成立。

    kind："讲义"——讲义的结论，我们复现了；"本课程的结果"——本课程自己的结果（和讲义不同，或讲义没说），
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
        Claim("§11.1", "本课程的结果", "迷你 GPT 离这门语言的下限不到 0.05：测试集困惑度 − 下限", [g - floor_test for g in gpt],
              low=-0.02, high=0.05),
        Claim("§11.1", "本课程的结果", "RNN 离下限不到 0.1：测试集困惑度 − 下限", [r - floor_test for r in rnn], low=-0.02, high=0.1),
        Claim("§11.1", "本课程的结果", "迷你 GPT 第 1 轮的开发集困惑度已经比讲义的 4.57 低得多",
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
        Claim("§11.2", "本课程的结果", "迷你 GPT：4 个修饰语明显变差（讲义 98.5%，没有复现）", acc("learned", (4,)), high=0.8),
        Claim("§11.2", "本课程的结果", "4 个修饰语的错误出在前缀长度 17–19：那里的准确率", by_prefix(True), high=0.8),
        Claim("§11.2", "本课程的结果", "4 个修饰语、其余前缀长度的准确率", by_prefix(False), low=0.95),
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
        Claim("§11.3", "本课程的结果", "原版正弦编码前两轮学得慢（位置淹没了词向量）：第 2 轮的开发集困惑度",
              dev2(["sinusoidal"]), low=4.6),
        Claim("§11.3", "本课程的结果", "其余各组（包括缩小的正弦编码）：第 2 轮的开发集困惑度", dev2(others), high=4.45),
        Claim("§11.3", "讲义", "训练见过的 0–3 个修饰语：每组都对", [a for arm in ARMS for a in acc(arm, (0, 1, 2, 3))],
              low=0.98),
        Claim("§11.3", "讲义", "无位置信息：4–10 个修饰语都对（讲义 99.6%–100%）", acc("none", (4, 6, 8, 10)), low=0.95),
        Claim("§11.3", "本课程的结果", "可学习的位置嵌入：6–10 个修饰语都对", acc("learned", (6, 8, 10)), low=0.95),
        Claim("§11.3", "本课程的结果", "可学习的位置嵌入：找主语的头在 4 个修饰语时“失明”：权重 ÷ 2 个修饰语时",
              [a / b for a, b in zip(head("learned", 4), head("learned", 2))], high=0.5),
        Claim("§11.3", "本课程的结果", "RoPE：4、6 个修饰语都对（讲义 84.9%、72.5%，没有复现）", acc("rope", (4, 6)), low=0.95),
        # 原版正弦编码在 6–10 个修饰语上是否出错，种子之间不同：notebook 的种子 0 全对（100%），种子 1、2 约 50%。
        # 这不是每个种子都成立的结论，所以不在这里检查（notebook 在自己的 3 个种子上检查“至少一个种子出错”）。
        Claim("§11.3", "本课程的结果", "缩小的正弦编码（去掉尺度混杂）：4–10 个修饰语都对", acc("sinusoidal_small", (4, 6, 8, 10)),
              low=0.95),
        Claim("§11.3", "本课程的结果", "缩小的正弦编码：10 个修饰语时找主语的头仍在看主语", head("sinusoidal_small", 10), low=0.5),
    ]


def control_readings(model) -> dict:
    """对照实验（演示 3）的读数：4、5 个修饰语的题合在一起，按预测主动词的位置分段的准确率。"""
    right, total = collections.Counter(), collections.Counter()
    for k in (4, 5):
        for length, (n, a) in agreement_by_prefix_length(model, agreement_items(k)).items():
            p = length - 1  # 预测主动词的位置
            band = "≤15" if p <= 15 else "16–18" if p <= 18 else "19" if p == 19 else "20–22" if p <= 22 else "≥23"
            right[band] += n * a
            total[band] += n
    return {band: right[band] / total[band] for band in total}


def control_claims(controls: dict) -> list[Claim]:
    """演示 3 的对照实验：低谷在“训练中只在句尾出现过的位置”，训练句放宽到 4 个修饰语，低谷跟着搬家。"""
    band = lambda arm, b: [r[b] for (a, _), r in sorted(controls.items()) if a == arm]
    return [
        Claim("§11.2", "本课程的结果", "训练句最多 3 个修饰语：位置 16–18 的低谷", band("learned", "16–18"), high=0.8),
        Claim("§11.2", "本课程的结果", "对照组（训练句最多 4 个修饰语）：位置 16–18 不再出错", band("learned_4mod", "16–18"),
              low=0.95),
        # “低谷搬到新的句尾位置 20–22”只在部分种子上成立（未发布的种子 3：0.901），不作为对每个种子的结论
        Claim("§11.2", "本课程的结果", "对照组：训练中主动词出现过的位置（≤ 19）都对",
              band("learned_4mod", "≤15") + band("learned_4mod", "19"), low=0.95),
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
        # “没有头盯着干扰名词”不是每个种子都成立：notebook 的种子 2 有一个头给每个干扰名词 0.48（种子 0、1 最多 0.13）。
        Claim("§11.4", "讲义", "两个例句都选对了单数：P(单数动词) ÷ P(复数动词)",
              [e["p_singular"] / e["p_plural"] for r in runs for e in r["examples"]], low=100.0),
        Claim("§11.4", "本课程的结果", "P(单数) + P(复数) − 2/3（按文法，2 个修饰语之后接主动词的真实概率是 2/3）",
              [e["p_singular"] + e["p_plural"] - 2 / 3 for r in runs for e in r["examples"]], low=-0.15, high=0.15),
        Claim("§11.4", "讲义", "例句里找主语的头：分给主语的 − 分给所有干扰名词的",
              [e["subject"] - e["distractors"] for r in runs for e in r["examples"]], low=0.0),
    ]


# ---- 以下是测试



def test_arms_differ_only_in_position_settings():
    base = arm_spec("learned", 0)
    assert base == gpt_spec("learned", 0) and cache_key(base) == cache_key(gpt_spec())  # 就是 §11.1 的模型
    for arm in ARMS:
        spec = arm_spec(arm, 2)
        assert spec.seed == 2 and spec.epochs == base.epochs and spec.n_train == base.n_train
        assert dict(spec.model_args)["pos"] in ("learned", "sinusoidal", "rope", "none")
    assert dict(arm_spec("sinusoidal_small", 0).model_args)["pe_scale"] == PE_SCALE_MATCHED
    assert arm_spec("rnn", 1) == experiments.rnn_spec(1)


def test_scaled_sinusoidal_encoding_has_the_size_of_an_initial_word_vector():
    """§11.3 的混杂：原版编码每个位置长 sqrt(d/2) ≈ 5.7，词向量初始化时约 0.02·sqrt(d) = 0.16。"""
    d = 64
    pe = sinusoidal_positions(50, d)
    assert torch.allclose(pe.norm(dim=1), torch.full((50,), math.sqrt(d / 2)))
    assert torch.allclose((PE_SCALE_MATCHED * pe).norm(dim=1), torch.full((50,), 0.02 * math.sqrt(d)))
    torch.manual_seed(0)
    emb = TransformerLM().tok_emb.weight.detach().norm(dim=1).mean()
    assert abs(float(emb) - 0.02 * math.sqrt(d)) < 0.01
    # pe_scale 真的乘在编码上：乘 0 就等于不加位置信息（两个模型的参数完全相同）
    x = torch.tensor([toy.encode("<s> the cat near the dogs".split())])
    torch.manual_seed(1)
    zero = TransformerLM(pos="sinusoidal", pe_scale=0.0).eval()
    torch.manual_seed(1)
    none = TransformerLM(pos="none").eval()
    torch.manual_seed(1)
    small = TransformerLM(pos="sinusoidal", pe_scale=PE_SCALE_MATCHED).eval()
    assert torch.equal(zero(x).logits, none(x).logits)
    assert not torch.allclose(small(x).logits, none(x).logits)
    with pytest.raises(ValueError, match="pe_scale"):
        TransformerLM(pos="learned", pe_scale=0.5)


def test_evaluate_run_reads_everything_the_notebook_uses(tmp_path):
    gpt = load_or_train(tiny_spec(), cache_dir=tmp_path, progress=False)
    rnn = load_or_train(tiny_spec(model="rnn"), cache_dir=tmp_path, progress=False)
    g, r = evaluate_run(gpt), evaluate_run(rnn)
    assert set(r) == {"test_ppl", "dev_ppl", "agreement"}
    assert list(g["agreement"]) == list(experiments.LENGTH_MODIFIERS)
    assert g["agreement"][2] == agreement_accuracy(gpt.model, toy.agreement_test_set(2))
    assert (g["subject_head"], g["subject_head_by_k"]) == subject_head_by_length(gpt.model, (2, 4, 6, 10))
    torch.testing.assert_close(g["heads"]["subject"], subject_attention(gpt.model, toy.agreement_test_set(2))["subject"])
    assert sum(n for n, _ in g["by_prefix_4"].values()) == 1000
    assert len(g["examples"]) == 2 and all(0 < e["p_singular"] < 1 for e in g["examples"])
    assert g["token_norm"] > 0 and g["position_norm"] > 0


def test_claims_report_the_worst_seed_and_fail_loudly():
    ok = Claim("§11.3", "讲义", "每个种子都至少 0.9", [0.95, 0.97], low=0.9)
    high = Claim("§11.3", "本课程的结果", "每个种子都不超过 0.8", [0.5, 0.7], high=0.8)
    assert ok.holds and ok.observed == "0.950" and high.observed == "0.700" and high.bound == "≤ 0.8"
    table = check_claims([ok, high])
    assert "每个种子都至少 0.9" in repr(table) and "✓" in repr(table)
    bad = Claim("§11.2", "讲义", "全对", [1.0, 0.6], low=0.98)
    assert not bad.holds
    with pytest.raises(AssertionError, match="全对"):
        check_claims([ok, bad])


def test_arm_spec_control_differs_only_in_the_training_sentences():
    base, control = arm_spec("learned", 1), arm_spec("learned_4mod", 1)
    assert control.modifier_probs == experiments.CONTROL_MODIFIER_PROBS and len(control.modifier_probs) == 5
    assert replace(control, modifier_probs=base.modifier_probs) == base  # 别的设定完全相同
    train = splits_for(replace(control, n_train=2000, n_dev=10, n_test=10))[0]
    assert max(map(len, train)) == 24 > toy.MAX_TRAIN_LEN  # 训练句最长 24 个词元：主动词最晚在位置 20
    assert set(NOTEBOOK_ARMS) == {*ARMS, "rnn", "learned_4mod"} and NOTEBOOK_SEEDS == (0, 1, 2)


# ---------------------------------------------------------------------------- 随仓库发布的权重


def test_shipped_weights_match_the_code():
    """发布的权重和现在的训练代码、数据生成器对得上。失败时：运行 make artifact，再提交 artifacts/ 和 notebooks/。"""
    problems = artifact_problems()
    assert not problems, "\n".join(problems)
    manifest = experiments.read_manifest()
    assert manifest["code_fingerprint"] == experiments.code_fingerprint()
    assert len(manifest["runs"]) == len(NOTEBOOK_ARMS) * len(NOTEBOOK_SEEDS)
    for name, entry in manifest["files"].items():  # 每组一个文件，都远小于 5 MB
        path = experiments.ARTIFACT_DIR / name
        assert path.stat().st_size == entry["bytes"] < 5_000_000


def test_describe_sources_says_where_the_weights_came_from():
    """notebook 11 打印的来源：发布的权重说明在维护者的哪种设备上训练、训练代码的指纹；现场训练的说用时。"""
    shipped = load_artifact(arm_spec("rnn", 0))
    line = experiments.describe_sources([shipped, shipped])
    assert line == (f"2 个来自随仓库发布的权重（artifacts/11_mini_gpt/，在维护者的 CPU 上训练；"
                    f"训练代码的指纹 {experiments.code_fingerprint()}）")
    trained = replace(shipped, source="trained", history={**shipped.history, "seconds": 12.4})
    assert experiments.describe_sources([shipped, trained]).endswith("；1 个刚训练完（各次训练的用时相加 12 s）")


def test_shipped_weights_are_float32_and_are_the_final_weights_of_their_run():
    """每组一个种子：权重是 float32；在开发集上重新算的困惑度等于训练时最后一轮记下的（换一台 CPU 只差舍入）。"""
    for arm in NOTEBOOK_ARMS:
        spec = arm_spec(arm, 0)
        run = load_artifact(spec)
        assert run is not None and run.source == "artifact" and run.key == artifact_key(spec)
        assert all(t.dtype == torch.float32 for t in run.model.state_dict().values())
        assert len(run.history["loss"]) == spec.steps and len(run.history["dev_ppl"]) == spec.epochs
        dev = splits_for(spec)[1]
        assert evaluate_perplexity(run.model, dev, toy.PAD_ID) == pytest.approx(run.history["dev_ppl"][-1], abs=1e-4)


def _tiny_arms(monkeypatch):
    """把 notebook 11 的各组换成两组很小的设定，测试发布和取回的整个流程（几秒钟）。"""
    monkeypatch.setattr(experiments, "NOTEBOOK_ARMS", ("learned", "rnn"))
    monkeypatch.setattr(experiments, "NOTEBOOK_SEEDS", (0, 1))
    monkeypatch.setattr(experiments, "arm_spec", lambda arm, seed: tiny_spec(seed=seed, model="gpt" if arm == "learned" else "rnn"))


def test_write_artifact_round_trip_and_refuses_stale_weights(tmp_path, monkeypatch):
    _tiny_arms(monkeypatch)
    cache, out = tmp_path / "cache", tmp_path / "artifact"
    manifest = experiments.write_artifact(out, workers=1, cache_dir=cache)
    assert sorted(manifest["files"]) == ["learned.pt", "rnn.pt"] and len(manifest["runs"]) == 4
    assert experiments.artifact_problems(out) == []
    trained = load_or_train(tiny_spec(seed=1), cache_dir=cache, progress=False)
    shipped = load_artifact(tiny_spec(seed=1), out)
    assert shipped.source == "artifact" and _same_weights(shipped.model, trained.model)
    assert shipped.history["loss"] == trained.history["loss"] and shipped.history["dev_ppl"] == trained.history["dev_ppl"]
    x = torch.tensor([toy.encode("<s> the cat near the dogs".split())])
    assert torch.equal(shipped.model(x).logits, load_artifact(tiny_spec(seed=1), out).model(x).logits)  # 评估是确定的
    # notebook_runs 默认用发布的权重，retrain=True 时不用（这里从本机缓存取回）
    runs = functools.partial(experiments.notebook_runs, progress=False, workers=1, directory=out, cache_dir=cache)
    assert [r.source for r in runs([("learned", 1), ("rnn", 0)]).values()] == ["artifact", "artifact"]
    assert [r.source for r in runs([("rnn", 0)], retrain=True).values()] == ["cache"]
    # 训练代码（代码指纹）一变：清单过期，权重不再被取用，notebook 改为训练
    experiments._artifact_file.cache_clear()
    monkeypatch.setattr(experiments, "code_fingerprint", lambda: "0123456789ab")
    problems = experiments.artifact_problems(out)
    assert len(problems) == 1 and "代码指纹" in problems[0] and "4 个模型全部过期" in problems[0]
    assert "make artifact" in problems[0]  # 维护者该运行的那一条（它连 notebook 06–12 的结果一起重新生成）
    assert load_artifact(tiny_spec(seed=1), out) is None
    assert runs([("rnn", 0)], cache_dir=tmp_path / "empty")[("rnn", 0)].source == "trained"


def test_tampered_or_missing_artifact_file_is_not_used(tmp_path, monkeypatch):
    _tiny_arms(monkeypatch)
    out = tmp_path / "artifact"
    experiments.write_artifact(out, workers=1, cache_dir=tmp_path / "cache")
    blob = (out / "rnn.pt").read_bytes()
    (out / "rnn.pt").write_bytes(blob[:-10] + b"0123456789")
    experiments._artifact_file.cache_clear()
    assert load_artifact(tiny_spec(seed=0, model="rnn"), out) is None
    assert load_artifact(tiny_spec(seed=0), out) is not None  # 别的文件不受影响
    problems = experiments.artifact_problems(out)
    assert len(problems) == 2 and all("rnn" in p for p in problems)
    (out / "manifest.json").unlink()
    assert "manifest.json" in experiments.artifact_problems(out)[0] and load_artifact(tiny_spec(), out) is None


def test_artifact_key_ignores_device_and_torch_version_but_not_the_code(monkeypatch):
    spec = arm_spec("learned", 0)
    key = artifact_key(spec)
    assert key == artifact_key(replace(spec, label="another name")) != artifact_key(arm_spec("learned", 1))
    assert cache_key(spec, "cpu") != cache_key(spec, "cuda")  # 本机缓存分设备；发布的权重不分
    monkeypatch.setattr(torch, "__version__", "0.0.0")
    assert artifact_key(spec) == key
    monkeypatch.setattr(experiments, "code_fingerprint", lambda: "0123456789ab")
    assert artifact_key(spec) != key


def test_fingerprint_ignores_windows_line_endings():
    assert experiments._text("a = 1\r\nb = 2\r\n") == experiments._text("a = 1\nb = 2\n")


def test_command_line_checks_the_artifact():
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-m", "lib.experiments"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert experiments.code_fingerprint() in out.stdout


# CI 在自己的机器上为每组重新训练一个 notebook 没有展示的种子（种子 3，一共 7 个模型），逐条检查上面的结论：
# 一个迷你 GPT 2,504 步、每步约 33 毫秒，约 85 秒，RNN 约 30 秒；单进程（pytest -n 2 的另一个进程同时在跑别的测试），
# 2 核的 CI 里一共约 12 分钟（2026-12-01 实测 713–737 秒），是整个测试套件 CPU 时间的三分之一以上。
# 种子 3 上的结论：上一版（在另一台机器上）在种子 3–4 上检查过除对照组以外的各条；对照组的几条在本机的种子 0 上成立。
UNSEEN_SEED = 3


@pytest.mark.slow
def test_notebook_11_claims_hold_on_seeds_it_does_not_show():
    """notebook 11 的每一条结论在 notebook 没有展示的种子上、在跑测试的这台机器上重新训练，也成立。"""
    keys = [(arm, UNSEEN_SEED) for arm in NOTEBOOK_ARMS]
    assert UNSEEN_SEED not in NOTEBOOK_SEEDS
    runs = run_many([arm_spec(*key) for key in keys], workers=1, progress=False)
    readings = {key: evaluate_run(run) for key, run in zip(keys, runs)}
    controls = {key: control_readings(run.model) for key, run in zip(keys, runs) if key[0] in ("learned", "learned_4mod")}
    floor_test = language_perplexity(splits_for(arm_spec("learned", UNSEEN_SEED))[2])
    for claims in (perplexity_claims(readings, floor_test), agreement_claims(readings), control_claims(controls),
                   length_claims(readings, floor_test), attention_claims(readings)):
        print(check_claims(claims))
