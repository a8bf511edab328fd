"""各页训练结论的汇总（维护者用）：每一页的“结论”单元格（lib/claims.py 的 check）在哪些种子上、余量多大。

    python -m lib.tools.sweep_report                  # 用随仓库发布的结果执行各页（几分钟），记下结论
    python -m lib.tools.sweep_report --pages 06_multihead_attention   # 只重新执行这一页，别的页的记录不动
    python -m lib.tools.sweep_report --kernels avx2   # 换一套 CPU 计算核、全部现场重训（像换了一台 CPU；约 1 小时）
    python -m lib.tools.sweep_report --table          # 不执行，只用已经记下的结论重写 docs/sweep_tables.md

每次执行把结论记在 artifacts/claims/<这一次>.jsonl（一行一条结论：页面、陈述、每个种子的值、界限；按 PAGES 的顺序
一页一块，所以只重新执行一页时，别的页的行一个字节都不变，几个人各自重新生成不同的页时合并不冲突），再把所有记下的
合成 docs/sweep_tables.md（整个文件都是生成的：合并冲突时不用手改，再运行一次 --table）。一条结论在每一次里都成立、
而且留有余量，页面才把它当作“每个种子都成立”来教。
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from lib.claims import LOG_ENV
from lib.shipped import RETRAIN_ENV
from lib.tools.run_notebooks import run

ROOT = Path(__file__).resolve().parents[2]
CLAIMS_DIR = ROOT / "artifacts" / "claims"
PAGES = ["06_multihead_attention", "07_transformer_block", "08_architectures", "09_training_details",
         "11_mini_gpt_vs_rnn", "12_modern_transformer"]
# 另一套计算核：torch 自己的向量化代码和 MKL 都退到 AVX2（AMD 的许多 CPU 没有 AVX-512，用的就是这一套）
KERNELS = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}}
TABLES = ROOT / "docs" / "sweep_tables.md"  # 生成的文件（网站“教师与助教”的一页），CONTRIBUTING.md 链接到它
DRAW_NAMES = {"shipped": "随仓库发布的结果", "avx2": "AVX2 计算核，现场重训"}


def record(draw: str, pages, env: dict) -> list[str]:
    """执行这些页（不写回），结论记进 artifacts/claims/<draw>.jsonl；返回出错的单元格。"""
    CLAIMS_DIR.mkdir(parents=True, exist_ok=True)
    log = CLAIMS_DIR / f"{draw}.jsonl"
    kept = [line for line in (log.read_text(encoding="utf-8").splitlines() if log.exists() else [])
            if json.loads(line)["page"] not in pages]  # 这次重新执行的页，旧的记录换掉
    log.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    old = {k: os.environ.get(k) for k in [LOG_ENV, *env]}
    os.environ.update({LOG_ENV: str(log), **env})
    errors = []
    try:
        for page in pages:
            seconds, errs = run(ROOT / "notebooks" / f"{page}.ipynb", timeout=7200, allow_errors=True, write=False)
            print(f"{page}: {seconds:.0f} s" + (f"，{len(errs)} 个单元格出错" if errs else ""), flush=True)
            errors += errs
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    _group_by_page(log)
    return errors


def _page_order(page: str) -> tuple[int, str]:
    """PAGES 里的页按它们的顺序，别的页（以后加的）排在后面、按名字。"""
    return (PAGES.index(page), "") if page in PAGES else (len(PAGES), page)


def _group_by_page(log: Path) -> None:
    """把记录按页排好（同一页里保持执行时的顺序）：重新执行一页只换掉这一页的那一块。"""
    lines = log.read_text(encoding="utf-8").splitlines()
    lines.sort(key=lambda line: _page_order(json.loads(line)["page"]))  # sort 是稳定的
    log.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _rows(draw: str) -> dict:
    path = CLAIMS_DIR / f"{draw}.jsonl"
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        c = json.loads(line)
        rows[c["page"], c["title"] or "", c["text"]] = c
    return rows


def _cell(c: dict | None) -> str:
    if c is None:
        return "—"
    mark = "" if c["holds"] else " ✗"
    if c["kind"] == "sometimes":
        return f"{int(c['observed'])}/{len(c['values'])}{mark}"
    return f"{c['observed']:.3g}（{len(c['values'])}）{mark}"


def _bound(c: dict) -> str:
    lo, hi = c["low"], c["high"]
    if c["kind"] == "sometimes":
        return f"{0 if lo is None else int(lo)}–{len(c['values']) if hi is None else int(hi)} 次"
    if lo is not None and hi is not None:
        return f"[{lo:g}, {hi:g}]"
    return f"≥ {lo:g}" if lo is not None else f"≤ {hi:g}"


def table() -> str:
    """所有记下的结论合成的 Markdown：每页一张表，每条结论一行，每一次一列（最不利的值和个数，或出现次数）。"""
    draws = [d for d in DRAW_NAMES if (CLAIMS_DIR / f"{d}.jsonl").exists()]
    by_draw = {d: _rows(d) for d in draws}
    keys = list(dict.fromkeys(k for d in draws for k in by_draw[d]))
    out = []
    for page in sorted(dict.fromkeys(k[0] for k in keys), key=_page_order):
        out += [f"**{page}**", "", "| 结论 | 类型 | 要求 | " + " | ".join(DRAW_NAMES[d] for d in draws) + " |",
                "|---|---|---|" + "---|" * len(draws)]
        for key in (k for k in keys if k[0] == page):
            some = next(by_draw[d][key] for d in draws if key in by_draw[d])
            kind = "每个种子" if some["kind"] == "always" else "频率"
            out.append(f"| {key[2]} | {kind} | {_bound(some)} | " + " | ".join(_cell(by_draw[d].get(key)) for d in draws) + " |")
        out.append("")
    return "\n".join(out)


HEADER = """# 各页训练结论的汇总

<!-- 生成的文件：python -m lib.tools.sweep_report 写出，不要手改（合并冲突时运行 python -m lib.tools.sweep_report --table） -->

每一页的训练结论（`lib.claims` 的 `check(...)`）在每一次抽样里的值：`python -m lib.tools.sweep_report` 用随仓库发布的
结果执行各页，记在 `artifacts/claims/shipped.jsonl`；`--kernels avx2` 换一套 CPU 计算核、每一页都现场重训，记在
`avx2.jsonl`（像换了一台 CPU）。每一格是这一次里最不利的值（括号里是值的个数），频率是出现的次数；✗ 表示这条结论在这一次里
不成立。结论怎样选界限见 [CONTRIBUTING.md](../CONTRIBUTING.md) 的“Claims that hold”。

"""


def render() -> str:
    """docs/sweep_tables.md 的全部内容。"""
    return HEADER + table()


def write_tables(path: Path = TABLES) -> None:
    path.write_text(render(), encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.tools.sweep_report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", choices=sorted(KERNELS), help="换这一套 CPU 计算核，每一页都现场重训")
    parser.add_argument("--pages", nargs="+", default=PAGES, help="只执行这几页（默认全部）")
    parser.add_argument("--table", action="store_true", help="不执行，只用记下的结论重写 docs/sweep_tables.md")
    args = parser.parse_args(argv)
    errors = []
    if not args.table:
        os.environ.setdefault("CI", "true")
        env = {RETRAIN_ENV: "1", **KERNELS[args.kernels]} if args.kernels else {}
        errors = record(args.kernels or "shipped", args.pages, env)
    write_tables()
    print(f"写好了 {TABLES.relative_to(ROOT)}")
    print("\n".join(errors))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
