"""nbgrader 课程配置：仓库根目录就是课程目录（course root）。"""
c = get_config()  # noqa: F821

c.CourseDirectory.root = "."
c.CourseDirectory.course_id = "cs224n-lecture07"
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.solution_directory = "solutions"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"
# 每个 torch 单元格最多跑这么久（秒）
c.ExecutePreprocessor.timeout = 120
# 学生提交里缺失的评分单元格由 release 版补回，而不是直接让整次评分失败
c.OverwriteCells.add_missing_cells = True
c.ClearSolutions.code_stub = {"python": "# 在这里写你的代码\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "在这里写下你的答案。"
