"""§11 的测量：这门语言本身的困惑度、主谓一致准确率、预测主动词处的注意力（notebook 11、练习 10）。

notebook 11 在页面上一题一题、一句一句地写出这些测量；这里是同样的做法成批计算（右侧填充，
500 题一批），供 notebook 的大表、tests/test_experiments.py 和练习 10 使用。训练和权重的来源见 lib/experiments.py。
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from . import toy_language as toy
from .transformer import evaluate_perplexity

# §11.2 的修饰语个数；§11.3 测到 10 个
AGREEMENT_MODIFIERS = (0, 1, 2, 3, 4, 6, 8)
LENGTH_MODIFIERS = (0, 1, 2, 3, 4, 6, 8, 10)

# §11.4 讲义的两个例句（词都在我们的词表里）
LECTURE_EXAMPLES = ("the old girl near the houses near the angry trees",
                    "the cat that sees the boys that likes the teacher")


def moving_average(xs, k: int = 50) -> list[float]:
    """学习曲线用的滑动平均：第 i 个值是 xs[i-k+1 .. i] 的平均（开头不足 k 个时有几个算几个）。"""
    out, total = [], 0.0
    for i, x in enumerate(xs):
        total += x
        if i >= k:
            total -= xs[i - k]
        out.append(total / min(i + 1, k))
    return out


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


def agreement_by_prefix_length(model, items, pair=None) -> dict:
    """按前缀长度（= 预测主动词的位置 + 1）分组的准确率：{前缀长度: (题数, 准确率)}。

    用来看错误是不是集中在某些位置上（§11.2、§11.3 的长度泛化）。pair：已经算好的 verb_logits（省一次前向传播）。
    """
    pair = verb_logits(model, items) if pair is None else pair
    right = (pair[:, 0] > pair[:, 1]).tolist()
    groups: dict[int, list[bool]] = {}
    for it, ok in zip(items, right):
        groups.setdefault(len(it.prefix), []).append(ok)
    return {n: (len(v), sum(v) / len(v)) for n, v in sorted(groups.items())}


def agreement_by_verb_position(model, modifiers=(4, 5)) -> dict:
    """几个修饰语个数的题合在一起，按预测主动词的位置（= 前缀长度 − 1）分组：{位置: (题数, 准确率)}
    （notebook 11 演示 3 的对照实验）。"""
    out: dict[int, list] = {}
    for k in modifiers:
        for length, (n, acc) in agreement_by_prefix_length(model, agreement_items(k)).items():
            total = out.setdefault(length - 1, [0, 0.0])
            total[0] += n
            total[1] += n * acc
    return {p: (n, right / n) for p, (n, right) in sorted(out.items())}


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
    by_k = {k: ref if k == reference else subject_attention(model, agreement_items(k, n, seed))["subject"] for k in modifiers}
    return best, {k: float(w[best]) for k, w in by_k.items()}


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


VERB_FORMS = frozenset(form for pair in toy.TRANSITIVE + toy.INTRANSITIVE for form in pair)


def idle_row_attention(model, head: tuple[int, int], example: Example) -> dict:
    """§11.4 的“注意力汇聚”：一个头在主语及其之后的每一行上看哪里（notebook 11 在页面上一行一行地写了同样的量）。

    按这门语言的文法把这些行分成两类：下一个词可以是动词的行（主动词或从句动词，形式都跟着主语），和下一个词
    不可能是动词的行（修饰语中间：这个头“没事可做”）。返回 {"busy": 前一类的行数, "on_subject": 这些行上分给主语
    的平均权重, "idle": 后一类的行数, "on_start": 这些行上分给主语之前的位置（<s> 和主语的限定词、形容词）的平均
    权重之和, "on_bos": 其中分给 <s> 的}。"""
    weights = example_attention(model, example)["weights"][head]  # (T, T)
    busy, idle = [], []
    for t in range(example.subject_pos, len(example.tokens)):
        nxt = next_word_distribution(example.tokens[: t + 1])
        (busy if any(p > 0 for w, p in nxt.items() if w in VERB_FORMS) else idle).append(t)
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
    return {"busy": len(busy), "on_subject": mean([float(weights[t, example.subject_pos]) for t in busy]),
            "idle": len(idle), "on_start": mean([float(weights[t, : example.subject_pos].sum()) for t in idle]),
            "on_bos": mean([float(weights[t, 0]) for t in idle])}


@torch.no_grad()
def position_probe(model, n_fit: int = 600, n_eval: int = 600, seed: int = 17) -> dict:
    """从模型最后一层的表示里能不能读出“这是第几个位置”：在 n_fit 句上用最小二乘拟合一个线性读出（表示 → 位置），
    在另外 n_eval 句上量平均绝对误差（以位置计）。对照：同样的读出只用词向量（不含任何位置信息），以及永远猜
    平均位置。返回 {"probe": …, "tokens_only": …, "mean_guess": …}，都是平均绝对误差。"""
    model.eval()
    sents = [toy.encode(s.words) for s in toy.generate_corpus(n_fit + n_eval, seed=seed)]

    def features(seqs, fn):
        x = _pad(seqs)
        h = fn(x)  # (B, T, d)
        real = x != toy.PAD_ID
        pos = torch.arange(x.size(1)).expand_as(x)
        return torch.cat([h[real], torch.ones(int(real.sum()), 1)], dim=1).double(), pos[real].double()

    out = {}
    for name, fn in (("probe", lambda x: model.hidden_states(x)[0]), ("tokens_only", model.tok_emb)):
        a, y = features(sents[:n_fit], fn)
        w = torch.linalg.lstsq(a, y[:, None]).solution  # (d + 1, 1)
        b, z = features(sents[n_fit:], fn)
        out[name] = float((b @ w).squeeze(1).sub(z).abs().mean())
    _, y = features(sents[:n_fit], model.tok_emb)
    _, z = features(sents[n_fit:], model.tok_emb)
    out["mean_guess"] = float((z - y.mean()).abs().mean())
    return out


# ----------------------------------------------------------------------------
# notebook 11 用到的每个模型的全部读数
# ----------------------------------------------------------------------------


def evaluate_run(result) -> dict:
    """一个训练好的模型在 notebook 11 里用到的全部读数（notebook 的表、图和结论都从这里来）。

    "test_ppl"、"dev_ppl"（每轮）、"agreement"（{修饰语个数: 准确率}，LENGTH_MODIFIERS，每个 1000 题）；
    迷你 GPT 还有：
    "token_norm"：训练后词向量的平均长度；"position_norm"（只有可学习的位置嵌入）：训练中用到的位置 0–18
    那几行的平均长度；"by_prefix_4"：4 个修饰语的题按前缀长度分组的准确率；
    "heads"：2 个修饰语的 1000 句上每个头分给主语 / 干扰名词的权重（subject_attention）；
    "subject_head"、"subject_head_by_k"：subject_head_by_length 的结果（找主语的头，和它在 2、4、6、10 个
    修饰语时分给主语的平均权重）；"by_verb_position"：4、5 个修饰语的题按预测主动词的位置分组的准确率
    （agreement_by_verb_position）；"examples"：讲义的两个例句上 P(单数动词)、P(复数动词)，以及找主语的头
    分给主语、分给所有干扰名词的权重，任何一个头分给 <s>、分给主语之前的位置（start）、分给从句动词（clause_verbs）
    的最大权重，找主语的头在“没事可做”的行上看哪里
    （idle_row_attention）；"position_probe"：从最后一层的表示线性读出位置的误差（position_probe）。
    """
    from .experiments import splits_for  # 同一份数据（lib/experiments 按设定生成，每个进程只生成一次）

    model = result.model
    pairs = {k: verb_logits(model, agreement_items(k)) for k in LENGTH_MODIFIERS}  # 每道题的 (正确, 错误) 两个 logit
    out = {"test_ppl": evaluate_perplexity(model, splits_for(result.spec)[2], toy.PAD_ID),
           "dev_ppl": list(result.history["dev_ppl"]),
           "agreement": {k: int((p[:, 0] > p[:, 1]).sum()) / len(p) for k, p in pairs.items()}}  # 同 agreement_table
    if result.spec.model != "gpt":
        return out
    out["token_norm"] = float(model.tok_emb.weight.detach().norm(dim=1).mean())  # 训练后词向量的平均长度
    if model.pos_emb is not None:  # 可学习的位置嵌入：训练中用到的那些行（位置 0–18）的平均长度
        out["position_norm"] = float(model.pos_emb.table.weight.detach()[: toy.MAX_TRAIN_LEN - 1].norm(dim=1).mean())
    out["by_prefix_4"] = agreement_by_prefix_length(model, agreement_items(4), pairs[4])
    out["by_verb_position"] = agreement_by_verb_position(model, (4, 5))
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
                                "distractors": float(row[ex.distractor_pos].sum()),
                                "bos": float(att["last_row"][:, :, 0].max()),  # 任何一个头在预测主动词处分给 <s> 的最大权重
                                # 任何一个头在预测主动词处分给主语之前的位置（<s> 和主语的限定词、形容词）的最大权重之和
                                "start": float(att["last_row"][:, :, : ex.subject_pos].sum(-1).max()),
                                # 任何一个头在预测主动词处分给从句动词（sees、likes……）的最大权重之和；没有从句动词时为 0
                                "clause_verbs": float(att["last_row"][:, :, [i for i, w in enumerate(ex.tokens)
                                                                             if w in VERB_FORMS]].sum(-1).max())
                                if any(w in VERB_FORMS for w in ex.tokens) else 0.0,
                                "idle": idle_row_attention(model, best, ex)})
    out["position_probe"] = position_probe(model)
    return out
