"""按 release/ 版本修复一份学生 notebook，避免“因为格式问题得 0 分”。

release 版本是骨架：每个带 nbgrader 元数据的 release 单元格都在学生的 notebook 里找对应的单元格，
依次按 grade_id、单元格 id、内容、位置配对（match_by_grade_id … match_by_position，见 MATCHERS；先配上的算数）。
然后组装（assemble）：
- 答案单元格（solution）用学生的内容，元数据和单元格类型用 release 的（丢失或被改的元数据补回，
  被改成 markdown 的代码单元格改回代码）；
- 只读单元格（测试、题目说明）一律用 release 的内容（删掉的测试补回，改动过的测试还原）；
- 同一个评分单元格出现多份（复制粘贴）：带 nbgrader 元数据的保留“有答案”的那份（多份都有答案时保留最后一份），
  其余有内容的作为普通代码单元格留在原处，和 release 完全相同的空白副本删掉；
- 学生自己加的单元格原样保留在原来的位置（去掉伪造的 nbgrader 元数据）；
- Colab 的元数据和内核名都不影响评分（执行时不使用 kernelspec）。
返回修复后的 notebook 和一条条中文修复说明。
"""
from __future__ import annotations

import copy
import difflib
import uuid
from dataclasses import dataclass, field

NBG = "nbgrader"


def _src(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else (s or "")


def _norm(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def _meta(cell) -> dict:
    m = cell.get("metadata") or {}
    n = m.get(NBG) if isinstance(m, dict) else None
    return n if isinstance(n, dict) else {}


def _gid(cell):
    return _meta(cell).get("grade_id")


def _is_nbg(cell) -> bool:
    m = _meta(cell)
    return any(m.get(k) for k in ("grade", "solution", "locked", "task"))


def _kind(cell) -> str:
    m = _meta(cell)
    if m.get("solution"):
        return "solution"
    if m.get("grade"):
        return "test"
    if m.get("task"):
        return "task"
    return "locked"


def is_test(cell) -> bool:
    """自动评分的测试单元格：nbgrader 的 grade 单元格、不是 solution、是代码。"""
    return _kind(cell) == "test" and cell.get("cell_type") == "code"


def _first_signature_line(text: str) -> str | None:
    for line in text.splitlines():
        t = line.strip()
        if t and not t.startswith("#") and "NotImplementedError" not in t and t != "在这里写下你的答案。":
            return t
    return None


# ---------------------------------------------------------------- 配对：学生的单元格 ↔ release 的单元格
@dataclass
class Match:
    """两份 notebook 的单元格和配对的结果。下标：rel_i 是 release 的单元格，stu_i 是学生的单元格。"""

    rel: list                    # release 的单元格
    stu: list                    # 学生的单元格（不是 dict 的已经去掉）
    rel_norm: list               # 每个 release 单元格规范化的内容（_norm）
    stu_norm: list
    claims: dict = field(default_factory=dict)    # rel_i -> [(stu_i, 怎么配上的：gid / id / content / position)]
    rel_of: dict = field(default_factory=dict)    # stu_i -> 配上的 rel_i

    @classmethod
    def of(cls, student: dict, release: dict) -> Match:
        rel = release["cells"]
        stu = [c for c in student.get("cells", []) if isinstance(c, dict)]
        return cls(rel, stu, [_norm(_src(c)) for c in rel], [_norm(_src(c)) for c in stu],
                   claims={rel_i: [] for rel_i in range(len(rel))})

    def claim(self, stu_i: int, rel_i: int, how: str) -> None:
        self.rel_of[stu_i] = rel_i
        self.claims[rel_i].append((stu_i, how))

    def is_answer(self, rel_i: int) -> bool:
        """release 的这个单元格是答案单元格（nbgrader 的 solution）。"""
        return _is_nbg(self.rel[rel_i]) and _kind(self.rel[rel_i]) == "solution"

    def unmatched_students(self) -> list[int]:
        return [stu_i for stu_i in range(len(self.stu)) if stu_i not in self.rel_of]


def match_by_grade_id(m: Match) -> None:
    """学生的单元格带着 release 里的 grade_id（元数据没丢）。同一个 grade_id 的几份（复制粘贴）都配上。"""
    gid_to_rel = {_gid(c): rel_i for rel_i, c in enumerate(m.rel) if _is_nbg(c) and _gid(c)}
    for stu_i in range(len(m.stu)):
        g = _gid(m.stu[stu_i])
        if g in gid_to_rel:
            m.claim(stu_i, gid_to_rel[g], "gid")


def match_by_cell_id(m: Match) -> None:
    """单元格 id 和 release 的相同（元数据丢了、id 还在）；那个 release 单元格已经配上了别的时，内容也要相同。"""
    id_to_rel = {c.get("id"): rel_i for rel_i, c in enumerate(m.rel) if c.get("id")}
    for stu_i in m.unmatched_students():
        rel_i = id_to_rel.get(m.stu[stu_i].get("id"))
        if rel_i is not None and (not m.claims[rel_i] or m.rel_norm[rel_i] == m.stu_norm[stu_i]):
            m.claim(stu_i, rel_i, "id")


def _content_score(m: Match, rel_i: int, stu_i: int, signature: str | None) -> float:
    """答案单元格和学生的一个单元格有多像：含 release 的签名行时 1 + 相似度，和 release 完全相同时 2，否则 0。"""
    if signature and signature in _src(m.stu[stu_i]):
        return 1.0 + difflib.SequenceMatcher(None, m.rel_norm[rel_i], m.stu_norm[stu_i]).ratio()
    if m.stu_norm[stu_i] == m.rel_norm[rel_i]:
        return 2.0
    return 0.0


def _best_by_content(m: Match, rel_i: int) -> int | None:
    """还没配上的学生单元格里，和 release 第 rel_i 个单元格最像的一个（只读单元格要完全相同且不空）。"""
    if not m.is_answer(rel_i):
        return next((stu_i for stu_i in m.unmatched_students()
                     if m.stu_norm[stu_i] == m.rel_norm[rel_i] and m.stu_norm[stu_i]), None)
    signature = _first_signature_line(_src(m.rel[rel_i]))
    best, best_score = None, 0.0
    for stu_i in m.unmatched_students():
        score = _content_score(m, rel_i, stu_i, signature)
        if score > best_score:
            best, best_score = stu_i, score
    return best


def match_by_content(m: Match) -> None:
    """还没配上的 release 单元格按内容找：只读单元格要完全相同；答案单元格看签名行（def 那一行）和相似度。"""
    for rel_i in range(len(m.rel)):
        if m.claims[rel_i]:
            continue
        stu_i = _best_by_content(m, rel_i)
        if stu_i is not None:
            m.claim(stu_i, rel_i, "content")


def _neighbours(m: Match, rel_i: int) -> tuple[int | None, int | None]:
    """rel_i 前后最近的已经配上的 release 单元格（没有时 None）。"""
    claimed = [other for other in range(len(m.rel)) if m.claims[other]]
    before = max([other for other in claimed if other < rel_i], default=None)
    after = min([other for other in claimed if other > rel_i], default=None)
    return before, after


def match_by_position(m: Match) -> None:
    """还没配上的答案单元格按位置：两个已经配上的单元格之间，剩下的同类型答案单元格和学生的单元格按顺序配对。"""
    for rel_i in range(len(m.rel)):
        if m.claims[rel_i] or not m.is_answer(rel_i):
            continue
        before, after = _neighbours(m, rel_i)
        stu_lo = max(stu_i for stu_i, _ in m.claims[before]) + 1 if before is not None else 0
        stu_hi = min(stu_i for stu_i, _ in m.claims[after]) if after is not None else len(m.stu)
        cell_type = m.rel[rel_i].get("cell_type")
        gap_stu = [stu_i for stu_i in range(stu_lo, stu_hi) if stu_i not in m.rel_of and _gid(m.stu[stu_i]) is None
                   and m.stu[stu_i].get("cell_type") == cell_type]
        rel_lo = before + 1 if before is not None else 0
        rel_hi = after if after is not None else len(m.rel)
        gap_rel = [other for other in range(rel_lo, rel_hi) if not m.claims[other] and m.is_answer(other)
                   and m.rel[other].get("cell_type") == cell_type]
        pos = gap_rel.index(rel_i)
        if pos < len(gap_stu):
            m.claim(gap_stu[pos], rel_i, "position")


MATCHERS = (match_by_grade_id, match_by_cell_id, match_by_content, match_by_position)  # 依次运行，先配上的算数


def match(student: dict, release: dict) -> Match:
    m = Match.of(student, release)
    for step in MATCHERS:
        step(m)
    return m


# ---------------------------------------------------------------- 组装：release 的骨架 + 学生的内容
@dataclass
class RepairLog:
    """修复时做了什么（每一项是 grade_id，没有 grade_id 的写 #release 里的序号）。"""

    restored_meta: list = field(default_factory=list)
    restored_cells: list = field(default_factory=list)
    reverted_types: list = field(default_factory=list)
    reverted_tests: list = field(default_factory=list)
    dups: list = field(default_factory=list)
    missing_answers: list = field(default_factory=list)

    def notes(self, moved: dict) -> list[str]:
        notes = []
        if self.restored_meta:
            notes.append("补回 nbgrader 元数据：" + "、".join(sorted(set(self.restored_meta))))
        if self.dups:
            notes.append("重复的评分单元格已合并（保留有答案的一份）：" + "、".join(self.dups))
        if self.restored_cells:
            notes.append("被删除的只读/测试单元格已从 release 补回：" + "、".join(self.restored_cells))
        if self.reverted_types:
            notes.append("单元格类型被改动，已还原：" + "、".join(self.reverted_types))
        if self.reverted_tests:
            notes.append("只读/测试单元格的内容被改动，已按 release 还原：" + "、".join(self.reverted_tests))
        if self.missing_answers:
            notes.append("找不到答案单元格（按未作答处理）：" + "、".join(self.missing_answers))
        for gid, text in moved.items():
            notes.append(f"{gid} 的答案写在了新单元格里，已移进答题单元格、交给助教人工评分（“{_snippet(text)}”）")
        return notes


class _Ids:
    """修复后的单元格 id：沿用原来的，重复或没有时换一个新的。"""

    def __init__(self):
        self.used: set = set()

    def fresh(self, cid):
        if not cid or cid in self.used:
            cid = uuid.uuid4().hex[:8]
        self.used.add(cid)
        return cid


def _name(m: Match, rel_i: int) -> str:
    return _gid(m.rel[rel_i]) or f"#{rel_i}"


def choose_kept(m: Match, log: RepairLog) -> dict:
    """每个配上的 release 单元格留下学生的哪一份：答案单元格留有答案的（几份都有时留最后一份），其余留第一份。
    返回 {rel_i: stu_i}。"""
    keep = {}
    for rel_i, claimed in m.claims.items():
        if not claimed:
            continue
        if m.is_answer(rel_i):
            answered = [stu_i for stu_i, _ in claimed if m.stu_norm[stu_i] != m.rel_norm[rel_i] and m.stu_norm[stu_i]]
            chosen = answered[-1] if answered else claimed[-1][0]
        else:
            chosen = claimed[0][0]
        keep[rel_i] = chosen
        if len(claimed) > 1:
            log.dups.append(_name(m, rel_i))
        how = dict(claimed)[chosen]
        if _is_nbg(m.rel[rel_i]) and (how != "gid" or _meta(m.stu[chosen]) != _meta(m.rel[rel_i])):
            if _gid(m.rel[rel_i]):
                log.restored_meta.append(_gid(m.rel[rel_i]))
    return keep


def _clear_outputs(cell: dict) -> None:
    if cell.get("cell_type") == "code":
        cell["outputs"], cell["execution_count"] = [], None


def _release_cell(m: Match, rel_i: int, stu_i: int | None, log: RepairLog, ids: _Ids) -> dict:
    """修复后 release 第 rel_i 个单元格的样子：元数据和类型是 release 的；答案单元格和普通说明单元格的内容是学生的
    （stu_i），只读单元格（测试、题目）的内容是 release 的。stu_i 为 None：学生那边没有。"""
    rel_cell = m.rel[rel_i]
    cell = copy.deepcopy(rel_cell)
    cell.setdefault("metadata", {})
    if stu_i is None:
        if _is_nbg(rel_cell):
            (log.missing_answers if m.is_answer(rel_i) else log.restored_cells).append(_name(m, rel_i))
    elif m.is_answer(rel_i):
        cell["source"] = _src(m.stu[stu_i])
        if m.stu[stu_i].get("cell_type") != rel_cell.get("cell_type"):
            log.reverted_types.append(_name(m, rel_i))
    elif _is_nbg(rel_cell):
        if m.stu_norm[stu_i] != m.rel_norm[rel_i]:
            log.reverted_tests.append(_name(m, rel_i))
        if m.stu[stu_i].get("cell_type") != rel_cell.get("cell_type"):
            log.reverted_types.append(_name(m, rel_i))
    else:
        cell["source"] = _src(m.stu[stu_i])  # 普通说明单元格：保留学生的版本
        cell["cell_type"] = rel_cell.get("cell_type")
    _clear_outputs(cell)
    cell["id"] = ids.fresh(rel_cell.get("id"))
    return cell


def _student_extra(m: Match, stu_i: int, ids: _Ids) -> dict | None:
    """学生的一个没有留下的单元格：自己加的单元格原样保留（去掉伪造的 nbgrader 元数据）；答案单元格的有内容的
    多余副本作为普通单元格保留；空白副本和测试、说明的副本删掉（None）。"""
    cell = copy.deepcopy(m.stu[stu_i])
    if stu_i in m.rel_of:
        rel_i = m.rel_of[stu_i]
        if m.stu_norm[stu_i] == m.rel_norm[rel_i] or not m.stu_norm[stu_i] or _kind(m.rel[rel_i]) != "solution":
            return None
    md = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
    md.pop(NBG, None)
    cell["metadata"] = md
    if cell.get("cell_type") not in ("code", "markdown", "raw"):
        return None
    cell["source"] = _src(cell)
    if cell["cell_type"] == "code":
        cell["outputs"], cell["execution_count"] = [], None
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
    cell["id"] = ids.fresh(cell.get("id"))
    return cell


def assemble(m: Match, release: dict, log: RepairLog) -> dict:
    """修复后的 notebook：release 的每个单元格按顺序（_release_cell），学生自己加的单元格放在它前面最近一个
    留下的单元格之后。"""
    keep = choose_kept(m, log)
    ids = _Ids()
    placed = []  # ((排序键), 单元格)：release 的 (rel_i, 0, stu_i)，学生加的 (前一个留下的 rel_i, 1, stu_i)
    for rel_i in range(len(m.rel)):
        stu_i = keep.get(rel_i)
        placed.append(((rel_i, 0, -1 if stu_i is None else stu_i), _release_cell(m, rel_i, stu_i, log, ids)))
    kept = set(keep.values())
    after = -1
    for stu_i in range(len(m.stu)):
        if stu_i in kept:
            after = m.rel_of[stu_i]
            continue
        cell = _student_extra(m, stu_i, ids)
        if cell is not None:
            placed.append(((after, 1, stu_i), cell))
    placed.sort(key=lambda kv: kv[0])
    return {"cells": [c for _, c in placed], "metadata": copy.deepcopy(release.get("metadata", {})),
            "nbformat": 4, "nbformat_minor": max(5, int(release.get("nbformat_minor", 5)))}


def repair(student: dict, release: dict, move_added: bool = True) -> tuple[dict, list[str]]:
    """按 release 修复学生的 notebook（见文件开头）：配对（match）→ 组装（assemble）→ 把写在新单元格里的文字题答案
    移进答案单元格（move_added_answers；自查用 move_added=False，只报告）。返回 (修复后的 notebook, 修复说明)。"""
    log = RepairLog()
    out = assemble(match(student, release), release, log)
    moved = move_added_answers(out, release) if move_added else {}
    return out, log.notes(moved)


ADDED_ANSWER_HINT = ("答案写在了新单元格里：评分时会被移进答题单元格交给助教，但最好自己移过去：把新单元格的内容"
                     "剪切到答题单元格 {gid} 里（双击写着“在这里写下你的答案。”的单元格，替换掉这句话），再删掉新单元格。")


def _snippet(text: str, n: int = 60) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[:n] + "…"


def added_answers(nb: dict, release: dict) -> dict:
    """没作答的文字题（答案单元格和发布版相同）旁边、学生自己加的非空单元格：{grade_id: [单元格的序号]}。

    “旁边”= 紧挨着答案单元格的一串新单元格（下面的，或者上面的），中间没有发布版的单元格。
    JupyterLab 里选中答案单元格按 B 就会在下面加一个新单元格，答案常常写在那里。"""
    rel_src = {_norm(_src(c)) for c in release["cells"]}
    rel_ids = {c.get("id") for c in release["cells"] if c.get("id")}
    rel_answer = {_gid(c): _norm(_src(c)) for c in release["cells"]
                  if _gid(c) and _meta(c).get("solution") and c.get("cell_type") == "markdown"}
    cells = nb["cells"]

    def added(cell) -> bool:
        text = _norm(_src(cell))
        return (not _is_nbg(cell) and cell.get("cell_type") in ("markdown", "raw") and bool(text)
                and text not in rel_src and cell.get("id") not in rel_ids)

    out: dict = {}
    for i, cell in enumerate(cells):
        gid = _gid(cell)
        if gid not in rel_answer or _norm(_src(cell)) != rel_answer[gid] or not _meta(cell).get("grade"):
            continue
        near = []
        j = i + 1
        while j < len(cells) and added(cells[j]):
            near.append(j)
            j += 1
        j = i - 1
        while not near and j >= 0 and added(cells[j]):
            near.insert(0, j)
            j -= 1
        if near:
            out[gid] = near
    return out


def move_added_answers(nb: dict, release: dict) -> dict:
    """把 added_answers 找到的新单元格的内容移进答案单元格（原地修改 nb；原始文件不动）。返回 {grade_id: 文本}。
    这样 formgrader 里助教在答题单元格里就看到答案，这道题交给人工评分，不会因为没作答自动记 0 分。"""
    found = added_answers(nb, release)
    moved, drop = {}, set()
    for gid, idx in found.items():
        text = "\n\n".join(_src(nb["cells"][j]).strip() for j in idx)
        cell = next(c for c in nb["cells"] if _gid(c) == gid)
        cell["source"] = text
        moved[gid] = text
        drop.update(idx)
    nb["cells"] = [c for j, c in enumerate(nb["cells"]) if j not in drop]
    return moved


def answered_cells(nb: dict, release: dict) -> set:
    """有作答的 solution 单元格的 grade_id 集合（内容和 release 不同）。"""
    rel = {_gid(c): _norm(_src(c)) for c in release["cells"] if _gid(c)}
    return {_gid(c) for c in nb["cells"] if _gid(c) and _meta(c).get("solution")
            and _norm(_src(c)) != rel.get(_gid(c))}
