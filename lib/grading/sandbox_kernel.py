"""内核拿到的东西：放进沙箱的文件、它们在沙箱里的位置、内核的环境变量和命令行参数。

全新的内核（sandbox.start_kernel）和模板进程（sandbox_forkserver）都从这里取，两种内核拿到的完全相同。
runner.py 在沙箱里看不到 lib/：它只用标准库和 IPython，外加它旁边的 flags.py（沙箱里叫 _grader_flags.py）。
"""
from __future__ import annotations

import os
from pathlib import Path

from .runner import SANDBOX_WORKDIR

HERE = Path(__file__).resolve().parent
RUNNER_SOURCE = (HERE / "runner.py").read_text(encoding="utf-8")
FLAGS_SOURCE = (HERE / "flags.py").read_text(encoding="utf-8")
FLAGS_FILE = "_grader_flags.py"  # runner.py 在沙箱里 import _grader_flags（见 runner.py 开头）
SANDBOX_RUNNER = "/tmp/_grader_runner.py"
SANDBOX_FLAGS = f"/tmp/{FLAGS_FILE}"


def ship(folder: Path, runner_name: str = "runner.py") -> Path:
    """把 runner.py（文件名 runner_name）和它旁边的 flags.py 写进 folder。返回 runner 的路径。"""
    (folder / FLAGS_FILE).write_text(FLAGS_SOURCE, encoding="utf-8")
    runner_path = folder / runner_name
    runner_path.write_text(RUNNER_SOURCE, encoding="utf-8")
    return runner_path


def shipped_binds(folder: Path) -> list[str]:
    """bwrap 参数：把 ship(folder) 写好的文件只读地挂到沙箱里的位置（runner.py 的旁边就是 flags.py）。"""
    return ["--ro-bind", str(folder / "runner.py"), SANDBOX_RUNNER,
            "--ro-bind", str(folder / FLAGS_FILE), SANDBOX_FLAGS]


def kernel_env(scratch: Path | None) -> dict:
    """内核的环境变量。scratch 为 None：在 bwrap 沙箱里（缓存和配置都在这份提交私有的 /tmp 里）。"""
    home, tmp = (SANDBOX_WORKDIR, "/tmp") if scratch is None else (str(scratch / "work"), str(scratch))
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": f"{tmp}/mpl", "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0", "CI": "true", "TQDM_DISABLE": "1", "PYTHONNOUSERSITE": "1",
        "NBGRADER_EXECUTION": "autograde",  # 和 nbgrader autograde 一样：练习里“自动评分时跳过”的训练和选做测量不运行
        "XDG_CACHE_HOME": f"{tmp}/cache",
    }


def runner_args(nb_path: str, limits, drop_uid: int, course_root: Path, channel_fd: int, nproc_limit: int) -> list[str]:
    """runner.main 的参数（顺序见 runner.py 开头的协议）。资源上限由 runner 在执行任何学生代码之前对自己设置
    （软硬上限相同，学生代码无法再调高）；不用 preexec_fn，这样 subprocess 可以用 vfork，评分进程很大时启动快得多。"""
    return [nb_path, str(limits.cell_timeout), str(limits.max_forks), str(drop_uid), str(drop_uid),
            str(course_root), str(channel_fd), str(limits.memory_mb), str(nproc_limit), str(limits.file_mb)]
