"""班级报告的页面（index.html）：数在这里算好（page_context），排版在 Jinja 模板里
（lib/grading/templates/class_report/：index.html.j2、evidence.html.j2、style.css；反馈 HTML 也用
lib/grading/templates/ 下的模板）。图是内嵌的 PNG（英文标签，不用中文字体），页面不联网也能打开。
"""
from __future__ import annotations

import base64
import datetime as dt
import io
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from . import class_analysis as ca
from . import class_similarity as cs

if TYPE_CHECKING:
    from .class_report import ClassData

TEMPLATES = Path(__file__).resolve().parent / "templates" / "class_report"
_ENV: list = []


def _f(x, nd=3) -> str:
    return "" if x is None else f"{round(x, nd):g}"


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def _env():
    """Jinja 的环境（HTML 自动转义；块标签单独一行时不留空白）。第一次用到时建好。"""
    if not _ENV:
        import jinja2
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                                 trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
        env.filters.update(f=_f, pct=_pct, g=lambda x: f"{x:g}")
        _ENV.append(env)
    return _ENV[0]


# ---------------------------------------------------------------- 图
def _png(fig) -> str:
    """图 → data: URI（PNG）。"""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _hist(values, max_points, width=2.6, height=1.3, bins=None, xlabel="points") -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(width, height))
    if values:
        if bins is None:
            edges = np.linspace(0, max_points, min(11, max(2, int(round(max_points * 2)) + 1))) if max_points else [0, 1]
            bins = np.append(np.asarray(edges, float)[:-1], max_points + 1e-9) if max_points else 2
        ax.hist(values, bins=bins, color="#4a78b5", edgecolor="white")
    ax.set_xlim(0, max_points if max_points else 1)
    ax.tick_params(labelsize=7)
    ax.set_xlabel(xlabel, fontsize=7)
    ax.spines[["top", "right"]].set_visible(False)
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.32, top=0.95)  # tight_layout 每张图要多花 0.1 秒
    return _png(fig)


def _bar_means(per_nb: dict) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(per_nb)
    vals = [100 * (v["mean"] or 0) / v["max"] if v["max"] else 0 for v in per_nb.values()]
    fig, ax = plt.subplots(figsize=(5.2, 0.35 * len(names) + 0.6))
    ax.barh(range(len(names)), vals, color="#4a78b5")
    ax.set_yticks(range(len(names)), [n[:24] for n in names], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("mean score (% of max)", fontsize=7)
    ax.tick_params(labelsize=7)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout(pad=0.3)
    return _png(fig)


# ---------------------------------------------------------------- 页面上的数
def _class_overview(data: ClassData, summary: dict) -> dict:
    """“班级概况”：卡片、总分和它的分布图、各 notebook 一行、迟交和一份也没交的学生。"""
    tot, mt = summary["totals"], summary["max_total"]
    vals = list(tot.values())
    per_nb = {nb: dict(v, rate=None if v["mean"] is None or not v["max"] else v["mean"] / v["max"])
              for nb, v in summary["per_notebook"].items()}
    cards = [("学生", summary["n_students"]), ("交了作业", len(tot)), ("一份也没交", len(summary["no_submission"])),
             ("缺交的 notebook", sum(v["missing"] for v in per_nb.values())), ("迟交", len(summary["late"])),
             ("待人工评分的单元格", sum(summary["pending"].values()))]
    totals = None
    if vals:
        totals = {"max": mt, "mean": np.mean(vals), "median": np.median(vals), "min": min(vals), "top": max(vals),
                  "plot": _hist(vals, mt, width=5.2, height=1.8, bins=np.linspace(0, mt + 1e-9, 21) if mt else None,
                                xlabel="total points")}
    bars = _bar_means(summary["per_notebook"]) if any(v["n"] for v in per_nb.values()) else None
    return {"cards": cards, "left_out": data.left_out, "totals": totals, "per_notebook": per_nb, "bars": bars,
            "late": summary["late"], "no_submission": summary["no_submission"]}


def _score_distribution(it: ca.Item) -> str:
    """文字题助教打的分：“3 分 × 1，4 分 × 2”。"""
    dist = Counter(it.known)
    return "，".join(f"{k:g} 分 × {v}" for k, v in sorted(dist.items())) or "助教还没有评分"


def _items(data: ClassData, items: list) -> dict:
    """“该重讲什么”（得分率最低的五道自动评分题、区分度低的题）、“题目分析”的表（每个 notebook 一张，整题一行带分布图，
    部分缩进）和“文字题”。"""
    cells = [it for it in items if it.kind == "auto" and not it.part and it.difficulty is not None]
    tables = []
    for nb in data.notebooks:
        rows = [(it, None if it.part else _hist(it.known, it.max_points))
                for it in items if it.notebook == nb and it.kind == "auto"]
        if rows:
            tables.append((nb, rows))
    return {"hardest": sorted(cells, key=lambda it: (it.difficulty, it.notebook, it.cell))[:5],
            "low": [it for it in items if it.low_discrimination], "item_tables": tables,
            "manual": [(it, _score_distribution(it)) for it in items if it.kind == "manual"]}


def _similar(data: ClassData, pairs: dict) -> dict:
    """“相似的提交”：每个 notebook 标出的学生对（页面上最多 MAX_EVIDENCE_PAIRS 对有并排的证据）。"""
    flagged = {nb: [p for p in ps if p.flagged] for nb, ps in pairs.items()}
    return {"n_flagged": sum(len(fl) for fl in flagged.values()),
            "flagged_pairs": [(nb, flagged[nb]) for nb in data.notebooks if flagged.get(nb)]}


def page_context(data: ClassData, items: list, summary: dict, pairs: dict, seconds: float) -> dict:
    """模板要的一切。"""
    constants = {name: getattr(mod, name) for mod, names in (
        (ca, ("LOW_DISCRIMINATION", "MIN_N_DISCRIMINATION")),
        (cs, ("FLAG_SIMILARITY", "FLAG_MIN_SHARED", "MAX_EVIDENCE_PAIRS", "CODE_K", "TEXT_K", "COMMON_SHARE",
              "COMMON_MIN"))) for name in names}
    return {"assignment": data.assignment, "notebooks": data.notebooks, "seconds": seconds,
            "now": dt.datetime.now().strftime("%Y-%m-%d %H:%M"), **constants,
            **_class_overview(data, summary), **_items(data, items), **_similar(data, pairs)}


def render_html(data: ClassData, items: list, summary: dict, pairs: dict, seconds: float) -> str:
    return _env().get_template("index.html.j2").render(page_context(data, items, summary, pairs, seconds))


def evidence_html(pair: cs.Pair) -> str:
    """一对学生的并排证据（页面上 flagged-pair 里的那一段）。"""
    return str(_env().get_template("evidence.html.j2").module.evidence(pair))
