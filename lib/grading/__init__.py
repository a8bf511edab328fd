"""助教评分流水线（学生用不到）：``python -m lib.grading grade|feedback|export ASSIGNMENT …``。

导入 LMS 下载的提交（collect.py；各 LMS 的命名在 lms.py，名单在 roster.py）→ 按 release/ 修复 →
在课程目录之外的沙箱里执行 → 在干净进程里用 exercise_checks.CHECKS 判分 → nbgrader gradebook、
反馈 HTML、grades.csv → export.py 填好 LMS 自己的成绩文件。
exercises/exNN.py（每个练习 notebook 的探针和检查）由练习的作者维护，其余文件（包括 exercise_checks.py、probes.py）属于引擎和流水线。
"""
