"""提交前自查（lib/selfcheck.py）：丢失、重复、改类型、抹掉元数据的评分单元格都要被报出来。"""
from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import types

import nbformat
import pytest

from lib import selfcheck
from lib.selfcheck import check_notebook, check_this_notebook, compare, self_check

REL = "release/exercises/01_demo.ipynb"
REAL_RELEASE = sorted((selfcheck.REPO_ROOT / "release").glob("*/*.ipynb"))


def _cell(kind, src, gid=None, **flags):
    cell = nbformat.v4.new_code_cell(src) if kind == "code" else nbformat.v4.new_markdown_cell(src)
    if gid:
        cell.metadata["nbgrader"] = {"grade_id": gid, "grade": flags.get("grade", False),
                                     "solution": flags.get("solution", False),
                                     "locked": flags.get("locked", False), "schema_version": 3,
                                     **({"points": flags["points"]} if "points" in flags else {})}
    return cell


def _release_nb():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _cell("markdown", "# 练习 1"),
        _cell("code", "# 引导单元格"),
        _cell("code", "def f():\n    # 在这里写你的代码\n    raise NotImplementedError()", "ex1_f", solution=True),
        _cell("code", "assert f() == 1", "ex1_test", grade=True, locked=True, points=2),
        _cell("markdown", "在这里写下你的答案。", "ex3_proof", solution=True, grade=True, points=3),
    ]
    return json.loads(nbformat.writes(nb))


@pytest.fixture
def course(tmp_path):
    path = tmp_path / "course" / REL
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_release_nb()), encoding="utf-8")
    return tmp_path / "course"


def _answered():
    nb = _release_nb()
    nb["cells"][2]["source"] = "def f():\n    return 1"
    nb["cells"][4]["source"] = "交换两行等于交换输出的两行。"
    return nb


def test_intact_notebook_passes(course, capsys):
    assert check_notebook(_answered(), REL, root=course) is True
    out = capsys.readouterr().out
    assert "✓ 评分单元格完整" in out and "下载" in out and "✗" not in out


def test_unanswered_cells_are_only_a_note():
    problems, notes = compare(_release_nb(), _release_nb())
    assert problems == [] and len(notes) == 1 and "ex1_f" in notes[0]


@pytest.mark.parametrize("damage, expected", [
    ("delete", "“ex1_test”不见了"),
    ("duplicate", "“ex1_f”出现了 2 次"),
    ("retype", "从 markdown 变成了 code"),
    ("strip_one", "“ex1_test”还在，但它的 nbgrader 元数据被抹掉了"),
    ("strip_all", "整个 notebook 的 nbgrader 元数据都没了"),
    ("change_points", "（points）被改动了"),
    ("foreign", "发布版里没有的评分单元格：ex9_other"),
])
def test_damage_is_reported(course, capsys, damage, expected):
    nb = _answered()
    cells = nb["cells"]
    if damage == "delete":
        del cells[3]
    elif damage == "duplicate":
        cells.insert(3, copy.deepcopy(cells[2]))
    elif damage == "retype":
        cells[4]["cell_type"] = "code"
        cells[4]["outputs"], cells[4]["execution_count"] = [], None
    elif damage == "strip_one":
        del cells[3]["metadata"]["nbgrader"]
    elif damage == "strip_all":
        for c in cells:
            c["metadata"].pop("nbgrader", None)
    elif damage == "change_points":
        cells[3]["metadata"]["nbgrader"]["points"] = 20
    elif damage == "foreign":
        cells.append(json.loads(json.dumps(_cell("code", "x", "ex9_other", solution=True))))
    assert check_notebook(nb, REL, root=course) is False
    out = capsys.readouterr().out
    assert "✗ 发现" in out and expected in out and "怎么修" in out


def test_local_reads_the_saved_file_in_the_cwd(course, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(selfcheck, "REPO_ROOT", course)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    student_dir = tmp_path / "work"
    student_dir.mkdir()
    nb = _answered()
    nb["cells"].insert(3, copy.deepcopy(nb["cells"][2]))
    (student_dir / "01_demo.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    monkeypatch.chdir(student_dir)
    assert self_check(REL, {}) is False
    out = capsys.readouterr().out
    assert str(student_dir / "01_demo.ipynb") in out and "出现了 2 次" in out


@pytest.mark.skipif(shutil.which("git") is None, reason="没有 git")
def test_answering_in_place_is_compared_with_the_committed_release(course, monkeypatch, capsys):
    """学生直接在 release/ 里的文件上作答：参照是 git 里提交的版本，而不是被改过的文件本身。"""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", str(course)], check=True)
    subprocess.run([*git, "add", "-A"], cwd=course, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "release"], cwd=course, check=True)
    nb = _answered()
    del nb["cells"][3]
    (course / REL).write_text(json.dumps(nb), encoding="utf-8")
    monkeypatch.setattr(selfcheck, "REPO_ROOT", course)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.chdir((course / REL).parent)
    assert self_check(REL, {}) is False
    assert "“ex1_test”不见了" in capsys.readouterr().out


def test_answering_in_place_without_git_uses_the_solution_version(course, monkeypatch, capsys):
    """没有 git（下载的压缩包）时，被改过的 release 文件不能拿来和它自己比：改用 solutions/ 的同名文件。"""
    monkeypatch.setattr(selfcheck, "REPO_ROOT", course)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.chdir((course / REL).parent)
    nb = _answered()
    nb["cells"].insert(3, copy.deepcopy(nb["cells"][2]))
    (course / REL).write_text(json.dumps(nb), encoding="utf-8")
    assert self_check(REL, {}) is None  # 没有可以对照的原版：说明原因，不假装通过
    assert "没有 git 记录的原版" in capsys.readouterr().out
    solution = course / "solutions" / "exercises" / "01_demo.ipynb"
    solution.parent.mkdir(parents=True)
    solution.write_text(json.dumps(_answered()), encoding="utf-8")
    assert self_check(REL, {}) is False
    assert "出现了 2 次" in capsys.readouterr().out


def _fake_colab(monkeypatch, reply):
    google, colab, message = (types.ModuleType(n) for n in ("google", "google.colab", "google.colab._message"))

    def blocking_request(kind, request="", timeout_sec=5):
        assert kind == "get_ipynb"
        if isinstance(reply, Exception):
            raise reply
        return reply

    message.blocking_request = blocking_request
    colab._message = message
    google.colab = colab
    for name, mod in (("google", google), ("google.colab", colab), ("google.colab._message", message)):
        monkeypatch.setitem(sys.modules, name, mod)


def test_colab_checks_the_live_notebook(course, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(selfcheck, "REPO_ROOT", course)
    monkeypatch.chdir(tmp_path)  # Colab 的当前目录里没有这个文件：必须用正在编辑的 notebook
    nb = _answered()
    nb["cells"][4]["cell_type"] = "raw"
    nb["metadata"]["colab"] = {"provenance": []}
    _fake_colab(monkeypatch, {"ipynb": nb})
    assert self_check(REL, {}) is False
    out = capsys.readouterr().out
    assert "Colab 里正在编辑的这个 notebook" in out and "变成了 raw" in out


def test_colab_without_the_live_notebook_explains_what_to_do(course, monkeypatch, capsys):
    monkeypatch.setattr(selfcheck, "REPO_ROOT", course)
    _fake_colab(monkeypatch, TimeoutError("no reply"))
    assert self_check(REL, {}) is None
    out = capsys.readouterr().out
    assert "下载 .ipynb" in out and "python -m lib.selfcheck" in out


def test_cli_on_a_downloaded_file(course, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(selfcheck, "REPO_ROOT", course)
    good = tmp_path / "01_demo.ipynb"
    good.write_text(json.dumps(_answered()), encoding="utf-8")
    assert selfcheck.main([str(good)]) == 0  # 按文件名在 release/ 里找到对应的练习
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json", encoding="utf-8")
    assert selfcheck.main([str(broken), "--against", REL]) == 1
    assert "不是合法的 notebook" in capsys.readouterr().out


def test_bad_path_in_repo_is_explained():
    with pytest.raises(ValueError, match="path_in_repo"):
        selfcheck.load_reference("release/exercises/")


@pytest.mark.parametrize("path", REAL_RELEASE, ids=lambda p: p.relative_to(selfcheck.REPO_ROOT).as_posix())
def test_real_release_notebooks(path):
    """课程真正发布的练习：原样通过；复制出一个答题单元格、或抹掉一个评分单元格的元数据，就被发现。"""
    release = json.loads(path.read_text(encoding="utf-8"))
    assert compare(copy.deepcopy(release), release)[0] == []
    solution_version = path.parents[2] / "solutions" / path.relative_to(path.parents[2] / "release")
    if solution_version.exists():  # 答案版的评分单元格与发布版一一对应
        assert compare(json.loads(solution_version.read_text(encoding="utf-8")), release)[0] == []
    nb = copy.deepcopy(release)
    solution = next(i for i, c in enumerate(nb["cells"]) if (c["metadata"].get("nbgrader") or {}).get("solution"))
    nb["cells"].insert(solution, copy.deepcopy(nb["cells"][solution]))
    assert any("出现了 2 次" in p for p in compare(nb, release)[0])
    nb = copy.deepcopy(release)
    graded = next(c for c in nb["cells"] if (c["metadata"].get("nbgrader") or {}).get("grade_id"))
    del graded["metadata"]["nbgrader"]
    assert any("元数据被抹掉了" in p for p in compare(nb, release)[0])


# ---------------------------------------------------------------- 答案的格式（和评分同一套规则）


def test_formats_use_the_grading_rules():
    """自查用 lib.answer_format 的规则：1×1 的数组是一个数、np.int64 是整数、(2, 1) 是 (2,)；
    None、字符串、形状不对的都指出来（说明和评分时一字不差）。"""
    import numpy as np

    from lib import answer_format as fmt

    good = {"q_tilde_a": np.array([[0.5], [0.866]]), "k_tilde_a": (0.866, 0.5), "dot_a": np.array([[0.866]]),
            "dot_b": 0.866, "dot_c": np.float64(0.866),
            "rotate_2d": lambda x, angle: np.array([[1.0], [0.0]]), "rope": lambda x, positions, base=1e4: x}
    assert selfcheck.check_formats("03_positions_and_rope", good) == ([], [])
    bad = dict(good, dot_b="0.866", rope=lambda x, positions, base=1e4: None, q_tilde_a=np.zeros(3))
    problems, notes = selfcheck.check_formats("03_positions_and_rope", bad)
    assert notes == []
    assert len(problems) == 3 and all(p.startswith("格式：") for p in problems)
    text = "\n".join(problems)
    assert "dot_b 应是一个数，得到字符串 '0.866'" in text and "返回了 None：忘了写 return？" in text
    with pytest.raises(fmt.FormatError) as err:  # 公开测试里同一个函数给出同一句话
        fmt.number("0.866", "dot_b", returned=False)
    assert str(err.value) in text


def test_formats_report_unanswered_as_notes_and_crashing_functions_as_problems():
    """没作答只是提醒；函数在小例子上出错是会丢分的问题（评分时同样出错）：学生看到“✓”就上传了，丢了 8 分。"""
    def todo(*args):
        raise NotImplementedError()

    def crash(*args):
        raise ValueError("boom")

    problems, notes = selfcheck.check_formats("04_blocks_and_cost", {"count_params": todo, "crossover_length": crash})
    assert [p for p in problems if "出错了：ValueError: boom" in p] and len(problems) == 1
    assert "count_params 还没有作答。" in notes
    assert any("还没有定义 attention_share" in n for n in notes)


def test_an_answer_cell_with_a_syntax_error_is_a_problem():
    """答题单元格里少了一个括号：测试单元格只会说“还没有定义 scores_1”，自查要说出真正的原因。"""
    assert selfcheck.syntax_error("scores_1 = np.array([[0.707, 0.707], [0.707, -0.707]]") .startswith("第 1 行")
    assert selfcheck.syntax_error("%matplotlib inline\nx = 1\n!ls") is None  # IPython 的魔法和命令不算错
    assert selfcheck.syntax_error("def f(x):\n    return x") is None


def test_format_problems_count_as_problems_in_the_notebook(course, monkeypatch, capsys):
    """在 notebook 里运行：单元格完整，但答案的格式不对，也算会影响评分的问题；拿不到文件时照样检查格式。"""
    monkeypatch.setattr(selfcheck, "REPO_ROOT", course)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    ns = {"count_params": lambda *a: "124,439,808", "crossover_length": lambda d: 6 * d,
          "attention_share": lambda n, d: n / (n + 6 * d)}
    rel = "release/exercises/04_blocks_and_cost.ipynb"
    (course / rel).write_text(json.dumps(_release_nb()), encoding="utf-8")
    assert check_notebook(_release_nb(), rel, root=course, namespace=ns) is False
    out = capsys.readouterr().out
    assert "✓ 评分单元格完整" in out and "应返回整数，得到字符串" in out and "格式问题" in out
    monkeypatch.chdir(course)  # 当前目录里没有这个 notebook：只检查格式
    assert self_check("exercises/04_blocks_and_cost.ipynb", ns) is None
    assert "应返回整数，得到字符串" in capsys.readouterr().out



def test_the_notebook_cell_shows_the_report_and_no_stray_true(course, monkeypatch, capsys):
    """check_this_notebook 是自查单元格的最后一行：它只打印报告，不返回值（否则单元格末尾多出一个 True）；
    答案的格式用的是调用者（notebook）的全局变量。"""
    monkeypatch.setattr(selfcheck, "REPO_ROOT", course)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.chdir(course)
    caller = {"check_this_notebook": check_this_notebook, "count_params": lambda *a: "124,439,808"}
    exec('result = check_this_notebook("exercises/04_blocks_and_cost.ipynb")', caller)  # noqa: S102
    assert caller["result"] is None
    assert "应返回整数，得到字符串" in capsys.readouterr().out

# ---------------------------------------------------------------- issue 20：看的是内核所属的文件；答案写在新单元格里；没删掉的 raise


def test_the_kernels_own_notebook_is_checked_not_the_blank_one_beside_it(course, tmp_path, monkeypatch, capsys):
    """JupyterLab 打开的是“01_demo (1).ipynb”（浏览器下载的副本），旁边还有一份空白的 01_demo.ipynb：
    ipykernel 把 JPY_SESSION_NAME 放进 __session__，自查看的是内核所属的那一份。"""
    monkeypatch.setattr(selfcheck, "REPO_ROOT", course)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    (work / "01_demo.ipynb").write_text(json.dumps(_release_nb()), encoding="utf-8")       # 空白的
    broken = _answered()
    broken["cells"].insert(3, copy.deepcopy(broken["cells"][2]))
    (work / "01_demo (1).ipynb").write_text(json.dumps(broken), encoding="utf-8")         # 正在编辑的
    monkeypatch.chdir(work)
    for namespace in ({"__session__": str(work / "01_demo (1).ipynb")}, {"__session__": "work/01_demo (1).ipynb"}):
        assert self_check(REL, namespace) is False
        out = capsys.readouterr().out
        assert "01_demo (1).ipynb" in out and "出现了 2 次" in out
    monkeypatch.setenv("JPY_SESSION_NAME", str(work / "01_demo (1).ipynb"))  # 没有 __session__ 的老 ipykernel
    assert self_check(REL, {}) is False
    assert "01_demo (1).ipynb" in capsys.readouterr().out
    monkeypatch.delenv("JPY_SESSION_NAME")
    assert self_check(REL, {}) is True  # 不知道时照旧：当前目录里的同名文件
    assert str(work / "01_demo.ipynb") in capsys.readouterr().out


@pytest.mark.parametrize("name", ["01_demo (1).ipynb", "Copy of 01_demo.ipynb", "01_demo的副本.ipynb",
                                  "01_demo - 副本.ipynb"])
def test_cli_accepts_the_names_the_grader_accepts(course, tmp_path, monkeypatch, capsys, name):
    monkeypatch.setattr(selfcheck, "REPO_ROOT", course)
    path = tmp_path / name
    path.write_text(json.dumps(_answered()), encoding="utf-8")
    assert selfcheck.main([str(path)]) == 0, capsys.readouterr().out
    assert "✓ 评分单元格完整" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["below", "above", "two_below"])
def test_a_written_answer_in_an_added_cell_is_reported_with_how_to_move_it(course, capsys, where):
    nb = _answered()
    nb["cells"][4]["source"] = "在这里写下你的答案。"   # 答题单元格没动
    added = [json.loads(json.dumps(_cell("markdown", text))) for text in ("交换两行", "等于交换输出的两行。")]
    at = {"below": 5, "above": 4, "two_below": 5}[where]
    for cell in (added if where == "two_below" else added[:1])[::-1]:
        nb["cells"].insert(at, cell)
    assert check_notebook(nb, REL, root=course) is True  # 评分时会被移进答题单元格：分数不受影响，只是提醒
    out = capsys.readouterr().out
    assert "答案写在了新单元格里" in out and "剪切到答题单元格 ex3_proof 里" in out, out
    assert "评分时会被移进答题单元格交给助教，但最好自己移过去" in out and "评分只看答题单元格" not in out, out
    assert "怎么修" not in out  # 不是单元格结构的问题，不给删副本、找回单元格的说明
    assert "格式问题" not in out and "✗" not in out, out  # 不是格式问题：不加格式问题的说明


def test_an_empty_added_cell_or_an_answered_cell_is_not_reported(course, capsys):
    nb = _release_nb()
    nb["cells"].insert(5, json.loads(json.dumps(_cell("markdown", "   "))))
    check_notebook(nb, REL, root=course)
    assert "新单元格" not in capsys.readouterr().out
    nb = _answered()
    nb["cells"].insert(5, json.loads(json.dumps(_cell("markdown", "补充：见上面。"))))
    assert check_notebook(nb, REL, root=course) is True
    assert "新单元格" not in capsys.readouterr().out


@pytest.mark.parametrize("source, problem, note", [
    ("def f():\n    return 1\n    raise NotImplementedError()", None, None),             # return 之后：无害
    ("def f():\n    x = 1\n    raise NotImplementedError()\n    return x", "删掉 raise NotImplementedError() 这一行", None),
    ("def f():\n    # 在这里写你的代码\n    raise NotImplementedError()", None, "还没有作答"),
])
def test_leftover_raise_not_implemented(course, capsys, source, problem, note):
    nb = _answered()
    nb["cells"][2]["source"] = source
    problems, notes = compare(nb, _release_nb())
    assert (problem is None) == (not problems) and all(problem in p for p in problems), problems
    assert (note is None) == (not notes) and all(note in n for n in notes), notes


def test_formats_name_a_leftover_raise_before_return():
    ns = {}
    exec("def score_variance(d_k, sigma):\n    v = d_k * sigma ** 4\n    raise NotImplementedError()\n    return v\n"
         "def score_divisor(d_k, sigma):\n    return sigma ** 2 * d_k ** 0.5\n    raise NotImplementedError()\n", ns)
    problems, _ = selfcheck.check_formats("02_scaling_and_equivariance", ns)
    assert any("score_variance" in p and "删掉 raise NotImplementedError() 这一行" in p for p in problems), problems
    assert not any("score_divisor" in p for p in problems), problems


@pytest.mark.parametrize("name", ["01_demo (1).ipynb", "Copy of 01_demo.ipynb"])
def test_a_renamed_notebook_without_session_info_is_found_and_checked(course, tmp_path, monkeypatch, capsys, name):
    """内核不知道自己的 notebook（没有 __session__、JPY_SESSION_NAME，例如 nbclient）、当前目录里只有改过名的副本：
    按评分时的文件名规则找到它，核对它的评分单元格，并说明检查的是哪个文件、提交时要改回原来的名字。"""
    monkeypatch.setattr(selfcheck, "REPO_ROOT", course)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    broken = _answered()
    broken["cells"].insert(3, copy.deepcopy(broken["cells"][2]))
    (work / name).write_text(json.dumps(broken), encoding="utf-8")
    (work / "02_other (1).ipynb").write_text(json.dumps(_answered()), encoding="utf-8")  # 别的练习：不相干
    monkeypatch.chdir(work)
    assert self_check(REL, {}) is False
    out = capsys.readouterr().out
    assert f"这个 notebook 的文件 {work / name}" in out and "出现了 2 次" in out, out
    assert "提交时请改回 01_demo.ipynb" in out and "找不到" not in out, out
    (work / name).write_text(json.dumps(_answered()), encoding="utf-8")
    assert self_check(REL, {}) is True
    assert "提交时请改回 01_demo.ipynb" in capsys.readouterr().out


def test_no_notebook_file_says_the_cells_were_not_checked(course, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(selfcheck, "REPO_ROOT", course)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert self_check(REL, {}) is None
    assert "评分单元格没有核对" in capsys.readouterr().out


def test_without_lib_grading_the_selfcheck_still_runs(course, tmp_path, monkeypatch, capsys):
    """评分的沙箱里没有 lib.grading：找改过名的副本时不能出错（只检查答案的格式）。"""
    monkeypatch.setattr(selfcheck, "REPO_ROOT", course)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.setitem(sys.modules, "lib.grading.collect", None)  # import 时 ModuleNotFoundError
    (tmp_path / "01_demo (1).ipynb").write_text(json.dumps(_answered()), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert self_check(REL, {}) is None
    assert "评分单元格没有核对" in capsys.readouterr().out


# ---------------------------------------------------------------- fs42：没删掉的 raise，说法合单元格、只说一次


def test_a_leftover_raise_in_a_cell_without_a_function_is_worded_for_the_cell(course):
    """填变量的答题单元格没有函数、没有 return：不说“函数在 return 之前”，说单元格里还留着 raise。"""
    from lib import answer_format as fmt

    nb = _answered()
    nb["cells"][2]["source"] = "x = 1\n# 在这里写你的代码\nraise NotImplementedError()"
    problems, _ = compare(nb, _release_nb())
    assert len(problems) == 1 and fmt.LEFTOVER_RAISE_CELL in problems[0], problems
    assert "return" not in problems[0] and "函数" not in problems[0], problems


def test_a_leftover_raise_before_return_is_listed_once_in_the_notebook(course, monkeypatch, capsys):
    """在 notebook 里运行：单元格检查和格式检查都发现了 return 之前的 raise，报告里只列一次（按单元格）。"""
    monkeypatch.setattr(selfcheck, "REPO_ROOT", course)
    rel = "release/exercises/01_attention_by_hand.ipynb"
    release = _release_nb()
    release["cells"][2]["source"] = "def self_attention(Q, K, V, mask=None):\n    raise NotImplementedError()"
    (course / rel).write_text(json.dumps(release), encoding="utf-8")
    student = copy.deepcopy(release)
    source = "def self_attention(Q, K, V, mask=None):\n    w = Q\n    raise NotImplementedError()\n    return w, w\n"
    student["cells"][2]["source"] = source
    ns: dict = {}
    exec(source, ns)  # noqa: S102
    assert check_notebook(student, rel, root=course, namespace=ns) is False
    out = capsys.readouterr().out
    assert out.count("删掉 raise NotImplementedError() 这一行") == 1 and "发现 1 个" in out, out


def test_a_namedtuple_from_self_attention_passes_the_format_check():
    """(输出, 权重) 写成 namedtuple：tuple 的子类，格式检查和评分一样接受（fs42：曾被说成“得到AttnOut”）。"""
    from collections import namedtuple

    import numpy as np

    AttnOut = namedtuple("AttnOut", ["output", "weights"])  # noqa: PYI024

    def self_attention(Q, K, V, mask=None):
        s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
        w = np.exp(s - s.max(-1, keepdims=True))
        w = w / w.sum(-1, keepdims=True)
        return AttnOut(w @ V, w)

    ns = {"self_attention": self_attention, "scores_1": np.eye(2), "weights_1": np.eye(2), "outputs_1": np.eye(2),
          "copy_query": lambda K, a: 20 * K[a], "average_query": lambda K, a, b: 20 * (K[a] + K[b])}
    assert selfcheck.check_formats("01_attention_by_hand", ns) == ([], [])
