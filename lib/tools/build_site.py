"""make site：把课程做成一个静态网站（手机、投影、离线都能读），用的是 Sphinx + MyST-NB。

为什么是 Sphinx + MyST-NB 而不是 Jupyter Book 2：Jupyter Book 2 建在 mystmd（Node.js）上，构建时要从网上取主题，
离线和在国内都不可靠；Sphinx 是纯 Python、离线构建，MyST-NB 直接读 notebook 里存下的输出（nb_execution_mode = "off"：
不重新执行），中文全文搜索靠 Sphinx 自带的中文分词（装了 jieba 时用它），公式用 sphinx-mathjax-offline 包里带的 MathJax
（只复制用到的 tex-chtml 和字体），不加载任何 CDN。

    python -m lib.tools.build_site            # 输出到 _site/（git 忽略）；打开 _site/index.html 即可
    python -m lib.tools.build_site -o DIR     # 输出到别处

页面：notebooks/*.ipynb（按讲义的顺序）和练习的学生版 release/exercises/*.ipynb（不含 source/、solutions/）。
每页标题下加一段“运行这一页”：下载 .ipynb、在 Colab 里打开、在自己的电脑或 JupyterHub 上打开。Colab 徽章的图片换成
网站自己的一份（原来的图片在 colab.research.google.com 上）。
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "_build" / "site-src"
OUT = ROOT / "_site"
BADGE_URL = "https://colab.research.google.com/assets/colab-badge.svg"
BADGE = ('<svg xmlns="http://www.w3.org/2000/svg" width="117" height="20" role="img" aria-label="Open In Colab">'
         '<rect width="117" height="20" rx="3" fill="#444"/><rect x="0" width="20" height="20" rx="3" fill="#f9ab00"/>'
         '<text x="68" y="14" fill="#fff" font-family="sans-serif" font-size="11" text-anchor="middle">Open in Colab</text>'
         '</svg>\n')
MATHJAX_FILES = ("tex-chtml.js", "output/chtml/fonts", "ui", "a11y", "input/tex/extensions")


def _course() -> dict:
    import tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["course"]


def run_box(rel: Path, title: str) -> str:
    """标题下面的一段：怎样运行这一页（下载、Colab、本地、JupyterHub）。rel：相对于仓库根目录的路径。"""
    course = _course()
    repo, ref = course["repository"].rstrip("/"), course["ref"]
    colab = f"https://colab.research.google.com/github/{repo.split('github.com/')[1]}/blob/{ref}/{rel.as_posix()}"
    return (f":::{{admonition}} 运行这一页\n:class: tip\n"
            f"- {{download}}`下载 {rel.name} <{rel.name}>`：在自己的电脑上，课程仓库里运行 `make lab` 打开 JupyterLab，"
            f"再打开 `{rel.as_posix()}`（仓库：{repo}）。\n"
            f"- 学校的 JupyterHub：在 Assignment List 里取课程，或者把下载的文件上传到你的服务器。\n"
            f"- [在 Google Colab 里打开]({colab})（需要能访问 Google；第一个代码单元格会取回同一版本的课程代码）。\n"
            f"- 这里显示的是课程仓库里存下的输出，网页上不能运行代码。\n:::\n")


def _prepare_notebook(src: Path, dst: Path, rel: Path, title_suffix: str = "") -> str:
    nb = json.loads(src.read_text(encoding="utf-8"))
    first = nb["cells"][0]
    text = "".join(first["source"]).replace(BADGE_URL, "../" * (len(rel.parts) - 1) + "_static/colab-badge.svg")
    lines = text.split("\n")
    title = lines[0].lstrip("# ").strip() + title_suffix
    lines[0] = f"# {title}"
    first["source"] = "\n".join(lines)
    box = {"cell_type": "markdown", "metadata": {}, "source": run_box(rel, title)}
    nb["cells"].insert(1, box)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    return title


CONF = '''
project = "第 7 讲：自注意力与 Transformer"
language = "zh_CN"
extensions = ["myst_nb"]
nb_execution_mode = "off"          # 只用存下的输出
nb_output_stderr = "remove"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
html_theme = "sphinx_book_theme"
html_title = project
html_search_language = "zh"        # 中文分词（有 jieba 时用它）
html_static_path = ["_static"]
html_search_options = {"dict": "search_terms.txt"}  # 课程的术语：搜“位置编码”能找到“位置编码”这个词
html_copy_source = False           # 每页开头的“下载”链接给的是 notebook 本身
html_theme_options = {"use_download_button": False, "use_fullscreen_button": False, "use_repository_button": False,
                      "home_page_in_toc": True, "show_toc_level": 2}
mathjax_path = "mathjax/tex-chtml.js"   # 网站自己的 MathJax（见 lib/tools/build_site.py），不用 CDN
exclude_patterns = ["_build"]
suppress_warnings = ["mystnb.unknown_mime_type", "myst.header", "misc.highlighting_failure"]
'''


EXTRA_TERMS = ("正弦编码", "注意力", "多头", "残差", "掩码", "预热", "词嵌入", "主动词", "修饰语", "迷你 GPT")


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


def prepare(build: Path = BUILD) -> list[str]:
    """在 build/ 里准备好 Sphinx 的源：conf.py、首页、复制过来的 notebook。返回每页的标题（按顺序）。"""
    shutil.rmtree(build, ignore_errors=True)
    (build / "_static").mkdir(parents=True)
    (build / "_static" / "colab-badge.svg").write_text(BADGE, encoding="utf-8")
    (build / "conf.py").write_text(CONF.replace('"search_terms.txt"', repr(str(build / "search_terms.txt"))),
                                   encoding="utf-8")
    (build / "search_terms.txt").write_text("".join(f"{t.replace(' ', '')} 100000\n" for t in search_terms()),
                                            encoding="utf-8")
    pages, titles = [], []
    for src in sorted((ROOT / "notebooks").glob("*.ipynb")):
        rel = src.relative_to(ROOT)
        titles.append(_prepare_notebook(src, build / rel, rel))
        pages.append(rel.with_suffix("").as_posix())
    exercises = []
    for src in sorted((ROOT / "release" / "exercises").glob("*.ipynb")):
        rel = src.relative_to(ROOT)
        titles.append(_prepare_notebook(src, build / rel, rel, "（讲义 §15）"))
        exercises.append(rel.with_suffix("").as_posix())
    index = ["# 第 7 讲：自注意力与 Transformer", "",
             "CS224N 风格第 7 讲《自注意力与 Transformer》的配套课程：讲义第 1–12 节各一页，每页的演示都在页面上算出来，"
             "结论写成检查过的表；练习在最后（学生版，不含答案）。这里显示的是课程仓库里存下的输出：要自己运行，"
             "每页开头写了怎样下载、在 Colab 或自己的电脑上打开。", "",
             "```{toctree}", ":caption: 讲义各节", ":maxdepth: 1", "", *pages, "```", "",
             "```{toctree}", ":caption: 练习（学生版）", ":maxdepth: 1", "", *exercises, "```", ""]
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
          "整个文件夹复制到任何静态网站服务器（或直接打开 index.html）即可。")
    return 0


if __name__ == "__main__":
    sys.exit(main())
