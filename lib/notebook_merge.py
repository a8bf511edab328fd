"""按单元格合并 notebook 的两个版本（make update 用，见 lib/coursework.py）：课程的新版本和学生的副本。

三方合并：base 是学生的副本当初复制自的课程版本，mine 是学生的副本，theirs 是课程的新版本。单元格按身份对应：
nbgrader 的单元格按 grade_id（评分就靠它认单元格），其余按 nbformat 4.5 的单元格 id。对每个单元格：

- 学生没改过（来源和类型同 base）：课程改了就用新版，没改就留学生的（连同运行结果）；
- 学生改过、课程没改：留学生的；
- 两边都改了（而且改得不一样）：两个版本都留下，紧跟着一个中文说明单元格。答题单元格（nbgrader solution）
  留学生的答案，说明里附上课程的新写法；其他单元格用课程的新版，说明里附上学生改过的版本。附上的版本写在
  Markdown 的代码块里：“全部运行”不会执行它；
- 学生删掉的课程单元格放回来；学生自己加的单元格留在原来的位置（跟在它前面那个单元格后面）；课程新版删掉的单元格，
  学生没改过就跟着删，改过就留着（带一句说明）。

没有 base（例如副本不是从 git 里的版本复制来的）时，凡是两边不同的单元格都按“两边都改了”处理：宁可多留一份。
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import nbformat

NOTE_MARK = "⚠ 课程更新"  # 说明单元格的开头（学生在 JupyterLab 里搜这几个字就能找到每一处）


@dataclass
class MergeReport:
    updated: int = 0          # 课程改了、学生没改：用了新版
    kept: int = 0             # 学生改过、课程没改：留了学生的
    both: list[str] = field(default_factory=list)      # 两边都改了：两个版本都留着（每处一句说明）
    restored: int = 0         # 学生删掉的课程单元格，放回来了
    student_cells: int = 0    # 学生自己加的单元格，留着

    def summary(self) -> str:
        parts = [f"课程更新了 {self.updated} 个单元格"] if self.updated else []
        if self.kept:
            parts.append(f"你改过的 {self.kept} 个单元格照旧")
        if self.student_cells:
            parts.append(f"你加的 {self.student_cells} 个单元格照旧")
        if self.restored:
            parts.append(f"放回了你删掉的 {self.restored} 个课程单元格")
        if self.both:
            parts.append(f"{len(self.both)} 处两边都改了，两个版本都留着（在文件里搜“{NOTE_MARK}”）")
        return "，".join(parts) or "没有要并进来的改动"


def cell_key(cell) -> tuple[str, str]:
    """单元格的身份：nbgrader 单元格的 grade_id，其余单元格的 id。"""
    grade_id = (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
    return ("grade_id", grade_id) if grade_id else ("id", cell.get("id", ""))


def _same(a, b) -> bool:
    """同一个单元格的内容有没有被改（只看类型和来源：运行结果、执行编号、元数据不算改动）。"""
    return a.cell_type == b.cell_type and a.source == b.source


def _is_answer(cell) -> bool:
    return bool((cell.get("metadata", {}).get("nbgrader") or {}).get("solution"))


def _by_key(cells) -> dict:
    """第一次出现的身份 → 单元格（重复的身份，例如学生复制了一个评分单元格，只认第一个）。"""
    found = {}
    for cell in cells:
        found.setdefault(cell_key(cell), cell)
    return found


def _fenced(cell) -> str:
    lang = "python" if cell.cell_type == "code" else "markdown"
    fence = "````" if "```" in cell.source else "```"
    return f"{fence}{lang}\n{cell.source}\n{fence}"


def _note(text: str):
    return nbformat.v4.new_markdown_cell(f"> **{NOTE_MARK}**：{text}")


def _both_changed(mine, theirs, report: MergeReport) -> list:
    """两边都改了：留下两个版本。返回要放进结果的单元格（连同说明）。"""
    if _is_answer(mine):
        report.both.append("答题单元格：留着你的答案，课程的新写法附在后面")
        return [mine, _note("课程更新改了上面这个答题单元格的初始内容。你的答案原样留着；课程的新写法是"
                            "（只供参考，不会运行）：\n\n" + _fenced(theirs))]
    report.both.append("课程的新版在前，你改过的版本附在后面")
    return [theirs, _note("课程更新改了上面这个单元格，你也改过它。上面是课程的新版；你改过的版本没有删，"
                          "在下面（不会运行，需要时复制回去）：\n\n" + _fenced(mine))]


def _merge_cell(base, mine, theirs, report: MergeReport) -> list:
    """一个课程单元格（theirs）合并之后变成的单元格。"""
    if mine is None:
        if base is not None:
            report.restored += 1
        return [theirs]
    if base is None:  # 不知道谁改的：一样就留学生的（连同运行结果），不一样就两个都留
        return [mine] if _same(mine, theirs) else _both_changed(mine, theirs, report)
    mine_changed, theirs_changed = not _same(mine, base), not _same(theirs, base)
    if not mine_changed:
        if theirs_changed:
            report.updated += 1
            return [theirs]
        return [mine]
    if not theirs_changed or _same(mine, theirs):
        report.kept += 1
        return [mine]
    return _both_changed(mine, theirs, report)


def _student_cells_by_anchor(mine_cells, base_cells: dict, theirs_keys: set, report: MergeReport) -> dict:
    """学生副本里不对应课程新版任何单元格的那些：学生自己加的、重复的身份（学生复制了一个单元格），以及课程新版
    删掉了、但学生改过的（没改过的就随课程删掉）。按它前面最近的、课程新版里也有的单元格的身份分组
    （None：在所有课程单元格之前）。"""
    anchored, anchor, seen = {}, None, set()
    for cell in mine_cells:
        key = cell_key(cell)
        if key in theirs_keys and key not in seen:
            seen.add(key)
            anchor = key
            continue
        if key in base_cells and key not in theirs_keys:
            if _same(cell, base_cells[key]):
                continue  # 课程删掉的单元格，学生没改过
            report.both.append("课程新版删掉了一个你改过的单元格：你的版本留着")
            anchored.setdefault(anchor, []).append(cell)
            anchored[anchor].append(_note("课程更新删掉了上面这个单元格；你改过它，所以留着。"))
            continue
        report.student_cells += 1
        anchored.setdefault(anchor, []).append(cell)
    return anchored


def _unique_ids(cells) -> None:
    """复制来的单元格可能和别的单元格同一个 id：重复的换一个新 id（nbformat 要求 id 唯一）。"""
    from nbformat.corpus.words import generate_corpus_id
    seen = set()
    for cell in cells:
        while cell.get("id") in seen:
            cell["id"] = generate_corpus_id()
        seen.add(cell.get("id"))


def merge_notebooks(base, mine, theirs) -> tuple[object, MergeReport]:
    """三方合并（参数是 nbformat 的 NotebookNode，base 可以是 None）；返回 (合并后的 notebook, 报告)。
    结果的单元格顺序和 notebook 元数据（内核）都是课程新版的；输入不会被修改。"""
    mine, theirs = copy.deepcopy(mine), copy.deepcopy(theirs)
    base_cells = _by_key(base.cells) if base is not None else {}
    mine_cells = _by_key(mine.cells)
    report = MergeReport()
    anchored = _student_cells_by_anchor(mine.cells, base_cells, {cell_key(c) for c in theirs.cells}, report)
    merged = list(anchored.get(None, []))
    for cell in theirs.cells:
        key = cell_key(cell)
        merged += _merge_cell(base_cells.get(key), mine_cells.get(key), cell, report)
        merged += anchored.pop(key, [])
    for key, cells in anchored.items():  # 跟在课程新版已经删掉的单元格后面的：放到最后
        if key is not None:
            merged += cells
    _unique_ids(merged)
    theirs.cells = merged
    return theirs, report
