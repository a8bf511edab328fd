"""make site：把课程做成一个静态网站（手机、投影、离线都能读），用的是 Sphinx + MyST-NB。

为什么是 Sphinx + MyST-NB 而不是 Jupyter Book 2：Jupyter Book 2 建在 mystmd（Node.js）上，构建时要从网上取主题，
离线和在国内都不可靠；Sphinx 是纯 Python、离线构建，MyST-NB 直接读 notebook 里存下的输出（nb_execution_mode = "off"：
不重新执行），中文全文搜索靠 Sphinx 自带的中文分词（装了 jieba 时用它），公式用 sphinx-mathjax-offline 包里带的 MathJax
（只复制用到的 tex-chtml 和字体），不加载任何 CDN。

    python -m lib.tools.build_site            # 输出到 _site/（git 忽略）；打开 _site/index.html 即可
    python -m lib.tools.build_site -o DIR     # 输出到别处
    python -m http.server -d _site            # 用本地服务器看：搜索结果才有摘要（file:// 下浏览器不让搜索取回别的页面）

页面：PARTS 里的各部分：notebooks/*.ipynb（按讲义的顺序）、练习的学生版 release/exercises/*.ipynb（不含
source/、solutions/）和 Markdown 写的“教师与助教”（docs/*.md 加上 CONTRIBUTING.md），各有一个目录页。Markdown 页面里
指向仓库文件（不是网站页面）的相对链接换成 GitHub 上同一个文件的地址（pyproject.toml 的 [tool.course]），指向不存在的
文件时构建失败。
notebook 每页标题下是收起的一行“运行这一页”（点开：下载仓库里的原文件、在 Colab 里打开、在自己的电脑或 JupyterHub 上打开），
手机上第一屏就是正文。页面里用相对路径引用的图片（Colab 徽章 assets/colab-badge.svg 等）复制到网站里。
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "_build" / "site-src"
OUT = ROOT / "_site"
MATHJAX_FILES = ("tex-chtml.js", "output/chtml/fonts", "ui", "a11y", "input/tex/extensions", "input/mml.js",
                 "input/mml")  # input/mml：右键菜单里的“无障碍”模式要用
ORIGINALS = "originals"  # 下载用的原文件（网站那一份多了标题下的说明）
# 手机上：长的代码名和公式不撑开整页（在自己的位置换行或横向滚动）；宽表的第一列（行名）不挤成两三个字一行，
# 横向滚动时留在左边
CSS = """
.bd-article code, .bd-article .admonition, .bd-article h1, .bd-article h2, .bd-article h3 { overflow-wrap: anywhere; }
.bd-article .admonition code.literal, .bd-article .admonition code.literal span.pre,
.bd-article details code.literal, .bd-article details code.literal span.pre {
  white-space: normal; word-break: break-all; }
mjx-container[display="true"], .bd-article mjx-container { max-width: 100%; overflow-x: auto; overflow-y: hidden; }
.bd-article table td:first-child, .bd-article table th:first-child { white-space: nowrap; position: sticky; left: 0;
  background: var(--pst-color-background); z-index: 1; }
/* 页面输出里的数表（vs_lecture 的“讲义 / 本课程的结果”、每个种子的表）：手机上不把一列挤成一个字宽、数字挤在一起，
   整张表在自己的框里横向滚动 */
.bd-article .cell_output .output.text_html { overflow-x: auto; max-width: 100%;
  /* 表比屏幕宽时，能滚的那一边有一道阴影（滚到头就没了）：手机上看得出右边还有列 */
  background: linear-gradient(to right, var(--pst-color-background) 30%, transparent) left / 2em 100% no-repeat local,
    linear-gradient(to left, var(--pst-color-background) 30%, transparent) right / 2em 100% no-repeat local,
    radial-gradient(farthest-side at 0 50%, rgba(0, 0, 0, 0.25), transparent) left / 0.8em 100% no-repeat scroll,
    radial-gradient(farthest-side at 100% 50%, rgba(0, 0, 0, 0.25), transparent) right / 0.8em 100% no-repeat scroll; }
/* 表的标题靠左：宽表的标题不居中到屏幕外面去 */
.bd-article .cell_output table caption { text-align: left; }
.bd-article .cell_output table td, .bd-article .cell_output table th { white-space: nowrap; padding: 0.15em 0.6em; }
/* 证据表（lib.claims / lib.viz.details，点开才看）：第一列是一整句结论，换行而不是把别的列挤窄 */
details.evidence table td:first-child, details.evidence table th:first-child { white-space: normal; position: static;
  min-width: 12em; }
details.evidence > summary { cursor: pointer; }
/* 指南（Markdown 页面，带 guide-page 标记）：表的每一格都是一句话，第一列也换行、不粘在左边；每列至少 8 个字宽，
   手机上整张表在自己的框里横向滚动，而不是挤成一两个字一行 */
.bd-article:has(.guide-page) table td, .bd-article:has(.guide-page) table th { white-space: normal; position: static;
  min-width: 8em; }
/* 指南里长的路径（release/exercises/05_….ipynb）在行尾换行，不伸出手机屏幕（Sphinx 给 span.pre 的是 nowrap） */
.bd-article:has(.guide-page) code.literal span.pre { white-space: normal; }
/* 手机和平板（主题在 960 像素以下把导航收进侧栏）：标题栏里站点标题可以缩、换行，搜索和“本页小节”按钮总在屏幕上。
   主题让标题不缩（flex-shrink: 0），中文标题在 390 像素宽时把右边两个按钮挤出屏幕 */
@media (max-width: 959.98px) {
  .bd-header .navbar-header-items__start, .bd-header .navbar-header-items__start .navbar-item,
  .bd-header .navbar-brand { flex-shrink: 1; min-width: 0; }
  .bd-header .navbar-brand { white-space: normal; }
  .bd-header .navbar-brand p.title { font-size: 1rem; line-height: 1.3; overflow-wrap: anywhere; }
  .bd-header .navbar-persistent--mobile { flex-shrink: 0; }
}
/* 手机上标题小一号：第一屏留给正文 */
@media (max-width: 575.98px) { .bd-article h1 { font-size: 1.75rem; } }
/* “运行这一页”：标题下面收起的一行，点开才是下载、本地、JupyterHub、Colab 的说明 */
details.run-this-page { margin: 0.5rem 0 1.25rem; padding: 0.4rem 0.75rem; border-radius: 0.25rem;
  border-left: 0.2rem solid var(--pst-color-success); background: var(--pst-color-surface); font-size: 0.9rem; }
details.run-this-page > summary { cursor: pointer; font-weight: 600; color: var(--pst-color-text-muted); }
details.run-this-page[open] > summary { margin-bottom: 0.5rem; }
details.run-this-page ul { margin-bottom: 0; }
.search-file-note { margin-top: 0.75rem; color: var(--pst-color-text-muted); font-size: 0.9rem; }
"""
# 搜索页的三处修补（这个文件在 searchtools.js 之前加载，所以等 DOMContentLoaded 再改）：
# 1. Sphinx 8.2 的搜索结果那一行用了复数形式，zh_CN 的翻译里没有这一条（它只有旧的 "page(s)" 写法）。
# 2. 每条结果的摘要：Sphinx 取回那一页（fetch），从 [role="main"] 的文字里截出搜索词前后的一段。PyData 主题的
#    [role="main"] 从路径导航开始，接着是标题和“运行这一页”：标题里有搜索词的页（往往是最该看的那一页）摘要就只是
#    把路径和标题又念一遍。截之前先去掉这三样。
# 3. 直接打开网页文件（file://）时浏览器不许 fetch 别的文件，结果只有标题：告诉读者怎样看到摘要。
SEARCH_JS = """
document.addEventListener("DOMContentLoaded", () => {
  if (typeof Documentation !== "undefined")
    Documentation.TRANSLATIONS["Search finished, found one page matching the search query."] =
      ["搜索完成，找到 ${resultCount} 页。", "搜索完成，找到 ${resultCount} 页。"];
  if (typeof Search === "undefined") return;
  const htmlToText = Search.htmlToText;
  Search.htmlToText = (html, anchor) => {
    const doc = new DOMParser().parseFromString(html, "text/html");
    doc.querySelectorAll(".bd-header-article, details.run-this-page, article h1").forEach((e) => e.remove());
    return htmlToText(doc.documentElement.outerHTML, anchor);
  };
  const results = document.getElementById("search-results");
  if (results && location.protocol === "file:") {
    const note = document.createElement("p");
    note.className = "search-file-note";
    note.innerHTML = "直接打开的网页文件里，浏览器不让搜索读取别的页面，所以结果只有标题、没有摘要。" +
      "用 <code>python -m http.server</code> 打开可以看到摘要：在网站的文件夹里运行它，再打开 " +
      "<code>http://localhost:8000/search.html</code>。";
    results.before(note);
  }
});
"""
FAVICON = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#3b5b92"/>'
           '<text x="8" y="12" font-size="10" text-anchor="middle" fill="#fff" font-family="sans-serif">7</text></svg>\n')


def _course() -> dict:
    import tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["course"]


RUN_SUMMARY = "运行这一页：下载、本地或 Colab"  # 收起时的一行：360 像素宽的手机上也是一行（tests/test_site.py 检查）


def run_box(rel: Path) -> str:
    """标题下面收起的一行“运行这一页”（HTML 的 <details>），点开是怎样运行（下载、本地、JupyterHub、Colab）。
    rel：相对于仓库根目录的路径。下载的是仓库里的原文件（originals/ 下的一份，不是网站改过的这一份）。
    <details> 和 </details> 各是一个 HTML 块，中间空一行，所以列表照常按 MyST 解析（{download} 把文件复制进网站）。"""
    course = _course()
    repo, ref = course["repository"].rstrip("/"), course["ref"]
    colab = f"https://colab.research.google.com/github/{repo.split('github.com/')[1]}/blob/{ref}/{rel.as_posix()}"
    original = "../" * (len(rel.parts) - 1) + f"{ORIGINALS}/{rel.as_posix()}"
    return (f'<details class="run-this-page">\n<summary>{RUN_SUMMARY}</summary>\n\n'
            f"- {{download}}`下载 {rel.name} <{original}>`（直接打开网页文件时，浏览器可能把它显示成文字：右键 → 链接另存为）。"
            f"在自己的电脑上：课程仓库（{repo}）里运行 `make lab` 打开 JupyterLab，再打开 `{rel.as_posix()}`。\n"
            f"- 学校的 JupyterHub：在 Assignment List 里取课程，或者把下载的文件上传到你的服务器。\n"
            f"- [在 Google Colab 里打开]({colab})（需要能访问 Google；打开后先 **文件 → 在云端硬盘中保存一份副本**，"
            f"否则关掉页面改动就没了；第一个代码单元格会取回同一版本的课程代码）。\n"
            f"- 这里显示的是课程仓库里存下的输出，网页上不能运行代码，也不能交作业。\n\n</details>\n")


# Markdown 的图片 ![说明](路径) 和 HTML 的 <img src="路径">
IMAGE_REF = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)|<img\b[^>]*?\bsrc\s*=\s*[\"']([^\"']+)")


def copy_relative_images(text: str, src: Path, dst: Path, root: Path | None = None) -> list[Path]:
    """text 是 src（仓库里的一页）的 Markdown：它用相对路径引用的图片按同样的相对位置复制到 dst 旁边，网站里的这一页
    照原样引用它们（Sphinx 再把它们收进 _images/）。网址、data:、attachment: 和绝对路径不管。图片必须在 root（默认
    仓库根目录）里面、必须存在：否则网站上是一张坏图，宁可构建失败并说清是哪一页的哪个路径。返回复制的文件。"""
    root = (root or ROOT).resolve()
    copied = []
    for match in IMAGE_REF.finditer(text):
        ref = (match.group(1) or match.group(2)).split("#")[0].split("?")[0]
        if not ref or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", ref) or ref.startswith(("/", "\\")):
            continue
        image = (src.parent / unquote(ref)).resolve()
        if not image.is_relative_to(root) or not image.is_file():
            raise SystemExit(f"{src} 引用的图片 {ref} 不在仓库里（{image}）：网站上会是一张坏图")
        target = Path(os.path.normpath(dst.parent / unquote(ref)))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(image, target)
        copied.append(target)
    return copied


def _prepare_notebook(src: Path, build: Path, rel: Path, title_suffix: str = "", pages: frozenset = frozenset()) -> str:
    """把一个 notebook 复制成网站的一页：标题（加 title_suffix）单独一格，下面紧跟收起的“运行这一页”；用相对路径
    引用的图片一起复制。原文件另存一份在 originals/，下载链接给的是它。
    返回标题。"""
    original, dst = build / ORIGINALS / rel, build / rel
    original.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, original)
    nb = json.loads(src.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = "".join(cell["source"])
            copy_relative_images(cell["source"], src, dst)
    head, _, rest = nb["cells"][0]["source"].partition("\n")
    title = head.lstrip("# ").strip() + title_suffix
    nb["cells"][0]["source"] = rest.lstrip("\n")
    nb["cells"][0:0] = [{"cell_type": "markdown", "metadata": {}, "source": f"# {title}"},
                        {"cell_type": "markdown", "metadata": {}, "source": run_box(rel)}]
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    return title


# 代码（``` 围起来的块、`行内代码`）原样跳过；其余的 [文字](目标)，不含图片 ![…](…)
CODE_OR_LINK = re.compile(r"(```.*?```|`[^`\n]*`)|(?<!!)(\[[^\]\n]*\]\()\s*<?([^)\s>]+)>?\s*\)", re.DOTALL)


def site_links(text: str, src: Path, pages: set[Path], root: Path | None = None) -> str:
    """Markdown 页面 src 里的相对链接：指向网站里的页面（pages，仓库里的路径）的照原样留着（页面在网站里的相对位置
    和在仓库里相同，MyST 把它们解析成页面之间的链接，#标题 也行）；指向仓库里别的文件或文件夹的，换成 GitHub 上同一个
    文件的地址；指向不存在的文件时构建失败，说出是哪一页的哪个链接（网站上不留坏链接）。"""
    root = (root or ROOT).resolve()
    course = _course()
    repo, ref = course["repository"].rstrip("/").removesuffix(".git"), course["ref"]

    def fix(match: re.Match) -> str:
        if match.group(1):
            return match.group(1)
        opening, target = match.group(2), match.group(3)
        if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return match.group(0)
        path, _, anchor = target.partition("#")
        resolved = (src.parent / unquote(path)).resolve()
        if not resolved.is_relative_to(root) or not resolved.exists():
            raise SystemExit(f"{src.relative_to(root) if src.is_relative_to(root) else src} 的链接 {target} "
                             f"指向不存在的文件（{resolved}）：网站上会是一个坏链接")
        if resolved in pages:
            return match.group(0)
        kind = "tree" if resolved.is_dir() else "blob"
        url = f"{repo}/{kind}/{ref}/{resolved.relative_to(root).as_posix()}" + (f"#{anchor}" if anchor else "")
        return f"{opening}{url})"

    return CODE_OR_LINK.sub(fix, text)


def _prepare_markdown(src: Path, build: Path, rel: Path, title_suffix: str = "", pages: frozenset = frozenset()) -> str:
    """把一个 Markdown 页面（docs/*.md、CONTRIBUTING.md）复制进网站，连同它用相对路径引用的图片；链接见 site_links。
    返回标题（第一行）。"""
    text = site_links(src.read_text(encoding="utf-8"), src, set(pages))
    copy_relative_images(text, src, build / rel)
    text += '\n\n<span class="guide-page"></span>\n'  # 网站的样式认它（见 CSS）
    (build / rel).parent.mkdir(parents=True, exist_ok=True)
    (build / rel).write_text(text, encoding="utf-8")
    return text.partition("\n")[0].lstrip("# ").strip() + title_suffix


@dataclass(frozen=True)
class Part:
    """网站的一部分：仓库里的一个文件夹（folder，相对于仓库根目录）里的页面，和一个目录页。页面按文件名排序；
    order 里列出的（文件名，不带后缀）排在最前面、按列出的顺序；extra 是文件夹之外的页面（仓库里的路径，排在最后，
    在网站里的位置和在仓库里相同）。"""
    folder: str
    heading: str
    intro: str
    pattern: str = "*.ipynb"     # "*.md"：Markdown 页面
    title_suffix: str = ""
    order: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()

    def pages(self, root: Path = ROOT) -> list[Path]:
        rank = {stem: i for i, stem in enumerate(self.order)}
        found = sorted((root / self.folder).glob(self.pattern), key=lambda p: (rank.get(p.stem, len(rank)), p.name))
        return found + [root / e for e in self.extra]

    def toctree_names(self, root: Path = ROOT) -> list[str]:
        """目录页（folder/index.md）里每一页的名字：相对于 folder、不带后缀。"""
        return [Path(os.path.relpath(p.with_suffix(""), root / self.folder)).as_posix() for p in self.pages(root)]


PARTS = [
    Part("notebooks", "讲义各节", "讲义第 1–12 节各一页（第 0 页是课程地图和术语表）。每页的演示都在页面上算出来，"
                                 "训练的结论写成在 10 个种子上检查过的表。"),
    Part("release/exercises", "练习（学生版）", "讲义 §15 的练习 1–11，学生版，不含答案。在 JupyterLab、JupyterHub 或 "
         "Colab 里作答，每道题下面的测试单元格检查格式，评分时还有隐藏的检查。", title_suffix="（讲义 §15）"),
    Part("docs", "教师与助教", "给讲课的老师、助教和维护者：讲义和课程在哪里不一样、怎样评分和导出成绩、怎样在 JupyterHub "
         "上开课、怎样发布这个网站、改了代码之后运行什么。学生用不到这一部分。", pattern="*.md",
         order=("lecture_differences", "ta_guide", "lms", "class_report", "jupyterhub", "site", "faq", "maintainer",
                "sweep_tables", "design_notes"),
         extra=("CONTRIBUTING.md",)),
]
PREPARE = {".ipynb": _prepare_notebook, ".md": _prepare_markdown}


CONF = '''
project = "第 7 讲：自注意力与 Transformer"
author = copyright = "第 7 讲课程组"
language = "zh_CN"
locale_dirs = ["locale"]            # 补上主题没翻译的几句界面文字（见 lib/tools/build_site.py 的 UI_STRINGS）
extensions = ["myst_nb"]
nb_execution_mode = "off"          # 只用存下的输出
nb_output_stderr = "remove"
nb_code_prompt_show = "显示代码"    # 收起的代码（标签 hide-input）的开关，默认是英文 "Show code cell source"；收起输出请用 lib.viz.details
nb_code_prompt_hide = "收起代码"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "html_image"]  # html_image：<img> 的图片也复制进网站
myst_heading_anchors = 4           # 链接里的 #标题（GitHub 的写法）：指南之间、指南到页面的某一节
# PyData 主题本身：sphinx-book-theme 1.4 和它固定的 pydata-sphinx-theme 0.20 放在一起时，手机上的目录按钮没有反应
# （pydata-sphinx-theme#2451、sphinx-book-theme#988）；单用 PyData 主题时按钮正常，桌面上也能收起侧栏（投影时有用）
html_theme = "pydata_sphinx_theme"
html_title = project
html_favicon = "_static/favicon.svg"
html_search_language = "zh"        # 中文分词（有 jieba 时用它）
html_static_path = ["_static"]
templates_path = ["_templates"]
html_css_files = ["course.css"]
html_js_files = ["search-zh.js"]
html_search_options = {"dict": "search_terms.txt"}  # 课程的术语：搜“位置编码”能找到“位置编码”这个词
html_copy_source = False           # 每页开头的“下载”链接给的是 notebook 本身
html_show_sphinx = False
html_context = {"default_mode": "light"}
html_theme_options = {"show_toc_level": 2, "navigation_with_keys": False, "footer_start": ["copyright"],
                      "footer_center": [], "footer_end": [], "secondary_sidebar_items": ["page-toc"],
                      "navbar_end": ["theme-switcher"], "search_bar_text": "搜索本课程……",
                      "header_links_before_dropdown": 4}
mathjax_path = "mathjax/tex-chtml.js"   # 网站自己的 MathJax（见 lib/tools/build_site.py），不用 CDN
exclude_patterns = ["_build", "originals"]
suppress_warnings = ["mystnb.unknown_mime_type", "myst.header", "misc.highlighting_failure"]
'''


EXTRA_TERMS = ("正弦编码", "注意力", "多头", "残差", "掩码", "预热", "词嵌入", "主动词", "修饰语", "迷你 GPT", "相对位置",
               "绝对位置", "练习", "参数量", "计算量", "反向传播", "梯度",
               "评分", "成绩", "助教", "沙箱", "名单", "迟交", "隔离区", "班级报告", "交换服务")  # 后一行：教师与助教的指南


def search_terms() -> list[str]:
    """中文搜索用的词：notebook 00 术语表的第一列（“查询 / 键 / 值”拆开、去掉括号里的说明），加上几个常用的词。
    Sphinx 用 jieba 切分页面文字时把它们当作词，搜索框里整个输入它们就能找到。"""
    import re
    nb = json.loads((ROOT / "notebooks" / "00_start_here.ipynb").read_text(encoding="utf-8"))
    text = next("".join(c["source"]) for c in nb["cells"] if "### 术语表" in "".join(c["source"]))
    terms = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith(("| 讲义的术语", "|---")):
            first = re.sub(r"（.*?）", "", line.split("|")[1])
            terms += [t.strip() for t in first.split("/") if t.strip()]
    return list(dict.fromkeys([*terms, *EXTRA_TERMS]))


def _chinese_sidebar_button(templates: Path) -> None:
    """桌面上收起侧栏的按钮（投影时用）：主题的中文翻译里没有它的两句话，在模板里换成中文。"""
    import pydata_sphinx_theme
    src = Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "components" / "sidebar-collapse.html"
    text = src.read_text(encoding="utf-8")
    for english, chinese in (('_("Collapse Sidebar")', '"收起侧栏"'), ('_("Expand Sidebar")', '"展开侧栏"')):
        assert english in text, f"pydata-sphinx-theme 的 sidebar-collapse.html 变了：找不到 {english}"
        text = text.replace(english, chinese)
    templates.mkdir(parents=True, exist_ok=True)
    (templates / "sidebar-collapse.html").write_text(text, encoding="utf-8")


# 主题和 Sphinx 自带的中文翻译里缺的几句界面文字（按钮的提示、读屏软件念的名字）。Sphinx 先查 conf.py 的 locale_dirs，
# 再查它自己的和主题的翻译；.po 由 Sphinx 在构建时编译成 .mo。
UI_STRINGS = {"Color mode": "颜色模式", "System Settings": "跟随系统", "Breadcrumb": "路径导航",
              "Link to this heading": "链接到这个标题"}


def _chinese_ui_strings(build: Path) -> None:
    from babel.messages.catalog import Catalog  # babel 随 Sphinx 安装
    from babel.messages.pofile import write_po
    catalog = Catalog(locale="zh_CN")
    for english, chinese in UI_STRINGS.items():
        catalog.add(english, chinese)
    folder = build / "locale" / "zh_CN" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    with open(folder / "sphinx.po", "wb") as f:
        write_po(f, catalog)


def prepare(build: Path = BUILD, parts: list[Part] = PARTS) -> list[str]:
    """在 build/ 里准备好 Sphinx 的源：conf.py、首页、每一部分（parts）的目录页和复制过来的页面。
    返回每页的标题（按顺序）。"""
    shutil.rmtree(build, ignore_errors=True)
    static = build / "_static"
    static.mkdir(parents=True)
    for name, text in (("course.css", CSS), ("search-zh.js", SEARCH_JS), ("favicon.svg", FAVICON)):
        (static / name).write_text(text, encoding="utf-8")
    _chinese_sidebar_button(build / "_templates")
    _chinese_ui_strings(build)
    (build / "conf.py").write_text(CONF.replace('"search_terms.txt"', repr(str(build / "search_terms.txt"))),
                                   encoding="utf-8")
    (build / "search_terms.txt").write_text("".join(f"{t.replace(' ', '')} 100000\n" for t in search_terms()),
                                            encoding="utf-8")
    titles = []
    pages = frozenset(p.resolve() for part in parts for p in part.pages())
    for part in parts:
        for src in part.pages():
            rel = src.relative_to(ROOT)
            titles.append(PREPARE[src.suffix](src, build, rel, part.title_suffix, pages=pages))
        (build / part.folder / "index.md").write_text("\n".join(
            [f"# {part.heading}", "", part.intro, "", "```{toctree}", ":maxdepth: 1", "", *part.toctree_names(), "```",
             ""]), encoding="utf-8")
    index = ["# 第 7 讲：自注意力与 Transformer", "",
             "CS224N 风格第 7 讲《自注意力与 Transformer》的配套课程：讲义第 1–12 节各一页，每页的演示都在页面上算出来，"
             "结论写成检查过的表；练习在后面（学生版，不含答案）。这里显示的是课程仓库里存下的输出：要自己运行，"
             "每页标题下的“运行这一页”写了怎样下载、在 Colab 或自己的电脑上打开。最后一部分是给老师和助教的指南。", "",
             "```{toctree}", ":maxdepth: 2", "", *[f"{part.folder}/index" for part in parts], "```", ""]
    (build / "index.md").write_text("\n".join(index), encoding="utf-8")
    return titles


def _copy_mathjax(out: Path) -> None:
    import importlib.util
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None:
        raise SystemExit("没有装 sphinx-mathjax-offline：请运行 make site（它先装好网站用的包）")
    src = Path(spec.origin).parent / "static" / "mathjax"
    dst = out / "_static" / "mathjax"
    for part in MATHJAX_FILES:
        if (src / part).is_dir():
            shutil.copytree(src / part, dst / part, dirs_exist_ok=True)
        else:
            (dst / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / part, dst / part)


def build(out: Path = OUT, jobs: str = "auto") -> float:
    start = time.perf_counter()
    prepare()
    # MyST-NB 把图片写在输出文件夹旁边的 jupyter_execute/ 里，所以先建在 _build/html，再整体复制到 out
    html = BUILD.parent / "html"
    shutil.rmtree(html, ignore_errors=True)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", jobs, "-d", str(BUILD.parent / "doctrees"),
           str(BUILD), str(html)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"Sphinx 构建失败：\n{result.stderr[-4000:]}")
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(html, out)
    _copy_mathjax(out)
    (out / ".nojekyll").write_text("", encoding="utf-8")  # GitHub Pages：保留 _static/ 这样的文件夹
    return time.perf_counter() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.tools.build_site", description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", type=Path, default=OUT, help="输出文件夹（默认 _site/）")
    args = ap.parse_args(argv)
    seconds = build(args.output)
    size = sum(p.stat().st_size for p in args.output.rglob("*") if p.is_file())
    print(f"网站已生成：{args.output / 'index.html'}（{seconds:.0f} 秒，{size / 1e6:.1f} MB）。"
          "整个文件夹复制到任何静态网站服务器（或直接打开 index.html）即可；直接打开时搜索结果没有摘要，"
          f"要看摘要：python -m http.server -d {args.output}，再打开 http://localhost:8000/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
