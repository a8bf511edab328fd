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
