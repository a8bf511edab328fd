"""浏览器测试要一种中文字体：没有它，Chromium 把每个汉字画成一个方块，量出来的宽度、换行都和学生看到的不一样
（手机宽度的标题栏就是这样在测试里“放得下”、在真手机上挤出屏幕的）。

Linux 上 Chromium 通过 fontconfig 找字体：`fc-list :lang=zh` 列出能显示中文的字体。别的系统自带中文字体，不检查。
"""
from __future__ import annotations

import shutil
import subprocess
import sys

NO_CJK_FONT = ("没有中文字体（fc-list :lang=zh 什么也没列出）：浏览器会把汉字画成方块，版面量的不是学生看到的样子。"
               "请运行 make system-deps（以 root；Debian：apt-get install fonts-noto-cjk）")


def missing_cjk_font() -> str | None:
    """没有中文字体时返回说明（测试用它失败），有时返回 None。"""
    if not sys.platform.startswith("linux"):
        return None
    if shutil.which("fc-list") is None:
        return "找不到 fc-list（fontconfig），没法确认有没有中文字体。" + NO_CJK_FONT.split("：", 1)[1]
    listed = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True, timeout=60).stdout
    return None if listed.strip() else NO_CJK_FONT
