"""命令行：在课程根目录运行 ``python -m lib.grading grade ASSIGNMENT --submissions PATH``。"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import pipeline, sandbox

EPILOG = """\
例子：
  python -m lib.grading grade exercises --submissions ~/Downloads/submissions.zip --jobs 2
  python -m lib.grading grade exercises --submissions downloads/ --name-regex '^(?P<student_id>\\d+)_(?P<notebook>.+)\\.ipynb$'
  python -m lib.grading feedback exercises     # formgrader 人工评分之后：重写反馈和 grades.csv（不重新执行）
结果：grades.csv（课程根目录）、feedback/学生/作业/*.html、gradebook.db（formgrader 用）。
重新运行同一个命令会续跑：已经执行过且文件没变的提交不会再执行，结果完全相同。
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.grading", description="第 7 讲练习的助教评分流水线",
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grade", help="导入、修复、评分、写反馈和 grades.csv")
    g.add_argument("assignment", help="作业名（release/ 下的文件夹名，例如 exercises）")
    g.add_argument("--submissions", required=True, type=Path, help="LMS 导出的文件夹或 .zip")
    g.add_argument("--jobs", type=int, default=1, help="同时评几份（默认 1）")
    g.add_argument("--timeout", type=float, default=sandbox.Limits.cell_timeout,
                   help=f"每个单元格的秒数上限（默认 {sandbox.Limits.cell_timeout:g}）")
    g.add_argument("--memory-mb", type=int, default=sandbox.Limits.memory_mb, help="每份提交的内存上限（MB）")
    g.add_argument("--max-procs", type=int, default=sandbox.Limits.max_procs, help="每份提交的进程/线程数上限")
    g.add_argument("--name-regex", help="文件名的正则，命名组 student_id 和 notebook（匹配相对路径，/ 分隔）")
    g.add_argument("--roster", type=Path, help="学生名单（每行一个学生编号，或 CSV 的第一列）")
    g.add_argument("--no-sandbox", action="store_true", help="不使用 bubblewrap（不推荐）")
    g.add_argument("--no-feedback", action="store_true", help="不生成反馈 HTML")
    g.add_argument("--no-fork-server", action="store_true",
                   help="每份提交启动全新的 Python 再导入库（慢几倍；用来核对加速前后分数相同）")
    g.add_argument("--quiet", action="store_true", help="不显示进度条和汇总")
    g.add_argument("--checks-module", default="lib.grading.exercise_checks",
                   help="提供 CHECKS 的模块（别的课程复用本流水线时才需要改）")
    g.add_argument("--probes-file", type=Path, default=pipeline.HERE / "probes.py",
                   help="提供 PROBES 的文件，其源码会送进学生的内核（同上）")
    f = sub.add_parser("feedback", help="只根据已有的执行结果和 gradebook 重写反馈与 grades.csv")
    f.add_argument("assignment")
    args = ap.parse_args(argv)
    if args.cmd == "feedback":
        import json
        last = Path(".grading") / args.assignment / "last_run.json"
        if not last.exists():
            ap.error(f"没有找到 {last}：请先运行 grade")
        cfg = json.loads(last.read_text(encoding="utf-8"))
        limits = sandbox.Limits(cell_timeout=cfg["cell_timeout"], memory_mb=cfg["memory_mb"],
                                max_procs=cfg["max_procs"])
        opts = pipeline.Options(assignment=args.assignment, submissions=Path(cfg["submissions"]),
                                jobs=cfg["jobs"], limits=limits, name_regex=cfg["name_regex"],
                                roster=Path(cfg["roster"]) if cfg["roster"] else None,
                                checks_module=cfg["checks_module"], probes_file=Path(cfg["probes_file"]),
                                use_bwrap=cfg["use_bwrap"])
        pipeline.run(opts)
        return 0
    if args.jobs < 1:
        ap.error("--jobs 至少为 1")
    if args.timeout <= 0:
        ap.error("--timeout 必须为正数")
    limits = sandbox.Limits(cell_timeout=args.timeout, memory_mb=args.memory_mb, max_procs=args.max_procs)
    opts = pipeline.Options(assignment=args.assignment, submissions=args.submissions, jobs=args.jobs,
                            limits=limits, name_regex=args.name_regex, roster=args.roster,
                            use_bwrap=False if args.no_sandbox else None, feedback=not args.no_feedback,
                            fork_server=not args.no_fork_server,
                            quiet=args.quiet, checks_module=args.checks_module,
                            probes_file=args.probes_file)
    try:
        pipeline.run(opts)
    except pipeline.collect_mod.InputError as e:
        print(f"错误：{e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
