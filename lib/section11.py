"""notebook 11 的表：把 10 个种子的读数（lib/experiments.py 的 sweep_readings）排成表。

只是排版：每个数都是 lib/agreement.py 的 evaluate_run 读出来的，怎样读出来写在 notebook 11 的页面上。
"""
from __future__ import annotations

from .agreement import LENGTH_MODIFIERS
from .experiments import ARM_NAMES
from .viz import Table


def spread(values, fmt: str = ".3f") -> str:
    """“平均（最小–最大）”；每个种子都一样（按 fmt 四舍五入之后）时只写一个数，表就窄得多（手机上、投影时）。"""
    mean = sum(values) / len(values)
    low, high = format(min(values), fmt), format(max(values), fmt)
    return format(mean, fmt) if low == high else f"{mean:{fmt}}（{low}–{high}）"


def seeds_table(seeds, rows: dict, fmt: str = ".3f", title: str | None = None, first: str = "") -> Table:
    """每行一组（rows：{名字: 每个种子一个数}），每列一个种子（seeds：列的种子号），最后两列是平均和最小–最大。"""
    body = [[name] + [format(v, fmt) for v in values] + [format(sum(values) / len(values), fmt),
                                                         f"{min(values):{fmt}}–{max(values):{fmt}}"]
            for name, values in rows.items()]
    return Table(body, [first] + [f"种子 {s}" for s in seeds] + ["平均", "最小–最大"], title=title)


def agreement_summary(sweep: dict, arms, seeds, modifiers=LENGTH_MODIFIERS, lecture: dict | None = None,
                      title: str | None = None) -> Table:
    """每组一行（给了讲义的数时，讲义一行、本课程一行）：每个修饰语个数一列，“平均（最小–最大）”。"""
    rows = []
    for arm in arms:
        if lecture is not None:
            rows.append([ARM_NAMES[arm], "讲义"] + [("—" if v is None else f"{v:.1%}")
                                                   for v in lecture.get(arm, [None] * len(modifiers))])
        ours = f"本课程（{len(seeds)} 个种子）" if lecture is not None else f"{len(seeds)} 个种子"
        rows.append([ARM_NAMES[arm], ours] + [spread([sweep[arm, s]["agreement"][k] for s in seeds], ".1%") for k in modifiers])
    return Table(rows, ["", ""] + [f"{k} 个" for k in modifiers], title=title)


def length_table(sweep: dict, arms, seeds, lecture: dict, title: str | None = None) -> Table:
    """讲义 §11.3 的表的样子：每组一行（讲义给了数的组，讲义一行、本课程一行），列是 0~3（最差的一档）、4、6、8、10 个
    修饰语；本课程的格子是“平均（最小–最大）”。lecture：{组: [0~3, 4, 6, 8, 10]}。"""
    rows = []
    for arm in arms:
        if arm in lecture:
            rows.append([ARM_NAMES[arm], "讲义（2 个种子）"] + [f"{v:.1%}" for v in lecture[arm]])
        worst_03 = [min(sweep[arm, s]["agreement"][k] for k in (0, 1, 2, 3)) for s in seeds]
        rows.append([ARM_NAMES[arm], f"本课程（{len(seeds)} 个种子）", spread(worst_03, ".1%")]
                    + [spread([sweep[arm, s]["agreement"][k] for s in seeds], ".1%") for k in (4, 6, 8, 10)])
    return Table(rows, ["", "", "0~3 个", "4 个", "6 个", "8 个", "10 个"], title=title)


def band(by_position: dict, positions) -> float:
    """几个位置合在一起的准确率（按题数加权）；by_position：{位置: (题数, 准确率)}。"""
    n = sum(by_position[p][0] for p in positions if p in by_position)
    return sum(by_position[p][0] * by_position[p][1] for p in positions if p in by_position) / n
