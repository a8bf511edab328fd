"""lib/fingerprint.py：代码指纹只跟着“代码算什么”变，注释、文档字符串和排版不算；在各个 Python 版本上相同。"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lib.fingerprint import code_fingerprint, code_text

ROOT = Path(__file__).resolve().parent.parent
TRANSFORMER = (ROOT / "lib" / "transformer.py").read_text(encoding="utf-8")


def test_docstrings_comments_and_layout_do_not_count():
    base = code_fingerprint(TRANSFORMER)
    edits = [
        TRANSFORMER.replace('class MultiHeadAttention(nn.Module):\n    """', 'class MultiHeadAttention(nn.Module):\n    """多头。', 1),
        TRANSFORMER.replace("# (B, T, n*hs) → (B, n, T, hs)", "# 拆头：(B, T, n*hs) → (B, n, T, hs)", 1),
        TRANSFORMER.replace("\n\n\ndef warmup_cosine", "\n\n\n# 学习率日程\n\n\ndef warmup_cosine", 1),
        TRANSFORMER.replace("\n", "\r\n"),  # Windows 上检出的换行
        TRANSFORMER + "\n\n",
    ]
    for edited in edits:
        assert edited != TRANSFORMER  # 这一处编辑真的改了文本
        assert code_fingerprint(edited) == base


def test_a_one_line_change_to_what_the_code_computes_counts():
    base = code_fingerprint(TRANSFORMER)
    changes = [
        TRANSFORMER.replace("for step in range(steps):", "for step in range(steps - 1):", 1),  # train_steps 少走一步
        TRANSFORMER.replace("max_lr * (step + 1) / warmup_steps", "max_lr * step / warmup_steps", 1),  # 预热的公式
        TRANSFORMER.replace("def warmup_cosine(", "def warmup_cos(", 1),  # 改名也算
    ]
    for changed in changes:
        assert changed != TRANSFORMER and code_fingerprint(changed) != base


def test_a_function_with_only_a_docstring_and_functions_from_source():
    assert code_text('def f():\n    """说明"""\n') == code_text("def f():\n    pass\n")
    assert code_text("    def g(x):\n        return x + 1\n") == code_text("def g(x):\n    return x + 1  # 缩进不算\n")
    assert code_fingerprint(code_fingerprint) == code_fingerprint(code_fingerprint)  # 函数对象：按它的源码
    assert code_fingerprint("a = 1") != code_fingerprint("a = 2")
    assert code_text("f(lambda x:") == "f(lambda x:"  # 单独不成句的源码：按文本


def _other_pythons() -> list[str]:
    """这台机器上能运行的 Python 3.10、3.12、3.13（PATH 上的，以及 pyenv 装的）。"""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = {}
    for minor in (10, 12, 13):
        candidates = [shutil.which(f"python3.{minor}")] + sorted(str(p) for p in root.glob(f"3.{minor}.*/bin/python3"))
        for path in filter(None, candidates):
            ok = subprocess.run([path, "-c", f"import sys; assert sys.version_info[:2] == (3, {minor})"],
                                capture_output=True).returncode == 0
            if ok:
                found[minor] = path
                break
    return list(found.values())


OTHER_PYTHONS = _other_pythons()


@pytest.mark.skipif(not OTHER_PYTHONS, reason="这台机器上没有别的 Python 版本")
def test_the_fingerprint_is_the_same_on_every_python_version():
    """Colab 的 Python 和维护者的不同：同一份 lib 的指纹必须相同，否则学生那里找不到随仓库发布的结果、改为现场重训。"""
    code = ("import importlib.util, pathlib, sys; spec = importlib.util.spec_from_file_location('fp', 'lib/fingerprint.py'); "
            "fp = importlib.util.module_from_spec(spec); spec.loader.exec_module(fp); "
            "print(fp.code_fingerprint(*[pathlib.Path('lib', n).read_text(encoding='utf-8') for n in "
            "('transformer.py', 'rnn.py', 'toy_language.py', 'toy_tasks.py')]))")
    from lib.shipped import lib_fingerprint

    for python in OTHER_PYTHONS:
        out = subprocess.run([python, "-c", code], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == lib_fingerprint(), python
