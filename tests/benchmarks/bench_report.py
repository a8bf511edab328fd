"""班级报告的速度（不是测试）：合成的班（tests/class_fixtures.py），每人 6 个 notebook，50 / 100 / 200 个学生。

目标：200 个学生 × 6 个 notebook 的报告在这台 2 核机器上不到 60 秒。相似度要比较每一对学生，所以打印
各部分的时间和“每对学生的时间”随人数的变化（目标：相似度的时间不比“学生对数 × 答案长度”增长得快）。

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python tests/benchmarks/bench_report.py [--sizes 50 100 200]

每个规模在全新的进程里运行（和助教运行命令一样，导入库的时间也算）；造班级（写 gradebook 和 notebook）不计时。
机器忙时时间会变长：报告时写明机器当时的负载（打印 os.getloadavg()）。
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import class_fixtures as cf  # noqa: E402

CHILD = """
import json, sys, time
from pathlib import Path
from lib.grading import class_report
r = class_report.run(Path(sys.argv[1]), "exercises", quiet=True)
print(json.dumps({"seconds": r["seconds"], "t_stats": r["t_stats"], "t_similarity": r["t_similarity"],
                  "flagged": [[p.notebook, p.a, p.b] for ps in r["pairs"].values() for p in ps if p.flagged]}))
"""


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
        courses = {}
        for n in args.sizes:  # 先造好全部的班（不计时）
            students, planted = cf.synthetic_answers(rel, n_honest=n - 8, seed=n)  # 6 个抄袭的 + 2 个空白
            t = time.monotonic()
            courses[n] = (cf.write_class(base / f"c{n}", REPO, students), planted)
            print(f"造 {n} 个学生的班：{time.monotonic() - t:.0f} 秒（不计）", flush=True)
        for n in args.sizes:  # 每个规模一个全新的进程，和助教运行命令时一样（导入库的时间也算进去）
            course, planted = courses[n]
            t = time.monotonic()
            p = subprocess.run([sys.executable, "-W", "ignore", "-c", CHILD, str(course)], capture_output=True,
                               text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=course)
            wall = time.monotonic() - t
            if p.returncode:
                print(p.stderr[-3000:])
                return 1
            r = json.loads(p.stdout.strip().splitlines()[-1])
            pairs = n * (n - 1) // 2 * len(rel)
            ok = sorted(map(sorted, r["flagged"])) == sorted(sorted([nb, a, b]) for nb, a, b in planted)
            results.append((n, wall, r["t_stats"], r["t_similarity"], pairs))
            print(f"{n:4d} 个学生：命令 {wall:6.1f} 秒（其中读入+统计 {r['t_stats']:5.1f}，相似度 {r['t_similarity']:5.1f}，"
                  f"页面 {r['seconds'] - r['t_stats'] - r['t_similarity']:5.1f}，其余是启动和导入）；{pairs} 对；"
                  f"标出的正好是抄袭的 {len(planted)} 对：{'是' if ok else '否'}；负载 {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        if args.keep and results:
            shutil.copytree(base / f"c{results[-1][0]}", args.keep, dirs_exist_ok=True)
        shutil.rmtree(base, ignore_errors=True)
    n0, s0, _, sim0, p0 = results[0]
    for n, s, _, sim, p in results[1:]:
        print(f"{n0} → {n} 个学生：人数 ×{n / n0:.1f}，学生对 ×{p / p0:.1f}；命令时间 ×{s / s0:.2f}，相似度时间 ×{sim / sim0:.2f}")
    big = results[-1]
    print(f"{big[0]} 个学生 × {len(rel)} 个 notebook：{big[1]:.1f} 秒（目标 < 60 秒：{'达到' if big[1] < 60 else '没达到'}）")
    return 0


if __name__ == "__main__":
    sys.exit(main())
