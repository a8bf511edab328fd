"""JupyterHub 的容量基准（按需运行，不在默认测试里）：给 README 和 values.yaml 的容量数字。

1. 每名学生的内存：JupyterLab 服务器启动后的常驻内存（RSS），加上一个全新内核从头运行一个 notebook
   时的峰值 RSS（/proc 的 VmHWM）。
2. 一个核能同时服务多少名学生：K 名“学生”同时从头运行同一个 notebook（每人一个全新的内核），
   全部绑在同一个核上（sched_setaffinity），K = 1, 2, 4, 8……；打印每次运行的中位用时和相对 K=1 的倍数。
   “每核并发学生数”取倍数不超过 --slowdown（默认 2）的最大 K：所有人同一时刻点“运行全部”时，
   每人等的时间不超过单独运行的两倍。这是最坏情况（上课时大家并不总在同时运行）。

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python tests/benchmarks/bench_hub_capacity.py \\
        [--memory notebooks/02_self_attention.ipynb notebooks/11_mini_gpt_vs_rnn.ipynb] \\
        [--concurrency notebooks/02_self_attention.ipynb] [--k 1 2 4 8]

机器忙的时候数字不可信：输出里会打印当时的 load average。
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parents[2]


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _tree_rss_kb(root: int) -> int:
    """root 和它全部后代进程（例如 notebook 用 multiprocessing 启动的训练进程）的 RSS 之和。"""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            total += _status_kb(pid, "VmRSS")
        except OSError:
            pass
        todo.extend(children.get(pid, []))
    return total


def run_notebook(path: Path, core: int | None) -> dict:
    """在全新的内核里从头运行 notebook；返回用时、内核（连同它的子进程）的峰值 RSS 和内核的 CPU 时间。

    峰值：每 0.5 秒把内核和它全部子进程的 RSS 加起来，取最大值；再和内核自己的 VmHWM 取大者。
    """
    import threading

    import nbformat
    from nbclient import NotebookClient
    if core is not None:
        os.sched_setaffinity(0, {core})  # 内核是子进程，继承这个绑定
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name="python3", timeout=1800,
                            resources={"metadata": {"path": str(path.parent)}})
    peak_tree, done = [0], threading.Event()

    def sample():
        while not done.wait(0.5):
            km = getattr(client, "km", None)
            pid = getattr(getattr(km, "provisioner", None), "pid", None) if km else None
            if pid:
                peak_tree[0] = max(peak_tree[0], _tree_rss_kb(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t = time.monotonic()
    client.execute(cleanup_kc=False)
    wall = time.monotonic() - t
    done.set()
    sampler.join()
    pid = client.km.provisioner.pid
    peak = max(_status_kb(pid, "VmHWM"), peak_tree[0])
    ticks = os.sysconf("SC_CLK_TCK")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    from jupyter_core.utils import run_sync
    run_sync(client.km.shutdown_kernel)(now=True)
    return {"wall": wall, "kernel_peak_mb": peak / 1024, "kernel_cpu_s": cpu}


def server_rss_mb() -> float:
    """启动一个 JupyterLab 服务器（和 hub 上的单用户服务器同样的扩展），等它就绪，读它的 RSS。"""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(8)
    tmp = Path(tempfile.mkdtemp())
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp / "rt")}
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--ServerApp.port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp}"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab?token={token}", timeout=10):
                    break
            except OSError:
                time.sleep(1)
        time.sleep(3)
        return _status_kb(proc.pid, "VmRSS") / 1024
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--core", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--memory", nargs="*", default=["notebooks/02_self_attention.ipynb",
                                                     "notebooks/11_mini_gpt_vs_rnn.ipynb"])
    ap.add_argument("--concurrency", default="notebooks/02_self_attention.ipynb")
    ap.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--slowdown", type=float, default=2.0)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(run_notebook(Path(args.worker).resolve(), args.core)))
        return 0
    os.environ.setdefault("CI", "true")  # notebook 的训练用 CI 的短设置（和 make notebooks 一样）
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(f"load average（开始时）：{os.getloadavg()}；CPU 核数 {os.cpu_count()}")
    rss = server_rss_mb()
    print(f"JupyterLab 服务器就绪后的 RSS：{rss:.0f} MB")
    for nb in args.memory:
        r = json.loads(subprocess.run([sys.executable, __file__, "--worker", nb], check=True, text=True,
                                      capture_output=True, cwd=REPO).stdout.splitlines()[-1])
        print(f"{nb}：内核（连同子进程）峰值 RSS {r['kernel_peak_mb']:.0f} MB，用时 {r['wall']:.1f} 秒，内核 CPU {r['kernel_cpu_s']:.1f} 秒；"
              f"每名学生约 {rss + r['kernel_peak_mb']:.0f} MB（服务器 + 这个内核）")
    core = sorted(os.sched_getaffinity(0))[-1]
    base, best = None, 0
    for k in args.k:
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", args.concurrency, "--core", str(core)],
                                  stdout=subprocess.PIPE, text=True, cwd=REPO) for _ in range(k)]
        runs = [json.loads(p.communicate()[0].splitlines()[-1]) for p in procs]
        walls = [r["wall"] for r in runs]
        med = median(walls)
        base = base or med
        ratio = med / base
        if ratio <= args.slowdown:
            best = k
        print(f"K={k} 名学生同时在 1 个核上运行 {args.concurrency}：中位用时 {med:.1f} 秒"
              f"（最慢 {max(walls):.1f}），是单独运行的 {ratio:.2f} 倍；内核 CPU 中位 "
              f"{median(r['kernel_cpu_s'] for r in runs):.1f} 秒")
    print(f"每核并发学生数（同时运行、每人等待不超过单独运行的 {args.slowdown:g} 倍）：{best}")
    print(f"load average（结束时）：{os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
