"""静态网站（make site，lib/tools/build_site.py）：像学生一样在真的浏览器里打开它。

构建一次（要在 60 秒内），用一个无头 Chromium（Playwright）从 file:// 和一个本地的静态服务器各打开一遍，
手机和笔记本两种宽度：首页、notebook 05（公式和图）、notebook 11（表）、一个练习页、一页助教指南（docs/）、搜索几个中文的词
和词组（http 下每条结果有摘要，file:// 下写明怎样看到摘要；搜“成绩”找得到助教指南）；360 像素宽时每一页都不横向溢出；360 和 390 像素宽时标题栏的站点标题、
搜索和“本页小节”按钮都在屏幕上，“运行这一页”收起成一行、正文第一段在第一屏；目录按钮能打开目录；笔记本上侧栏能收起。
下载链接给的是仓库里的原文件。每一次打开都记下浏览器发出的全部请求：不能有一个离开网站自己的文件夹（没有 CDN、字体、统计）。

要有中文字体（make system-deps 装 Debian 的 fonts-noto-cjk）：没有的话汉字画成方块，量出来的版面不是学生看到的，
所以这里直接失败，不跳过。截图在 test-artifacts/site/。
"""
from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cjk_font import missing_cjk_font  # noqa: E402
from free_port import free_port  # noqa: E402
from test_browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

from lib.tools import build_site  # noqa: E402

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
SIZES = {"phone": (390, 844), "small-phone": (360, 740), "laptop": (1366, 800)}
SHOTS = REPO / "test-artifacts" / "site"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "_site"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "lib.tools.build_site", "-o", str(out)], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert seconds < 60, f"构建用了 {seconds:.0f} 秒（要求 60 秒以内）"
    print(proc.stdout.strip())
    return out


def test_the_site_has_every_page_in_lecture_order_and_only_student_versions(site):
    notebooks = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))
    assert sorted(p.stem for p in (site / "notebooks").glob("*.html")) == [*notebooks, "index"]  # index：这一部分的目录页
    exercises = sorted(p.stem for p in (REPO / "release" / "exercises").glob("*.ipynb"))
    assert sorted(p.stem for p in (site / "release" / "exercises").glob("*.html")) == [*exercises, "index"]
    assert not (site / "source").exists() and not (site / "solutions").exists()
    html = (site / "release" / "exercises" / "01_attention_by_hand.html").read_text(encoding="utf-8")
    assert "BEGIN SOLUTION" not in html and "run_check" not in html  # 学生版：没有答案、没有隐藏测试
    index = (site / "index.html").read_text(encoding="utf-8")
    positions = [index.index(f"notebooks/{nb}.html") for nb in notebooks]
    assert positions == sorted(positions), "首页的目录按讲义的顺序"
    for nb in notebooks:  # 每页都有下载和在 Colab 里打开的链接
        page = (site / "notebooks" / f"{nb}.html").read_text(encoding="utf-8")
        assert "运行这一页" in page and f"{nb}.ipynb" in page and "colab.research.google.com/github/" in page
        assert "colab.research.google.com/assets" not in page  # 徽章的图片是网站自己的
    for rel in ("notebooks/05_positional_encoding.ipynb", "release/exercises/03_positions_and_rope.ipynb"):
        got = list((site / "_downloads").rglob(Path(rel).name))  # 下载给的是仓库里的原文件，一个字节都不差
        assert len(got) == 1 and got[0].read_bytes() == (REPO / rel).read_bytes(), rel
    assert not list(site.rglob("*.ipynb_checkpoints"))
    assert "Author name not set" not in index and "作者" not in index
    page = (site / "notebooks" / "05_positional_encoding.html").read_text(encoding="utf-8")
    for english, chinese in build_site.UI_STRINGS.items():  # 主题没翻译的界面文字换成了中文
        assert f'"{english}"' not in page and f'"{chinese}"' in page, english
    folded = [p.name for p in (site / "notebooks").glob("*.html") if "Show code cell" in p.read_text(encoding="utf-8")]
    assert not folded, f"收起的证据单元格的开关是英文（conf.py 的 nb_code_prompt_show）：{folded}"



def test_the_guides_are_a_part_of_the_site_after_the_exercises(site):
    """“教师与助教”：docs/*.md 每一页加上 CONTRIBUTING.md，在首页目录的最后；指向仓库文件的链接换成了 GitHub 上的地址，
    没有留下指向 .md 或仓库里文件夹的相对链接（网站上那会是坏链接）。"""
    guides = sorted(p.stem for p in (REPO / "docs").glob("*.md"))
    assert sorted(p.stem for p in (site / "docs").glob("*.html")) == sorted([*guides, "index"])
    assert (site / "CONTRIBUTING.html").exists()
    index = (site / "index.html").read_text(encoding="utf-8")
    assert index.index("release/exercises/index.html") < index.index("docs/index.html"), "指南排在练习之后"
    part = (site / "docs" / "index.html").read_text(encoding="utf-8")
    order = [part.index(f'href="{name}.html"') for name in build_site.PARTS[-1].order]
    assert order == sorted(order) and "../CONTRIBUTING.html" in part
    repo = build_site._course()["repository"].rstrip("/")
    for page in [*(site / "docs").glob("*.html"), site / "CONTRIBUTING.html"]:
        html = page.read_text(encoding="utf-8")
        hrefs = re.findall(r'href="([^"#]+)', html)
        assert not [h for h in hrefs if h.endswith((".md", "/")) and not h.startswith("http")], page.name
    hub = (site / "docs" / "jupyterhub.html").read_text(encoding="utf-8")
    assert f'href="{repo}/blob/main/deploy/jupyterhub/jupyterhub.service"' in hub
    size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file()) / 1e6
    documented = float(re.search(r"自足的文件夹（约 (\d+) MB）", (REPO / "docs" / "site.md").read_text(encoding="utf-8"))[1])
    assert abs(size - documented) <= 0.25 * documented, f"网站 {size:.1f} MB，docs/site.md 写的是约 {documented:g} MB：请改那个数"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def served(site):
    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    pytest.importorskip("playwright.sync_api", reason="没有安装 playwright：pip install -r requirements-dev.txt")
    if not (shutil.which(CHROMIUM) or Path(CHROMIUM).exists()):
        pytest.skip(f"找不到 Chromium（{CHROMIUM}）：Debian 上 apt-get install chromium，或用 CHROMIUM_PATH 指定")
    if problem := missing_cjk_font():
        pytest.fail(problem)
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def _visit(browser, base: str, size: str, path: str, shot: Path | None = None):
    """打开一页，等公式排好；返回 (page, 这一页发出的全部请求)。"""
    w, h = SIZES[size]
    page = browser.new_page(viewport={"width": w, "height": h})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(f"{base}/{path}", wait_until="load")
    page.wait_for_function("() => !window.MathJax || !MathJax.startup || MathJax.startup.promise", timeout=30_000)
    page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
    if shot is not None:
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot), full_page=False)
    return page, requests


SEARCHES = (("残差", "notebooks/07_transformer_block.html"), ("位置编码", "notebooks/05_positional_encoding.html"),
            ("旋转位置编码", "notebooks/05_positional_encoding.html"), ("相对位置", "notebooks/05_positional_encoding.html"),
            ("成绩", "docs/ta_guide.html"))  # 最后一个：助教的词找得到助教指南


def _search_excerpt(page, href: str) -> tuple[str, str]:
    """等每条搜索结果都有了摘要（Sphinx 一条一条地取回页面），返回指向 href 的那一条的摘要和标题。"""
    page.wait_for_function("""() => { const items = [...document.querySelectorAll('#search-results ul.search li')];
        return items.length > 0 && items.every(li => li.querySelector('p.context')); }""", timeout=30_000)
    return page.evaluate("""href => { const li = [...document.querySelectorAll('#search-results ul.search li')]
        .find(li => li.querySelector('a').getAttribute('href').includes(href));
        return [li.querySelector('p.context').innerText, li.querySelector('a').innerText]; }""", href)


def _outside(requests: list[str], base: str) -> list[str]:
    return [u for u in requests if not (u.startswith(base + "/") or u.startswith(("data:", "blob:", "about:")))]


@pytest.mark.parametrize("size", ["phone", "laptop"])
@pytest.mark.parametrize("how", ["file", "http"])
def test_pages_render_offline_at_phone_and_laptop_width(site, served, browser, size, how):
    base = site.as_uri() if how == "file" else served
    shots = SHOTS
    seen: list[str] = []
    # 首页：目录里每一节都有
    page, req = _visit(browser, base, size, "index.html", shots / f"index-{how}-{size}.png")
    seen += req
    links = page.eval_on_selector_all("a.reference.internal", "els => els.map(e => e.getAttribute('href'))")
    assert sum("notebooks/" in h for h in links) >= 13 and sum("release/exercises/" in h for h in links) >= 6
    assert page.evaluate("() => document.documentElement.scrollWidth") <= SIZES[size][0] + 2, "首页不应横向溢出"
    page.close()
    # notebook 05：公式由网站自己的 MathJax 排好，图都加载出来了
    page, req = _visit(browser, base, size, "notebooks/05_positional_encoding.html", shots / f"05-{how}-{size}.png")
    seen += req
    assert page.evaluate("() => document.querySelectorAll('mjx-container').length") >= 20
    assert page.evaluate("() => document.querySelectorAll('mjx-merror').length") == 0, "有公式排版出错"
    images = page.evaluate("() => [...document.images].map(i => [i.src, i.complete && i.naturalWidth > 0])")
    assert len(images) >= 5 and all(ok for _, ok in images), [src for src, ok in images if not ok]
    assert page.evaluate("() => document.documentElement.scrollWidth") <= SIZES[size][0] + 2, "页面不应横向溢出"
    page.close()
    # notebook 11：表（10 个种子的宽表在自己的框里横向滚动，不撑开整页）
    page, req = _visit(browser, base, size, "notebooks/11_mini_gpt_vs_rnn.html", shots / f"11-{how}-{size}.png")
    seen += req
    assert page.evaluate("() => document.querySelectorAll('table').length") >= 15
    assert "和讲义对照" in page.inner_text("body")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= SIZES[size][0] + 2, "宽表不应撑开整页"
    page.close()
    # 练习页：学生版，有“运行这一页”和下载链接
    page, req = _visit(browser, base, size, "release/exercises/01_attention_by_hand.html")
    seen += req
    body = page.inner_text("body")
    assert "运行这一页" in body and "练习 1" in body
    href = page.eval_on_selector("a.download", "a => a.getAttribute('href')")
    assert href and href.endswith("01_attention_by_hand.ipynb")
    page.close()
    # 一页指南（Markdown 写的）：标题、表在自己的框里横向滚动，指向仓库文件的链接是 GitHub 的地址，没有“运行这一页”
    page, req = _visit(browser, base, size, "docs/ta_guide.html", shots / f"guide-{how}-{size}.png")
    seen += req
    assert page.inner_text("article h1").startswith("助教指南")
    assert page.evaluate("() => document.querySelectorAll('article table').length") >= 2
    assert page.evaluate("() => document.documentElement.scrollWidth") <= SIZES[size][0] + 2, "指南不应横向溢出"
    assert not page.query_selector("details.run-this-page")
    page.close()
    # 搜索中文的词和词组：结果里有讲它的那一页，结果的说明是中文；http 下每条结果有摘要（正文里搜索词前后的一段，
    # 不是路径导航和标题），file:// 下浏览器不许取别的页面，结果上方说怎样看到摘要。笔记本宽度只搜第一个（搜索和宽度无关，
    # 只看版面）
    for word, expected in SEARCHES if size == "phone" else SEARCHES[:1]:
        page, req = _visit(browser, base, size, f"search.html?q={word}")
        seen += req
        page.wait_for_selector("#search-results ul.search li", timeout=30_000)
        hits = page.eval_on_selector_all("#search-results ul.search li a", "els => els.map(e => e.getAttribute('href'))")
        assert any(expected in h for h in hits), (word, hits[:10])
        page.wait_for_function("() => document.querySelector('#search-results .search-summary')?.innerText.length > 0")
        assert "搜索完成" in page.inner_text("#search-results .search-summary")
        if how == "http":
            excerpt, title = _search_excerpt(page, expected)
            assert word in excerpt and title not in excerpt, (word, title, excerpt)
        else:
            assert "python -m http.server" in page.inner_text(".search-file-note"), "file:// 下要说怎样看到摘要"
        if word == "残差":
            page.screenshot(path=str(SHOTS / f"search-{how}-{size}.png"))
        page.close()
    assert not _outside(seen, base), f"有请求离开了网站的文件夹：{sorted(set(_outside(seen, base)))[:10]}"


def test_no_page_is_wider_than_a_phone(site, served, browser):
    """手机宽度（360 像素，常见手机里最窄的）下每一页都不横向溢出，“运行这一页”点开了也一样：长的代码名、公式、
    路径在自己的位置换行或横向滚动（指南的段落和列表里的代码也不伸出屏幕）。"""
    pages = ["index.html"] + [p.relative_to(site).as_posix() for part in build_site.PARTS
                              for p in sorted((site / part.folder).glob("*.html"))]
    pages += [Path(extra).with_suffix(".html").as_posix() for part in build_site.PARTS for extra in part.extra]
    wide = {}
    for path in pages:
        page, _ = _visit(browser, served, "small-phone", path)
        page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
        width = page.evaluate("() => document.documentElement.scrollWidth")
        clipped = page.evaluate("""() => [...document.querySelectorAll('.admonition code, details code' +
              (document.querySelector('.guide-page') ? ', article p code, article li code' : ''))]
            .filter(c => !c.closest('table') || c.closest('details'))  // 表在自己的框里横向滚动
            .filter(c => c.getBoundingClientRect().right > document.documentElement.clientWidth + 1).length""")
        if width > SIZES["small-phone"][0] + 2 or clipped:
            wide[path] = (width, clipped)
        page.close()
    assert len(pages) >= 33 and not wide, wide


# 标题栏里学生要点的三样：站点标题（回首页）、搜索按钮、本页小节（首页没有小节，没有这个按钮）
HEADER = """() => { const box = sel => { const e = document.querySelector(sel);
    if (!e || !e.offsetParent) return null; const r = e.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  return {viewport: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth,
          header: box('header.bd-header'), title: box('.navbar-brand p.title'),
          search: box('.navbar-persistent--mobile .search-button__button'),
          contents: box('button.secondary-toggle')}; }"""


@pytest.mark.parametrize("size", ["phone", "small-phone"])
def test_the_phone_header_keeps_the_title_search_and_contents_on_screen(site, served, browser, size):
    """390 和 360 像素宽（有中文字体）：站点标题、搜索、本页小节按钮都整个在屏幕上、互不重叠，页面不横向滚动。
    首页、标题最长的页（第 0 页）、notebook 11、讲义与课程的差异（一页宽表的指南）和搜索结果页。"""
    width = SIZES[size][0]
    pages = {"index": "index.html", "00": "notebooks/00_start_here.html", "11": "notebooks/11_mini_gpt_vs_rnn.html",
             "differences": "docs/lecture_differences.html", "search": "search.html?q=残差"}
    for name, path in pages.items():
        page, _ = _visit(browser, served, size, path)
        if name == "search":
            _search_excerpt(page, "notebooks/07_transformer_block.html")
        page.screenshot(path=str(SHOTS / f"{name}-http-{size}.png"))
        got = page.evaluate(HEADER)
        page.close()
        assert got["scroll"] <= width, (path, got)
        buttons = [got["title"], got["search"]] + ([got["contents"]] if name in ("00", "11", "differences") else [])
        assert all(buttons), (path, "标题、搜索或本页小节按钮不见了", got)
        for box in buttons:
            assert 0 <= box["left"] and box["right"] <= width, (path, "有一样伸出了屏幕", got)
            assert got["header"]["top"] <= box["top"] and box["bottom"] <= got["header"]["bottom"], (path, got)
        for left, right in zip(buttons, buttons[1:]):
            assert left["right"] <= right["left"] + 1, (path, "标题栏里的东西叠在一起", got)


@pytest.mark.parametrize("size", ["phone", "small-phone"])
def test_run_this_page_is_one_collapsed_line_and_the_lesson_starts_on_the_first_screen(site, served, browser, size):
    """标题下面的“运行这一页”收起成一行，手机的第一屏就看得到正文的第一段；点开它才是下载和 Colab 的说明。"""
    for path in ("notebooks/11_mini_gpt_vs_rnn.html", "release/exercises/01_attention_by_hand.html"):
        page, _ = _visit(browser, served, size, path)
        got = page.evaluate("""() => { const box = document.querySelector('article h1 + details.run-this-page');
            if (!box) return null; const range = document.createRange();
            range.selectNodeContents(box.querySelector('summary'));
            const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top))).size;
            const first = [...document.querySelectorAll('article p')]
              .find(p => !p.closest('details') && p.innerText.trim().length > 40);
            return {open: box.open, summary: box.querySelector('summary').innerText, lines,
                    firstTop: first.getBoundingClientRect().top, screen: window.innerHeight}; }""")
        assert got, f"{path}：标题下面没有 <details class=run-this-page>"
        assert not got["open"] and got["lines"] == 1 and build_site.RUN_SUMMARY in got["summary"], (path, got)
        assert got["firstTop"] + 80 <= got["screen"], (path, "正文第一段不在第一屏", got)
        assert not page.is_visible("details.run-this-page a.download")
        page.click("details.run-this-page summary")
        assert page.is_visible("details.run-this-page a.download"), "点开“运行这一页”应看到下载链接"
        page.close()


def test_the_navigation_buttons_work_on_a_phone_and_the_sidebar_collapses_on_a_laptop(site, served, browser):
    """手机：标题栏左边的按钮打开目录（每一节都在里面），右边的打开本页目录；笔记本：“收起侧栏”让正文变宽（投影时用）。"""
    page, _ = _visit(browser, served, "phone", "notebooks/05_positional_encoding.html")
    page.click("button.primary-toggle")
    page.wait_for_function("() => document.querySelector('#pst-primary-sidebar-modal')?.open")
    links = page.eval_on_selector_all("#pst-primary-sidebar-modal a", "els => els.filter(e => e.offsetParent).map(e => e.href)")
    assert sum("/notebooks/" in h for h in links) >= 13, links
    page.keyboard.press("Escape")
    page.click("button.secondary-toggle")
    page.wait_for_function("() => document.querySelector('#pst-secondary-sidebar-modal')?.open")
    assert "§5.4" in page.inner_text("#pst-secondary-sidebar-modal")
    page.close()
    page, _ = _visit(browser, served, "laptop", "notebooks/07_transformer_block.html")
    before = page.evaluate("() => document.querySelector('.bd-article-container').getBoundingClientRect().width")
    assert "收起侧栏" in page.inner_text("#pst-collapse-sidebar-button")
    page.click("#pst-collapse-sidebar-button")
    page.wait_for_timeout(500)
    after = page.evaluate("() => document.querySelector('.bd-article-container').getBoundingClientRect().width")
    assert after > before + 100, (before, after)
    page.close()
