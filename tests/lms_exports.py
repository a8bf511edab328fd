"""造出各个 LMS 真实样子的下载和成绩文件（测试数据生成器，不是测试文件）。

命名都照 lib/grading/lms.py 注释里的出处：Canvas 的 ContentZipper 和 GradebookExporter、Moodle 的
download_submissions 和离线评分工作表、Blackboard 的 “下载作业” 回执和成绩中心 Work Offline 文件、
Gradescope 的 Export Submissions（Ruby 写的 submission_metadata.yml）、nbgrader 的 submitted/ 目录。
"""
from __future__ import annotations

import codecs
import csv
import datetime as dt
import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

CST = dt.timezone(dt.timedelta(hours=8))


@dataclass(frozen=True)
class Student:
    sid: str            # 学号（教务系统）
    name: str           # 中文姓名
    english: str        # LMS 里的英文名 “Wei Zhang”
    canvas_id: int      # Canvas 用户 ID
    pid: int            # Moodle 参与者编号
    username: str       # Blackboard 用户名、邮箱前缀

    @property
    def sortable(self) -> str:  # Canvas 的 sortable_name：“Zhang, Wei”
        first, last = self.english.split(" ", 1)
        return f"{last}, {first}"

    @property
    def email(self) -> str:
        return f"{self.username}@example.edu.cn"


STUDENTS = [Student("2024001", "张伟", "Wei Zhang", 50001, 123456, "zhangwei"),
            Student("2024002", "王芳", "Fang Wang", 50002, 123457, "wangfang"),
            Student("2024003", "李娜", "Na Li", 50003, 123458, "lina")]


@dataclass
class Upload:
    """一个学生上传的一个文件。"""
    student: Student
    filename: str
    data: bytes
    time: dt.datetime = dt.datetime(2024, 3, 1, 20, 0, tzinfo=CST)
    late: bool = False
    attachment: int = 900001     # Canvas 的附件编号（越大越晚）


def _zip(path: Path, files: list[tuple[str, bytes, dt.datetime | None]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, data, when in files:
            info = zipfile.ZipInfo(name, date_time=(when or dt.datetime(2024, 3, 2, 9, 0)).timetuple()[:6])
            info.flag_bits |= 0x800  # UTF-8 文件名
            zf.writestr(info, data)
    return path


def _local(t: dt.datetime) -> dt.datetime:
    """LMS 服务器记的当地时间（不带时区）：服务器和课程都在北京时间（课程的时区，pyproject.toml 的
    [tool.course] timezone），和评分机器的时区无关。"""
    return t.astimezone(CST).replace(tzinfo=None)


# ----------------------------------------------------------------------------- 下载
def canvas_zip(path: Path, uploads: list[Upload], upper_late: bool = False) -> Path:
    """submissions.zip：平铺，“姓名_[late_]用户ID_附件ID_文件名”；姓名去掉非字母数字并小写。"""
    files = []
    for u in uploads:
        login = re.sub(r"[^\w]", "", u.student.sortable).lower()
        late = ("LATE_" if upper_late else "late_") if u.late else ""
        files.append((f"{login}_{late}{u.student.canvas_id}_{u.attachment}_{u.filename}", u.data, None))
    return _zip(path, files)


def moodle_prefix(s: Student) -> str:
    return f"{s.english}_{s.pid}_assignsubmission_file_"


def moodle_zip(path: Path, uploads: list[Upload], folders: bool = True, chinese_names: bool = False) -> Path:
    """“按文件夹下载”时 “全名_参与者编号_assignsubmission_file_/原文件名”，否则前缀直接接在文件名前。"""
    files = []
    for u in uploads:
        prefix = moodle_prefix(u.student).replace(u.student.english, u.student.name) if chinese_names \
            else moodle_prefix(u.student)
        files.append((prefix + ("/" if folders else "") + u.filename, u.data, _local(u.time)))
    return _zip(path, files)


def blackboard_zip(path: Path, uploads: list[Upload], title: str = "Exercises") -> Path:
    """gradebook_….zip：每次尝试一个回执 “作业名_用户名_attempt_时间.txt”，文件是同一前缀加 “_原文件名”。"""
    files, attempts = [], {}
    for u in uploads:
        base = f"{title}_{u.student.username}_attempt_{_local(u.time):%Y-%m-%d-%H-%M-%S}"
        attempts.setdefault(base, (u, []))[1].append(u)
        files.append((f"{base}_{u.filename}", u.data, _local(u.time)))
    for base, (u, ups) in attempts.items():
        listing = "".join(f"\tOriginal filename: {x.filename}\n\tFilename: {base}_{x.filename}\n" for x in ups)
        receipt = (f"Name: {u.student.english} ({u.student.username})\nAssignment: {title}\n"
                   f"Date Submitted: {_local(u.time):%A, %B %d, %Y %I:%M:%S %p} CST\nCurrent Grade: Needs Grading\n\n"
                   "Submission Field:\nThere is no student submission text data for this assignment.\n\n"
                   "Comments:\nThere are no student comments for this assignment.\n\n"
                   f"Files:\n{listing}\n")
        files.append((base + ".txt", receipt.encode("utf-8"), _local(u.time)))
    return _zip(path, files)


def gradescope_zip(path: Path, submissions: list[list[Upload]]) -> Path:
    """assignment_N_export/：每份提交一个 submission_N/，加上 Ruby 写出的 submission_metadata.yml。"""
    top = "assignment_9100_export/"
    files, meta = [], []
    for k, ups in enumerate(submissions):
        sub = f"submission_{2000 + k}"
        for u in ups:
            files.append((f"{top}{sub}/{u.filename}", u.data, None))
        people = {u.student for u in ups}
        meta.append(f"{sub}:\n  :submitters:\n" + "".join(
            f"  - :name: {s.english}\n    :sid: '{s.sid}'\n    :email: {s.email}\n" for s in sorted(people, key=str))
            + f"  :created_at: {ups[0].time:%Y-%m-%d %H:%M:%S}.123456789 {ups[0].time:%z}\n  :score: 0.0\n"
            "  :history: []\n")
    files.append((top + "submission_metadata.yml", "---\n".encode() + "".join(meta).encode("utf-8"), None))
    return _zip(path, files)


def nbgrader_submitted(folder: Path, uploads: list[Upload], assignment: str) -> Path:
    """nbgrader collect 之后的 submitted/学生/作业/NOTEBOOK.ipynb 和 timestamp.txt。"""
    for u in uploads:
        d = folder / "submitted" / u.student.username / assignment
        d.mkdir(parents=True, exist_ok=True)
        (d / u.filename).write_bytes(u.data)
        (d / "timestamp.txt").write_text(u.time.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
    return folder


def folders_zip(path: Path, uploads: list[Upload], mac: bool = True) -> Path:
    """自己收作业：“学号_姓名/文件名”，Mac 压缩时多出 __MACOSX/、.DS_Store，还有 .ipynb_checkpoints/。"""
    files = []
    for u in uploads:
        d = f"{u.student.sid}_{u.student.name}"
        files.append((f"作业/{d}/{u.filename}", u.data, _local(u.time)))
        if mac:
            files.append((f"__MACOSX/作业/{d}/._{u.filename}", b"\x00\x05\x16\x07 mac resource fork", None))
            files.append((f"作业/{d}/.ipynb_checkpoints/{u.filename[:-6]}-checkpoint.ipynb", u.data, None))
    if mac:
        files.append(("作业/.DS_Store", b"\x00\x00\x00\x01Bud1", None))
    return _zip(path, files)


def zipped_upload(inner: list[tuple[str, bytes]]) -> bytes:
    """学生把 notebook 打成 zip 再上传（在 Mac 上压缩的，带 __MACOSX/）。"""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in inner:
            zf.writestr(name, data)
            zf.writestr(f"__MACOSX/._{name}", b"\x00\x05\x16\x07")
    return buf.getvalue()


# ----------------------------------------------------------------------------- 成绩表和名单
def _write_csv(path: Path, rows: list[list], encoding: str = "utf-8", bom: bool = False, delimiter: str = ",",
               quote_all: bool = False) -> Path:
    buf = io.StringIO(newline="")
    csv.writer(buf, delimiter=delimiter, lineterminator="\r\n",
               quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL).writerows(rows)
    boms = {"utf-8": codecs.BOM_UTF8, "utf-16-le": codecs.BOM_UTF16_LE}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((boms[encoding] if bom else b"") + buf.getvalue().encode(encoding))
    return path


def canvas_gradebook(path: Path, students=STUDENTS, column: str = "Exercises (12345)", points: float = 60,
                     bom: bool = True) -> Path:
    """Grades → Export：表头、Points Possible 行（读作 “    Points Possible”）、每个学生一行，最后是测试学生。"""
    header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Quiz 1 (111)", column,
              "Current Score", "Unposted Current Score", "Final Score", "Unposted Final Score"]
    rows = [header, ["    Points Possible", "", "", "", "", "10", f"{points:g}"] + ["(read only)"] * 4]
    for s in students:
        rows.append([s.sortable, str(s.canvas_id), s.sid, s.email, "CS224N 第 7 讲", "8", "", "80", "80", "13.3", "13.3"])
    rows.append(["Student, Test", "59999", "", "", "CS224N 第 7 讲", "", "", "", "", "", ""])
    return _write_csv(path, rows, bom=bom)


def moodle_worksheet(path: Path, students=STUDENTS, max_grade: float = 100) -> Path:
    """作业 → 查看所有提交 → 下载评分工作表（显示 ID number 身份字段时）。"""
    rows = [["Identifier", "Full name", "ID number", "Email address", "Status", "Grade", "Maximum Grade",
             "Grade can be changed", "Last modified (submission)", "Last modified (grade)", "Feedback comments"]]
    for s in students:
        rows.append([f"Participant {s.pid}", s.english, s.sid, s.email, "Submitted for grading", "",
                     f"{max_grade:.2f}", "Yes", "Friday, 1 March 2024, 8:00 PM", "-", ""])
    return _write_csv(path, rows)


def blackboard_gc(path: Path, students=STUDENTS, column: str = "Exercises [Total Pts: 60 Score] |664617") -> Path:
    """Work Offline → Download：.xls 其实是带 BOM 的 UTF-16 制表符文本，每个字段带引号。"""
    rows = [["Last Name", "First Name", "Username", "Student ID", "Last Access", "Availability", column]]
    for s in students:
        first, last = s.english.split(" ", 1)
        rows.append([last, first, s.username, s.sid, "2024-03-02 09:00:00", "Available", ""])
    return _write_csv(path, rows, encoding="utf-16-le", bom=True, delimiter="\t", quote_all=True)


def roster_csv(path: Path, header: list, rows: list[list], encoding: str = "utf-8", bom: bool = False) -> Path:
    """教务系统或 Excel 导出的名单：UTF-8（带或不带 BOM）、GBK……"""
    return _write_csv(path, [header] + rows, encoding=encoding, bom=bom)


def roster_xlsx(path: Path, header: list, rows: list[list]) -> Path:
    import openpyxl
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(header)
    for r in rows:
        ws.append(r)
    wb.save(path)
    return path


def read_rows(path: Path) -> list[list[str]]:
    """读回一个导出的文件（按 BOM 判断编码，按内容判断分隔符），给测试断言用。"""
    data = Path(path).read_bytes()
    for bom, enc in ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le")):
        if data.startswith(bom):
            text = data[len(bom):].decode(enc)
            break
    else:
        text = data.decode("utf-8")
    delim = "\t" if "\t" in text.splitlines()[0] else ","
    return list(csv.reader(io.StringIO(text, newline=""), delimiter=delim))


# ----------------------------------------------------------------------------- 一学期里会遇到的文件
def jiaowu_roster_xlsx(path: Path, students=STUDENTS, title: str = "2023-2024学年第二学期 自然语言处理（CS224N 第 7 讲）学生名单") -> Path:
    """教务系统导出的 Excel 名单：第 1 行是合并单元格的标题，第 2 行是课程信息，第 3 行才是表头，
    第一列是序号（1、2、3……，不是学号），学号存成数字。"""
    import openpyxl
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "学生名单"
    ws.append([title])
    ws.merge_cells("A1:F1")
    ws.append(["课程号：08012345", None, "任课教师：李老师", None, "选课人数：" + str(len(students))])
    ws.append(["序号", "学号", "姓名", "性别", "专业", "行政班"])
    for i, s in enumerate(students, 1):
        ws.append([i, int(s.sid), s.name, "男", "计算机科学与技术", "计科2101"])
    wb.save(path)
    return path


def jiaowu_roster_csv(path: Path, students=STUDENTS, encoding: str = "gbk") -> Path:
    """同一份名单在 Excel 里另存为 CSV（中文 Windows：GBK）：标题行变成一个单元格加一串空单元格。"""
    rows = [["2023-2024学年第二学期 自然语言处理 学生名单", "", "", ""], ["序号", "学号", "姓名", "班级"]]
    rows += [[str(i), s.sid, s.name, "计科2101"] for i, s in enumerate(students, 1)]
    return _write_csv(path, rows, encoding=encoding)


def moodle_worksheet_email(path: Path, students=STUDENTS, chinese: bool = False, max_grade: float = 100) -> Path:
    """默认设置的 Moodle 评分工作表：身份字段只有邮箱（站点没有开 ID number），没有学号。
    chinese=True：中文界面下载的，表头是中文（mod/assign 的 zh_cn 语言包：标识符、成绩、最高成绩、反馈评语）。"""
    header = (["标识符", "全名", "Email 地址", "状态", "成绩", "最高成绩", "成绩可以被更改", "最后修改时间（提交）",
               "最后修改时间（成绩）", "反馈评语"] if chinese else
              ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade", "Grade can be changed",
               "Last modified (submission)", "Last modified (grade)", "Feedback comments"])
    rows = [header]
    for s in students:
        rows.append([("参与者 " if chinese else "Participant ") + str(s.pid), s.name if chinese else s.english,
                     s.email, "已提交评分" if chinese else "Submitted for grading", "", f"{max_grade:.2f}",
                     "是" if chinese else "Yes", "2024年03月1日 星期五 20:00" if chinese else "Friday, 1 March 2024, 8:00 PM",
                     "-", ""])
    return _write_csv(path, rows, bom=chinese)


def raw_zip(path: Path, files: list[tuple[str, bytes]], utf8: bool = True, deflate: bool = False) -> Path:
    """按给定的原样文件名写 zip（macOS 的 Archive Utility 写 NFD 的 UTF-8 文件名）。"""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED) as zf:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=(2024, 3, 2, 9, 0, 0))
            if utf8:
                info.flag_bits |= 0x800
            info.compress_type = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
            zf.writestr(info, data)
    return path


def damage_member(path: Path, member: str) -> Path:
    """把 zip 里一个文件的数据改坏（下载时网络出错、U 盘坏块）：本地文件头和中央目录都完好，CRC 对不上。"""
    data = bytearray(Path(path).read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    start = info.header_offset + 30 + len(info.filename.encode("utf-8")) + len(info.extra)
    for k in range(start + 5, start + min(info.compress_size, 60)):
        data[k] ^= 0x5A
    Path(path).write_bytes(bytes(data))
    return path


def blackboard_zip_without_receipts(path: Path, uploads: list[Upload], title: str = "Exercises") -> Path:
    """只挑了文件、没有回执（.txt）的 Blackboard 下载。"""
    files = []
    for u in uploads:
        base = f"{title}_{u.student.username}_attempt_{_local(u.time):%Y-%m-%d-%H-%M-%S}"
        files.append((f"{base}_{u.filename}", u.data, _local(u.time)))
    return _zip(path, files)


def gbk_zip(path: Path, files: list[tuple[str, bytes]]) -> Path:
    """中文 Windows 的压缩软件（学习通、超星这类平台的“打包下载”也是）：文件名按 GBK 存，不设 UTF-8 标记。
    Python 的 zipfile 只会写 UTF-8 文件名，所以先用同样字节长度的 ASCII 占位名写（不设标记），再把文件头和
    中央目录里的两处文件名换成 GBK 的字节。"""
    raw = [(name.encode("gbk"), data) for name, data in files]
    holders = [(f"{k:04d}" + "z" * (len(b) - 4)).encode() for k, (b, _) in enumerate(raw)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for holder, (_, data) in zip(holders, raw):
            zf.writestr(zipfile.ZipInfo(holder.decode(), date_time=(2024, 3, 2, 9, 0, 0)), data)
    blob = Path(path).read_bytes()
    for holder, (real, _) in zip(holders, raw):
        assert blob.count(holder) == 2, "占位名必须唯一"
        blob = blob.replace(holder, real)
    Path(path).write_bytes(blob)
    return path


# ---- 导入测试共用的小工具（test_lms.py 和 test_ta_term.py 都用）----
REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.stem for p in (REPO / "release" / "exercises").glob("*.ipynb"))


def nb_bytes(tag: str = "") -> bytes:
    """一个最小的合法 notebook（导入测试用；tag 让内容不同）。"""
    import json
    return json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": tag}], "metadata": {},
                       "nbformat": 4, "nbformat_minor": 5}).encode()


def imported(path, **kw):
    """按课程的 notebook 名单导入一个下载（collect.import_download）。"""
    from lib.grading import collect
    kw.setdefault("assignment", "exercises")
    return collect.import_download(path, NOTEBOOKS, **kw)


def graded(imp) -> dict:
    """{(学号, notebook): 条目}：会被评分的那些。"""
    return {(it.student_id, it.notebook): it for it in imp.items if it.reason is None}


def held(imp) -> list:
    """会进 grades.csv 的隔离行（skip 的不进）。"""
    return [it for it in imp.items if it.reason and not it.skip]
