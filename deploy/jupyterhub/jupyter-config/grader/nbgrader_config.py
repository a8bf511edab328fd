"""教师和助教的 nbgrader 设置（JupyterHub 通过 JUPYTER_CONFIG_PATH 加载）：交换服务 ngshare、课程编号、共享的课程目录。

课程目录里的 nbgrader_config.py（仓库根目录那份）随后也会被加载，评分、反馈等设置都在那里。
同一个文件夹也是 make lab-ta 的助教设置（lib/coursework.py）：在自己的电脑上没有 hub 设的课程编号（LECTURE07_COURSE_ID），
就不用交换服务，课程目录就是仓库根目录（和以前的 make lab 一样）。
"""
import os
from pathlib import Path

c = get_config()  # noqa: F821
# hub（单机版的 CourseSpawner、Kubernetes 版的 spawn 钩子）给服务器、终端和内核设了课程编号；ssh 上的助教自己设
if "LECTURE07_COURSE_ID" in os.environ:
    # 交换设置和学生共用（../ngshare_exchange.py）；load_subconfig 找不到文件时不报错，所以先检查
    _shared = Path(__file__).resolve().parents[1] / "ngshare_exchange.py"
    if not _shared.is_file():
        raise FileNotFoundError(f"缺少交换设置 {_shared}")
    load_subconfig(_shared.name, path=str(_shared.parent))  # noqa: F821
    c.CourseDirectory.course_id = os.environ["LECTURE07_COURSE_ID"]
    # 家目录里指向共享课程目录的链接（formgrader 要求课程目录在服务器的根目录之下）
    c.CourseDirectory.root = os.environ["LECTURE07_COURSE_ROOT"]
    # 几位助教共用一个课程目录：nbgrader 建的文件对课程的评分组可写（目录设了 setgid）
    c.CourseDirectory.groupshared = True
