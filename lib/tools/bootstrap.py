"""每个 notebook 的第一个代码单元格（引导单元格）的唯一来源。

notebook 里的那个单元格由 `python -m lib.tools.badges --write`（`make stamp-badges`）从这里
复制过去，不要手改。仓库地址和版本只写在一个地方：pyproject.toml 的 [tool.course] 表
（repository、ref）。改了它们之后运行 `make stamp-badges`，所有 Colab 徽章和引导单元格一起更新。

本地：只是找到课程根目录并让 lib/ 可以导入。
Colab：按 COURSE_REF 固定的版本（分支、标签或提交哈希）取回课程代码，所以 notebook 和 lib/
永远是同一个版本；只安装 Colab 缺的包（绝不重装 torch），然后用一行话说明做了什么。
"""
from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = REPO_ROOT / "pyproject.toml"
# pyproject.toml 不在时（例如只拷贝了 lib/）使用的默认值
DEFAULT_REPOSITORY = "https://github.com/cs224n-zh/lecture07-transformers"
DEFAULT_REF = "main"
COLAB_DIR = "/content/lecture07"
# 在 Colab 上要有的包（导入名）；torch 是 Colab 自带的，永远不在这里
COLAB_NEEDS = ("numpy", "matplotlib", "tqdm")


def course_config(pyproject: Path = PYPROJECT) -> dict:
    """读 pyproject.toml 的 [tool.course]：{"repository": ..., "ref": ...}。"""
    config = {"repository": DEFAULT_REPOSITORY, "ref": DEFAULT_REF}
    if not pyproject.exists():
        return config
    text = pyproject.read_text(encoding="utf-8")
    try:
        import tomllib  # Python ≥ 3.11
        table = tomllib.loads(text).get("tool", {}).get("course", {})
    except ModuleNotFoundError:  # Python 3.10：只需要两个简单的字符串值
        section = re.search(r"^\[tool\.course\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
        body = section.group(1) if section else ""
        table = dict(re.findall(r'^\s*(repository|ref)\s*=\s*"([^"]*)"', body, re.M))
    for key in ("repository", "ref"):
        if key in table:
            value = str(table[key]).strip()
            if not value:
                raise ValueError(f"pyproject.toml 的 [tool.course] 里 {key} 不能为空")
            config[key] = value
    return config


def github_slug(repository: str) -> str:
    """'https://github.com/owner/name(.git)' → 'owner/name'（Colab 徽章只认 GitHub 仓库）。"""
    m = re.fullmatch(r"(?:https://|git@)github\.com[/:]([^/]+)/([^/]+?)(?:\.git)?/?", repository)
    if not m:
        raise ValueError(f"Colab 徽章需要 GitHub 仓库地址（https://github.com/OWNER/NAME），得到的是 {repository!r}")
    return f"{m.group(1)}/{m.group(2)}"


def clone_url(repository: str) -> str:
    """git clone 用的地址：GitHub 地址补上 .git，其他（如测试用的 file://）原样返回。"""
    if repository.startswith("https://github.com/") and not repository.endswith(".git"):
        return repository.rstrip("/") + ".git"
    return repository


def colab_url(path_in_repo: str, config: dict | None = None) -> str:
    """某个 notebook 的 "Open in Colab" 地址。path_in_repo 例如 'notebooks/02_self_attention.ipynb'。"""
    config = config or course_config()
    path = path_in_repo.replace("\\", "/").lstrip("/")
    return (f"https://colab.research.google.com/github/{github_slug(config['repository'])}"
            f"/blob/{config['ref']}/{path}")


_TEMPLATE = '''\
# 引导单元格：让 lib/ 可以导入（本地和 Colab 通用，所有 notebook 都相同，请勿修改）
import importlib.util, pathlib, shutil, subprocess, sys
COURSE_REPO = "@REPO@"
COURSE_REF = "@REF@"
if "google.colab" in sys.modules:
    root = pathlib.Path("@COLAB_DIR@")
    fetch = not (root / "lib" / "transformer.py").exists()
    if fetch:
        git = lambda *args: subprocess.run(["git", *args], capture_output=True, text=True)
        shutil.rmtree(root, ignore_errors=True)
        r = git("clone", "-q", "--depth", "1", "--branch", COURSE_REF, COURSE_REPO, str(root))
        if r.returncode != 0:  # COURSE_REF 是提交哈希：完整克隆后检出那个提交
            shutil.rmtree(root, ignore_errors=True)
            r = git("clone", "-q", COURSE_REPO, str(root))
            r = git("-C", str(root), "checkout", "-q", COURSE_REF) if r.returncode == 0 else r
        if r.returncode != 0:
            raise RuntimeError(f"没能取回课程代码 {COURSE_REPO}（版本 {COURSE_REF}）：{r.stderr.strip()}")
    missing = [m for m in @NEEDS@ if importlib.util.find_spec(m) is None]
    if missing:  # 只补装 Colab 缺的包；torch 是 Colab 自带的，绝不重装
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)
    print(f"Colab：{'已取回' if fetch else '已有'}课程 {COURSE_REF} 版本（{root}），lib/ 可以导入；补装的包：{'、'.join(missing) or '无'}。")
else:
    here = pathlib.Path.cwd().resolve()
    root = next((p for p in [here, *here.parents] if (p / "lib" / "transformer.py").exists()), None)
    if root is None:
        raise FileNotFoundError(f"从 {here} 往上找不到课程根目录（含 lib/transformer.py）：请在课程仓库里打开这个 notebook")
    print("本地运行：已找到课程根目录，lib/ 可以导入。")
if str(root) not in sys.path:
    sys.path.insert(0, str(root))
'''


def bootstrap_source(repository: str | None = None, ref: str | None = None,
                     colab_dir: str = COLAB_DIR) -> str:
    """引导单元格的源码。参数默认取 [tool.course]；测试可以换成本地 file:// 仓库和临时目录。"""
    config = course_config()
    repo = clone_url(repository or config["repository"])
    ref = ref or config["ref"]
    for name, value in (("repository", repo), ("ref", ref), ("colab_dir", colab_dir)):
        if '"' in value or "\\" in value or "\n" in value:
            raise ValueError(f"{name} 里不能有引号、反斜杠或换行：{value!r}")
    return (_TEMPLATE.replace("@REPO@", repo).replace("@REF@", ref)
            .replace("@COLAB_DIR@", colab_dir).replace("@NEEDS@", "(" + ", ".join(f'"{m}"' for m in COLAB_NEEDS) + ")"))


BOOTSTRAP_SOURCE = bootstrap_source()
