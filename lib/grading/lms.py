"""LMS 下载的命名方式（“布局”）：从每个文件的路径读出学生、上传时的文件名、提交时间和迟交标记。

每种布局都照该 LMS 生成下载文件的代码或官方文档来写（出处在各自的函数里）。助教不用写正则：
``detect`` 按“哪种布局能认出最多的文件”自动选择；``--lms NAME`` 可以强制指定；都不合适时用 ``--name-regex``。

一个路径认出的学生编号（``Found.key``）是 LMS 自己的编号（Canvas 用户 ID、Moodle 参与者编号、
Blackboard 用户名、Gradescope 的 SID……）；给了名单时再由名单换成学号（见 roster.py）。
"""
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# 学生自己起的名字：汉字或字母、空格、点、连字符，不含数字和下划线（“学号_姓名”“姓名_学号”文件夹用）。
# “?” 和 “\ufffd”：中文 Windows 把 GBK 里没有的字（ë、ü……）存成 “?”，解码不了的字节变成 \ufffd；学号照样认得出
NAME = r"(?:[^\W\d_]|[?\ufffd])(?:[^\W\d_]|[ .·'?\ufffd-])*"
ID = r"\d[A-Za-z0-9.-]*"
ID_NAME_RES = [re.compile(rf"^(?P<id>{ID})[ _-]+(?P<name>{NAME})$"),
               re.compile(rf"^(?P<name>{NAME})[ _-]+(?P<id>{ID})$"),
               re.compile(rf"^(?P<name>{NAME})\s*[(（]\s*(?P<id>{ID})\s*[)）]$"),   # 姓名(学号)、姓名（学号）
               re.compile(rf"^(?P<id>{ID})\s*[(（]\s*(?P<name>{NAME})\s*[)）]$")]   # 学号(姓名)
STUDENT_RE = re.compile(r"^[\w.@+-]+$")


class InputError(Exception):
    """助教给的输入本身有问题（找不到提交、正则写错、名单读不懂……）：命令行打印中文说明后退出。"""


@dataclass
class Found:
    """一个路径里读出的信息。key 为 None 时 error 写明为什么认不出学生（路径像这种布局，但缺信息）。"""
    key: str | None
    filename: str                     # 学生上传时的文件名（用来认 notebook）
    name: str = ""                    # LMS 里的学生姓名
    time: dt.datetime | None = None   # LMS 记录的提交时间（带时区）
    order: tuple = ()                 # 没有时间时 LMS 记录的先后（Canvas 的附件编号越大越晚）
    late: bool = False                # LMS 自己的迟交标记
    upload: str = ""                  # 把反馈传回 LMS 时文件名要用的前缀
    error: str | None = None
    note: str | None = None           # 给 detail 的说明（例如按邮箱记的学生）


@dataclass
class Context:
    """作业（名字、notebook、把文件名认成 notebook 的函数）和整个下载里的元数据：Blackboard 回执、
    Gradescope 的 submission_metadata.yml、nbgrader 的 timestamp.txt。"""
    assignment: str
    notebooks: list
    resolve: Callable              # 文件名 → (notebook, 说明)，见 collect.resolve_notebook
    receipts: dict = field(default_factory=dict)
    gradescope: dict | None = None
    gradescope_error: str | None = None
    nbgrader_times: dict = field(default_factory=dict)
    usernames: dict = field(default_factory=dict)  # 名单和回执里的 LMS 用户名（小写 → 原样），拆 Blackboard 文件名用


# ----------------------------------------------------------------------------- 课程的时区
# 截止时间、LMS 下载里不带时区的时间都按课程所在地的时区理解，而不是评分机器的时区（服务器常是 UTC）。
# 唯一的设置：pyproject.toml 的 [tool.course] timezone（IANA 名字，例如 "Asia/Shanghai"），没写时用 DEFAULT_TIMEZONE。
DEFAULT_TIMEZONE = "Asia/Shanghai"
_tz: list = [ZoneInfo(DEFAULT_TIMEZONE)]


def course_timezone(course_root: Path | str = ".") -> ZoneInfo:
    """读课程根目录 pyproject.toml 的 [tool.course] timezone。写错了时用中文说明。"""
    name = DEFAULT_TIMEZONE
    p = Path(course_root) / "pyproject.toml"
    if p.is_file():
        text = p.read_text(encoding="utf-8")
        try:
            import tomllib  # Python ≥ 3.11
        except ModuleNotFoundError:  # Python 3.10：只要 [tool.course] 里的一个字符串
            section = re.search(r"^\[tool\.course\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
            m = re.search(r'^\s*timezone\s*=\s*"([^"]*)"', section.group(1) if section else "", re.M)
            name = m.group(1) if m else DEFAULT_TIMEZONE
        else:
            try:
                name = tomllib.loads(text).get("tool", {}).get("course", {}).get("timezone", DEFAULT_TIMEZONE)
            except tomllib.TOMLDecodeError as e:
                raise InputError(f"{p} 读不懂：{e}") from None
    try:
        return ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(f"pyproject.toml 的 [tool.course] timezone = {name!r} 不是时区名（写成 \"Asia/Shanghai\" 这样的"
                         "IANA 名字）") from None


def course_time(stamp: str, course_root: Path | str = ".") -> str:
    """一个带时区的 ISO 时间（锁、上次评分的记录），写成课程时区的“2026-12-03 16:00:53（Asia/Shanghai）”；
    读不懂时原样返回。给助教看的时间都用课程时区（pyproject.toml 的 [tool.course] timezone），不用服务器的 UTC。"""
    try:
        t = dt.datetime.fromisoformat(str(stamp))
        tz = course_timezone(course_root)
    except Exception:  # noqa: BLE001 —— 只是显示：坏的记录不该让别的命令失败
        return str(stamp)
    if t.tzinfo is None:
        return str(stamp)
    return f"{t.astimezone(tz):%Y-%m-%d %H:%M:%S}（{tz.key}）"


def use_timezone(tz: ZoneInfo) -> None:
    """这次运行用的课程时区（collect.gather 在导入之前设置）。"""
    _tz[0] = tz


def timezone() -> ZoneInfo:
    return _tz[0]


def local(t: dt.datetime) -> dt.datetime:
    """没有时区的时间按课程的时区理解（LMS 服务器记的是当地时间）；带时区的（带 +08:00、Z 的）原样保留。"""
    return t if t.tzinfo else t.replace(tzinfo=timezone())


# ----------------------------------------------------------------------------- Canvas
# Canvas 的 ContentZipper（app/models/content_zipper.rb）：文件名是
#   [姓名, submission.late? ? "LATE" : nil, user_id].compact.join("_") 去掉非字母数字再全部小写，
#   再接 "_#{attachment.id}_#{display_name}"；匿名评分时没有姓名。学生重新上传同名文件时 Canvas 把
#   display_name 改成 “名字-1.ipynb”。zip 里只有每个学生最新一次提交的附件，附件编号越大上传越晚。
CANVAS_RE = re.compile(r"^(?:(?P<login>.+?)_)??(?P<late>late_)?(?P<uid>\d+)_(?P<att>\d+)_(?P<file>.+)$",
                       re.IGNORECASE)


def parse_canvas(path: str, ctx: Context) -> list[Found]:
    base = path.rsplit("/", 1)[-1]
    m = CANVAS_RE.match(base)
    if not m:
        return []
    login = m.group("login") or ""
    return [Found(m.group("uid"), m.group("file"), name=login, order=(int(m.group("att")),),
                  late=bool(m.group("late")), upload=f"{login}_{m.group('uid')}_{m.group('att')}_")]


# ----------------------------------------------------------------------------- Moodle
# Moodle 的 mod/assign/locallib.php download_submissions()：前缀是 clean_filename(姓名 . "_" . 参与者编号)
# （姓名里的 "_" 换成空格；匿名评分时姓名是 “Participant”），再接 "_assignsubmission_file_"。
# “按文件夹下载”（3.1 起的默认）时它是文件夹名，文件保持原名；否则直接接在文件名前面。
# 评分工作表的 “Participant 123456” 和反馈文件 zip 用的都是这个参与者编号。
MOODLE_RE = re.compile(r"(?:^|/)(?P<prefix>(?P<name>[^/]*?)_(?P<pid>\d+)_assignsubmission_(?P<plugin>[a-z]+)_)"
                       r"(?:/(?P<path>.+)|(?P<file>[^/]+))$")


def parse_moodle(path: str, ctx: Context) -> list[Found]:
    m = MOODLE_RE.search(path)
    if not m:
        return []
    inner = m.group("path") or m.group("file")
    found = Found(m.group("pid"), inner.rsplit("/", 1)[-1], name=m.group("name"), upload=m.group("prefix"))
    if m.group("plugin") != "file":
        found.error = f"Moodle 的{m.group('plugin')}提交（评分只看上传的 .ipynb 文件）"
    return [found]


# ----------------------------------------------------------------------------- Blackboard
# Blackboard Learn 成绩中心 “下载作业”：每次尝试一个回执 “作业名_用户名_attempt_YYYY-MM-DD-HH-MM-SS.txt”，
# 上传的文件是同一个前缀再接 "_原文件名"。回执的格式（CodeGrade 的 blackboard 解析器也按这个读）：
#   Name: 姓名 (用户名) / Assignment: … / Date Submitted: … / … / Files: 下面每个文件两行
#   “\tOriginal filename: …” 和 “\tFilename: …”。没选 “只下载最后一次尝试” 时每次尝试都在里面。
BB_BASE = r"(?P<base>.+?_attempt_(?P<ts>\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}))"
BB_FILE_RE = re.compile(BB_BASE + r"(?:_(?P<file>.+)|(?P<ext>\.[^._]+))?$")
BB_RECEIPT_RE = re.compile(BB_BASE + r"\.txt$")
BB_NAME_RE = re.compile(r"^Name:\s*(?P<name>.*)\((?P<user>[^()\n]+)\)\s*$", re.MULTILINE)
BB_FILES_RE = re.compile(r"^\s*Original filename:\s*(?P<orig>.+?)\s*\n\s*Filename:\s*(?P<stored>.+?)\s*$", re.MULTILINE)


def read_bb_receipt(text: str) -> dict | None:
    m = BB_NAME_RE.search(text)
    if not m:
        return None
    files = {f.group("stored"): f.group("orig") for f in BB_FILES_RE.finditer(text)}
    return {"user": m.group("user").strip(), "name": m.group("name").strip(), "files": files}


def parse_blackboard(path: str, ctx: Context) -> list[Found]:
    base = path.rsplit("/", 1)[-1]
    m = BB_FILE_RE.match(base)
    if not m:
        return []
    t = local(dt.datetime.strptime(m.group("ts"), "%Y-%m-%d-%H-%M-%S"))
    receipt = ctx.receipts.get(m.group("base"))
    if receipt:
        user, name = receipt["user"], receipt["name"]
        filename = receipt["files"].get(base) or m.group("file") or base
    else:  # 没有回执：“作业名_用户名”——作业名和用户名里都可能有下划线
        head = m.group("base")[:-len("_attempt_") - len(m.group("ts"))]
        user, note = split_bb_user(head, ctx)
        name, filename = "", m.group("file") or base
        return [Found(user, filename, name=name, time=t, note=note)]
    return [Found(user, filename, name=name, time=t)]


def split_bb_user(head: str, ctx: Context) -> tuple[str, str | None]:
    """“作业名_用户名” 里的用户名：名单（或别的回执）里有的、最长的结尾；都没有时是最后一段，并说明。"""
    parts = head.split("_")
    for k in range(len(parts)):  # 从最长的结尾试起
        cand = "_".join(parts[k:])
        if cand.lower() in ctx.usernames:
            return ctx.usernames[cand.lower()], None
    user = parts[-1]
    return user, (f"Blackboard 的这次尝试没有回执（.txt），用户名按文件名最后一段认作 {user}；用户名里有下划线时"
                  "请用 --roster 给成绩中心文件或名单（有 Username 列），就能认对") if len(parts) > 1 else None


# ----------------------------------------------------------------------------- Gradescope
# Gradescope 的 “Export Submissions”：assignment_N_export/ 里每份提交一个 submission_N/ 文件夹，
# 外加 submission_metadata.yml：{submission_N: {":submitters": [{":name", ":sid", ":email"}], ":created_at": …}}
# （Ruby 的符号键，所以带冒号）。小组提交有多个 submitter，每人都按这份提交记分。导出里只有当前有效的那次提交。
GS_RE = re.compile(r"(?:^|/)(?P<sub>submission_\d+)/(?P<path>.+)$")


def read_gradescope_metadata(data: bytes) -> dict:
    import yaml
    meta = yaml.safe_load(data.decode("utf-8-sig")) or {}
    out = {}
    for sub, rec in meta.items():
        rec = rec or {}
        people = [(str(p.get(":sid") or p.get(":email") or "").strip(), str(p.get(":name") or ""))
                  for p in rec.get(":submitters") or []]
        created = rec.get(":created_at")
        if isinstance(created, str):
            from dateutil import parser as dateparser
            created = dateparser.parse(created)
        out[str(sub)] = {"submitters": people, "time": local(created) if isinstance(created, dt.datetime) else None}
    return out


def parse_gradescope(path: str, ctx: Context) -> list[Found]:
    m = GS_RE.search(path)
    if not m:
        return []
    filename = m.group("path").rsplit("/", 1)[-1]
    if ctx.gradescope is None:
        return [Found(None, filename, error=ctx.gradescope_error or
                      f"没有 submission_metadata.yml，不知道 {m.group('sub')} 是谁交的（请下载完整的 Export Submissions）")]
    rec = ctx.gradescope.get(m.group("sub"))
    if not rec or not rec["submitters"]:
        return [Found(None, filename, error=f"submission_metadata.yml 里没有 {m.group('sub')}")]
    return [Found(sid or None, filename, name=name, time=rec["time"],
                  error=None if sid else f"{m.group('sub')} 的提交者 {name} 没有 SID，也没有邮箱",
                  note=(f"Gradescope 里提交者 {name} 没有 SID，按邮箱 {sid} 记；给 --roster（有邮箱列的名单）"
                        "可以换成学号") if "@" in (sid or "") else None)
            for sid, name in rec["submitters"]]


# ----------------------------------------------------------------------------- nbgrader
# nbgrader 自己的收集方式：`nbgrader collect` 把交换目录里的提交放成 submitted/学生/作业/NOTEBOOK.ipynb，
# 旁边的 timestamp.txt 是提交时间（nbgrader.utils.parse_utc 能读）；交换目录的 inbound/ 里则是
# “学生+作业+时间戳+随机串/NOTEBOOK.ipynb”（每次提交一个文件夹）。
def nbgrader_res(assignment: str):
    a = re.escape(assignment)
    return (re.compile(rf"(?:^|/)(?P<dir>(?P<student>[^/+]+)/{a})/(?P<path>.+)$"),
            re.compile(rf"(?:^|/)(?P<dir>(?P<student>[^/+]+)\+{a}\+(?P<ts>[^/+]+)(?:\+[^/]*)?)/(?P<path>.+)$"))


def parse_nbgrader_time(text: str) -> dt.datetime | None:
    from nbgrader.utils import parse_utc
    try:
        return parse_utc(text.strip()).replace(tzinfo=dt.timezone.utc)
    except (ValueError, OverflowError):
        return None


def parse_nbgrader(path: str, ctx: Context) -> list[Found]:
    for rx in nbgrader_res(ctx.assignment):
        m = rx.search(path)
        if m:
            t = parse_nbgrader_time(m.group("ts")) if "ts" in rx.groupindex else ctx.nbgrader_times.get(m.group("dir"))
            return [Found(m.group("student"), m.group("path").rsplit("/", 1)[-1], time=t)]
    return []


# ----------------------------------------------------------------------------- 学号文件夹（教务系统、自己收作业）
def split_id_name(text: str) -> tuple[str | None, str]:
    """“2024001_张伟”“张伟_2024001”“2024001 张伟”→（学号，姓名）；本身就是编号时姓名为空。"""
    for rx in ID_NAME_RES:
        m = rx.match(text.strip())
        if m:
            return m.group("id"), m.group("name").strip()
    return (text.strip(), "") if STUDENT_RE.match(text.strip()) else (None, "")


def parse_folders(path: str, ctx: Context) -> list[Found]:
    parts = path.split("/")
    if len(parts) >= 2:
        sid, name = split_id_name(parts[0])
        return [Found(sid, parts[-1], name=name,
                      error=None if sid else f"文件夹名 {parts[0]!r} 里认不出学生编号")]
    stem = path.rsplit(".", 1)[0]
    m = re.match(rf"^(?P<id>{ID})[ _-]+(?P<rest>.+)$", stem)
    if m and ctx.resolve(m.group("rest"))[0]:                   # 学号_NOTEBOOK.ipynb
        return [Found(m.group("id"), m.group("rest") + path[len(stem):])]
    for rx in (rf"^(?P<id>{ID})[ _-]+(?P<name>{NAME}?)[ _-]+(?P<rest>.+)$",    # 学号_姓名_NOTEBOOK、学号-姓名-NOTEBOOK
               rf"^(?P<name>{NAME}?)[ _-]+(?P<id>{ID})[ _-]+(?P<rest>.+)$"):   # 姓名_学号_NOTEBOOK
        m = re.match(rx, stem)
        if m and ctx.resolve(m.group("rest"))[0]:
            return [Found(m.group("id"), m.group("rest") + path[len(stem):], name=m.group("name").strip())]
    if len(ctx.notebooks) == 1:                                 # 单 notebook 作业：学号.ipynb、学号_姓名.ipynb
        sid, name = split_id_name(stem)
        return [Found(sid, ctx.notebooks[0] + path[len(stem):], name=name,
                      error=None if sid else f"文件名 {path!r} 里认不出学生编号")]
    return []


LAYOUTS = {  # 名字 → (给助教看的说明, 解析函数)；自动识别时并列的按这个顺序优先
    "gradescope": ("Gradescope 导出（submission_N/ 文件夹 + submission_metadata.yml）", parse_gradescope),
    "nbgrader": ("nbgrader 收集（submitted/学生/作业/NOTEBOOK.ipynb，或交换目录 inbound/）", parse_nbgrader),
    "blackboard": ("Blackboard 成绩中心下载（作业名_用户名_attempt_时间_文件名，带 .txt 回执）", parse_blackboard),
    "moodle": ("Moodle 下载（姓名_参与者编号_assignsubmission_file_ 文件夹或文件名前缀）", parse_moodle),
    "canvas": ("Canvas 下载（submissions.zip：姓名_[late_]用户ID_附件ID_文件名）", parse_canvas),
    "folders": ("学号文件夹（学号/NOTEBOOK.ipynb、学号_姓名/…；单 notebook 作业也可以是 学号.ipynb）", parse_folders),
}


def parse(layout: str, path: str, ctx: Context) -> list[Found]:
    return LAYOUTS[layout][1](path, ctx)


def detect(paths: list[str], ctx: Context) -> str:
    """认出文件最多的布局；一样多时按 LAYOUTS 的顺序（越具体越靠前）。"""
    counts = {name: sum(bool(parse(name, p, ctx)) for p in paths) for name in LAYOUTS}
    return max(LAYOUTS, key=lambda name: (counts[name], -list(LAYOUTS).index(name)))


def label(title: str) -> str:
    """布局说明的简称：“Canvas 下载（…）”→“Canvas”。"""
    return title.split("（")[0].split(" ")[0]


def how_late(delta: dt.timedelta) -> str:
    s = int(delta.total_seconds())
    d, h, m = s // 86400, s % 86400 // 3600, s % 3600 // 60
    parts = [f"{d} 天"] * bool(d) + [f"{h} 小时"] * bool(h) + [f"{m} 分钟"] * bool(m and not d)
    return " ".join(parts) or f"{s} 秒"


def show_time(t: dt.datetime, zone: bool = False) -> str:
    """按课程的时区显示；zone=True 时写出时区（截止时间的横幅用）。"""
    t = t.astimezone(timezone())
    text = t.strftime("%Y-%m-%d %H:%M")
    if zone:
        off = t.strftime("%z")
        text += f"（{timezone().key}，UTC{off[:3]}:{off[3:]}）"
    return text
