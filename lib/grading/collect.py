"""导入：把 LMS 下载的文件夹或 .zip 变成 (学生编号, notebook) → 文件内容；其他一切进入隔离区并写明原因。

原始文件只读取，从不修改。下载的命名方式（布局）自动识别并在输出里说明（lms.py：Canvas、Moodle、
Blackboard、Gradescope、nbgrader 收集、学号文件夹）；``--lms NAME`` 强制指定；其他命名方式用
``--name-regex``：一个 Python 正则，匹配相对路径（用 / 分隔），必须有命名组 ``student_id``，可以有
``notebook``（没有时作业必须只有一个 notebook）。
- 学生上传的 .zip 会被打开，里面的 notebook 照常评分；Mac 的 __MACOSX/、.DS_Store、.ipynb_checkpoints/
  不是提交，不进成绩表。
- 同一学生同一 notebook 有多份时评最新的一份：先看 LMS 记录的提交时间或顺序，再看文件时间；
  detail 写明评的是哪个文件、没有采用哪些。
- 迟交：LMS 自己的标记（Canvas 的 late），或 LMS 记录的提交时间晚于截止时间（``--due``，
  没给时用 gradebook 里 nbgrader 的 duedate）。
- 导入结果（每份采用的原始文件、学生、提交时间……）存进 .grading/作业/imported/：``feedback`` 和
  ``export`` 从这份副本出发，不再读原来的下载路径。
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import io
import json
import os
import re
import shutil
import stat
import sys
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from . import lms
from . import roster as roster_mod
from .flags import Status
from .lms import STUDENT_RE, InputError  # noqa: F401 —— InputError 也从这里导出（命令行捕获它）

MAX_FILE_BYTES = 50 * 1024 * 1024
MAX_ZIP_MEMBERS = 2000
SYSTEM_DIRS = {"__MACOSX", ".ipynb_checkpoints", "__pycache__"}
SYSTEM_FILES = {"Thumbs.db", "desktop.ini"}


@dataclass
class Item:
    src: str                          # 在文件夹/zip 里的相对路径（上传的 zip 里的文件：zip 的路径/里面的路径）
    data: bytes
    mtime: float = 0.0
    student_id: str | None = None
    notebook: str | None = None
    reason: str | None = None         # 不为 None 时：隔离的原因
    notes: list = field(default_factory=list)  # 给 detail 的说明（认出的文件名、评的是哪一份），不影响状态
    nb: dict | None = None
    skip: bool = False                # 不是提交（系统文件、LMS 的回执、被更新的版本取代）：不进成绩表
    container: str | None = None      # 从学生上传的 .zip 里取出时：那个 zip 的路径
    lms_key: str | None = None        # LMS 自己的学生编号（名单把它换成学号之前）
    name: str = ""                    # LMS 里的学生姓名
    time: dt.datetime | None = None   # LMS 记录的提交时间
    order: tuple = ()
    lms_late: bool = False
    upload: str = ""                  # 把反馈传回 LMS 时用的文件名前缀
    submitted_at: dt.datetime | None = None  # 这个学生这次提交的时间（他各个 notebook 里最晚的）
    late: str | None = None           # 迟交的说明；None = 没有迟交
    damaged: bool = False             # zip 里的这个文件读不出来（下载损坏）
    linked: bool = False              # 符号链接或硬链接：没有读（_read_one）
    layout: str = ""                  # 来自哪种 LMS 的下载（分批评分时各批可以不同）
    batch: int = 0                    # 第几次导入的下载（从 1 数；分批评分时较早的批次号小）

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class Imported:
    items: list
    layout: str
    title: str
    source: str = ""
    roster: roster_mod.Roster | None = None
    due: dt.datetime | None = None
    due_from_option: bool = False     # True：截止时间来自 --due（要写进 gradebook）
    batches: list = field(default_factory=list)  # 导入过的每次下载：{"batch", "source", "time", "files"}
    open_notebooks: list | None = None  # 评分的 notebook（choose_notebooks）；None：以前的版本存的副本，评过的都算

    @property
    def roster_ids(self) -> set | None:
        return set(self.roster.ids) if self.roster else None

    def is_open(self, notebook: str | None) -> bool:
        """这个 notebook 评不评：没到截止时间、也没有点名的 notebook 的文件存在副本里，但不评、不导出。"""
        return self.open_notebooks is None or notebook in self.open_notebooks

    def graded_notebooks(self) -> list:
        """评过的 notebook（以前的版本存的副本没有记 open_notebooks：有可评分的文件的就是评过的）。"""
        if self.open_notebooks is not None:
            return list(self.open_notebooks)
        return sorted({it.notebook for it in self.items if it.reason is None and it.notebook})


# ----------------------------------------------------------------------------- 读文件
def _zip_name(info: zipfile.ZipInfo) -> str:
    """zip 里的文件名。没有 UTF-8 标记的是按本地编码存的（中文 Windows 是 GBK），Python 按 cp437 读错了。
    macOS 存的是分解形式（NFD：ë = e + ¨），统一成 NFC，“Zoë” 才能和名单、正则对上。"""
    name = info.filename
    if not info.flag_bits & 0x800:
        raw = name.encode("cp437", errors="replace")
        for enc in ("utf-8", "gb18030"):
            try:
                name = raw.decode(enc)
                break
            except UnicodeDecodeError:
                continue
    return unicodedata.normalize("NFC", name.replace("\\", "/"))


DAMAGED = "下载的 zip 里这个文件损坏了，读不出来（{e}）：请重新下载（其余文件照常评分）"
INCOMPLETE = "下载不完整，请重新下载"


def _read_zip(zf: zipfile.ZipFile, prefix: str = "", container: str | None = None) -> list[Item]:
    items = []
    for info in zf.infolist()[:MAX_ZIP_MEMBERS]:
        if info.is_dir():
            continue
        name = prefix + _zip_name(info)
        if stat.S_ISLNK(info.external_attr >> 16):  # 解压工具会把它变成真的符号链接；这里不读它指向的东西
            items.append(Item(name, b"", reason=LINK.format(what="zip 里的符号链接"), container=container, linked=True))
            continue
        if info.file_size > MAX_FILE_BYTES:
            items.append(Item(name, b"", reason=f"文件太大（{info.file_size // 2**20} MB）", container=container))
            continue
        try:
            mt = dt.datetime(*info.date_time).timestamp()
        except ValueError:
            mt = 0.0
        try:
            data = zf.read(info)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError) as e:
            items.append(Item(name, b"", mtime=mt, container=container, damaged=True,
                              reason=DAMAGED.format(e=f"{type(e).__name__}: {e}")))
            continue
        items.append(Item(name, data, mtime=mt, container=container))
    return items


def _not_a_zip(path: Path) -> str:
    """一个不是 zip 的文件给了 --submissions：说清楚是什么（下载断了、浏览器存下的是错误页）。"""
    head = path.read_bytes()[:512]
    low = head.lstrip().lower()
    if low.startswith((b"<!doctype", b"<html", b"<?xml", b"<head", b"{")):
        what = "这个文件其实是网页（LMS 或浏览器返回的错误页面、登录页面），不是 zip"
    elif head.startswith(b"PK"):
        what = "zip 文件的结尾缺了一截（下载中断了）"
    elif path.suffix.lower() == ".zip":
        what = "它不是 zip 文件（可能没下载完，或者下载的是别的东西）" if head else "文件是空的"
    else:
        return f"{path} 既不是文件夹也不是 .zip 文件"
    return f"{INCOMPLETE}：{path.name} {what}（{path.stat().st_size} 字节）。"


def _unzip_upload(it: Item) -> list[Item]:
    """学生上传的 .zip：取出里面的文件（只打开一层）。"""
    try:
        with zipfile.ZipFile(io.BytesIO(it.data)) as zf:
            inner = _read_zip(zf, prefix=it.src + "/", container=it.src)
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:
        it.reason = f"上传的 .zip 打不开（{e}）：学生上传的文件可能坏了，请重新下载，还不行就请学生重交"
        return [it]
    if not inner:
        it.reason = "上传的 .zip 是空的"
        return [it]
    return inner


LINK = ("{what}：没有评，也没有读它指向的文件（可能是别的学生的作业或评分用的文件）。"
        "请向学生要一份真正的 .ipynb 文件")


def _read_one(name: str, dir_fd: int, rel: str) -> Item:
    """文件夹里的一个文件（相对 dir_fd 打开，不跟随符号链接）。符号链接、硬链接（另一个名字可能在下载之外）、
    管道之类的特殊文件都不读，只写明原因。"""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        return Item(rel, b"", reason=LINK.format(what="符号链接"), linked=True)
    if not stat.S_ISREG(st.st_mode):
        return Item(rel, b"", reason="不是普通文件（管道、设备之类）：没有评")
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):  # 看过之后被换掉了
            return Item(rel, b"", reason="不是普通文件（管道、设备之类）：没有评")
        if st.st_nlink > 1:
            return Item(rel, b"", linked=True, reason=LINK.format(what=f"硬链接（这个文件还有 {st.st_nlink - 1} 个别的名字）")
                        + "；确实是下载的一部分时，复制一份（cp）再评")
        if st.st_size > MAX_FILE_BYTES:
            return Item(rel, b"", reason=f"文件太大（{st.st_size // 2**20} MB）")
        return Item(rel, f.read(MAX_FILE_BYTES + 1), mtime=st.st_mtime)


def _read_folder(path: Path) -> list[Item]:
    """下载的文件夹：逐层打开（os.fwalk，不跟随符号链接），只读真正在这个文件夹里的普通文件。评分人常常是 root，
    而这个文件夹可能是学生写得进去的（JupyterHub 的交换目录、学生上传后解压的 zip）：指向别处的链接不能让评分人
    替学生读出别的学生的作业或课程的文件。"""
    items = []
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(path, follow_symlinks=False):
        base = Path(dirpath).relative_to(path)
        for name in dirnames + filenames:
            rel = unicodedata.normalize("NFC", (base / name).as_posix())
            if name in dirnames:  # 指向目录的符号链接也列在 dirnames 里（fwalk 不会进去）
                if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                    items.append(Item(rel, b"", reason=LINK.format(what="指向文件夹的符号链接"), linked=True))
                continue
            try:
                items.append(_read_one(name, dir_fd, rel))
            except OSError as e:
                items.append(Item(rel, b"", reason=f"读不出来（{e.strerror}）：没有评"))
    return sorted(items, key=lambda it: it.src.split("/"))


def read_inputs(path: Path) -> list[Item]:
    path = Path(path)
    if path.is_file() and zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as zf:
                items = _read_zip(zf)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as e:
            raise InputError(f"{INCOMPLETE}：{path.name} 打不开（{e}）。") from None
    elif path.is_dir():
        items = _read_folder(path.resolve())
    elif path.exists():
        raise InputError(_not_a_zip(path))
    else:
        raise InputError(f"找不到提交路径：{path}")
    out = []
    for it in items:
        upload = it.src.lower().endswith(".zip") and not it.reason and system_reason(it.src) is None
        out += _unzip_upload(it) if upload else [it]
    return out


def system_reason(src: str) -> str | None:
    parts = src.split("/")
    if SYSTEM_DIRS & set(parts[:-1]) or parts[-1].startswith(".") or parts[-1] in SYSTEM_FILES:
        return "系统生成的文件（不是提交）"
    return None


# ----------------------------------------------------------------------------- notebook 名和内容
def _norm_name(name: str) -> str:
    n = name.strip().lower()
    n = re.sub(r"^(copy of |副本[ _-]*|copy_of_)", "", n)
    # 浏览器的 “ (1)”、Canvas 重新上传的 “-1”、各种 “副本”
    n = re.sub(r"(\s*\(\d+\)|-\d+|[ _-]copy\d*|\s*-\s*副本|\s*的副本)$", "", n)
    return n.strip()


def _copy_number(src: str) -> int:
    m = re.search(r"(?:\((\d+)\)|-(\d+))\.ipynb$", src)
    return int(m.group(1) or m.group(2)) if m else 0


def resolve_notebook(name: str, notebooks: list[str]) -> tuple[str | None, str | None]:
    """(规范的 notebook 名, 说明)。名字对不上任何 notebook 时返回 (None, None)。"""
    if name in notebooks:
        return name, None
    n = _norm_name(name)
    exact = [nb for nb in notebooks if nb.lower() == n]
    if len(exact) == 1:
        return exact[0], f"文件名 {name}.ipynb 按 {exact[0]} 评分"
    pref = [nb for nb in notebooks if n.startswith(nb.lower()) or (len(n) >= 2 and nb.lower().startswith(n))]
    if len(pref) == 1:
        return pref[0], f"文件名 {name}.ipynb 按 {pref[0]} 评分"
    return None, None


def parse_notebook(data: bytes) -> tuple[dict | None, str | None]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None, "不是 UTF-8 文本（不是 notebook）"
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"无法解析的 JSON（第 {e.lineno} 行第 {e.colno} 列：{e.msg}）"
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        if isinstance(nb, dict) and nb.get("nbformat") == 3 and isinstance(nb.get("worksheets"), list):
            try:
                import nbformat
                nb = json.loads(nbformat.writes(nbformat.reads(text, as_version=4)))
                return nb, None
            except Exception as e:  # pragma: no cover
                return None, f"旧格式 notebook 无法转换：{e}"
        return None, "不是 notebook（缺少 cells 列表）"
    return nb, None


# ----------------------------------------------------------------------------- 布局
def _strip_common_top(items: list[Item], single: bool, assignment: str | None = None) -> None:
    """所有文件都在同一个顶层文件夹里（zip 常见）时去掉这一层：学号文件夹至少三层，或单 notebook 作业。
    nbgrader 的 submitted/<学号>/<作业>/ 只有一个学生时，顶层就是学号，不去掉。"""
    paths = [it.container or it.src for it in items if not it.skip]
    tops = {p.split("/", 1)[0] for p in paths}
    if not paths or len(tops) != 1 or any("/" not in p for p in paths):
        return
    if assignment and all(p.split("/")[1:2] == [assignment] and p.count("/") >= 2 for p in paths):
        return
    if max(p.count("/") + 1 for p in paths) >= 3 or single:
        n = len(tops.pop()) + 1
        for it in items:
            if not it.skip:
                it.src = it.src[n:]
                it.container = it.container[n:] if it.container else None


def _context(items: list[Item], assignment: str, notebooks: list[str]) -> lms.Context:
    """读出下载里的元数据文件（它们本身不是提交，标成 skip）。"""
    ctx = lms.Context(assignment, notebooks, lambda name: resolve_notebook(name, notebooks))
    nbgrader_dir = lms.nbgrader_res(assignment)[0]
    for it in items:
        if it.reason or it.container:
            continue
        base = it.src.rsplit("/", 1)[-1]
        receipt = lms.BB_RECEIPT_RE.match(base)
        if receipt:
            info = lms.read_bb_receipt(it.data.decode("utf-8-sig", errors="replace"))
            if info:
                ctx.receipts[receipt.group("base")] = info
                ctx.usernames.setdefault(info["user"].lower(), info["user"])
                it.reason, it.skip = "Blackboard 的提交回执（已读取）", True
        elif base == "submission_metadata.yml":
            try:
                ctx.gradescope = lms.read_gradescope_metadata(it.data)
            except Exception as e:  # noqa: BLE001 —— yaml 的各种错误：当作没有元数据，并说明原因
                ctx.gradescope_error = f"submission_metadata.yml 读不懂：{e}"
            it.reason, it.skip = "Gradescope 的 submission_metadata.yml（已读取）", True
        elif base == "timestamp.txt":
            m = nbgrader_dir.search(it.src)
            t = lms.parse_nbgrader_time(it.data.decode("utf-8", errors="replace")) if m else None
            if m and t:
                ctx.nbgrader_times[m.group("dir")] = t
                it.reason, it.skip = "nbgrader 的 timestamp.txt（已读取）", True
    return ctx


def _compile_regex(name_regex: str, single: bool) -> re.Pattern:
    try:
        pat = re.compile(name_regex)
    except re.error as e:
        where = f"（第 {e.pos + 1} 个字符附近）" if e.pos is not None else ""
        raise InputError(f"--name-regex 不是合法的正则表达式{where}：{e.msg}。例子："
                         r"'^(?P<student_id>\d+)_(?P<notebook>.+)\.ipynb$'") from None
    if "student_id" not in pat.groupindex:
        raise InputError("--name-regex 必须有命名组 (?P<student_id>...)")
    if "notebook" not in pat.groupindex and not single:
        raise InputError("这个作业有多个 notebook，--name-regex 必须有命名组 (?P<notebook>...)")
    return pat


def _classify(it: Item, f: lms.Found, roster, notebooks: list[str]) -> None:
    """一个文件加上从路径读出的信息 → 学生、notebook、notebook 内容，或隔离的原因。"""
    it.lms_key, it.name, it.time, it.order, it.lms_late, it.upload = f.key, f.name, f.time, f.order, f.late, f.upload
    if f.note:
        it.notes.append(f.note)
    filename = it.src.rsplit("/", 1)[-1] if it.container else f.filename
    sid = f.key
    if sid is not None and roster is not None:
        sid = roster.lookup(f.key)
        if sid is None and roster.by_name(f.name):
            sid = roster.by_name(f.name)
            it.notes.append(f"按姓名 {f.name} 对上名单里的 {sid}（LMS 编号 {f.key}）")
        if sid is None:
            it.student_id = f.key if STUDENT_RE.match(f.key) else None
            it.reason = f"名单里没有学生 {f.key}" + (f"（{f.name}）" if f.name else "")
            if filename.lower().endswith(".ipynb"):  # 隔离行里也写上是哪个 notebook
                it.notebook = resolve_notebook(filename[:-len(".ipynb")], notebooks)[0]
            return
    if sid is not None and not STUDENT_RE.match(sid):
        it.reason = f"学生编号 {sid!r} 含非法字符"
        return
    it.student_id = sid
    if f.error or sid is None:
        it.reason = f.error or "认不出是哪个学生"
        return
    if not filename.lower().endswith(".ipynb"):
        it.reason = "不是 .ipynb 文件"
        return
    canon, note = resolve_notebook(filename[:-len(".ipynb")], notebooks)
    if canon is None:
        it.reason = f"notebook 名称不对：{filename}（本作业的 notebook：{', '.join(notebooks)}）"
        return
    it.notebook = canon
    if note:
        it.notes.append(note)
    nb, why = parse_notebook(it.data)
    if why:
        it.reason = why
        return
    it.nb = nb


def _describe(it: Item) -> str:
    if it.time:
        when = f"提交于 {lms.show_time(it.time)}"
    elif it.order:
        when = f"附件编号 {it.order[0]}"
    else:
        when = f"文件时间 {dt.datetime.fromtimestamp(it.mtime).strftime('%Y-%m-%d %H:%M')}"
    return f"{it.src}（{when}）"


def _pick_newest(items: list[Item]) -> None:
    """同一学生同一 notebook 的多份：LMS 的提交时间、LMS 的顺序、文件时间、“(1)”“-1” 的编号，最新的评分。"""
    groups: dict[tuple, list[Item]] = {}
    for it in items:
        if it.reason is None:
            groups.setdefault((it.student_id, it.notebook), []).append(it)
    for group in groups.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda x: (x.time.timestamp() if x.time else float("-inf"), x.order, x.mtime,
                                  _copy_number(x.src), x.src))
        keep = group[-1]
        for it in group[:-1]:
            it.reason, it.skip = f"重复提交：同一学生同一 notebook 评的是更新的 {keep.src}", True
        keep.notes.append(f"评分的是最新的 {_describe(keep)}；没有采用较早的 "
                          + "、".join(_describe(x) for x in reversed(group[:-1])))


def _mark_late(items: list[Item], due: dt.datetime | None, label: str) -> None:
    students: dict[str, list[Item]] = {}
    for it in items:
        if it.reason is None:
            students.setdefault(it.student_id, []).append(it)
    for its in students.values():
        times = [it.time for it in its if it.time]
        for it in its:
            it.submitted_at = max(times) if times else None
            after = due is not None and it.time is not None and it.time > due
            when = (f"（{lms.show_time(it.time)} 提交，截止 {lms.show_time(due)}，晚了 {lms.how_late(it.time - due)}）"
                    if after else "")
            it.late = None
            if it.lms_late:
                own = lms.label(lms.LAYOUTS[it.layout][0]) if it.layout in lms.LAYOUTS else label
                it.late = f"{own} 标记为迟交" + when
            elif after:
                it.late = "迟交" + when


def import_download(path: Path, notebooks: list[str], *, assignment: str = "", name_regex: str | None = None,
                    roster=None, lms_name: str | None = None, due: dt.datetime | None = None,
                    submitted_at: dt.datetime | None = None) -> Imported:
    """读取并分类所有输入文件。每个文件都在返回的 items 里：有 student_id/notebook 且 reason 为 None 的
    可以评分；reason 不为 None 的进入隔离区（skip 的不算提交，不进成绩表）。"""
    if roster is not None and not isinstance(roster, roster_mod.Roster):
        roster = roster_mod.Roster.from_ids(roster)
    items = read_inputs(path)
    for it in items:
        why = None if it.reason else system_reason(it.src)
        if why:
            it.reason, it.skip = why, True
    single = len(notebooks) == 1
    _strip_common_top(items, single, assignment)
    ctx = _context(items, assignment, notebooks)
    if roster is not None:  # 名单里的用户名、学号：拆 Blackboard 没有回执的文件名用
        for key in list(roster.aliases) + [i.lower() for i in roster.ids]:
            ctx.usernames.setdefault(key, key)
    pat = None
    if name_regex:
        pat = _compile_regex(name_regex, single)
        layout, title = "regex", "自定义正则（--name-regex）"
    else:
        if lms_name and lms_name not in lms.LAYOUTS:
            raise InputError(f"不认识的 --lms {lms_name}（可以是：{'、'.join(lms.LAYOUTS)}）")
        layout = lms_name or lms.detect([it.container or it.src for it in items if not it.reason], ctx)
        title = lms.LAYOUTS[layout][0]
    out: list[Item] = []
    for it in items:
        it.layout = layout
        if it.damaged or it.linked:  # 读不出来（没有读）的文件：照样从路径认出是谁的，隔离行里写上学生
            _identify_damaged(it, pat, layout, ctx, roster, notebooks)
        if it.reason:
            out.append(it)
            continue
        if pat is not None:
            m = pat.match(it.src)
            founds = [lms.Found(m.group("student_id").strip(),
                                (m.groupdict().get("notebook") or notebooks[0]) + ".ipynb")] if m else []
        else:
            founds = lms.parse(layout, it.container or it.src, ctx)
        if not founds:
            it.reason = "不是 .ipynb 文件" if not it.src.lower().endswith(".ipynb") else \
                f"文件名不符合约定：按{title}认不出来（可以用 --lms 或 --name-regex 指定）"
            out.append(it)
            continue
        for k, f in enumerate(founds):  # Gradescope 的小组提交：每个组员一份
            x = it if k == 0 else dataclasses.replace(it, notes=[])
            _classify(x, f, roster, notebooks)
            out.append(x)
    if submitted_at is not None:  # --submitted-at：下载里没有 LMS 的提交时间时，这一批都按这个时间交的
        for it in out:
            if it.reason is None and it.time is None:
                it.time = submitted_at
                it.notes.append(f"提交时间按 --submitted-at 记为 {lms.show_time(submitted_at)}（下载里没有 LMS 的提交时间）")
    _pick_newest(out)
    _mark_late(out, due, lms.label(title))
    return Imported(out, layout, title, source=str(Path(path).resolve()), roster=roster, due=due)


def _identify_damaged(it: Item, pat, layout: str, ctx: lms.Context, roster, notebooks: list[str]) -> None:
    try:
        if pat is not None:
            m = pat.match(it.src)
            founds = [lms.Found(m.group("student_id").strip(), (m.groupdict().get("notebook") or notebooks[0])
                                + ".ipynb")] if m else []
        else:
            founds = lms.parse(layout, it.container or it.src, ctx)
    except Exception:  # noqa: BLE001 —— 只是为了在隔离行里写上学生，认不出也没关系
        founds = []
    if founds and founds[0].key:
        key = founds[0].key
        sid = roster.lookup(key) if roster is not None else key
        it.student_id = sid or (key if STUDENT_RE.match(key) else None)
        it.lms_key, it.name = key, founds[0].name
        if founds[0].filename.lower().endswith(".ipynb"):
            it.notebook = resolve_notebook(founds[0].filename[:-len(".ipynb")], notebooks)[0]


def collect(path: Path, notebooks: list[str], name_regex: str | None = None, roster=None, **kw) -> list[Item]:
    """``import_download`` 的简写：只要文件列表。"""
    return import_download(path, notebooks, name_regex=name_regex, roster=roster, **kw).items


# ----------------------------------------------------------------------------- 导入结果的副本
ITEM_FIELDS = ["src", "mtime", "student_id", "notebook", "reason", "notes", "skip", "container", "lms_key", "name",
               "order", "lms_late", "upload", "late", "damaged", "layout", "batch"]
ITEM_DEFAULTS = {"damaged": False, "layout": "", "batch": 0}  # 旧版本存的副本里没有这些


def _iso(t: dt.datetime | None) -> str | None:
    return t.isoformat() if t else None


def _from_iso(s: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(s) if s else None


def recover_import(ws: Path) -> None:
    """上一次 grade 在换副本的那一刻被强制结束（kill -9、断电）时，把副本恢复成完整的一份。

    save_import 换副本分三步，每一步都是一次 rename：新副本写进 imported.tmp（manifest.json 最后写、原子地写：
    有它就说明新副本完整），旧副本改名 imported.old，新副本改名 imported，再删掉 imported.old。任何一步之间停下，
    这里都能恢复：没有 imported 时，用完整的新副本，否则用旧副本；有 imported 时，剩下的 .tmp、.old 删掉。"""
    final, tmp, old = ws / "imported", ws / "imported.tmp", ws / "imported.old"
    if not final.exists():
        try:  # 两个只读的命令（export、report）可能同时在恢复：另一个已经改好了名，这里就什么也不用做
            if (tmp / "manifest.json").exists():
                tmp.rename(final)
            elif old.exists():
                old.rename(final)
        except FileNotFoundError:
            pass
    if final.exists():
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def save_import(ws: Path, imp: Imported) -> None:
    """把这次导入的结果存进 ws/imported/：manifest.json 加上每份要评分的原始文件（任何时候被强制结束都不丢副本：
    recover_import）。"""
    final, tmp, old = ws / "imported", ws / "imported.tmp", ws / "imported.old"
    recover_import(ws)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    recs = []
    for k, it in enumerate(imp.items):
        rec = {f: getattr(it, f) for f in ITEM_FIELDS}
        rec.update(time=_iso(it.time), submitted_at=_iso(it.submitted_at))
        if it.reason is None:
            rec["file"] = f"{k:05d}.ipynb"
            (tmp / rec["file"]).write_bytes(it.data)
        recs.append(rec)
    meta = {"layout": imp.layout, "title": imp.title, "source": imp.source, "due": _iso(imp.due),
            "due_from_option": imp.due_from_option, "roster": imp.roster.to_json() if imp.roster else None,
            "batches": imp.batches, "open_notebooks": imp.open_notebooks, "items": recs}
    part = tmp / "manifest.json.part"
    part.write_text(json.dumps(meta, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(part, tmp / "manifest.json")  # 有 manifest.json，新副本就是完整的
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def load_import(ws: Path) -> Imported:
    recover_import(ws)
    d = ws / "imported"
    try:
        meta = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        raise InputError(f"没有找到上次 grade 导入的副本（{d}）：请先运行 grade") from None
    items = []
    for rec in meta["items"]:
        it = Item(**{f: rec.get(f, ITEM_DEFAULTS.get(f)) for f in ITEM_FIELDS}, data=b"", time=_from_iso(rec["time"]),
                  submitted_at=_from_iso(rec["submitted_at"]))
        it.order = tuple(it.order)
        if rec.get("file"):
            it.data = (d / rec["file"]).read_bytes()
            it.nb, _ = parse_notebook(it.data)
        items.append(it)
    roster = roster_mod.Roster.from_json(meta["roster"]) if meta["roster"] else None
    return Imported(items, meta["layout"], meta["title"], meta["source"], roster, _from_iso(meta["due"]),
                    meta["due_from_option"], meta.get("batches") or [], meta.get("open_notebooks"))


def parse_due(text: str, option: str = "--due") -> dt.datetime:
    """--due、--submitted-at：不带时区时按课程的时区（pyproject.toml 的 [tool.course] timezone）理解，
    不按评分机器的时区。"""
    from dateutil import parser as dateparser
    try:
        return lms.local(dateparser.parse(text))
    except (ValueError, OverflowError):
        raise InputError(f"{option} 看不懂：{text!r}（写成 2024-03-01 23:59，或带时区 2024-03-01T23:59+08:00）") from None


# ----------------------------------------------------------------------------- 分批评分
def _when(it: Item) -> float | None:
    """一份提交的时间：LMS 记录的提交时间，没有时是文件时间（zip 里记的时间、文件夹里文件的修改时间）。"""
    if it.time:
        return it.time.timestamp()
    return it.mtime or None


def _newer(new: Item, old: Item) -> bool:
    """同一学生同一 notebook，这次下载的和之前导入的哪份更新：两边都有 LMS 的提交时间时比提交时间，
    否则比文件时间（zip 里记的时间）；都不知道或一样时，这次的下载更新（它是后下载的）。
    一份更新的、已经评过（也许有了人工分）的提交，从不被更早的下载换回旧的版本。"""
    if new.time and old.time:
        return new.time >= old.time
    a, b = _when(new), _when(old)
    if a is None or b is None or a == b:
        return True
    return a > b


def merge_batches(previous: Imported, imp: Imported, roster) -> dict:
    """把之前导入的结果并进这次的导入：这次没有的学生和 notebook 照旧保留；两边都有的评更新的那份；
    之前隔离的文件（这次没有同一个学生同一 notebook 的可评分提交）也保留。返回给助教看的计数。"""
    kept_new = {(it.student_id, it.notebook): it for it in imp.items if it.reason is None}
    new_srcs = {it.src for it in imp.items}
    new_students: dict = {}
    for it in imp.items:
        if it.reason is None:
            new_students.setdefault(it.student_id, []).append(it)
    carried, replaced, kept_old, resolved = 0, 0, 0, 0
    extra: list[Item] = []
    for it in previous.items:
        if it.skip:
            continue
        if roster is not None and it.student_id and it.student_id not in roster.names:
            # 之前没给名单（或给的是另一份）：LMS 编号换成学号
            sid = roster.lookup(it.student_id) or (roster.lookup(it.lms_key) if it.lms_key else None)
            if sid:
                it.student_id = sid
        key = (it.student_id, it.notebook)
        if it.reason is None:
            new = kept_new.get(key)
            if new is None:
                extra.append(it)
                carried += 1
            elif new.sha == it.sha:
                continue  # 同一份文件又下载了一次
            elif _newer(new, it):
                new.notes.append(f"替换了之前下载（第 {it.batch} 批）里评过的 {_describe(it)}")
                replaced += 1
            else:
                new.reason, new.skip = (f"这次下载里的是旧版本（{_describe(new)}），保留已经评过的新版本："
                                        f"之前下载（第 {it.batch} 批）里的 {_describe(it)}"), True
                kept_new[key] = it
                extra.append(it)
                kept_old += 1
        elif it.src not in new_srcs and key not in kept_new:
            if it.notebook is None and it.student_id and it.student_id in new_students:
                # 之前隔离的（例如 notebook 名称不对），这次有了这个学生正确命名的提交：隔离行已经过时，不再列出
                for x in new_students[it.student_id]:
                    x.notes.append(f"之前下载（第 {it.batch} 批）里隔离的 {it.src}（{it.reason}）已由这次的提交取代")
                resolved += 1
                continue
            extra.append(it)
    imp.items += extra
    return {"carried": carried, "replaced": replaced, "kept_old": kept_old, "resolved": resolved}


def gather(opts, notebooks: list[str], ws: Path, due_in_gradebook: dt.datetime | None = None,
           guarded: bool = False) -> Imported:
    """grade：读名单、导入下载、存副本；feedback（opts.reuse_import）：读上次存的副本。都向助教说明用的是什么。
    guarded：课程有学期密钥（没有截止时间时只评点名的 notebook，见 choose_notebooks）。"""
    say = (lambda *a: None) if opts.quiet else (lambda *a: print(*a, file=sys.stderr))
    lms.use_timezone(lms.course_timezone(getattr(opts, "course_root", ".")))
    if opts.reuse_import:
        imp = load_import(ws)
        n = sum(it.reason is None for it in imp.items)
        batches = f"，{len(imp.batches)} 次下载合在一起" if len(imp.batches) > 1 else ""
        say(f"反馈：重用上次 grade 导入的 {n} 份 notebook（副本在 {ws / 'imported'}{batches}，布局：{imp.title}；"
            f"原来的下载 {imp.source} 不再读取）" + _roster_and_due(imp))
        return imp
    previous = None
    recover_import(ws)
    had_import = (ws / "imported" / "manifest.json").exists()
    if not getattr(opts, "fresh", False):
        try:
            previous = load_import(ws)
        except (InputError, KeyError, TypeError):
            previous = None
    roster = roster_mod.load(opts.roster, opts.roster_id_column) if opts.roster else None
    roster_note = ""
    if roster is None and previous is not None and previous.roster is not None:
        roster = previous.roster
        roster_note = "（沿用上次的名单）"
    due = parse_due(opts.due) if opts.due else due_in_gradebook
    imp = import_download(opts.submissions, notebooks, assignment=opts.assignment, name_regex=opts.name_regex,
                          roster=roster, lms_name=opts.lms, due=due,
                          submitted_at=(parse_due(opts.submitted_at, "--submitted-at")
                                        if getattr(opts, "submitted_at", None) else None))
    imp.due_from_option = bool(opts.due)
    named = named_notebooks(getattr(opts, "notebooks", None), notebooks)
    batches = list(previous.batches) if previous is not None else []
    rerun = bool(batches) and batches[-1].get("source") == imp.source  # 同一个下载再评一次（续跑）：不算新的一批
    batch = batches[-1]["batch"] if rerun else max([b.get("batch", 0) for b in batches] + [len(batches)]) + 1
    for it in imp.items:
        it.batch = batch
    this_graded = sum(it.reason is None for it in imp.items)
    imp.batches = batches[:-1] if rerun else batches
    imp.batches.append({"batch": batch, "source": imp.source, "files": this_graded, "layout": imp.layout,
                        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
    merged = merge_batches(previous, imp, roster) if previous is not None else None
    if merged is not None:
        _mark_late(imp.items, due, lms.label(imp.title))
    choice = choose_notebooks(notebooks, named, previous.graded_notebooks() if previous is not None else [], due, guarded)
    imp.open_notebooks = choice.open
    save_import(ws, imp)
    _report_import(say, imp, choice, batch=batch, rerun=rerun, merged=merged, roster=roster,
                   notes={"roster": roster_note, "fresh": getattr(opts, "fresh", False) and had_import})
    return imp


def _report_import(say, imp: Imported, choice: Choice, *, batch: int, rerun: bool, merged: dict | None, roster,
                   notes: dict) -> None:
    """gather 导入之后向助教说明：这次的下载有什么、隔离了什么、评哪些 notebook、和之前的下载怎么合在一起、要注意什么。"""
    graded = [it for it in imp.items if it.reason is None]
    held = sum(bool(it.reason) and not it.skip for it in imp.items if it.batch == batch)  # 只数这次的下载
    damaged = sum(it.damaged for it in imp.items if it.batch == batch)
    say(f"识别为 {imp.title}：这次的下载 {sum(it.reason is None for it in imp.items if it.batch == batch)} 份 notebook，"
        f"{len({it.student_id for it in imp.items if it.reason is None and it.batch == batch})} 名学生；"
        f"隔离 {held} 个文件；不算提交的 {sum(it.skip for it in imp.items)} 个（系统文件、LMS 回执、较早的版本）"
        + _roster_and_due(imp) + notes["roster"])
    linked = sum(it.linked for it in imp.items if it.batch == batch)
    if linked:
        say(f"注意：下载里有 {linked} 个符号链接或硬链接，没有读（已隔离，grades.csv 的 detail 写了是哪些）：评分程序不替学生"
            "读下载之外的文件（别的学生的作业、课程的文件）。请向这些学生要一份真正的 .ipynb。")
    if damaged:
        say(f"注意：下载里有 {damaged} 个文件损坏了、读不出来（已隔离，grades.csv 的 detail 写了是哪些）："
            "请从 LMS 重新下载；其余文件照常评分。")
    _say_what_is_graded(say, imp, choice)
    if merged is not None and len(imp.batches) > 1:
        say(f"分批评分：这是第 {batch} 次下载{'（和上次是同一个下载：接着评）' if rerun else ''}；之前下载里评过的 {merged['carried']} 份"
            "（这次的下载里没有它们）照旧保留"
            + (f"，{merged['replaced']} 份换成了这次下载里更新的版本" if merged["replaced"] else "")
            + (f"；{merged['kept_old']} 份这次下载里的是旧版本，保留已经评过的新版本（比的是"
               "LMS 的提交时间，没有时比文件的修改时间）" if merged["kept_old"] else "")
            + (f"；之前隔离的 {merged['resolved']} 个文件已由这次正确命名的提交取代，不再列出" if merged["resolved"] else "")
            + f"。现在一共 {len(graded)} 份 notebook、{len({it.student_id for it in graded})} 名学生。"
            "要从头开始（忘掉之前导入的下载）：加 --fresh。")
    elif notes["fresh"]:
        say("--fresh：之前导入的下载已忘掉，grades.csv、反馈和导出只含这次的下载。gradebook.db 里之前的分数和人工分"
            "没有删除（formgrader 里还看得到）；要彻底重来，请先备份并删除 gradebook.db。")
    this = [it for it in graded if it.batch == batch]  # 这次的下载里能评的
    if roster and not this and any((it.reason or "").startswith("名单里没有") for it in imp.items if it.batch == batch):
        say(f"注意：这次下载里的编号在名单里一个也对不上（名单：{roster.describe()}）。先看名单的学号列对不对"
            f"（不对时用 --roster-id-column 列名 指定）；对的话，{lms.label(imp.title)} 的下载里是它自己的编号：请用 LMS 导出的"
            "成绩表当名单（Canvas 成绩册导出、Moodle 评分工作表、Blackboard 成绩中心文件，它们有学号和 LMS 编号两列），"
            "或者不给名单。")
    if imp.due is not None and this and not any(it.time for it in this) and imp.layout != "canvas":
        say(f"注意：{lms.label(imp.title)} 的下载里没有提交时间，没法按截止时间判断迟交。这一批是截止之后才收到的话，"
            "加 --submitted-at \"2024-03-02 08:00\"（按课程的时区理解）：这次下载里的每一份都按这个时间算迟交。")

# ----------------------------------------------------------------------------- 评哪些 notebook
def named_notebooks(text: str | None, notebooks: list[str]) -> list[str]:
    """--notebooks 01,02（完整的名字、开头的编号或名字的开头；all 是全部）→ 规范的 notebook 名。"""
    if not text:
        return []
    out = []
    for token in (t.strip() for t in re.split(r"[,，\s]+", text) if t.strip()):
        if token.lower() in ("all", "全部"):
            return list(notebooks)
        found = [nb for nb in notebooks if nb == token or nb.lower().startswith(token.lower())]
        if len(found) != 1:
            raise InputError(f"--notebooks 里的 {token!r} " + ("对上了好几个 notebook" if found else "对不上任何 notebook")
                             + f"：本作业的 notebook 是 {', '.join(notebooks)}（写开头的编号就行，例如 --notebooks 01,02）")
        out += [nb for nb in found if nb not in out]
    return out


@dataclass
class Choice:
    """这次评哪些 notebook（open）和为什么；没评的 notebook 为什么没评（held_why）。"""

    open: list
    why: str                 # 给助教看的一句话：这次评的是哪些、凭什么
    held_why: str = ""       # 不评的那些为什么不评


def choose_notebooks(notebooks: list[str], named: list[str], before: list[str], due: dt.datetime | None,
                     guarded: bool, now: dt.datetime | None = None) -> Choice:
    """评哪些 notebook。一个作业的几个 notebook 在 nbgrader 里只有一个截止时间（整个作业的）；按周发布的课程
    每周截止之后点名评那一周的（--notebooks）。规则（先到先算）：
    - 给了 --notebooks：只评点名的和之前评过的（before），不管截止时间（fe44r M1：按周发布的助教用 --due 写这一周的截止时间
      来标迟交，作业的截止时间早于现在时以前全部评，提前交的下一周的 notebook 也评了，反馈写出了它的隐藏输入）；
    - 作业已经截止（--due 或 gradebook 里的 duedate 早于现在）：全部评；
    - 没有截止时间、课程也没有学期密钥：全部评（隐藏输入是公开的种子 0，提前评也泄露不了什么；以前就是这样）；
    - 否则（还没截止，或者没有截止时间而课程有学期密钥）：只评之前评过的（before）。
    提前交的别的 notebook 的反馈会写出那个 notebook 的隐藏输入：截止之前不评、不写反馈，也不算别人没交。"""
    now = now or dt.datetime.now(dt.timezone.utc)
    if not named:
        if due is not None and due <= now:
            return Choice(list(notebooks), f"作业已经在 {lms.show_time(due)} 截止：全部 notebook 都评")
        if due is None and not guarded:
            return Choice(list(notebooks), "作业没有截止时间、课程没有学期密钥：下载里的 notebook 都评")
    chosen = [nb for nb in notebooks if nb in named or nb in before]
    parts = [f"{nb}（{'--notebooks 点名' if nb in named else '之前评过'}）" for nb in chosen]
    why = ("这次评的 notebook：" + "、".join(parts)) if chosen else "这次一个 notebook 也不评"
    if named:
        return Choice(chosen, f"{why}（给了 --notebooks：只评点名的和之前评过的，不管截止时间）",
                      "--notebooks 没有点名它")
    until = (f"作业 {lms.show_time(due)} 才截止" if due is not None
             else "作业没有截止时间，而课程有学期密钥（python -m lib.grading secret）")
    return Choice(chosen, f"{why}（{until}：只评 --notebooks 点名的和之前评过的）", f"{until}，这次也没有点名")


def _say_what_is_graded(say, imp: Imported, choice: Choice) -> None:
    """说清楚评哪些 notebook；下载里有、但这次不评的 notebook 有几份、为什么、以后怎么评。"""
    held: dict = {}
    for it in imp.items:
        if it.notebook and not it.skip and not imp.is_open(it.notebook):
            held[it.notebook] = held.get(it.notebook, 0) + 1
    if held or choice.held_why:  # 全部都评（作业截止了，或者没有截止时间也没有密钥）时不多说
        say(choice.why + "。")
    if held:
        names = "、".join(f"{nb}（{n} 份）" for nb, n in held.items())
        numbers = ",".join(nb.split("_", 1)[0] for nb in held)
        say(f"没有评：{names}：{choice.held_why}。提前交的 notebook 不评、不写反馈（反馈会写出那个 notebook 的隐藏输入），"
            f"也不算别的学生没交；文件已经存进课程，到期以后加 --notebooks {numbers} 再运行 grade 就评（不用重新下载）。")


def _roster_and_due(imp: Imported) -> str:
    text = ""
    if imp.roster:
        text += f"；名单：{imp.roster.describe()}"
    if imp.due:
        text += (f"；截止时间 {lms.show_time(imp.due, zone=True)}"
                 f"（{'--due' if imp.due_from_option else 'gradebook 里的 duedate'}）")
    return text


def write_timestamp(sub_dir: Path, it: Item) -> None:
    """nbgrader 记提交时间的地方：submitted/学生/作业/timestamp.txt（nbgrader autograde 也读它）。"""
    p = Path(sub_dir) / "timestamp.txt"
    if it.submitted_at is None:
        p.unlink(missing_ok=True)
        return
    p.write_text(it.submitted_at.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC"), encoding="utf-8")


def utc_naive(t: dt.datetime | None) -> dt.datetime | None:
    """nbgrader 的 gradebook 里时间都是不带时区的 UTC（nbgrader.utils.parse_utc 的约定）。"""
    return t.astimezone(dt.timezone.utc).replace(tzinfo=None) if t else None


def annotate(status: str, detail: list, it: Item) -> tuple[str, list]:
    """导入时知道的事写进这一行：认出的文件名、评的是哪一份（有多份时）、迟交（status 加上 late）。"""
    detail = detail + it.notes
    if it.late:
        status = Status.add(status, Status.LATE)
        detail.append(it.late)
    return status, detail
