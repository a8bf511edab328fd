"""notebook 里用的小工具：对齐的表格、带词元标签的注意力热图。图上的文字一律用英文或公式
（Colab 和 CI 上没有中文字体）。"""
from __future__ import annotations

import html


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


def show_heatmaps(matrices, row_labels=None, col_labels=None, titles=None, ncols: int = 4,
                  cmap: str = "viridis", vmin=0.0, vmax=None, figsize_per=(3.0, 3.0), suptitle=None):
    """把若干个注意力矩阵画成一排热图（行 = 查询，列 = 键）。返回 matplotlib 的 Figure。"""
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
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    return fig
