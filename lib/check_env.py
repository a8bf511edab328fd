"""环境检查：一屏告诉你缺什么、哪个版本不对、该运行什么。

    python -m lib.check_env          # 完整报告
    python -m lib.check_env --quiet  # 一切正常时只打印一行（make test 用它）

缺少必需的包时退出码为 1。版本号以 requirements.txt 为准（唯一的版本来源）；
版本不同只是提醒（通常也能用），不会让检查失败。
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _short_path(path) -> str:
    """课程目录里的路径写成相对路径（如 .venv/bin/python），别处的路径原样显示。"""
    p = Path(path)
    try:
        return str(p.relative_to(REPO_ROOT))
    except ValueError:
        try:
            return str(p.resolve().relative_to(REPO_ROOT.resolve()))
        except ValueError:
            return str(p)
REQUIREMENTS = REPO_ROOT / "requirements.txt"
MIN_PYTHON = (3, 10)
# 运行 notebook 必需的包：Colab 上只检查这些（JupyterLab、nbgrader 在 Colab 上用不到）
NOTEBOOK_PACKAGES = ("torch", "numpy", "matplotlib", "tqdm")
TORCH_CPU_INSTALL = "pip install torch=={version} --index-url https://download.pytorch.org/whl/cpu"

OK, WARN, FAIL, INFO = "✓", "!", "✗", "·"


@dataclass
class Item:
    status: str   # OK / WARN / FAIL / INFO
    name: str
    detail: str


def _width(text: str) -> int:
    """终端里的显示宽度：汉字占两格。"""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def read_pins(path: Path = REQUIREMENTS) -> dict[str, str]:
    """requirements 文件里的 `名字==版本`（忽略注释；`-r 别的文件` 也读进来，路径相对于这个文件）。
    学生用 requirements.txt；助教和测试用 requirements-dev.txt（它包含前者）。"""
    pins = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            pins.update(read_pins(Path(path).parent / line[3:].strip()))
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*==\s*([^\s;]+)", line)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _same_release(have: str, want: str) -> bool:
    """2.13.0+cpu 和 2.13.0 算同一个版本；只比较 + 前面的部分。"""
    return have.split("+", 1)[0] == want.split("+", 1)[0]


def _torch_detail(version: str) -> tuple[str, str]:
    try:
        import torch
    except Exception as err:  # noqa: BLE001  装坏了的 torch 抛什么的都有
        return FAIL, f"{version} 已安装但导入失败：{type(err).__name__}: {err}"
    if torch.cuda.is_available():
        return OK, f"{version}，CUDA {torch.version.cuda}，GPU：{torch.cuda.get_device_name(0)}"
    build = f"CUDA {torch.version.cuda} 版，但没有可用的 GPU" if torch.version.cuda else "CPU 版"
    return OK, f"{version}，{build}（本课程在 CPU 上就够用）"


def _nbgrader_extension(nbgrader_version: str | None) -> Item:
    """JupyterLab 里的 nbgrader 扩展（Validate 按钮、formgrader）：看扩展文件和服务器扩展的配置。"""
    try:
        from jupyter_core.paths import jupyter_config_path, jupyter_path
    except ImportError:
        return Item(INFO, "nbgrader 扩展", "没装 jupyter_core，无法检查")
    lab = next((Path(d) / "@jupyter" / "nbgrader" / "package.json" for d in jupyter_path("labextensions")
                if (Path(d) / "@jupyter" / "nbgrader" / "package.json").exists()), None)
    if lab is None:
        return Item(WARN, "nbgrader 扩展", "没找到：JupyterLab 里不会有 Validate 按钮；重新安装 nbgrader")
    lab_version = json.loads(lab.read_text(encoding="utf-8")).get("version", "?")
    server_on = False
    for d in jupyter_config_path():
        for f in sorted((Path(d) / "jupyter_server_config.d").glob("*.json")):
            try:
                exts = json.loads(f.read_text(encoding="utf-8")).get("ServerApp", {}).get("jpserver_extensions", {})
            except (OSError, ValueError):
                continue
            if "nbgrader.server_extensions.validate_assignment" in exts:
                server_on = bool(exts["nbgrader.server_extensions.validate_assignment"])
    if not server_on:
        return Item(WARN, "nbgrader 扩展", f"界面扩展 {lab_version} 在，但服务器扩展没启用："
                    "jupyter server extension enable --sys-prefix nbgrader.server_extensions.validate_assignment")
    if nbgrader_version and not _same_release(lab_version, nbgrader_version):
        return Item(WARN, "nbgrader 扩展", f"扩展是 {lab_version}，nbgrader 是 {nbgrader_version}：重新安装 nbgrader")
    return Item(OK, "nbgrader 扩展", f"{lab_version}（Validate 按钮和 formgrader）")


def collect(pins: dict[str, str] | None = None, on_colab: bool | None = None,
            version_of=None) -> list[Item]:
    """检查的全部结果。pins 默认读 requirements.txt；version_of 可以换掉（测试里模拟缺包）。"""
    pins = read_pins() if pins is None else pins
    version_of = version_of or installed_version
    on_colab = ("google.colab" in sys.modules) if on_colab is None else on_colab
    items = []
    py = sys.version_info
    py_text = f"{py.major}.{py.minor}.{py.micro}（{_short_path(sys.executable)}）"
    if (py.major, py.minor) < MIN_PYTHON:
        items.append(Item(FAIL, "Python", f"{py_text}：需要 ≥ {MIN_PYTHON[0]}.{MIN_PYTHON[1]}"))
    else:
        items.append(Item(OK, "Python", py_text))
    names = [n for n in pins if n in NOTEBOOK_PACKAGES] if on_colab else list(pins)
    for name in names:
        want = pins[name]
        have = version_of(name)
        if have is None:
            items.append(Item(FAIL, name, f"没有安装（课程用 {want}）"))
            continue
        status, detail = OK, have
        if name == "torch":
            status, detail = _torch_detail(have)
        if status == OK and not _same_release(have, want):
            status, detail = WARN, f"{detail}——课程测试过的是 {want}（通常也能用；出问题时先对齐版本）"
        items.append(Item(status, name, detail))
    if not on_colab and "nbgrader" in pins:
        items.append(_nbgrader_extension(version_of("nbgrader")))
    return items


def advice(items: list[Item], pins: dict[str, str], on_colab: bool, requirements: Path = REQUIREMENTS) -> list[str]:
    """该运行的命令（只在有问题时给出）。学生的清单（requirements.txt）：make lab 装好再打开 JupyterLab；
    测试和助教的清单（requirements-dev.txt，make test 用）：make setup。"""
    failed = {i.name for i in items if i.status == FAIL}
    warned = {i.name for i in items if i.status == WARN}
    if not failed and not warned:
        return []
    todo = []
    if "Python" in failed:
        todo.append(f"安装 Python ≥ {MIN_PYTHON[0]}.{MIN_PYTHON[1]}（推荐 3.11），再运行 make lab")
    if on_colab:
        missing = sorted(failed - {"Python"})
        if missing:
            todo.append(f"在 Colab 里运行：!pip install -q {' '.join(missing)}")
        return todo
    in_venv = Path(sys.prefix).resolve() == (REPO_ROOT / ".venv").resolve()
    if "torch" in failed and "torch" in pins:
        todo.append(TORCH_CPU_INSTALL.format(version=pins["torch"]) + "   （CPU 版 torch，先装它）")
    if failed - {"Python"} or warned - {"nbgrader 扩展"}:
        name = Path(requirements).name
        make = "make lab   （在课程根目录：装好缺的包，再打开 JupyterLab" if name == "requirements.txt" else \
            "make setup   （在课程根目录：装好测试和助教要的包"
        todo.append(f"{make}；装包等价于 {'.venv/bin/' if in_venv else ''}python -m pip install -r {name}）")
    if not in_venv and (REPO_ROOT / ".venv").exists():
        todo.append("注意：你现在用的不是课程的 .venv；用 .venv/bin/python 或 make lab 启动")
    ext = next((i for i in items if i.name == "nbgrader 扩展" and i.status == WARN), None)
    if ext:
        todo.append(ext.detail.split("：", 1)[-1])
    return todo


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.check_env", description="检查课程需要的 Python 环境")
    parser.add_argument("--quiet", action="store_true", help="一切正常时只打印一行")
    parser.add_argument("--requirements", type=Path, default=REQUIREMENTS,
                        help="版本清单（默认：课程根目录的 requirements.txt）")
    args = parser.parse_args(argv)
    pins = read_pins(args.requirements)
    on_colab = "google.colab" in sys.modules
    items = collect(pins, on_colab)
    n_fail = sum(i.status == FAIL for i in items)
    n_warn = sum(i.status == WARN for i in items)
    if args.quiet and not n_fail and not n_warn:
        print(f"环境检查通过：Python {sys.version_info.major}.{sys.version_info.minor}，"
              f"{len(items) - 1} 项依赖都在且版本对。")
        return 0
    where = "Colab（只检查运行 notebook 需要的包）" if on_colab else _short_path(sys.prefix)
    print(f"环境检查（{where}）")
    width = max(_width(i.name) for i in items)
    for i in items:
        print(f"  {i.status} {i.name}{' ' * (width - _width(i.name))}  {i.detail}")
    todo = advice(items, pins, on_colab, args.requirements)
    if n_fail:
        print(f"✗ 缺 {n_fail} 项必需的东西，课程还不能运行。要做的：")
    elif n_warn:
        print(f"! 能运行，但有 {n_warn} 项提醒。建议：")
    else:
        print("✓ 一切就绪。")
    for t in todo:
        print(f"    {t}")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
