"""一页上的训练结论，写成可以检查的样子（notebook 06–12 的“结论”单元格）。

一次小模型的训练只是一次抽样：换一个种子、换一台 CPU，就是另一次抽样。所以页面上的结论分两种：

- ``always(陈述, 每个种子的值, low=, high=)``：**每个种子都成立**。要求在每个值上都成立，表里列出最不利的那个
  种子的值和离界限还有多远（余量）。只有在 10 个以上的种子上都成立、而且留有余量的，页面才这样教。
- ``sometimes(陈述, 每个种子是否出现, at_least=, at_most=)``：**有的种子出现、有的不出现**，页面写成频率
  （“10 个种子里有 4 个”）。检查的是次数落在界限里，不是每个种子都一样。

``check(...)`` 把结论列成一张表显示出来；有不成立的就抛出 AssertionError，写明是哪一条、值是多少。
环境变量 ``COURSE_CLAIMS_LOG`` 指向一个文件时，每次 ``check`` 还把结论追加进去（一行一个 JSON）：
``python -m lib.tools.sweep_report`` 用它把各页的结论汇总成 CONTRIBUTING.md 里的表。
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from .viz import Table

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


def sometimes(text: str, happened, at_least: int | None = None, at_most: int | None = None) -> Claim:
    """频率结论：happened 是每个种子上这件事有没有出现（True / False），出现的次数要在 [at_least, at_most] 里。"""
    values = [int(bool(h)) for h in happened]
    if not values or (at_least is None and at_most is None):
        raise ValueError(f"结论 {text!r}：要给出每个种子的结果和至少一个界限")
    return Claim(text, "sometimes", values, at_least, at_most)


def check(*claims: Claim, title: str | None = None) -> Table:
    """把结论列成一张表（陈述、种子数、最不利的值或出现次数、要求、余量）；有不成立的就 AssertionError。"""
    claims = [c for group in claims for c in (group if isinstance(group, (list, tuple)) else [group])]
    _log(claims, title)
    table = Table([[c.text, len(c.values), c.shown(), c.bound(), _number(c.margin), "✓" if c.holds else "✗"]
                   for c in claims], ["结论", "个数", "最不利的值 / 出现次数", "要求", "余量", ""], title=title)
    failed = [c for c in claims if not c.holds]
    if failed:
        raise AssertionError("这些结论不成立：\n" + "\n".join(
            f"- {c.text}：{c.shown()}（要求 {c.bound()}；全部的值 {[round(v, 4) for v in c.values]}）" for c in failed)
            + "\n\n" + repr(table))
    return table


def _log(claims, title) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        for c in claims:
            f.write(json.dumps({"page": os.environ.get(PAGE_ENV, ""), "title": title, **asdict(c),
                                "observed": c.observed, "margin": c.margin, "holds": c.holds}, ensure_ascii=False) + "\n")
