"""评分流水线的演示：`make grade-demo`（助教第一次用之前值得跑一遍，约一两分钟）。

在一个临时课程目录里（不碰仓库，不碰你的 gradebook.db）造出两组提交，打成 LMS 的 zip（学号/NOTEBOOK.ipynb），
运行和助教完全一样的命令：

    python -m lib.grading grade exercises --submissions 下载.zip --jobs 2 --timeout 10

- **稳健性**（一个 notebook 的 25 种提交）：正确、空白、部分答错、带打印和警告、各种作弊（替换 numpy / builtins /
  lib 的函数、打印假的“测试通过”、永远相等的对象、读参考答案、乱写文件）、死循环、内存、fork 炸弹、内核退出、段错误、
  nbgrader 元数据丢失、重复的评分单元格、删掉的测试单元格、改了类型的单元格、Colab 元数据、坏 JSON、怪文件名、
  不是 notebook 的文件。
- **公平性**（tests/test_fairness.py 的表）：每个自动评分单元格别的写法的正确答案、典型错误、做对一半的答案，
  每一行有期望的得分和理由。

然后把期望和 grades.csv / gradebook 里的实际结果并排打印；有不一致时退出码为 1。

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python tests/grading_demo.py [--suite all|robustness|fairness]
        [--notebook 01_attention_by_hand] [--keep DIR]

--keep DIR 把临时课程留在 DIR（可以打开 feedback/ 里的反馈 HTML、.grading/ 里的隔离文件）。
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import unicodedata
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))
import grading_fixtures as gf  # noqa: E402
import test_fairness as fair  # noqa: E402

from lib.grading import sandbox  # noqa: E402

WHAT = {  # fixture 的中文说明（按名字的前三个字符）
    "s01": "正确答案", "s02": "空白（没做）", "s03": "第一题没做", "s04": "正确，但打印、发警告、写日志",
    "s05": "替换 np.allclose 等", "s06": "替换 builtins（AssertionError、isinstance）",
    "s07": "替换 lib.transformer 的函数", "s08": "打印假的“所有测试通过”", "s09": "__eq__ 永远为真的对象",
    "s10": "读取 solutions/ 里的参考答案", "s11": "正确，但往课程目录里写文件", "s12": "死循环",
    "s13": "吞掉中断的死循环", "s14": "申请 28 GB 内存", "s15": "fork 炸弹", "s16": "os._exit 退出内核",
    "s17": "段错误", "s18": "nbgrader 元数据全部丢失", "s19": "评分单元格被复制了一份", "s20": "删掉了测试单元格",
    "s21": "改了单元格类型", "s22": "Colab 保存的元数据", "s23": "JSON 损坏", "s24": "文件名不对",
    "s25": "不是 notebook",
}


def pad(text: str, width: int, right: bool = False) -> str:
    """按终端显示宽度补空格（中文字符占两格）。"""
    shown = sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)
    fill = " " * max(0, width - shown)
    return fill + text if right else text + fill


def robustness_zip(course: Path, zpath: Path, notebook: str) -> list[dict]:
    rel = gf.load(course / "release" / "exercises" / f"{notebook}.ipynb")
    sol = gf.load(course / "solutions" / "exercises" / f"{notebook}.ipynb")
    fixtures = gf.build_fixtures(rel, sol, notebook, course, "exercises", multi=True)
    full = sum(gf.test_points(rel).values())
    with zipfile.ZipFile(zpath, "a" if zpath.exists() else "w") as zf:
        for fx in fixtures:
            fx["full"] = full
            zf.writestr(fx["path"], fx["data"])
    print(f"稳健性：{len(fixtures)} 份提交（{notebook}，满分 {full:g}）")
    return fixtures


def robustness_table(fixtures: list[dict], rows: list[dict]) -> int:
    use_bwrap = sandbox.bwrap_status()[0]
    bad = 0
    print("\n" + pad("提交", 23) + pad("内容", 44) + pad("期望分数", 9, True) + pad("得分", 6, True) + "  "
          + pad("期望状态", 26) + "实际状态")
    for fx in fixtures:
        match = gf.rows_for(fx, rows)
        want = gf.expected_score(fx, use_bwrap)
        must = " ".join(["+".join(sorted(fx["must"]))] * bool(fx["must"]) + [f"非{x}" for x in sorted(fx["forbid"])])
        ok = len(match) == 1 and gf.row_matches(fx, match[0], use_bwrap)
        bad += not ok
        got = match[0] if len(match) == 1 else {"score": "?", "status": f"{len(match)} 行"}
        print(pad(fx["name"], 23) + pad(WHAT.get(fx["name"][:3], ""), 44)
              + pad("隔离" if want is None else f"{want:g}", 9, True) + pad(got["score"] or "—", 6, True) + "  "
              + pad(must, 26) + got["status"] + ("" if ok else "   ✗ 不符合期望"))
    print(f"\n{len(fixtures) - bad} / {len(fixtures)} 份符合期望"
          + ("" if use_bwrap else "（没有 bwrap：读参考答案的提交会读到，但仍标记为 suspect）"))
    return bad


def fairness_table(course: Path) -> int:
    rows = fair.results(course)
    lines = fair.compare(rows)
    bad = sum(not line["ok"] for line in lines)
    not_ok = sorted(sid for sid, r in rows.items() if not r["row"] or r["row"]["status"] != fair.expected_status(sid))
    print("\n公平性（tests/test_fairness.py 的表；表里没写的单元格是参考答案，应得满分）：\n")
    print(fair.format_table(lines))
    print(f"\n{len(lines) - bad} / {len(lines)} 个单元格的得分符合期望；"
          f"{len(rows) - len(not_ok)} / {len(rows)} 份提交的状态符合期望（ok；答案写在新单元格里的是 repaired）"
          + (f"（不符合：{'、'.join(not_ok)}）" if not_ok else ""))
    return bad + len(not_ok)


def main() -> int:
    ap = argparse.ArgumentParser(description="在临时课程里演示评分流水线怎样处理各种提交")
    ap.add_argument("--suite", choices=["all", "robustness", "fairness"], default="all",
                    help="稳健性（作弊、崩溃、修复……）、公平性（别的写法、典型错误、做对一半），或两者")
    ap.add_argument("--notebook", default="01_attention_by_hand", help="稳健性的提交用哪个练习 notebook")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=10, help="每个单元格的秒数上限（演示用短一些）")
    ap.add_argument("--keep", type=Path, help="把临时课程留在这个（新的）目录里")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="grading-demo-") as tmp:
        root = args.keep.resolve() if args.keep else Path(tmp)
        course = gf.copy_course(REPO, root / "course")
        zpath = root / "lms_download.zip"
        fixtures = robustness_zip(course, zpath, args.notebook) if args.suite != "fairness" else []
        if args.suite != "robustness":
            fair.build_zip(course, zpath)
            print(f"公平性：{len(fair.SUBMISSIONS)} 份提交（练习 01–05）")
        print(f"→ {zpath.name}；临时课程：{course}\n")
        cmd = [sys.executable, "-m", "lib.grading", "grade", "exercises", "--submissions", str(zpath),
               "--jobs", str(args.jobs), "--timeout", str(args.timeout)]
        env = dict(os.environ, PYTHONPATH=str(course), OMP_NUM_THREADS="1",
                   PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
        proc = subprocess.run(cmd, cwd=course, env=env)
        if proc.returncode:
            print(f"评分命令失败（退出码 {proc.returncode}）")
            return 1
        rows = gf.read_grades(course)
        bad = robustness_table(fixtures, rows) if fixtures else 0
        if args.suite != "robustness":
            bad += fairness_table(course)
        if args.keep:
            print(f"每一行的 detail：{course / 'grades.csv'}；反馈 HTML：{course / 'feedback'}")
        else:
            print("加 --keep DIR 可以留下临时课程，看 grades.csv 的 detail 列和反馈 HTML。")
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
