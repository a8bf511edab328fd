"""环境检查（lib/check_env.py）：缺包时说清楚并以非零退出，一切正常时 --quiet 只打印一行。"""
from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from lib import check_env
from lib.check_env import FAIL, OK, WARN, collect, read_pins

PINS = read_pins()


def _run(*args):
    env = {**os.environ, "PYTHONPATH": str(check_env.REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "lib.check_env", *args], capture_output=True, text=True,
                          env=env, cwd=check_env.REPO_ROOT, timeout=120)


def test_pins_come_from_requirements_txt():
    for name in ("torch", "numpy", "matplotlib", "tqdm", "jupyterlab", "nbgrader"):
        assert name in PINS, f"requirements.txt 里没有 {name}=="


def test_the_course_environment_has_no_test_hub_or_site_tools_and_the_dev_file_adds_them():
    """课程环境 requirements.txt（学生和助教）里没有测试、JupyterHub 和网站的包，助教评分要的在；
    requirements-dev.txt 包含课程环境的全部和这些。"""
    from lib.check_env import REPO_ROOT, read_pins
    dev = read_pins(REPO_ROOT / "requirements-dev.txt")
    for tool in ("nbval", "pytest", "pytest-xdist", "playwright", "jupyterhub", "psycopg2-binary", "sphinx",
                 "myst-nb", "jieba"):
        assert tool not in PINS and tool in dev, tool
    for grading_tool in ("nbgrader", "openpyxl", "pyyaml", "copydetect", "latex2mathml"):  # python -m lib.grading 要的
        assert grading_tool in PINS, grading_tool
    assert all(dev[name] == version for name, version in PINS.items())


def test_this_environment_passes_quietly_in_one_line():
    """make test 先运行它：课程的 .venv 里一切都在。"""
    proc = _run("--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("\n") == 1 and proc.stdout.startswith("环境检查通过")


def test_full_report_names_every_package():
    proc = _run()
    assert proc.returncode == 0
    for name in ["Python", *PINS, "nbgrader 扩展"]:
        assert name in proc.stdout
    assert "CPU" in proc.stdout or "CUDA" in proc.stdout


def test_a_missing_package_fails_with_what_to_run(tmp_path):
    """模拟缺包：版本清单里有一个没装的包。"""
    req = tmp_path / "requirements.txt"
    req.write_text(f"numpy=={PINS['numpy']}\nlecture07-not-installed-pkg==1.2.3\n", encoding="utf-8")
    proc = _run("--quiet", "--requirements", str(req))
    assert proc.returncode == 1
    assert "✗ lecture07-not-installed-pkg" in proc.stdout and "没有安装（课程用 1.2.3）" in proc.stdout
    assert "make lab" in proc.stdout and "pip install -r requirements.txt" in proc.stdout
    assert "make setup" not in proc.stdout  # 学生的清单：make lab（make setup 是测试和助教的）
    dev = tmp_path / "requirements-dev.txt"
    dev.write_text("lecture07-not-installed-pkg==1.2.3\n", encoding="utf-8")
    proc = _run("--quiet", "--requirements", str(dev))
    assert "make setup" in proc.stdout and "pip install -r requirements-dev.txt" in proc.stdout


def test_missing_torch_says_how_to_install_the_cpu_build(monkeypatch, capsys):
    real = check_env.installed_version
    monkeypatch.setattr(check_env, "installed_version", lambda d: None if d in ("torch", "tqdm") else real(d))
    assert check_env.main([]) == 1
    out = capsys.readouterr().out
    assert "✗ torch" in out and "✗ tqdm" in out and "缺 2 项" in out
    assert f"pip install torch=={PINS['torch']} --index-url https://download.pytorch.org/whl/cpu" in out


def test_wrong_version_is_a_warning_not_a_failure(monkeypatch, capsys):
    real = check_env.installed_version
    monkeypatch.setattr(check_env, "installed_version", lambda d: "0.0.1" if d == "matplotlib" else real(d))
    assert check_env.main(["--quiet"]) == 0  # 能运行：退出码 0，但不再是一行
    out = capsys.readouterr().out
    assert "! matplotlib" in out and f"0.0.1——课程测试过的是 {PINS['matplotlib']}" in out


def test_on_colab_only_the_notebook_packages_matter():
    items = collect(PINS, on_colab=True, version_of=lambda d: None if d in ("jupyterlab", "nbgrader") else "9.9")
    names = {i.name for i in items}
    assert names == {"Python", *check_env.NOTEBOOK_PACKAGES}
    assert not [i for i in items if i.status == FAIL]
    assert all(i.status in (OK, WARN) for i in items)


def test_old_python_fails(monkeypatch):
    monkeypatch.setattr(sys, "version_info", types.SimpleNamespace(major=3, minor=8, micro=10))
    items = collect({}, on_colab=False)
    assert items[0].name == "Python" and items[0].status == FAIL and "需要 ≥ 3.10" in items[0].detail


@pytest.mark.parametrize("have, want, same", [("2.13.0+cpu", "2.13.0", True), ("2.13.0", "2.12.0", False)])
def test_local_build_tag_is_not_a_version_difference(have, want, same):
    assert check_env._same_release(have, want) is same


def test_nbgrader_extension_detection(monkeypatch, tmp_path):
    """Validate 按钮来自 nbgrader 的 JupyterLab 扩展：找不到扩展、或服务器扩展没启用时要提醒。"""
    import jupyter_core.paths as paths
    assert check_env._nbgrader_extension(PINS["nbgrader"]).status == OK  # 课程的 .venv 里是好的
    monkeypatch.setattr(paths, "jupyter_path", lambda *parts: [str(tmp_path / "share")])
    item = check_env._nbgrader_extension(PINS["nbgrader"])
    assert item.status == WARN and "没找到" in item.detail
    ext = tmp_path / "share" / "@jupyter" / "nbgrader"
    ext.mkdir(parents=True)
    (ext / "package.json").write_text('{"version": "%s"}' % PINS["nbgrader"], encoding="utf-8")
    monkeypatch.setattr(paths, "jupyter_config_path", lambda: [str(tmp_path / "etc")])
    item = check_env._nbgrader_extension(PINS["nbgrader"])
    assert item.status == WARN and "服务器扩展没启用" in item.detail
    conf = tmp_path / "etc" / "jupyter_server_config.d"
    conf.mkdir(parents=True)
    (conf / "nbgrader.json").write_text(
        '{"ServerApp": {"jpserver_extensions": {"nbgrader.server_extensions.validate_assignment": true}}}',
        encoding="utf-8")
    assert check_env._nbgrader_extension(PINS["nbgrader"]).status == OK
    assert check_env._nbgrader_extension("0.9.4").status == WARN  # 扩展和 nbgrader 版本不一致
