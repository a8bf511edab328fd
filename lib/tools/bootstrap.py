"""每个 notebook 的第一个代码单元格（引导单元格）的唯一来源。

notebook 里的那个单元格由 `python -m lib.tools.badges --write` 从这里复制过去，不要手改。
本地：只是找到课程根目录并让 lib/ 可以导入。
Colab：按 COURSE_REF 固定的版本取回课程代码（notebook 和 lib/ 永远是同一个版本），
只安装 Colab 缺的包（绝不重装 torch），然后用一行话说明做了什么。
"""

BOOTSTRAP_SOURCE = '''\
# 引导单元格：让 lib/ 可以导入（本地和 Colab 通用，所有 notebook 都相同，请勿修改）
import pathlib, subprocess, sys
COURSE_REPO = "https://github.com/cs224n-zh/lecture07-transformers.git"
COURSE_REF = "main"
if "google.colab" in sys.modules:
    root = pathlib.Path("/content/lecture07")
    if not (root / "lib" / "transformer.py").exists():
        subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", COURSE_REF, COURSE_REPO, str(root)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "tqdm"], check=True)
    print(f"Colab：已取回课程 {COURSE_REF} 版本到 {root}，lib/ 可以导入。")
else:
    here = pathlib.Path.cwd().resolve()
    root = next(p for p in [here, *here.parents] if (p / "lib" / "transformer.py").exists())
    print("本地运行：已找到课程根目录，lib/ 可以导入。")
if str(root) not in sys.path:
    sys.path.insert(0, str(root))
'''
