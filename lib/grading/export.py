"""把成绩写回 LMS：``python -m lib.grading export ASSIGNMENT --lms canvas|moodle|blackboard|csv``。

分数来自 nbgrader 的 gradebook（包括 formgrader 里给的人工分，减去 nbgrader 的迟交扣分，和 ``nbgrader export``
的算法相同）。``--template`` 是从 LMS 下载的那个文件，原样保留其余一切，只填成绩：
- Canvas 成绩册导出（Grades → Export）：保留所有列和 Points Possible 行，把作业总分写进 ``--column`` 那一列
  （Canvas 的作业列名是 “作业名 (编号)”，写作业名就行；没有这一列时新加一列，Canvas 导入时会新建作业）；
- Moodle 评分工作表（作业 → 查看所有提交 → 下载评分工作表）：按 “Participant N” 填 Grade 列，
  ``--comments`` 时把各 notebook 的得分写进 Feedback comments；
- Blackboard 成绩中心（Work Offline → Download）：按 Username 填 ``--column`` 那一列（.xls 是 UTF-16 的制表符文本，照原样写回）；
- csv：每个学生一行，各 notebook 的分数、总分、满分、迟交扣分。
LMS 的满分和本作业的满分不同时按比例换算并说明。输出的编码、分隔符、BOM 和模板相同（没有模板时是
带 BOM 的 UTF-8，中文 Windows 上的 Excel 能直接打开）。最后列出对不上的学生。
``--feedback-zip``：把 feedback/ 里的反馈 HTML 打包成 LMS 的批量上传格式（Moodle 的 “上传多个反馈文件（zip）”、
Canvas 的 “重新上传提交”；文件名照下载里的前缀，LMS 靠它认学生）。
"""
from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from . import collect as collect_mod
from . import lms as lms_mod
from .lms import InputError
from .roster import (ALIAS_HEADERS, ID_HEADERS, Table, better_name, garbled, identity_values, norm_header, read_table,
                     write_table)

LMS_NAMES = ["canvas", "moodle", "blackboard", "csv"]


@dataclass
class Result:
    """一个学生这次作业的成绩（来自 gradebook）。"""
    sid: str
    notebooks: dict        # notebook -> 得分
    raw: float
    penalty: float
    pending: set           # 还有待人工评分的单元格的 notebook

    @property
    def total(self) -> float:
        return max(0.0, self.raw - self.penalty)


def fmt(x: float) -> str:
    return f"{round(x, 2):g}"


def gradebook_results(course: Path, assignment: str) -> tuple[float, list, dict, dict]:
    """(作业满分, notebook 列表, 学号 -> Result, notebook -> 满分)。"""
    from nbgrader.api import Gradebook, MissingEntry
    from .gradebook_io import _patch_alembic, course_db_url, describe, missing
    db = course_db_url(course)  # nbgrader_config.py 的 CourseDirectory.db_url（默认 gradebook.db）
    if missing(db):
        raise InputError(f"没有 {describe(db)}：请先运行 grade")
    _patch_alembic()
    out = {}
    with Gradebook(db) as gb:
        try:
            a = gb.find_assignment(assignment)
        except MissingEntry:
            raise InputError(f"gradebook 里没有作业 {assignment}：请先运行 grade") from None
        notebooks = [nb.name for nb in a.notebooks]
        max_total = float(a.max_score)
        nb_max = {nb.name: float(nb.max_score) for nb in a.notebooks}
        for sub in gb.assignment_submissions(assignment):
            out[sub.student.id] = Result(sub.student.id, {sn.name: float(sn.score) for sn in sub.notebooks},
                                         float(sub.score), float(sub.late_submission_penalty or 0),
                                         {sn.name for sn in sub.notebooks if sn.needs_manual_grade})
    return max_total, notebooks, out, nb_max


class Students:
    """我们的学生编号和 LMS 文件里各种写法（LMS 编号、用户名、邮箱、学号……）之间的对应。"""

    def __init__(self, results: dict, imported: collect_mod.Imported | None):
        self.imported = imported
        # 评过的：还没到期、没有评的 notebook 的文件（collect.choose_notebooks）存在副本里，但不导出
        self.kept = [it for it in imported.items if it.reason is None and imported.is_open(it.notebook)] if imported else []
        if self.kept:  # 只导出导入过的（所有批次合在一起的）学生：--fresh 之前 gradebook 里的旧成绩不算
            ours = {it.student_id for it in self.kept}
            results = {sid: r for sid, r in results.items() if sid in ours}
        self.results = results
        self.index: dict = {}
        for sid in results:
            names = {sid.lower()} | {it.lms_key.lower() for it in self.kept if it.student_id == sid and it.lms_key}
            if imported and imported.roster:
                names |= imported.roster.identities(sid)
            for n in names:
                self.index.setdefault(n, set()).add(sid)

    def match(self, table: Table, row: list) -> str | None:
        found = set()
        for i, h in enumerate(table.header):
            hn = norm_header(h)
            if hn in ID_HEADERS or hn in ALIAS_HEADERS:
                for v in identity_values(hn, table.cell(row, i)) if table.cell(row, i) else []:
                    found |= self.index.get(v.lower(), set())
        return found.pop() if len(found) == 1 else None

    def quarantined(self) -> dict:
        """交了、但进了隔离区的 notebook：{学生: {notebook（认不出时是文件名）: 原因}}。只算 .ipynb（nbgrader 的
        钥匙文件之类不算），同一个 notebook 另有一份评过了的也不算。它们不是“没有提交”：导出里写“无法评分”。"""
        if not self.imported:
            return {}
        graded = {(it.student_id, it.notebook) for it in self.kept}
        out: dict = {}
        for it in self.imported.items:
            if it.reason and not it.skip and it.student_id and (it.notebook or it.src.lower().endswith(".ipynb")) \
                    and (it.notebook is None or self.imported.is_open(it.notebook)):
                key = it.notebook or Path(it.src).name
                if (it.student_id, it.notebook) not in graded:
                    out.setdefault(it.student_id, {})[key] = it.reason
        return out

    def handed_in(self, sid: str) -> set | None:
        """这个学生交了（评过）的 notebook；不知道时（没有导入记录）None。"""
        return {it.notebook for it in self.kept if it.student_id == sid} if self.kept else None

    def counted(self, notebooks: list) -> list:
        """计入的 notebook：至少一名学生交了的（和 grade 的汇总同一条规则，pipeline.counted_notebooks）；
        学期中还没发布、没有人交的不计入满分，也不算“未交”。不知道时（没有导入记录）全部计入。"""
        seen = {it.notebook for it in self.imported.items
                if it.notebook and not it.skip and self.imported.is_open(it.notebook)} if self.kept else set()
        return [nb for nb in notebooks if nb in seen] or list(notebooks)

    def not_handed_in(self, sid: str, notebooks: list) -> list:
        """没交的 notebook：gradebook 里它们也有一个 0 分，但那不是交了得 0 分。"""
        got = self.handed_in(sid)
        return [] if got is None else [nb for nb in notebooks if nb not in got]

    def pending(self, sid: str) -> bool:
        """交了的 notebook 里还有待人工评分的单元格（没交的 notebook 在 gradebook 里也记着“待评分”，不算）。"""
        handed_in = {it.notebook for it in self.kept if it.student_id == sid} if self.imported else None
        waiting = self.results[sid].pending
        return bool(waiting & handed_in if handed_in is not None else waiting)

    def name(self, sid: str) -> str:
        r = self.imported.roster if self.imported else None
        ours = next((it.name for it in self.kept if it.student_id == sid and it.name and not garbled(it.name)),
                    next((it.name for it in self.kept if it.student_id == sid and it.name), ""))
        return better_name(r.names.get(sid, "") if r else "", ours)  # 名单里丢了字（“Zo? Müller”）时用下载里的

    def lms_key(self, sid: str) -> str:
        return next((it.lms_key for it in self.kept if it.student_id == sid and it.lms_key), sid)


def _pad(table: Table) -> None:
    for r in table.rows:
        r.extend([""] * (len(table.header) - len(r)))


def _find_column(table: Table, wanted: str, strip) -> int | None:
    """列名完全相同，或去掉 LMS 加的后缀（Canvas 的 “ (编号)”、Blackboard 的 “ [Total Pts: …] |编号”）后相同。"""
    for exact in (True, False):
        hits = [i for i, h in enumerate(table.header)
                if (str(h).strip() if exact else strip(str(h))).lower() == wanted.strip().lower()]
        if len(hits) == 1:
            return hits[0]
    return None


def _number(text: str) -> float | None:
    try:
        return float(str(text).strip())
    except ValueError:
        return None


def fill_canvas(table: Table, students: Students, column: str, max_total: float, notes: list) -> set:
    strip = lambda h: re.sub(r"\s*\(\d+\)\s*$", "", h).strip()  # noqa: E731
    ci = _find_column(table, column, strip)
    _pad(table)
    pp = next((r for r in table.rows if table.cell(r, 0) == "Points Possible"), None)
    if ci is None:
        table.header.append(column)
        for r in table.rows:
            r.append("")
        ci = len(table.header) - 1
        if pp is not None:
            pp[ci] = fmt(max_total)
        notes.append(f"文件里没有 “{column}” 这一列：新加了一列（Canvas 导入时会新建这个作业，满分 {fmt(max_total)}）")
    points = _number(pp[ci]) if pp is not None else None
    scale = _scale(points, max_total, "Canvas 的 Points Possible", notes)
    done = set()
    for r in table.rows:
        sid = None if r is pp else students.match(table, r)
        if sid in students.results:
            r[ci] = fmt(students.results[sid].total * scale)
            done.add(sid)
    return done


def _scale(lms_max: float | None, max_total: float, what: str, notes: list) -> float:
    if lms_max and max_total and abs(lms_max - max_total) > 1e-9:
        notes.append(f"{what}是 {fmt(lms_max)}，本作业满分 {fmt(max_total)}：已按比例换算（× {lms_max / max_total:.4g}）")
        return lms_max / max_total
    return 1.0


COMMENT_HEADERS = ("Feedback comments", "反馈意见", "反馈评语", "回饋評語")


def fill_moodle(table: Table, students: Students, max_total: float, comments: bool, notebooks: list,
                notes: list) -> set:
    first = lambda *names: next((table.col(n) for n in names if table.col(n) is not None), None)  # noqa: E731
    idc = first("Identifier", "标识符", "識別碼")   # 中文界面的 Moodle 导出的工作表表头是中文
    gi = first("Grade", "成绩", "成績")
    if idc is None or gi is None:
        raise InputError(f"{Path(table.source).name} 不像 Moodle 的评分工作表（要有 Identifier 和 Grade 两列；"
                         f"有的是：{'、'.join(map(str, table.header))}）")
    mi = first("Maximum Grade", "最高成绩", "最高分", "最高成績")
    # 评语列的表头是 assignfeedback_comments 的 pluginname：英文 Feedback comments；zh_cn 语言包是“反馈意见”
    # （Moodle 3.11、4.5），较早的中文包是“反馈评语”；zh_tw 是“回饋評語”
    fi = first(*COMMENT_HEADERS)
    if comments and fi is None:
        # Moodle 只导入它自己下载时就有的列：新加的一列会被忽略，所以不加，说清楚怎么办
        comments = False
        notes.append("工作表里没有评语列（Feedback comments / 反馈意见）：这次只写了成绩，没有写评语。"
                     "Moodle 只在作业的“反馈类型”里勾选了“反馈意见”（Feedback comments）时才在评分工作表里放这一列，"
                     "也只导入它下载时就有的列：请在作业设置里勾选它，重新下载评分工作表，再运行一次 export")
    _pad(table)
    done = set()
    for r in table.rows:
        sid = students.match(table, r)
        if sid not in students.results:
            continue
        res = students.results[sid]
        lms_max = _number(table.cell(r, mi)) if mi is not None else None
        scale = _scale(lms_max, max_total, "Moodle 的 Maximum Grade", notes if not done else [])
        r[gi] = f"{res.total * scale:.2f}"
        if comments:
            absent = set(students.not_handed_in(sid, notebooks))
            parts = [f"{nb}：未交" if nb in absent else f"{nb}：{fmt(res.notebooks.get(nb, 0))} 分"
                     for nb in notebooks if nb in res.notebooks]
            if res.penalty:
                parts.append(f"迟交扣分 {fmt(res.penalty)}")
            r[fi] = "；".join(parts) + "。详细反馈见反馈文件。"
        done.add(sid)
    return done


def fill_blackboard(table: Table, students: Students, column: str, max_total: float, notes: list) -> set:
    ui = table.col("Username") if table.col("Username") is not None else table.col("用户名")
    if ui is None:
        raise InputError(f"{Path(table.source).name} 不像 Blackboard 成绩中心的文件（没有 Username 列）")
    strip = lambda h: re.sub(r"\s*\[[^\]]*\]\s*(\|\s*\d+)?\s*$", "", h).strip()  # noqa: E731
    ci = _find_column(table, column, strip)
    if ci is None:
        table.header.append(f"{column} [Total Pts: {fmt(max_total)} Score]")
        ci = len(table.header) - 1
        notes.append(f"文件里没有 “{column}” 这一列：新加了一列（没有列编号，Blackboard 会把它建成新的文本列）")
    _pad(table)
    m = re.search(r"\[Total Pts:\s*([\d.]+)", str(table.header[ci]))
    scale = _scale(float(m.group(1)) if m else None, max_total, "Blackboard 的 Total Pts", notes)
    done = set()
    for r in table.rows:
        sid = students.match(table, r)
        if sid in students.results:
            r[ci] = fmt(students.results[sid].total * scale)
            done.add(sid)
    return done


def _status(students: Students, sid: str, notebooks: list = ()) -> str:
    res = students.results.get(sid)
    broken = students.quarantined().get(sid, {})
    if res is None:
        return f"提交无法评分：{'；'.join(broken.values())}" if broken else "没有提交"
    absent = [nb for nb in students.not_handed_in(sid, list(notebooks)) if nb not in broken]
    return "；".join(["待人工评分"] * students.pending(sid) + [f"迟交扣分 {fmt(res.penalty)}"] * bool(res.penalty)
                    + [f"{nb} 无法评分：{why}" for nb, why in broken.items()]
                    + [f"未交 {len(absent)} 个 notebook"] * bool(absent)) or "完成"


def plain_tables(lms: str, students: Students, notebooks: list, max_total: float, column: str,
                 roster_ids: list) -> tuple[Table, bool]:
    """没有模板时生成的表（带 BOM 的 UTF-8 CSV）；第二个值：写的时候要不要给每个字段加引号。"""
    broken = students.quarantined()
    order = list(dict.fromkeys(roster_ids + sorted(students.results) + sorted(broken)))
    res = students.results
    if lms == "csv":
        header = ["student_id", "name", *notebooks, "total", "max_total", "late_penalty", "status"]
        def cell(sid, nb):  # 没交的 notebook 写“未交”，不写 gradebook 里的 0；交了但进了隔离区的写“无法评分”
            if nb in broken.get(sid, {}):
                return "无法评分"
            if sid not in res or nb in students.not_handed_in(sid, notebooks):
                return "未交"
            return fmt(res[sid].notebooks[nb]) if nb in res[sid].notebooks else ""
        rows = [[sid, students.name(sid), *[cell(sid, nb) for nb in notebooks],
                 fmt(res[sid].total) if sid in res else "", fmt(max_total),
                 fmt(res[sid].penalty) if sid in res else "", _status(students, sid, notebooks)] for sid in order]
        return Table(header, rows, bom=True), False
    if lms == "canvas":
        header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", column]
        rows = [["    Points Possible", "", "", "", "", fmt(max_total)]]
        for sid in sorted(res):
            key = students.lms_key(sid)
            rows.append([students.name(sid), key if key != sid else "", sid if key != sid else "", "", "",
                         fmt(res[sid].total)])
        return Table(header, rows, bom=True), False
    header = ["Last Name", "First Name", "Username", "Student ID", f"{column} [Total Pts: {fmt(max_total)} Score]"]
    rows = [[students.name(sid), "", students.lms_key(sid), sid, fmt(res[sid].total)] for sid in sorted(res)]
    return Table(header, rows, bom=True), True


def feedback_zip_items(assignment: str, lms: str, students: Students) -> list:
    """--feedback-zip 能打包的提交；不能打包时抛出 InputError（export 在写任何文件之前先调用它）。"""
    if lms not in ("moodle", "canvas"):
        raise InputError(f"{lms} 没有批量上传反馈文件的功能：把 feedback/学号/{assignment}/ 里的 HTML 发给学生。"
                         "什么都没有写；去掉 --feedback-zip 再运行就只写成绩文件")
    ours = [it for it in students.kept if (it.layout or students.imported.layout) == lms] if students.imported else []
    if not ours:
        where = "、".join(sorted({lms_mod.label(lms_mod.LAYOUTS[it.layout][0]) for it in students.kept
                                 if it.layout in lms_mod.LAYOUTS})) if students.imported else ""
        raise InputError(f"--feedback-zip 需要提交是从 {lms} 下载的（{lms} 按下载里文件名的前缀认学生）"
                         + (f"，这些提交来自 {where}" if where else "") + "。什么都没有写。"
                         "提交和成绩不在同一个平台时：去掉 --feedback-zip 只导出成绩，反馈 HTML（feedback/学号/"
                         f"{assignment}/）从收提交的平台发回，或者发给学生")
    return ours


def feedback_zip(course: Path, assignment: str, lms: str, students: Students, out: Path) -> int:
    """按 LMS 的批量反馈格式打包反馈 HTML，返回文件数。"""
    ours = feedback_zip_items(assignment, lms, students)
    n = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for it in ours:
            html = course / "feedback" / it.student_id / assignment / f"{it.notebook}.html"
            if not html.exists() or not it.upload:
                continue
            # Moodle：“姓名_参与者编号_assignsubmission_file_/文件” 文件夹（assignfeedback_file 的 importziplib 认它）；
            # Canvas：“姓名_用户ID_附件ID_文件”（Assignment#infer_comment_context_from_filename 取前两个纯数字段）
            name = f"{it.upload}/{it.notebook}.html" if lms == "moodle" else f"{it.upload}{it.notebook}.html"
            zf.writestr(name, html.read_bytes())
            n += 1
    return n


def export(course: Path, assignment: str, lms: str, template: Path | None = None, column: str | None = None,
           out: Path | None = None, comments: bool = False, feedback: Path | None = None, quiet: bool = False) -> dict:
    """写出上传文件（和反馈包），向助教报告写了多少、哪些学生对不上。返回这些信息（测试用）。"""
    if lms not in LMS_NAMES:
        raise InputError(f"--lms 只能是 {'、'.join(LMS_NAMES)}")
    say = (lambda *a: None) if quiet else print
    course = Path(course).resolve()
    max_total, notebooks, results, nb_max = gradebook_results(course, assignment)
    try:
        imported = collect_mod.load_import(course / ".grading" / assignment)
    except InputError:
        imported = None
    students = Students(results, imported)
    if feedback is not None:
        feedback_zip_items(assignment, lms, students)  # 打不了反馈包时在写任何文件之前就说
    roster_ids = list(imported.roster.ids) if imported and imported.roster else []
    column = column or assignment
    notes: list = []
    counted = students.counted(notebooks)
    if counted != notebooks:
        max_total = sum(nb_max.get(nb, 0.0) for nb in counted)
        notes.append(f"计入的 notebook：{'、'.join(counted)}（至少一名学生交了的），满分 {fmt(max_total)}；还没有人交的 "
                     f"{'、'.join(nb for nb in notebooks if nb not in counted)} 不计入，不算谁没交")
        notebooks = counted
    if template is not None:
        table = read_table(template)
        if lms == "canvas":
            done = fill_canvas(table, students, column, max_total, notes)
        elif lms == "moodle":
            done = fill_moodle(table, students, max_total, comments, notebooks, notes)
        elif lms == "blackboard":
            done = fill_blackboard(table, students, column, max_total, notes)
        else:
            raise InputError("--lms csv 不用 --template（它自己生成每个学生一行的表）")
        quote_all = lms == "blackboard"  # Blackboard：逗号分隔的文件每个字段都要带引号
        suffix = Path(template).suffix.lower()
        suffix = suffix if suffix in (".csv", ".xls", ".txt") else ".csv"
        unmatched_rows = sum(1 for r in table.rows if students.match(table, r) is None and _has_identity(table, r))
    else:
        if lms == "moodle":
            raise InputError("Moodle 要用它的评分工作表导入：在作业的“查看所有提交”里选“下载评分工作表”，"
                             "然后 --template 那个文件")
        table, quote_all = plain_tables(lms, students, notebooks, max_total, column, roster_ids)
        done, suffix, unmatched_rows = set(results), ".csv", 0
    out = Path(out) if out else course / "exports" / f"{assignment}_{lms}{suffix}"
    write_table(out, table, quote_all=quote_all)
    pending = sorted(sid for sid in done if students.pending(sid))
    missing_in_file = sorted(set(results) - done)
    broken = students.quarantined()
    no_grade = sorted(set(roster_ids) - set(results) - set(broken))
    say(f"已写入 {out}：{len(done)} 名学生的成绩（{lms}，作业满分 {fmt(max_total)}）")
    if broken:
        say(f"  注意：{len(broken)} 名学生交了、但有 notebook 无法评分（进了隔离区，原因在 grades.csv 的 detail 列）"
            + ("；csv 里写“无法评分”" if template is None and lms == "csv" else "；它们没有写进分数")
            + "。请联系学生拿到能打开的文件，放进下一次下载再 grade：" + "、".join(
                f"{sid}（{'；'.join(f'{nb}：{why}' for nb, why in nbs.items())}）" for sid, nbs in sorted(broken.items())))
    for n in notes:
        say("  " + n)
    if missing_in_file:
        say(f"  有成绩、但在 LMS 文件里找不到的学生（{len(missing_in_file)} 名，请手工录入）：" + "、".join(missing_in_file))
    if unmatched_rows:
        say(f"  LMS 文件里有 {unmatched_rows} 名学生没有成绩（没交，或名单对不上），这些行保持原样")
    if no_grade:
        say(f"  名单上没有成绩的学生（{len(no_grade)} 名）：" + "、".join(no_grade))
    if pending:
        say(f"  注意：{len(pending)} 名学生还有待人工评分的单元格（formgrader），写进去的分数不含这些题：" + "、".join(pending))
    absent = {sid: students.not_handed_in(sid, notebooks) for sid in sorted(done)}
    absent = {sid: a for sid, a in absent.items() if a}
    if absent:
        say(f"  没交的 notebook：{sum(map(len, absent.values()))} 个（{len(absent)} 名学生），总分里按 0 分算"
            + ("；csv 总表里写“未交”" if lms == "csv" else "") + "，不是交了得 0 分")
    n_feedback = None
    if feedback is not None:
        n_feedback = feedback_zip(course, assignment, lms, students, Path(feedback))
        say(f"反馈文件包：{feedback}（{n_feedback} 个 HTML，按 {lms} 的批量上传格式命名）")
    return {"out": out, "done": done, "missing_in_file": missing_in_file, "pending": pending, "notes": notes,
            "unmatched_rows": unmatched_rows, "no_grade": no_grade, "feedback_files": n_feedback}


def _has_identity(table: Table, row: list) -> bool:
    return any(table.cell(row, i) for i, h in enumerate(table.header)
               if norm_header(h) in ID_HEADERS or norm_header(h) in ALIAS_HEADERS)
