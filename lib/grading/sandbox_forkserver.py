"""模板进程（fork server）的评分进程一侧：内核不必每份提交都从头导入 numpy、torch。

每种预加载（"numpy"、"torch"）一个模板进程（runner.serve_template），第一次用到时启动，评分结束时 close()。
模板在任何学生代码之前启动、只导入库，自己从不运行学生代码。每份提交照样由 bwrap 新建自己的沙箱（里面先运行
一个占位进程），模板 fork 出一个只用一次的内核加入它（start_forked）；沙箱结束时内核和学生留下的进程一起结束。
任何一步失败都抛出 ForkServerError，sandbox.start_kernel 改用全新的 Python（隔离不变）。
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from .sandbox_bwrap import options_via_fd, sandbox_python
from .sandbox_kernel import kernel_env, ship


class ForkServerError(Exception):
    pass


def template_command(script: Path, kind: str, fd: int) -> list:
    """启动模板进程（runner.serve_template）的命令：用沙箱里看得见的解释器（sandbox_bwrap.sandbox_python）。"""
    return [sandbox_python(), "-u", str(script), "--template", kind, str(fd)]


class ForkServer:
    """模板进程（runner.serve_template）的评分进程一侧：每种预加载（"numpy"、"torch"）一个模板进程，
    第一次用到时启动，评分结束时 close()。它们在任何学生代码之前启动、只导入库，自己从不运行学生代码；
    spawn() 让模板 fork 一个只用一次的内核，加入 start_forked 刚为这份提交新建的 bwrap 沙箱。
    任何一步失败都会关掉这个加速（之后的提交改用全新的 Python，隔离不变）并提示一次。"""

    def __init__(self, folder: Path):
        self.folder = folder
        self.error: str | None = None
        self.spawned = 0  # fork 出来的内核数
        self._templates: dict = {}  # kind -> (Popen, socket)
        self._locks = {"numpy": threading.Lock(), "torch": threading.Lock()}

    def _socket(self, kind: str) -> socket.socket:
        if kind not in self._templates:
            self.folder.mkdir(parents=True, exist_ok=True)
            script = ship(self.folder, f"runner_{kind}.py")
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with open(self.folder / f"{kind}.log", "wb") as log:
                # 解析过的 venv（sandbox_python，和全新内核一样）：.venv 是指向别的克隆的链接时，sys.executable 在课程目录里，
                # 沙箱里看不到，模板以它启动时 sys.prefix、sys.path 都指向那里，fork 出来的内核后来才导入的模块
                # （IPython.core.oinspect……）就找不到（fe44r S5：每一行都是 error）
                proc = subprocess.Popen(template_command(script, kind, theirs.fileno()),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                        env=kernel_env(None), cwd="/", pass_fds=(theirs.fileno(),),
                                        start_new_session=True)
            theirs.close()
            ours.settimeout(600)  # 包括模板第一次导入 torch 的时间
            self._templates[kind] = (proc, ours)
        return self._templates[kind][1]

    def spawn(self, kind: str, pid: int, namespaces: dict, fds: list[int]) -> None:
        """fds：内核的控制输入（读端）、stderr 文件、通道（写端）。"""
        with self._locks[kind]:
            if self.error is not None:
                raise ForkServerError(self.error)
            try:
                sock = self._socket(kind)
                request = json.dumps({"pid": pid, "namespaces": namespaces}).encode()
                socket.send_fds(sock, [request], fds)
                reply = sock.recv(65536)
            except OSError as e:
                reply = f"{type(e).__name__}: {e}".encode()
            if reply == b"ok":
                self.spawned += 1
            else:
                try:
                    log = (self.folder / f"{kind}.log").read_text(errors="replace").strip().splitlines()[-1:]
                except OSError:
                    log = []
                self.error = (reply.decode(errors="replace") or "模板进程退出了") + (f"（{log[0]}）" if log else "")
                print(f"注意：预先导入库的模板进程不能用（{self.error}），之后的提交改为每份启动全新的 Python"
                      "（慢一些，隔离和分数不变）。", file=sys.stderr)
                raise ForkServerError(self.error)

    def close(self) -> None:
        for proc, sock in self._templates.values():
            sock.close()  # 模板读到 EOF 后退出
        for proc, sock in self._templates.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# 模板 fork 的内核要加入的沙箱里先运行的占位进程：它说一声 ready（这时 bwrap 已经建好整个沙箱），然后等到
# 评分进程关闭它的标准输入才退出；它一退出，沙箱的 pid 命名空间就结束，里面剩下的进程全部被操作系统杀掉。
HOLDER = "import os, sys; os.write(1, b'ready'); sys.stdin.buffer.read()"


def start_forked(forkserver: ForkServer, bwrap_cmd: list, env: dict, errf, channel_w: int, with_torch: bool,
                  setup: bytes, work: Path):
    """用和全新内核完全相同的 bwrap 参数新建沙箱（里面是占位进程），再让模板 fork 一个内核加入它。setup：控制输入的
    第一行（和全新的内核一样）。返回 (占位进程, 内核的控制输入)。"""
    info_r, info_w = os.pipe()
    ready_r, ready_w = os.pipe()
    cmd, args_fd = options_via_fd(bwrap_cmd + ["--info-fd", str(info_w)])
    try:
        proc = subprocess.Popen(cmd + [sandbox_python(), "-I", "-S", "-c", HOLDER], stdin=subprocess.PIPE, stdout=ready_w,
                                stderr=errf, env=env, pass_fds=(info_w,) + ((args_fd,) if args_fd is not None else ()),
                                start_new_session=True, cwd=str(work))
    finally:
        if args_fd is not None:
            os.close(args_fd)
    os.close(info_w)
    os.close(ready_w)
    control_r = control_w = None
    try:
        if not select.select([ready_r], [], [], 60)[0] or os.read(ready_r, 16) != b"ready":
            raise ForkServerError("bwrap 沙箱没有启动")
        info = b""
        while select.select([info_r], [], [], 10)[0] and (chunk := os.read(info_r, 65536)):
            info += chunk
            try:
                namespaces = json.loads(info)
                break
            except json.JSONDecodeError:
                continue
        else:
            raise ForkServerError(f"bwrap --info-fd 的输出不完整：{info[:200]!r}")
        control_r, control_w = os.pipe()
        os.write(control_w, setup)  # 一行设置，远小于管道的缓冲：内核起来之后读
        forkserver.spawn("torch" if with_torch else "numpy", namespaces["child-pid"], namespaces,
                         [control_r, errf.fileno(), channel_w])
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        if control_w is not None:
            os.close(control_w)
        raise
    finally:
        os.close(info_r)
        os.close(ready_r)
        if control_r is not None:
            os.close(control_r)
    return proc, os.fdopen(control_w, "wb")
