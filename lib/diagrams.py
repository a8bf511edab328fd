"""第 6–8 节 notebook 开头的结构示意图：用 matplotlib 画，每个函数一张图，返回 Figure。

图上的文字只用英文和数学符号（不依赖中文字体）。这些图只是示意，不做任何计算；
每一节要讲的计算写在 notebook 里。
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyBboxPatch, Rectangle

COLORS = {"attn": "#f6c89f", "ffn": "#a9d3f5", "norm": "#f3e79b", "embed": "#d9d9d9", "cross": "#c5e1a5"}
HEAD_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")


def _box(ax, x, y, text, color, w=2.2, h=0.55, fontsize=9):
    """以 (x, y) 为中心画一个圆角方框。"""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                fc=color, ec="black", lw=0.8))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, start, end, **kw):
    ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "-|>", "lw": 0.9, "color": "black", **kw})


def _plus(ax, x, y):
    ax.add_patch(plt.Circle((x, y), 0.17, fc="white", ec="black", lw=0.8))
    ax.text(x, y, "+", ha="center", va="center", fontsize=11)


def _skip(ax, x_from, y_from, y_to, x_side):
    """残差连接：从主干 (x_from, y_from) 向旁边绕过去，接到 (x_from, y_to) 的加号上。"""
    ax.plot([x_from, x_side, x_side], [y_from, y_from, y_to], color="black", lw=0.9)
    _arrow(ax, (x_side, y_to), (x_from + 0.17, y_to))


def _clean(ax, xlim, ylim):
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")


def transformer_block_figure():
    """§7.4：一个 Transformer 块的两种写法，Pre-LN（左）和 Post-LN（右），数据从下往上流。"""
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 6))
    for ax, pre in zip(axes, (True, False)):
        x, y = 0.0, 0.0
        ax.text(x, y - 0.05, r"$x^{(\ell)}$", ha="center", va="top", fontsize=11)
        # 两种写法都画 lib 的 Block 里真正用的 GELU（本页训练的模型都是它）；2017 年原版的 ReLU 写在标题下面
        for name, label in (("attn", "Multi-head\nself-attention"), ("ffn", "Feed-forward\n" + r"$W_2\,\mathrm{GELU}(W_1 x)$")):
            branch = y + 0.4  # 残差从这里分出去
            ax.plot([x, x], [y, branch], color="black", lw=0.9)  # 主干
            steps = [("norm", "LayerNorm"), (name, label)] if pre else [(name, label)]
            y_cur = branch
            for kind, text in steps:
                _arrow(ax, (x, y_cur), (x, y_cur + 0.45))
                y_cur += 0.75
                _box(ax, x, y_cur, text, COLORS[kind], h=0.55 if kind == "norm" else 0.75)
                y_cur += 0.3 if kind == "norm" else 0.4
            _arrow(ax, (x, y_cur), (x, y_cur + 0.45))
            y_plus = y_cur + 0.62
            _plus(ax, x, y_plus)
            _skip(ax, x, branch, y_plus, x - 1.6)
            y = y_plus + 0.17
            if not pre:
                _arrow(ax, (x, y), (x, y + 0.35))
                _box(ax, x, y + 0.62, "LayerNorm", COLORS["norm"])
                y += 0.9
        _arrow(ax, (x, y), (x, y + 0.5))
        ax.text(x, y + 0.55, r"$x^{(\ell+1)}$", ha="center", va="bottom", fontsize=11)
        formula = (r"$x \leftarrow x + \mathrm{Attn}(\mathrm{LN}(x))$" "\n" r"$x \leftarrow x + \mathrm{FFN}(\mathrm{LN}(x))$"
                   "\n(one more LN after the last block)" if pre else
                   r"$x \leftarrow \mathrm{LN}(x + \mathrm{Attn}(x))$" "\n" r"$x \leftarrow \mathrm{LN}(x + \mathrm{FFN}(x))$")
        ax.text(x, -1.0, formula, ha="center", va="top", fontsize=9)
        ax.set_title("Pre-LN (GPT-2 and later)" if pre else "Post-LN (original Transformer, 2017;\nits FFN used ReLU, lib uses GELU)",
                     fontsize=11)
        _clean(ax, (-2.2, 2.0), (-2.2, y + 1.1))
    fig.tight_layout()
    return fig


def multihead_figure(d: int = 12, n_heads: int = 3, T: int = 5):
    """§6.2：多头注意力把 Q、K、V 的 d 列切成 h 份，每个头（编号 ℓ = 1, …, h）各做一次注意力，再拼回 d 列乘 W^O。"""
    hs = d // n_heads
    fig, ax = plt.subplots(figsize=(11, 4.2))
    s = 0.18  # 每个矩阵元素画成 s × s 的小格

    def matrix(x0, y0, rows, cols, colors, label):
        """左下角在 (x0, y0) 的 rows × cols 矩阵；colors 给每 hs 列一种颜色（None 为灰色）。"""
        for c in range(cols):
            fc = colors[c // hs] if colors else COLORS["embed"]
            ax.add_patch(Rectangle((x0 + c * s, y0), s, rows * s, fc=fc, ec="white", lw=0.4))
        ax.add_patch(Rectangle((x0, y0), cols * s, rows * s, fill=False, ec="black", lw=0.8))
        ax.text(x0 + cols * s / 2, y0 - 0.12, label, ha="center", va="top", fontsize=9)
        return x0 + cols * s, y0 + rows * s / 2  # 右边中点

    heads = HEAD_COLORS[:n_heads]
    right, mid = matrix(0.0, 1.4, T, d, None, f"$X$: $T \\times d$\n$({T} \\times {d})$")
    _arrow(ax, (right + 0.05, mid), (right + 1.15, mid))  # 箭头够长，标注不压到 Q 的方框上
    ax.text(right + 0.6, mid + 0.08, "$W^Q, W^K, W^V$", ha="center", va="bottom", fontsize=8)
    x_q = right + 1.25
    right, _ = matrix(x_q, 1.4, T, d, heads, f"$Q$ (and $K$, $V$): $T \\times d$\nsplit into $h = {n_heads}$ heads of $d/h = {hs}$")
    x_att = right + 1.2
    x_cat = x_att + 4.0
    for i in range(n_heads):  # 每个头：自己的 hs 列 → 一张 T × T 的注意力图 → T × hs 的输出 → concat 里同色的几列
        y = 2.55 - i * 1.15
        _arrow(ax, (x_q + (i + 0.5) * hs * s, 1.4 + T * s / 2), (x_att - 0.05, y + T * s / 2))
        weights = np.random.default_rng(i).dirichlet(np.ones(T), T)  # 示意用的随机权重，每行和为 1
        ax.imshow(weights, cmap="Greys", extent=(x_att, x_att + T * s, y, y + T * s), vmin=0, vmax=1)
        ax.add_patch(Rectangle((x_att, y), T * s, T * s, fill=False, ec=heads[i], lw=2))
        ax.text(x_att + T * s + 0.1, y + T * s / 2, f"head {i + 1}:\n"  # 方框里是 T × T 的权重；头的输出是 T × d/h
                + rf"$\alpha_{i + 1} = $ softmax$(Q_{i + 1} K_{i + 1}^\top/\sqrt{{d/h}})$" + "\n"
                + rf"output $\alpha_{i + 1} V_{i + 1}$: $T \times d/h$", ha="left", va="center", fontsize=8)
        _arrow(ax, (x_cat - 0.6, y + T * s / 2), (x_cat - 0.05, mid + (n_heads - 1 - 2 * i) * 0.12), color=heads[i])
        ax.text(x_cat + (i + 0.5) * hs * s, 1.4 + T * s + 0.05, f"head {i + 1}", ha="center", va="bottom",
                fontsize=7, color=heads[i])
    ax.text(x_att + T * s / 2, -0.05, f"$h$ weight maps, each $T \\times T$", ha="center", va="top", fontsize=9)
    right, _ = matrix(x_cat, 1.4, T, d, heads, "concat: $T \\times d$")
    _arrow(ax, (right + 0.05, mid), (right + 0.65, mid))
    ax.text(right + 0.35, mid + 0.12, "$W^O$", ha="center", va="bottom", fontsize=9)
    right, _ = matrix(right + 0.75, 1.4, T, d, None, "output: $T \\times d$")
    ax.set_title(f"Multi-head attention: split $d = {d}$ into $h = {n_heads}$ heads, attend, concatenate, mix with $W^O$",
                 fontsize=10)
    _clean(ax, (-0.2, right + 0.2), (-0.5, 3.7))
    fig.tight_layout()
    return fig


def architectures_figure(n: int = 6, m: int = 4):
    """§8：编码器、解码器、编码器—解码器（上：结构；下：各自的注意力掩码，白 = 可以看）。"""
    fig = plt.figure(figsize=(11, 6.6))
    grid = fig.add_gridspec(2, 3, height_ratios=(1.5, 1))
    titles = ("Encoder (BERT)", "Decoder (GPT)", "Encoder-decoder (original Transformer, T5)")
    for col, title in enumerate(titles):
        ax = fig.add_subplot(grid[0, col])
        ax.set_title(title, fontsize=10)
        if col < 2:
            _box(ax, 0, 0.4, "tokens + positions", COLORS["embed"], w=2.4)
            _arrow(ax, (0, 0.7), (0, 1.1))
            _box(ax, 0, 1.55, ("Bidirectional" if col == 0 else "Causal") + "\nself-attention", COLORS["attn"], w=2.4, h=0.75)
            _arrow(ax, (0, 1.95), (0, 2.3))
            _box(ax, 0, 2.6, "Feed-forward", COLORS["ffn"], w=2.4)
            ax.text(1.35, 2.05, r"$\times N$", fontsize=10, va="center")
            _arrow(ax, (0, 2.9), (0, 3.3))
            ax.text(0, 3.35, "one vector per token\n(understanding)" if col == 0 else "next-token scores\n(generation)",
                    ha="center", va="bottom", fontsize=9)
            _clean(ax, (-1.8, 1.9), (0, 4.3))
        else:
            for x, name in ((-1.5, "source"), (1.5, "target so far")):
                _box(ax, x, 0.4, name, COLORS["embed"], w=2.0)
                _arrow(ax, (x, 0.7), (x, 1.1))
            _box(ax, -1.5, 1.55, "Bidirectional\nself-attention", COLORS["attn"], w=2.0, h=0.75)
            _box(ax, -1.5, 2.6, "Feed-forward", COLORS["ffn"], w=2.0)
            _arrow(ax, (-1.5, 1.95), (-1.5, 2.3))
            _box(ax, 1.5, 1.55, "Causal\nself-attention", COLORS["attn"], w=2.0, h=0.75)
            _arrow(ax, (1.5, 1.95), (1.5, 2.3))
            _box(ax, 1.5, 2.75, "Cross-attention\nQ: decoder\nK, V: encoder", COLORS["cross"], w=2.0, h=0.75, fontsize=8)
            _arrow(ax, (1.5, 3.15), (1.5, 3.5))
            _box(ax, 1.5, 3.8, "Feed-forward", COLORS["ffn"], w=2.0)
            _arrow(ax, (-1.5, 2.9), (-1.5, 3.3))
            ax.text(-1.5, 3.35, "encoder output\n" + r"$H^{\mathrm{enc}}$", ha="center", va="bottom", fontsize=9)
            _arrow(ax, (-0.75, 3.5), (0.33, 2.85), connectionstyle="arc3,rad=-0.2")
            ax.text(-1.5, 4.3, r"encoder $\times N$", ha="center", fontsize=9)
            ax.text(1.5, 4.3, r"decoder $\times N$", ha="center", fontsize=9)
            _clean(ax, (-2.8, 2.9), (0, 4.6))
    masks = ((np.ones((n, n)), "encoder self-attention:\nall positions", "key", "query"),
             (np.tril(np.ones((n, n))), "decoder self-attention:\ncausal (lower triangle)", "key", "query"),
             (np.ones((m, n)), "cross-attention: every target\nposition sees the whole source", "source position",
              "target position"))
    for col, (mask, title, xlabel, ylabel) in enumerate(masks):
        ax = fig.add_subplot(grid[1, col])
        ax.imshow(mask, cmap="Greys_r", vmin=0, vmax=1)
        ax.set_xticks(np.arange(-0.5, mask.shape[1]), minor=True)
        ax.set_yticks(np.arange(-0.5, mask.shape[0]), minor=True)
        ax.grid(which="minor", color="gray", lw=0.5)
        ax.tick_params(which="both", length=0, labelbottom=False, labelleft=False)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
    fig.tight_layout()
    return fig
