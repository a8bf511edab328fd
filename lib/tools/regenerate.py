"""用 nbgrader 从 source/ 重新生成 release/（学生版）和 solutions/（参考答案版），再给它们盖章。

用法（课程根目录就是仓库根目录）：

    python -m lib.tools.regenerate              # 即 make release
    python -m lib.tools.regenerate --root DIR   # 在另一个课程目录里生成（测试用）

做的事情，和助教手动做的一样：
1. ``nbgrader generate_assignment exercises --force``：source/exercises → release/exercises
   （去掉参考答案和隐藏测试，加上校验和）；
2. ``nbgrader generate_solution exercises --force``：source/exercises → solutions/exercises
   （保留参考答案和评分标准，去掉隐藏测试；不执行，见 nbgrader_config.py）；
3. 用 ``lib.tools.badges.stamp`` 给每个生成的 notebook 盖章：Colab 徽章指向它自己的路径，
   第一个代码单元格是引导单元格。

nbgrader 需要一个 gradebook 数据库来记录作业；这里用临时目录里的数据库，
所以除了 release/ 和 solutions/，不会在课程目录里写任何东西（不会出现 gradebook.db）。
release/ 和 solutions/ 只能由本命令生成，不要手改：要改练习，改 source/ 再运行本命令。
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = ("exercises",)


def nbgrader_command() -> list[str]:
    """和当前 Python 同一个环境里的 nbgrader（虚拟环境里的 bin/nbgrader）。"""
    exe = Path(sys.executable).parent / "nbgrader"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "nbgrader"]


def run_nbgrader(root: Path, *args: str, db_url: str) -> None:
    cmd = [*nbgrader_command(), *args, f"--CourseDirectory.root={root}", f"--CourseDirectory.db_url={db_url}"]
    # nbgrader 打开 gradebook 时会调用同一环境里的 `alembic` 命令：虚拟环境没有激活时要把它的 bin/ 放进 PATH
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    result = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"nbgrader 失败（{' '.join(args)}，退出码 {result.returncode}）：\n"
                           f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def stamp_generated(root: Path, assignment: str) -> list[Path]:
    """给 release/ 和 solutions/ 里这个作业的每个 notebook 盖章，返回这些文件。"""
    from .badges import stamp

    written = []
    for top in ("release", "solutions"):
        for path in sorted((root / top / assignment).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            stamp(nb, path.relative_to(root).as_posix())
            nbformat.write(nb, path)
            written.append(path)
    return written


def regenerate(root: Path = REPO_ROOT, assignments=ASSIGNMENTS) -> list[Path]:
    """重新生成并盖章，返回写出的 notebook 路径。"""
    root = Path(root).resolve()
    written = []
    for assignment in assignments:
        if not (root / "source" / assignment).is_dir():
            raise FileNotFoundError(f"找不到 {root / 'source' / assignment}：课程根目录对吗？")
        with tempfile.TemporaryDirectory(prefix="nbgrader-db-") as tmp:
            db_url = f"sqlite:///{Path(tmp) / 'gradebook.db'}"
            run_nbgrader(root, "generate_assignment", assignment, "--force", db_url=db_url)
            run_nbgrader(root, "generate_solution", assignment, "--force", db_url=db_url)
        written += stamp_generated(root, assignment)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.tools.regenerate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="课程根目录（默认：本仓库）")
    args = parser.parse_args(argv)
    written = regenerate(args.root)
    for path in written:
        print(f"已生成：{path.relative_to(args.root.resolve()).as_posix()}")
    print(f"共 {len(written)} 个 notebook（release/ 和 solutions/）")
    return 0


if __name__ == "__main__":
    sys.exit(main())
