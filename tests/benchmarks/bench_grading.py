"""评分速度的基准（按需运行，不在默认测试里）：同样 40 份合成提交，

  1. 普通的 `nbgrader autograde`（串行，nbgrader #174）；
  2. 本流水线 `python -m lib.grading grade`，--jobs 1；
  3. 本流水线，--jobs 2；

并排打印总用时、每份用时和比值。目标：2 个 job 的吞吐量 ≥ 1 个 job 的 1.8 倍，且每份不慢于 nbgrader。
为了公平，流水线这里不生成反馈（--no-feedback），因为 autograde 也不生成；另外单独报告带反馈的用时。

“一份提交”是一个学生的一个 notebook。默认（--notebook all）40 份轮流取自作业里有自动评分的 5 个 notebook
（01–05），像真实的 LMS 下载一样按 学号/NOTEBOOK.ipynb 存放（8 个学生）：三个只用 numpy，两个导入 torch。
--notebook 01_attention_by_hand 只用最轻的那个 notebook：每份只要零点几秒，测到的主要是固定开销
（导入 nbgrader、建 gradebook、写分数），2 个 job 的加速比因此更低。两种都值得看。

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python tests/benchmarks/bench_grading.py [--n 40] [--notebook all|NAME] [--repeat 3]

一切都在临时课程目录里进行，不碰仓库。机器忙的时候数字不可信。
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
import grading_fixtures as gf  # noqa: E402


def submissions(course: Path, notebook: str, n: int) -> list[tuple[str, str, bytes, float]]:
    """(学号, notebook, 文件内容, 期望分数)。种类轮换：正确、部分答错、空白、带打印和警告的正确答案。"""
    if notebook == "all":  # 有自动评分单元格的 notebook（06 只有文字题，由助教在 formgrader 里打分）
        names = [p.stem for p in sorted((course / "release" / "exercises").glob("*.ipynb"))
                 if gf.test_points(gf.load(p))]
    else:
        names = [notebook]
    kinds = ["s01", "s03", "s02", "s04"]
    fixtures = {}
    for name in names:
        rel = gf.load(course / "release" / "exercises" / f"{name}.ipynb")
        sol = gf.load(course / "solutions" / "exercises" / f"{name}.ipynb")
        fixtures[name] = {f["name"][:3]: (f["data"], f["expect_score"])
                          for f in gf.build_fixtures(rel, sol, name, course, "exercises", True)}
    out = []
    for i in range(n):
        name = names[i % len(names)]
        data, want = fixtures[name][kinds[(i // len(names) + i) % len(kinds)]]
        out.append((f"student{i // len(names):03d}", name, data, want))
    return out


def check_ours(course: Path, subs, label: str) -> None:
    """确认每一份都真的评了、分数对：不然计时没有意义。"""
    import csv
    rows = {(r["student_id"], r["notebook"]): r for r in gf.read_grades(course)}
    bad = [(sid, nb, rows.get((sid, nb), {}).get("score"), want, rows.get((sid, nb), {}).get("status"))
           for sid, nb, _, want in subs
           if (sid, nb) not in rows or float(rows[(sid, nb)]["score"] or -1) != want
           or rows[(sid, nb)]["status"] != "ok"]
    if bad:
        raise SystemExit(f"{label}：{len(bad)} 份的分数或状态不对，例如 {bad[:3]}")


def check_nbgrader(course: Path, subs) -> None:
    sys.path.insert(0, str(REPO))
    from lib.grading.gradebook_io import _patch_alembic
    from nbgrader.api import Gradebook
    _patch_alembic()
    bad = []
    with Gradebook("sqlite:///" + str(course / "gradebook.db")) as gb:
        for sid, nb, _, want in subs:
            sn = gb.find_submission_notebook(nb, "exercises", sid)
            if abs(sn.score - want) > 1e-9:
                bad.append((sid, nb, sn.score, want))
    if bad:
        print(f"注意：普通 nbgrader 有 {len(bad)} 份分数和期望不同，例如 {bad[:3]}")


def clean(course: Path) -> None:
    for d in ("submitted", "autograded", "feedback", ".grading"):
        shutil.rmtree(course / d, ignore_errors=True)
    for f in ("gradebook.db", "grades.csv"):
        (course / f).unlink(missing_ok=True)


def timed(cmd, cwd, env) -> float:
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t
    if p.returncode:
        print(p.stdout[-2000:], p.stderr[-3000:])
        raise SystemExit(f"失败：{' '.join(map(str, cmd))}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--notebook", default="all", help="all（默认，轮流取作业的全部 notebook）或一个 notebook 名")
    ap.add_argument("--repeat", type=int, default=3, help="1 个 job 和 2 个 job 各运行几次（取中位数）")
    ap.add_argument("--skip-nbgrader", action="store_true")
    args = ap.parse_args()
    py = sys.executable
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", CI="true",
               PATH=str(Path(py).parent) + os.pathsep + os.environ.get("PATH", ""))
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        root = Path(tmp)
        course = gf.copy_course(REPO, root / "course")
        subs = submissions(course, args.notebook, args.n)
        zpath = root / "subs.zip"
        with zipfile.ZipFile(zpath, "w") as zf:
            for sid, nb, data, _ in subs:
                zf.writestr(f"{sid}/{nb}.ipynb", data)
        results = {}
        if not args.skip_nbgrader:
            clean(course)
            # nbgrader 需要作业在 gradebook 里：用它自己的命令（在临时课程里重新生成 release）
            timed([py, "-m", "nbgrader", "generate_assignment", "exercises", "--force", "--log-level=ERROR"],
                  course, env)
            for sid, nb, data, _ in subs:
                d = course / "submitted" / sid / "exercises"
                d.mkdir(parents=True, exist_ok=True)
                (d / f"{nb}.ipynb").write_bytes(data)
            results["nbgrader autograde"] = [timed(
                [py, "-m", "nbgrader", "autograde", "exercises", "--create", "--log-level=ERROR"], course, env)]
            check_nbgrader(course, subs)
        # 1 个 job 和 2 个 job 交替重复 --repeat 次、取中位数：这台虚拟机上同一条命令的用时能差 10%
        runs = [(1, False), (2, False)] * args.repeat + [(2, True)]
        for jobs, fb in runs:
            clean(course)
            cmd = [py, "-m", "lib.grading", "grade", "exercises", "--submissions", str(zpath), "--jobs", str(jobs),
                   "--quiet"] + ([] if fb else ["--no-feedback"])
            label = f"lib.grading --jobs {jobs}" + ("（含反馈）" if fb else "")
            results.setdefault(label, []).append(timed(cmd, course, env))
            check_ours(course, subs, label)
    n = args.n
    what = "轮流取自全部 notebook" if args.notebook == "all" else args.notebook
    print(f"\n{n} 份提交（{what}，{len({s[0] for s in subs})} 个学生），{os.cpu_count()} 个 CPU 核；"
          f"多次运行的取中位数")
    print(f"{'方法':28s} {'总用时 s':>9s} {'每份 s':>8s} {'份/分钟':>8s}  各次用时 s")
    for k, v in results.items():
        print(f"{k:28s} {median(v):9.1f} {median(v) / n:8.2f} {60 * n / median(v):8.1f}  "
              + " ".join(f"{x:.1f}" for x in v))
    results = {k: median(v) for k, v in results.items()}
    one, two = results["lib.grading --jobs 1"], results["lib.grading --jobs 2"]
    print(f"\n2 个 job / 1 个 job 的吞吐量比：{one / two:.2f}x（目标 ≥ 1.8x）")
    if "nbgrader autograde" in results:
        nbg = results["nbgrader autograde"]
        print(f"每份用时：nbgrader {nbg / n:.2f} s，本流水线 1 job {one / n:.2f} s → 比值 {nbg / one:.2f}x"
              f"（目标 ≥ 1.0x）；2 job {two / n:.2f} s → {nbg / two:.2f}x")


if __name__ == "__main__":
    main()
