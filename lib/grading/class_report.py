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

**区分度**：校正的题目–总分相关（item-rest correlation），见 class_analysis.py。

**相似度**：只比较学生写的东西，代码用 copydetect 的分词和 winnowing 指纹，去掉模板和多数人都有的指纹，
见 class_similarity.py。相似只是“值得看一眼”，不是结论，也不影响分数。

分成四步，各在自己的文件里：load（这里：gradebook 和 autograded/ → ClassData）→ class_analysis（题目分析、班级概况）→
class_similarity（相似的学生对）→ class_report_html（页面，模板在 templates/class_report/）和这里的两个 CSV。
"""
from __future__ import annotations

import csv
import datetime as dt
import json
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from . import gradebook_io, repair, report
from .class_analysis import Item, class_summary, item_analysis
from .class_report_html import render_html
from .class_similarity import similarity
from .flags import Status


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
            {r["student_id"] for r in rows if Status.LATE.value in Status.split(r.get("status") or "")})


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
