"""§11.3 的设定搜索（维护者用）：讲义没有定下的设定会不会把位置编码的排名翻过来。

讲义 §11.3 的排名是“RoPE 最差、正弦编码好”，notebook 11 随仓库发布的各组正好相反。这里把讲义留下的设定
（RoPE 的 base、头的维度、训练多久、正弦编码的尺度）一个一个地换，每个设定先训练 2–3 个种子找候选，
有希望的补到 10 个种子（0–9，和页面的种子相同）。每次训练都是 §11 的迷你 GPT，只改 SETTINGS 里写的那一项。

    nice -n 10 python -m lib.tools.position_search            # 训练缺的（本机缓存 .cache/experiments/），写 JSON、打印表
    python -m lib.tools.position_search --table               # 只把已有的读数打印成表（CONTRIBUTING.md 里的那张）
    python -m lib.tools.position_search --only rope_base10    # 只跑一个设定
    python -m lib.tools.position_search --ablate rope 0,1,2   # 拿掉 RoPE 的几个平面再测（CONTRIBUTING.md 里的第二张表）

读数（测试集困惑度、每轮开发集困惑度、各长度的主谓一致准确率、找主语的头的权重）写在
artifacts/11_mini_gpt/position_search.json，每行一个 (设定, 种子)，键里有设定和代码指纹：代码改了，旧读数不再算数。
搜出来的设定在 lib/experiments.py 的 SWEEP_ONLY_ARMS 里成为单独的一组，它的 10 个种子的读数在 sweep.json 里。
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from lib import experiments as ex
from lib.agreement import LENGTH_MODIFIERS, evaluate_run

PATH = ex.ARTIFACT_DIR / "position_search.json"
SCREEN, FULL = (0, 1, 2), tuple(range(10))
# 名字 → (说明, 位置编码, TransformerConfig 的覆盖项, RunSpec 的覆盖项, 种子)。
# 第一批：每个设定 3 个种子（有的 2 个）；有希望的补到 10 个种子（FULL）。
SETTINGS = {
    "rope_base10": ("RoPE，base 10（= d = 64 的正弦编码最快的 8 个频率）", "rope", (("rope_base", 10.0),), {}, FULL),
    "rope_base100": ("RoPE，base 100", "rope", (("rope_base", 100.0),), {}, FULL),
    "rope_base1000": ("RoPE，base 1000", "rope", (("rope_base", 1000.0),), {}, SCREEN),
    "rope_heads8": ("RoPE，8 个头（头的维度 8）", "rope", (("n_heads", 8),), {}, (0, 1)),
    "rope_heads2": ("RoPE，2 个头（头的维度 32）", "rope", (("n_heads", 2),), {}, (0, 1)),
    "rope_epochs16": ("RoPE，训练 16 轮", "rope", (), {"epochs": 16}, (0, 1)),
    "sinusoidal_epochs16": ("正弦编码 × 1，训练 16 轮", "sinusoidal", (), {"epochs": 16}, (0, 1)),
}


# 随仓库发布的各组（10 个种子的读数在 sweep.json 里，不重新训练）：表里和搜索的设定并排
SHIPPED = ("learned", "none", "sinusoidal", "sinusoidal_mid", "sinusoidal_small", "rope")


def spec_for(name: str, seed: int) -> ex.RunSpec:
    _, pos, model_args, changes, _ = SETTINGS[name]
    return ex.gpt_spec(pos, seed, model_args=model_args, **changes)


def reading_key(spec: ex.RunSpec) -> str:
    """和 sweep.json 一样：设定 + 训练代码 + 测量代码的指纹。"""
    return ex.sweep_key(spec)


def light(readings: dict) -> dict:
    """搜索只记这几样（完整的 evaluate_run 读数在成为一组之后进 sweep.json）。"""
    return {k: readings[k] for k in ("test_ppl", "dev_ppl", "agreement", "subject_head_by_k")}


def load(path=PATH) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8")) if Path(path).exists() else {}


def save(runs: dict, path=PATH) -> None:
    lines = [f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in sorted(runs.items())]
    Path(path).write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")


def run(names, path=PATH) -> dict:
    """训练（或从本机缓存取回）每个设定的每个种子、读数，逐个写进 path（中途停下也不丢已经算好的）。"""
    torch.set_num_threads(1)
    runs = load(path)
    for name, seed in [(name, seed) for name in names for seed in SETTINGS[name][4]]:
        spec = spec_for(name, seed)
        key = reading_key(spec)
        if key in runs:
            continue
        start = time.process_time()
        result = ex.load_or_train(spec, progress=False)
        readings = ex._to_json(light(evaluate_run(result)))
        runs[key] = {"setting": name, "seed": seed, "spec": spec.to_dict(), "readings": readings,
                     "cpu_s": round(time.process_time() - start, 1), "source": result.source}
        save(runs, path)
        acc = readings["agreement"]["int_keys"]
        print(f"{name} seed {seed}: {time.process_time() - start:.0f} cpu s ({result.source}); "
              + " ".join(f"{k}:{a:.3f}" for k, a in acc), flush=True)
    return runs


def table(path=PATH) -> str:
    """每个设定一行：种子数，每个修饰语个数的平均（最小–最大），出错（< 90%）的种子数，测试集困惑度。"""
    runs = [ex._from_json(r) | {"setting": r["setting"], "seed": r["seed"]} for r in load(path).values()]
    shipped, _ = ex.sweep_readings(SHIPPED, FULL, progress=False)
    runs += [{"setting": arm, "seed": seed, "readings": r} for (arm, seed), r in shipped.items()]
    names = {arm: f"{ex.ARM_NAMES[arm]}（随仓库发布的一组）" for arm in SHIPPED}
    head = ["设定", "种子"] + [f"{k} 个" for k in LENGTH_MODIFIERS[4:]] + ["10 个 < 90%", "6 个 < 90%", "测试集困惑度"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, text in (names | {name: s[0] for name, s in SETTINGS.items()}).items():
        mine = sorted((r for r in runs if r["setting"] == name), key=lambda r: r["seed"])
        if not mine:
            continue
        acc = lambda k: [r["readings"]["agreement"][k] for r in mine]
        cell = lambda xs: f"{sum(xs) / len(xs):.1%}（{min(xs):.1%}–{max(xs):.1%}）"
        seeds = ",".join(str(r["seed"]) for r in mine)
        ppl = [r["readings"]["test_ppl"] for r in mine]
        lines.append("| " + " | ".join([text, f"{len(mine)}（{seeds}）"] + [cell(acc(k)) for k in LENGTH_MODIFIERS[4:]]
                                       + [f"{sum(a < 0.9 for a in acc(10))}/{len(mine)}",
                                          f"{sum(a < 0.9 for a in acc(6))}/{len(mine)}",
                                          f"{min(ppl):.3f}–{max(ppl):.3f}"]) + " |")
    return "\n".join(lines)


ABLATIONS = {"rope": ((4, 5, 6, 7), (0, 1, 2, 3)), "rope_base100": ((6, 7), (4, 5))}  # (几乎不转的平面, 别的平面)


def without_planes(model, planes):
    """和 notebook 11 的同名函数一样：把每层每个头在这些平面上的查询分量（W^Q 的两行和偏置）置零。"""
    import copy

    model = copy.deepcopy(model)
    with torch.no_grad():
        for block in model.blocks:
            w, b, hs = block.attn.qkv_proj.weight, block.attn.qkv_proj.bias, block.attn.head_dim
            for h in range(block.attn.n_heads):
                for i in planes:
                    for r in (hs * h + i, hs * h + i + hs // 2):
                        w[r], b[r] = 0, 0
    return model


def ablate(arm: str, seeds) -> None:
    """arm（ABLATIONS 的名字）每个种子：完整的模型、拿掉几乎不转的平面、拿掉别的平面，2–10 个修饰语的准确率。"""
    from lib.agreement import agreement_table

    torch.set_num_threads(1)
    for seed in seeds:
        model = ex.load_or_train(ex.arm_spec(arm, seed), progress=False).model
        for name, planes in zip(("完整的模型", "拿掉几乎不转的平面", "拿掉别的平面"), ((), *ABLATIONS[arm])):
            acc = agreement_table(without_planes(model, planes), (2, 4, 6, 8, 10))
            print(f"{arm} 种子 {seed}，{name} {planes}：" + " / ".join(f"{a:.1%}" for a in acc.values()), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.tools.position_search", description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="只打印已有读数的表")
    parser.add_argument("--only", nargs="*", help="只跑这些设定（SETTINGS 的名字）")
    parser.add_argument("--ablate", nargs=2, metavar=("ARM", "SEEDS"), help="拿掉平面再测：组名（rope 或 rope_base100）和种子，如 0,1,2")
    args = parser.parse_args(argv)
    if args.ablate:
        ablate(args.ablate[0], [int(x) for x in args.ablate[1].split(",")])
        return 0
    if not args.table:
        run(args.only or list(SETTINGS))
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
