"""命令行：在课程根目录运行 ``python -m lib.grading grade|feedback|export ASSIGNMENT …``。"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import traceback
from pathlib import Path

from . import export as export_mod
from . import lms, pipeline, sandbox
from .collect import InputError
from .course_lock import CourseBusy, CourseLock

EPILOG = """\
例子：
  python -m lib.grading grade exercises --submissions ~/Downloads/submissions.zip --jobs 2
  python -m lib.grading grade exercises --submissions moodle.zip --roster 名单.xlsx --due "2024-03-01 23:59"
  python -m lib.grading grade exercises --submissions week3.zip --notebooks 03   # 按周发布：评这一周到期的
  python -m lib.grading feedback exercises     # formgrader 人工评分之后：重写反馈和 grades.csv（不重新执行）
  python -m lib.grading export exercises --lms canvas --template 成绩册导出.csv --column "Exercises"
  python -m lib.grading report exercises       # 班级报告：哪些题错得多、错在哪里，哪些提交相似（reports/exercises/）
  python -m lib.grading secret                 # 教师，每学期一次：生成学期密钥（隐藏检查的输入由它决定）
结果：grades.csv（课程根目录）、feedback/学生/作业/*.html、gradebook.db（formgrader 用）、exports/（上传文件）。
重新运行同一个命令会续跑：已经执行过且文件没变的提交不会再执行，结果完全相同。
分批评分：后来的下载（迟交的、重交的）并进之前的结果，grades.csv、反馈和导出总是包括评过的所有人；--fresh 从头开始。
几位助教共用一个课程：grade、feedback 一次只有一个在写（另一个等它结束，--no-wait 时直接退出，退出码 5）；
export、report 可以同时读，只等正在写的那一个。
"""
BUSY_EXIT = 5  # 课程正被另一个命令使用，而命令行加了 --no-wait
SECRET_WITHOUT_SANDBOX = ("课程有学期密钥、却没有 bubblewrap 沙箱（学生的代码能读到密钥）时也评分。默认拒绝：读到密钥就能算出"
                          "这个学期所有的隐藏输入")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m lib.grading", description="第 7 讲练习的助教评分流水线",
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grade", help="导入、修复、评分、写反馈和 grades.csv")
    g.add_argument("assignment", help="作业名（release/ 下的文件夹名，例如 exercises）")
    g.add_argument("--submissions", required=True, type=Path, help="LMS 下载的文件夹或 .zip")
    g.add_argument("--lms", choices=list(lms.LAYOUTS),
                   help="下载的命名方式（默认自动识别）：" + "；".join(f"{k} = {v[0]}" for k, v in lms.LAYOUTS.items()))
    g.add_argument("--name-regex", help="其他命名方式：文件路径的正则，命名组 student_id 和 notebook（/ 分隔）")
    g.add_argument("--roster", type=Path, help="学生名单：CSV（UTF-8/GBK）或 .xlsx；Canvas 成绩册导出、"
                                               "Moodle 评分工作表、Blackboard 成绩中心文件也可以")
    g.add_argument("--roster-id-column", help="名单里哪一列是学号（默认按表头找：学号、Student ID、SIS User ID……）")
    g.add_argument("--due", help="截止时间，例如 \"2024-03-01 23:59\"：不带时区时按课程的时区（pyproject.toml 的 "
                                 "[tool.course] timezone，默认 Asia/Shanghai）理解（默认用 gradebook 里 nbgrader 的 duedate）")
    g.add_argument("--notebooks", help="这次评哪些 notebook，例如 01,02（开头的编号就行；all 是全部）。作业还没截止、"
                                       "或者没有截止时间而课程有学期密钥时，只评点名的和之前评过的：提前交的下一周的 "
                                       "notebook 不评、不写反馈（见 docs/ta_guide.md“按周发布”）")
    g.add_argument("--submitted-at", help="下载里没有 LMS 的提交时间时（学号文件夹、邮件收的作业），这一批的提交时间，"
                                          "例如 \"2024-03-02 08:00\"（按课程的时区理解）：晚于截止时间的算迟交")
    g.add_argument("--fresh", action="store_true",
                   help="从头开始：忘掉之前导入的下载（默认新的下载并进之前的结果，之前评过、这次没有的学生照旧保留）")
    g.add_argument("--jobs", type=int, default=1, help="同时评几份（默认 1）")
    g.add_argument("--timeout", type=float, default=sandbox.Limits.cell_timeout,
                   help=f"每个单元格的秒数上限（默认 {sandbox.Limits.cell_timeout:g}）")
    g.add_argument("--memory-mb", type=int, default=sandbox.Limits.memory_mb, help="每份提交的内存上限（MB）")
    g.add_argument("--max-procs", type=int, default=sandbox.Limits.max_procs, help="每份提交的进程/线程数上限")
    g.add_argument("--no-sandbox", action="store_true", help="不使用 bubblewrap（不推荐）")
    g.add_argument("--secret-without-sandbox", action="store_true", help=SECRET_WITHOUT_SANDBOX)
    g.add_argument("--no-feedback", action="store_true", help="不生成反馈 HTML")
    g.add_argument("--no-fork-server", action="store_true",
                   help="每份提交启动全新的 Python 再导入库（慢几倍；用来核对加速前后分数相同）")
    g.add_argument("--quiet", action="store_true", help="不显示进度条和汇总")
    g.add_argument("--checks-module", default="lib.grading.exercise_checks",
                   help="提供 CHECKS 的模块（别的课程复用本流水线时才需要改）")
    g.add_argument("--probes-file", type=Path, default=pipeline.HERE / "probes.py",
                   help="提供 PROBES 的文件，其源码会送进学生的内核（同上）")
    f = sub.add_parser("feedback", help="formgrader 人工评分之后：用课程里保存的副本重写反馈和 grades.csv")
    f.add_argument("assignment")
    f.add_argument("--quiet", action="store_true")
    f.add_argument("--secret-without-sandbox", action="store_true", help=SECRET_WITHOUT_SANDBOX)
    e = sub.add_parser("export", help="写出上传到 LMS 的成绩文件（和反馈包）")
    e.add_argument("assignment")
    e.add_argument("--lms", required=True, choices=export_mod.LMS_NAMES, help="上传到哪个 LMS；csv = 每个学生一行的总表")
    e.add_argument("--template", type=Path, help="从 LMS 下载的成绩文件（Canvas 成绩册导出、Moodle 评分工作表、"
                                                 "Blackboard 成绩中心 Work Offline 下载），原样保留、只填成绩")
    e.add_argument("--column", help="写进哪一列（Canvas/Blackboard 的作业列名；默认和作业同名）")
    e.add_argument("-o", "--output", type=Path, help="输出文件（默认 exports/作业_LMS.csv）")
    e.add_argument("--comments", action="store_true", help="Moodle：把各 notebook 的得分写进 Feedback comments")
    e.add_argument("--feedback-zip", type=Path, help="同时把反馈 HTML 打包成 LMS 的批量上传格式（Moodle、Canvas）")
    r = sub.add_parser("report", help="班级报告（只读）：题目分析、人工评分进度、相似的提交")
    r.add_argument("assignment")
    r.add_argument("-o", "--output", type=Path, help="输出文件夹（默认 reports/作业/）")
    r.add_argument("--all-notebooks", action="store_true",
                   help="全班都没交的 notebook 也列出来（默认只报告至少一个学生交了的 notebook，总分也只算这些）")
    r.add_argument("--quiet", action="store_true")
    for p in (g, f, e, r):
        p.add_argument("--no-wait", action="store_true",
                       help="课程正被另一个命令使用（例如另一位助教在评分）时不等，直接退出（退出码 5）")
    k = sub.add_parser("secret", help="教师：生成这个课程的学期密钥 .grading/secret（隐藏检查的输入由它决定；每学期一次）")
    k.add_argument("--force", action="store_true", help="换一个新的密钥（学期中间换：已经评过的要重新执行，分数可能变）")
    return ap


def feedback_options(assignment: str, quiet: bool, secret_without_sandbox: bool = False) -> pipeline.Options:
    """feedback：上次 grade 的设置（限额、并行数、检查模块）+ 上次导入时存的副本（不读下载路径）。"""
    ws = Path(".grading") / assignment
    try:
        cfg = json.loads((ws / "last_run.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        raise InputError(f"作业 {assignment} 在这个课程里还没有评过（没有 {ws / 'last_run.json'}）：请先运行 grade"
                         f"（python -m lib.grading grade {assignment} --submissions 下载的文件）") from None
    limits = sandbox.Limits(cell_timeout=cfg["cell_timeout"], memory_mb=cfg["memory_mb"], max_procs=cfg["max_procs"])
    return pipeline.Options(assignment=assignment, submissions=ws / "imported", jobs=cfg["jobs"], limits=limits,
                            checks_module=cfg["checks_module"], probes_file=Path(cfg["probes_file"]),
                            use_bwrap=cfg["use_bwrap"], reuse_import=True, quiet=quiet,
                            secret_without_sandbox=secret_without_sandbox)


def check_course_root_only() -> None:
    if not (Path.cwd() / "nbgrader_config.py").exists():
        raise InputError(f"当前目录 {Path.cwd()} 不是课程根目录（这里没有 nbgrader_config.py）。请先 cd 到课程根目录再运行。")


def check_course_root(assignment: str) -> None:
    """所有命令都要在课程根目录运行：不在时说清楚是哪里不对，而不是让后面的步骤报“请先运行 grade”。"""
    here = Path.cwd()
    if not (here / "nbgrader_config.py").exists():
        up = next((p for p in here.parents if (p / "nbgrader_config.py").exists()), None)
        raise InputError(f"当前目录 {here} 不是课程根目录（这里没有 nbgrader_config.py）。请先 cd 到课程根目录"
                         + (f"（看起来是 {up}）" if up else "（有 nbgrader_config.py 和 release/ 的那个文件夹）")
                         + " 再运行。")
    if not (here / "release" / assignment).is_dir():
        have = sorted(p.name for p in (here / "release").glob("*") if p.is_dir()) if (here / "release").is_dir() else []
        raise InputError(f"课程里没有作业 {assignment!r}（release/ 下" + (f"有：{'、'.join(have)}）" if have else
                                                                         "什么也没有：先运行 make release）"))


def make_secret(force: bool) -> int:
    from . import hidden_inputs
    try:
        path = hidden_inputs.create(Path("."), force=force)
    except FileExistsError as e:
        raise InputError(f"这个课程已经有学期密钥 {e}：隐藏检查的输入由它决定，学期中间不要换（换了之后已经评过的"
                         "要重新执行，分数可能变）。确实要换，加 --force。") from None
    print(f"已生成学期密钥 {path}（权限 0640：评分组可读，git 不跟踪）。之后的 grade 用它生成隐藏检查的输入；"
          "请备份这个文件，整个学期都用它。")
    return 0


def share_with_the_group(root: Path = Path(".")) -> bool:
    """课程目录是几位助教共用的（组可写，或者目录带 setgid）时，这个进程写出的文件也要组可写：umask 去掉组的
    写权限位。JupyterHub 里助教的服务器本来就是 umask 002；ssh 登录的默认 umask 022 会让另一位助教改不了
    grades.csv、.grading/ 和 submitted/。只对这个进程起作用；返回有没有改。"""
    mode = root.stat().st_mode
    if not (mode & 0o020 or mode & 0o2000):
        return False
    old = os.umask(0)
    os.umask(old & ~0o060)
    return bool(old & 0o060)


def run(args, ap) -> int:
    share_with_the_group()
    if args.cmd == "secret":
        check_course_root_only()
        return make_secret(args.force)
    if args.cmd == "grade":
        if args.jobs < 1:
            ap.error("--jobs 至少为 1")
        if args.timeout <= 0:
            ap.error("--timeout 必须为正数")
    check_course_root(args.assignment)
    say = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    reading = args.cmd in ("report", "export")  # 只读 gradebook：共享锁，几个读可以同时进行，只等写的
    with CourseLock(Path("."), f"{args.cmd} {args.assignment}", shared=reading, wait=not args.no_wait, say=say):
        return run_locked(args)


def run_locked(args) -> int:
    if args.cmd == "report":
        from . import class_report
        try:
            class_report.run(Path("."), args.assignment, args.output, quiet=args.quiet, all_notebooks=args.all_notebooks)
        except FileNotFoundError as e:
            raise InputError(str(e)) from None
        return 0
    if args.cmd == "export":
        export_mod.export(Path("."), args.assignment, args.lms, args.template, args.column, args.output,
                          args.comments, args.feedback_zip)
        return 0
    if args.cmd == "feedback":
        rows = pipeline.run(feedback_options(args.assignment, args.quiet, args.secret_without_sandbox))
    else:
        limits = sandbox.Limits(cell_timeout=args.timeout, memory_mb=args.memory_mb, max_procs=args.max_procs)
        opts = pipeline.Options(assignment=args.assignment, submissions=args.submissions, jobs=args.jobs,
                                limits=limits, name_regex=args.name_regex, roster=args.roster,
                                roster_id_column=args.roster_id_column, lms=args.lms, due=args.due,
                                notebooks=args.notebooks,
                                submitted_at=args.submitted_at,
                                use_bwrap=False if args.no_sandbox else None, feedback=not args.no_feedback,
                                fork_server=not args.no_fork_server, quiet=args.quiet, fresh=args.fresh,
                                secret_without_sandbox=args.secret_without_sandbox,
                                checks_module=args.checks_module, probes_file=args.probes_file)
        rows = pipeline.run(opts)
    errors = [r for r in rows if r.status == "error"]
    if errors:
        print(f"错误：{len(errors)} 份提交这次没有评分，原因在评分这边，不是学生的问题（grades.csv 里 status 为 error，"
              f"这次没有记分；写 gradebook 失败的保留了上次的分数）。第一份：{errors[0].detail}\n"
              "修好之后再运行同一个命令：已经评完的不会重来，只评这些。", file=sys.stderr)
        return 4
    if not any(r.score is not None and r.status != "missing" for r in rows):
        print("错误：没有一份提交能评分（全部进了隔离区、没有提交，或者这次不评：见上面“没有评”一行）。grades.csv 的 "
              "detail 列写了每个文件的原因；命名方式不对时可以用 --lms 或 --name-regex 指定；还没截止的 notebook 用 "
              "--notebooks 点名。", file=sys.stderr)
        return 3
    return 0


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        return run(args, ap)
    except InputError as e:
        print(f"错误：{e}", file=sys.stderr)
        return 2
    except CourseBusy as e:
        print(f"错误：{e}", file=sys.stderr)
        return BUSY_EXIT
    except KeyboardInterrupt:
        print("已中断。再运行同一个命令会接着评：已经评完的不会重来，只评剩下的。", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 —— 助教看不到 traceback：写进日志，终端只说一句
        log = Path(".grading") / "error.log"
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(f"--- {dt.datetime.now().isoformat()} {sys.argv}\n{traceback.format_exc()}\n")
        except OSError:
            log = None
        print(f"内部错误：{type(e).__name__}: {e}。" + (f"完整信息在 {log}，" if log else "")
              + "请连同这个文件报告给课程维护者。", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
