"""nbgrader 的 gradebook 和反馈：只有主进程写数据库（单一写入者），formgrader 照常用于人工评分。

别的程序（formgrader、另一位助教的 nbgrader 命令）可能同时占着数据库：每个连接都设了等待上限
（SQLite 的 busy_timeout、PostgreSQL 的 lock_timeout，默认 120 秒，环境变量 COURSE_GRADEBOOK_BUSY_SECONDS），
一次写入还是被挡住时 ``retrying`` 回滚、稍等、再试；一直写不进去才交给调用者（pipeline 把那一行记成 error）。
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

NBG = "nbgrader"
BUSY_ENV = "COURSE_GRADEBOOK_BUSY_SECONDS"
RETRIES = 3
_PG_BUSY = {"55P03", "40P01", "40001"}  # lock_not_available、deadlock_detected、serialization_failure


def busy_seconds() -> float:
    """一个连接等别人放开数据库最多等几秒（formgrader 里一次保存通常只要几毫秒；长事务另算）。"""
    try:
        return max(0.1, float(os.environ.get(BUSY_ENV, "120")))
    except ValueError:
        return 120.0


@functools.lru_cache(maxsize=1)
def _install_wait_limits() -> None:
    """每个新建的数据库连接（我们的、nbgrader 在反馈里另开的）都设上等待上限：没有它，SQLite 5 秒就报
    “database is locked”，PostgreSQL 会一直等下去。"""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _limits(dbapi_conn, _record):
        kind = type(dbapi_conn).__module__
        ms = int(busy_seconds() * 1000)
        cur = dbapi_conn.cursor()
        if "sqlite" in kind:
            cur.execute(f"PRAGMA busy_timeout = {ms}")
        elif "psycopg" in kind:
            cur.execute(f"SET lock_timeout = {ms}")
            dbapi_conn.commit()
        cur.close()


def is_busy(e: BaseException) -> bool:
    """这是“别人占着数据库 / 同时写了同一行”吗（等一等、重试就可能成功），而不是别的错。"""
    from sqlalchemy import exc
    if isinstance(e, exc.IntegrityError):  # 另一个程序刚插入了同一条提交记录：重试时会找到它
        return True
    if isinstance(e, exc.DBAPIError):
        code = getattr(getattr(e, "orig", None), "pgcode", None)
        return code in _PG_BUSY or "locked" in str(getattr(e, "orig", e)).lower()
    return False


def retrying(gb, write, attempts: int = RETRIES):
    """write() 被别的程序挡住时回滚、稍等、再试（最多 attempts 次，每次连接本身已经等过 busy_seconds()）。"""
    for attempt in range(attempts):
        try:
            return write()
        except Exception as e:
            try:
                gb.db.rollback()
            except Exception:  # noqa: BLE001 —— 连接本身坏了：原来的错误更有用
                pass
            if not is_busy(e) or attempt == attempts - 1:
                raise
            time.sleep(min(2.0 ** attempt, 10.0))


def explain_failure(e: BaseException, db_url: str) -> str:
    """写 gradebook 或反馈失败的原因，给助教看的一句话（以句号结尾，后面接“这一份……”）。"""
    if is_busy(e):
        return (f"gradebook（{describe(db_url)}）一直被别的程序占着（每次等 {busy_seconds():g} 秒，试了 {RETRIES} 次；"
                f"多半是 formgrader 或另一位助教的命令里一个没结束的事务）。")
    return f"写入 gradebook 或反馈时出错（评分这边的问题，不是学生的）：{type(e).__name__}: {e}。"


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
    """每次打开 gradebook 之前调用：nbgrader 新建数据库时查迁移版本的捷径，以及每个连接的等待上限。"""
    _install_wait_limits()
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


def course_db_url(course: Path) -> str:
    """课程用的 gradebook 地址：课程 nbgrader_config.py 里的 ``c.CourseDirectory.db_url``，由 nbgrader 自己的
    ``CourseDirectory`` 解析（没设时是 nbgrader 的默认值 ``sqlite:///<课程根目录>/gradebook.db``）。
    几位助教同时评分时可以设成 PostgreSQL，例如 ``postgresql+psycopg2://ta@db.example.edu/cs224n``。
    SQLite 的相对路径（``sqlite:///gradebook.db``）按课程根目录解释，不按当前目录。"""
    from nbgrader.coursedir import CourseDirectory
    from sqlalchemy.engine import make_url
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader
    course = Path(course).resolve()
    if (course / "nbgrader_config.py").exists():
        cfg = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    else:  # 没有配置文件：nbgrader 的默认值
        cfg = Config()
    cfg.CourseDirectory.root = str(course)  # 和 nbgrader 在课程根目录运行时一样
    url = CourseDirectory(config=cfg).db_url
    u = make_url(url)
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:" \
            and not Path(u.database).is_absolute():
        url = u.set(database=str(course / u.database)).render_as_string(hide_password=False)
    try:
        u.get_dialect().import_dbapi()
    except ImportError as e:
        raise SystemExit(f"nbgrader_config.py 里的 CourseDirectory.db_url（{describe(url)}）要用数据库驱动 {e.name}，"
                         "但没有安装。PostgreSQL 请写成 postgresql+psycopg2://…（驱动是 requirements-dev.txt 里的 "
                         "psycopg2-binary）。") from None
    return url


def sqlite_file(db_url: str) -> Path | None:
    """SQLite gradebook 的文件路径；别的数据库（PostgreSQL 等）返回 None。"""
    from sqlalchemy.engine import make_url
    u = make_url(db_url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


def describe(db_url: str) -> str:
    """给助教看的 gradebook 名字：SQLite 是文件路径，别的数据库是不含密码的地址。"""
    from sqlalchemy.engine import make_url
    f = sqlite_file(db_url)
    return str(f) if f else make_url(db_url).render_as_string(hide_password=True)


def missing(db_url: str) -> bool:
    """SQLite 文件还不存在（还没评过分）。别的数据库总是 False：库里没有这个作业时由 MissingEntry 报告。"""
    f = sqlite_file(db_url)
    return f is not None and not f.exists()


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


def ensure_assignment(db_url: str, assignment: str, release_nbs: dict, duedate=None) -> None:
    """把作业结构（各 notebook 的评分单元格、分值）从 release/ 写入 gradebook（nbgrader 的 SaveCells）。
    用 release 而不是 source：数据库里不会出现隐藏测试。duedate（不带时区的 UTC）给了就记成作业的截止时间。"""
    import nbformat
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.preprocessors import SaveCells
    _patch_alembic()
    with Gradebook(db_url) as gb:
        gb.update_or_create_assignment(assignment, **({"duedate": duedate} if duedate else {}))
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
    if sqlite_file(db_url) is None:
        return gb
    # SQLite 只对本次连接：不等每次提交都落盘。万一机器在评分中途断电，再运行一次会从 .grading/ 的执行结果
    # 把分数重新写入，所以不会丢成绩。
    gb.db.execute(text("PRAGMA synchronous=OFF"))
    return gb


def read_duedate(db_url: str, assignment: str):
    """gradebook 里 nbgrader 记的作业截止时间（带时区），没有时 None。"""
    import datetime as dt
    from nbgrader.api import Gradebook, MissingEntry
    if missing(db_url):
        return None
    _patch_alembic()
    with Gradebook(db_url) as gb:
        try:
            due = gb.find_assignment(assignment).duedate
        except MissingEntry:
            return None
    return due.replace(tzinfo=dt.timezone.utc) if due else None


def late_penalties(course: Path):
    """nbgrader 的迟交扣分设置：课程的 nbgrader_config.py 里 AssignLatePenalties.plugin_class 和
    LateSubmissionPlugin.penalty_method（默认不扣分），和 nbgrader autograde 用的是同一个插件。"""
    from nbgrader.preprocessors import AssignLatePenalties
    from traitlets.config.loader import PyFileConfigLoader
    pp = AssignLatePenalties(config=PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config())
    pp.init_plugin()
    return pp


def _answers(nb: dict, release: dict) -> dict:
    """每个评分单元格对应的答案：文字题是它自己的内容，其余（自动评分的测试、任务）是全部代码答案。"""
    from .repair import _gid, _meta, _norm, _src
    solutions = {_gid(c): (c.get("cell_type"), _norm(_src(c))) for c in nb["cells"]
                 if _gid(c) and _meta(c).get("solution")}
    code = "\n".join(text for _, (kind, text) in sorted(solutions.items()) if kind == "code")
    return {gid: solutions[gid][1] if gid in solutions else code for gid in grade_cells(release)}


def changed_answers(previous: Path, nb: dict, release: dict) -> set:
    """和上次评分的版本（课程里的 submitted/学生/作业/NOTEBOOK.ipynb）相比，答案变了的评分单元格。"""
    try:
        old = json.loads(Path(previous).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return set()
    before, now = _answers(old, release), _answers(nb, release)
    return {gid for gid in now if before.get(gid) != now[gid]}


OLD_COMMENT_MARK = "【这条评语是针对你之前提交的答案写的】"


@dataclass
class Written:
    score: float          # 扣掉迟交扣分之后
    max_score: float
    pending: int          # 待人工评分的单元格数
    notes: list           # 给 detail 的说明（人工分因答案改动被清除、迟交扣分）


def write_scores(gb, assignment: str, student: str, notebook: str, scores: dict, unanswered: set,
                 commit: bool = True, changed: set = frozenset(), timestamp=None, late=None,
                 submitted: set | None = None) -> Written:
    """scores: grade_id -> 自动评分的分数（None = 需要人工评分）。
    人工分跟着答案走：答案没变的单元格，formgrader 里给的分和标记都不动；答案变了（changed）且有人工分的，
    清掉人工分并标记为需要人工评分。timestamp（不带时区的 UTC）记在 nbgrader 放提交时间的地方
    （SubmittedAssignment.timestamp）；late 是 late_penalties() 的结果，迟交时按 nbgrader 的设置扣分。
    submitted：这个学生交了的 notebook 的名字。nbgrader 的 add_submission 给作业的每个 notebook 都建一条记录，
    每个单元格默认“需要人工评分”（0 分）；没交的 notebook 没有答案可评，formgrader 却把它列进待评队列。
    给了 submitted 时，没交的 notebook 里没有分数的单元格都清掉这个标记（以后交了，评分时会按答案重新标记）。
    commit=False 时由调用者成批提交（中途断掉也没关系：再次运行会从 .grading/ 里的执行结果把分数重新写一遍）。"""
    from nbgrader.api import MissingEntry
    gb.update_or_create_student(student)
    try:
        sub = gb.find_submission(assignment, student)
    except MissingEntry:
        sub = gb.add_submission(assignment, student)
    if timestamp is not None:
        sub.timestamp = timestamp
    sn = gb.find_submission_notebook(notebook, assignment, student)
    pending, notes, regrade = 0, [], []
    for grade in sn.grades:
        gid = grade.cell.name
        auto = scores.get(gid)
        grade.auto_score = auto
        if gid in changed and (grade.manual_score is not None or grade.extra_credit is not None):
            regrade.append(f"{gid}（原来 {grade.manual_score or 0:g} 分）")
            grade.manual_score = grade.extra_credit = None
            grade.needs_manual_grade = auto is None  # 改成了空白答案时自动记 0 分，不用再评
        elif grade.manual_score is None:
            grade.needs_manual_grade = auto is None
        if auto is None and grade.manual_score is None:
            pending += 1
    if submitted is not None:
        for other in sub.notebooks:
            if other.name in submitted or other.name == notebook:
                continue
            for grade in other.grades:
                if grade.auto_score is None and grade.manual_score is None and grade.needs_manual_grade:
                    grade.needs_manual_grade = False
    if regrade:
        notes.append("答案改过了，原来的人工分已清除，请在 formgrader 里重新评分：" + "、".join(regrade))
    stale = []
    for comment in sn.comments:
        comment.auto_comment = "没有作答。" if comment.cell.name in unanswered else None
        # formgrader 里写的评语是针对改之前的答案的：留着（助教可能还要参考），但在前面标明
        if comment.cell.name in changed and comment.manual_comment and \
                not comment.manual_comment.startswith(OLD_COMMENT_MARK):
            comment.manual_comment = OLD_COMMENT_MARK + comment.manual_comment
            stale.append(comment.cell.name)
    if stale:
        notes.append("答案改过了，formgrader 里原来的评语已标成“针对之前提交的答案”：" + "、".join(stale))
    gb.db.flush()
    gb.db.expire(sn)
    sn.late_submission_penalty = None
    if late is not None and sub.total_seconds_late > 0:
        penalty = late.plugin_inst.late_submission_penalty(student, sn.score, sub.total_seconds_late)
        if penalty is not None:
            sn.late_submission_penalty = late._check_late_penalty(sn, penalty)
            notes.append(f"迟交扣分 {sn.late_submission_penalty:g}（nbgrader 的迟交设置），扣前 {float(sn.score):g} 分")
    gb.db.flush()
    if commit:
        gb.db.commit()
    sn = gb.find_submission_notebook(notebook, assignment, student)
    penalty = float(sn.late_submission_penalty or 0)
    return Written(max(0.0, float(sn.score) - penalty), float(sn.max_score), pending, notes)


@functools.lru_cache(maxsize=1)
def _exporter():
    """nbgrader 的反馈模板，换成中文的汇总表和标题（lib/grading/templates/feedback_zh 继承它）。"""
    from nbconvert.exporters import HTMLExporter
    from traitlets.config import Config
    import nbgrader
    base = os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions", "formgrader")
    c = Config()
    c.HTMLExporter.template_name = "feedback_zh"
    c.HTMLExporter.extra_template_basedirs = [os.path.join(base, "templates"),
                                              os.path.join(os.path.dirname(__file__), "templates")]
    # nbgrader 的模板根目录也放进搜索路径：feedback_zh 用 {% extends 'feedback/index.html.j2' %} 继承它。
    # nbgrader 自己还把整个 Bootstrap 的目录放进来；我们不放，模板里的 bootstrap.min.css 找到的是
    # feedback_zh/ 里的子集（每份反馈从 174 KB 降到约 60 KB）
    c.HTMLExporter.extra_template_paths = [os.path.join(base, "templates")]
    # 学生写的 Markdown 和输出只显示、不执行（sanitize.py）：模板里 clean_html 换成我们的白名单，JavaScript 输出不写出
    from . import sanitize
    c.HTMLExporter.sanitize_html = True
    c.HTMLExporter.filters = {"clean_html": sanitize.clean_html}
    return HTMLExporter(config=c)


FEEDBACK_KEY_MARK = "<!-- lib.grading feedback input sha256: "
CHARSET = re.compile(r'<meta charset="utf-8"\s*/?>', re.IGNORECASE)  # 反馈页 <head> 里的第一行


def _feedback_key(gb, assignment: str, student: str, notebook: str, nb: dict) -> str:
    """反馈 HTML 的全部输入：autograded notebook、GetGrades 从 gradebook 读进反馈的一切（每格的分数、满分、
    评语，总分、满分和迟交扣分），以及渲染它的库的版本。输入相同，渲染出的 HTML 就相同。"""
    import nbconvert
    import nbgrader
    import pygments
    here = Path(__file__).resolve().parent  # 我们自己的反馈模板（不是班级报告的）和汇总表代码也是输入
    from . import feedback_math
    ours = [(here / name).read_text(encoding="utf-8") for name in ("report.py", "feedback_math.py", "sanitize.py")]
    ours.append(str(feedback_math.available()))  # 装上 latex2mathml 之后重新渲染
    ours += [f.read_text(encoding="utf-8") for f in sorted((here / "templates" / "feedback_zh").rglob("*")) if f.is_file()]
    sn = gb.find_submission_notebook(notebook, assignment, student)
    grades = sorted((g.name, g.score, g.max_score) for g in sn.grades)
    comments = sorted((c.name, c.comment or "") for c in sn.comments)
    text = json.dumps([nb, grades, comments, sn.score, sn.max_score, sn.late_submission_penalty, student, notebook,
                       nbconvert.__version__, nbgrader.__version__, pygments.__version__, ours],
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


def _get_grades():
    """nbgrader 的 GetGrades，另外记下每个评分单元格有没有分数（人工评分的单元格还没打分时汇总表写“待评分”）。"""
    from nbgrader.preprocessors import GetGrades

    class Grades(GetGrades):
        def _get_score(self, cell, resources):
            super()._get_score(cell, resources)
            grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"], self.notebook_id,
                                              self.assignment_id, self.student_id)
            cell.metadata.nbgrader["graded"] = grade.manual_score is not None or grade.auto_score is not None

    return Grades()


def render_feedback(gb, db_url: str, assignment: str, student: str, notebook: str, nb: dict, out: Path) -> bool:
    """反馈 HTML：分数从 gradebook 读取（包括 formgrader 里给的人工分），顶部是中文的汇总表（每道题的得分和评分说明）。
    输入是 autograded 版本：测试单元格来自 release，所以隐藏测试和参考答案根本不在里面；每份都一样的
    引导单元格、作答说明和自检单元格不放进反馈（lib/grading/report.py）。
    输入（见 _feedback_key，用已经打开的 gb 读分数）和上次写这个文件时完全相同就不重新渲染：渲染占没有改动的
    重跑的大部分时间。返回是否重新写了文件。"""
    key = _feedback_key(gb, assignment, student, notebook, nb)
    if _stored_key(out) == key:
        return False
    import nbformat
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from . import report
    from . import feedback_math, sanitize
    exporter = _exporter()
    shown, removed = report.feedback_notebook(nb)
    offline_math = feedback_math.available()  # 公式在这里排成 MathML，反馈不再从 CDN 加载 MathJax
    if offline_math:
        feedback_math.convert_notebook(shown)
    node = nbformat.reads(json.dumps(shown), as_version=4)
    resources = {NBG: {"db_url": db_url, "assignment": assignment, "student": student, "notebook": notebook},
                 "metadata": {"name": notebook}, "inlining": {}}
    from jupyter_core.paths import jupyter_config_dir
    resources["config_dir"] = jupyter_config_dir()
    node, resources = _get_grades().preprocess(node, resources)
    resources["feedback_summary"] = {
        "rows": report.summary_rows(node),
        "note": (f"下面是你提交的 notebook（省略了 {removed} 个每份都一样的单元格：引导单元格、作答说明、提交前自检）。"
                 "每个测试单元格后面的【评分】是用评分时的输入检查的结果。")}
    node, resources = CSSHTMLHeaderPreprocessor().preprocess(node, resources)
    html, _ = exporter.from_notebook_node(node, resources=resources)
    if offline_math:  # 没有 MathJax 的脚本了：整页不许运行任何脚本、不许加载外部资源（sanitize.CSP）
        html = CHARSET.sub(lambda m: m.group(0) + "\n" + sanitize.CSP, feedback_math.drop_mathjax(html), count=1)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(f"{html}\n{FEEDBACK_KEY_MARK}{key} -->\n", encoding="utf-8")
    tmp.replace(out)
    return True
