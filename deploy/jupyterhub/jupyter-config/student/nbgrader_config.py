"""学生的 nbgrader 设置（JupyterHub 通过 JUPYTER_CONFIG_PATH 给学生的服务器加载）：只需要交换目录和课程编号。"""
import os

c = get_config()  # noqa: F821
c.Exchange.root = os.environ["LECTURE07_EXCHANGE"]
c.CourseDirectory.course_id = os.environ["LECTURE07_COURSE_ID"]
