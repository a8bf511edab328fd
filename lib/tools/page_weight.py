"""每一页看得见的分量，和它对应的讲义小节比一比（issue 43：一页的正文不超过讲义那一节的约 3 倍）。

看得见的 = markdown 单元格里 ``<details>`` 之外的文字 + 没有收起（``hide-input`` / ``hide-cell``）的代码。
引导单元格（每页都一样、第一行是“# 引导单元格”）不算。讲义按“N. 标题”分节；讲义文件里不少表格出现两遍（一遍每行连在一起、一遍用制表符分列），连在一起的那一遍不算。
字符数按 Unicode 字符数，空白不算。打印两个比值：文字（markdown）÷ 讲义，和文字加代码 ÷ 讲义。

用法：python -m lib.tools.page_weight [--ref 提交]   （--ref：读那个提交里的页面，用来比较前后）
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LECTURE = ROOT.parent / "shared" / "lecture07.md"
SECTIONS = {0: (0, 13, 14, 15, 16, 17)}  # 00_start_here 对应讲义的导航、小结、作业、练习、阅读、预告
DETAILS = re.compile(r"<details>.*?</details>", re.S)
HIDDEN = {"hide-input", "hide-cell"}


def _chars(text: str) -> int:
    return len(re.sub(r"\s", "", text))


def lecture_sections(path: Path = LECTURE) -> dict[int, list[str]]:
    """{节号: 这一节的行}：只取第一次出现的“N. 标题”（文件末尾的目录重复不算）。"""
    sections, current = {}, None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^(\d{1,2})\. \S", line)
        if m and current == 17:
            break
        if m and int(m.group(1)) not in sections and (current is None or int(m.group(1)) == current + 1):
            current = int(m.group(1))
            sections[current] = []
        if current is not None:
            sections[current].append(line)
    return sections


def lecture_chars(lines: list[str]) -> int:
    """一节的字符数：和某一行制表符表格内容相同的“连在一起”的行不重复计。"""
    table_rows = {re.sub(r"\s", "", line) for line in lines if "\t" in line}
    return sum(_chars(line) for line in lines if "\t" in line or re.sub(r"\s", "", line) not in table_rows)


def visible(nb: dict) -> tuple[int, int]:
    """(看得见的 markdown 字符数, 看得见的代码字符数)。"""
    prose = code = 0
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            prose += _chars(DETAILS.sub("", source))
        elif cell["cell_type"] == "code" and not HIDDEN & set(cell.get("metadata", {}).get("tags", [])):
            code += 0 if source.startswith("# 引导单元格") else _chars(source)
    return prose, code


def _pages(ref: str | None):
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        if ref is None:
            yield path.name, json.loads(path.read_text(encoding="utf-8"))
            continue
        shown = subprocess.run(["git", "show", f"{ref}:notebooks/{path.name}"], cwd=ROOT, capture_output=True, text=True)
        if shown.returncode == 0:
            yield path.name, json.loads(shown.stdout)


def rows(ref: str | None = None) -> list[tuple]:
    lecture = lecture_sections()
    out = []
    for name, nb in _pages(ref):
        number = int(name[:2])
        size = sum(lecture_chars(lecture[s]) for s in SECTIONS.get(number, (number,)))
        prose, code = visible(nb)
        out.append((name, prose, code, size, prose / size, (prose + code) / size))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.tools.page_weight", description=__doc__.splitlines()[0])
    parser.add_argument("--ref", help="读这个 git 提交里的页面（默认：工作区）")
    args = parser.parse_args(argv)
    print(f"{'page':<36} {'prose':>7} {'code':>7} {'lecture':>8} {'prose/lecture':>14} {'(prose+code)/lecture':>21}")
    for name, prose, code, size, prose_ratio, ratio in rows(args.ref):
        print(f"{name:<36} {prose:>7,} {code:>7,} {size:>8,} {prose_ratio:>14.1f} {ratio:>21.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
