"""学期密钥：隐藏检查的输入从它生成，公开的仓库里没有它，学生就没法事先算出评分时的输入。

隐藏检查在评分时用一个种子生成输入（每道题再加自己的 salt，见 lib/grading/probes.py 的 ``_rng``）。仓库是公开的，
种子要是也公开（``pipeline.SEED = 0``），谁都能把每道题的隐藏输入算出来、把答案写死在提交里。所以：

- 教师在课程根目录运行一次 ``python -m lib.grading secret``：生成 ``.grading/secret``（随机 32 字节，git 忽略；
  文件权限 0640，属于课程目录的组：评分组的成员能读，学生不能）。
- 评分时**每个检查（grade_id）有自己的种子**，由密钥派生：``HMAC-SHA256(密钥, "lecture07 hidden inputs v2\\n" + grade_id)``
  的前 4 个字节（``HiddenInputs.seed``）。只有这个种子进入学生的内核（评分流水线把这次要检查的几个 grade_id 的种子
  发进去），密钥和别的检查的种子都不进去；从一个检查的种子（或它的输入，反馈会讲解它们）算不回密钥，也算不出别的
  检查的种子。同一个学期、同一个密钥，同一份文件在谁手里、哪次运行、哪台机器上分数都一样。
- 派生方式有版本（``DERIVATION``）：v1（之前的版本）是整个课程一个种子 ``sha256(密钥)`` 的前 4 个字节，每个检查
  都用它，它会进学生的内核，而且从反馈里讲解的任何一个输入都能用 2³² 次试算把它找回来，所以不再使用。有密钥的课程
  换到 v2 之后，隐藏输入全部换新，第一次 ``grade`` 会重新执行每一份提交（README 的“学期密钥”一条）。
- 没有密钥的课程（公开的克隆、CI、自学）每个检查都用公开的种子 0，输入和分数和以前完全相同。
- 学生的公开测试和自检不用密钥（它们的输入写在 notebook 里）；``nbgrader validate`` / 普通的 ``nbgrader autograde``
  执行的隐藏测试单元格也用公开的种子：要用密钥，请用 ``python -m lib.grading grade``。
- 学期中间不要换密钥：换了之后隐藏输入全变，已经评过的要重新执行（分数可能变）。
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

PUBLIC_SEED = 0  # = pipeline.SEED = exercise_checks.DEFAULT_SEED
FILE = Path(".grading") / "secret"
DERIVATION = "v2"  # 每个检查一个 HMAC 种子（见文件开头）；换派生方式时改它，存下的执行结果随之失效


def secret_path(course: Path) -> Path:
    return Path(course) / FILE


def read_secret(course: Path) -> str | None:
    """课程的学期密钥（没有时 None）。读不了、太短时退出并说明怎么办：评分的输入由它决定，不能悄悄跳过。"""
    path = secret_path(course)
    try:
        secret = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"读不了学期密钥 {path}（{e}）：评分的输入由它决定，不能跳过它。"
                         "请检查文件权限（评分组要能读），或者请教师重新运行 python -m lib.grading secret。") from None
    if len(secret) < 32:
        raise SystemExit(f"学期密钥 {path} 太短（{len(secret)} 个字符）：请用 python -m lib.grading secret --force 重新生成。")
    return secret


class HiddenInputs:
    """一个课程的隐藏输入从哪里来：每个检查（grade_id）的种子。密钥只在评分进程里，从不写进日志、状态或内核。"""

    def __init__(self, secret: str | None):
        self._key = None if secret is None else secret.encode("ascii")

    @classmethod
    def for_course(cls, course: Path) -> "HiddenInputs":
        return cls(read_secret(course))

    @property
    def public(self) -> bool:
        """没有学期密钥：每个检查都用公开的种子 0（和以前完全一样）。"""
        return self._key is None

    def seed(self, grade_id: str) -> int:
        """这个检查的种子（32 位）。有密钥时是 HMAC（单向：从它算不回密钥，也算不出别的检查的种子）。"""
        if self._key is None:
            return PUBLIC_SEED
        msg = f"lecture07 hidden inputs {DERIVATION}\n{grade_id}".encode()
        return int.from_bytes(hmac.new(self._key, msg, hashlib.sha256).digest()[:4], "big")

    def seeds(self, grade_ids) -> dict[str, int]:
        return {gid: self.seed(gid) for gid in grade_ids}

    def version(self) -> str:
        """存下的执行结果属于哪一套输入："" = 公开的种子；否则派生方式 + 密钥的指纹（单向，不泄露密钥）。"""
        if self._key is None:
            return ""
        return f"{DERIVATION} " + hashlib.sha256(b"lecture07 key id\n" + self._key).hexdigest()[:12]

    def __repr__(self) -> str:  # 不把密钥打印出来
        return f"HiddenInputs({'public' if self.public else self.version()})"


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
