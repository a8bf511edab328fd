"""第 7 讲配套代码。学生只需要读 transformer.py；grading/ 是助教的评分工具。"""
