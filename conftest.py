"""pytest 的全局设置：nbval 启动内核失败时重试一次；make test 的两个进程怎样分活；nbval 因随仓库发布的结果
过期而失败时给出提示；给了 --durations 时（make test）再按文件汇总用时。

nbval 启动内核失败时重试一次：
jupyter_client 先挑好空闲端口、放开，再让内核去绑定；这中间另一个进程（make test 的另一个
pytest 进程、它启动的 nbgrader）可能拿到同一个端口，内核就以 "Address already in use" 退出，
nbval 报 "Kernel died before replying to kernel_info"（jupyter/jupyter_client#276）。
这和 notebook 的内容无关，所以只对启动失败重试一次；单元格的输出照常逐个比对。
"""
import nbval.kernel
import pytest

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
# 数字是每个文件的墙钟秒数（2026-12-04 一次全新克隆的 make test 里各测试用时之和，2 核空闲机器，全程 861 秒；
# make test 最后打印的“最慢的 15 个文件”就是这个数；没列在那里的按更早的测量），只用来排顺序：不准不影响对错，
# 只影响墙钟时间。没列出的文件都在 7 秒以下，排在最后。
SLOWEST_FIRST = {
    "tests/test_experiments.py": 430,  # 在没有展示的种子 10 上重新训练 notebook 11 的 6 组模型（一个测试，378 秒）
    "tests/test_toy_tasks.py": 159,  # notebook 06（种子 10、11）和 07（种子 10、11）在没有展示的种子上重训
    "tests/test_ta_team.py": 141,  # 两个真的 grade 进程（SQLite 和 PostgreSQL）
    "tests/test_exercises.py": 132,
    "tests/test_site.py": 129,  # 构建网站（约 10 秒）再用 Chromium 在几种宽度下打开
    "tests/test_hub.py": 104,
    "tests/test_grading.py": 80,
    "tests/test_student_lab.py": 59,  # make lab / make lab-ta 各起一次 JupyterLab，打开 19 个 notebook
    "tests/test_training_details.py": 56,
    "tests/test_class_report.py": 38,
    "tests/test_postgres.py": 27,
    "tests/test_grading_forkserver.py": 22,
    "tests/test_browser.py": 21,
    "tests/test_fairness.py": 20,
    "notebooks/11_mini_gpt_vs_rnn.ipynb": 20,
    "tests/test_lms.py": 16,
    "tests/test_architectures.py": 15,
    "notebooks/09_training_details.ipynb": 15,
    "tests/test_add_exercise.py": 15,
    "notebooks/12_modern_transformer.ipynb": 14,
    "tests/test_ta_term.py": 14,
    "tests/test_modern_transformer.py": 13,
    "notebooks/10_cost_and_long_sequences.ipynb": 12,
    "notebooks/07_transformer_block.ipynb": 11,
    "notebooks/04_three_patches.ipynb": 10,
}
# 文件里特别慢的那个测试排到这个文件的最前面。xdist 在一个进程只剩不到 3 个测试没跑完时，就预先把下一个文件
# 派给它：慢测试排在文件末尾的话，预先派来的文件要等它跑完（十分钟）才开始，最后另一个进程就空等这个文件
# （一次 CI 里最后约 60 秒只有一个核在忙）。放在最前面，预先派活时只剩几个快的测试。
RUN_FIRST_IN_FILE = {"tests/test_experiments.py::test_notebook_11_claims_hold_on_a_seed_outside_the_sweep"}


def pytest_collection_modifyitems(config, items):
    def order(item):
        return -SLOWEST_FIRST.get(item.nodeid.split("::")[0], 0), item.nodeid not in RUN_FIRST_IN_FILE

    items.sort(key=order)  # sort 是稳定的：同一个文件里别的测试的顺序（notebook 的单元格顺序）不变


# --- nbval 失败时的提示 ------------------------------------------------------------------------------------
# 随仓库发布的训练结果过期时（改了 notebook 06–12 的训练单元格或 lib），nbval 的差异里只看得到来源那一行从
# “来自随仓库发布的”变成了“刚在这台机器上训练完”：在失败报告后面说明原因和该做什么。
STALE_SHIPPED = "刚在这台机器上训练完"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and ".ipynb::" in item.nodeid and STALE_SHIPPED in str(report.longrepr):
        from lib.shipped import REGENERATE_ALL  # 只在失败时导入（lib.shipped 要导入 torch）

        report.sections.append(("随仓库发布的结果过期了", "这页的训练结果不是随仓库发布的那一份了：训练单元格、它读的"
                                f"数据或函数、参数或 lib/ 改过了（lib/shipped.py）。请运行 {REGENERATE_ALL}"))


# --- 按文件汇总的用时（make test 给了 --durations）----------------------------------------------------------
# --durations 列的是单个测试；notebook 被 nbval 拆成一个单元格一项，测试文件的 fixture 摊在几项里。这里把每个
# 文件（notebook）的 setup + call + teardown 加起来，列出最慢的几个：SLOWEST_FIRST 的数字就从这里抄。
_FILE_SECONDS: dict = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not config.getoption("durations") or not _FILE_SECONDS:
        return
    slowest = sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:15]
    terminalreporter.write_sep("=", f"最慢的 {len(slowest)} 个文件（秒：每个文件的 setup + call + teardown 之和）")
    for path, seconds in slowest:
        terminalreporter.write_line(f"{seconds:8.1f}s  {path}")
