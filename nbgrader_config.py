"""nbgrader 课程配置：仓库根目录就是课程目录（course root）。

作业 `exercises`：source/exercises/ 是教师版（参考答案 + 隐藏测试），由
`python -m lib.tools.regenerate`（make release）生成 release/exercises/（学生版）和
solutions/exercises/（参考答案 + 人工评分标准，不含隐藏测试）。
"""
import os

from nbgrader.preprocessors import ClearHiddenTests, ClearMarkScheme, ClearOutput, IncludeHeaderFooter, LockCells

c = get_config()  # noqa: F821

# 课程根目录就是这个文件所在的文件夹（不依赖当前目录：JupyterHub 上 formgrader 从助教的家目录启动）
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "cs224n-lecture07"
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.solution_directory = "solutions"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"
# Validate（和普通的 nbgrader autograde）每个单元格最多跑这么久（秒）。练习 10（06_hands_on）的单元格要训练小模型：
# 学生点 Validate 时是完整训练，(d) 两个进程训练四个迷你 GPT，空闲的 CPU 上 1–3 分钟，慢的笔记本更久；CI 的 QUICK 版
# 在忙的 2 核机器上也要约 145 秒（2026-12-04，负载 ~10）。120 秒不够，给 600 秒。
# 我们自己的评分（python -m lib.grading grade）不读这一项：它有自己的 --timeout（默认 120），而且评分时不重跑训练。
c.ExecutePreprocessor.timeout = 600
# 学生提交里缺失的评分单元格由 release 版补回，而不是直接让整次评分失败
c.OverwriteCells.add_missing_cells = True
c.ClearSolutions.code_stub = {"python": "# 在这里写你的代码\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "在这里写下你的答案。"
# solutions/：保留参考答案和人工评分标准，去掉隐藏测试（和反馈一样，学生只看到可见的测试），不执行。
# 不执行是因为默认的 Execute 会在生成时跑一遍练习 10 的训练，而且存下的输出随机器不同，
# solutions/ 就不能和 source/ 逐字节对应了。参考答案能否跑通由 tests/test_exercises.py 执行 source/ 来保证。
c.GenerateSolution.preprocessors = [IncludeHeaderFooter, LockCells, ClearOutput, ClearHiddenTests, ClearMarkScheme]
