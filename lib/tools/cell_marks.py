"""“点开才看”的单元格：一个标记，JupyterLab 和网页都认。

页面上把证据（结论表、种子表、容差的推导）收起来时，只给代码单元格加标签（``metadata.tags``）：
``hide-input``（收起代码，输出照常显示）、``hide-output``（收起输出）、``hide-cell``（都收起）。
网页（MyST-NB）直接读这些标签；JupyterLab 读的是 ``metadata.jupyter.source_hidden`` / ``outputs_hidden``，
由这里从标签写出来（``lib.tools.run_notebooks`` 保存输出时自动做；只改了标签时运行
``python -m lib.tools.cell_marks notebooks/*.ipynb``）。标签是唯一的来源：没有标签的单元格不收起。
markdown 单元格里的证据用 ``<details><summary>一行摘要</summary>`` 包起来，两边都认（见 CONTRIBUTING.md）。
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat

HIDES = {"hide-input": ("source_hidden",), "hide-output": ("outputs_hidden",),
         "hide-cell": ("source_hidden", "outputs_hidden")}


def wanted(cell) -> dict:
    """这个单元格的标签要求的 metadata.jupyter 里的收起标记。"""
    flags = {}
    if cell.get("cell_type") == "code":
        for tag in cell.get("metadata", {}).get("tags", []):
            flags.update({name: True for name in HIDES.get(tag, ())})
    return flags


def sync(nb) -> bool:
    """按标签写每个单元格的 metadata.jupyter 收起标记；返回有没有改动。"""
    changed = False
    for cell in nb.cells:
        meta = cell.setdefault("metadata", {})
        jupyter = {k: v for k, v in meta.get("jupyter", {}).items() if k not in ("source_hidden", "outputs_hidden")}
        jupyter.update(wanted(cell))
        if jupyter != meta.get("jupyter", {}):
            changed = True
            if jupyter:
                meta["jupyter"] = jupyter
            else:
                meta.pop("jupyter", None)
    return changed


def main(argv=None) -> int:
    for path in map(Path, argv if argv is not None else sys.argv[1:]):
        nb = nbformat.read(path, as_version=4)
        if sync(nb):
            nbformat.write(nb, path)
            print(f"{path}：按标签更新了收起标记")
    return 0


if __name__ == "__main__":
    sys.exit(main())
