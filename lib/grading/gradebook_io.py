"""nbgrader 的 gradebook 和反馈：只有主进程写数据库（单一写入者），formgrader 照常用于人工评分。"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

NBG = "nbgrader"


def _fast_alembic_head() -> str:
    """nbgrader 新建 gradebook 时用子进程 `alembic heads` 查迁移版本（这台机器上要十几秒）。
    迁移脚本里写着 revision / down_revision，直接读出没有后继的那个版本，结果相同。"""
    import re
    import nbgrader
    d = Path(nbgrader.__file__).parent / "alembic" / "versions"
    revs, downs = set(), set()
    for f in d.glob("*.py"):
        text = f.read_text(encoding="utf-8")
        r = re.search(r"^revision\s*=\s*['\"](\w+)['\"]", text, re.M)
        dn = re.search(r"^down_revision\s*=\s*['\"](\w+)['\"]", text, re.M)
        if r:
            revs.add(r.group(1))
        if dn:
            downs.add(dn.group(1))
    heads = revs - downs
    if len(heads) != 1:
        raise RuntimeError(f"alembic heads: {heads}")
    return heads.pop()


def _patch_alembic() -> None:
    import nbgrader.api as api
    if getattr(api.get_alembic_version, "_fast", False):
        return
    orig = api.get_alembic_version
    try:
        head = _fast_alembic_head()
    except Exception:
        return

    def fast():
        return head
    fast._fast = True
    fast._orig = orig
    api.get_alembic_version = fast


def grade_cells(nb: dict) -> dict:
    """grade_id -> (points, 是否自动评分的测试单元格)。"""
    out = {}
    for c in nb["cells"]:
        m = (c.get("metadata") or {}).get(NBG) or {}
        if m.get("grade") and m.get("grade_id"):
            auto = (not m.get("solution")) and c.get("cell_type") == "code"
            out[m["grade_id"]] = (float(m.get("points", 0) or 0), auto)
        elif m.get("task") and m.get("grade_id"):
            out[m["grade_id"]] = (float(m.get("points", 0) or 0), False)
    return out


def ensure_assignment(db_url: str, assignment: str, release_nbs: dict) -> None:
    """把作业结构（各 notebook 的评分单元格、分值）从 release/ 写入 gradebook（nbgrader 的 SaveCells）。
    用 release 而不是 source：数据库里不会出现隐藏测试。"""
    import nbformat
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.preprocessors import SaveCells
    _patch_alembic()
    with Gradebook(db_url) as gb:
        gb.update_or_create_assignment(assignment)
        for name, nb in release_nbs.items():
            want = grade_cells(nb)
            try:
                have = {g.name: (float(g.max_score), g.cell_type) for g in gb.find_notebook(name, assignment).grade_cells}
            except MissingEntry:
                have = None
            if have is not None and set(have) == set(want) and all(
                    abs(have[k][0] - want[k][0]) < 1e-9 for k in want):
                continue
            pp = SaveCells()
            resources = {NBG: {"db_url": db_url, "assignment": assignment, "notebook": name}}
            pp.preprocess(nbformat.reads(json.dumps(nb), as_version=4), resources)


def open_gradebook(db_url: str):
    """整个运行期间只打开一次（主线程是唯一的写入者）。"""
    from nbgrader.api import Gradebook
    from sqlalchemy import text
    _patch_alembic()
    gb = Gradebook(db_url)
    # 只对本次连接：不等每次提交都落盘。万一机器在评分中途断电，再运行一次会从 .grading/ 的执行结果
    # 把分数重新写入，所以不会丢成绩。
    gb.db.execute(text("PRAGMA synchronous=OFF"))
    return gb


def write_scores(gb, assignment: str, student: str, notebook: str, scores: dict,
                 unanswered: set, commit: bool = True) -> tuple[float, float, int]:
    """scores: grade_id -> 自动评分的分数（None = 需要人工评分）。返回 (总分, 满分, 待人工评分的单元格数)。
    人工给过的分数（manual_score）保留不动。commit=False 时由调用者成批提交（中途断掉也没关系：
    再次运行会从 .grading/ 里的执行结果把分数重新写一遍）。"""
    from nbgrader.api import MissingEntry
    gb.update_or_create_student(student)
    try:
        gb.find_submission(assignment, student)
    except MissingEntry:
        gb.add_submission(assignment, student)
    sn = gb.find_submission_notebook(notebook, assignment, student)
    pending = 0
    for grade in sn.grades:
        gid = grade.cell.name
        auto = scores.get(gid)
        grade.auto_score = auto
        grade.needs_manual_grade = auto is None or grade.manual_score is not None
        if auto is None and grade.manual_score is None:
            pending += 1
    for comment in sn.comments:
        comment.auto_comment = "No response." if comment.cell.name in unanswered else None
    gb.db.flush()
    if commit:
        gb.db.commit()
    sn = gb.find_submission_notebook(notebook, assignment, student)
    return float(sn.score), float(sn.max_score), pending


import functools


@functools.lru_cache(maxsize=1)
def _exporter():
    from nbconvert.exporters import HTMLExporter
    from traitlets.config import Config
    import nbgrader
    base = os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions", "formgrader")
    c = Config()
    c.HTMLExporter.template_name = "feedback"
    c.HTMLExporter.extra_template_basedirs = [os.path.join(base, "templates")]
    c.HTMLExporter.extra_template_paths = [os.path.join(base, "static", "node_modules", "bootstrap", "dist", "css")]
    return HTMLExporter(config=c)


FEEDBACK_KEY_MARK = "<!-- lib.grading feedback input sha256: "


def _feedback_key(gb, assignment: str, student: str, notebook: str, nb: dict) -> str:
    """反馈 HTML 的全部输入：autograded notebook、GetGrades 从 gradebook 读进反馈的一切（每格的分数、满分、
    评语，总分、满分和迟交扣分），以及渲染它的库的版本。输入相同，渲染出的 HTML 就相同。"""
    import nbconvert
    import nbgrader
    import pygments
    sn = gb.find_submission_notebook(notebook, assignment, student)
    grades = sorted((g.name, g.score, g.max_score) for g in sn.grades)
    comments = sorted((c.name, c.comment or "") for c in sn.comments)
    text = json.dumps([nb, grades, comments, sn.score, sn.max_score, sn.late_submission_penalty, student, notebook,
                       nbconvert.__version__, nbgrader.__version__, pygments.__version__],
                      sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _stored_key(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 200))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    i = tail.rfind(FEEDBACK_KEY_MARK)
    return tail[i + len(FEEDBACK_KEY_MARK):].split(" ", 1)[0] if i >= 0 else None


def render_feedback(gb, db_url: str, assignment: str, student: str, notebook: str, nb: dict, out: Path) -> bool:
    """nbgrader 的反馈模板（分数从 gradebook 读取，包括 formgrader 里给的人工分）。
    输入是 autograded 版本：测试单元格来自 release，所以隐藏测试和参考答案根本不在里面。
    输入（见 _feedback_key，用已经打开的 gb 读分数）和上次写这个文件时完全相同就不重新渲染：渲染占没有改动的
    重跑的大部分时间。返回是否重新写了文件。"""
    key = _feedback_key(gb, assignment, student, notebook, nb)
    if _stored_key(out) == key:
        return False
    import nbformat
    from nbgrader.preprocessors import GetGrades
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    exporter = _exporter()
    node = nbformat.reads(json.dumps(nb), as_version=4)
    resources = {NBG: {"db_url": db_url, "assignment": assignment, "student": student, "notebook": notebook},
                 "metadata": {"name": notebook}, "inlining": {}}
    from jupyter_core.paths import jupyter_config_dir
    resources["config_dir"] = jupyter_config_dir()
    node, resources = GetGrades().preprocess(node, resources)
    node, resources = CSSHTMLHeaderPreprocessor().preprocess(node, resources)
    html, _ = exporter.from_notebook_node(node, resources=resources)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(f"{html}\n{FEEDBACK_KEY_MARK}{key} -->\n", encoding="utf-8")
    tmp.replace(out)
    return True
