"""评分速度的基准（按需运行，不在默认测试里）：同一批提交（默认 40 个学生 × 作业的 6 个 notebook = 240 份，
正确、部分答错、空白、带打印和警告的正确答案轮换），在同一次运行里比较

  1. 普通的 `nbgrader autograde`（串行，nbgrader #174；默认只跑 1 次，240 份约 9 分钟）；
  2. 本流水线的默认命令 `python -m lib.grading grade ... --jobs 2`（写反馈）；
  3. 同上加 --no-feedback（autograde 也不写反馈，这是同样工作量的比较）；
  4. 同上加 --no-fork-server（关掉加速：每份提交启动全新的 Python 再导入库），并核对两者的分数和状态完全相同；
  5. 没有改动时的重跑：前 10 个学生（60 份）评完之后再运行同一条命令。

2、3、5 各重复 --repeat 次取中位数（这台虚拟机上同一条命令的用时能差 10%），并打印每次的用时。
每次运行后都核对每一份的分数和状态，不对就退出：不然计时没有意义。
目标（issue 15）：2 个 job 比普通 nbgrader 快 ≥ 5 倍；没有改动的 60 份重跑 < 10 秒。

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python tests/benchmarks/bench_grading.py [--students 40] [--repeat 3]

一切都在临时课程目录里进行，不碰仓库。机器忙的时候数字不可信（别的进程占着 CPU 时比值也会变）。
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

RERUN_STUDENTS = 10


def submissions(course: Path, n_students: int) -> list[tuple[str, str, bytes, float]]:
    """(学号, notebook, 文件内容, 期望的自动评分分数)。每个学生交全部 notebook；种类按学生和 notebook 轮换：
    正确、部分答错、空白、带打印和警告的正确答案。只有文字题的 notebook（06）轮换正确和空白
    （自动评分部分都是 0 分，文字题由助教在 formgrader 里打分）。"""
    names = [p.stem for p in sorted((course / "release" / "exercises").glob("*.ipynb"))]
    kinds = ["s01", "s03", "s02", "s04"]
    fixtures = {}
    for name in names:
        rel = gf.load(course / "release" / "exercises" / f"{name}.ipynb")
        sol = gf.load(course / "solutions" / "exercises" / f"{name}.ipynb")
        if any(gf.is_solution(c) and c["cell_type"] == "code" for c in rel["cells"]):
            fixtures[name] = {f["name"][:3]: (f["data"], f["expect_score"])
                              for f in gf.build_fixtures(rel, sol, name, course, "exercises", True)}
        else:
            full = (gf.dump(gf.answered(rel, sol)), 0.0)
            fixtures[name] = {"s01": full, "s03": full, "s02": (gf.dump(rel), 0.0), "s04": full}
    return [(f"student{s:03d}", name, *fixtures[name][kinds[(s + j) % len(kinds)]])
            for s in range(n_students) for j, name in enumerate(names)]


def write_zip(path: Path, subs) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for sid, nb, data, _ in subs:
            zf.writestr(f"{sid}/{nb}.ipynb", data)


def grades(course: Path) -> dict:
    return {(r["student_id"], r["notebook"]): r for r in gf.read_grades(course)}


def check_ours(course: Path, subs, label: str) -> dict:
    """确认每一份都真的评了、分数和状态都对；返回 grades.csv 的行。"""
    rows = grades(course)
    bad = [(sid, nb, rows.get((sid, nb), {}).get("score"), want, rows.get((sid, nb), {}).get("status"))
           for sid, nb, _, want in subs
           if (sid, nb) not in rows or float(rows[(sid, nb)]["score"] or -1) != want
           or rows[(sid, nb)]["status"] != "ok"]
    if bad or len(rows) != len(subs):
        raise SystemExit(f"{label}：{len(bad)} 份的分数或状态不对（共 {len(rows)} 行），例如 {bad[:3]}")
    return rows


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
    if "模板进程不能用" in p.stderr:  # 加速没有生效时计时没有意义
        raise SystemExit(p.stderr[-2000:])
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--students", type=int, default=40, help="学生数（每人交作业的全部 6 个 notebook）")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="本流水线每种运行重复几次（取中位数）")
    ap.add_argument("--skip-nbgrader", action="store_true", help="不跑普通 nbgrader（开发时用；不打印比值）")
    args = ap.parse_args()
    py = sys.executable
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", CI="true",
               PATH=str(Path(py).parent) + os.pathsep + os.environ.get("PATH", ""))
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        root = Path(tmp)
        course = gf.copy_course(REPO, root / "course")
        subs = submissions(course, args.students)
        n = len(subs)
        zpath, zsmall = root / "subs.zip", root / "subs_small.zip"
        write_zip(zpath, subs)
        small = [s for s in subs if int(s[0][len("student"):]) < RERUN_STUDENTS]
        write_zip(zsmall, small)
        results: dict = {}
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
        grade = [py, "-m", "lib.grading", "grade", "exercises", "--jobs", str(args.jobs), "--quiet", "--submissions"]
        ours, ours_nofb = f"lib.grading --jobs {args.jobs}（含反馈）", f"lib.grading --jobs {args.jobs} --no-feedback"
        for _ in range(args.repeat):  # 两种交替运行，机器负载的变化对两者影响相同
            for label, extra in ((ours, []), (ours_nofb, ["--no-feedback"])):
                clean(course)
                results.setdefault(label, []).append(timed(grade + [str(zpath)] + extra, course, env))
                fast_rows = check_ours(course, subs, label)
        label = f"lib.grading --jobs {args.jobs} --no-feedback --no-fork-server"
        clean(course)
        results[label] = [timed(grade + [str(zpath), "--no-feedback", "--no-fork-server"], course, env)]
        slow_rows = check_ours(course, subs, label)
        key = ("score", "max_score", "status")
        differ = [k for k in fast_rows if [fast_rows[k][c] for c in key] != [slow_rows[k][c] for c in key]]
        # 没有改动的重跑：先评一遍前 RERUN_STUDENTS 个学生，再重复运行同一条命令
        clean(course)
        timed(grade + [str(zsmall)], course, env)
        rerun = f"重跑（{len(small)} 份，没有改动）"
        results[rerun] = [timed(grade + [str(zsmall)], course, env) for _ in range(args.repeat)]
        check_ours(course, small, rerun)
    print(f"\n{args.students} 个学生 × {n // args.students} 个 notebook = {n} 份提交，{os.cpu_count()} 个 CPU 核；"
          "多次运行的取中位数")
    print(f"{'方法':52s} {'总用时 s':>9s} {'每份 s':>8s}  各次用时 s")
    for k, v in results.items():
        per = len(small) if k == rerun else n
        print(f"{k:52s} {median(v):9.1f} {median(v) / per:8.3f}  " + " ".join(f"{x:.1f}" for x in v))
    med = {k: median(v) for k, v in results.items()}
    print(f"\n加速（模板进程）开与关：分数和状态{'完全相同' if not differ else f'有 {len(differ)} 份不同，例如 {differ[:3]}'}；"
          f"关掉时慢 {med[label] / med[ours_nofb]:.2f} 倍")
    print(f"没有改动的重跑：{len(small)} 份 {med[rerun]:.1f} 秒（目标 < 10 秒）")
    if "nbgrader autograde" in med:
        nbg = med["nbgrader autograde"]
        print(f"比普通 nbgrader autograde 快：默认命令（含反馈）{nbg / med[ours]:.2f} 倍，"
              f"--no-feedback {nbg / med[ours_nofb]:.2f} 倍（目标 ≥ 5 倍）")
    if differ:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
