"""lib/toy_language.py 和 lib/rnn.py：第 5 讲的玩具语言和 RNN 基线。"""
from collections import Counter

import pytest
import torch

from lib import toy_language as tl
from lib.rnn import RNNLM
from lib.transformer import count_parameters


def test_vocabulary_has_79_tokens_with_specials():
    assert tl.VOCAB_SIZE == 79 == len(set(tl.TOKENS))
    assert {tl.PAD, tl.BOS, tl.EOS} <= set(tl.TOKENS)
    assert tl.decode(tl.encode(["<s>", "the", "cat", "sleeps", "</s>"])) == ["<s>", "the", "cat", "sleeps", "</s>"]


def _number_of(word):
    for sg, pl in tl.NOUNS + tl.TRANSITIVE + tl.INTRANSITIVE:
        if word == sg:
            return "sg"
        if word == pl:
            return "pl"
    raise KeyError(word)


def test_every_generated_sentence_agrees():
    for s in tl.generate_corpus(3000, modifier_probs=(0.2, 0.2, 0.2, 0.2, 0.2), seed=3):
        subject, verb = s.words[s.subject_pos], s.words[s.verb_pos]
        assert _number_of(subject) == _number_of(verb) == s.number
        for kind, noun_pos in zip(s.modifier_kinds, s.modifier_noun_pos):
            if kind == "rc":  # "that VERB the NOUN": the clause verb agrees with the subject too
                assert _number_of(s.words[noun_pos - 2]) == s.number
        assert s.words[0] == tl.BOS and s.words[-1] == tl.EOS


def test_same_seed_same_corpus_and_different_seed_differs():
    a = [s.words for s in tl.generate_corpus(200, seed=5)]
    assert a == [s.words for s in tl.generate_corpus(200, seed=5)]
    assert a != [s.words for s in tl.generate_corpus(200, seed=6)]


def test_modifier_counts_follow_requested_probabilities():
    probs = (0.6, 0.4)
    counts = Counter(s.n_modifiers for s in tl.generate_corpus(20000, modifier_probs=probs, seed=1))
    assert set(counts) == {0, 1}
    assert counts[0] / 20000 == pytest.approx(0.6, abs=0.015)


def test_standard_splits_sizes_and_lengths():
    train, dev, test = tl.standard_splits()
    assert (len(train), len(dev), len(test)) == (20000, 2000, 2000)
    assert max(len(s) for s in train) <= tl.MAX_TRAIN_LEN == 20
    assert max(len(s) for s in train) == 20  # the longest allowed sentence does occur
    assert train[:50] != dev[:50]


@pytest.mark.parametrize("k, prefix", [(0, 4), (1, 8), (3, 16), (4, 20), (10, 44)])
def test_agreement_sets_report_distance_and_prefix(k, prefix):
    items = tl.agreement_test_set(k, n=500)
    stats = tl.agreement_stats(items)
    assert stats["max_prefix"] == prefix
    assert stats["mean_distance"] == pytest.approx(3.75 * k, abs=0.35)
    for it in items[:50]:
        assert tl.TOKENS[it.correct] != tl.TOKENS[it.wrong]
        assert _number_of(tl.TOKENS[it.correct]) == it.sentence.number
        assert len(it.sentence.modifier_noun_pos) == k


def test_distractors_have_the_other_number():
    s = next(s for s in tl.agreement_test_set(4, n=50) if s.sentence.distractor_pos).sentence
    for p in s.distractor_pos:
        assert _number_of(s.words[p]) != s.number


def test_rnn_has_33455_parameters_and_lm_interface():
    model = RNNLM()
    assert count_parameters(model) == 33_455
    idx = torch.randint(0, 79, (3, 7))
    out = model(idx, idx)
    assert out.logits.shape == (3, 7, 79) and out.loss.ndim == 0
