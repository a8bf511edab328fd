"""导入：把 LMS 导出的文件夹或 .zip 变成 (学生编号, notebook) → 文件内容；其他一切进入隔离区并写明原因。

原始文件只读取，从不修改。支持的文件名：
- 单 notebook 作业：``STUDENT_ID.ipynb``（也接受 ``STUDENT_ID/NOTEBOOK.ipynb``）；
- 多 notebook 作业：``STUDENT_ID/NOTEBOOK.ipynb``；
- 其他 LMS 命名方式：``--name-regex``，一个 Python 正则，匹配相对路径（用 / 分隔），
  必须有命名组 ``student_id``，可以有 ``notebook``（没有时作业必须只有一个 notebook）。例如 Moodle 的
  ``张三_12345_assignsubmission_file_/01_attention_by_hand.ipynb`` 可以用
  ``^[^_/]+_(?P<student_id>\\d+)_assignsubmission_file_/(?P<notebook>[^/]+)\\.ipynb$``。
如果所有文件都在同一个顶层文件夹里（zip 常见），先去掉这一层。
"""
from __future__ import annotations

import hashlib
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

MAX_FILE_BYTES = 50 * 1024 * 1024
STUDENT_RE = re.compile(r"^[\w.@+-]+$")


@dataclass
class Item:
    src: str                          # 在文件夹/zip 里的相对路径
    data: bytes
    mtime: float = 0.0
    student_id: str | None = None
    notebook: str | None = None
    reason: str | None = None         # 不为 None 时：隔离的原因
    notes: list = field(default_factory=list)
    nb: dict | None = None

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


class InputError(Exception):
    """提交路径本身有问题（不存在、不是文件夹也不是 zip）。"""


def read_inputs(path: Path) -> list[Item]:
    path = Path(path)
    items: list[Item] = []
    if path.is_file() and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                name = info.filename.replace("\\", "/")
                if info.file_size > MAX_FILE_BYTES:
                    items.append(Item(name, b"", reason=f"文件太大（{info.file_size // 2**20} MB）"))
                    continue
                import datetime
                mt = datetime.datetime(*info.date_time).timestamp()
                items.append(Item(name, zf.read(info), mtime=mt))
    elif path.is_dir():
        for p in sorted(path.rglob("*")):
            if p.is_file():
                rel = p.relative_to(path).as_posix()
                st = p.stat()
                if st.st_size > MAX_FILE_BYTES:
                    items.append(Item(rel, b"", reason=f"文件太大（{st.st_size // 2**20} MB）"))
                    continue
                items.append(Item(rel, p.read_bytes(), mtime=st.st_mtime))
    elif path.exists():
        raise InputError(f"{path} 既不是文件夹也不是 .zip 文件")
    else:
        raise InputError(f"找不到提交路径：{path}")
    return items


def _strip_common_top(items: list[Item], single: bool) -> None:
    paths = [it.src for it in items]
    if not paths or any("/" not in p for p in paths):
        return
    tops = {p.split("/", 1)[0] for p in paths}
    if len(tops) != 1:
        return
    depth = max(p.count("/") + 1 for p in paths)
    if depth >= 3 or single:
        n = len(next(iter(tops))) + 1
        for it in items:
            it.src = it.src[n:]


def _norm_name(name: str) -> str:
    n = name.strip().lower()
    n = re.sub(r"^(copy of |副本[ _-]*|copy_of_)", "", n)
    n = re.sub(r"(\s*\(\d+\)|[ _-]copy\d*|\s*-\s*副本|\s*的副本)$", "", n)
    return n.strip()


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


def collect(path: Path, notebooks: list[str], name_regex: str | None = None,
            roster: set[str] | None = None) -> list[Item]:
    """读取并分类所有输入文件。每个文件都会出现在返回值里：有 student_id/notebook 的可以评分，
    reason 不为 None 的进入隔离区。"""
    items = read_inputs(path)
    single = len(notebooks) == 1
    _strip_common_top(items, single)
    if name_regex:
        pats = [re.compile(name_regex)]
        if "student_id" not in pats[0].groupindex:
            raise InputError("--name-regex 必须有命名组 (?P<student_id>...)")
        if "notebook" not in pats[0].groupindex and not single:
            raise InputError("这个作业有多个 notebook，--name-regex 必须有命名组 (?P<notebook>...)")
    else:
        pats = [re.compile(r"^(?P<student_id>[^/]+)/(?P<notebook>[^/]+)\.ipynb$")]
        if single:
            pats.append(re.compile(r"^(?P<student_id>[^/]+)\.ipynb$"))
    layout = "STUDENT_ID.ipynb 或 STUDENT_ID/NOTEBOOK.ipynb" if single else "STUDENT_ID/NOTEBOOK.ipynb"
    for it in items:
        if it.reason:
            continue
        m = next((p.match(it.src) for p in pats if p.match(it.src)), None)
        if m is None:
            base = it.src.rsplit("/", 1)[-1]
            if base.startswith(".") or it.src.startswith("__MACOSX/"):
                it.reason = "系统生成的文件（不是提交）"
            elif not it.src.endswith(".ipynb"):
                it.reason = "不是 .ipynb 文件"
            else:
                it.reason = f"文件名不符合约定（应为 {layout}，或用 --name-regex 指定）"
            continue
        sid = m.group("student_id").strip()
        nbname = m.groupdict().get("notebook")
        if not STUDENT_RE.match(sid):
            it.reason = f"学生编号 {sid!r} 含非法字符"
            continue
        it.student_id = sid
        if nbname is None:
            nbname = notebooks[0]
        canon, note = resolve_notebook(nbname, notebooks)
        if canon is None:
            it.reason = f"notebook 名称不对：{nbname}（本作业的 notebook：{', '.join(notebooks)}）"
            continue
        it.notebook = canon
        if note:
            it.notes.append(note)
        if roster is not None and sid not in roster:
            it.reason = f"名单里没有学生 {sid}"
            continue
        nb, why = parse_notebook(it.data)
        if why:
            it.reason = why
            continue
        it.nb = nb
    # 同一学生同一 notebook 有多份：用最新的一份，其余隔离
    groups: dict[tuple, list[Item]] = {}
    for it in items:
        if it.reason is None:
            groups.setdefault((it.student_id, it.notebook), []).append(it)
    for key, group in groups.items():
        if len(group) > 1:
            group.sort(key=lambda x: (x.notebook == _plain(x), x.mtime, x.src))
            keep = group[-1]
            for it in group[:-1]:
                it.reason = f"重复提交：同一学生同一 notebook 已使用 {keep.src}"
    return items


def _plain(it: Item) -> str | None:
    """文件名本身就是规范 notebook 名时，优先使用这一份。"""
    base = it.src.rsplit("/", 1)[-1]
    return base[:-6] if base.endswith(".ipynb") else None
