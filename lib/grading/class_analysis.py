"""班级报告的统计：每道题（和评分说明里逐条列出的每个部分）的得分率、满分率、零分率、未作答、区分度，
答错的学生最常得到的说明；班级的总分、缺交和迟交。输入是 class_report.load 读出的 ClassData，不读文件。

**区分度**：校正的题目–总分相关（item-rest correlation）：这道题（或这一部分）的得分和同一学生本作业其余自动评分题
总分的 Pearson 相关，只算交了这个 notebook 的学生；部分的“其余”去掉它所在的整个单元格。
低于 ``LOW_DISCRIMINATION`` 的标出来（题目可能有歧义，或检查有问题）。
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .class_report import ClassData

LOW_DISCRIMINATION = 0.1  # 区分度低于它（接近 0 或为负）时标出来
MIN_N_DISCRIMINATION = 5  # 少于这么多学生时区分度无意义

_PART_RE = re.compile(r"^([✓✗]) (.+?)（([\d.]+) 分）(?:：(.*))?$", re.S)
_HEAD_RE = re.compile(r"^(?:部分正确，[\d.]+ / [\d.]+ 分|0 / [\d.]+ 分)。")
_NUM_RE = re.compile(r"\[[\d\s.,eE+\-\[\]naif]*\]|[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def pearson(x, y):
    """(r, 原因)：r 无法定义时为 None，原因说为什么。"""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < MIN_N_DISCRIMINATION:
        return None, f"人数太少（n = {len(x)} < {MIN_N_DISCRIMINATION}）"
    if np.ptp(x) == 0:
        return None, "所有人这一项得分相同"
    if np.ptp(y) == 0:
        return None, "所有人其余题目的总分相同"
    return float(np.corrcoef(x, y)[0, 1]), ""


def parse_parts(message: str | None) -> list | None:
    """评分说明里逐条列出的部分：[(标签, 分值, 对不对, 原因)]；没有逐条列出时 None。"""
    if not message or not _HEAD_RE.match(message):
        return None
    body = _HEAD_RE.sub("", message, count=1)
    out = []
    for piece in re.split(r"；(?=[✓✗] )", body):
        m = _PART_RE.match(piece.strip())
        if not m:
            return None
        out.append((m.group(2), float(m.group(3)), m.group(1) == "✓", (m.group(4) or "").strip()))
    return out


# 说明开头写的是这一部分的输入（“Q 的形状 (3, 5)：”“第 1 组（n = 8、d = 8）：”“f(32, 0.64, seed=7)：”），
# 不是原因：归类时去掉，同一个原因不会因为输入不同分成几类
_INPUT_PREFIX_RE = re.compile(r"^(?:第 \d+ [组批句](?:第 \d+ 句)?(?:（[^）：]*）)?|[A-Za-z_]\w* 的形状 [^：。]*"
                              r"|[A-Za-z_][\w.]*\([^：。]*\))：")
_BLANK_HINT_RE = re.compile(r"^还没有作答")


def hint_cause(text: str) -> str:
    """说明去掉开头描述输入的部分，只留原因。"""
    return _INPUT_PREFIX_RE.sub("", text.strip(), count=1)


def is_blank_hint(text: str) -> bool:
    """“还没有作答（仍是 raise NotImplementedError()）”之类：没作答，不是答错的原因。"""
    return bool(_BLANK_HINT_RE.match(hint_cause(text)))


def hint_key(text: str) -> tuple[str, tuple]:
    """说明去掉开头的输入，其中的数（输入、学生算出的值）换成占位符：同一种错误的说明归成一类。返回 (类别, 这些数)。"""
    text = hint_cause(text)
    nums = tuple(m.group(0) for m in _NUM_RE.finditer(text))
    return _NUM_RE.sub("#", text), nums


def hint_display(key: str, samples: list) -> str:
    """一类说明给人看的样子：每个人都一样的数照写，因人而异的写成“…”。"""
    pieces = key.split("#")
    out = [pieces[0]]
    for i, piece in enumerate(pieces[1:]):
        vals = {s[i] for s in samples if i < len(s)}
        out.append((vals.pop() if len(vals) == 1 else "…") + piece)
    return "".join(out)


@dataclass
class Item:
    notebook: str
    cell: str
    part: str               # "" = 整个单元格
    label: str
    kind: str               # auto / manual
    max_points: float
    scores: list            # 交了这个 notebook 的学生的得分（None = 未知/未评）
    students: list
    blank: int = 0
    hints: list = field(default_factory=list)   # [(说明, 人数)]，人数多的在前
    discrimination: float | None = None
    disc_note: str = ""
    graded: int = 0         # 文字题：助教已评
    pending: int = 0        # 文字题：待评
    auto_zero: int = 0      # 文字题：没作答、自动记 0 分
    wrong: int = 0          # 作答了但没得满分的学生（说明的排名只算他们）

    @property
    def known(self):
        return [s for s in self.scores if s is not None]

    @property
    def n(self):
        return len(self.known)

    def _rate(self, pred):
        k = self.known
        return (sum(1 for s in k if pred(s)) / len(k)) if k else None

    @property
    def mean(self):
        k = self.known
        return float(np.mean(k)) if k else None

    @property
    def difficulty(self):
        return None if self.mean is None or not self.max_points else self.mean / self.max_points

    @property
    def full_rate(self):
        return self._rate(lambda s: s >= self.max_points - 1e-9)

    @property
    def zero_rate(self):
        return self._rate(lambda s: s <= 1e-9)

    @property
    def low_discrimination(self):
        return self.discrimination is not None and self.discrimination < LOW_DISCRIMINATION


def _count_hints(per_student: list) -> list:
    """per_student：每个学生得到的说明列表 → [(说明, 人数)]，每个学生每类只算一次；“还没有作答”不算
    （没作答的比例单独列出）。"""
    groups: dict = defaultdict(list)
    students: dict = defaultdict(set)
    for i, texts in enumerate(per_student):
        for t in texts:
            if is_blank_hint(t):
                continue
            k, nums = hint_key(t)
            groups[k].append(nums)
            students[k].add(i)
    ranked = sorted(groups, key=lambda k: (-len(students[k]), k))
    return [(hint_display(k, groups[k]), len(students[k])) for k in ranked]


def _auto_totals(data: ClassData) -> dict:
    """每个学生全部自动评分题的总分（区分度的“其余”从这里减）。"""
    auto_total = defaultdict(float)
    for (student, nb), sub in data.subs.items():
        for gid, (pts, auto) in data.cells[nb].items():
            if auto:
                auto_total[student] += sub.scores.get(gid) or 0.0
    return auto_total


def _manual_item(nb: str, gid: str, pts: float, label: str, subs: list, studs: list) -> Item:
    """文字题：只有助教打的分算“已评”；没作答自动记的 0 分单独数，不进平均和分布。"""
    scores = [s.scores.get(gid) if gid in s.ta_graded else None for s in subs]
    it = Item(nb, gid, "", label, "manual", pts, scores, studs, blank=sum(1 for s in subs if gid not in s.answered))
    it.graded = sum(1 for x in scores if x is not None)
    it.auto_zero = sum(1 for s in subs if gid not in s.ta_graded and s.scores.get(gid) is not None)
    it.pending = len(scores) - it.graded - it.auto_zero
    return it


def _part_outcome(got: dict, lab: str, full: bool, x, msg: str):
    """一个学生在一个部分上：(对不对, 原因)；说明里没列出这一部分时，整题满分算对、整题 0 分算错（原因是整题的说明），
    否则不知道（None）。"""
    if lab in got:
        return got[lab]
    if full:
        return True, ""
    if x is not None and x <= 1e-9:
        return False, msg
    return None


def _cell_hints(parsed, x, full: bool, is_blank: bool, msg: str) -> list:
    """一个学生在整题上得到的说明（归类用）：满分、没分数、没作答的没有；逐条列出部分的用没得分的部分的原因
    （原因相同就归一类，不管是哪一部分）。"""
    if full or x is None or is_blank:
        return []
    if parsed:
        return [why for _, _, ok, why in parsed if not ok and why]
    return [msg] if msg else []


def _auto_items(nb: str, gid: str, pts: float, label: str, subs: list, studs: list, answer: list,
                auto_total: dict) -> list[Item]:
    """自动评分的单元格一行，评分说明里逐条列出的每个部分各一行（按第一次出现的顺序）。"""
    scores = [s.scores.get(gid) for s in subs]
    blank_of = [bool(answer) and not (set(answer) & s.answered) for s in subs]
    blank = sum(blank_of)
    it = Item(nb, gid, "", label, "auto", pts, scores, studs, blank=blank)
    it.wrong = sum(1 for b, x in zip(blank_of, scores) if not b and x is not None and x < pts - 1e-9)
    parsed = [parse_parts(s.messages.get(gid)) for s in subs]
    part_pts: dict = {}
    for p in parsed:
        for lab, pp, _, _ in p or []:
            part_pts.setdefault(lab, pp)
    cell_hints, part_scores, part_hints = [], {lab: [] for lab in part_pts}, {lab: [] for lab in part_pts}
    for s, p, x, is_blank in zip(subs, parsed, scores, blank_of):
        msg = "" if is_blank else (s.messages.get(gid) or "")  # 没作答的学生的说明不进排名
        got = dict((lab, (ok, why)) for lab, _, ok, why in p or [])
        full = x is not None and x >= pts - 1e-9
        for lab, pp in part_pts.items():
            outcome = _part_outcome(got, lab, full, x, msg)
            ok, why = outcome if outcome is not None else (None, "")
            part_scores[lab].append(None if outcome is None else pp if ok else 0.0)
            part_hints[lab].append([] if outcome is None or ok or is_blank else [why or msg])
        cell_hints.append(_cell_hints(p, x, full, is_blank, msg))
    it.hints = _count_hints(cell_hints)
    _discriminate(it, auto_total)
    items = [it]
    for lab, pp in part_pts.items():
        pit = Item(nb, gid, lab, f"{label} · {lab}", "auto", pp, part_scores[lab], studs, blank=blank)
        pit.hints = _count_hints(part_hints[lab])
        pit.wrong = sum(1 for b, x in zip(blank_of, part_scores[lab]) if not b and x is not None and x < pp - 1e-9)
        _discriminate(pit, auto_total, scores)  # 其余 = 总分去掉整个单元格（同一单元格的其他部分也不算）
        items.append(pit)
    return items


def item_analysis(data: ClassData) -> tuple[list, dict]:
    """全部题目（自动评分的单元格和部分、文字题）。返回 (items, 每个学生的自动评分总分)。"""
    auto_total = _auto_totals(data)
    items = []
    for nb in data.notebooks:
        studs = sorted(s for (s, n) in data.subs if n == nb)
        subs = [data.subs[(s, nb)] for s in studs]
        for gid, (pts, auto) in data.cells[nb].items():
            label = data.labels[nb].get(gid, gid)
            if not auto:
                items.append(_manual_item(nb, gid, pts, label, subs, studs))
            else:
                items += _auto_items(nb, gid, pts, label, subs, studs, data.answer_cells[nb].get(gid, []), auto_total)
    return items, dict(auto_total)


def _discriminate(it: Item, auto_total: dict, cell_scores: list | None = None) -> None:
    """item-rest 相关。cell_scores：部分的行，其余 = 总分 − 整个单元格的得分；否则其余 = 总分 − 这一项。"""
    own = cell_scores if cell_scores is not None else it.scores
    pairs = [(x, auto_total.get(s, 0.0) - (c or 0.0)) for s, x, c in zip(it.students, it.scores, own) if x is not None]
    it.discrimination, it.disc_note = pearson([a for a, _ in pairs], [b for _, b in pairs])


def class_summary(data: ClassData) -> dict:
    """班级：每个学生的总分（全部 notebook，扣迟交分之后）、每个 notebook 的平均分、缺交和迟交。"""
    max_total = sum(p for nb in data.notebooks for p, _ in data.cells[nb].values())
    totals, pending = {}, {}
    per_nb = {}
    for nb in data.notebooks:
        nb_max = sum(p for p, _ in data.cells[nb].values())
        got = []
        for s in data.students:
            sub = data.subs.get((s, nb))
            if sub is None:
                continue
            score = max(0.0, sum(x or 0.0 for x in sub.scores.values()) - sub.penalty)
            got.append(score)
            totals[s] = totals.get(s, 0.0) + score
            pending[s] = pending.get(s, 0) + sum(1 for g, x in sub.scores.items() if x is None and g in data.cells[nb])
        missing = [s for s in data.students if (s, nb) not in data.subs]
        per_nb[nb] = {"max": nb_max, "n": len(got), "mean": float(np.mean(got)) if got else None,
                      "median": float(np.median(got)) if got else None, "missing": len(missing)}
    no_sub = [s for s in data.students if not any((s, nb) in data.subs for nb in data.notebooks)]
    return {"max_total": max_total, "totals": totals, "pending": pending, "per_notebook": per_nb,
            "n_students": len(data.students), "no_submission": no_sub, "late": sorted(data.late)}
