"""班级报告的相似度：哪些学生对相似得值得看一眼，相同的片段在哪里。

只比较学生写的东西（答案单元格和学生自己加的代码单元格、文字题的答案），不比较发布版的模板、只读单元格和测试。
代码用 copydetect 的分词（变量名、函数名、字符串都换成同一个记号，注释和空白去掉；这里用 Python 的 tokenize 做同样的
过滤，快得多）和 winnowing 指纹；发布版里出现过的指纹（模板）去掉；多数人都有的指纹（超过 ``COMMON_SHARE``、
至少 ``COMMON_MIN`` 人）也去掉（大家都会这样写的短答案不算证据）。每个答案单元格单独取指纹。
一对学生的相似度 = 共有的指纹数 / 指纹较少的一方的指纹数。相似只是“值得看一眼”，不是结论，也不影响分数。
"""
from __future__ import annotations

import copy
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from . import repair

if TYPE_CHECKING:
    from .class_report import ClassData

CODE_K = 25               # copydetect 的默认 noise threshold：过滤后的 25 个字符（约一行代码）
TEXT_K = 15               # 文字题：15 个字符（空白合并）
FLAG_SIMILARITY = 0.5     # 相似度至少这么高……
FLAG_MIN_SHARED = 40      # ……而且共有的指纹至少这么多（约三四行代码），才标出来
FLOOR_SIMILARITY = 0.15   # similarity.csv 只写相似度和共有指纹数都超过下限的对
FLOOR_SHARED = 10
MAX_EVIDENCE_PAIRS = 25   # 每个 notebook 在页面上最多展示几对的证据
COMMON_SHARE = 0.1        # 超过这个比例的学生都有的指纹不算证据……
COMMON_MIN = 3            # ……但至少要超过这么多人


def _stable_kgrams(string, k):
    """copydetect 的 k-gram 哈希用 Python 的 hash()，每次运行都不同（PYTHONHASHSEED）：换成固定的多项式哈希，
    同一班的报告每次运行完全相同。"""
    codes = np.frombuffer(string.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    if len(codes) < k:
        return np.array([], dtype=np.int64)
    powers = np.uint64(1_000_003) ** np.arange(k, dtype=np.uint64)
    windows = np.lib.stride_tricks.sliding_window_view(codes, k)
    with np.errstate(over="ignore"):
        h = (windows * powers).sum(axis=1, dtype=np.uint64)
    return (h >> np.uint64(1)).astype(np.int64)


class _StableHashes:
    def __enter__(self):
        from copydetect import utils
        self._old, utils.hashed_kgrams = utils.hashed_kgrams, _stable_kgrams
        return self

    def __exit__(self, *exc):
        from copydetect import utils
        utils.hashed_kgrams = self._old


def _join(parts: list) -> tuple[str, list]:
    """[(标签, 文本)] → 一个文档和每段的 (起点, 终点, 标签)。"""
    doc, spans = "", []
    for label, text in parts:
        start = len(doc)
        doc += text.rstrip() + "\n\n"
        spans.append((start, len(doc), label))
    return doc, spans


_FALLBACK_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d+)?|#[^\n]*|\S")


def filter_python(code: str) -> tuple[str, np.ndarray]:
    """和 copydetect.utils.filter_code 同样的过滤（变量名、函数名 → V，字符串 → S，去掉注释和空白），但用 Python 的
    tokenize（比 pygments 快约 10 倍）。返回过滤后的文本和 copydetect 格式的 offsets（把过滤后的位置映射回原文）。
    语法不完整的代码（tokenize 出错）退回到按正则切分。"""
    import io as _io
    import keyword
    import tokenize
    line_start = [0]
    for line in code.splitlines(keepends=True):
        line_start.append(line_start[-1] + len(line))
    out, pos = [], []

    def emit(text, start):
        out.append(text)
        pos.extend(range(start, start + len(text)) if len(text) > 1 else [start])

    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    try:
        for tok in tokenize.generate_tokens(_io.StringIO(code).readline):
            if tok.type in skip:
                continue
            start = line_start[tok.start[0] - 1] + tok.start[1]
            if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string):
                emit("V", start)
            elif tok.type == tokenize.STRING:
                emit("S", start)
            else:
                emit(tok.string, start)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        out, pos = [], []
        for m in _FALLBACK_TOKEN.finditer(code):
            t = m.group(0)
            if t.startswith("#"):
                continue
            if (t[0].isalpha() or t[0] == "_") and not keyword.iskeyword(t):
                emit("V", m.start())
            else:
                emit(t, m.start())
    filtered = "".join(out)
    j = np.arange(len(pos) + 1, dtype=np.int64)
    orig = np.append(np.asarray(pos, dtype=np.int64), len(code))
    return filtered, np.column_stack([j, orig - j])


def _merge_fingerprints(hashes: set, idx: dict, h: set, hi: dict, base: int) -> None:
    hashes |= h
    for key, pos in hi.items():
        idx.setdefault(key, []).extend(int(i) + base for i in pos)


def code_fingerprint(parts: list, boilerplate=None):
    """学生写的代码单元格 [(标签, 代码)] → copydetect 的 CodeFingerprint（winnowing 指纹，去掉模板）和每段的位置。
    每个单元格单独取指纹（copydetect 的 get_document_fingerprints），没有跨两个单元格的 k-gram：单元格的先后不影响结果，
    一个单元格的结尾和下一个的开头拼起来也不会凑出“相同的片段”。"""
    from copydetect import CodeFingerprint
    from copydetect.utils import get_document_fingerprints, get_token_coverage
    doc, spans = _join(parts)
    filtered, offs, hashes, idx = [], [], set(), {}
    base_f = 0
    for s, e, _ in spans:
        f, o = filter_python(doc[s:e])
        o = o[:-1].copy()
        o[:, 1] += s - base_f
        o[:, 0] += base_f
        _merge_fingerprints(hashes, idx, *get_document_fingerprints(f, CODE_K, 1, boilerplate), base_f)
        filtered.append(f)
        offs.append(o)
        base_f += len(f)
    ftext = "".join(filtered)
    fp = CodeFingerprint.__new__(CodeFingerprint)  # 和 CodeFingerprint(filter=False) 同样的字段，指纹按单元格算
    fp.filename, fp.raw_code, fp.filtered_code, fp.k = "answer.py", doc, ftext, CODE_K
    fp.hashes, fp.hash_idx = hashes, idx
    fp.token_coverage = get_token_coverage(idx, CODE_K, len(ftext))
    offs.append(np.array([[len(ftext), len(doc) - len(ftext)]], dtype=np.int64))
    fp.offsets = np.concatenate(offs)
    return fp, spans


def _norm_text(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def norm_text_map(text: str) -> tuple[str, list]:
    """和 _norm_text 一样（空白合并成一个空格、小写），再给出每个字符在原文里的位置：指纹在规范化的文字上算，
    高亮画在学生的原文上（$A(X)$ 不会显示成 $a(x)$）。"""
    out, pos = [], []
    for m in re.finditer(r"\S+", text):
        if out:
            out.append(" ")
            pos.append(m.start() - 1)
        low = m.group(0).lower()
        if len(low) == len(m.group(0)):
            out.append(low)
            pos.extend(range(m.start(), m.end()))
        else:  # 少数字符小写后变长（İ）：逐字处理
            for j, ch in enumerate(m.group(0)):
                out.append(ch.lower())
                pos.extend([m.start() + j] * len(ch.lower()))
    return "".join(out), pos


def text_fingerprint(parts: list, boilerplate=None) -> tuple[str, list, set, dict, np.ndarray]:
    """文字题答案 [(标签, 原文)] → (原文拼起来的文档, 每段的位置, 指纹, 指纹在规范化文字里的位置, 规范化位置 → 原文位置)。
    每个单元格单独取指纹。"""
    from copydetect.utils import get_document_fingerprints
    doc, spans = _join(parts)
    hashes, idx, where = set(), {}, []
    base = 0
    for s, e, _ in spans:
        norm, pos = norm_text_map(doc[s:e])
        _merge_fingerprints(hashes, idx, *get_document_fingerprints(norm, TEXT_K, 1, boilerplate), base)
        where.extend(p + s for p in pos)
        where.append(e - 1)  # 段与段之间的分隔（一个位置，没有 k-gram 从这里开始跨过去）
        base += len(norm) + 1
    return doc, spans, hashes, idx, np.asarray(where + [len(doc)], dtype=np.int64)


def _to_original(slices: np.ndarray, where: np.ndarray) -> np.ndarray:
    """规范化文字里的区间 [start, end) → 原文里的区间。"""
    if not slices.shape[1]:
        return slices
    starts = where[np.clip(slices[0].astype(np.int64), 0, len(where) - 1)]
    ends = where[np.clip(slices[1].astype(np.int64) - 1, 0, len(where) - 1)] + 1
    return np.array([starts, ends])


@dataclass
class Doc:
    student: str
    code: object = None     # copydetect.CodeFingerprint（学生写的代码）
    code_spans: list = field(default_factory=list)
    text: str = ""          # 文字题答案（学生的原文）
    text_hashes: set = field(default_factory=set)
    text_idx: dict = field(default_factory=dict)
    text_spans: list = field(default_factory=list)
    text_where: object = None  # 规范化文字的位置 → 原文的位置

    def __post_init__(self):
        self._hashes = None

    @property
    def hashes(self) -> set:
        if self._hashes is None:
            self._hashes = (self.code.hashes if self.code is not None else set()) | self.text_hashes
        return self._hashes


def _fingerprints(data: ClassData, nb: str) -> tuple[list, set]:
    from copydetect.utils import get_document_fingerprints
    rel = data.release[nb]
    template = set(code_fingerprint([("", repair._src(c)) for c in rel["cells"] if c.get("cell_type") == "code"])[0].hashes)
    for c in rel["cells"]:
        if c.get("cell_type") == "markdown":
            template |= get_document_fingerprints(_norm_text(repair._src(c)), TEXT_K, 1)[0]
    boiler = np.array(sorted(template), dtype=np.int64)
    docs = []
    for (student, n), sub in sorted(data.subs.items()):
        if n != nb:
            continue
        d = Doc(student)
        if sub.code:
            d.code, d.code_spans = code_fingerprint(sub.code, boiler)
        if sub.text:
            d.text, d.text_spans, d.text_hashes, d.text_idx, d.text_where = text_fingerprint(sub.text, boiler)
        docs.append(d)
    return docs, template


def common_limit(n_docs: int) -> int:
    """多于这么多学生都有的指纹不算证据（大家都会这样写）。"""
    return max(COMMON_MIN, math.ceil(COMMON_SHARE * n_docs))


@dataclass
class Side:
    """并排证据的一边：每个有相同片段的单元格 (标签, 高亮过的 HTML：copydetect 转义了原文、用 <mark> 标出相同的片段)，
    和没有相同片段的单元格个数。"""

    cells: list
    quiet: int


@dataclass
class Pair:
    notebook: str
    a: str
    b: str
    similarity: float
    shared: int
    flagged: bool
    evidence: str = ""                                   # similarity.csv 的一句话：最长的相同片段
    blocks: list = field(default_factory=list)          # 页面上并排的证据：[(“代码”或“文字题”, a 的 Side, b 的 Side)]

    @property
    def html(self) -> str:
        """页面上这一对的并排证据（class_report_html 用模板渲染）。"""
        from .class_report_html import evidence_html
        return evidence_html(self)


def similarity(data: ClassData, nb: str) -> list:
    """一个 notebook 里相似度超过下限的学生对，按相似度从高到低。"""
    with _StableHashes():
        docs, _ = _fingerprints(data, nb)
    docs = [d for d in docs if d.hashes]
    if len(docs) < 2:
        return []
    df = Counter(h for d in docs for h in d.hashes)
    limit = common_limit(len(docs))
    common = {h for h, c in df.items() if c > limit}
    informative = sorted(h for h, c in df.items() if 2 <= c <= limit)
    col = {h: j for j, h in enumerate(informative)}
    sizes = np.array([len(d.hashes - common) for d in docs], dtype=float)
    M = np.zeros((len(docs), max(1, len(informative))), dtype=np.float32)
    for i, d in enumerate(docs):
        js = [col[h] for h in d.hashes if h in col]
        M[i, js] = 1.0
    shared = M @ M.T
    pairs = []
    iu, ju = np.triu_indices(len(docs), k=1)
    s = shared[iu, ju]
    denom = np.minimum(sizes[iu], sizes[ju])
    sim = np.divide(s, denom, out=np.zeros_like(s, dtype=float), where=denom > 0)
    keep = np.nonzero((sim >= FLOOR_SIMILARITY) & (s >= FLOOR_SHARED))[0]
    for k in keep:
        a, b = docs[iu[k]], docs[ju[k]]
        sh, si = int(s[k]), float(min(1.0, sim[k]))
        pairs.append(Pair(nb, a.student, b.student, round(si, 4), sh,
                          si >= FLAG_SIMILARITY and sh >= FLAG_MIN_SHARED))
    pairs.sort(key=lambda p: (-p.similarity, -p.shared, p.a, p.b))
    by = {d.student: d for d in docs}
    for i, p in enumerate(pairs):
        _evidence(p, by[p.a], by[p.b], common, with_html=p.flagged and i < MAX_EVIDENCE_PAIRS)
    return pairs


def _label_at(spans: list, pos: int) -> str:
    return next((lab for s, e, lab in spans if s <= pos < e), "")


def _snippet(doc: str, slices, spans) -> str:
    if not len(slices) or not slices.shape[1]:
        return ""
    i = int(np.argmax(slices[1] - slices[0]))
    text = re.sub(r"\s+", " ", doc[slices[0, i]:slices[1, i]]).strip()
    return f"{_label_at(spans, int(slices[0, i]))}「{text[:70]}{'…' if len(text) > 70 else ''}」"


def _evidence(p: Pair, a: Doc, b: Doc, common: set, with_html: bool) -> None:
    """相同的片段：copydetect 的 compare_files 找出两边的位置（去掉模板和多数人都有的指纹），并排高亮。"""
    from copydetect import compare_files
    from copydetect.utils import find_fingerprint_overlap, get_copied_slices
    notes, blocks = [], []
    if a.code is not None and b.code is not None:
        fa, fb = copy.copy(a.code), copy.copy(b.code)
        for f, orig in ((fa, a.code), (fb, b.code)):
            f.hashes = orig.hashes - common
            f.hash_idx = {h: v for h, v in orig.hash_idx.items() if h in f.hashes}
        _, _, (sa, sb) = compare_files(fa, fb)
        if len(sa) and sa.shape[1]:
            notes.append(f"代码：{_snippet(a.code.raw_code, sa, a.code_spans)} ↔ {_snippet(b.code.raw_code, sb, b.code_spans)}")
            if with_html:
                blocks.append(("代码", _by_cell(a.code.raw_code, sa, a.code_spans, 4),
                               _by_cell(b.code.raw_code, sb, b.code_spans, 4)))
    if a.text_hashes and b.text_hashes:
        ha, hb = a.text_hashes - common, b.text_hashes - common
        ia, ib = find_fingerprint_overlap(ha, hb, a.text_idx, b.text_idx)
        if len(ia):
            sa = _to_original(get_copied_slices(ia, TEXT_K), a.text_where)
            sb = _to_original(get_copied_slices(ib, TEXT_K), b.text_where)
            notes.append(f"文字题：{_snippet(a.text, sa, a.text_spans)} ↔ {_snippet(b.text, sb, b.text_spans)}")
            if with_html:
                blocks.append(("文字题", _by_cell(a.text, sa, a.text_spans, -1), _by_cell(b.text, sb, b.text_spans, -1)))
    p.evidence = f"共有 {p.shared} 个指纹（已去掉模板和多数人都有的）；" + "；".join(notes)
    p.blocks = blocks


def _by_cell(doc: str, slices: np.ndarray, spans: list, truncate: int) -> Side:
    """并排面板的一边：每个有相同片段的单元格一块（标签是单元格的名字，grade_id），相同的片段用 <mark> 标出。"""
    from copydetect.utils import highlight_overlap
    cells, quiet = [], 0
    for s, e, label in spans:
        if not slices.shape[1]:
            break
        inside = (slices[0] < e) & (slices[1] > s)
        if not inside.any():
            quiet += 1
            continue
        sub = np.array([np.clip(slices[0][inside], s, e) - s, np.clip(slices[1][inside], s, e) - s], dtype=np.int64)
        body = highlight_overlap(doc[s:e].rstrip("\n"), sub, "<mark>", "</mark>", truncate=truncate, escape_html=True)[0]
        cells.append((label, body))
    return Side(cells, quiet)
