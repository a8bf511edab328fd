"""助教评分流水线（学生用不到）：``python -m lib.grading grade|feedback|export ASSIGNMENT …``。

导入 LMS 下载的提交（collect.py；各 LMS 的命名在 lms.py，名单在 roster.py）→ 按 release/ 修复 →
在课程目录之外的沙箱里执行 → 在干净进程里用 exercise_checks.CHECKS 判分 → nbgrader gradebook、
反馈 HTML、grades.csv → export.py 填好 LMS 自己的成绩文件。
exercises/nbNN_exK.py（notebook NN = 讲义练习 K 的探针和检查）由练习的作者维护，其余文件（包括 exercise_checks.py、probes.py）属于引擎和流水线。

评分核心，一步一个文件（pipeline.run 的六步：collect → repair → execute → judge → record → report）：
- repair.py：按 release 配对（match_by_grade_id … match_by_position）、组装修复后的 notebook；
- sandbox.py：执行一份提交的各步（临时副本、内核的 uid、启动、看着它）；sandbox_bwrap.py（沙箱的命令行）、
  sandbox_kernel.py（放进沙箱的文件、环境变量、参数）、sandbox_forkserver.py（模板进程）、sandbox_supervisor.py
  （读评分通道、到时间就杀掉）；runner.py 是在沙箱里运行的那个脚本（只用标准库和 IPython）；
- flags.py：grades.csv 的状态（ok、repaired、suspect……）和可疑迹象（read、introspect……）的表：名字、中文标签、意思；
- pipeline.judge：在干净的进程里判分、列出可疑迹象；pipeline.status_of：这一行的状态；
- class_report.py（读数据）→ class_analysis.py（题目分析）、class_similarity.py（相似度）→ class_report_html.py（页面，
  模板在 templates/class_report/）。
"""
