"""指南（README.md、CONTRIBUTING.md、docs/*.md）里会过时的东西，和代码核对（快，不执行 notebook）。

- 会随代码变的数（提交和单元格的个数、章节数、模型和种子的个数……）：每个数写在哪一页、怎样从代码算出来，列在
  NUMBERS 里；数变了，失败信息说哪一页的哪个数该改成多少。指南里的那句话改写了、找不到了，也失败（改 NUMBERS）。
- 相对链接指向的文件都存在。
- docs/lecture_differences.md 引用的每一页、每一节都存在，链接里的 #锚点 就是那一节的标题（网站上点了能跳过去）。
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
GUIDES = ["README.md", "CONTRIBUTING.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]


# ------------------------------------------------------------------------------------------- 会变的数
def fairness_counts() -> tuple[int, int]:
    import test_fairness
    return len(test_fairness.SUBMISSIONS), len(test_fairness.parse_table())


def robustness_count() -> int:
    """make grade-demo 的“稳健性”：练习 01 的提交有几种（tests/grading_fixtures.py 的 build_fixtures）。"""
    import grading_fixtures as gf
    name = "01_attention_by_hand"
    release = gf.load(REPO / "release" / "exercises" / f"{name}.ipynb")
    solution = gf.load(REPO / "solutions" / "exercises" / f"{name}.ipynb")
    return len(gf.build_fixtures(release, solution, name, REPO, "exercises", multi=True))


def chapter_notebooks() -> int:
    return len([p for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb") if not p.name.startswith("00_")])


def vocab_size() -> int:
    from lib import toy_language
    return toy_language.VOCAB_SIZE


def notebook_11_runs() -> tuple[int, int]:
    from lib import experiments
    return len(experiments.SWEEP_ARMS), len(experiments.SWEEP_SEEDS)


def notebook_11_models() -> int:
    from lib import experiments
    return len(experiments.notebook_keys())


def mini_gpt_steps() -> int:
    from lib import experiments
    return experiments.arm_spec("learned", 0).steps


def shipped_trainings(page: str) -> int:
    """notebook page 随仓库发布的训练次数（artifacts/<page>/results.json 里的结果个数）。"""
    return len(json.loads((REPO / "artifacts" / page / "results.json").read_text(encoding="utf-8")))


# (文件, 正则：每个括号是一个数, 算出这些数的函数, 这些数从哪里来)
NUMBERS = [
    ("docs/ta_guide.md", r"（(\d+) 份提交、(\d+) 个单元格）", fairness_counts,
     "tests/test_fairness.py 的 SUBMISSIONS 和 TABLE"),
    ("docs/ta_guide.md", r"练习 01 的 (\d+) 种提交", robustness_count, "tests/grading_fixtures.py 的 build_fixtures"),
    ("README.md", r"\*\*(\d+) 个章节 notebook\*\*", chapter_notebooks, "notebooks/01_*.ipynb … 的个数"),
    ("docs/maintainer.md", r"第 5 讲的玩具语言（(\d+) 个词元）", vocab_size, "lib/toy_language.py 的 VOCAB_SIZE"),
    ("CONTRIBUTING.md", r"lecture-5 toy language \((\d+) tokens\)", vocab_size, "lib/toy_language.py 的 VOCAB_SIZE"),
    ("docs/faq.md", r"(\d+) 组 × (\d+) 个种子", notebook_11_runs, "lib/experiments.py 的 SWEEP_ARMS、SWEEP_SEEDS"),
    ("docs/faq.md", r"从头训练这 (\d+) 个模型", lambda: notebook_11_runs()[0] * notebook_11_runs()[1],
     "lib/experiments.py 的 SWEEP_ARMS × SWEEP_SEEDS"),
    ("CONTRIBUTING.md", r"notebook 11's (\d+) models", lambda: notebook_11_runs()[0] * notebook_11_runs()[1],
     "lib/experiments.py 的 SWEEP_ARMS × SWEEP_SEEDS"),
    ("docs/faq.md", r"页面要逐题、逐句看的 (\d+) 个模型的权重", notebook_11_models,
     "lib/experiments.py 的 notebook_keys()（NOTEBOOK_ARMS × NOTEBOOK_SEEDS 加 EXTRA_NOTEBOOK_RUNS）"),
    ("CONTRIBUTING.md", r"a mini GPT is ([\d,]+) steps", mini_gpt_steps, "lib/experiments.py 的 RunSpec.steps"),
    *[("docs/faq.md", rf"{label} (\d+) 次", lambda page=page: shipped_trainings(page), f"artifacts/{page}/results.json")
      for label, page in (("notebook 06 的", "06_multihead_attention"), ("07 的", "07_transformer_block"),
                          ("08 的", "08_architectures"), ("09 的", "09_training_details"),
                          ("12 的", "12_modern_transformer"))],
]


@pytest.mark.parametrize("doc,pattern,compute,source", NUMBERS, ids=[f"{d}:{p}" for d, p, *_ in NUMBERS])
def test_numbers_in_the_guides_match_the_code(doc, pattern, compute, source):
    text = (REPO / doc).read_text(encoding="utf-8")
    found = re.findall(pattern, text)
    assert found, f"{doc} 里找不到 {pattern!r}：那句话改写了？请改 tests/test_docs.py 的 NUMBERS（数从 {source} 算）"
    want = compute()
    want = tuple(want) if isinstance(want, tuple) else (want,)
    for got in found:
        got = tuple(int(g.replace(",", "")) for g in (got if isinstance(got, tuple) else (got,)))
        assert got == want, f"{doc} 写的是 {got}，{source} 现在是 {want}：请把 {doc} 里的这个数改成 {want}"


# ------------------------------------------------------------------------------------------- 链接
LINK = re.compile(r"(```.*?```|`[^`\n]*`)|(?<!!)\]\(\s*<?([^)\s>]+)>?\s*\)", re.DOTALL)


def relative_links(doc: str) -> list[str]:
    text = (REPO / doc).read_text(encoding="utf-8")
    return [m.group(2) for m in LINK.finditer(text) if m.group(2) and not re.match(r"[a-z]+:|#", m.group(2))]


@pytest.mark.parametrize("doc", GUIDES)
def test_relative_links_in_the_guides_resolve(doc):
    missing = [t for t in relative_links(doc) if not ((REPO / doc).parent / t.split("#")[0]).exists()]
    assert not missing, f"{doc} 里这些链接指向不存在的文件：{missing}"


def test_readme_links_every_guide():
    """docs/ 里的每一页都能从 README 找到（直接链接，或者经 docs/maintainer.md、CONTRIBUTING.md）。"""
    linked = {Path(t.split("#")[0]).name for doc in ("README.md", "docs/maintainer.md", "CONTRIBUTING.md")
              for t in relative_links(doc)}
    orphans = [p.name for p in (REPO / "docs").glob("*.md") if p.name not in linked]
    assert not orphans, f"这些指南没有从 README.md（或 docs/maintainer.md、CONTRIBUTING.md）链接到：{orphans}"


# ------------------------------------------------------------------------------------------- 讲义与课程的差异
def headings(notebook: Path) -> list[str]:
    """notebook 的 Markdown 单元格里的每个标题（去掉 #），代码块里的不算。"""
    found = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type != "markdown":
            continue
        in_code = False
        for line in cell.source.splitlines():
            if line.startswith("```"):
                in_code = not in_code
            elif not in_code and re.match(r"#{1,6} ", line):
                found.append(line.lstrip("#").strip())
    return found


def test_lecture_differences_cite_pages_and_headings_that_exist():
    """每一行的“在哪里看”：[标题](../notebooks/页.ipynb#锚点)。页面要存在，标题要是那一页的一个标题（一字不差），
    锚点要是 MyST（和 GitHub）给这个标题的锚点。页面改了标题时，这里说该改哪个链接。"""
    from myst_parser.slugs import github_slugify

    doc = REPO / "docs" / "lecture_differences.md"
    cites = re.findall(r"\[([^\]]+)\]\((\.\./(?:notebooks|release/exercises)/[^)#]+\.ipynb)#([^)]+)\)",
                       doc.read_text(encoding="utf-8"))
    assert len(cites) >= 12, f"docs/lecture_differences.md 里只找到 {len(cites)} 处引用：格式变了？"
    problems = []
    for title, path, anchor in cites:
        notebook = (doc.parent / path).resolve()
        if not notebook.exists():
            problems.append(f"{path} 不存在")
        elif title not in headings(notebook):
            problems.append(f"{path} 里没有标题“{title}”（现在的标题：{headings(notebook)}）")
        elif anchor != github_slugify(title):
            problems.append(f"“{title}”的锚点应是 #{github_slugify(title)}，写的是 #{anchor}")
    assert not problems, "docs/lecture_differences.md 的引用要改：\n" + "\n".join(problems)
    cited = {Path(path).stem for _, path, _ in cites}
    for page in ("06_multihead_attention", "07_transformer_block", "09_training_details", "10_cost_and_long_sequences",
                 "11_mini_gpt_vs_rnn", "12_modern_transformer"):
        assert page in cited, f"docs/lecture_differences.md 没有引用 {page}"
