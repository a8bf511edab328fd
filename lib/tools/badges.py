"""给每个 notebook 盖章：Colab 徽章指向它自己在仓库里的路径，第一个代码单元格是引导单元格。

仓库地址和版本只在 pyproject.toml 的 [tool.course] 里（见 lib/tools/bootstrap.py）。改了之后：

    python -m lib.tools.badges --write    # 即 make stamp-badges：重新盖章 notebooks/、release/、solutions/
    python -m lib.tools.badges --check    # 只检查，不改文件；有问题时列出并以 1 退出

source/ 不盖章：release/ 和 solutions/ 由 nbgrader 从 source/ 生成后再盖章（它们的路径不同）。
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

from .bootstrap import REPO_ROOT, bootstrap_source, colab_url, course_config

STAMPED_DIRS = ("notebooks", "release", "solutions")
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
# 任何指向 Colab 打开某个 notebook 的链接（GitHub 或 Drive 形式）
COLAB_LINK = re.compile(r"https://colab\.research\.google\.com/(?:github|drive)/[^\s)\"'<>\]]+")
# 第一个代码单元格若不像引导单元格，就不覆盖它（宁可报错也不吞掉真正的代码）
_BOOTSTRAP_MARKERS = ("COURSE_REPO", "引导单元格")


def badge_markdown(path_in_repo: str, config: dict | None = None) -> str:
    """一行 Markdown 的 "Open in Colab" 徽章。"""
    return f"[![Open In Colab]({BADGE_IMAGE})]({colab_url(path_in_repo, config)})"


def _refresh_checksum(cell) -> None:
    """nbgrader 给锁定/评分单元格存了校验和；内容变了就按 nbgrader 的算法重算，免得 validate 报“被改动”。"""
    meta = cell.get("metadata", {}).get("nbgrader")
    if meta and "checksum" in meta:
        from nbgrader.utils import compute_checksum
        meta["checksum"] = compute_checksum(cell)


def _first(nb, cell_type: str):
    return next((c for c in nb.cells if c.cell_type == cell_type), None)


def stamp(nb, path_in_repo: str, *, config: dict | None = None) -> bool:
    """就地改写 nbformat 的 NotebookNode：第一个 Markdown 单元格里的 Colab 徽章指向 path_in_repo，
    第一个代码单元格的源码换成引导单元格（输出保留：本地分支的输出不变）。返回是否改动了什么。"""
    config = config or course_config()
    path_in_repo = path_in_repo.replace("\\", "/").lstrip("/")
    url = colab_url(path_in_repo, config)
    changed = False

    md = _first(nb, "markdown")
    if md is None:
        raise ValueError(f"{path_in_repo}：没有 Markdown 单元格，放不下 Colab 徽章（第一个单元格应是标题和徽章）")
    if COLAB_LINK.search(md.source):
        new_md = COLAB_LINK.sub(url, md.source)
    else:  # 没有徽章：放在标题行下面（没有标题就放最前面）
        lines = md.source.split("\n")
        at = next((i + 1 for i, line in enumerate(lines) if line.lstrip().startswith("#")), 0)
        badge = badge_markdown(path_in_repo, config)
        lines[at:at] = ["", badge] if at else [badge, ""]
        new_md = "\n".join(lines)
    if new_md != md.source:
        md.source = new_md
        _refresh_checksum(md)
        changed = True

    code = _first(nb, "code")
    if code is None:
        raise ValueError(f"{path_in_repo}：没有代码单元格，第一个代码单元格应是引导单元格")
    target = bootstrap_source(config["repository"], config["ref"]).rstrip("\n")
    if code.source.rstrip("\n") != target:
        if code.source.strip() and not any(m in code.source for m in _BOOTSTRAP_MARKERS):
            raise ValueError(f"{path_in_repo}：第一个代码单元格不是引导单元格，拒绝覆盖它：\n{code.source[:200]}")
        code.source = target
        _refresh_checksum(code)
        changed = True
    return changed


def notebooks_to_stamp(root: Path = REPO_ROOT) -> list[Path]:
    """notebooks/、release/、solutions/ 下的全部 .ipynb（不含 .ipynb_checkpoints）。"""
    found = []
    for d in STAMPED_DIRS:
        found += [p for p in sorted((root / d).rglob("*.ipynb")) if ".ipynb_checkpoints" not in p.parts]
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.tools.badges", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="重新盖章并写回文件")
    mode.add_argument("--check", action="store_true", help="只检查；有需要改的就以 1 退出")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="课程根目录（默认：本仓库）")
    args = parser.parse_args(argv)

    root = args.root.resolve()
    config = course_config(root / "pyproject.toml")
    paths = notebooks_to_stamp(root)
    stale, broken = [], []
    for path in paths:
        rel = path.relative_to(root).as_posix()
        nb = nbformat.read(path, as_version=4)
        try:
            changed = stamp(nb, rel, config=config)
        except ValueError as err:
            broken.append(str(err))
            continue
        if changed:
            stale.append(rel)
            if args.write:
                nbformat.write(nb, path)
    for msg in broken:
        print(f"错误：{msg}", file=sys.stderr)
    verb = "已更新" if args.write else "需要重新盖章"
    for rel in stale:
        print(f"{verb}：{rel}")
    print(f"{len(paths)} 个 notebook，{len(stale)} 个{verb}，{len(broken)} 个无法盖章"
          f"（仓库 {config['repository']}，版本 {config['ref']}）")
    if args.check and stale:
        print("请运行 make stamp-badges（python -m lib.tools.badges --write）", file=sys.stderr)
    return 1 if broken or (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
