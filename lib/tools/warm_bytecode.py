"""装好依赖之后，把课程会导入的模块预先编译成 .pyc：两组导入在两个进程里同时进行（make setup 调用）。

pip 装包时不编译（``--no-compile``：pip 一个文件一个文件地编译，单核约 1 分钟）。site-packages 里约 1.1 万个
.py 文件，课程导入的不到一半（按源码大小约 44%：torch 的 _inductor、distributed、testing，sympy 的大部分，
debugpy 的 vendored 代码……都用不到）。所以不全部编译，只导入课程用到的东西：Python 第一次导入一个模块时自己把
.pyc 写进 __pycache__/，之后的进程直接读（这里的导入约 17 秒墙钟，全部编译约 35 秒）。这张单子没列到的模块，
第一次用到时同样会被编译、写下来（Makefile 为此不向下传 PYTHONDONTWRITEBYTECODE），只是发生在那时。

    python -m lib.tools.warm_bytecode
"""
from __future__ import annotations

import os
import subprocess
import sys

# 两组大小相近（各约 15 CPU 秒）：训练和画图用的一组，Jupyter、nbgrader 和测试工具一组
GROUPS = (
    ("torch", "torch._dynamo", "torch.optim", "torch.utils.flop_counter", "numpy", "matplotlib.pyplot",
     "matplotlib_inline.backend_inline", "tqdm.auto"),
    ("nbgrader.apps", "nbgrader.api", "nbconvert.exporters", "nbformat", "nbclient", "ipykernel.kernelapp",
     "jupyter_server.serverapp", "jupyterlab.labapp", "jupyterhub.app", "pytest", "nbval.plugin",
     "openpyxl", "yaml", "copydetect", "latex2mathml.converter", "bs4", "sqlalchemy", "alembic",
     "playwright.sync_api", "psycopg2", "ipykernel.ipkernel", "jupyter_lsp", "ipywidgets", "xdist.scheduler",
     "execnet", "anyio"),
)


def main() -> int:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # 要写 .pyc
    env["MPLBACKEND"] = "Agg"
    # 只装了学生要用的包时（make lab），测试和助教的工具不在：跳过没装的，只编译装了的
    code = ("import importlib, importlib.util\nfor m in {!r}:\n"
            "    if importlib.util.find_spec(m.split('.')[0]) is not None:\n        importlib.import_module(m)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code.format(group)], env=env) for group in GROUPS]
    failed = [group[0] for group, p in zip(GROUPS, procs) if p.wait() != 0]
    if failed:
        print(f"预编译时导入失败（{'、'.join(failed)} 那一组）：安装可能不完整，请重新运行 make setup", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
