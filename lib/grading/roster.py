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
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from .lms import STUDENT_RE, InputError

# 能当学号的列，越靠前越优先（表头比较时忽略大小写、空格和下划线）
ID_HEADERS = ["学号", "studentid", "studentnumber", "sisuserid", "idnumber", "学生编号", "学籍号", "sid",
              "username", "用户名", "sisloginid", "loginid", "email", "emailaddress", "email地址", "邮箱", "电子邮件", "电子邮箱"]
# 另外也能认出学生、但不当学号用的列
ALIAS_HEADERS = ["id", "identifier", "标识符", "userid", "canvasid", "用户id"]
NAME_HEADERS = ["姓名", "name", "fullname", "student", "studentname", "学生姓名", "学生"]
PARTICIPANT_RE = re.compile(r"(\d+)\s*$")
# 表格里的序号列：永远不当学号（教务系统导出的第一列通常是它）
ORDINAL_HEADERS = {"序号", "no", "no.", "#", "编号", "行号", "index"}
# 当学生编号用时要提醒助教的列：不是学号，而是邮箱或用户名
EMAIL_HEADERS = {"email", "emailaddress", "邮箱", "电子邮件", "电子邮箱", "email地址"}
HEADER_SCAN_ROWS = 15  # 表头最多在第几行（上面是合并的标题行、说明行）


def nfc(text) -> str:
    """Unicode NFC：macOS 的 zip 和文件名是分解形式（NFD），“ë” 存成 e + ¨；比较之前统一成组合形式。"""
    return unicodedata.normalize("NFC", str(text))


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
    preamble: list = field(default_factory=list)  # 表头上面的标题行（原样写回）

    @property
    def header_row(self) -> int:
        """表头在文件里的第几行（从 1 数；上面的标题行、空行都算）。"""
        return len(self.preamble) + 1

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
    rows = [[nfc(c) for c in r] for r in csv.reader(io.StringIO(text, newline=""), delimiter=delim)]
    if not any(any(c.strip() for c in r) for r in rows):
        raise InputError(f"{path.name} 是空的")
    k = header_index(rows)
    return Table(rows[k], rows[k + 1:], encoding=enc, bom=bom, delimiter=delim, source=str(path), preamble=rows[:k])


def header_index(rows: list) -> int:
    """表头是哪一行：前几行里第一个含有认得出的列名（学号、Student ID、姓名……）的行。
    教务系统和 Excel 的导出常在表头上面放一个合并单元格的标题行（“2023-2024学年第一学期 … 学生名单”）。
    一行也认不出时是第一个非空行（没有表头的名单由 load() 处理）。"""
    known = set(ID_HEADERS) | set(ALIAS_HEADERS) | set(NAME_HEADERS)
    for k, r in enumerate(rows[:HEADER_SCAN_ROWS]):
        if any(norm_header(c) in known for c in r):
            return k
    return next(k for k, r in enumerate(rows) if any(str(c).strip() for c in r))


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
    rows = [[nfc(text(v)) for v in row] for row in wb.worksheets[0].iter_rows(values_only=True)]
    wb.close()
    if not any(any(c.strip() for c in r) for r in rows):
        raise InputError(f"{path.name} 的第一张工作表是空的")
    k = header_index(rows)
    body = [r for r in rows[k + 1:] if any(c.strip() for c in r)]
    return Table(rows[k], body, encoding="utf-8", bom=True, source=str(path), preamble=rows[:k])


def write_table(path: Path, table: Table, quote_all: bool = False) -> None:
    """按读进来时的编码、BOM 和分隔符写回（.xlsx 读进来的写成带 BOM 的 UTF-8 CSV，Excel 能直接打开）。"""
    buf = io.StringIO(newline="")
    w = csv.writer(buf, delimiter=table.delimiter, quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL,
                   lineterminator="\r\n")
    w.writerows(table.preamble)
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
    header_row: int = 1        # 表头在第几行（0 = 没有表头）
    column_index: int = 0      # 学号列是第几列（从 1 数）
    note: str = ""             # 给助教的说明（例如学生编号其实是邮箱）

    def lookup(self, key: str | None) -> str | None:
        if key is None:
            return None
        key = nfc(key).strip()
        if key in self.names:
            return key
        return self.aliases.get(key.lower())

    def by_name(self, name: str) -> str | None:
        """姓名完全相同、且名单里只有一个人叫这个名字时的学号（LMS 下载里只有姓名和 LMS 编号时用）。"""
        want = re.sub(r"\s+", "", nfc(name or ""))
        hits = [sid for sid, n in self.names.items() if want and re.sub(r"\s+", "", n) == want]
        return hits[0] if len(hits) == 1 else None

    def identities(self, sid: str) -> set:
        return {sid.lower()} | {a for a, s in self.aliases.items() if s == sid}

    def to_json(self) -> dict:
        return {"source": self.source, "kind": self.kind, "id_column": self.id_column, "ids": self.ids,
                "names": self.names, "aliases": self.aliases, "skipped": self.skipped,
                "header_row": self.header_row, "column_index": self.column_index, "note": self.note}

    @classmethod
    def from_json(cls, d: dict) -> "Roster":
        return cls(**d)

    def describe(self) -> str:
        """给助教看：用的是哪个文件、哪一行表头、哪一列。"""
        where = (f"第 {self.header_row} 行是表头，" if self.header_row > 1 else "") + \
            (f"学号列“{self.id_column}”（第 {self.column_index} 列）" if self.header_row else "没有表头，第 1 列当学号")
        return f"{self.source}（{self.kind}，{where}，{len(self.ids)} 名学生）" + (f"。{self.note}" if self.note else "")

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
            if h in ORDINAL_HEADERS:
                continue
            if h == want and sum(bool(table.cell(r, i)) for r in table.rows) * 2 >= max(1, len(table.rows)):
                return i
    return None


def _looks_like_header_word(value: str) -> bool:
    n = norm_header(value)
    return n in set(ID_HEADERS) | set(ALIAS_HEADERS) | set(NAME_HEADERS) | ORDINAL_HEADERS or n == "studentid"


def load(path: Path, id_column: str | None = None) -> Roster:
    table = read_table(path)
    kind = table_kind(table)
    idx = find_id_column(table, id_column)
    if idx is None:  # 没有认得出的表头：每行一个学号，或第一列是学号（第一行不像学号时当表头）
        rows = table.preamble + [table.header] + table.rows
        first = next((k for k, r in enumerate(rows) if table.cell(r, 0)), 0)
        has_header = not STUDENT_RE.match(table.cell(rows[first], 0)) or _looks_like_header_word(
            table.cell(rows[first], 0))
        body = rows[first + 1:] if has_header else rows[first:]
        ids = [table.cell(r, 0) for r in body if table.cell(r, 0) and not table.cell(r, 0).startswith("#")
               and STUDENT_RE.match(table.cell(r, 0)) and not _looks_like_header_word(table.cell(r, 0))]
        ids = list(dict.fromkeys(ids))
        return Roster(str(path), kind, "第 1 列", ids, {i: "" for i in ids}, header_row=first + 1 if has_header else 0,
                      column_index=1)
    heads = [norm_header(h) for h in table.header]
    name_i = next((heads.index(n) for n in NAME_HEADERS if n in heads), None)
    alias_cols = [i for i, h in enumerate(heads) if i != idx and (h in ID_HEADERS or h in ALIAS_HEADERS)]
    roster = Roster(str(path), kind, str(table.header[idx]), header_row=table.header_row, column_index=idx + 1)
    if heads[idx] in EMAIL_HEADERS:
        roster.note = (f"注意：这份{kind}里没有学号列，学生编号用的是邮箱（“{table.header[idx]}”列），grades.csv 和反馈文件夹"
                       "都按邮箱记。要按学号记：Moodle 里请管理员在“用户策略 → 显示身份字段（showuseridentity）”勾选"
                       "“ID number”后重新下载评分工作表；或者用一份同时有学号和邮箱两列的教务名单当 --roster")
    elif heads[idx] in ("username", "用户名", "sisloginid", "loginid"):
        roster.note = f"注意：名单里没有学号列，学生编号用的是用户名（“{table.header[idx]}”列）"
    seen_alias: dict = {}
    for row in table.rows:
        sid = table.cell(row, idx)
        if not sid or _looks_like_header_word(sid):  # Canvas 的 Points Possible 行、测试学生、空行、重复的表头
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
    bad = [sid for sid, n in roster.names.items() if garbled(n)]
    if bad:
        warn = (f"注意：名单里 {len(bad)} 个姓名含“?”（转换成 GBK 时丢了字，例如 {roster.names[bad[0]]}，学号 {bad[0]}）："
                "下载里有这个学生完好的姓名时用下载里的；要改正请把名单存成 UTF-8 再给 --roster")
        roster.note = f"{roster.note}。{warn}" if roster.note else warn
    return roster


def garbled(name: str) -> bool:
    """中文 Windows 把 GBK 里没有的字（ë、ü……）存成“?”，解码不了的字节是 \ufffd：这样的姓名丢了字。"""
    return "?" in (name or "") or "\ufffd" in (name or "")


def better_name(roster_name: str, other: str) -> str:
    """名单里的姓名和下载里的姓名：名单的优先，除非它丢了字（garbled）而另一个没有。"""
    if roster_name and not (garbled(roster_name) and other and not garbled(other)):
        return roster_name
    return other or roster_name

