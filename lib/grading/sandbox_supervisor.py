"""评分进程看着一个正在运行的内核：读评分通道上的事件，到时间就杀掉它。

通道上每行一个 JSON 事件（协议见 runner.py 开头）：start / end（每个单元格）、cells_done（学生的单元格跑完：
这时才把控制消息写给内核）、record 和 done（带这次运行的 nonce）、alert（可疑迹象）、ready。
什么时候杀掉内核（Supervisor.overdue，先到先算）：Ctrl-C（sandbox.STOP）；一个单元格超过 cell_timeout + grace；
检查阶段超过 (检查数 + 1) ×（cell_timeout + grace）；整份提交超过总的期限；通道上的输出超过 MAX_OUTPUT。
"""
from __future__ import annotations

import json
import os
import select
import signal
import time
from dataclasses import dataclass, field

from .flags import RUNNER_FLAGS, Flag
from .guard import FORKS, REPLACED

MAX_FLAGS = 100
MAX_OUTPUT = 64 * 1024 * 1024  # 通道上的字节数


@dataclass
class ExecResult:
    outputs: dict = field(default_factory=dict)        # cell index -> list of outputs
    exec_counts: dict = field(default_factory=dict)
    timed_out_cells: list = field(default_factory=list)
    memory_cells: list = field(default_factory=list)
    records: dict | None = None
    changed: list = field(default_factory=list)
    flags: list = field(default_factory=list)
    forks: int = 0
    junk: int = 0                                      # 通道上不属于本次运行的数据行数
    crashed: bool = False
    killed_for_timeout: bool = False
    fail_cell: int | None = None                       # 崩溃/被杀时正在运行的单元格
    stderr_tail: str = ""
    seconds: float = 0.0
    timings: dict = field(default_factory=dict)               # 各阶段到达的时刻（秒，从启动算起）


def take_alert(res: ExecResult, ev: dict) -> None:
    """审计钩子在发现的那一刻发出的可疑迹象（guard.py）：{"ev": "alert", "kind": ..., "hex": 说明的 UTF-8 十六进制}。
    不带 nonce：学生伪造一条只会标记自己。kind 是 replaced（替换了的函数：记进 changed）、forks（创建的进程超过上限：
    说明是个数）或 flags.Flag 里 runner 的一种；不认识的写法记作评分通道异常（Flag.CHANNEL）。"""
    try:
        kind, detail = str(ev["kind"]), bytes.fromhex(str(ev["hex"])).decode("utf-8", "replace")[:300]
        if kind == REPLACED:
            if len(res.changed) < MAX_FLAGS:
                res.changed.append(detail)
            return
        if kind == FORKS:
            res.forks = max(res.forks, int(detail))
            return
        if kind not in RUNNER_FLAGS:
            kind, detail = Flag.CHANNEL.value, f"不认识的可疑迹象 {kind[:40]!r}"
    except (KeyError, ValueError):
        kind, detail = Flag.CHANNEL.value, "格式不对的可疑迹象"
    if len(res.flags) < MAX_FLAGS:
        res.flags.append([kind, detail])


@dataclass
class KernelWatch:
    """看着一个内核时评分进程知道的一切。"""

    deadline: float                          # 整份提交的期限（time.monotonic）
    cell: tuple[int, float] | None = None    # 正在运行的单元格和它开始的时刻
    probes_since: float | None = None        # 学生的单元格跑完（cells_done）、检查开始的时刻
    done: bool = False                       # 收到了带这次 nonce 的 done
    stopped: str | None = None               # 为什么杀掉了内核：None（没杀）、"interrupted"、"timeout"、"output"

    @property
    def cells_done(self) -> bool:
        return self.probes_since is not None

    @property
    def killed(self) -> bool:
        return self.stopped is not None

    @property
    def interrupted(self) -> bool:
        return self.stopped == "interrupted"


class Supervisor:
    """读一个内核的评分通道（channel_fd），把事件记进 res，按 KernelWatch 的期限杀掉它（整个进程组）。
    control_pipe：学生的单元格跑完后把 control 写进去。stop：Ctrl-C 的事件（sandbox.STOP）。"""

    def __init__(self, res: ExecResult, proc, channel_fd: int, control_pipe, control: dict, limits, stop,
                 t_start: float, n_code_cells: int):
        self.res, self.proc, self.fd, self.control_pipe, self.control = res, proc, channel_fd, control_pipe, control
        self.limits, self.stop, self.t_start = limits, stop, t_start
        n_checks = len(control.get("grade_ids", []))
        total_budget = (n_code_cells + n_checks + 2) * limits.cell_timeout + 60
        self.probe_budget = (n_checks + 1) * (limits.cell_timeout + limits.grace)
        self.watch = KernelWatch(deadline=time.monotonic() + total_budget)
        self._buf = b""
        self._bytes = 0

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def run(self) -> KernelWatch:
        """读到通道关闭（内核退出）或杀掉内核为止。"""
        while True:
            if self._kill_if_overdue():
                break
            ready, _, _ = select.select([self.fd], [], [], 0.5)
            if not ready:
                continue
            chunk = os.read(self.fd, 65536)
            if not chunk:
                break
            self._bytes += len(chunk)
            if self._bytes > MAX_OUTPUT:
                self.res.flags.append([Flag.CHANNEL.value, "输出过多"])
                self.res.crashed = True
                self._stop("output")
                break
            self._buf += chunk
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                self.on_line(line)
        return self.watch

    def overdue(self, now: float) -> str | None:
        """现在该不该杀掉内核：None，或者为什么（"interrupted"、"timeout"）。超时时记下是哪个单元格。"""
        w, lim, res = self.watch, self.limits, self.res
        if self.stop.is_set():
            return "interrupted"
        if w.cell is not None and now - w.cell[1] > lim.cell_timeout + lim.grace:
            res.fail_cell = w.cell[0]
        elif w.probes_since is not None and now - w.probes_since > self.probe_budget:
            pass  # 检查阶段超时：不是哪个单元格的错
        elif now > w.deadline:
            res.fail_cell = w.cell[0] if w.cell else None
        else:
            return None
        res.killed_for_timeout = True
        return "timeout"

    def _kill_if_overdue(self) -> bool:
        why = self.overdue(time.monotonic())
        if why is not None:
            self._stop(why)
        return why is not None

    def _stop(self, why: str) -> None:
        self.watch.stopped = why
        self.kill()

    def on_line(self, line: bytes) -> None:
        """通道上的一行。不是 JSON 或没有 ev 的算作伪造的数据（res.junk）。"""
        try:
            ev = json.loads(line)
            kind = ev["ev"]
        except Exception:
            self.res.junk += 1
            return
        if kind in ("ready", "cells_done", "record", "done") and kind not in self.res.timings:
            self.res.timings[kind] = round(time.monotonic() - self.t_start, 3)
        self.on_event(kind, ev)

    def on_event(self, kind, ev: dict) -> None:
        w, res = self.watch, self.res
        if kind == "start" and not w.cells_done:
            w.cell = (int(ev["cell"]), time.monotonic())
        elif kind == "end" and not w.cells_done:
            self._cell_ended(ev)
        elif kind == "cells_done" and not w.cells_done:
            w.cell = None
            w.probes_since = time.monotonic()
            self._send_control()
        elif kind == "record" and w.cells_done and ev.get("nonce") == self.control["nonce"] and res.records is None:
            res.records = ev.get("records") or {}
            res.changed += [str(x) for x in ev.get("changed") or []][:MAX_FLAGS]  # 现在都经 alert 发来，这里是空的
            res.flags.extend(ev.get("flags") or [])
            res.forks = max(res.forks, int(ev.get("forks") or 0))
        elif kind == "done" and ev.get("nonce") == self.control["nonce"] and res.records is not None:
            w.done = True
        elif kind == "alert":
            take_alert(res, ev)
        elif kind == "ready":
            pass
        else:
            res.junk += 1

    def _cell_ended(self, ev: dict) -> None:
        idx = int(ev["cell"])
        self.res.outputs[idx] = ev.get("outputs", [])
        self.res.exec_counts[idx] = ev.get("execution_count")
        if ev.get("timed_out"):
            self.res.timed_out_cells.append(idx)
        if ev.get("memory"):
            self.res.memory_cells.append(idx)
        self.watch.cell = None

    def _send_control(self) -> None:
        """学生的单元格跑完了：现在才把 nonce、种子和探针发给内核。"""
        try:
            self.control_pipe.write((json.dumps(self.control) + "\n").encode())
            self.control_pipe.flush()
        except (BrokenPipeError, OSError):
            pass
