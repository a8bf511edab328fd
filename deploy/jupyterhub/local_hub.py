"""在本机起一个试用的 JupyterHub（`make hub`），tests/test_hub.py 也用这里的 prepare() 搭同样的环境。

    sudo .venv/bin/python deploy/jupyterhub/local_hub.py [--base /srv/lecture07-try] [--port 8000] [--public]
    sudo .venv/bin/python deploy/jupyterhub/local_hub.py --clean      # 删掉试用建的用户、组、BASE 和 cgroup（make hub-clean）

要 root：LocalProcessSpawner 以每个学生自己的系统用户启动服务器。它做的事和正式开课时管理员做的一样：
建系统用户（instructor1、student1..3，已有的不动）和评分组，把课程目录复制到 BASE/course
（评分组可读写、setgid，学生不可读），建交换服务 ngshare 的系统用户 lecture07-ngshare 和它的数据目录
BASE/ngshare（只属于它，700），然后用 dummy 认证（密码见输出）在前台运行
jupyterhub -f deploy/jupyterhub/jupyterhub_config.py（hub 连同 ngshare 和名单同步服务一起启动）。Ctrl+C 停止。

默认只监听 127.0.0.1（密码是公开的、学生有终端）；--public（或 LECTURE07_HUB_PUBLIC=1）才监听 0.0.0.0。
运行期间仓库里的 .git、source/、solutions/、tests/ 去掉 other 的权限（学生的服务器要走进仓库的 .venv，
但不能读到答案和隐藏测试），停止时改回。已有的系统用户一概不改（不改家目录权限、不加组）。
"""
from __future__ import annotations

import argparse
import grp
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
COURSE_PARTS = ("lib", "release", "source", "solutions", "nbgrader_config.py", "pyproject.toml")
# 学生绝不能读到的：git 历史（git show HEAD:solutions/...）、教师版、答案、测试里的参考答案、学生数据
PRIVATE_PARTS = (".git", "source", "solutions", "tests", "submitted", "autograded", "feedback", "gradebook.db",
                 ".grading", "grades.csv", "exports")
CREATED = "created-by-local-hub.txt"  # BASE 下：试用时新建的用户和组，--clean 只删这些


def ensure_group(name: str, created: list[str] | None = None) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        subprocess.run(["groupadd", name], check=True)
        if created is not None:
            created.append(f"group {name}")
        return grp.getgrnam(name).gr_gid


def ensure_service_user(name: str, created: list[str] | None = None) -> pwd.struct_passwd:
    """交换服务 ngshare 的系统用户：没有家目录、不能登录；已有的不动。"""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                    "--shell", "/usr/sbin/nologin", "--user-group", name], check=True)
    if created is not None:
        created.append(f"service {name}")
    return pwd.getpwnam(name)


def ensure_user(name: str, home: Path | None = None, groups: tuple[str, ...] = (),
                created: list[str] | None = None, lib: Path | None = None) -> pwd.struct_passwd:
    """建系统用户。已有的用户一概不动（不改家目录权限、不加组），只在缺组时提示。home=None 时用 /home/NAME。"""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        pass
    else:
        missing = [g for g in groups if name not in grp.getgrnam(g).gr_mem and grp.getgrnam(g).gr_gid != entry.pw_gid]
        if missing:
            print(f"注意：已有的用户 {name} 不在组 {'、'.join(missing)} 里；local_hub 不改已有的用户，"
                  f"需要时请自己运行 usermod --append --groups {','.join(missing)} {name}", file=sys.stderr)
        return entry
    cmd = ["useradd", "--create-home", "--shell", "/bin/bash", "--user-group"]
    if home is not None:
        cmd += ["--home-dir", str(home)]
    if groups:
        cmd += ["--groups", ",".join(groups)]
    subprocess.run([*cmd, name], check=True)
    if created is not None:
        created.append(f"user {name}")
    entry = pwd.getpwnam(name)
    os.chmod(entry.pw_dir, 0o700)  # 同学之间互相看不到对方的家目录（答案）
    if lib is not None:  # 建账号时就有 ~/lib（不用等第一次登录；hub 启动服务器时也会补上）
        link = Path(entry.pw_dir) / "lib"
        if not link.exists() and not link.is_symlink():
            os.symlink(lib, link)
            os.lchown(link, entry.pw_uid, entry.pw_gid)
    return entry


def hide_private(repo: Path = REPO) -> list[tuple[Path, int]]:
    """去掉仓库里 PRIVATE_PARTS 的 other 权限（不递归：进不了顶层就读不到里面）。返回改动，restore_modes() 改回。

    make_traversable() 给仓库的上级目录加了 o+x，学生就能走进仓库；没有这一步，git 克隆的默认权限（755/644）
    让学生读到 solutions/、source/ 的隐藏测试和 .git（git show HEAD:solutions/...）。
    """
    changed = []
    for part in PRIVATE_PARTS:
        p = repo / part
        if not p.exists() or p.is_symlink():
            continue
        mode = stat.S_IMODE(p.stat().st_mode)
        if mode & 0o007:
            os.chmod(p, mode & ~0o007)
            changed.append((p, mode))
    return changed


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
            course_id: str = "cs224n-lecture07", ngshare_user: str = "lecture07-ngshare") -> dict[str, str]:
    """搭好课程目录、交换服务的数据目录和用户；返回启动 hub 要的环境变量（LECTURE07_HUB_*）。"""
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)
    lib = base / "lib"
    created: list[str] = []
    try:
        gid = ensure_group(graders_group, created)
        for name in instructors:
            ensure_user(name, homes / name if homes else None, (graders_group,), created, lib)
        for name in students:
            ensure_user(name, homes / name if homes else None, (), created, lib)
        service = ensure_service_user(ngshare_user, created)
    finally:
        if created:
            with open(base / CREATED, "a", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in created)
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
    # gradebook.db 先建好（空文件就是空的 SQLite 库），组可写：SQLite 新建库文件固定用 0644、不看 umask，
    # 让第一位助教来建，别的助教就写不进去；日志文件（-journal）沿用库文件的权限
    gradebook = course / "gradebook.db"
    if not gradebook.exists():
        gradebook.touch()
        os.chown(gradebook, owner, gid)
        os.chmod(gradebook, 0o660)
    # 学生导入的课程代码：只读的一份 lib/
    if not lib.exists():
        shutil.copytree(REPO / "lib", lib, ignore=shutil.ignore_patterns("__pycache__"))
    # 交换服务 ngshare 的数据（SQLite 数据库 + 发布的作业、提交、反馈）：只属于它的系统用户，谁的服务器都不挂它
    ngshare = base / "ngshare"
    ngshare.mkdir(exist_ok=True)
    os.chown(ngshare, service.pw_uid, service.pw_gid)
    os.chmod(ngshare, 0o700)
    data = base / "hub"
    data.mkdir(exist_ok=True)
    os.chmod(data, 0o700)
    return {
        "LECTURE07_HUB_COURSE_ID": course_id,
        "LECTURE07_HUB_AUTH": "dummy",
        "LECTURE07_HUB_DUMMY_PASSWORD": password,
        "LECTURE07_HUB_COURSE_ROOT": str(course),
        "LECTURE07_HUB_NGSHARE_USER": ngshare_user,
        "LECTURE07_HUB_NGSHARE_DATA": str(ngshare),
        "LECTURE07_HUB_LIB": str(lib),
        "LECTURE07_HUB_DATA": str(data),
        "LECTURE07_HUB_VENV": sys.prefix,
        "LECTURE07_HUB_STUDENTS": ",".join(students),
        "LECTURE07_HUB_INSTRUCTORS": ",".join(instructors),
    }


def clean(base: Path) -> int:
    """删掉试用时 local_hub 新建的用户（连同家目录）、组、BASE 和 hub 的 cgroup；已有的用户不动。"""
    record = base / CREATED
    lines = record.read_text(encoding="utf-8").split() if record.exists() else []
    entries = list(zip(lines[::2], lines[1::2]))
    for kind, name in entries:
        if kind == "user":
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)  # 这个用户的进程（按 uid）
            r = subprocess.run(["userdel", "--remove", name], capture_output=True, text=True)
            print(f"删除用户 {name}：{'好' if r.returncode == 0 else r.stderr.strip()}")
        elif kind == "service":  # ngshare 的系统用户：没有家目录
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
            r = subprocess.run(["userdel", name], capture_output=True, text=True)
            print(f"删除系统用户 {name}：{'好' if r.returncode == 0 else r.stderr.strip()}")
    for kind, name in entries:
        if kind == "group":
            r = subprocess.run(["groupdel", name], capture_output=True, text=True)
            print(f"删除组 {name}：{'好' if r.returncode == 0 else r.stderr.strip()}")
    for root in (Path("/sys/fs/cgroup"), *Path("/sys/fs/cgroup").glob("*")):
        cg = root / "lecture07"
        if cg.is_dir():
            for child in sorted(cg.glob("*/"), reverse=True):
                try:
                    child.rmdir()
                except OSError as e:
                    print(f"cgroup {child} 没删掉：{e}", file=sys.stderr)
            try:
                cg.rmdir()
                print(f"删除 cgroup {cg}")
            except OSError as e:
                print(f"cgroup {cg} 没删掉：{e}", file=sys.stderr)
    if base.exists():
        shutil.rmtree(base)
        print(f"删除 {base}")
    if not entries:
        print(f"{record} 里没有记录：没有删用户和组（只删 local_hub 自己建的）")
    return 0


def user_names(text: str, option: str) -> list[str]:
    """逗号分开的用户名；不像 Linux 用户名的（例如把人数 3 当成了用户名）报错，不建出叫“3”的系统用户。"""
    names = [n.strip() for n in text.split(",")]
    bad = [n for n in names if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", n)]
    if bad:
        raise ValueError(f"{option} 要的是逗号分开的用户名（例如 {option} student1,student2,student3），不是人数："
                         f"{'、'.join(repr(n) for n in bad)} 不能当用户名（要以小写字母开头，只含小写字母、数字、_ 和 -）")
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description="在本机起一个试用的 JupyterHub（要 root）")
    ap.add_argument("--base", default="/srv/lecture07-try", help="课程目录、交换服务的数据和 hub 数据放在这里")
    ap.add_argument("--port", type=int, default=8000, help="hub 的端口（默认 8000）")
    ap.add_argument("--students", default="student1,student2,student3",
                    help="学生的用户名，逗号分开（不是人数）；没有的系统用户会建出来，--clean 删掉")
    ap.add_argument("--instructors", default="instructor1", help="教师和助教的用户名，逗号分开（不是人数）")
    ap.add_argument("--password", default="lecture07", help="所有试用账号共用的密码（dummy 认证）")
    ap.add_argument("--public", action="store_true", default=os.environ.get("LECTURE07_HUB_PUBLIC") == "1",
                    help="监听 0.0.0.0（别的机器也能连上）；默认只监听 127.0.0.1。也可以 LECTURE07_HUB_PUBLIC=1")
    ap.add_argument("--clean", action="store_true", help="删掉试用建的用户、组、BASE 目录和 cgroup，然后退出")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("要以 root 运行：hub 要替每个用户（系统用户）启动服务器。例如：sudo make hub", file=sys.stderr)
        return 2
    if args.clean:
        return clean(Path(args.base))
    try:
        students, instructors = user_names(args.students, "--students"), user_names(args.instructors, "--instructors")
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    venv = Path(sys.prefix).resolve()
    if REPO.resolve() not in venv.parents:
        print(f"注意：课程的 venv（{venv}）不在这个仓库里（例如 .venv 是指向另一份仓库的链接）：hub 运行时只收起本仓库的"
              f"答案、隐藏测试和 .git；{venv.parent} 里如果也有 solutions/、source/，学生读得到。", file=sys.stderr)
    env = prepare(Path(args.base), students, instructors, password=args.password)
    changed = make_traversable(venv_python(), Path(sys.prefix) / "ngshare" / "bin" / "python", HERE) + hide_private()
    if changed:
        print("临时改了这些路径的权限（上级目录加 o+x：学生的服务器和 ngshare 要走到 venv 的 Python；答案、隐藏测试和 .git "
              "去掉 other 权限），hub 停止时改回：", "、".join(str(p) for p, _ in changed))
    env["LECTURE07_HUB_URL"] = f"http://{'0.0.0.0' if args.public else '127.0.0.1'}:{args.port}"
    if args.public:
        print(f"警告：hub 监听 0.0.0.0:{args.port}，网络上的任何人都能用公开的密码 {args.password!r} 登录，"
              "并在终端里以这些用户运行命令。只在可信的网络里这样做，用完 Ctrl+C。", file=sys.stderr)
    print(f"JupyterHub：http://127.0.0.1:{args.port}/  密码都是 {args.password!r}（dummy 认证，只用于试用）")
    print(f"  学生：{'、'.join(students)}；教师：{'、'.join(instructors)}（课程目录 {env['LECTURE07_HUB_COURSE_ROOT']}）")
    print("  教师发布作业：在 hub 的终端里 cd ~/lecture07 && nbgrader release_assignment exercises"
          f"（交换服务 ngshare，数据在 {env['LECTURE07_HUB_NGSHARE_DATA']}）")
    # 在后台启动时（nohup、cmd &）SIGINT 是被忽略的，hub 和它的服务继承下来，停的时候 hub 发给每个服务的 SIGINT 不起作用，
    # 要各等约 20 秒才被强行结束：让 hub 从默认的 SIGINT 处理开始
    hub = subprocess.Popen([str(Path(sys.prefix) / "bin" / "jupyterhub"), "-f", str(HERE / "jupyterhub_config.py")],
                           cwd=env["LECTURE07_HUB_DATA"], env={**os.environ, **env},
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # kill / systemctl stop（SIGTERM）和 Ctrl+C 一样：让 hub 停掉各用户的服务器，再把权限改回来
    signal.signal(signal.SIGTERM, lambda *_: hub.send_signal(signal.SIGTERM))
    try:
        return hub.wait()
    except KeyboardInterrupt:  # Ctrl+C 也送到了 hub（同一个进程组）：等它停掉各用户的服务器
        return hub.wait()
    finally:
        restore_modes(changed)


if __name__ == "__main__":
    sys.exit(main())
