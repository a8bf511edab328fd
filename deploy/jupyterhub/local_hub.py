"""在本机起一个试用的 JupyterHub（`make hub`），tests/test_hub.py 也用这里的 prepare() 搭同样的环境。

    sudo .venv/bin/python deploy/jupyterhub/local_hub.py [--base /srv/lecture07-try] [--port 8000]

要 root：LocalProcessSpawner 以每个学生自己的系统用户启动服务器。它做的事和正式开课时管理员做的一样：
建系统用户（instructor1、student1..3，已有的不动）和评分组，把课程目录复制到 BASE/course
（评分组可读写、setgid，学生不可读），建交换目录 BASE/exchange（1777），然后用 dummy 认证
（密码见输出）在前台运行 jupyterhub -f deploy/jupyterhub/jupyterhub_config.py。Ctrl+C 停止。
"""
from __future__ import annotations

import argparse
import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
COURSE_PARTS = ("lib", "release", "source", "solutions", "nbgrader_config.py", "pyproject.toml")


def ensure_group(name: str) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        subprocess.run(["groupadd", name], check=True)
        return grp.getgrnam(name).gr_gid


def ensure_user(name: str, home: Path | None = None, groups: tuple[str, ...] = ()) -> pwd.struct_passwd:
    """建系统用户（已有就只补组）。home=None 时用系统默认的 /home/NAME。"""
    try:
        pwd.getpwnam(name)
    except KeyError:
        cmd = ["useradd", "--create-home", "--shell", "/bin/bash", "--user-group"]
        if home is not None:
            cmd += ["--home-dir", str(home)]
        subprocess.run([*cmd, name], check=True)
    for g in groups:
        subprocess.run(["usermod", "--append", "--groups", g, name], check=True)
    entry = pwd.getpwnam(name)
    os.chmod(entry.pw_dir, 0o700)  # 同学之间互相看不到对方的家目录（答案）
    return entry


def make_traversable(*paths: Path) -> list[tuple[Path, int]]:
    """让其他用户能走到这些路径（例如 venv 的 Python 链接到 /root/.pyenv 下）：给缺 o+x 的上级目录加上 o+x。

    返回改动过的 (目录, 原来的权限)，restore_modes() 用它改回去。正式部署时请把课程环境装在
    大家都能读的地方（例如 /opt/lecture07），就不需要这一步。
    """
    changed, seen = [], set()
    for path in paths:
        for p in [*reversed(Path(path).absolute().parents), *reversed(Path(path).resolve().parents)]:
            if p in seen:
                continue
            seen.add(p)
            mode = p.stat().st_mode
            if not mode & stat.S_IXOTH:
                os.chmod(p, mode | stat.S_IXOTH)
                changed.append((p, stat.S_IMODE(mode)))
    return changed


def restore_modes(changed: list[tuple[Path, int]]) -> None:
    for p, mode in reversed(changed):
        os.chmod(p, mode)


def venv_python() -> Path:
    return Path(sys.prefix) / "bin" / "python"


def prepare(base: Path, students: list[str], instructors: list[str], *, homes: Path | None = None,
            graders_group: str = "lecture07-graders", password: str = "lecture07",
            course_id: str = "cs224n-lecture07") -> dict[str, str]:
    """搭好课程目录、交换目录和用户；返回启动 hub 要的环境变量（LECTURE07_HUB_*）。"""
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)
    gid = ensure_group(graders_group)
    for name in instructors:
        ensure_user(name, homes / name if homes else None, (graders_group,))
    for name in students:
        ensure_user(name, homes / name if homes else None)
    owner = pwd.getpwnam(instructors[0]).pw_uid
    # 课程目录：评分组共享（setgid，组可写），其他人不可进（里面有隐藏测试、gradebook 和学生的提交）
    course = base / "course"
    course.mkdir(exist_ok=True)
    for part in COURSE_PARTS:
        src, dst = REPO / part, course / part
        if dst.exists():
            continue
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
        else:
            shutil.copy2(src, dst)
    for dirpath, dirnames, filenames in os.walk(course):
        os.chown(dirpath, owner, gid)
        os.chmod(dirpath, 0o2770)
        for f in filenames:
            os.chown(os.path.join(dirpath, f), owner, gid)
            os.chmod(os.path.join(dirpath, f), 0o660)
    # 学生导入的课程代码：只读的一份 lib/
    lib = base / "lib"
    if not lib.exists():
        shutil.copytree(REPO / "lib", lib, ignore=shutil.ignore_patterns("__pycache__"))
    # nbgrader 的交换目录：全体可写，带粘滞位（nbgrader 自己再建 inbound 2733、outbound 755、feedback 711）
    exchange = base / "exchange"
    exchange.mkdir(exist_ok=True)
    os.chmod(exchange, 0o1777)
    # 这门课在交换目录里的文件夹归评分组（setgid）：哪位助教 collect 都能读到学生的提交
    course_exchange = exchange / course_id
    course_exchange.mkdir(exist_ok=True)
    os.chown(course_exchange, owner, gid)
    os.chmod(course_exchange, 0o2775)
    data = base / "hub"
    data.mkdir(exist_ok=True)
    os.chmod(data, 0o700)
    return {
        "LECTURE07_HUB_COURSE_ID": course_id,
        "LECTURE07_HUB_AUTH": "dummy",
        "LECTURE07_HUB_DUMMY_PASSWORD": password,
        "LECTURE07_HUB_COURSE_ROOT": str(course),
        "LECTURE07_HUB_EXCHANGE": str(exchange),
        "LECTURE07_HUB_LIB": str(lib),
        "LECTURE07_HUB_DATA": str(data),
        "LECTURE07_HUB_VENV": sys.prefix,
        "LECTURE07_HUB_STUDENTS": ",".join(students),
        "LECTURE07_HUB_INSTRUCTORS": ",".join(instructors),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description="在本机起一个试用的 JupyterHub（要 root）")
    ap.add_argument("--base", default="/srv/lecture07-try", help="课程目录、交换目录和 hub 数据放在这里")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--students", default="student1,student2,student3")
    ap.add_argument("--instructors", default="instructor1")
    ap.add_argument("--password", default="lecture07")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("要以 root 运行：hub 要替每个用户（系统用户）启动服务器。例如：sudo make hub", file=sys.stderr)
        return 2
    students, instructors = args.students.split(","), args.instructors.split(",")
    env = prepare(Path(args.base), students, instructors, password=args.password)
    changed = make_traversable(venv_python(), HERE)
    if changed:
        print("临时给这些目录加了 o+x（学生的服务器要走到 venv 的 Python），hub 停止时改回：",
              "、".join(str(p) for p, _ in changed))
    env["LECTURE07_HUB_URL"] = f"http://0.0.0.0:{args.port}"
    print(f"JupyterHub：http://127.0.0.1:{args.port}/  密码都是 {args.password!r}（dummy 认证，只用于试用）")
    print(f"  学生：{'、'.join(students)}；教师：{'、'.join(instructors)}（课程目录 {env['LECTURE07_HUB_COURSE_ROOT']}）")
    print("  教师发布作业：在 hub 的终端里 cd ~/lecture07 && nbgrader release_assignment exercises")
    hub = subprocess.Popen([str(Path(sys.prefix) / "bin" / "jupyterhub"), "-f", str(HERE / "jupyterhub_config.py")],
                           cwd=env["LECTURE07_HUB_DATA"], env={**os.environ, **env})
    try:
        return hub.wait()
    except KeyboardInterrupt:  # Ctrl+C 也送到了 hub（同一个进程组）：等它停掉各用户的服务器
        return hub.wait()
    finally:
        restore_modes(changed)


if __name__ == "__main__":
    sys.exit(main())
