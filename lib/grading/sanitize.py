"""学生写的东西进反馈 HTML 和 formgrader 之前变成安全的：能显示，不能执行。

反馈 HTML 学生和助教都会打开（助教常常在自己的 JupyterLab 里打开，那里的脚本能以助教的身份运行代码），
autograded/ 里的 notebook 由 formgrader 在助教的 Jupyter 服务器上显示。学生能控制的有：
- 代码单元格的输出。它们来自学生的内核（runner.py 和学生的代码在同一个进程里，输出的整个结构都可能是伪造的）：
  safe_outputs 从头重建每个输出，只留文字、PNG/JPEG 图片和清理过的 HTML（执行计数只能是整数）；
  JavaScript、SVG、Markdown 输出、小部件和全部输出元数据（nbconvert 的模板把 width/height 直接写进 <img>）都不要。
- Markdown 单元格（文字题的答案、学生自己加的单元格）：反馈模板在 Markdown 转成 HTML 之后用 clean_html 清理。
clean_html 用 bleach（nbconvert 本来就依赖它）按白名单保留 Markdown 和 latex2mathml 公式会用到的标签，其余的标签
转义成看得见的文字（助教看得出学生写了 <script>），链接只允许 http、https、mailto 和页内锚点，图片只允许内嵌的
PNG/JPEG/GIF。反馈页另外带一条内容安全策略（CSP，gradebook_io.render_feedback）：不运行任何脚本、不加载外部资源。
"""
from __future__ import annotations

import base64
import binascii
import re

MARKDOWN_TAGS = frozenset({
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "em", "strong", "b", "i", "u", "s", "del", "sub", "sup",
    "code", "pre", "kbd", "blockquote", "ul", "ol", "li", "dl", "dt", "dd", "a", "img", "span", "div",
    "table", "caption", "thead", "tbody", "tfoot", "tr", "th", "td", "details", "summary"})
# latex2mathml 写出的 MathML（feedback_math）
MATHML_TAGS = frozenset({
    "math", "semantics", "annotation", "mrow", "mi", "mo", "mn", "ms", "mtext", "mspace", "mfrac", "msqrt", "mroot",
    "msub", "msup", "msubsup", "munder", "mover", "munderover", "mmultiscripts", "mprescripts", "none", "mtable",
    "mtr", "mtd", "mlabeledtr", "mstyle", "mpadded", "mphantom", "menclose", "merror"})
MATHML_ATTRIBUTES = frozenset({
    "xmlns", "display", "mathvariant", "mathsize", "mathcolor", "mathbackground", "stretchy", "fence", "separator",
    "lspace", "rspace", "minsize", "maxsize", "symmetric", "largeop", "movablelimits", "form", "accent",
    "accentunder", "width", "height", "depth", "voffset", "linethickness", "notation", "displaystyle", "scriptlevel",
    "columnalign", "columnlines", "columnspacing", "columnwidth", "rowalign", "rowlines", "rowspacing", "frame",
    "framespacing", "equalrows", "equalcolumns", "align", "encoding", "rowspan", "columnspan", "open", "close"})
PLAIN_ATTRIBUTES = {"a": {"href", "title"}, "img": {"src", "alt", "title", "width", "height"},
                    "th": {"colspan", "rowspan", "align"}, "td": {"colspan", "rowspan", "align"}}
HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_LINK = re.compile(r"(https?:|mailto:|#)", re.IGNORECASE)
_IMAGE = re.compile(r"(https?:|data:image/(png|jpeg|gif);base64,)", re.IGNORECASE)
# 清理之前整段去掉（连同里面的文字）：脚本和样式表的内容当成文字显示出来没有意义，样式表还能改掉整页的样子
_BLOCKS = re.compile(r"<(script|style)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_PREFIXED = re.compile(r"<(/?)ns\d+:")
_NS_DECL = re.compile(r'\s+xmlns:ns\d+="[^"]*"')
SAFE_OUTPUT_TYPES = ("text/plain", "text/html", "image/png", "image/jpeg")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")

CSP = ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
       "img-src data:; font-src data:; base-uri 'none'; form-action 'none'\">")


def _allowed(tag: str, name: str, value: str) -> bool:
    if tag in MATHML_TAGS:
        return name in MATHML_ATTRIBUTES
    if name == "class":  # 代码高亮（pygments）和标题的锚点要用；只影响样子
        return True
    if name == "id":
        return tag in HEADINGS
    if name not in PLAIN_ATTRIBUTES.get(tag, ()):
        return False
    if name == "href":
        return bool(_LINK.match(value.strip()))
    if name == "src":
        return bool(_IMAGE.match(value.strip()))
    return True


def clean_html(html) -> str:
    """一段 HTML（学生的 Markdown 转出来的，或输出里的 text/html）→ 只剩白名单里的标签和属性；别的标签转义成文字。"""
    import bleach
    text = html.decode() if isinstance(html, bytes) else str(html)
    # nbconvert 把标题里的公式写成 <ns0:math …>（标题经过 XML 处理）：换回浏览器认得的 <math>
    text = _PREFIXED.sub(r"<\1", _NS_DECL.sub("", text))
    return bleach.clean(_BLOCKS.sub("", text), tags=MARKDOWN_TAGS | MATHML_TAGS, attributes=_allowed,
                        protocols=["http", "https", "mailto", "data"], strip=False, strip_comments=True)


def _text(value) -> str | None:
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return "".join(value)
    return value if isinstance(value, str) else None


def _image(value) -> str | None:
    """base64 的图片（nbconvert 把它原样写进 <img src="data:...">）：只接受真的 base64。"""
    text = _text(value)
    if text is None or not _BASE64.fullmatch(text):
        return None
    try:
        base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    return text


def _count(value) -> int | None:
    return value if type(value) is int else None


def _data(data) -> dict:
    out = {}
    if not isinstance(data, dict):
        return out
    for mime in SAFE_OUTPUT_TYPES:
        if mime not in data:
            continue
        value = _image(data[mime]) if mime.startswith("image/") else _text(data[mime])
        if value is not None:
            out[mime] = clean_html(value) if mime == "text/html" else value
    return out


def safe_output(out) -> dict | None:
    """一个输出（nbformat 的样子）按它的种类从头重建；认不出的种类丢掉（None）。"""
    if not isinstance(out, dict):
        return None
    kind = out.get("output_type")
    if kind == "stream":
        text = _text(out.get("text"))
        return None if text is None else {"output_type": "stream",
                                          "name": "stderr" if out.get("name") == "stderr" else "stdout", "text": text}
    if kind == "error":
        lines = out.get("traceback")
        lines = [x for x in lines if isinstance(x, str)] if isinstance(lines, list) else []
        return {"output_type": "error", "ename": _text(out.get("ename")) or "Error",
                "evalue": _text(out.get("evalue")) or "", "traceback": lines}
    if kind == "display_data":
        return {"output_type": "display_data", "data": _data(out.get("data")), "metadata": {}}
    if kind == "execute_result":
        return {"output_type": "execute_result", "execution_count": _count(out.get("execution_count")),
                "data": _data(out.get("data")), "metadata": {}}
    return None


def safe_outputs(outputs) -> list:
    """一个单元格的全部输出（来自学生的内核）→ 安全的输出。"""
    if not isinstance(outputs, list):
        return []
    return [o for o in (safe_output(x) for x in outputs) if o is not None]


# Markdown 里的代码：行首的围栏代码块（```…```、~~~…~~~，同样长的围栏结束），和段落里的代码 `…`、``…``（CommonMark：
# 同样长的一串反引号结束，不跨空行；反斜杠转义的反引号不开始代码）。认不准时宁可当成文字（多转义一个 "<" 只是难看），
# 不能把渲染器不当代码的东西当成代码放过
_MD_CODE = re.compile(r"(?ms)^ {0,3}(?P<fence>`{3,}|~{3,})[^\n]*\n.*?^ {0,3}(?P=fence)[ \t]*$"
                      r"|(?<![`\\])(?P<ticks>`+)(?!`)(?:(?!\n[ \t]*\n).)+?(?<!`)(?P=ticks)(?!`)")
# 链接、图片的目标：[文字](目标 "标题")、![图](目标)，和引用式链接的定义 [名字]: 目标
_LINK_OPEN = re.compile(r"\]\([ \t]*\n?[ \t]*")
_LINK_DEFINITION = re.compile(r"(?m)^ {0,3}\[[^\]\n]+\]:[ \t]*\n?[ \t]*")
# 允许的链接和图片目标（浏览器读之前先去掉实体、反斜杠转义、空白和控制字符再比）；没有冒号的相对地址也允许（没有 scheme）
# 公式里的 "<"：后面加一个空格（"< img" 不是 HTML 标签；数学模式里空格不显示，\text{} 里多一个空格）
_MATH_LT = re.compile(r"<(?!\s)")
_SAFE_TARGET = re.compile(r"(https?:|mailto:|#|attachment:|data:image/(png|jpeg|gif);base64,)", re.IGNORECASE)


def _target_end(text: str, i: int) -> int:
    """Markdown 链接目标从 i 开始，到哪里结束（CommonMark：不含空白，括号要配对，反斜杠转义下一个字符）。"""
    depth = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch.isspace() or (ch == ")" and depth == 0):
            break
        depth += {"(": 1, ")": -1}.get(ch, 0)
        i += 1
    return min(i, len(text))


def safe_link_target(target: str) -> bool:
    """链接或图片的目标能不能留下：只留 http、https、mailto、页内锚点、单元格附件（attachment:）、内嵌的 PNG/JPEG/GIF，
    和没有冒号的相对地址。比较之前像渲染器和浏览器那样解码实体（java&#58;script）、去掉反斜杠转义和空白、控制字符
    （java&#9;script:）。"""
    import html
    plain = re.sub(r"[\x00-\x20\x7f]", "", html.unescape(target.replace("\\", "")))
    return ":" not in plain or bool(_SAFE_TARGET.match(plain))


def _neutralise_links(text: str) -> str:
    """不允许的链接和图片目标（javascript:、vbscript:、data:text/html……）换成 "#"：看得见的文字照样显示，点了也不去哪里。"""
    out, last = [], 0
    starts = sorted([*(m.end() for m in _LINK_OPEN.finditer(text)), *(m.end() for m in _LINK_DEFINITION.finditer(text))])
    for i in starts:
        if i < last:
            continue
        end = _target_end(text, i)
        if not safe_link_target(text[i:end]):
            out += [text[last:i], "#"]
            last = end
    return "".join(out) + text[last:]


def safe_markdown(source: str) -> str:
    """学生写的 Markdown（文字题的答案、自己加的单元格）：代码之外的 "<" 写成 "&lt;"（公式里在它后面加一个空格：
    "< img" 不再是标签，公式照样显示小于号），不允许的链接和图片目标（javascript:、data:text/html……，见 safe_link_target）换成 "#"。显示出来还是同样的字，
    但不再是 HTML 标签、不再是能运行脚本的链接：formgrader 原样显示 autograded/ 里的 Markdown（nbgrader 不清理它），
    助教在自己的 Jupyter 里打开时，学生写的 <script>、[点这里](javascript:…) 就能以助教的身份运行（fe44r M3：公式 $…$
    里的 <img onerror> 和 javascript: 链接以前留着）。代码（`…`、```…```）不动：渲染器自己转义它。"""
    from .feedback_math import _DISPLAY, _INLINE
    pieces, last = [], 0
    for m in _MD_CODE.finditer(source):
        pieces += [source[last:m.start()], m.group(0)]
        last = m.end()
    pieces.append(source[last:])
    for i in range(0, len(pieces), 2):  # 偶数下标是代码之外的文字
        text = _neutralise_links(pieces[i])
        parts, last = [], 0
        for m in sorted([*_DISPLAY.finditer(text), *_INLINE.finditer(text)], key=lambda m: m.start()):
            if m.start() < last:
                continue  # $$…$$ 里面又认出的 $…$
            parts += [text[last:m.start()].replace("<", "&lt;"), _MATH_LT.sub("< ", m.group(0))]
            last = m.end()
        pieces[i] = "".join(parts) + text[last:].replace("<", "&lt;")
    return "".join(pieces)


def safe_count(value) -> int | None:
    """单元格的执行计数（模板把它原样写进 In [...]）：只能是整数。"""
    return _count(value)
