"""lib/experiments.py 的测试：缓存的键和往返、多进程训练的确定性、主谓一致准确率、
§11.4 的注意力统计、玩具语言本身的概率。全部用很小的设定，几秒钟跑完。"""
from __future__ import annotations

import collections
import math
import os
import random
import subprocess
import sys

import pytest
import torch

from lib import toy_language as toy
from lib.experiments import (
    RunSpec, gpt_spec, agreement_accuracy, agreement_by_prefix_length, cache_key, example_attention, language_perplexity, load_or_train,
    load_run, make_example, moving_average, next_word_distribution, run_many, subject_attention, subject_head_by_length, verb_logits,
    verb_position_attention,
)
from lib.transformer import LMOutput, TransformerLM

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
