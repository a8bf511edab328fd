"""单机版的 ngshare：和 python -m ngshare 一样运行，只是只监听 hub 给它的地址（JUPYTERHUB_SERVICE_URL，本机 127.0.0.1）。

ngshare 0.6.0 把监听地址写死成 0.0.0.0（它在 Kubernetes 上要让代理从别的 pod 连进来），单机版用不着：学生和助教的
服务器、代理都在本机。这里在导入 ngshare 之前把 HTTPServer.listen 的地址换掉，别的机器就连不上它的端口。
Kubernetes 版（deploy/zero-to-jupyterhub/ngshare.yaml）仍用 python -m ngshare。
"""
import os
import sys
from urllib.parse import urlparse

from tornado.httpserver import HTTPServer

HOST = urlparse(os.environ["JUPYTERHUB_SERVICE_URL"]).hostname
_listen = HTTPServer.listen
HTTPServer.listen = lambda self, port, address="", **kwargs: _listen(self, port, HOST, **kwargs)

from ngshare.ngshare import main  # noqa: E402  （要在换掉 listen 之后导入）

main(sys.argv[1:])
