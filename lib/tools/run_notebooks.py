"""在全新的内核里从头到尾执行 notebook，并把输出写回文件（之后由 nbval 核对）。

用法：CI=true python -m lib.tools.run_notebooks notebooks/05_positional_encoding.ipynb ...
CI=true 让进度条保持安静，这样保存下来的输出和 CI 里重新执行的输出一致。
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def run(path: Path, timeout: int = 900) -> float:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # 不保存执行时间戳：否则每次重新执行都会改动所有单元格
        cell.metadata.pop("execution", None)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    elapsed = time.perf_counter() - start
    nbformat.write(nb, path)
    return elapsed


def main(argv=None):
    os.environ.setdefault("CI", "true")
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    for p in paths:
        print(f"{p}: {run(p):.1f} s", flush=True)


if __name__ == "__main__":
    main()
