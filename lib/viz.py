"""notebook 里用的小工具：对齐的表格、带词元标签的注意力热图。图上的文字一律用英文或公式
（Colab 和 CI 上没有中文字体）。"""
from __future__ import annotations

import html
import math


class Table:
    """一张小表：在 JupyterLab / GitHub 上显示成 HTML 表格，在纯文本里显示成对齐的文字。

    rows 里的数字按 floatfmt 格式化；字符串原样显示。
    """

    def __init__(self, rows, headers, floatfmt: str = ".3f", title: str | None = None):
        self.headers = [str(h) for h in headers]
        self.rows = [[self._fmt(v, floatfmt) for v in row] for row in rows]
        self.title = title

    @staticmethod
    def _fmt(v, floatfmt):
        if isinstance(v, float):
            return format(v, floatfmt)
        return str(v)

    def __repr__(self):
        cols = list(zip(self.headers, *self.rows))
        widths = [max(len(c) for c in col) for col in cols]
        line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))
        out = [line(self.headers), "  ".join("-" * w for w in widths)] + [line(r) for r in self.rows]
        if self.title:
            out.insert(0, self.title)
        return "\n".join(out)

    def _repr_html_(self):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.headers)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in self.rows)
        cap = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Details:
    """一段“点开才看”的证据：JupyterLab 和网页上是一行摘要（summary），点一下展开里面的表或文字。

    items：Table、别的有 _repr_html_ 的对象，或字符串（原样当 HTML 片段）。纯文本输出（nbval 核对的那一份）是
    摘要一行，再接每一项的文字。页面上的约定见 CONTRIBUTING.md 的“证据点开才看”。
    """

    def __init__(self, summary: str, *items):
        self.summary = summary
        self.items = items

    def __repr__(self):
        return "\n\n".join([f"▸ {self.summary}", *(i if isinstance(i, str) else repr(i) for i in self.items)])

    def _repr_html_(self):
        body = "".join(i if isinstance(i, str) else i._repr_html_() if hasattr(i, "_repr_html_")
                       else f"<pre>{html.escape(repr(i))}</pre>" for i in self.items)
        return (f'<details class="evidence"><summary>{html.escape(self.summary)}</summary>'
                f"<div>{body}</div></details>")


def details(summary: str, *items) -> Details:
    """把表或文字收进一行可以点开的摘要：``details("10 个种子的准确率", table)``。"""
    return Details(summary, *items)


def show_heatmaps(matrices, row_labels=None, col_labels=None, titles=None, ncols: int = 4,
                  cmap: str = "viridis", vmin=0.0, vmax=None, figsize_per=(3.0, 3.0), suptitle=None,
                  xlabel=None, ylabel=None):
    """把若干个注意力矩阵画成一排热图（行 = 查询，列 = 键）。返回 matplotlib 的 Figure。

    xlabel、ylabel：每张图的横轴（列）和纵轴（行）的名字；vmax=None 时每张图各用自己的色标。
    """
    import matplotlib.pyplot as plt
    import numpy as np

    mats = [np.asarray(m.detach().cpu() if hasattr(m, "detach") else m, dtype=float) for m in matrices]
    n = len(mats)
    ncols = min(ncols, n)
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(figsize_per[0] * ncols, figsize_per[1] * nrows),
                             squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= n:
            ax.axis("off")
            continue
        im = ax.imshow(mats[i], cmap=cmap, vmin=vmin, vmax=vmax)
        if titles:
            ax.set_title(titles[i], fontsize=9)
        if col_labels is not None:
            ax.set_xticks(range(len(col_labels)), col_labels, rotation=90, fontsize=7)
        if row_labels is not None:
            ax.set_yticks(range(len(row_labels)), row_labels, fontsize=7)
        if xlabel:
            ax.set_xlabel(xlabel, fontsize=8)
        if ylabel:
            ax.set_ylabel(ylabel, fontsize=8)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


def _signed(x, fmt: str) -> str:
    """带符号的差：+0.03、−0.10；四舍五入之后是 0 的差写成 +0.0000，不写 -0.0000。"""
    text = format(x, "+" + fmt.lstrip("+"))
    rounded_to_zero = not any(ch in "123456789" for ch in text.split("e")[0])  # -0.0000、-0.0%、-0：只有 0
    return "+" + text[1:] if text.startswith("-") and rounded_to_zero else text


def vs_lecture(ours, lecture, *, tol, columns=None, fmt=".3f", title=None, row_header=""):
    """“本课程的结果 vs 讲义”并排成一张表，并检查每个数都在给定的容差之内（不在就 AssertionError）。

    ours、lecture：{行名: 一个数 或 每列一个数的列表}。lecture 里的 None 表示讲义没给（显示 —，不检查）；
    ours 里没有的行、或者值为 None 的格子也显示 —。
    tol：绝对容差（一个数，或每列一个；也可以是 {行名: 一个数 或 每列一个}，每行各自的容差，
    例如按每一格的蒙特卡罗标准误定容差）。tol="exact" 表示按 fmt 格式化之后逐字相同，
    也就是“在讲义给出的精度上完全一致”，用于确定性的数（公式、计数、不含随机性的演示）。
    fmt：格式（一个，或每列一个），例如 ".3f"、".1%"、",d"。
    只有一列时表头是 [行名, 讲义, 本课程的结果, 差]；多列时每个行名占两行（讲义、本课程的结果）。返回 Table。
    """
    def cells(row):
        return list(row) if isinstance(row, (list, tuple)) else [row]

    labels = list(dict.fromkeys([*lecture, *ours]))
    n_cols = max(len(cells(v)) for v in [*lecture.values(), *ours.values()])
    per_col = lambda x: list(x) if isinstance(x, (list, tuple)) else [x] * n_cols
    fmts = per_col(fmt)
    tols_of = ((lambda label: per_col(tol[label]) if label in tol else [None] * n_cols) if isinstance(tol, dict)
               else (lambda label, t=per_col(tol): t))
    show = lambda v, f: "—" if v is None else format(v, f)

    problems = []
    for label in labels:
        mine, theirs = cells(ours.get(label, [None] * n_cols)), cells(lecture.get(label, [None] * n_cols))
        tols = tols_of(label)
        for j, (a, b) in enumerate(zip(mine, theirs)):
            if a is None or b is None:
                continue
            if tols[j] is None:
                raise ValueError(f"tol 里没有行 {label!r} 的容差")
            ok = show(a, fmts[j]) == show(b, fmts[j]) if tols[j] == "exact" else abs(a - b) <= tols[j]
            if not ok:
                where = f"{label}" + (f"，{columns[j]}" if columns and n_cols > 1 else "")
                problems.append(f"{where}：本课程的结果 {show(a, fmts[j])}，讲义 {show(b, fmts[j])}"
                                f"（容差 {'逐位相同' if tols[j] == 'exact' else format(tols[j], '.4g')}）")

    if n_cols == 1:
        rows = []
        for label in labels:
            a, b = ours.get(label), lecture.get(label)
            a, b = (cells(a)[0] if a is not None else None), (cells(b)[0] if b is not None else None)
            diff = "—" if a is None or b is None else _signed(a - b, fmts[0])
            rows.append([label, show(b, fmts[0]), show(a, fmts[0]), diff])
        table = Table(rows, [row_header, "讲义", "本课程的结果", "差（本课程 − 讲义）"], title=title)
    else:
        rows = []
        for label in labels:
            for who, source in (("讲义", lecture), ("本课程的结果", ours)):
                values = cells(source.get(label, [None] * n_cols))
                rows.append([label, who] + [show(v, f) for v, f in zip(values, fmts)])
        heads = list(columns) if columns else [str(j) for j in range(n_cols)]
        table = Table(rows, [row_header, ""] + heads, title=title)
    if problems:
        raise AssertionError("和讲义的差别超出了容差：\n" + "\n".join(problems) + "\n\n" + repr(table))
    return table


def draw_rotation(ax, rotations, lim: float = 1.5, title: str | None = None):
    """在 ax 上画二维旋转（§5.4 的 RoPE 图）：每个原向量画成淡色箭头，转过 φ 之后的向量画成深色箭头，
    中间用一段虚线圆弧标出转过的角度。旋转本身由调用方算好（这个函数只画图）。

    rotations：[(v, v_rotated, phi, name, color, angle_label), …]。v、v_rotated 是二维向量，phi 是转过的弧度，
    name 是向量的名字（LaTeX，不带 $，例如 "q"），angle_label 是角度的写法（例如 r"4\\theta"）：
    箭头标签是 $name$ 和 $R(angle_label)\\,name$，圆弧旁写 $angle_label$。返回 ax。
    """
    from matplotlib.patches import Arc

    for i, (v, v_rot, phi, name, color, angle_label) in enumerate(rotations):
        v, v_rot = [float(t) for t in v], [float(t) for t in v_rot]
        for vec, alpha, label in ((v, 0.35, f"${name}$"), (v_rot, 1.0, rf"$R({angle_label})\,{name}$")):
            ax.annotate("", xy=tuple(vec), xytext=(0, 0),
                        arrowprops=dict(arrowstyle="-|>", lw=2, color=color, alpha=alpha))
            norm = math.hypot(*vec) or 1.0
            ax.text(vec[0] * (1 + 0.3 / norm), vec[1] * (1 + 0.3 / norm), label, color=color,
                    ha="center", va="center", fontsize=10)
        start = math.degrees(math.atan2(v[1], v[0]))
        radius = 0.45 + 0.3 * i  # 每个向量的圆弧半径不同，标签不挤在一起
        ax.add_patch(Arc((0, 0), 2 * radius, 2 * radius, theta1=start, theta2=start + math.degrees(phi),
                         color=color, ls="--"))
        mid = math.radians(start + math.degrees(phi) / 2)
        ax.text(1.2 * radius * math.cos(mid), 1.2 * radius * math.sin(mid), f"${angle_label}$", color=color,
                fontsize=9, ha="center", va="center")
    ax.axhline(0, color="0.85", lw=0.8)
    ax.axvline(0, color="0.85", lw=0.8)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    if title:
        ax.set_title(title)
    return ax
