"""学生自己的课程副本（mywork/）、make lab 和 make update。

课程仓库里的文件（notebooks/、release/exercises/ ……）只归 git 管：学生不在上面作答，也不在上面运行。
`make lab` 第一次运行时把各页、练习和它们用到的图片复制到 mywork/（git 忽略它），JupyterLab 只打开这个副本，
所以打开、运行、作答、自动保存都不会改动课程的文件，`git pull` 永远不会因为“本地改动”而失败。

`make update` 取课程的新版本（git pull --ff-only），再把新版本并进 mywork/ 里的每个文件：按单元格三方合并
（lib/notebook_merge.py：nbgrader 单元格按 grade_id，其余按单元格 id），学生的答案、自己加的单元格和没被课程改动的
单元格的运行结果都留着；拿不准的地方两个版本都留、写一句中文说明；被改写的文件先原样备份到 mywork/备份/时间/。
副本里每个文件复制自课程的哪个版本，记在 mywork/.course-version.json 里（合并时的 base）。

    python -m lib.coursework lab [JupyterLab 的参数]   # 即 make lab（conda 用户在课程根目录直接运行这一条）
    python -m lib.coursework lab --ta                  # 即 make lab-ta：助教的 JupyterLab（有 formgrader）
    python -m lib.coursework update                    # 即 make update
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKDIR = "mywork"
STATE_FILE = ".course-version.json"
BACKUPS = "备份"
# 复制进副本的课程文件（相对于课程根目录；副本里的相对位置不变，notebook 之间的链接和徽章图片照样能用）
COURSE_GLOBS = ("notebooks/*.ipynb", "release/exercises/*.ipynb", "assets/*")
PROFILES = {"student": "deploy/jupyterhub/jupyter-config/student", "ta": "deploy/jupyterhub/jupyter-config/grader"}
# make lab 在学生的 profile 上再叠一层（hub 不用）：自己的电脑上没有 nbgrader 的交换服务，Assignment List 只会报英文的
# “Error fetching courses!”，所以连同只有它一项的 Nbgrader 菜单一起关掉；练习在 mywork/release/exercises/ 里直接打开
LOCAL_STUDENT_LAYER = "deploy/jupyterhub/jupyter-config/student-local"
START_PAGE = "notebooks/00_start_here.ipynb"
# JupyterLab 的工作区（开着哪些标签页）按名字分开存：学生的（根目录是 mywork/）和助教的（根目录是课程根目录）同名的话，
# 在一边打开的 notebooks/02… 会在另一边恢复成另一份文件（助教那边就是课程的文件本身）
WORKSPACES = {"student": "lecture07", "ta": "lecture07-ta"}


class UpdateRefused(Exception):
    """make update 不能安全地进行：说明原因和该做什么（中文），什么都没改。"""


def git(root: Path, *args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=check)


def head_commit(root: Path) -> str | None:
    out = git(root, "rev-parse", "HEAD")
    return out.stdout.strip() if out.returncode == 0 else None


def course_files(root: Path) -> list[str]:
    """课程里要复制进副本的文件（相对路径，/ 分隔）。"""
    return sorted({p.relative_to(root).as_posix() for pattern in COURSE_GLOBS for p in root.glob(pattern)
                   if p.is_file()})


def _state(work: Path) -> dict:
    path = work / STATE_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _save_state(work: Path, state: dict) -> None:
    (work / STATE_FILE).write_text(json.dumps(state, ensure_ascii=False, indent=1, sort_keys=True) + "\n",
                                   encoding="utf-8")


def for_this_kernel(nb):
    """把 notebook 的 language_info 换成 make lab 的内核（这个环境的 ipykernel）启动时会写进去的那一份。
    课程里存的只有 {"name": "python"} 或编写时机器的 Python 版本；不一样的话，JupyterLab 一打开就把它改写，
    标签页显示“有改动”，关掉时问要不要保存，自动保存再把它写进去。一样的话，只打开不改就什么都不写。"""
    from ipykernel.ipkernel import IPythonKernel

    nb.metadata["language_info"] = dict(IPythonKernel.language_info)
    return nb


def copy_into_workdir(root: Path, rel: str) -> None:
    """课程文件 rel 复制进副本：notebook 按这个环境的内核写好 language_info，其他文件原样复制。"""
    import nbformat

    dest = root / WORKDIR / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not rel.endswith(".ipynb"):
        shutil.copy2(root / rel, dest)
        return
    nb = for_this_kernel(nbformat.read(root / rel, as_version=4))
    dest.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")


def init(root: Path = REPO_ROOT) -> list[str]:
    """建好副本：课程里有、副本里还没有的文件复制过去（已有的一个都不动）。返回新复制的文件。"""
    work = root / WORKDIR
    first = not work.exists()
    state, commit, copied = _state(work), head_commit(root), []
    for rel in course_files(root):
        if not (work / rel).exists():
            copy_into_workdir(root, rel)
            state[rel] = commit
            copied.append(rel)
    if copied:
        _save_state(work, state)
    if first:
        print(f"第一次运行：把各页和练习复制到了 {WORKDIR}/（你的副本，git 不管它）。"
              "你的答案和运行结果都存在那里；课程的原文件不会被改动。")
    elif copied:
        print(f"课程里有 {len(copied)} 个新文件，复制进了你的副本：{'、'.join(copied)}")
    return copied


def pending_update(root: Path = REPO_ROOT) -> list[str]:
    """副本复制之后，课程（已经拉到本地的版本）又改过的文件：make update 会把它们并进副本。"""
    state = _state(root / WORKDIR)
    changed = []
    for commit in {c for c in state.values() if c}:
        out = git(root, "diff", "--name-only", commit, "HEAD", "--", *(r for r, c in state.items() if c == commit))
        changed += out.stdout.split() if out.returncode == 0 else []
    return sorted(changed)


def lab_command(root: Path, ta: bool = False, extra=()) -> tuple[list[str], dict]:
    """启动 JupyterLab 的命令和环境。学生：课程的学生设置（中文界面、没有新闻弹窗、没有教师工具），根目录是副本，
    打印的网址直接打开 00_start_here；助教：助教的设置（有 formgrader），根目录是课程根目录。
    服务器总在课程根目录运行：nbgrader 的 Validate 在那里找 nbgrader_config.py。"""
    profiles = [str(root / PROFILES["ta"])] if ta else [str(root / LOCAL_STUDENT_LAYER), str(root / PROFILES["student"])]
    config_path = os.pathsep.join([*profiles, *filter(None, [os.environ.get("JUPYTER_CONFIG_PATH")])])
    env = dict(os.environ, JUPYTER_CONFIG_PATH=config_path)
    cmd = [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={root if ta else root / WORKDIR}",
           "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    workspace = f"/lab/workspaces/{WORKSPACES['ta' if ta else 'student']}"
    cmd.append(f"--LabApp.default_url={workspace}" + ("" if ta else f"/tree/{START_PAGE}"))
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # Docker、某些服务器上以 root 运行
    return cmd + list(extra), env


def lab(root: Path = REPO_ROOT, ta: bool = False, extra=()) -> None:
    if not ta:
        init(root)
        later = pending_update(root)
        if later:
            print(f"课程有新版本还没有并进你的副本（{len(later)} 个文件）：运行 make update。")
        print(f"打开的是你的副本 {WORKDIR}/。课程出了新版本时运行 make update：新内容并进来，你的答案留着。")
    cmd, env = lab_command(root, ta, extra)
    os.chdir(root)
    os.execvpe(cmd[0], cmd, env)


# ---------------------------------------------------------------- make update

def _backup(work: Path, rel: str, stamp: str) -> Path:
    dst = work / BACKUPS / stamp / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(work / rel, dst)
    return dst


def rescue_edited_course_files(root: Path, stamp: str) -> list[str]:
    """课程文件里的改动（旧版本的 make lab 直接打开课程文件，学生可能在上面作答过）：备份到 mywork/备份/，
    副本里还没有这个文件时就用它做副本，然后把课程文件还原。改的是别的文件（lib/ 等）时拒绝，什么都不动。"""
    out = git(root, "status", "--porcelain", "--untracked-files=no")
    edited = [line[3:] for line in out.stdout.splitlines() if line.strip()]
    course = set(course_files(root))
    others = [p for p in edited if p not in course]
    if others:
        raise UpdateRefused("你改动了课程本身的这些文件：" + "、".join(others) + "。make update 不动它们，也就没法更新。"
                            "请先把要留的改动复制到别处，再用 git checkout -- 文件名 还原它们，然后重新运行 make update。")
    work = root / WORKDIR
    for rel in edited:
        if not (root / rel).exists():  # 删掉的课程文件：还原就是了
            git(root, "checkout", "--", rel, check=True)
            continue
        saved = work / BACKUPS / stamp / "课程文件里的改动" / rel
        saved.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, saved)
        if not (work / rel).exists():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, work / rel)
            state = _state(work)
            state[rel] = head_commit(root)
            _save_state(work, state)
        git(root, "checkout", "--", rel, check=True)
        print(f"{rel}：你在课程文件上的改动已保存到 {saved.relative_to(root)}，课程文件已还原。")
    return edited


def pull(root: Path) -> tuple[str, str]:
    """git pull --ff-only；返回 (之前的提交, 之后的提交)。"""
    before = head_commit(root)
    out = git(root, "pull", "--ff-only")
    if out.returncode != 0:
        raise UpdateRefused("没能取到课程的新版本（git pull --ff-only 失败）：\n" + (out.stderr or out.stdout).strip()
                            + "\n没有网络时联网后再运行 make update；你的副本没有被改动。")
    return before, head_commit(root)


def _show(root: Path, commit: str | None, rel: str) -> str | None:
    if not commit:
        return None
    out = git(root, "show", f"{commit}:{rel}")
    return out.stdout if out.returncode == 0 else None


def merge_file(root: Path, rel: str, base_commit: str | None, stamp: str) -> str | None:
    """把课程的当前版本并进副本里的 rel；返回一句说明（没有要并的就返回 None）。"""
    import nbformat

    from lib.notebook_merge import merge_notebooks

    work = root / WORKDIR
    theirs_text = (root / rel).read_text(encoding="utf-8") if rel.endswith(".ipynb") else None
    base_text = _show(root, base_commit, rel)
    if rel.endswith(".ipynb") and base_text == theirs_text:
        return None  # 课程没改这个文件
    mine_bytes = (work / rel).read_bytes()
    if not rel.endswith(".ipynb"):  # 图片之类：课程的新版直接替换（学生的旧文件先备份）
        if mine_bytes == (root / rel).read_bytes():
            return None
        _backup(work, rel, stamp)
        shutil.copy2(root / rel, work / rel)
        return "换成了课程的新版"
    base = nbformat.reads(base_text, as_version=4) if base_text else None
    mine = nbformat.reads(mine_bytes.decode("utf-8"), as_version=4)
    merged, report = merge_notebooks(base, mine, nbformat.reads(theirs_text, as_version=4))
    new_text = nbformat.writes(for_this_kernel(merged)) + "\n"
    if new_text.encode("utf-8") == mine_bytes:
        return None
    saved = _backup(work, rel, stamp)
    (work / rel).write_text(new_text, encoding="utf-8")
    note = report.summary()
    return note + (f"（旧的副本：{saved.relative_to(root)}）" if report.both or report.kept else "")


def merge_into_workdir(root: Path, stamp: str) -> list[str]:
    """课程的当前版本并进副本的每个文件；返回每个文件一行的说明。"""
    work, commit = root / WORKDIR, head_commit(root)
    state, lines = _state(work), []
    for rel in course_files(root):
        if not (work / rel).exists():
            copy_into_workdir(root, rel)
            lines.append(f"{rel}：新的一页，复制进了你的副本")
        else:
            note = merge_file(root, rel, state.get(rel), stamp)
            if note:
                lines.append(f"{rel}：{note}")
        state[rel] = commit
    for rel in sorted(set(state) - set(course_files(root))):
        if (work / rel).exists():
            lines.append(f"{rel}：课程里已经没有这个文件了，你的副本留着")
        del state[rel]
    _save_state(work, state)
    return lines


def open_labs(root: Path) -> list[dict]:
    """这台机器上、这个用户开着的 JupyterLab 里，根目录在这个课程里的（jupyter_server 的运行时文件，进程还在的）。"""
    try:
        from jupyter_server.serverapp import list_running_servers
        servers = list(list_running_servers())
    except Exception:  # noqa: BLE001  没装 jupyter_server、运行时目录读不了：当作没有
        return []
    here = Path(root).resolve()
    out = []
    for info in servers:
        top = Path(info.get("root_dir") or info.get("notebook_dir") or "/").resolve()
        if top == here or here in top.parents:
            out.append(info)
    return out


def update(root: Path = REPO_ROOT, force: bool = False) -> int:
    labs = [] if force else open_labs(root)
    if labs:
        where = "、".join(f"{info.get('url', '?')}（进程 {info.get('pid', '?')}）" for info in labs)
        print(f"make update 没有进行：这个课程的 JupyterLab 还开着（{where}）。开着的页面会在自动保存时把并进来的新内容"
              "覆盖掉。先关掉它（JupyterLab 里 文件 → 关闭并停止服务，或者在运行 make lab 的终端里按两次 Ctrl-C），"
              "再运行 make update。确实要现在更新：make update FORCE=1（或 python -m lib.coursework update --force），之后把开着的页面关掉重开。")
        return 1
    if head_commit(root) is None:
        print("这个课程文件夹不是用 git clone 得到的，make update 取不到新版本：请用 README 里的 git clone 命令重新下载，"
              f"再把你的 {WORKDIR}/ 文件夹拷进新的课程文件夹。")
        return 1
    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        rescue_edited_course_files(root, stamp)
        before, after = pull(root)
    except UpdateRefused as err:
        print(f"make update 没有进行：{err}")
        return 1
    print("课程已经是最新版本。" if before == after else f"取到了课程的新版本（{before[:7]} → {after[:7]}）。")
    if not (root / WORKDIR).exists():
        print(f"还没有你的副本：运行 make lab 时会建好 {WORKDIR}/。")
        return 0
    lines = merge_into_workdir(root, stamp)
    print("\n".join(f"  {line}" for line in lines) if lines else "  你的副本不用改。")
    if (root / WORKDIR / BACKUPS / stamp).exists():
        print(f"改写之前的文件原样备份在 {WORKDIR}/{BACKUPS}/{stamp}/。JupyterLab 里开着的页面请关掉重开"
              "（或者 文件 → 从磁盘重新加载）；JupyterLab 问“文件已更改”时点“撤回”（载入新内容），不要点“覆盖”。")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.coursework", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_lab = sub.add_parser("lab", help="建好副本（第一次）并打开 JupyterLab；其余参数交给 JupyterLab")
    p_lab.add_argument("--ta", action="store_true", help="助教的 JupyterLab：课程根目录，有 formgrader")
    sub.add_parser("init", help="只建副本（课程里有、副本里没有的文件复制过去）")
    p_update = sub.add_parser("update", help="取课程的新版本并把它并进副本")
    p_update.add_argument("--force", action="store_true", help="这个课程的 JupyterLab 开着也更新（之后把开着的页面关掉重开）")
    args, extra = parser.parse_known_args(argv)
    if args.command == "lab":
        lab(REPO_ROOT, args.ta, extra)  # 换成 JupyterLab 进程，不返回
    if extra:
        parser.error(f"不认识的参数：{' '.join(extra)}")
    if args.command == "init":
        init(REPO_ROOT)
        return 0
    return update(REPO_ROOT, force=args.force)


if __name__ == "__main__":
    sys.exit(main())
