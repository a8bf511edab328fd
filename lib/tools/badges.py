"""给每个 notebook 盖章：Colab 徽章指向它自己在仓库里的路径，第一个代码单元格是引导单元格，内核是课程装的那个。

仓库地址和版本只在 pyproject.toml 的 [tool.course] 里（见 lib/tools/bootstrap.py）。改了之后：

    python -m lib.tools.badges --write    # 即 make stamp-badges：重新盖章 notebooks/、release/、solutions/（source/ 只盖内核）
    python -m lib.tools.badges --check    # 只检查，不改文件；有问题时列出并以 1 退出

徽章的图片是仓库里的 assets/colab-badge.svg（相对路径：离线、在国内、在 JupyterLab、学生的副本、GitHub 和网页版上都显示）。
内核：每个存下的 notebook 的 metadata.kernelspec 都是 KERNELSPEC，和 make lab 装的内核（Makefile 的 ipykernel install）
一模一样。不一样时 JupyterLab 打开 notebook 就改写这一项、过一会儿自动保存，仓库里的文件就“被改了”。
source/ 不盖徽章和引导单元格：release/ 和 solutions/ 由 nbgrader 从 source/ 生成后再盖章（它们的路径不同）。
"""
from __future__ import annotations

import argparse
import posixpath
import re
import sys
from pathlib import Path

import nbformat

from . import cell_marks
from .bootstrap import REPO_ROOT, bootstrap_source, colab_url, course_config

STAMPED_DIRS = ("notebooks", "release", "solutions")
KERNELSPEC_ONLY_DIRS = ("source",)
# make lab 装的内核（Makefile 和 deploy/zero-to-jupyterhub/Dockerfile 的 ipykernel install；tests/test_badges.py 核对三处一致）
KERNELSPEC = {"display_name": "Python 3 (lecture07)", "language": "python", "name": "python3"}
BADGE_FILE = "assets/colab-badge.svg"  # 相对于仓库根目录
# 第一个 Markdown 单元格里徽章的图片：Colab 网站上的（旧）或者仓库里的，路径写法不限
BADGE_IMAGE = re.compile(r"(\[!\[[^\]]*\]\()([^)\s]*colab-badge\.svg)(\))")
# 任何指向 Colab 打开某个 notebook 的链接（GitHub 或 Drive 形式）
COLAB_LINK = re.compile(r"https://colab\.research\.google\.com/(?:github|drive)/[^\s)\"'<>\]]+")
# 第一个代码单元格若不像引导单元格，就不覆盖它（宁可报错也不吞掉真正的代码）
_BOOTSTRAP_MARKERS = ("COURSE_REPO", "引导单元格")


def badge_image(path_in_repo: str) -> str:
    """从 path_in_repo 所在的文件夹到 assets/colab-badge.svg 的相对路径（学生的副本 mywork/ 里也有一份 assets/）。"""
    folder = posixpath.dirname(path_in_repo.replace("\\", "/").lstrip("/"))
    return posixpath.relpath(BADGE_FILE, folder or ".")


def badge_markdown(path_in_repo: str, config: dict | None = None) -> str:
    """一行 Markdown 的 "Open in Colab" 徽章。"""
    return f"[![Open In Colab]({badge_image(path_in_repo)})]({colab_url(path_in_repo, config)})"


def stamp_kernelspec(nb) -> bool:
    """metadata.kernelspec 换成课程装的内核（KERNELSPEC）；返回是否改动了。"""
    if nb.metadata.get("kernelspec") == KERNELSPEC:
        return False
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    return True


def _refresh_checksum(cell) -> None:
    """nbgrader 给锁定/评分单元格存了校验和；内容变了就按 nbgrader 的算法重算，免得 validate 报“被改动”。"""
    meta = cell.get("metadata", {}).get("nbgrader")
    if meta and "checksum" in meta:
        from nbgrader.utils import compute_checksum
        meta["checksum"] = compute_checksum(cell)


def _first(nb, cell_type: str):
    return next((c for c in nb.cells if c.cell_type == cell_type), None)


def stamp(nb, path_in_repo: str, *, config: dict | None = None) -> bool:
    """就地改写 nbformat 的 NotebookNode：第一个 Markdown 单元格里的 Colab 徽章指向 path_in_repo、图片是仓库里的那份，
    第一个代码单元格的源码换成引导单元格（输出保留：本地分支的输出不变）、收起它的代码（标签 hide-input），内核是 KERNELSPEC。返回是否改动了什么。"""
    config = config or course_config()
    path_in_repo = path_in_repo.replace("\\", "/").lstrip("/")
    url = colab_url(path_in_repo, config)
    changed = stamp_kernelspec(nb)

    md = _first(nb, "markdown")
    if md is None:
        raise ValueError(f"{path_in_repo}：没有 Markdown 单元格，放不下 Colab 徽章（第一个单元格应是标题和徽章）")
    if COLAB_LINK.search(md.source):
        new_md = COLAB_LINK.sub(url, md.source)
        new_md = BADGE_IMAGE.sub(lambda m: m.group(1) + badge_image(path_in_repo) + m.group(3), new_md)
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
    tags = code.setdefault("metadata", {}).setdefault("tags", [])
    if "hide-input" not in tags:  # 引导单元格不是这一页的内容：收起代码，只留第一行注释和它打印的一句话
        tags.append("hide-input")
        changed = True
    return cell_marks.sync(nb) or changed


def notebooks_to_stamp(root: Path = REPO_ROOT, dirs=STAMPED_DIRS) -> list[Path]:
    """notebooks/、release/、solutions/（或 dirs）下的全部 .ipynb（不含 .ipynb_checkpoints）。"""
    found = []
    for d in dirs:
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
    kernel_only = notebooks_to_stamp(root, KERNELSPEC_ONLY_DIRS)
    stale, broken = [], []
    for path in paths + kernel_only:
        rel = path.relative_to(root).as_posix()
        nb = nbformat.read(path, as_version=4)
        try:
            changed = stamp_kernelspec(nb) if path in kernel_only else stamp(nb, rel, config=config)
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
    print(f"{len(paths) + len(kernel_only)} 个 notebook，{len(stale)} 个{verb}，{len(broken)} 个无法盖章"
          f"（仓库 {config['repository']}，版本 {config['ref']}）")
    if args.check and stale:
        print("请运行 make stamp-badges（python -m lib.tools.badges --write）", file=sys.stderr)
    return 1 if broken or (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
