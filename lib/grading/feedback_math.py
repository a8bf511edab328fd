"""反馈 HTML 里的公式：评分时就把 Markdown 里的 $…$、$$…$$ 换成 MathML（latex2mathml），浏览器自己排版。

以前反馈页从 CDN 加载 MathJax：离线时学生看到的是原样的 $…$，而 CDN 在很多学生那里很慢或打不开。
MathML 是浏览器原生支持的（Chrome/Edge 109 起、Firefox、Safari），不需要任何脚本和网络，文件仍然是一个自包含的 HTML，
每个公式只多几百字节。

- 代码（``行内代码``、``` 围起来的代码块）里的 $ 不动；``\\$`` 是转义的美元符号，不是公式。
- latex2mathml 不认识的写法（很少见）保留原样的 TeX，用等宽字体显示，不会丢内容。
- 没装 latex2mathml 时（旧环境）什么也不换，反馈照旧用 MathJax（``available()`` 为 False）。
"""
from __future__ import annotations

import html
import re

# 代码块、行内代码：原样保留。然后是 $$…$$（可以跨行）和 $…$（不跨段落，前后不是空格）
_CODE = re.compile(r"(```.*?```|~~~.*?~~~|`[^`\n]+`)", re.DOTALL)
_DISPLAY = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$", re.DOTALL)
_INLINE = re.compile(r"(?<![\\$])\$(?![\s$])((?:\\.|[^$\\\n])+?)(?<!\s)\$(?!\$)")
# nbconvert 的 mathjax() 宏写出的脚本（CDN 上的 MathJax 和它的配置）
_MATHJAX = re.compile(r"\s*(?:<!-- Loading mathjax macro -->\s*)?<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->",
                      re.DOTALL)


def available() -> bool:
    try:
        import latex2mathml.converter  # noqa: F401
    except ImportError:
        return False
    return True


def _mathml(tex: str, display: bool) -> str:
    from latex2mathml.converter import convert

    try:
        out = convert(tex.strip(), display="block" if display else "inline")
    except Exception:  # noqa: BLE001  不认识的写法：保留原样的 TeX
        text = html.escape(("$$" if display else "$") + tex + ("$$" if display else "$"))
        return f'<code class="tex">{text}</code>'
    return f"\n\n{out}\n\n" if display else out


def markdown_with_mathml(source: str) -> str:
    """把一段 Markdown 里的公式换成 MathML（代码里的不动）。"""
    pieces = _CODE.split(source)
    for i in range(0, len(pieces), 2):  # 偶数下标是代码之外的文字
        text = _DISPLAY.sub(lambda m: _mathml(m.group(1), True), pieces[i])
        pieces[i] = _INLINE.sub(lambda m: _mathml(m.group(1), False), text)
    return "".join(pieces)


def convert_notebook(nb: dict) -> int:
    """原地把每个 Markdown 单元格里的公式换成 MathML；返回换了几个单元格。没装 latex2mathml 时什么也不做。"""
    if not available():
        return 0
    changed = 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "markdown":
            continue
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else (src or "")
        new = markdown_with_mathml(src)
        if new != src:
            cell["source"] = new
            changed += 1
    return changed


def drop_mathjax(page: str) -> str:
    """公式已经是 MathML 了：去掉从 CDN 加载 MathJax 的脚本（离线时它只会报错）。"""
    return _MATHJAX.sub("", page, count=1)
