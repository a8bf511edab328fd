"""pytest 的全局设置：nbval 启动内核失败时重试一次。

jupyter_client 先挑好空闲端口、放开，再让内核去绑定；这中间另一个进程（make test 的另一个
pytest 进程、它启动的 nbgrader）可能拿到同一个端口，内核就以 "Address already in use" 退出，
nbval 报 "Kernel died before replying to kernel_info"（jupyter/jupyter_client#276）。
这和 notebook 的内容无关，所以只对启动失败重试一次；单元格的输出照常逐个比对。
"""
import nbval.kernel

_start_new_kernel = nbval.kernel.start_new_kernel


def _start_new_kernel_retrying(*args, **kwargs):
    try:
        return _start_new_kernel(*args, **kwargs)
    except RuntimeError as error:  # "Kernel died before replying…" / "Kernel didn't respond in N seconds"
        print(f"nbval：内核没能启动（{error}），重试一次")
        return _start_new_kernel(*args, **kwargs)


nbval.kernel.start_new_kernel = _start_new_kernel_retrying


# --- 两个 pytest 进程怎样分活（make test 用 pytest -n 2 --dist loadscope --no-loadscope-reorder）----------
# loadscope 把一个文件（一个 notebook）整个交给一个进程，按收集的顺序一个个发出去。最慢的先发（“最长的先做”），
# 剩下的短活在两个进程之间自然填平；不然最慢的那个文件最后才开始，另一个进程早就闲着了。
# 数字是每个文件大约的秒数（按 make test 打印的 --durations 估的，2 核空闲机器），只用来排顺序：不准不影响对错，只影响墙钟时间。
SLOWEST_FIRST = {
    "tests/test_experiments.py": 520,  # 在没有展示的种子上重新训练 notebook 11 的 7 个模型
    "tests/test_hub.py": 185,
    "tests/test_exercises.py": 250,
    "tests/test_grading.py": 150,
    "tests/test_training_details.py": 90,
    "tests/test_modern_transformer.py": 25,  # 在没有展示的种子上重新训练 notebook 12 的 2 个模型（加载机器上测的）
    "tests/test_toy_tasks.py": 90,
    "notebooks/11_mini_gpt_vs_rnn.ipynb": 80,
    "tests/test_fairness.py": 70,
    "notebooks/09_training_details.ipynb": 60,
    "tests/test_grading_forkserver.py": 55,
    "notebooks/08_architectures.ipynb": 45,
    "tests/test_postgres.py": 45,
    "notebooks/12_modern_transformer.ipynb": 45,
    "tests/test_add_exercise.py": 40,
}


def pytest_collection_modifyitems(config, items):
    def cost(item):
        return -SLOWEST_FIRST.get(item.nodeid.split("::")[0], 0)

    items.sort(key=cost)  # sort 是稳定的：同一个文件里的顺序（notebook 的单元格顺序）不变
