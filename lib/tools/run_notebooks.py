"""在全新的内核里从头到尾执行 notebook，并把输出写回文件（之后由 nbval 核对）。

用法：CI=true python -m lib.tools.run_notebooks notebooks/05_positional_encoding.ipynb ...
CI=true 让进度条保持安静，这样保存下来的输出和 CI 里重新执行的输出一致。

--allow-errors：出错的单元格之后照样往下执行，最后列出出错的单元格（维护者重新生成结果时用：一条结论不成立，
后面的训练结果照样写进文件，改完结论再执行一次）。--no-write：不写回文件（lib/tools/sweep_report.py 用）。
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from lib.claims import PAGE_ENV
from lib.tools.cell_marks import sync as sync_cell_marks


def run(path: Path, timeout: int = 900, allow_errors: bool = False, write: bool = True) -> tuple[float, list[str]]:
    """执行一页，返回 (秒数, 出错的单元格的说明)。"""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # 不保存执行时间戳：否则每次重新执行都会改动所有单元格
        cell.metadata.pop("execution", None)
    os.environ[PAGE_ENV] = path.stem  # 内核继承环境变量：lib.claims 的日志里记着是哪一页
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False, allow_errors=allow_errors,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    elapsed = time.perf_counter() - start
    errors = [f"{path.name} 第 {i} 个单元格：{out.get('ename')}: {out.get('evalue', '')[:500]}"
              for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
              for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    if write:
        sync_cell_marks(nb)  # 标签 hide-input 等 → JupyterLab 的收起标记（lib/tools/cell_marks.py）
        nbformat.write(nb, path)
    return elapsed, errors


def main(argv=None) -> int:
    os.environ.setdefault("CI", "true")
    parser = argparse.ArgumentParser(prog="python -m lib.tools.run_notebooks")
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--allow-errors", action="store_true", help="出错之后继续执行，最后列出出错的单元格")
    parser.add_argument("--no-write", action="store_true", help="不把输出写回文件")
    args = parser.parse_args(argv)
    failed = []
    for p in args.paths:
        seconds, errors = run(p, allow_errors=args.allow_errors, write=not args.no_write)
        print(f"{p}: {seconds:.1f} s" + (f"，{len(errors)} 个单元格出错" if errors else ""), flush=True)
        failed += errors
    print("\n".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
