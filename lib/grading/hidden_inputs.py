"""学期密钥：隐藏检查的输入从它生成，公开的仓库里没有它，学生就没法事先算出评分时的输入。

隐藏检查在评分时用一个种子生成输入（每道题再加自己的 salt，见 lib/grading/probes.py 的 ``_rng``）。仓库是公开的，
种子要是也公开（``pipeline.SEED = 0``），谁都能把每道题的隐藏输入算出来、把答案写死在提交里。所以：

- 教师在课程根目录运行一次 ``python -m lib.grading secret``：生成 ``.grading/secret``（随机 32 字节，git 忽略；
  文件权限 0640，属于课程目录的组：评分组的成员能读，学生不能）。
- 评分时种子由密钥派生（``seed``）：同一个学期、同一个密钥，同一份文件在谁手里、哪次运行、哪台机器上分数都一样。
- 没有密钥的课程（公开的克隆、CI、自学）照旧用公开的种子 0，分数和以前完全相同。
- 学生的公开测试和自检不用密钥（它们的输入写在 notebook 里）；``nbgrader validate`` / 普通的 ``nbgrader autograde``
  执行的隐藏测试单元格也用公开的种子：要用密钥，请用 ``python -m lib.grading grade``。
- 学期中间不要换密钥：换了之后隐藏输入全变，已经评过的要重新执行（分数可能变）。
"""
from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

PUBLIC_SEED = 0  # = pipeline.SEED = exercise_checks.DEFAULT_SEED
FILE = Path(".grading") / "secret"


def secret_path(course: Path) -> Path:
    return Path(course) / FILE


def seed(course: Path) -> int:
    """这个课程评分时隐藏输入的种子：有学期密钥时由它派生（32 位），没有时是公开的 0。"""
    path = secret_path(course)
    try:
        secret = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return PUBLIC_SEED
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"读不了学期密钥 {path}（{e}）：评分的输入由它决定，不能跳过它。"
                         "请检查文件权限（评分组要能读），或者请教师重新运行 python -m lib.grading secret。") from None
    if len(secret) < 32:
        raise SystemExit(f"学期密钥 {path} 太短（{len(secret)} 个字符）：请用 python -m lib.grading secret --force 重新生成。")
    return int.from_bytes(hashlib.sha256(f"lecture07 hidden inputs\n{secret}".encode()).digest()[:4], "big")


def create(course: Path, force: bool = False) -> Path:
    """生成学期密钥文件（已有时不覆盖，除非 force）。返回它的路径。"""
    path = secret_path(course)
    if path.exists() and not force:
        raise FileExistsError(str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(secrets.token_hex(32) + "\n")
    try:  # 属于课程目录的组（JupyterHub 上是评分组），组可读，别人不能读
        os.chown(tmp, -1, Path(course).stat().st_gid)
    except OSError:
        pass
    os.chmod(tmp, 0o640)
    tmp.replace(path)
    return path
