"""学生名单和 LMS 的成绩表文件：按导出时的原样读取，写回时保持原来的编码、分隔符和 BOM。

读得懂：CSV（UTF-8 带或不带 BOM、UTF-16——Blackboard 的 .xls 其实是 UTF-16 的制表符文本——、
GB18030/GBK——中文 Windows 上 Excel 另存的 CSV——），分隔符逗号、分号或制表符，带引号的字段；
.xlsx（openpyxl）。学号列按表头找（学号、Student ID、SIS User ID、ID number、Username……），
或用 ``--roster-id-column`` 指定；其余能认出学生的列（Canvas 的 ID、Moodle 的 “Participant N”、
用户名、邮箱……）都记成别名，所以 Canvas 成绩册导出、Moodle 评分工作表、Blackboard 成绩中心文件
都可以直接当名单：它们把 LMS 下载里的编号换成学号。
"""
from __future__ import annotations

import codecs
import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from .lms import STUDENT_RE, InputError

# 能当学号的列，越靠前越优先（表头比较时忽略大小写、空格和下划线）
ID_HEADERS = ["学号", "studentid", "studentnumber", "sisuserid", "idnumber", "学生编号", "学籍号", "sid",
              "username", "用户名", "sisloginid", "loginid", "email", "emailaddress", "邮箱", "电子邮件", "电子邮箱"]
# 另外也能认出学生、但不当学号用的列
ALIAS_HEADERS = ["id", "identifier", "标识符", "userid", "canvasid", "用户id"]
NAME_HEADERS = ["姓名", "name", "fullname", "student", "studentname", "学生姓名", "学生"]
PARTICIPANT_RE = re.compile(r"(\d+)\s*$")


def norm_header(h: str) -> str:
    return re.sub(r"[\s_]+", "", str(h or "")).lower()


@dataclass
class Table:
    """一张表：表头、其余各行（原样保留，包括 Canvas 的 Points Possible 行），以及写回时要用的格式。"""
    header: list
    rows: list
    encoding: str = "utf-8"
    bom: bool = False
    delimiter: str = ","
    source: str = ""

    def col(self, name: str) -> int | None:
        want = norm_header(name)
        return next((i for i, h in enumerate(self.header) if norm_header(h) == want), None)

    def cell(self, row: list, i: int | None) -> str:
        return str(row[i]).strip() if i is not None and i < len(row) and row[i] is not None else ""


def decode(data: bytes) -> tuple[str, str, bool]:
    """(文本, 编码, 是否带 BOM)。顺序：BOM → UTF-8 → GB18030（GBK 的超集）。"""
    for bom, enc in ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")):
        if data.startswith(bom):
            return data[len(bom):].decode(enc), enc, True
    try:
        return data.decode("utf-8"), "utf-8", False
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("gb18030"), "gb18030", False
    except UnicodeDecodeError as e:
        raise InputError(f"读不懂这个文件的编码（不是 UTF-8、UTF-16，也不是 GBK/GB18030）：{e}") from None


def read_table(path: Path) -> Table:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"找不到文件：{path}")
    data = path.read_bytes()
    if path.suffix.lower() in (".xlsx", ".xlsm"):
        return _read_xlsx(path)
    if data.startswith(b"\xd0\xcf\x11\xe0"):
        raise InputError(f"{path.name} 是老式 Excel 二进制文件（.xls）：请在 Excel 里另存为 .xlsx 或 CSV 再用")
    text, enc, bom = decode(data)
    sample = "\n".join(text.splitlines()[:20])
    try:
        delim = csv.Sniffer().sniff(sample, delimiters=",;\t").delimiter
    except csv.Error:
        delim = "\t" if "\t" in sample else ","
    rows = [r for r in csv.reader(io.StringIO(text, newline=""), delimiter=delim)]
    while rows and not any(c.strip() for c in rows[0]):
        rows.pop(0)
    if not rows:
        raise InputError(f"{path.name} 是空的")
    return Table(rows[0], rows[1:], encoding=enc, bom=bom, delimiter=delim, source=str(path))


def _read_xlsx(path: Path) -> Table:
    import openpyxl
    try:
        wb = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except Exception as e:  # noqa: BLE001 —— 损坏的文件、不是 xlsx……
        raise InputError(f"openpyxl 打不开 {path.name}：{e}") from None

    def text(v):
        if v is None:
            return ""
        if isinstance(v, float) and v.is_integer():
            return str(int(v))  # Excel 把学号存成数字时
        return str(v)
    rows = [[text(v) for v in row] for row in wb.worksheets[0].iter_rows(values_only=True)]
    wb.close()
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise InputError(f"{path.name} 的第一张工作表是空的")
    return Table(rows[0], rows[1:], encoding="utf-8", bom=True, source=str(path))


def write_table(path: Path, table: Table, quote_all: bool = False) -> None:
    """按读进来时的编码、BOM 和分隔符写回（.xlsx 读进来的写成带 BOM 的 UTF-8 CSV，Excel 能直接打开）。"""
    buf = io.StringIO(newline="")
    w = csv.writer(buf, delimiter=table.delimiter, quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL,
                   lineterminator="\r\n")
    w.writerow(table.header)
    w.writerows(table.rows)
    bom = {"utf-8": codecs.BOM_UTF8, "utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE}
    data = (bom.get(table.encoding, b"") if table.bom else b"") + buf.getvalue().encode(table.encoding)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def identity_values(header_norm: str, value: str) -> list[str]:
    """一个单元格能认出学生的写法：原值；Moodle 的 “Participant 123456” 还有 123456。"""
    m = PARTICIPANT_RE.search(value) if header_norm in ("identifier", "标识符") else None
    return [value, m.group(1)] if m else [value]


@dataclass
class Roster:
    """名单：学号（按文件里的顺序）、姓名、别名（LMS 编号、用户名、邮箱……小写）→ 学号。"""
    source: str
    kind: str
    id_column: str
    ids: list = field(default_factory=list)
    names: dict = field(default_factory=dict)
    aliases: dict = field(default_factory=dict)
    skipped: int = 0

    def lookup(self, key: str | None) -> str | None:
        if key is None:
            return None
        key = str(key).strip()
        if key in self.names:
            return key
        return self.aliases.get(key.lower())

    def by_name(self, name: str) -> str | None:
        """姓名完全相同、且名单里只有一个人叫这个名字时的学号（LMS 下载里只有姓名和 LMS 编号时用）。"""
        want = re.sub(r"\s+", "", name or "")
        hits = [sid for sid, n in self.names.items() if want and re.sub(r"\s+", "", n) == want]
        return hits[0] if len(hits) == 1 else None

    def identities(self, sid: str) -> set:
        return {sid.lower()} | {a for a, s in self.aliases.items() if s == sid}

    def to_json(self) -> dict:
        return {"source": self.source, "kind": self.kind, "id_column": self.id_column, "ids": self.ids,
                "names": self.names, "aliases": self.aliases, "skipped": self.skipped}

    @classmethod
    def from_json(cls, d: dict) -> "Roster":
        return cls(**d)

    @classmethod
    def from_ids(cls, ids, source: str = "") -> "Roster":
        ids = list(ids)
        return cls(source, "名单", "", ids, {i: "" for i in ids})


def table_kind(table: Table) -> str:
    heads = {norm_header(h) for h in table.header}
    if "sisuserid" in heads or any(table.cell(r, 0) == "Points Possible" for r in table.rows[:3]):
        return "Canvas 成绩册导出"
    if "identifier" in heads or "标识符" in heads:
        return "Moodle 评分工作表"
    if any("[Total Pts:" in str(h) for h in table.header):
        return "Blackboard 成绩中心文件"
    return "名单"


def find_id_column(table: Table, forced: str | None) -> int | None:
    if forced:
        i = table.col(forced)
        if i is None and forced.isdigit() and 1 <= int(forced) <= len(table.header):
            i = int(forced) - 1
        if i is None:
            raise InputError(f"名单 {Path(table.source).name} 里没有 “{forced}” 这一列（有：{'、'.join(map(str, table.header))}）")
        return i
    heads = [norm_header(h) for h in table.header]
    for want in ID_HEADERS + ALIAS_HEADERS:  # 优先级最高、且至少一半的行有值的那一列
        for i, h in enumerate(heads):
            if h == want and sum(bool(table.cell(r, i)) for r in table.rows) * 2 >= max(1, len(table.rows)):
                return i
    return None


def load(path: Path, id_column: str | None = None) -> Roster:
    table = read_table(path)
    kind = table_kind(table)
    idx = find_id_column(table, id_column)
    if idx is None:  # 没有认得出的表头：每行一个学号，或第一列是学号（第一行不像学号时当表头）
        first = table.cell(table.header, 0)
        rows = table.rows if not STUDENT_RE.match(first) or first.lower() == "student_id" else [table.header] + table.rows
        ids = [table.cell(r, 0) for r in rows if table.cell(r, 0) and not table.cell(r, 0).startswith("#")]
        return Roster(str(path), kind, "第 1 列", list(dict.fromkeys(ids)), {i: "" for i in ids})
    heads = [norm_header(h) for h in table.header]
    name_i = next((heads.index(n) for n in NAME_HEADERS if n in heads), None)
    alias_cols = [i for i, h in enumerate(heads) if i != idx and (h in ID_HEADERS or h in ALIAS_HEADERS)]
    roster = Roster(str(path), kind, str(table.header[idx]))
    seen_alias: dict = {}
    for row in table.rows:
        sid = table.cell(row, idx)
        if not sid:  # Canvas 的 Points Possible 行、测试学生、空行
            roster.skipped += 1
            continue
        if sid in roster.names:
            continue
        roster.ids.append(sid)
        roster.names[sid] = table.cell(row, name_i)
        for i in alias_cols:
            v = table.cell(row, i)
            for a in identity_values(heads[i], v) if v else []:
                seen_alias.setdefault(a.lower(), set()).add(sid)
    roster.aliases = {a: next(iter(s)) for a, s in seen_alias.items() if len(s) == 1}  # 重复的别名不用
    return roster

