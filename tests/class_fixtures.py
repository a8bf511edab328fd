"""班级报告的测试数据（不是测试文件）：不执行任何学生代码，直接造出一个“评完分”的课程。

用 nbgrader 自己的 Gradebook API 写 gradebook.db（和评分流水线一样：gradebook_io.ensure_assignment 建结构，
add_submission + 每格的 auto_score），autograded/ 里的 notebook 是 release/ 的副本，答案单元格换成学生的内容，
评分说明写在单元格元数据 report.GRADING_KEY 里（和 pipeline.autograded_notebook 写的位置相同）。

synthetic_answers() 造一个班：每个诚实的学生用随机结构写自己的代码（同样的模板、同样的一行答案），
几对抄袭的学生（改名+改注释+加空行、重排换行、调换单元格顺序），以及空白的 notebook。
"""
from __future__ import annotations

import copy
import json
import random
import re
import shutil
from pathlib import Path

from lib.grading import gradebook_io, repair, report


def release_of(repo: Path, assignment: str = "exercises") -> dict:
    d = Path(repo) / "release" / assignment
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(d.glob("*.ipynb"))}


def answer_cells(rel: dict) -> list:
    """release 里的答案单元格：[(grade_id, cell_type, 模板)]。"""
    return [(repair._gid(c), c["cell_type"], repair._src(c)) for c in rel["cells"] if repair._meta(c).get("solution")]


def write_class(course: Path, repo: Path, students: dict, assignment: str = "exercises",
                notebooks: list | None = None, due=None, timestamps: dict | None = None) -> Path:
    """students: {学号: {notebook: {"answers": {gid: 内容}, "scores": {gid: 分}, "messages": {gid: 说明},
    "extra": [加在末尾的代码单元格], "order": [答案单元格的排列（grade_id）]}}}。没有某个 notebook = 没交；
    {} = 在 gradebook 里但一份也没交。due、timestamps（学号 → 提交时间）：不带时区的 UTC datetime。"""
    course = Path(course)
    course.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text("c = get_config()\n", encoding="utf-8")
    rel_all = release_of(repo, assignment)
    if notebooks:
        rel_all = {k: v for k, v in rel_all.items() if k in notebooks}
    (course / "release" / assignment).mkdir(parents=True, exist_ok=True)
    for nb, rel in rel_all.items():
        shutil.copy(Path(repo) / "release" / assignment / f"{nb}.ipynb", course / "release" / assignment)
    db = "sqlite:///" + str(course / "gradebook.db")
    gradebook_io.ensure_assignment(db, assignment, rel_all)
    from nbgrader.api import Comment, Grade, Gradebook, Student, SubmittedAssignment, SubmittedNotebook
    with Gradebook(db) as gb:
        # nbgrader 的 add_submission 做的事（同样的 ORM 对象），只是整个班一次提交：200 人的班从几分钟降到几秒
        a = gb.find_assignment(assignment)
        if due is not None:
            a.duedate = due
        nb_objs = {n.name: n for n in a.notebooks}
        for sid, nbs in students.items():
            st = Student(id=sid)
            gb.db.add(st)
            if not nbs:
                continue
            sa = SubmittedAssignment(assignment=a, student=st, timestamp=(timestamps or {}).get(sid))
            for nb_obj in a.notebooks:
                sn = SubmittedNotebook(notebook=nb_obj, assignment=sa)
                spec = nbs.get(nb_obj.name)
                auto_cells = gradebook_io.grade_cells(rel_all[nb_obj.name])
                for gc in nb_obj.grade_cells:
                    g = Grade(cell_id=gc.id, notebook=sn)
                    if spec is None:
                        continue
                    val = spec.get("scores", {}).get(gc.name)
                    if auto_cells[gc.name][1]:
                        g.auto_score, g.needs_manual_grade = float(val or 0.0), False
                    elif val is not None:
                        g.manual_score, g.needs_manual_grade = float(val), False
                    elif gc.name not in spec.get("answers", {}):
                        g.auto_score, g.needs_manual_grade = 0.0, False  # 没作答的文字题：和流水线一样自动 0 分
                for sc in nb_obj.solution_cells:
                    Comment(cell_id=sc.id, notebook=sn)
            gb.db.add(sa)
            for nb, spec in nbs.items():
                nbd = _notebook(rel_all[nb], spec)
                for sub in ("autograded", "submitted"):
                    d = course / sub / sid / assignment
                    d.mkdir(parents=True, exist_ok=True)
                    (d / f"{nb}.ipynb").write_text(json.dumps(nbd, ensure_ascii=False), encoding="utf-8")
        gb.db.commit()
    return course


def _notebook(rel: dict, spec: dict) -> dict:
    nb = copy.deepcopy(rel)
    answers, messages = spec.get("answers", {}), spec.get("messages", {})
    sol_idx = [i for i, c in enumerate(nb["cells"]) if repair._meta(c).get("solution")]
    for c in nb["cells"]:
        gid = repair._gid(c)
        if repair._meta(c).get("solution") and gid in answers:
            c["source"] = answers[gid]
        if gid in messages and repair._meta(c).get("grade"):
            c.setdefault("metadata", {})[report.GRADING_KEY] = {"message": messages[gid]}
    order = spec.get("order")
    if order:  # 调换答案单元格的位置（学生把单元格拖到了别处）
        by = {repair._gid(nb["cells"][i]): nb["cells"][i] for i in sol_idx}
        moved = [by[g] for g in order]
        for i, c in zip(sol_idx, moved):
            nb["cells"][i] = c
    for text in spec.get("extra", []):
        nb["cells"].append({"cell_type": "code", "execution_count": None, "id": f"x{len(nb['cells'])}",
                            "metadata": {}, "outputs": [], "source": text})
    return nb


# ----------------------------------------------------------------------------- 随机的“诚实”代码
_OPS = ["+", "-", "*", "/", "@"]
_FUNCS = ["np.exp", "np.sqrt", "np.abs", "np.tanh", "np.log1p", "np.cos", "np.sin", "np.square"]


def honest_body(rng: random.Random, n_lines: int, indent: str = "    ") -> str:
    """一段结构随机的代码：每个学生的写法都不一样（循环、条件、不同的运算和常数）。"""
    names = ["x", "y", "z", "w", "s", "t", "u", "r"]
    lines = []
    for i in range(n_lines):
        a, b, c = (rng.choice(names) for _ in range(3))
        kind = rng.randrange(5)
        if kind == 0:
            lines.append(f"{a} = {rng.choice(_FUNCS)}({b} {rng.choice(_OPS)} {rng.randint(2, 997)})")
        elif kind == 1:
            lines.append(f"for _i in range({rng.randint(2, 97)}):\n{indent}    {a} = {b} {rng.choice(_OPS)} "
                         f"{c} * {rng.randint(2, 997)}")
        elif kind == 2:
            lines.append(f"if {a}.sum() > {rng.randint(-99, 99)}:\n{indent}    {a} = {rng.choice(_FUNCS)}({b})"
                         f" {rng.choice(_OPS)} {rng.randint(2, 997)}")
        elif kind == 3:
            lines.append(f"{a} = [{b}[{rng.randint(0, 9)}] {rng.choice(_OPS)} v for v in {c}][: {rng.randint(1, 99)}]")
        else:
            lines.append(f"{a} = np.{rng.choice(['sum', 'mean', 'max', 'min', 'prod'])}({b}, axis={rng.choice([0, -1, 1])})"
                         f" {rng.choice(_OPS)} {c}")
    lines.append(f"return {rng.choice(names)}")
    return "\n".join(indent + l for l in lines)


ONE_LINERS = {"ex7_answer": "def crossover_length(d):\n    return 6 * d\n\n\ndef attention_share(n, d):\n"
                            "    return 2 * n * n * d / (2 * n * n * d + 12 * n * d * d)"}
HAND = {"ex1_hand_answer": "scores_1 = np.array([[0.71, 0.71], [0.71, -0.71]])\n"
                           "weights_1 = np.array([[0.5, 0.5], [0.8, 0.2]])\noutputs_1 = np.array([[0.5, 0.5], [0.8, 0.2]])"}


def honest_answer(gid: str, kind: str, template: str, rng: random.Random) -> str:
    if gid in ONE_LINERS:
        return ONE_LINERS[gid]
    if gid in HAND:
        return HAND[gid]
    if kind == "markdown":
        words = ["因为", "缩放", "方差", "掩码", "位置", "梯度", "softmax", "饱和", "注意力", "矩阵", "维度", "稳定",
                 "训练", "平均", "旋转", "相对", "缓存", "计算量", "内存", "序列", "长度", "参数", "共享", "不变"]
        return "".join(rng.choice(words) + rng.choice(["，", "的", "和", "使", "。"]) for _ in range(rng.randint(25, 40)))
    out = []
    for block in re.split(r"\n(?=def )", template):
        if "raise NotImplementedError()" in block:
            head = block.split("# 在这里写你的代码")[0].rstrip()
            out.append(head + "\n" + honest_body(rng, rng.randint(6, 10)))
        else:
            out.append(block)
    return "\n".join(out)


def rename_and_comment(code: str) -> str:
    """抄袭的方式 1：改变量名、加注释、加空行。"""
    mapping = {"x": "inp", "y": "out_val", "z": "tmp2", "w": "weight", "s": "score_s", "t": "temp", "u": "uu",
               "r": "result"}
    code = re.sub(r"\b(" + "|".join(mapping) + r")\b", lambda m: mapping[m.group(1)], code)
    lines = []
    for line in code.splitlines():
        lines.append(line)
        if line.strip().startswith(("for ", "if ", "return")):
            lines.insert(len(lines) - 1, " " * (len(line) - len(line.lstrip())) + "# 我自己的思路：先算这一步")
            lines.append("")
    return "\n".join(lines)


def reflow(code: str) -> str:
    """抄袭的方式 2：换行和空格重排（括号里断行、运算符两边的空格改掉）。"""
    code = re.sub(r" ([+\-*/@]) ", r"\1", code)
    code = re.sub(r"\(([^()\n]{6,})\)", lambda m: "(\n        " + m.group(1) + "\n    )", code)
    return code.replace(", ", ",")


def synthetic_answers(rel_all: dict, n_honest: int, seed: int = 0, n_blank: int = 2) -> tuple[dict, list]:
    """一个班：n_honest 个诚实的学生（各写各的），三对抄袭（c1a/c1b 改名+注释、c2a/c2b 重排换行、c3a/c3b 调换单元格），
    n_blank 个空白提交。返回 (students, 抄袭的对 [(notebook, a, b)])。分数：这里只关心相似度，全部记 0。"""
    rng = random.Random(seed)
    students: dict = {}
    for i in range(n_honest):
        sid = f"h{i:03d}"
        students[sid] = {nb: {"answers": {g: honest_answer(g, k, t, rng) for g, k, t in answer_cells(rel)}}
                         for nb, rel in rel_all.items()}
    nbs = list(rel_all)
    planted = []
    for tag, nb, how in (("c1", nbs[0], "rename"), ("c2", nbs[min(1, len(nbs) - 1)], "reflow"),
                         ("c3", nbs[min(2, len(nbs) - 1)], "reorder")):
        a, b = f"{tag}a", f"{tag}b"
        orig = {nb2: {"answers": {g: honest_answer(g, k, t, rng) for g, k, t in answer_cells(rel)}}
                for nb2, rel in rel_all.items()}
        mine = {nb2: {"answers": {g: honest_answer(g, k, t, rng) for g, k, t in answer_cells(rel)}}
                for nb2, rel in rel_all.items()}
        src = orig[nb]["answers"]
        code_cells = [g for g, k, _ in answer_cells(rel_all[nb]) if k == "code"]
        if how == "rename":
            mine[nb]["answers"] = {g: (rename_and_comment(v) if g in code_cells else v) for g, v in src.items()}
        elif how == "reflow":
            mine[nb]["answers"] = {g: (reflow(v) if g in code_cells else v) for g, v in src.items()}
        else:  # 答案换到别的单元格、再加一个单元格放其中一段
            moved = dict(src)
            if len(code_cells) >= 2:
                moved[code_cells[0]], moved[code_cells[1]] = src[code_cells[1]], src[code_cells[0]]
            mine[nb]["answers"] = moved
            mine[nb]["extra"] = [src[code_cells[-1]]]
            mine[nb]["order"] = list(reversed([g for g, _, _ in answer_cells(rel_all[nb])]))
        students[a], students[b] = orig, mine
        planted.append((nb, a, b))
    for i in range(n_blank):
        students[f"blank{i}"] = {nb: {"answers": {}} for nb in rel_all}
    return students, planted
