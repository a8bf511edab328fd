"""学生的 nbgrader 设置：JupyterHub 通过 JUPYTER_CONFIG_PATH 给学生的服务器加载（交换服务 ngshare 和课程编号）。

同一个文件夹也是 make lab 的学生设置（lib/coursework.py）：在自己的电脑上没有 hub 设的课程编号（LECTURE07_COURSE_ID），
就不用交换服务，nbgrader 的设置全来自课程根目录的 nbgrader_config.py（和以前一样）。
"""
import os
from pathlib import Path

c = get_config()  # noqa: F821
# hub（单机版的 CourseSpawner、Kubernetes 版的 spawn 钩子）给服务器、终端和内核设了课程编号；ssh 上的助教自己设
if "LECTURE07_COURSE_ID" in os.environ:
    # 交换设置和教师/助教共用（../ngshare_exchange.py）；load_subconfig 找不到文件时不报错，所以先检查
    _shared = Path(__file__).resolve().parents[1] / "ngshare_exchange.py"
    if not _shared.is_file():
        raise FileNotFoundError(f"缺少交换设置 {_shared}")
    load_subconfig(_shared.name, path=str(_shared.parent))  # noqa: F821
    c.CourseDirectory.course_id = os.environ["LECTURE07_COURSE_ID"]
