"""测试套件的 CPU 花在哪里（按需运行，不在默认测试里；issue 24：CI 在 2 核的机器上 15 分钟内跑完）。

`make test` 的 `--durations` 给的是墙钟时间：两个 pytest 进程同时跑，一个测试自己开了几个进程（内核、浏览器、
评分的沙箱）时，别的测试就被拖慢，墙钟时间算到了被拖慢的那个头上。这里把每个测试文件、每个 notebook 单独交给
一个 pytest 进程，记下它和它的全部子进程用掉的 CPU 秒数（os.wait4 的 rusage：等到了的子孙进程都算在内；
自己脱离父进程的守护进程不算），--jobs 个同时跑，最后按 CPU 从多到少打印，并和 2 核 15 分钟的预算比较。

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python tests/benchmarks/bench_test_cpu.py [--jobs 2] [路径 ...]

每个进程都要自己收集、导入一遍（约 2–3 秒），所以各项之和比 `make test` 用掉的 CPU 略多。机器忙的时候数字不可信。
rusage 看不到脱离了父进程的子孙（JupyterHub 和它启动的单用户服务器、浏览器的一部分进程、评分沙箱里的内核）：
--jobs 1 时另打印整台机器在这段时间里的忙碌核·秒（/proc/stat），包括这些进程（2026-12-02 实测：hub 的测试 rusage
108、整机 181；评分的测试 60 和 109）。
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUDGET_CORE_SECONDS = 2 * 15 * 60  # 2 个核、15 分钟（其中还要减去 make setup）


def busy_core_seconds() -> float:
    """开机以来整台机器的忙碌核·秒（/proc/stat 第一行：除 idle、iowait 以外的全部）。"""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def run_unit(unit: str) -> tuple[str, float, float, str, float]:
    """在一个新的 pytest 进程里跑 unit；返回 (unit, CPU 秒, 墙钟秒, pytest 的最后一行, 整机忙碌核·秒)。"""
    env = dict(os.environ, CI="true", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    start, busy = time.monotonic(), busy_core_seconds()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", unit], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    last = out.strip().splitlines()[-1] if out.strip() else f"退出码 {proc.returncode}"
    return unit, usage.ru_utime + usage.ru_stime, time.monotonic() - start, last, busy_core_seconds() - busy


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("units", nargs="*", help="测试文件或 notebook（默认：tests/test_*.py 和 notebooks/*.ipynb）")
    ap.add_argument("--jobs", type=int, default=2, help="同时跑几个 pytest 进程")
    args = ap.parse_args()
    units = args.units or sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py")) + \
        sorted(str(p.relative_to(REPO)) for p in (REPO / "notebooks").glob("*.ipynb"))
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = sorted(pool.map(run_unit, units), key=lambda r: -r[1])
    total = sum(row[1] for row in rows)
    whole = args.jobs == 1  # 只有一个一个跑时，整机的忙碌时间才属于这一项
    print(f"{'CPU 秒':>8} {'墙钟秒':>8}  {'占比':>5}  " + (f"{'整机核·秒':>9}  " if whole else "") + "文件")
    for unit, cpu, wall, last, busy in rows:
        print(f"{cpu:8.1f} {wall:8.1f}  {cpu / total:5.1%}  " + (f"{busy:9.1f}  " if whole else "") + f"{unit}    {last}")
    print(f"合计 {total:.0f} CPU 秒 = 2 核 15 分钟预算（{BUDGET_CORE_SECONDS} 核·秒）的 {total / BUDGET_CORE_SECONDS:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
