"""学生和教师/助教共用的交换设置：nbgrader 的 release/fetch/submit/collect/feedback 全都走交换服务 ngshare。

student/ 和 grader/ 的 nbgrader_config.py 用 load_subconfig 加载这个文件。ngshare 的地址来自 hub 给服务器的
环境变量 LECTURE07_NGSHARE_URL（单机：http://127.0.0.1:10101/services/ngshare；Kubernetes：经过代理，
http://proxy-public/services/ngshare）。每次调用带着服务器的 JUPYTERHUB_API_TOKEN，ngshare 据此认人。

插件是 ngshare-exchange 0.5.3（PyPI 上的最新版，2022 年 11 月）。它有一个已在上游修好、但没有发布的错误
（LibreTexts/ngshare_exchange#24，修复 fdfb688，2024 年 10 月）：Assignment List 里已取回的作业，每个 notebook
显示成它的绝对路径而不是名字。下面的 ExchangeList 只做那个修复做的事（notebook_id 取文件名去掉 .ipynb）；
ngshare-exchange 发布新版之后删掉它，改回 ngshare_exchange.ExchangeList。
"""
import os

from ngshare_exchange import ExchangeList as _NgshareExchangeList

c = get_config()  # noqa: F821


class ExchangeList(_NgshareExchangeList):
    """ngshare_exchange 0.5.3 的 ExchangeList，加上上游 fdfb688 的修复（已取回的 notebook 用名字，不用路径）。"""

    def parse_assignments(self):
        assignments = super().parse_assignments()
        for info in assignments:
            if info.get("status") == "fetched":
                for nb in info["notebooks"]:
                    nb["notebook_id"] = os.path.splitext(os.path.basename(nb["path"]))[0]
        return assignments


c.ExchangeFactory.exchange = "ngshare_exchange.Exchange"
c.ExchangeFactory.fetch_assignment = "ngshare_exchange.ExchangeFetchAssignment"
c.ExchangeFactory.fetch_feedback = "ngshare_exchange.ExchangeFetchFeedback"
c.ExchangeFactory.release_assignment = "ngshare_exchange.ExchangeReleaseAssignment"
c.ExchangeFactory.release_feedback = "ngshare_exchange.ExchangeReleaseFeedback"
c.ExchangeFactory.list = ExchangeList
c.ExchangeFactory.submit = "ngshare_exchange.ExchangeSubmit"
c.ExchangeFactory.collect = "ngshare_exchange.ExchangeCollect"
# ngshare_exchange 的 Exchange 的设置项就叫 _ngshare_url（它的 configureExchange() 设的也是它）
c.Exchange._ngshare_url = os.environ["LECTURE07_NGSHARE_URL"]
