"""引导单元格（lib/tools/bootstrap.py）的两条分支，不需要 Colab：
本地分支在仓库里执行；Colab 分支用假的 google.colab 模块、本地 file:// git 仓库和假的 pip 执行。"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lib.tools import bootstrap
from lib.tools.bootstrap import BOOTSTRAP_SOURCE, REPO_ROOT, bootstrap_source

LOCAL_LINE = "本地运行：已找到课程根目录，lib/ 可以导入。\n"
GIT = shutil.which("git")


def _exec_local(cwd: Path, monkeypatch) -> tuple[dict, str]:
    monkeypatch.chdir(cwd)
    # 去掉课程根目录（测试结束时还原），好检查引导单元格自己把它加了回来
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != REPO_ROOT])
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)

    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"本地分支不该启动子进程：{args}")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(BOOTSTRAP_SOURCE, namespace)
    return namespace, out.getvalue()


@pytest.mark.parametrize("subdir", [".", "notebooks", "release/exercises", "lib/tools"])
def test_local_branch_finds_root_and_prints_the_stored_line(subdir, monkeypatch, tmp_path):
    cwd = REPO_ROOT / subdir
    if not cwd.is_dir():
        cwd = REPO_ROOT  # 文件夹还没建（练习还没生成）时退回根目录
    namespace, printed = _exec_local(cwd, monkeypatch)
    # 每个 notebook 存储的输出就是这一行：一个字节都不能变
    assert printed == LOCAL_LINE
    assert namespace["root"] == REPO_ROOT
    assert sys.path[0] == str(REPO_ROOT)


def test_local_branch_outside_the_course_explains(monkeypatch, tmp_path):
    with pytest.raises(FileNotFoundError, match="找不到课程根目录"):
        _exec_local(tmp_path, monkeypatch)


def test_source_comes_from_the_single_config():
    config = bootstrap.course_config()
    assert f'COURSE_REPO = "{bootstrap.clone_url(config["repository"])}"' in BOOTSTRAP_SOURCE
    assert f'COURSE_REF = "{config["ref"]}"' in BOOTSTRAP_SOURCE
    assert "torch" not in bootstrap.COLAB_NEEDS
    compile(BOOTSTRAP_SOURCE, "<bootstrap>", "exec")


def test_config_parser_without_tomllib(monkeypatch, tmp_path):
    """Python 3.10 没有 tomllib：退回的小解析器读出同样的值。"""
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n\n[tool.course]\n# 注释\nrepository = "https://github.com/a/b"\n'
                         'ref = "v2.0"\n\n[tool.other]\nref = "wrong"\n', encoding="utf-8")
    with_toml = bootstrap.course_config(pyproject)
    monkeypatch.setitem(sys.modules, "tomllib", None)  # import tomllib → ModuleNotFoundError
    assert bootstrap.course_config(pyproject) == with_toml == {"repository": "https://github.com/a/b", "ref": "v2.0"}


def test_bad_values_are_rejected():
    with pytest.raises(ValueError, match="GitHub"):
        bootstrap.github_slug("https://gitlab.com/a/b")
    with pytest.raises(ValueError, match="引号"):
        bootstrap_source(ref='main"; import os')


# ---------------------------------------------------------------- Colab 分支

def _git(*args, cwd=None):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
                           "-c", "init.defaultBranch=main", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    """一个本地的裸仓库：v-test 标签上 lib/VERSION 是 "pinned"，之后 main 上又多了一个提交。"""
    if GIT is None:
        pytest.skip("没有 git：无法测试 Colab 分支的取回")
    base = tmp_path_factory.mktemp("remote")
    work = base / "work"
    shutil.copytree(REPO_ROOT / "lib", work / "lib", ignore=shutil.ignore_patterns("__pycache__", "grading"))
    (work / "lib" / "VERSION").write_text("pinned\n", encoding="utf-8")
    _git("init", "-q", str(work))
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "course at the pinned tag", cwd=work)
    _git("tag", "v-test", cwd=work)
    pinned_sha = _git("rev-parse", "HEAD", cwd=work)
    (work / "lib" / "VERSION").write_text("newer\n", encoding="utf-8")
    _git("commit", "-q", "-am", "a later commit", cwd=work)
    bare = base / "course.git"
    _git("clone", "-q", "--bare", str(work), str(bare))
    return {"url": bare.as_uri(), "sha": pinned_sha}


DRIVER = textwrap.dedent('''
    """在子进程里假装是 Colab：假的 google.colab、假的 pip；git 是真的。"""
    import importlib.util, json, subprocess, sys, types
    google = types.ModuleType("google"); colab = types.ModuleType("google.colab")
    google.colab = colab
    sys.modules["google"] = google; sys.modules["google.colab"] = colab
    missing = set(json.loads(sys.argv[2]))
    real_find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *a: None if name in missing else real_find_spec(name, *a)
    calls = []
    real_run = subprocess.run
    def fake_run(cmd, *args, **kwargs):
        calls.append(list(cmd))
        if cmd[1:3] == ["-m", "pip"]:
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return real_run(cmd, *args, **kwargs)
    subprocess.run = fake_run
    source = open(sys.argv[1], encoding="utf-8").read()
    for run in range(int(sys.argv[3])):
        exec(source, {})
    import lib
    print(json.dumps({"calls": calls, "lib": lib.__file__}))
''')


def _run_colab(tmp_path, source: str, missing=(), runs=1):
    (tmp_path / "cell.py").write_text(source, encoding="utf-8")
    (tmp_path / "driver.py").write_text(DRIVER, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # lib/ 只能从取回的代码导入
    env["GIT_TERMINAL_PROMPT"] = "0"
    proc = subprocess.run([sys.executable, "driver.py", "cell.py", json.dumps(list(missing)), str(runs)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return proc


def _colab_source(remote_url: str, ref: str, target: Path) -> str:
    return bootstrap_source(repository=remote_url, ref=ref, colab_dir=str(target))


@pytest.mark.parametrize("pin", ["tag", "commit"])
def test_colab_fetches_the_pinned_version_and_lib_imports(remote, tmp_path, pin):
    ref = "v-test" if pin == "tag" else remote["sha"]
    target = tmp_path / "content" / "lecture07"
    proc = _run_colab(tmp_path, _colab_source(remote["url"], ref, target), missing=["tqdm"])
    assert proc.returncode == 0, proc.stderr
    *lines, result = proc.stdout.strip().split("\n")
    result = json.loads(result)
    # 固定的版本，不是 main 上更新的提交
    assert (target / "lib" / "VERSION").read_text(encoding="utf-8") == "pinned\n"
    assert _git("rev-parse", "HEAD", cwd=target) == remote["sha"]
    # lib/ 从取回的代码导入
    assert Path(result["lib"]).resolve() == (target / "lib" / "__init__.py").resolve()
    # 只补装缺的包，绝不装 torch
    pip_calls = [c for c in result["calls"] if c[1:3] == ["-m", "pip"]]
    assert pip_calls == [[sys.executable, "-m", "pip", "install", "-q", "tqdm"]]
    # 一行话说明做了什么
    assert lines == [f"Colab：已取回课程 {ref} 版本（{target}），lib/ 可以导入；补装的包：tqdm。"]


def test_colab_second_run_reuses_the_clone_and_installs_nothing(remote, tmp_path):
    target = tmp_path / "content" / "lecture07"
    proc = _run_colab(tmp_path, _colab_source(remote["url"], "v-test", target), runs=2)
    assert proc.returncode == 0, proc.stderr
    *lines, result = proc.stdout.strip().split("\n")
    calls = json.loads(result)["calls"]
    assert sum(c[:2] == ["git", "clone"] for c in calls) == 1  # 第二次运行不再克隆
    assert not [c for c in calls if c[1:3] == ["-m", "pip"]]  # Colab 已有的包一个也不装
    assert lines == [f"Colab：已取回课程 v-test 版本（{target}），lib/ 可以导入；补装的包：无。",
                     f"Colab：已有课程 v-test 版本（{target}），lib/ 可以导入；补装的包：无。"]


def test_colab_never_installs_torch_even_if_it_looks_missing(remote, tmp_path):
    target = tmp_path / "content" / "lecture07"
    proc = _run_colab(tmp_path, _colab_source(remote["url"], "v-test", target), missing=["torch", "numpy"])
    assert proc.returncode == 0, proc.stderr
    calls = json.loads(proc.stdout.strip().split("\n")[-1])["calls"]
    pip_calls = [c for c in calls if c[1:3] == ["-m", "pip"]]
    assert pip_calls == [[sys.executable, "-m", "pip", "install", "-q", "numpy"]]


def test_colab_bad_ref_fails_with_a_clear_message(remote, tmp_path):
    target = tmp_path / "content" / "lecture07"
    proc = _run_colab(tmp_path, _colab_source(remote["url"], "no-such-tag", target))
    assert proc.returncode != 0
    assert "没能取回课程代码" in proc.stderr and "no-such-tag" in proc.stderr
