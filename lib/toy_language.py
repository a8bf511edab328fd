"""第 5 讲的玩具语言：考“主谓一致”的小英语（§11 的实验数据）。

一句话的结构：
    <s> the (形容词) 主语名词 [修饰语 × k] 主动词 (the 宾语名词) </s>
修饰语都挂在主语上，有两种：
    介词短语  "near the (old) houses"        3–4 个词元，名词的单复数随机（“干扰名词”）
    关系从句  "that sees the boys"           4 个词元，从句动词和主语一致（它也会“泄露”主语的单复数）
主动词必须和主语的单复数一致：模型要在隔着 k 个修饰语之后选对 sleeps / sleep。

词表 79 个：3 个特殊词元（<pad>、<s>、</s>）+ 76 个词。同一个 seed 生成同一份语料。
训练语料最多 3 个修饰语，最长 20 个词元（含 <s>、</s>）。
"""
from __future__ import annotations

import random
from dataclasses import dataclass

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
DETERMINER, RELATIVE = "the", "that"
ADJECTIVES = ["old", "young", "angry", "happy", "small", "big", "tall", "quiet", "red", "green"]
NOUNS = [("cat", "cats"), ("dog", "dogs"), ("girl", "girls"), ("boy", "boys"), ("teacher", "teachers"),
         ("house", "houses"), ("tree", "trees"), ("bird", "birds"), ("man", "men"), ("woman", "women"),
         ("child", "children"), ("friend", "friends"), ("farmer", "farmers"), ("student", "students"),
         ("king", "kings")]
PREPOSITIONS = ["near", "behind", "with", "under", "beside", "by"]
# (单数, 复数)：及物动词可以带宾语，也用在关系从句里；不及物动词只做主动词
TRANSITIVE = [("sees", "see"), ("likes", "like"), ("chases", "chase"), ("finds", "find"),
              ("helps", "help"), ("knows", "know"), ("loves", "love"), ("follows", "follow")]
INTRANSITIVE = [("sleeps", "sleep"), ("runs", "run"), ("waits", "wait"), ("smiles", "smile"),
                ("laughs", "laugh"), ("sings", "sing")]

TOKENS = ([PAD, BOS, EOS, DETERMINER, RELATIVE] + ADJECTIVES + [w for pair in NOUNS for w in pair]
          + PREPOSITIONS + [w for pair in TRANSITIVE + INTRANSITIVE for w in pair])
STOI = {w: i for i, w in enumerate(TOKENS)}
PAD_ID, BOS_ID, EOS_ID = STOI[PAD], STOI[BOS], STOI[EOS]
VOCAB_SIZE = len(TOKENS)  # 79
MAX_TRAIN_MODIFIERS = 3
MAX_TRAIN_LEN = 20  # 含 <s>、</s>

# 默认的修饰语个数分布（0, 1, 2, 3 个），以及各种选择的概率
DEFAULT_MODIFIER_PROBS = (0.4, 0.3, 0.2, 0.1)
P_SUBJECT_ADJ, P_PP, P_PP_ADJ, P_OBJECT = 0.5, 0.5, 0.5, 0.5
# 同一类词里，排在前面的词更常见：按 Zipf 分布 1/r^s 抽词（真实语言的词频也大致如此）。
# s = 1.65 时这门语言本身的困惑度下限约 4.26，和讲义里模型的困惑度（4.27–4.33）同一量级。
ZIPF_EXPONENT = 1.65
_NUMBER_INDEX = {"sg": 0, "pl": 1}


def encode(words) -> list[int]:
    return [STOI[w] for w in words]


def decode(ids) -> list[str]:
    return [TOKENS[int(i)] for i in ids]


@dataclass
class Sentence:
    """一个句子及其标注：主语位置、主动词位置、主语单复数、各修饰语里的名词位置。"""

    words: list[str]
    number: str  # "sg" 或 "pl"
    subject_pos: int  # 主语名词在 words 里的下标（words[0] 是 <s>）
    verb_pos: int  # 主动词的下标：words[:verb_pos] 就是“预测主动词”的前缀
    n_modifiers: int
    modifier_noun_pos: list[int]
    modifier_kinds: list[str]  # "pp" 或 "rc"

    @property
    def distance(self) -> int:
        """主语和主动词之间隔了几个词元（§11.2 表中的“距离”）。"""
        return self.verb_pos - self.subject_pos - 1

    @property
    def distractor_pos(self) -> list[int]:
        """单复数和主语不同的修饰语名词（§11.4 的“干扰名词”）。"""
        own = NOUNS_NUMBER[self.number]
        return [p for p in self.modifier_noun_pos if self.words[p] not in own]


NOUNS_NUMBER = {"sg": {s for s, _ in NOUNS}, "pl": {p for _, p in NOUNS}}


def _pick(rng, items):
    """按 Zipf 权重从 items 里抽一个。"""
    weights = [1.0 / (rank + 1) ** ZIPF_EXPONENT for rank in range(len(items))]
    return rng.choices(items, weights=weights)[0]


def _noun(rng, number):
    return _pick(rng, NOUNS)[_NUMBER_INDEX[number]]


def _verb(rng, pairs, number):
    return _pick(rng, pairs)[_NUMBER_INDEX[number]]


def generate_sentence(rng: random.Random, n_modifiers: int) -> Sentence:
    """按上面的文法生成一个有 n_modifiers 个修饰语的句子。"""
    number = rng.choice(["sg", "pl"])
    words = [BOS, DETERMINER]
    if rng.random() < P_SUBJECT_ADJ:
        words.append(_pick(rng, ADJECTIVES))
    words.append(_noun(rng, number))
    subject_pos = len(words) - 1
    noun_pos, kinds = [], []
    for _ in range(n_modifiers):
        other = rng.choice(["sg", "pl"])  # 修饰语里名词的单复数和主语无关
        if rng.random() < P_PP:
            words += [_pick(rng, PREPOSITIONS), DETERMINER]
            if rng.random() < P_PP_ADJ:
                words.append(_pick(rng, ADJECTIVES))
            kinds.append("pp")
        else:
            words += [RELATIVE, _verb(rng, TRANSITIVE, number), DETERMINER]  # 从句动词随主语
            kinds.append("rc")
        words.append(_noun(rng, other))
        noun_pos.append(len(words) - 1)
    verb_pos = len(words)
    if rng.random() < P_OBJECT:
        words += [_verb(rng, TRANSITIVE, number), DETERMINER, _noun(rng, rng.choice(["sg", "pl"]))]
    else:
        words.append(_verb(rng, INTRANSITIVE, number))
    words.append(EOS)
    return Sentence(words, number, subject_pos, verb_pos, n_modifiers, noun_pos, kinds)


def generate_corpus(n: int, modifier_probs=DEFAULT_MODIFIER_PROBS, seed: int = 0) -> list[Sentence]:
    """n 个句子；modifier_probs[k] 是 k 个修饰语的概率（练习 10(d)：modifier_probs=(0.6, 0.4)）。"""
    rng = random.Random(seed)
    ks = rng.choices(range(len(modifier_probs)), weights=modifier_probs, k=n)
    return [generate_sentence(rng, k) for k in ks]


def standard_splits(seed: int = 0, n_train: int = 20000, n_dev: int = 2000, n_test: int = 2000,
                    modifier_probs=DEFAULT_MODIFIER_PROBS):
    """§11.1 的标准划分：训练 20,000 句，开发集、测试集各 2,000 句。返回三个词元编号列表。"""
    out = []
    for i, n in enumerate((n_train, n_dev, n_test)):
        out.append([encode(s.words) for s in generate_corpus(n, modifier_probs, seed=1000 * seed + i)])
    return tuple(out)


@dataclass
class AgreementItem:
    """一道主谓一致题：给前缀，比较正确和错误形式的主动词谁的概率更大。"""

    prefix: list[int]  # <s> ... 直到主动词之前
    correct: int  # 正确形式的主动词
    wrong: int  # 同一个动词的另一种形式
    sentence: Sentence


def agreement_test_set(n_modifiers: int, n: int = 1000, seed: int = 0) -> list[AgreementItem]:
    """有 n_modifiers（0..10）个修饰语的测试题（§11.2、§11.3）。"""
    rng = random.Random(10_000 + 97 * n_modifiers + seed)
    items = []
    for _ in range(n):
        s = generate_sentence(rng, n_modifiers)
        verb = s.words[s.verb_pos]
        pair = next(p for p in TRANSITIVE + INTRANSITIVE if verb in p)
        wrong = pair[1] if verb == pair[0] else pair[0]
        items.append(AgreementItem(encode(s.words[: s.verb_pos]), STOI[verb], STOI[wrong], s))
    return items


def agreement_stats(items) -> dict:
    """这一组题的平均距离和最长前缀（含 <s>），即 §11.2 表的前两行。"""
    return {"mean_distance": sum(it.sentence.distance for it in items) / len(items),
            "max_prefix": max(len(it.prefix) for it in items)}
