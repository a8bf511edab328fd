"""内核拿到的东西：放进沙箱的文件、它们在沙箱里的位置、内核的环境变量和命令行参数。

全新的内核（sandbox.start_kernel）和模板进程（sandbox_forkserver）都从这里取，两种内核拿到的完全相同。
runner.py 在沙箱里看不到 lib/：它只用标准库和 IPython，外加它旁边的 guard.py（审计钩子，沙箱里叫 _grader_guard.py）
和 guard 用的 flags.py（可疑迹象的表，沙箱里叫 _grader_flags.py）。
内核的命令行上没有参数：设置是控制输入的第一行（setup_line），沙箱里的 /proc/*/cmdline 和 sys.argv 里没有课程目录。
"""
from __future__ import annotations

import json
from pathlib import Path

from .runner import SANDBOX_WORKDIR

HERE = Path(__file__).resolve().parent
RUNNER_SOURCE = (HERE / "runner.py").read_text(encoding="utf-8")
# 放在 runner.py 旁边的文件：(源文件, 沙箱里的名字)。runner 导入 _grader_guard，guard 导入 _grader_flags
SHIPPED = (("guard.py", "_grader_guard.py"), ("flags.py", "_grader_flags.py"))
SOURCES = {name: (HERE / src).read_text(encoding="utf-8") for src, name in SHIPPED}
SANDBOX_RUNNER = "/tmp/_grader_runner.py"
SANDBOX_MPL = "/tmp/mpl"  # matplotlib 的配置目录（MPLCONFIGDIR）：sandbox.prepare_scratch 放进预先建好的字体缓存
# PATH：学生的代码（和它调用的 !ls 之类）只需要系统的命令；评分人自己的 PATH（家目录、课程目录里的工具）不给
KERNEL_PATH = "/usr/local/bin:/usr/bin:/bin"


def ship(folder: Path, runner_name: str = "runner.py") -> Path:
    """把 runner.py（文件名 runner_name）和它旁边的 guard.py、flags.py（SHIPPED）写进 folder。返回 runner 的路径。"""
    for name, text in SOURCES.items():
        (folder / name).write_text(text, encoding="utf-8")
    runner_path = folder / runner_name
    runner_path.write_text(RUNNER_SOURCE, encoding="utf-8")
    return runner_path


def shipped_binds(folder: Path) -> list[str]:
    """bwrap 参数：把 ship(folder) 写好的文件只读地挂到沙箱里的位置（runner.py 的旁边就是它导入的文件）。"""
    binds = ["--ro-bind", str(folder / "runner.py"), SANDBOX_RUNNER]
    for name in SOURCES:
        binds += ["--ro-bind", str(folder / name), f"{Path(SANDBOX_RUNNER).parent}/{name}"]
    return binds


def kernel_env(scratch: Path | None) -> dict:
    """内核的环境变量。scratch 为 None：在 bwrap 沙箱里（缓存和配置都在这份提交私有的 /tmp 里）。"""
    home, tmp = (SANDBOX_WORKDIR, "/tmp") if scratch is None else (str(scratch / "work"), str(scratch))
    return {
        "PATH": KERNEL_PATH, "HOME": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": SANDBOX_MPL if scratch is None else f"{tmp}/mpl", "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0", "CI": "true", "TQDM_DISABLE": "1", "PYTHONNOUSERSITE": "1",
        "NBGRADER_EXECUTION": "autograde",  # 和 nbgrader autograde 一样：练习里“自动评分时跳过”的训练和选做测量不运行
        "XDG_CACHE_HOME": f"{tmp}/cache",
    }


def setup_line(nb_path: str, limits, drop_uid: int, course_root: Path, channel_fd: int, nproc_limit: int) -> bytes:
    """控制输入的第一行：runner.main 的设置（见 runner.py 开头的协议）。资源上限由 runner 在执行任何学生代码之前对自己
    设置（软硬上限相同，学生代码无法再调高）；不用 preexec_fn，这样 subprocess 可以用 vfork，评分进程很大时启动快得多。"""
    setup = {"nb_path": nb_path, "cell_timeout": limits.cell_timeout, "max_forks": limits.max_forks, "uid": drop_uid,
             "course_root": str(course_root), "channel_fd": channel_fd, "memory_mb": limits.memory_mb,
             "nproc": nproc_limit, "file_mb": limits.file_mb}
    return (json.dumps(setup) + "\n").encode()
