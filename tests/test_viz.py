"""lib/viz.py：vs_lecture 的表格和容差检查。"""
import pytest

from lib.viz import Table, vs_lecture


def test_single_column_shows_lecture_ours_and_difference():
    table = vs_lecture({"k = 1": 30.93}, {"k = 1": 30.9}, tol=0.05, fmt=".2f", row_header="k")
    assert isinstance(table, Table)
    assert table.headers == ["k", "讲义", "本课程的结果", "差（本课程 − 讲义）"]
    assert table.rows == [["k = 1", "30.90", "30.93", "+0.03"]]


def test_a_difference_that_rounds_to_zero_has_no_minus_sign():
    table = vs_lecture({"p = 0": 1.862699, "p = 1": 1.8628}, {"p = 0": 1.8627, "p = 1": 1.8627}, tol=0.001, fmt=".4f")
    assert [row[-1] for row in table.rows] == ["+0.0000", "+0.0001"]
    assert vs_lecture({"a": 30.84}, {"a": 30.9}, tol=0.1, fmt=".2f").rows[0][-1] == "-0.06"


def test_exact_compares_at_the_printed_precision():
    vs_lecture({"a": 0.95349}, {"a": 0.953}, tol="exact")  # 0.953 == 0.953
    with pytest.raises(AssertionError, match="逐位相同"):
        vs_lecture({"a": 0.9536}, {"a": 0.953}, tol="exact")  # 0.954 != 0.953


def test_out_of_tolerance_names_row_column_and_both_values():
    with pytest.raises(AssertionError) as err:
        vs_lecture({4: [2.0, 0.60]}, {4: [2.0, 0.497]}, tol=[0.05, 0.01], columns=["std", "max w"],
                   fmt=[".1f", ".3f"])
    message = str(err.value)
    assert "4，max w" in message and "0.600" in message and "0.497" in message
    assert "std" not in message.splitlines()[1]  # 只报超出容差的格子


def test_missing_values_are_shown_and_not_checked():
    table = vs_lecture({"x": [1.0, 5.0]}, {"x": [1.0, None], "y": [2.0, 3.0]}, tol=0.01, columns=["a", "b"])
    assert ["x", "讲义", "1.000", "—"] in table.rows
    assert ["y", "本课程的结果", "—", "—"] in table.rows


def test_percent_format_and_per_column_tolerance():
    table = vs_lecture({"learned": [0.97, 0.90]}, {"learned": [0.958, 0.978]}, tol=[0.05, 0.1],
                       columns=[4, 6], fmt=".1%")
    assert ["learned", "本课程的结果", "97.0%", "90.0%"] in table.rows


def test_per_row_tolerance():
    ours, lecture = {4: [2.0, 0.50], 16: [4.0, 0.50]}, {4: [2.0, 0.49], 16: [4.0, 0.49]}
    vs_lecture(ours, lecture, tol={4: [0.1, 0.02], 16: 0.02}, columns=["std", "max w"])  # 两行都在各自的容差内
    with pytest.raises(AssertionError) as err:
        vs_lecture(ours, lecture, tol={4: [0.1, 0.02], 16: [0.1, 0.005]}, columns=["std", "max w"])
    assert "16，max w" in str(err.value) and "4，max w" not in str(err.value) and "0.005" in str(err.value)
    with pytest.raises(ValueError, match="16"):
        vs_lecture(ours, lecture, tol={4: 0.1}, columns=["std", "max w"])


def test_draw_rotation_draws_arrows_and_arcs_of_the_given_angles():
    import math

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Arc

    from lib.viz import draw_rotation
    fig, ax = plt.subplots()
    q, q_rot = (1.0, 0.0), (0.0, 1.0)
    k, k_rot = (0.0, -1.0), (1.0, 0.0)
    draw_rotation(ax, [(q, q_rot, math.pi / 2, "q", "C0", r"\theta"), (k, k_rot, math.pi / 2, "k", "C3", r"2\theta")],
                  lim=2.0, title="t")
    arcs = [p for p in ax.patches if isinstance(p, Arc)]
    assert len(arcs) == 2
    assert [round(a.theta1) for a in arcs] == [0, -90] and [round(a.theta2 - a.theta1) for a in arcs] == [90, 90]
    texts = [t.get_text() for t in ax.texts]
    assert "$q$" in texts and r"$R(\theta)\,q$" in texts and r"$R(2\theta)\,k$" in texts and r"$2\theta$" in texts
    assert len(ax.patches) == 2 and sum(1 for c in ax.get_children() if type(c).__name__ == "Annotation") == 4
    assert ax.get_xlim() == (-2.0, 2.0) and ax.get_title() == "t"
    plt.close(fig)


def test_show_heatmaps_labels_axes_and_can_share_a_colour_scale():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lib.viz import show_heatmaps

    fig = show_heatmaps([[[0.2, 0.8], [0.5, 0.5]], [[0.1, 0.3], [0.0, 0.2]]], vmax=1.0,
                        xlabel="source position (key)", ylabel="decoder input (query)")
    images = [ax for ax in fig.axes if ax.images]
    assert [ax.get_xlabel() for ax in images] == ["source position (key)"] * 2
    assert [ax.get_ylabel() for ax in images] == ["decoder input (query)"] * 2
    assert {ax.images[0].get_clim() for ax in images} == {(0.0, 1.0)}, "vmax 给定时两张图共用一个色标"
    plt.close(fig)
    fig = show_heatmaps([[[0.2, 0.8]], [[0.1, 0.3]]])
    assert len({ax.images[0].get_clim() for ax in fig.axes if ax.images}) == 2, "不给 vmax：各用自己的色标"
    assert all(ax.get_xlabel() == "" for ax in fig.axes if ax.images)
    plt.close(fig)


def test_a_difference_that_rounds_to_zero_has_no_minus_sign_in_any_format():
    """−0.0000 和 −0.0% 都是“差为 0”：投影时一个负号会让人以为本课程偏小。"""
    from lib.viz import _signed
    assert _signed(-1e-5, ".4f") == "+0.0000" and _signed(-1e-4, ".1%") == "+0.0%"
    assert _signed(-0.3, ".1%") == "-30.0%" and _signed(-1e-9, ".2e") == "-1.00e-09"
