"""测试用：给要起服务器的测试（JupyterHub、JupyterLab、PostgreSQL）挑一个空闲的本机端口。

bind(0) 给的端口来自内核的临时端口范围（/proc/sys/net/ipv4/ip_local_port_range，通常 32768–60999），
jupyter 的内核也从那里取端口；make test 的另一个 pytest 进程随时在启动内核（nbval、nbgrader）。
挑好端口、放开、等服务器几秒后真正绑定：这中间内核可能拿走同一个端口（一次 CI 里 hub 测试就连到了一个
内核的 ZMQ 端口：BadStatusLine 'ÿ'）。所以在临时端口范围之下随机挑，谁也不会用 bind(0) 拿到它。
"""
import random
import socket
from pathlib import Path


def free_port() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.SystemRandom()
    for _ in range(100 if low > 11000 else 0):
        port = rng.randrange(10000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # 临时端口范围几乎占满了整个端口空间：只能用 bind(0)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
