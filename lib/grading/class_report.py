"""给主讲和助教的班级报告：哪些题全班错得多、错在哪里（该重讲什么），哪些提交相似得需要看一眼。

``python -m lib.grading report ASSIGNMENT [-o DIR]`` 在课程根目录、``grade``（和人工评分）之后运行。只读：
分数来自 nbgrader 的 gradebook（``Gradebook`` API），每道题每个学生得到的评分说明来自 ``autograded/`` 里
notebook 的单元格元数据（``report.GRADING_KEY``，评分流水线写的），学生写的答案也从那里读。不改任何分数。

写出三个文件（默认 ``reports/ASSIGNMENT/``）：
- ``index.html``：一页自包含的报告（图是内嵌的 PNG，不联网也能打开）；
- ``items.csv``：每个评分单元格一行、每个部分一行（题目分析）；
- ``similarity.csv``：每个 notebook 里相似度超过下限的每一对学生一行。

全班都没交的 notebook 不报告（页面上列出名字；``--all-notebooks`` 也列出）。“还没有作答”的说明不进说明的排名。

**部分**：评分说明逐条写出部分分（``exercise_checks._score``：“部分正确，a / b 分。✓ 标签（p 分）；✗ 标签（p 分）：原因”）。
报告从这些说明里读出每个部分的标签、分值和每个学生这一部分的得失：“正确。”（满分）= 每部分都得分，0 分且只写一个原因
= 每部分都没得分。全班没有一个人的说明列出过部分的单元格，只有整题一行。

**区分度**：校正的题目–总分相关（item-rest correlation）：这道题（或这一部分）的得分和同一学生本作业其余自动评分题
总分的 Pearson 相关，只算交了这个 notebook 的学生；部分的“其余”去掉它所在的整个单元格。低于 ``LOW_DISCRIMINATION`` 的标出来（题目可能有歧义，或检查有问题）。

**相似度**：只比较学生写的东西（答案单元格和学生自己加的代码单元格、文字题的答案），不比较发布版的模板、只读单元格和测试。
代码用 copydetect 的分词（pygments：变量名、函数名、字符串都换成同一个记号，注释和空白去掉）和 winnowing 指纹；
发布版里出现过的指纹（模板）去掉；多数人都有的指纹（超过 ``COMMON_SHARE``、至少 ``COMMON_MIN`` 人）也去掉（大家都会这样写的短答案不算证据）。
每个答案单元格单独取指纹。一对学生的相似度 = 共有的指纹数 / 指纹较少的一方的指纹数。相似只是“值得看一眼”，不是结论，也不影响分数。
"""
from __future__ import annotations

import base64
import copy
import csv
import datetime as dt
import html
import io
import json
import math
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import gradebook_io, repair, report

LOW_DISCRIMINATION = 0.1  # 区分度低于它（接近 0 或为负）时标出来
MIN_N_DISCRIMINATION = 5  # 少于这么多学生时区分度无意义
CODE_K = 25               # copydetect 的默认 noise threshold：过滤后的 25 个字符（约一行代码）
TEXT_K = 15               # 文字题：15 个字符（空白合并）
FLAG_SIMILARITY = 0.5     # 相似度至少这么高……
FLAG_MIN_SHARED = 40      # ……而且共有的指纹至少这么多（约三四行代码），才标出来
FLOOR_SIMILARITY = 0.15   # similarity.csv 只写相似度和共有指纹数都超过下限的对
FLOOR_SHARED = 10
MAX_EVIDENCE_PAIRS = 25   # 每个 notebook 在页面上最多展示几对的证据

_PART_RE = re.compile(r"^([✓✗]) (.+?)（([\d.]+) 分）(?:：(.*))?$", re.S)
_HEAD_RE = re.compile(r"^(?:部分正确，[\d.]+ / [\d.]+ 分|0 / [\d.]+ 分)。")
_NUM_RE = re.compile(r"\[[\d\s.,eE+\-\[\]naif]*\]|[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


# ============================================================================ 读入
@dataclass
class Submission:
    student: str
    notebook: str
    scores: dict            # grade_id -> 分数（None = 还没评）
    messages: dict          # grade_id -> 评分说明（autograded notebook 的元数据）
    answered: set           # 有作答的答案单元格 grade_id
    code: list              # [(标签, 代码)]：学生写的代码单元格
    text: list              # [(标签, 文字)]：文字题的答案
    penalty: float = 0.0    # 迟交扣分
    have_file: bool = True
    ta_graded: set = field(default_factory=set)  # 助教打了分的 grade_id（manual_score 不为空）


@dataclass
class ClassData:
    assignment: str
    notebooks: list                 # notebook 名，按顺序
    release: dict                   # notebook -> release 版本
    cells: dict                     # notebook -> {grade_id: (满分, 自动评分?)}
    labels: dict                    # notebook -> {grade_id: 给人看的名字}
    answer_cells: dict              # notebook -> {测试 grade_id: [它对应的答案单元格 grade_id]}
    students: list                  # 全部学生（gradebook + 名单上没交的）
    subs: dict                      # (学生, notebook) -> Submission
    late: set = field(default_factory=set)       # 迟交的学生
    submitted: set = field(default_factory=set)  # 交了这个作业的学生
    left_out: list = field(default_factory=list)  # 没有一个学生交的 notebook（报告里不列出）


def _answer_cells_of_tests(nb: dict) -> dict:
    """每个自动评分的测试单元格 → 它前面最近的一组答案代码单元格（用来判断“没作答”）。"""
    out, current, last_was_test = {}, [], False
    for cell in nb["cells"]:
        m = repair._meta(cell)
        if m.get("solution") and cell.get("cell_type") == "code":
            if last_was_test:
                current = []
            current.append(m.get("grade_id"))
            last_was_test = False
        elif repair.is_test(cell):
            out[m.get("grade_id")] = list(current)
            last_was_test = True
    return out


_TEMPLATE_CACHE: dict = {}


def _template(release: dict) -> tuple[set, dict]:
    key = id(release)
    if key not in _TEMPLATE_CACHE or _TEMPLATE_CACHE[key][0] is not release:
        sources = {repair._norm(repair._src(c)) for c in release["cells"]}
        lines = {repair._gid(c): {ln.strip() for ln in repair._src(c).splitlines() if ln.strip()}
                 for c in release["cells"] if repair._meta(c).get("solution")}
        _TEMPLATE_CACHE[key] = (release, sources, lines)
    return _TEMPLATE_CACHE[key][1], _TEMPLATE_CACHE[key][2]


def _student_parts(nb: dict, release: dict) -> tuple[list, list]:
    """学生写的东西：答案代码单元格、学生自己加的代码单元格（和发布版任何单元格都不同的），文字题答案。"""
    release_sources, template_lines = _template(release)
    code, text = [], []
    for i, cell in enumerate(nb["cells"]):
        src = repair._src(cell)
        if not src.strip() or repair._norm(src) in release_sources:
            continue
        m = repair._meta(cell)
        if m.get("solution"):  # 去掉和发布版的这个单元格相同的行（函数签名、文档字符串、“在这里写你的代码”）
            keep = template_lines.get(m.get("grade_id"), set())
            src = "\n".join(ln for ln in src.splitlines() if ln.strip() not in keep)
            if not src.strip():
                continue
            (code if cell.get("cell_type") == "code" else text).append((m.get("grade_id") or f"#{i + 1}", src))
        elif cell.get("cell_type") == "code" and not repair._is_nbg(cell):
            code.append((f"第 {i + 1} 个单元格（学生加的）", src))
    return code, text


def _gradebook_rows(course: Path, assignment: str):
    """gradebook 里这个作业的全部分数：[(学生, notebook, grade_id, score 或 None)]，以及学生、迟交、扣分、截止时间。"""
    from nbgrader.api import (Grade, GradeCell, Gradebook, MissingEntry, Notebook,
                              SubmittedAssignment, SubmittedNotebook)
    db = gradebook_io.course_db_url(course)  # nbgrader_config.py 的 CourseDirectory.db_url（默认 gradebook.db）
    if gradebook_io.missing(db):
        raise FileNotFoundError(f"找不到 {gradebook_io.describe(db)}：请在课程根目录运行，并先运行 grade")
    gradebook_io._patch_alembic()
    with Gradebook(db) as gb:
        try:
            a = gb.find_assignment(assignment)
        except MissingEntry:
            raise FileNotFoundError(f"gradebook（{gradebook_io.describe(db)}）里没有作业 {assignment}："
                                    f"请先运行 grade {assignment}") from None
        due = a.duedate
        rows = (gb.db.query(SubmittedAssignment.student_id, Notebook.name, GradeCell.name, Grade.auto_score,
                            Grade.manual_score, Grade.extra_credit)
                .select_from(Grade)
                .join(SubmittedNotebook, Grade.notebook_id == SubmittedNotebook.id)
                .join(SubmittedAssignment, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
                .join(Notebook, SubmittedNotebook.notebook_id == Notebook.id)
                .join(GradeCell, Grade.cell_id == GradeCell.id)
                .filter(SubmittedAssignment.assignment_id == a.id).all())
        subs = (gb.db.query(SubmittedAssignment.student_id, SubmittedAssignment.timestamp,
                            SubmittedAssignment.extension).filter(SubmittedAssignment.assignment_id == a.id).all())
        pen = (gb.db.query(SubmittedAssignment.student_id, Notebook.name, SubmittedNotebook.late_submission_penalty)
               .select_from(SubmittedNotebook)
               .join(SubmittedAssignment, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
               .join(Notebook, SubmittedNotebook.notebook_id == Notebook.id)
               .filter(SubmittedAssignment.assignment_id == a.id).all())
        students = [s.id for s in gb.students]
    out = []
    for student, nb, gid, auto, manual, extra in rows:
        score = manual if manual is not None else auto
        if score is not None and extra is not None:
            score += extra
        out.append((student, nb, gid, None if score is None else float(score), manual is not None))
    late = {s for s, ts, ext in subs if ts is not None and due is not None and ts > due + (ext or dt.timedelta())}
    penalties = {(s, nb): float(p or 0) for s, nb, p in pen}
    return out, students, {s for s, _, _ in subs}, late, penalties


def _grades_csv(course: Path) -> tuple[set, set]:
    """grades.csv 里 (名单上没交的学生, 标了 late 的学生)：没交的不在 gradebook 里；LMS 自己标的迟交
    （例如 Canvas 的 late）在没有截止时间时也只记在这里。"""
    path = course / "grades.csv"
    if not path.exists():
        return set(), set()
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("student_id")]
    return ({r["student_id"] for r in rows if r.get("status") == "missing"},
            {r["student_id"] for r in rows if "late" in (r.get("status") or "").split("+")})


def load(course: Path, assignment: str, all_notebooks: bool = False) -> ClassData:
    """all_notebooks：没有一个学生交的 notebook 也列出来（默认不列，名字记在 left_out）。"""
    from .pipeline import release_notebooks
    course = Path(course)
    release = release_notebooks(course, assignment)
    notebooks = list(release)
    cells = {nb: gradebook_io.grade_cells(rel) for nb, rel in release.items()}
    rows, students, submitted, late, penalties = _gradebook_rows(course, assignment)
    by = defaultdict(dict)
    ta = defaultdict(set)
    for student, nb, gid, score, by_ta in rows:
        by[(student, nb)][gid] = score
        if by_ta:
            ta[(student, nb)].add(gid)
    subs = {}
    for (student, nb), scores in by.items():
        if nb not in release:
            continue
        path = course / "autograded" / student / assignment / f"{nb}.ipynb"
        if not path.exists():
            path = course / "submitted" / student / assignment / f"{nb}.ipynb"
        if not path.exists():  # 交了别的 notebook，这一个没交（nbgrader 照样建了空的 SubmittedNotebook）
            continue
        try:
            agnb = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        messages = {repair._gid(c): (c.get("metadata") or {}).get(report.GRADING_KEY, {}).get("message")
                    for c in agnb.get("cells", []) if repair._gid(c)}
        code, text = _student_parts(agnb, release[nb])
        subs[(student, nb)] = Submission(student, nb, scores, {g: m for g, m in messages.items() if m},
                                         repair.answered_cells(agnb, release[nb]), code, text,
                                         penalties.get((student, nb), 0.0), ta_graded=ta[(student, nb)])
    handed = {nb for _, nb in subs}
    left_out = [nb for nb in notebooks if nb not in handed]
    if not all_notebooks:  # 全班都没交的 notebook（还没布置、或这次只交前几个）：不进统计，也不算进总分的满分
        notebooks = [nb for nb in notebooks if nb in handed]
    roster_missing, csv_late = _grades_csv(course)
    everyone = sorted(set(students) | roster_missing)
    late = late | csv_late
    return ClassData(assignment, notebooks, release, cells, {nb: _labels(rel) for nb, rel in release.items()},
                     {nb: _answer_cells_of_tests(rel) for nb, rel in release.items()}, everyone, subs, late,
                     submitted, left_out)


def _labels(rel: dict) -> dict:
    """report.labels 的名字；标题以问号、感叹号或句号结尾时不再接“：”（“需要几个头？：文字题” → “需要几个头？（文字题）”）。"""
    return {g: re.sub(r"([？！。?!])：(.+)$", r"\1（\2）", lab) for g, lab in report.labels(rel).items()}


# ============================================================================ 统计
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


def item_analysis(data: ClassData) -> tuple[list, dict]:
    """全部题目（自动评分的单元格和部分、文字题）。返回 (items, 每个学生的自动评分总分)。"""
    auto_total = defaultdict(float)
    for (student, nb), sub in data.subs.items():
        for gid, (pts, auto) in data.cells[nb].items():
            if auto:
                auto_total[student] += sub.scores.get(gid) or 0.0
    items = []
    for nb in data.notebooks:
        studs = sorted(s for (s, n) in data.subs if n == nb)
        subs = [data.subs[(s, nb)] for s in studs]
        for gid, (pts, auto) in data.cells[nb].items():
            label = data.labels[nb].get(gid, gid)
            if not auto:  # 只有助教打的分算“已评”；没作答自动记的 0 分单独数，不进平均和分布
                scores = [s.scores.get(gid) if gid in s.ta_graded else None for s in subs]
                it = Item(nb, gid, "", label, "manual", pts, scores, studs,
                          blank=sum(1 for s in subs if gid not in s.answered))
                it.graded = sum(1 for x in scores if x is not None)
                it.auto_zero = sum(1 for s in subs if gid not in s.ta_graded and s.scores.get(gid) is not None)
                it.pending = len(scores) - it.graded - it.auto_zero
                items.append(it)
                continue
            scores = [s.scores.get(gid) for s in subs]
            answer = data.answer_cells[nb].get(gid, [])
            blank_of = [bool(answer) and not (set(answer) & s.answered) for s in subs]
            blank = sum(blank_of)
            it = Item(nb, gid, "", label, "auto", pts, scores, studs, blank=blank)
            it.wrong = sum(1 for b, x in zip(blank_of, scores) if not b and x is not None and x < pts - 1e-9)
            # 部分：从说明里读出标签和分值（按第一次出现的顺序）
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
                    if lab in got:
                        ok, why = got[lab]
                    elif full:
                        ok, why = True, ""
                    elif x is not None and x <= 1e-9:
                        ok, why = False, msg
                    else:
                        part_scores[lab].append(None)
                        part_hints[lab].append([])
                        continue
                    part_scores[lab].append(pp if ok else 0.0)
                    part_hints[lab].append([] if ok or is_blank else [why or msg])
                if full or x is None:
                    cell_hints.append([])
                elif is_blank:
                    cell_hints.append([])
                elif p:
                    cell_hints.append([why for _, _, ok, why in p if not ok and why])  # 原因相同就归一类，不管是哪一部分
                else:
                    cell_hints.append([msg] if msg else [])
            it.hints = _count_hints(cell_hints)
            _discriminate(it, auto_total)
            items.append(it)
            for lab, pp in part_pts.items():
                pit = Item(nb, gid, lab, f"{label} · {lab}", "auto", pp, part_scores[lab], studs, blank=blank)
                pit.hints = _count_hints(part_hints[lab])
                pit.wrong = sum(1 for b, x in zip(blank_of, part_scores[lab]) if not b and x is not None and x < pp - 1e-9)
                _discriminate(pit, auto_total, scores)  # 其余 = 总分去掉整个单元格（同一单元格的其他部分也不算）
                items.append(pit)
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


# ============================================================================ 相似度
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


COMMON_SHARE = 0.1  # 超过这个比例的学生都有的指纹不算证据……
COMMON_MIN = 3      # ……但至少要超过这么多人


def common_limit(n_docs: int) -> int:
    """多于这么多学生都有的指纹不算证据（大家都会这样写）。"""
    return max(COMMON_MIN, math.ceil(COMMON_SHARE * n_docs))


@dataclass
class Pair:
    notebook: str
    a: str
    b: str
    similarity: float
    shared: int
    flagged: bool
    evidence: str = ""
    html: str = ""


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
    from copydetect.utils import find_fingerprint_overlap, get_copied_slices, highlight_overlap
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
    if with_html:
        p.html = "".join(f'<div class="pair"><div class="side"><div class="who">{html.escape(p.a)} · {kind}</div>'
                         f'{left}</div><div class="side"><div class="who">{html.escape(p.b)} · {kind}</div>'
                         f'{right}</div></div>' for kind, left, right in blocks)


def _by_cell(doc: str, slices: np.ndarray, spans: list, truncate: int) -> str:
    """并排面板的一边：每个有相同片段的单元格一块，上面写单元格的名字（grade_id），相同的片段用 <mark> 标出。"""
    from copydetect.utils import highlight_overlap
    out, quiet = [], 0
    for s, e, label in spans:
        if not slices.shape[1]:
            break
        inside = (slices[0] < e) & (slices[1] > s)
        if not inside.any():
            quiet += 1
            continue
        sub = np.array([np.clip(slices[0][inside], s, e) - s, np.clip(slices[1][inside], s, e) - s], dtype=np.int64)
        body = highlight_overlap(doc[s:e].rstrip("\n"), sub, "<mark>", "</mark>", truncate=truncate, escape_html=True)[0]
        out.append(f'<div class="cell-label">单元格 <code>{html.escape(label)}</code></div><pre>{body}</pre>')
    if quiet:
        out.append(f'<div class="muted cell-label">另有 {quiet} 个单元格没有相同的片段。</div>')
    return "".join(out)


# ============================================================================ 图（英文标签，不用中文字体）
def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return '<img alt="plot" src="data:image/png;base64,' + base64.b64encode(buf.getvalue()).decode() + '">'


def _hist(values, max_points, width=2.6, height=1.3, bins=None, xlabel="points") -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(width, height))
    if values:
        if bins is None:
            edges = np.linspace(0, max_points, min(11, max(2, int(round(max_points * 2)) + 1))) if max_points else [0, 1]
            bins = np.append(np.asarray(edges, float)[:-1], max_points + 1e-9) if max_points else 2
        ax.hist(values, bins=bins, color="#4a78b5", edgecolor="white")
    ax.set_xlim(0, max_points if max_points else 1)
    ax.tick_params(labelsize=7)
    ax.set_xlabel(xlabel, fontsize=7)
    ax.spines[["top", "right"]].set_visible(False)
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.32, top=0.95)  # tight_layout 每张图要多花 0.1 秒
    return _png(fig)


def _bar_means(per_nb: dict) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(per_nb)
    vals = [100 * (v["mean"] or 0) / v["max"] if v["max"] else 0 for v in per_nb.values()]
    fig, ax = plt.subplots(figsize=(5.2, 0.35 * len(names) + 0.6))
    ax.barh(range(len(names)), vals, color="#4a78b5")
    ax.set_yticks(range(len(names)), [n[:24] for n in names], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("mean score (% of max)", fontsize=7)
    ax.tick_params(labelsize=7)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout(pad=0.3)
    return _png(fig)


# ============================================================================ 输出
ITEM_FIELDS = ["notebook", "cell", "part", "max_points", "mean_points", "full_rate", "zero_rate", "discrimination",
               "top_hint", "top_hint_count", "kind", "label", "n", "difficulty", "blank_rate", "low_discrimination",
               "discrimination_note", "graded", "pending", "auto_zero"]
PAIR_FIELDS = ["notebook", "student_a", "student_b", "similarity", "flagged", "evidence", "shared_fingerprints"]


def _f(x, nd=3) -> str:
    return "" if x is None else f"{round(x, nd):g}"


def item_row(it: Item) -> dict:
    top = it.hints[0] if it.hints else ("", 0)
    n_all = len(it.scores)
    return {"notebook": it.notebook, "cell": it.cell, "part": it.part, "max_points": f"{it.max_points:g}",
            "mean_points": _f(it.mean), "full_rate": _f(it.full_rate), "zero_rate": _f(it.zero_rate),
            "discrimination": _f(it.discrimination), "top_hint": top[0], "top_hint_count": top[1] if it.hints else "",
            "kind": it.kind, "label": it.label, "n": it.n, "difficulty": _f(it.difficulty),
            "blank_rate": _f(it.blank / n_all if n_all else None),
            "low_discrimination": str(it.low_discrimination).lower(), "discrimination_note": it.disc_note,
            "graded": it.graded if it.kind == "manual" else "", "pending": it.pending if it.kind == "manual" else "",
            "auto_zero": it.auto_zero if it.kind == "manual" else ""}


def _write_csv(path: Path, fields: list, rows: list) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="", encoding="utf-8-sig") as f:  # 带 BOM：中文 Windows 上的 Excel 不乱码
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


CSS = """
body{font-family:"Noto Sans CJK SC","PingFang SC","Microsoft YaHei",sans-serif;margin:0 auto;max-width:1180px;
padding:16px 24px;color:#222;line-height:1.5;font-size:15px}
h1{font-size:24px}h2{font-size:20px;border-bottom:2px solid #4a78b5;padding-bottom:4px;margin-top:32px}
h3{font-size:17px;margin:20px 0 6px}nav a{margin-right:14px}
table{border-collapse:collapse;width:100%;margin:8px 0 14px;font-size:14px}
th,td{border:1px solid #ddd;padding:4px 6px;text-align:left;vertical-align:top}th{background:#f2f5fa}
td.num{text-align:right;white-space:nowrap}tr.part td{background:#fafafa;font-size:13px}
tr.part td:first-child{padding-left:22px}.warn{color:#b02a2a;font-weight:bold}.muted{color:#777}
.note{background:#f6f8fb;border-left:4px solid #4a78b5;padding:8px 12px;margin:10px 0}
.hints{margin:2px 0 0 0;padding-left:18px;font-size:13px}.pair{display:flex;gap:10px;margin:6px 0 14px}
.side{flex:1;min-width:0}.side pre{white-space:pre-wrap;word-break:break-all;background:#f7f7f7;padding:6px;
font-size:12px;max-height:340px;overflow:auto;margin:0}.who{font-weight:bold;font-size:13px}
.cell-label{font-size:12px;margin:6px 0 2px}mark{background:#ffe08a}.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #ddd;
border-radius:6px;padding:8px 12px;min-width:120px}.card b{display:block;font-size:20px}
"""


def _hint_lines(it: Item, denom: int, limit=3) -> str:
    if not it.hints or not denom:
        return ""
    lis = "".join(f"<li>{100 * c / denom:.0f}% 的学生（{c} / {denom}）得到这条说明：{html.escape(t)}</li>"
                  for t, c in it.hints[:limit])
    return f'<ul class="hints">{lis}</ul>'


def render_html(data: ClassData, items: list, summary: dict, pairs: dict, seconds: float) -> str:
    e = html.escape
    out = [f'<!DOCTYPE html><html lang="zh-CN"><head><meta charset="utf-8">'
           f'<meta name="viewport" content="width=device-width, initial-scale=1">'
           f"<title>{e(data.assignment)} 班级报告</title><style>{CSS}</style></head><body>"]
    now = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    out.append(f"<h1>作业 {e(data.assignment)} 的班级报告</h1>"
               f'<p class="muted">生成于 {now}，用时 {seconds:.1f} 秒。数据来自 gradebook.db 和 autograded/；'
               "这份报告只读，不改任何分数。</p>"
               '<nav><a href="#class">班级概况</a><a href="#reteach">该重讲什么</a><a href="#items">题目分析</a>'
               '<a href="#manual">文字题</a><a href="#similarity">相似的提交</a><a href="#method">算法说明</a></nav>')
    # ---------------------------------------------------------------- 班级
    tot = summary["totals"]
    mt = summary["max_total"]
    vals = list(tot.values())
    n_nb_missing = sum(v["missing"] for v in summary["per_notebook"].values())
    pend = sum(summary["pending"].values())
    out.append('<section id="class"><h2>班级概况</h2><div class="cards">'
               f'<div class="card">学生<b>{summary["n_students"]}</b></div>'
               f'<div class="card">交了作业<b>{len(tot)}</b></div>'
               f'<div class="card">一份也没交<b>{len(summary["no_submission"])}</b></div>'
               f'<div class="card">缺交的 notebook<b>{n_nb_missing}</b></div>'
               f'<div class="card">迟交<b>{len(summary["late"])}</b></div>'
               f'<div class="card">待人工评分的单元格<b>{pend}</b></div></div>')
    if data.left_out:
        out.append('<p class="left-out">全班都没有交的 notebook 不在这份报告里（也不算进总分的满分）：'
                   + "、".join(e(nb) for nb in data.left_out)
                   + '。要列出它们，加 <code>--all-notebooks</code>。</p>')
    if vals:
        out.append(f"<p>总分（{len(data.notebooks)} 个 notebook，满分 {mt:g}，已扣迟交分；待人工评分的单元格按 0 计）：平均 {np.mean(vals):.1f}，"
                   f"中位数 {np.median(vals):.1f}，最低 {min(vals):g}，最高 {max(vals):g}。</p>")
        out.append(_hist(vals, mt, width=5.2, height=1.8, bins=np.linspace(0, mt + 1e-9, 21) if mt else None,
                         xlabel="total points"))
    else:
        out.append("<p>还没有任何已评分的提交。</p>")
    out.append("<h3>各 notebook</h3><table><tr><th>notebook</th><th>满分</th><th>交了</th><th>缺交</th><th>平均</th>"
               "<th>中位数</th><th>平均得分率</th></tr>")
    for nb, v in summary["per_notebook"].items():
        rate = None if v["mean"] is None or not v["max"] else v["mean"] / v["max"]
        out.append(f'<tr><td>{e(nb)}</td><td class="num">{v["max"]:g}</td><td class="num">{v["n"]}</td>'
                   f'<td class="num">{v["missing"]}</td><td class="num">{_f(v["mean"], 2) or "—"}</td>'
                   f'<td class="num">{_f(v["median"], 2) or "—"}</td><td class="num">{_pct(rate)}</td></tr>')
    out.append("</table>")
    if any(v["n"] for v in summary["per_notebook"].values()):
        out.append(_bar_means(summary["per_notebook"]))
    if summary["late"]:
        out.append("<p>迟交的学生：" + "、".join(e(s) for s in summary["late"][:50])
                   + ("……" if len(summary["late"]) > 50 else "") + "</p>")
    if summary["no_submission"]:
        out.append("<p>一份也没交的学生：" + "、".join(e(s) for s in summary["no_submission"][:50])
                   + ("……" if len(summary["no_submission"]) > 50 else "") + "</p>")
    out.append("</section>")
    # ---------------------------------------------------------------- 该重讲什么
    cells = [it for it in items if it.kind == "auto" and not it.part and it.difficulty is not None]
    hardest = sorted(cells, key=lambda it: (it.difficulty, it.notebook, it.cell))[:5]
    out.append('<section id="reteach"><h2>该重讲什么</h2><p>得分率最低的自动评分题，和答错的学生最常得到的评分说明'
               "（说明里写着最可能的原因；没作答的学生不算在说明的排名里，他们的比例单独列出："
               "没作答多说明没时间或没开始，不一定是没懂）：</p><ol>")
    for it in hardest:
        n_all = len(it.scores)
        top = (f"答错的学生中最常见的说明：{e(it.hints[0][0])}（{it.hints[0][1]} / {it.wrong} 人）" if it.hints and it.wrong
               else "答错的学生没有评分说明" if it.wrong else "作答了的学生都得了满分")
        blank = it.blank / n_all if n_all else None
        out.append(f"<li><b>{e(it.label)}</b>（{e(it.notebook)}）：平均得分率 {_pct(it.difficulty)}，"
                   f"零分 {_pct(it.zero_rate)}，没作答 {_pct(blank)}。{top}</li>")
    if not hardest:
        out.append("<li>还没有已评分的自动评分题。</li>")
    out.append("</ol>")
    low = [it for it in items if it.low_discrimination]
    if low:
        out.append('<p class="warn">区分度接近 0 或为负的题（学得好的学生在这道题上并不比别人好：题目可能有歧义，'
                   "或检查有问题，值得复查）：" + "、".join(e(it.label) for it in low) + "</p>")
    out.append("</section>")
    # ---------------------------------------------------------------- 题目分析
    out.append('<section id="items"><h2>题目分析</h2><div class="note">'
               "<b>得分率</b>（难度）= 平均分 / 满分。<b>满分率 / 零分率</b>：得满分 / 0 分的学生比例。"
               "<b>未作答</b>：这道题对应的答案单元格和发布版完全相同的学生比例。"
               "<b>区分度</b>：校正的题目–总分相关（item-rest correlation）——这一项的得分和同一学生<em>其余</em>"
               f"自动评分题总分的 Pearson 相关。其余 = 这份报告里的 notebook（{e('、'.join(data.notebooks))}）"
               "全部自动评分题的总分减去这道题；部分（缩进的行）减去它所在的<em>整个单元格</em>（同一单元格的其他部分"
               f"和它来自同一段代码，不算“其余”）。只算交了这个 notebook 的学生；低于 {LOW_DISCRIMINATION:g} 标红。"
               f"少于 {MIN_N_DISCRIMINATION} 人或所有人得分相同时无法计算，表里写明原因。"
               "部分（缩进的行）来自评分说明里逐条列出的 ✓ / ✗；每部分的得分只有 0 或满分两种，所以只给满分率和零分率。"
               "说明按原因归类：开头描述输入的部分（“Q 的形状 (3, 5)：”“第 1 组：”）去掉，因人而异的数写成“…”，"
               "每个学生每类只算一次；“还没有作答”不算在说明里（见“未作答”一列）。</div>")
    for nb in data.notebooks:
        nb_items = [it for it in items if it.notebook == nb and it.kind == "auto"]
        if not nb_items:
            continue
        out.append(f"<h3>{e(nb)}</h3><table><tr><th>题目</th><th>满分</th><th>人数</th><th>平均</th><th>得分率</th>"
                   "<th>满分率</th><th>零分率</th><th>未作答</th><th>区分度</th><th>分布</th></tr>")
        for it in nb_items:
            n_all = len(it.scores)
            disc = (f'<span class="warn">{it.discrimination:.2f} ⚠</span>' if it.low_discrimination else
                    f"{it.discrimination:.2f}" if it.discrimination is not None else
                    f'<span class="muted">无法计算：{e(it.disc_note)}</span>')
            cls = ' class="part"' if it.part else ""
            name = e(it.part) if it.part else f"<b>{e(it.label)}</b><br><code>{e(it.cell)}</code>"
            plot = "" if it.part else _hist(it.known, it.max_points)
            out.append(f"<tr{cls}><td>{name}{_hint_lines(it, n_all)}</td><td class='num'>{it.max_points:g}</td>"
                       f"<td class='num'>{it.n}</td><td class='num'>{_f(it.mean, 2) or '—'}</td>"
                       f"<td class='num'>{_pct(it.difficulty)}</td><td class='num'>{_pct(it.full_rate)}</td>"
                       f"<td class='num'>{_pct(it.zero_rate)}</td>"
                       f"<td class='num'>{_pct(it.blank / n_all if n_all else None)}</td><td>{disc}</td>"
                       f"<td>{plot}</td></tr>")
        out.append("</table>")
    out.append("</section>")
    # ---------------------------------------------------------------- 文字题
    manual = [it for it in items if it.kind == "manual"]
    out.append('<section id="manual"><h2>文字题（人工评分进度）</h2>')
    if manual:
        out.append("<table><tr><th>题目</th><th>满分</th><th>交了</th><th>助教已评</th><th>待评</th>"
                   "<th>没作答（自动 0 分）</th><th>助教评的平均</th><th>助教评的分数分布</th></tr>")
        for it in manual:
            dist = Counter(it.known)
            dist_s = "，".join(f"{k:g} 分 × {v}" for k, v in sorted(dist.items())) or "助教还没有评分"
            out.append(f"<tr><td><b>{e(it.label)}</b><br><code>{e(it.cell)}</code>（{e(it.notebook)}）</td>"
                       f"<td class='num'>{it.max_points:g}</td><td class='num'>{len(it.scores)}</td>"
                       f"<td class='num'>{it.graded}</td><td class='num'>{it.pending}</td>"
                       f"<td class='num'>{it.auto_zero}</td><td class='num'>{_f(it.mean, 2) or '—'}</td><td>{dist_s}</td></tr>")
        out.append("<p>" + "；".join(f"{e(it.label)}：助教已评 {it.graded}，没作答自动 0 分 {it.auto_zero}，待评 {it.pending}"
                                     for it in manual) + "。平均和分布只算助教打的分。</p>")
        out.append("</table><p>待评的在 formgrader 里打分，然后运行 <code>python -m lib.grading feedback "
                   f"{e(data.assignment)}</code> 和这个报告。</p>")
    else:
        out.append("<p>这个作业没有文字题。</p>")
    out.append("</section>")
    # ---------------------------------------------------------------- 相似度
    flagged = [p for ps in pairs.values() for p in ps if p.flagged]
    out.append('<section id="similarity"><h2>相似的提交</h2><div class="note">'
               "<b>相似不等于抄袭。</b>这里只列出值得花一分钟看一眼的学生对，不改任何分数；请对照下面并排的相同片段"
               "（黄色）判断，必要时和学生谈。只比较学生写的内容（答案单元格、自己加的代码单元格、文字题），"
               "发布版的模板和测试不算；改变量名、改注释、加空行、调换单元格顺序不影响结果。"
               f"相似度 = 共有的指纹 / 较少一方的指纹；标出的条件：相似度 ≥ {FLAG_SIMILARITY:g} 且共有指纹 ≥ {FLAG_MIN_SHARED}。"
               "多数人都有的片段（例如一行的 <code>return x @ W</code>）不算证据。全部超过下限的对在 similarity.csv。</div>")
    out.append(f"<p>标出的学生对：{len(flagged)}。</p>")
    for nb in data.notebooks:
        ps = pairs.get(nb, [])
        fl = [p for p in ps if p.flagged]
        if not fl:
            continue
        out.append(f"<h3>{e(nb)}：{len(fl)} 对</h3>")
        for p in fl[:MAX_EVIDENCE_PAIRS]:
            out.append(f'<div class="flagged-pair"><p><b>{e(p.a)}</b> 和 <b>{e(p.b)}</b>：相似度 {p.similarity:.2f}，'
                       f"共有 {p.shared} 个指纹。</p>{p.html}</div>")
        if len(fl) > MAX_EVIDENCE_PAIRS:
            out.append(f"<p>还有 {len(fl) - MAX_EVIDENCE_PAIRS} 对，见 similarity.csv。</p>")
    if not flagged:
        out.append("<p>没有需要查看的学生对。</p>")
    out.append("</section>")
    out.append('<section id="method"><h2>算法说明</h2><ul>'
               "<li>分数：nbgrader 的 gradebook（人工分优先于自动分，加上额外加分）；评分说明：autograded/ 里每个单元格的元数据。</li>"
               "<li>区分度：校正的题目–总分相关（item-rest correlation），见“题目分析”。</li>"
               "<li>相似度：copydetect 的分词和 winnowing 指纹（k = "
               f"{CODE_K} 个过滤后的代码字符；文字题 k = {TEXT_K} 个字符），每个答案单元格单独取指纹；去掉发布版的指纹"
               f"和超过 {100 * COMMON_SHARE:g}%（至少 {COMMON_MIN} 个）学生都有的指纹。文字题的指纹不分大小写、"
               "空白合并，页面上显示学生的原文。检测不到：换了算法或结构的改写、用自己的话改写的文字题、和全班多数人一样的答案。</li>"
               "</ul></section></body></html>")
    return "".join(out)


def run(course: Path, assignment: str, out_dir: Path | None = None, quiet: bool = False,
        all_notebooks: bool = False) -> dict:
    """生成报告；返回 {"dir", "items", "pairs", "seconds"}。all_notebooks：全班都没交的 notebook 也列出（空表）。"""
    from .pipeline import _ensure_venv_on_path, _skip_slow_optional_imports
    _skip_slow_optional_imports()
    _ensure_venv_on_path()
    import warnings
    warnings.filterwarnings("ignore", module=r"nbgrader\..*")
    t0 = time.monotonic()
    course = Path(course)
    out_dir = Path(out_dir) if out_dir else course / "reports" / assignment
    data = load(course, assignment, all_notebooks)
    items, _ = item_analysis(data)
    summary = class_summary(data)
    t1 = time.monotonic()
    pairs = {nb: similarity(data, nb) for nb in data.notebooks}
    t2 = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_csv(out_dir / "items.csv", ITEM_FIELDS, [item_row(it) for it in items])
    _write_csv(out_dir / "similarity.csv", PAIR_FIELDS,
               [{"notebook": p.notebook, "student_a": p.a, "student_b": p.b, "similarity": f"{p.similarity:.4f}",
                 "flagged": str(p.flagged).lower(), "evidence": p.evidence, "shared_fingerprints": p.shared}
                for nb in data.notebooks for p in pairs[nb]])
    page = render_html(data, items, summary, pairs, time.monotonic() - t0)
    (out_dir / "index.html").write_text(page, encoding="utf-8")
    seconds = time.monotonic() - t0
    if not quiet:
        n_flag = sum(p.flagged for ps in pairs.values() for p in ps)
        print(f"报告：{out_dir / 'index.html'}（{len(data.subs)} 份提交，{len(items)} 道题/部分，"
              f"{n_flag} 对相似的提交待查看；用时 {seconds:.1f} 秒）")
    return {"dir": out_dir, "items": items, "pairs": pairs, "summary": summary, "data": data, "seconds": seconds,
            "t_stats": t1 - t0, "t_similarity": t2 - t1}
