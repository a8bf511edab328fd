"""bubblewrap（bwrap）：这台机器上能不能用、能不能在沙箱里换 uid，和一份提交的 bwrap 命令行。

命令行（bwrap_command）从外到内：整个文件系统只读 → 新的空 /tmp → 课程目录、评分人的家目录、评分的临时目录和
下载的文件夹盖上空的 tmpfs → 被盖住的 Python 只读地挂回原处 → 这份提交的工作目录、matplotlib 的配置目录（里面是
预先建好的字体缓存）和放进沙箱的文件（runner.py、guard.py、flags.py）→ 新的 ipc、pid、net、uts、cgroup 命名空间。
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .runner import SANDBOX_WORKDIR
from .sandbox_kernel import SANDBOX_MPL, shipped_binds

UID_BASE = 61000  # 降权的内核用的 uid 从这里开始（每个评分进程一段，见 sandbox.RUN_UID_BASE）
NO_BWRAP_MESSAGE = (
    "未找到可用的 bubblewrap（bwrap）：学生代码将直接在临时副本里运行，没有文件系统和网络隔离。"
    "分数仍然只由干净进程里的检查给出，但学生代码可以用绝对路径读取评分人能读到的文件。"
    "安装方法：sudo apt-get install bubblewrap")

_BWRAP_CACHE: dict = {}


def bwrap_status() -> tuple[bool, str]:
    """(能否使用 bwrap, 说明)。结果缓存在进程里。"""
    if "v" in _BWRAP_CACHE:
        return _BWRAP_CACHE["v"]
    exe = shutil.which("bwrap")
    if exe is None:
        res = (False, NO_BWRAP_MESSAGE)
    else:
        cmd = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
               "--unshare-all", "--die-with-parent", "true"]
        try:
            p = subprocess.run(cmd, capture_output=True, timeout=30)
            ok = p.returncode == 0
            msg = "bubblewrap 可用" if ok else (NO_BWRAP_MESSAGE + "（bwrap 存在但无法运行："
                                               + p.stderr.decode(errors="replace").strip()[:200] + "）")
        except Exception as e:  # pragma: no cover
            ok, msg = False, NO_BWRAP_MESSAGE + f"（{e}）"
        res = (ok, msg)
    _BWRAP_CACHE["v"] = res
    return res


def sandbox_python() -> str:
    """沙箱里运行的解释器：venv 的 bin/python，目录解析过符号链接（.venv 可以是指向别处的链接，比如指向另一个克隆里的
    .venv：链接本身在课程目录里，沙箱里被盖住了；bwrap 挂回沙箱的是解析后的目录）。文件名不解析：解析到底就不再是 venv。"""
    return str(Path(sys.executable).parent.resolve() / Path(sys.executable).name)


def options_via_fd(cmd: list) -> tuple[list, int | None]:
    """bwrap 的选项改从管道读（bwrap --args FD）：沙箱里看得见 bwrap 自己的命令行（/proc/1/cmdline），那里就只剩
    “bwrap --args N”，看不到盖住了评分人的哪些目录。返回 (新的命令, 要传给 bwrap 的 fd；Popen 之后由调用者关掉)。
    选项比管道的缓冲（64 KiB）还长时照旧放在命令行上（不会发生：通常 2–4 KB）。"""
    data = b"".join(os.fsencode(a) + b"\0" for a in cmd[1:])
    if not cmd or len(data) > 60000:
        return list(cmd), None
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    return [cmd[0], "--args", str(r)], r


def bwrap_can_drop_uid() -> bool:
    """以 root 身份运行 bwrap 时，沙箱里能否切换到别的 uid（容器里的 bwrap 可能只能建只映射 uid 0 的
    user namespace，那样切换会失败；这时不切换 uid，进程数上限只靠审计钩子）。"""
    if "drop" in _BWRAP_CACHE:
        return _BWRAP_CACHE["drop"]
    ok = False
    if os.geteuid() == 0 and bwrap_status()[0]:
        cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
               *python_rebinds([]), "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
               "--die-with-parent", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", sandbox_python(), "-S", "-c",
               f"import os; os.setgroups([]); os.setgid({UID_BASE}); os.setuid({UID_BASE}); "
               f"assert os.getuid() == {UID_BASE}"]
        try:
            ok = subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0
        except Exception:  # pragma: no cover
            ok = False
    _BWRAP_CACHE["drop"] = ok
    return ok


def is_under(path: Path, base: Path) -> bool:
    try:
        path.resolve().relative_to(base.resolve())
        return True
    except ValueError:
        return False


def hidden_dirs(course_root: Path, scratch_base: Path, hide: list) -> list[Path]:
    """沙箱里盖上空 tmpfs 的目录：课程目录、评分人的家目录、评分的临时目录、hide（下载的文件夹）。
    不存在的、根目录、已经在别的被盖住的目录里面的不再单独盖。"""
    hidden: list[Path] = []
    for h in [course_root, Path.home(), scratch_base, *hide]:
        h = Path(h).resolve()
        if h.is_dir() and str(h) != "/" and not any(is_under(h, x) for x in hidden):
            hidden.append(h)
    return hidden


def python_rebinds(hidden: list[Path]) -> list[str]:
    """Python 本身（venv 和它指向的解释器）可能就在被盖住的目录里（课程目录里的 .venv、家目录里的 pyenv、
    /tmp 下的克隆）：把它们只读地挂回原处的 bwrap 参数，否则沙箱里找不到解释器。"""
    covered = hidden + [Path("/tmp").resolve()]
    rebind = set()
    for p in (sys.prefix, sys.base_prefix, os.path.dirname(sys.executable),
              os.path.dirname(os.path.realpath(sys.executable))):
        p = Path(p).resolve()
        if any(is_under(p, h) for h in covered):
            rebind.add(p if p.name != "bin" else p.parent)
    args, made = [], set()
    for p in sorted(rebind, key=lambda x: len(str(x))):
        for a in reversed(p.parents):  # 中间目录要对降权后的 uid 可进入
            if any(is_under(a, h) and a != h for h in covered) and a not in made:
                args += ["--perms", "0755", "--dir", str(a)]
                made.add(a)
        args += ["--ro-bind", str(p), str(p)]
    return args


def bwrap_command(course_root: Path, scratch_base: Path, hide: list, scratch: Path, drop_uid: int) -> list[str]:
    """一份提交的 bwrap 命令行（后面接内核的命令）。scratch：这份提交的临时副本（work/ 挂成沙箱里的
    SANDBOX_WORKDIR，sandbox_kernel.ship 写好的文件挂到 /tmp 下）。drop_uid >= 0：内核自己换到这个 uid
    （给它 CAP_SETUID/CAP_SETGID）；否则在新的 user 命名空间里（bwrap 能建的话）。"""
    cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp"]
    hidden = hidden_dirs(course_root, scratch_base, hide)
    for h in hidden:
        cmd += ["--tmpfs", str(h)]
    cmd += python_rebinds(hidden)
    cmd += ["--bind", str(scratch / "work"), SANDBOX_WORKDIR, "--bind", str(scratch / "mpl"), SANDBOX_MPL,
            *shipped_binds(scratch),
            "--chdir", SANDBOX_WORKDIR, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if drop_uid >= 0:
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-user-try"]
    return cmd
