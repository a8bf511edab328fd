"""一行成绩能说的话，两张表：状态（grades.csv 的 status 列）和可疑迹象（status 里 suspect 的理由）。

每一项的名字（grades.csv、评分通道和存下的执行结果里的写法）、中文标签和意思并排写在这里。发出它的地方
（guard.py、sandbox_supervisor.py、pipeline.status_of、collect.annotate）和解读它的地方（pipeline.judge、
pipeline.summary）都用这两张表，不再各写一份拼写。

只用标准库：guard.py 在沙箱里运行，看不到 lib/。sandbox_kernel.py 把这个文件和 runner.py、guard.py 一起放进沙箱
（在那里叫 _grader_flags.py），guard.py 从那里导入它。
"""
from __future__ import annotations

from enum import Enum


class Status(Enum):
    """grades.csv 的 status。一行可以同时有几个，用 + 连接（join），汇总里按这里的先后排。"""

    OK = "ok", "正常", "评完了，下面的情况一个也没有"
    REPAIRED = "repaired", "修复过", ("按 release/ 修复过格式（repair.py）：补回 nbgrader 元数据、合并重复单元格、"
                                      "补回删掉的测试、还原单元格类型")
    TIMEOUT = "timeout", "超时", "某个单元格或某个检查超时，被中断或强制结束；其余照常评分"
    CRASHED = "crashed", "崩溃", "内核崩溃、内存超限，或创建的子进程超过上限；崩溃的单元格跳过后重跑"
    SUSPECT = "suspect", "可疑", ("有动手脚的迹象（Flag 里的任何一种，或 pipeline.judge 看到的替换函数、伪造数据、"
                                  "伪造的“测试通过”）：分数照常只按干净的检查给，请人工看 detail")
    QUARANTINED = "quarantined", "隔离", "没评：文件认不出或坏了，复制进 .grading/作业/quarantine/，原因在 detail"
    MISSING = "missing", "未交", "名单上的学生（或交了别的 notebook 的学生）没交这个 notebook：score 留空，不是 0 分"
    ERROR = "error", "评分出错", "评分这边的问题（内核没能启动、gradebook 写不进去）：不是学生的，不记分，下次运行重评"
    INTERRUPTED = "interrupted", "中断", "Ctrl-C 时这份还没评：再运行同一个命令就评"
    LATE = "late", "迟交", "提交时间晚于截止时间（或 LMS 标了迟交）：迟交扣分由 nbgrader 按课程设置计算"

    def __new__(cls, name: str, label: str, meaning: str):
        obj = object.__new__(cls)
        obj._value_ = name
        obj.label = label
        obj.meaning = meaning
        return obj

    @staticmethod
    def join(statuses: list[Status]) -> str:
        """grades.csv 里的写法：repaired+suspect；一个也没有时 ok。"""
        return "+".join(s.value for s in statuses) or Status.OK.value

    @staticmethod
    def split(text: str) -> list[str]:
        """join 的反面：grades.csv 里的一格 → 各个状态的名字（不认识的名字原样保留）。"""
        return text.split("+")

    @staticmethod
    def add(text: str, status: Status) -> str:
        """已有的状态再加上一个：ok 加 late 是 late，repaired 加 late 是 repaired+late。"""
        return status.value if text == Status.OK.value else f"{text}+{status.value}"

    @staticmethod
    def sort_key(name: str) -> tuple:
        """汇总里的先后：按这张表的顺序，不认识的名字排在最后（按字母）。"""
        order = [s.value for s in Status]
        return (order.index(name) if name in order else len(order), name)


class Flag(Enum):
    """可疑迹象的种类。by：谁发出。runner 的由学生的内核里的审计钩子发现、马上经评分通道发给评分进程
    （guard.py）；sandbox 的由评分进程自己看通道时发现（sandbox_supervisor）。
    pipeline.judge 把同一种的写成一条“标签：说明、说明”，有一条这一行就是 suspect。"""

    READ = "read", "runner", "访问了评分相关路径", ("打开、列出或进入课程目录，或路径里有 solutions、source、gradebook.db、"
                                                  ".grading 这类名字（guard.py；有 bwrap 时课程目录是空的）")
    WRITE = "write", "runner", "在临时目录之外写文件", ("在这份提交的临时副本（和沙箱私有的 /tmp）之外写、删、改名、"
                                                      "改权限（guard.py）")
    NETWORK = "network", "runner", "尝试联网", "socket.connect（guard.py；有 bwrap 时沙箱里本来就没有网络）"
    PROCESS = "process", "runner", "创建了子进程", ("没有沙箱（bubblewrap）时，fork、subprocess、os.system……第一次创建时发出"
                                                   "（guard.py；子进程读的文件审计钩子看不到）；沙箱里子进程看不到课程、别的学生"
                                                   "和密钥，!ls、!pip list 这样的创建不算可疑，超过 Limits.max_forks 时（fork"
                                                   " 炸弹）才发出。有没有沙箱，超过上限之后的创建都被拒绝，这一行另外是 crashed")
    EQ = "eq", "runner", "自定义了 __eq__/__bool__", ("学生的单元格里定义了改写 __eq__、__bool__ 或 __array__ 的类"
                                                     "（“和什么都相等”的把戏；@dataclass 生成的 __eq__、读了第二个参数 other 的"
                                                     " __eq__ 不算；单元格全部跑完后检查）")
    INTROSPECT = "introspect", "runner", "检查时窥探评分程序（调用栈、对象）", (
        "检查阶段学生的代码拿帧、跟踪函数、ctypes 读内存；任何时候用 gc 找对象、读 /proc/…/mem、改写函数的 __code__，"
        "或把代码伪装成库或评分程序；同时被拦下（PermissionError，guard.py）")
    CHANNEL = "channel", "sandbox", "评分通道异常", ("评分通道上来了格式不对或不认识种类的可疑迹象，或输出超过 64 MB"
                                                   "（sandbox_supervisor）")

    def __new__(cls, name: str, by: str, label: str, meaning: str):
        obj = object.__new__(cls)
        obj._value_ = name
        obj.by = by
        obj.label = label
        obj.meaning = meaning
        return obj

    @staticmethod
    def label_of(name: str) -> str:
        """通道上的名字 → 中文标签；不认识的名字原样显示（学生在检查时改了 runner 的记录也看得出来）。"""
        try:
            return Flag(name).label
        except ValueError:
            return name


# 学生的内核经评分通道发来的可疑迹象（{"ev": "alert"}）只能是这几种，别的记作 CHANNEL
RUNNER_FLAGS = frozenset(f.value for f in Flag if f.by == "runner")
