"""一页上的训练结论，写成可以检查的样子（notebook 06–12 的“结论”单元格）。

一次小模型的训练只是一次抽样：换一个种子、换一台 CPU，就是另一次抽样。所以页面上的结论分两种：

- ``always(陈述, 每个种子的值, low=, high=)``：**每个种子都成立**。要求在每个值上都成立，表里列出最不利的那个
  种子的值和离界限还有多远（余量）。只有在 10 个以上的种子上都成立、而且留有余量的，页面才这样教。
- ``sometimes(陈述, 每个种子是否出现, at_least=, at_most=)``：**有的种子出现、有的不出现**，页面写成频率
  （“10 个种子里有 4 个”）。检查的是次数落在界限里，不是每个种子都一样。

``check(...)`` 把结论列成一张表，收在一行摘要下面（页面上点开才看，见 lib/viz.py 的 ``Details``）：摘要和表里的
“10 个种子里 7 个”“都满足，最小的 0.966”这些话都由数据生成，不会和数字对不上；调用方的 title 只写这组结论讲的是什么
（如“演示 3”），不写“每个种子都成立的”“只在一部分种子上出现的”。有不成立的就抛出 AssertionError，写明是哪一条、值是多少。
环境变量 ``COURSE_CLAIMS_LOG`` 指向一个文件时，每次 ``check`` 还把结论追加进去（一行一个 JSON）：
``python -m lib.tools.sweep_report`` 用它把各页的结论汇总成 docs/sweep_tables.md 里的表。
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from .viz import Details, Table

LOG_ENV = "COURSE_CLAIMS_LOG"  # 设了它，check() 把结论追加到这个文件（lib/tools/sweep_report.py 用）
PAGE_ENV = "COURSE_NOTEBOOK"  # 日志里记的页面名（lib/tools/run_notebooks.py 执行每一页时设）


@dataclass
class Claim:
    """一条结论。kind："always"（values 是每个种子的值，每个都要在 [low, high] 里）或 "sometimes"
    （values 是每个种子是否出现（0/1），出现的次数要在 [low, high] 里）。"""

    text: str
    kind: str
    values: list
    low: float | None = None
    high: float | None = None
    of: str = "个种子"  # "sometimes" 数的是什么：默认每个种子一次；(种子 × 例句) 这样的数写 "处"

    @property
    def observed(self) -> float:
        """"always"：离界限最近的值（只有下界时是最小值，只有上界时是最大值）；"sometimes"：出现的次数。"""
        if self.kind == "sometimes":
            return sum(self.values)
        if self.low is not None and self.high is not None:
            return min(self.values, key=lambda v: min(v - self.low, self.high - v))
        return min(self.values) if self.low is not None else max(self.values)

    @property
    def margin(self) -> float:
        """最不利的值离界限还有多远（负数：不成立）。"""
        x = self.observed
        gaps = [x - self.low] if self.low is not None else []
        gaps += [self.high - x] if self.high is not None else []
        return min(gaps)

    @property
    def holds(self) -> bool:
        return self.margin >= 0 if self.kind == "sometimes" else all(
            (self.low is None or v >= self.low) and (self.high is None or v <= self.high) for v in self.values)

    def bound(self) -> str:
        if self.kind == "sometimes":
            lo = 0 if self.low is None else int(self.low)
            hi = len(self.values) if self.high is None else int(self.high)
            return f"{lo}–{hi} 次"
        if self.low is not None and self.high is not None:
            return f"[{self.low:g}, {self.high:g}]"
        return f"≥ {self.low:g}" if self.low is not None else f"≤ {self.high:g}"

    def shown(self) -> str:
        if self.kind == "sometimes":
            return f"{int(self.observed)} / {len(self.values)}"
        return _number(self.observed)


def _number(x: float) -> str:
    return f"{x:.3g}" if abs(x) >= 1000 or (x != 0 and abs(x) < 0.001) else f"{x:.3f}"


def always(text: str, values, low: float | None = None, high: float | None = None) -> Claim:
    """每个种子都成立的结论：values 里每个数都要落在 [low, high] 里（只给一边也行）。"""
    values = [float(v) for v in values]
    if not values or (low is None and high is None):
        raise ValueError(f"结论 {text!r}：要给出至少一个值和至少一个界限")
    return Claim(text, "always", values, low, high)


def sometimes(text: str, happened, at_least: int | None = None, at_most: int | None = None, of: str = "个种子") -> Claim:
    """频率结论：happened 是每个种子上这件事有没有出现（True / False），出现的次数要在 [at_least, at_most] 里。
    of：数的单位，默认“个种子”；一个种子数几次时（例如 10 个种子 × 2 个例句）写 of="处"，表里就是“20 处里 6 处”。"""
    values = [int(bool(h)) for h in happened]
    if not values or (at_least is None and at_most is None):
        raise ValueError(f"结论 {text!r}：要给出每个种子的结果和至少一个界限")
    return Claim(text, "sometimes", values, at_least, at_most, of)


def check(*claims: Claim, title: str | None = None) -> Details:
    """把结论列成一张表（结论、结果、要求），收在一行摘要下面；有不成立的就 AssertionError。"""
    claims = [c for group in claims for c in (group if isinstance(group, (list, tuple)) else [group])]
    _log(claims, title)
    table = Table([[c.text, _result(c), _requirement(c), "✓" if c.holds else "✗"] for c in claims],
                  ["结论", "结果", "要求", ""])
    failed = [c for c in claims if not c.holds]
    if failed:
        raise AssertionError("这些结论不成立：\n" + "\n".join(
            f"- {c.text}：{c.shown()}（要求 {c.bound()}；全部的值 {[round(v, 4) for v in c.values]}）" for c in failed)
            + "\n\n" + repr(table))
    return Details(_summary(claims, title), table)


def _result(c: Claim) -> str:
    """表里“结果”一格，用学生的话：“10 个种子里 7 个”“全部 10 个都满足，最小的 0.966”（只有下界时说最小的，
    只有上界时说最大的：离界限最近的那个种子）。"""
    n = len(c.values)
    if c.kind == "sometimes":
        k, measure = int(c.observed), c.of.strip()[0]  # “个种子”里数“个”，“处”里数“处”
        return f"{n} {c.of}里 {k} {measure}" + ("，全部" if k == n else "，一个也没有" if k == 0 else "")
    which = ("最接近界限的" if c.low is not None and c.high is not None else "最小的" if c.low is not None else "最大的")
    return (f"全部 {n} 个都满足，{which} {_number(c.observed)}" if c.holds
            else f"{which} {_number(c.observed)}，不满足")


def _requirement(c: Claim) -> str:
    if c.kind == "sometimes":
        lo, hi = c.low, c.high
        measure = c.of.strip()[0]
        if lo is not None and hi is not None:
            return f"在 {int(lo)}–{int(hi)} {measure}之间"
        return f"至少 {int(lo)} {measure}" if lo is not None else f"至多 {int(hi)} {measure}"
    return "每个都" + (f"在 {c.bound()} 里" if c.bound().startswith("[") else f" {c.bound()}")


def _summary(claims: list, title: str | None) -> str:
    """页面上看得见的那一行：这组结论在多少个种子上怎样，数字来自数据。"""
    one = claims[0]
    if len(claims) == 1:
        text = f"{_result(one)}（要求{_requirement(one)}）"
    elif all(c.kind == "always" for c in claims):
        text = f"{len(claims)} 条结论，每条在每个种子上都满足"
    elif all(c.kind == "sometimes" for c in claims):
        text = f"{len(claims)} 条结论出现的次数都在要求之内"
    else:
        text = f"{len(claims)} 条结论都满足"
    return (f"{title}：" if title else "") + text + " · 点开看每条"


def _log(claims, title) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        for c in claims:
            f.write(json.dumps({"page": os.environ.get(PAGE_ENV, ""), "title": title, **asdict(c),
                                "observed": c.observed, "margin": c.margin, "holds": c.holds}, ensure_ascii=False) + "\n")
