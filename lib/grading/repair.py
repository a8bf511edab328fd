"""按 release/ 版本修复一份学生 notebook，避免“因为格式问题得 0 分”。

release 版本是骨架：每个带 nbgrader 元数据的 release 单元格都在学生的 notebook 里找对应的单元格，
依次按 grade_id、单元格 id、内容、位置匹配。然后：
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


def repair(student: dict, release: dict, move_added: bool = True) -> tuple[dict, list[str]]:
    """move_added：把写在新单元格里的文字题答案移进答案单元格（move_added_answers）；自查用 False，只报告。"""
    notes: list[str] = []
    rel = release["cells"]
    stu = [c for c in student.get("cells", []) if isinstance(c, dict)]
    R, S = len(rel), len(stu)
    rel_nbg = [i for i in range(R) if _is_nbg(rel[i])]
    gid_to_r = {_gid(rel[i]): i for i in rel_nbg if _gid(rel[i])}
    id_to_r = {rel[i].get("id"): i for i in range(R) if rel[i].get("id")}
    rel_norm = [_norm(_src(c)) for c in rel]
    stu_norm = [_norm(_src(c)) for c in stu]

    claims: dict[int, list[tuple[int, str]]] = {r: [] for r in range(R)}  # r -> [(s, how)]
    s_match: dict[int, int] = {}

    def claim(s, r, how):
        s_match[s] = r
        claims[r].append((s, how))

    # A: grade_id
    for s in range(S):
        g = _gid(stu[s])
        if g in gid_to_r:
            claim(s, gid_to_r[g], "gid")
    # B: 单元格 id
    for s in range(S):
        if s in s_match:
            continue
        r = id_to_r.get(stu[s].get("id"))
        if r is not None and (not claims[r] or rel_norm[r] == stu_norm[s]):
            claim(s, r, "id")
    # C: 内容（只读单元格要完全相同；答案单元格看签名行和相似度）
    for r in range(R):
        if claims[r]:
            continue
        kind = _kind(rel[r]) if _is_nbg(rel[r]) else "plain"
        best, best_ratio = None, 0.0
        sig = _first_signature_line(_src(rel[r])) if kind == "solution" else None
        for s in range(S):
            if s in s_match:
                continue
            if kind != "solution":
                if stu_norm[s] == rel_norm[r] and stu_norm[s]:
                    best = s
                    break
                continue
            if sig and sig in _src(stu[s]):
                ratio = 1.0 + difflib.SequenceMatcher(None, rel_norm[r], stu_norm[s]).ratio()
            elif stu_norm[s] == rel_norm[r]:
                ratio = 2.0
            else:
                ratio = 0.0
            if ratio > best_ratio:
                best, best_ratio = s, ratio
        if best is not None:
            claim(best, r, "content")
    # D: 位置——两个已匹配单元格之间，按顺序配对剩下的答案单元格
    for r in range(R):
        if claims[r] or not (_is_nbg(rel[r]) and _kind(rel[r]) == "solution"):
            continue
        claimed = [rr for rr in range(R) if claims[rr]]
        prev_r = max([rr for rr in claimed if rr < r], default=None)
        next_r = min([rr for rr in claimed if rr > r], default=None)
        prev_s = max(s for s, _ in claims[prev_r]) if prev_r is not None else -1
        next_s = min(s for s, _ in claims[next_r]) if next_r is not None else S
        gap_s = [s for s in range(prev_s + 1, next_s) if s not in s_match and _gid(stu[s]) is None
                 and stu[s].get("cell_type") == rel[r].get("cell_type")]
        lo = prev_r + 1 if prev_r is not None else 0
        hi = next_r if next_r is not None else R
        gap_r = [rr for rr in range(lo, hi) if not claims[rr] and _is_nbg(rel[rr]) and _kind(rel[rr]) == "solution"
                 and rel[rr].get("cell_type") == rel[r].get("cell_type")]
        pos = gap_r.index(r)
        if pos < len(gap_s):
            claim(gap_s[pos], r, "position")

    # 组装：每个元素带排序键
    items: list[tuple[tuple, dict]] = []
    restored_meta, restored_cells, reverted_types, reverted_tests, dups, missing_answers = [], [], [], [], [], []
    used_ids: set = set()

    def fresh_id(cid):
        if not cid or cid in used_ids:
            cid = uuid.uuid4().hex[:8]
        used_ids.add(cid)
        return cid

    keep_s: dict[int, int] = {}
    for r in range(R):
        cl = claims[r]
        if not cl:
            continue
        if _is_nbg(rel[r]) and _kind(rel[r]) in ("solution",):
            answered = [s for s, _ in cl if stu_norm[s] != rel_norm[r] and stu_norm[s]]
            chosen = answered[-1] if answered else cl[-1][0]
        else:
            chosen = cl[0][0]
        keep_s[r] = chosen
        if len(cl) > 1:
            dups.append(_gid(rel[r]) or f"#{r}")
        how = dict(cl)[chosen]
        if _is_nbg(rel[r]) and (how != "gid" or _meta(stu[chosen]) != _meta(rel[r])):
            if _gid(rel[r]):
                restored_meta.append(_gid(rel[r]))
    for r in range(R):
        base = copy.deepcopy(rel[r])
        base.setdefault("metadata", {})
        if r in keep_s:
            s = keep_s[r]
            sc = stu[s]
            if _is_nbg(rel[r]) and _kind(rel[r]) == "solution":
                base["source"] = _src(sc)
                if sc.get("cell_type") != rel[r].get("cell_type"):
                    reverted_types.append(_gid(rel[r]) or f"#{r}")
            elif _is_nbg(rel[r]):
                if stu_norm[s] != rel_norm[r]:
                    reverted_tests.append(_gid(rel[r]) or f"#{r}")
                if sc.get("cell_type") != rel[r].get("cell_type"):
                    reverted_types.append(_gid(rel[r]) or f"#{r}")
            else:
                base["source"] = _src(sc)  # 普通说明单元格：保留学生的版本
                base["cell_type"] = rel[r].get("cell_type")
            if base.get("cell_type") == "code":
                base["outputs"], base["execution_count"] = [], None
            base["id"] = fresh_id(rel[r].get("id"))
            items.append(((r, 0, s), base))
        else:
            if _is_nbg(rel[r]):
                if _kind(rel[r]) == "solution":
                    missing_answers.append(_gid(rel[r]) or f"#{r}")
                else:
                    restored_cells.append(_gid(rel[r]) or f"#{r}")
            base["id"] = fresh_id(rel[r].get("id"))
            if base.get("cell_type") == "code":
                base["outputs"], base["execution_count"] = [], None
            items.append(((r, 0, -1), base))
    kept = set(keep_s.values())
    last_r = -1
    for s in range(S):
        if s in kept:
            last_r = s_match[s]
            continue
        sc = copy.deepcopy(stu[s])
        if s in s_match:
            r = s_match[s]
            if stu_norm[s] == rel_norm[r] or not stu_norm[s] or _kind(rel[r]) != "solution":
                continue  # 空白副本或测试/说明的副本：删掉
            if sc.get("cell_type") not in ("code", "markdown", "raw"):
                continue
        md = sc.get("metadata") if isinstance(sc.get("metadata"), dict) else {}
        md.pop(NBG, None)
        sc["metadata"] = md
        if sc.get("cell_type") not in ("code", "markdown", "raw"):
            continue
        sc["source"] = _src(sc)
        if sc["cell_type"] == "code":
            sc["outputs"], sc["execution_count"] = [], None
        else:
            sc.pop("outputs", None)
            sc.pop("execution_count", None)
        sc["id"] = fresh_id(sc.get("id"))
        items.append(((last_r, 1, s), sc))
    items.sort(key=lambda kv: kv[0])
    out = {"cells": [c for _, c in items], "metadata": copy.deepcopy(release.get("metadata", {})),
           "nbformat": 4, "nbformat_minor": max(5, int(release.get("nbformat_minor", 5)))}

    moved = move_added_answers(out, release) if move_added else {}
    if restored_meta:
        notes.append("补回 nbgrader 元数据：" + "、".join(sorted(set(restored_meta))))
    if dups:
        notes.append("重复的评分单元格已合并（保留有答案的一份）：" + "、".join(dups))
    if restored_cells:
        notes.append("被删除的只读/测试单元格已从 release 补回：" + "、".join(restored_cells))
    if reverted_types:
        notes.append("单元格类型被改动，已还原：" + "、".join(reverted_types))
    if reverted_tests:
        notes.append("只读/测试单元格的内容被改动，已按 release 还原：" + "、".join(reverted_tests))
    if missing_answers:
        notes.append("找不到答案单元格（按未作答处理）：" + "、".join(missing_answers))
    for gid, text in moved.items():
        notes.append(f"{gid} 的答案写在了新单元格里，已移进答题单元格、交给助教人工评分（“{_snippet(text)}”）")
    return out, notes


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
