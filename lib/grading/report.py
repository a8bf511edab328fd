"""告诉学生和助教什么：反馈顶部的中文汇总、没作答的文字题、反馈里省掉哪些单元格。

- 没作答的文字题（答案单元格和发布版相同）自动记 0 分，和 nbgrader 自己的 autograde 一样，
  formgrader 里不用再一份份打开；grades.csv 的 detail 和评分结束时的汇总都会写出有几个。
- 反馈 HTML 的顶部是一张中文表：每道题（按题目的标题命名）的得分和评分说明（部分正确时逐条写出哪些部分对了）。
- 每份反馈都一样、和作答无关的单元格（引导单元格、“怎样作答”的说明、提交前自检）不放进反馈。
"""
from __future__ import annotations

import copy
import re

from . import repair

BLANK_MESSAGE = "没有作答（答案单元格和发布版相同），自动记 0 分。"
MANUAL_MESSAGE = "文字题，由助教人工评分。"
GRADING_KEY = "grading"  # 单元格元数据里存评分说明的键（autograded/ 的 notebook 和反馈用）
_BOILERPLATE_HEADINGS = ("## 怎样作答", "## 提交前自检")


def unanswered_written(repaired: dict, release: dict) -> set:
    """人工评分的答案单元格（文字题）里，内容和发布版相同（没作答）的 grade_id。"""
    written = {repair._gid(c) for c in release["cells"]
               if repair._gid(c) and repair._meta(c).get("solution") and repair._meta(c).get("grade")}
    return written - repair.answered_cells(repaired, release)


def blank_note(blank: set) -> str:
    return f"{len(blank)} 个文字题没有作答，自动记 0 分：" + "、".join(sorted(blank))


def _is_boilerplate(cell) -> bool:
    text = repair._src(cell).lstrip()
    if cell.get("cell_type") == "markdown":
        return text.startswith(_BOILERPLATE_HEADINGS)
    return cell.get("cell_type") == "code" and not repair._gid(cell) and (
        text.startswith("# 引导单元格") or "check_this_notebook(" in text)


def feedback_notebook(nb: dict) -> tuple[dict, int]:
    """反馈用的副本：去掉每份都一样的引导单元格、作答说明和自检单元格。返回 (notebook, 去掉了几个)。"""
    out = copy.deepcopy(nb)
    keep = [c for c in out["cells"] if not _is_boilerplate(c)]
    removed = len(out["cells"]) - len(keep)
    out["cells"] = keep
    return out, removed


def _heading(cell) -> str | None:
    for line in repair._src(cell).splitlines():
        if line.startswith("#"):
            return re.sub(r"[#★]", "", line).strip()
    return None


def labels(nb: dict) -> dict:
    """grade_id → 给人看的名字：前面最近的标题 + 测试的对象（例如“练习 1（手算自注意力）：scores_1”）。"""
    out, heading = {}, None
    for cell in nb["cells"]:
        if cell.get("cell_type") == "markdown" and not repair._gid(cell):
            heading = _heading(cell) or heading
        gid = repair._gid(cell)
        if not gid or not repair._meta(cell).get("grade"):
            continue
        if repair._meta(cell).get("solution"):
            what = "文字题"
        else:
            first = repair._src(cell).splitlines()[0] if repair._src(cell) else ""
            m = re.match(r"#\s*测试[:：]\s*([^（(]+)", first)
            what = m.group(1).strip() if m else gid
        out[gid] = f"{heading}：{what}" if heading else gid
    return out


def summary_rows(node) -> list[dict]:
    """GetGrades 之后的 notebook → 汇总表的行：题目、得分、满分、说明。"""
    names = labels(node)
    rows = []
    for cell in node.cells:
        nbg = cell.metadata.get("nbgrader", {})
        if not nbg.get("grade"):
            continue
        gid = nbg["grade_id"]
        graded = nbg.get("graded", True)
        message = cell.metadata.get(GRADING_KEY, {}).get("message") or (MANUAL_MESSAGE if nbg.get("solution") else "")
        rows.append({"grade_id": gid, "label": names.get(gid, gid), "points": f"{float(nbg.get('points', 0)):g}",
                     "score": f"{float(nbg.get('score') or 0):g}" if graded else "待评分", "message": message})
    return rows
