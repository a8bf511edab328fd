"""助教评分流水线（学生用不到）：``python -m lib.grading grade ASSIGNMENT --submissions PATH``。

导入 LMS 下载的提交 → 按 release/ 修复 → 在课程目录之外的沙箱里执行 → 在干净进程里用
exercise_checks.CHECKS 判分 → nbgrader gradebook、反馈 HTML、grades.csv。
exercise_checks.py 和 probes.py 由练习的作者维护，其余文件属于流水线本身。
"""
