"""班级报告的速度（不是测试）：合成的班（tests/class_fixtures.py），每人 6 个 notebook，50 / 100 / 200 个学生。

目标：200 个学生 × 6 个 notebook 的报告在这台 2 核机器上不到 60 秒。相似度要比较每一对学生，所以打印
各部分的时间和“每对学生的时间”随人数的变化（目标：相似度的时间不比“学生对数 × 答案长度”增长得快）。

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python tests/benchmarks/bench_report.py [--sizes 50 100 200]

只计 `python -m lib.grading report` 做的事（class_report.run）；造班级（写 gradebook 和 notebook）不计时。
机器忙时时间会变长：报告时写明机器当时的负载（打印 os.getloadavg()）。
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import class_fixtures as cf  # noqa: E402

from lib.grading import class_report  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200])
    ap.add_argument("--keep", type=Path, help="留下最大的那个课程目录（看报告）")
    args = ap.parse_args()
    rel = cf.release_of(REPO)
    print(f"notebook：{len(rel)} 个；机器负载（1/5/15 分钟）：{os.getloadavg()}；CPU：{os.cpu_count()}")
    base = Path(tempfile.mkdtemp(prefix="bench-report-"))
    results = []
    try:
        for n in args.sizes:
            students, planted = cf.synthetic_answers(rel, n_honest=n - 8, seed=n)  # 6 个抄袭的 + 2 个空白
            t = time.monotonic()
            course = cf.write_class(base / f"c{n}", REPO, students)
            build = time.monotonic() - t
            r = class_report.run(course, "exercises", quiet=True)
            pairs = n * (n - 1) // 2 * len(rel)
            flagged = {(p.notebook, frozenset((p.a, p.b))) for ps in r["pairs"].values() for p in ps if p.flagged}
            ok = flagged == {(nb, frozenset((a, b))) for nb, a, b in planted}
            results.append((n, r["seconds"], r["t_stats"], r["t_similarity"], pairs))
            print(f"{n:4d} 个学生：报告 {r['seconds']:6.1f} 秒（读入+统计 {r['t_stats']:5.1f}，相似度 {r['t_similarity']:5.1f}，"
                  f"页面 {r['seconds'] - r['t_stats'] - r['t_similarity']:5.1f}）；{pairs} 对；"
                  f"标出的正好是抄袭的 {len(planted)} 对：{'是' if ok else '否'}；（造班级 {build:.0f} 秒，不计）")
    finally:
        if args.keep and results:
            shutil.copytree(base / f"c{results[-1][0]}", args.keep, dirs_exist_ok=True)
        shutil.rmtree(base, ignore_errors=True)
    n0, s0, _, sim0, p0 = results[0]
    for n, s, _, sim, p in results[1:]:
        print(f"{n0} → {n} 个学生：人数 ×{n / n0:.1f}，学生对 ×{p / p0:.1f}；报告时间 ×{s / s0:.2f}，相似度时间 ×{sim / sim0:.2f}")
    big = results[-1]
    print(f"{big[0]} 个学生 × {len(rel)} 个 notebook：{big[1]:.1f} 秒（目标 < 60 秒：{'达到' if big[1] < 60 else '没达到'}）")
    return 0


if __name__ == "__main__":
    sys.exit(main())
