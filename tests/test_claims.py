"""lib/claims.py：页面上的训练结论（每个种子都成立 / 频率）怎样检查、怎样显示、怎样记进汇总。"""
import json

import pytest

from lib import claims
from lib.claims import always, check, sometimes


def test_always_reports_the_worst_seed_and_its_margin():
    c = always("每个种子都至少 0.9", [0.97, 0.93, 0.99], low=0.9)
    assert c.holds and c.observed == 0.93 and c.margin == pytest.approx(0.03)
    both = always("落在区间里", [0.1, -0.05, 0.15], low=-0.1, high=0.25)
    assert both.observed == -0.05 and both.margin == pytest.approx(0.05)  # 离下界最近的那个种子
    upper = always("不超过 0.8", [0.5, 0.7], high=0.8)
    assert upper.observed == 0.7 and upper.bound() == "≤ 0.8"
    assert not always("全对", [1.0, 0.6], low=0.98).holds


def test_sometimes_counts_the_seeds_where_it_happened():
    c = sometimes("有的种子卡住", [True, False, True, False], at_least=1, at_most=3)
    assert c.holds and c.observed == 2 and c.shown() == "2 / 4" and c.bound() == "1–3 次"
    assert not sometimes("有的种子卡住", [False] * 4, at_least=1).holds
    assert not sometimes("不是每个种子都卡住", [True] * 4, at_most=3).holds


def test_check_shows_a_table_and_names_every_failed_claim():
    table = check(always("每个种子都至少 0.9", [0.95], low=0.9), [sometimes("有时", [1, 0], at_least=1)], title="演示")
    text = repr(table)
    assert "每个种子都至少 0.9" in text and "2 个种子里 1 个" in text and "✓" in text and text.startswith("▸ 演示")
    with pytest.raises(AssertionError, match="全对：0.600.*要求 ≥ 0.98"):
        check(always("全对", [1.0, 0.6], low=0.98), always("别的", [1.0], low=0.5))


def test_the_visible_line_and_the_table_speak_a_students_words_made_from_the_data():
    """摘要和“结果”一格由数据生成：10/10 写“全部”、0/10 写“一个也没有”，不会出现“只在一部分种子上”配 10/10。"""
    every = check(sometimes("三个目标全对", [1] * 10, at_least=7), title="3 个头")
    assert every.summary.startswith("3 个头：10 个种子里 10 个，全部（要求至少 7 个）")
    never = repr(check(sometimes("卡住", [0] * 10, at_most=4)))
    assert "10 个种子里 0 个，一个也没有" in never and "至多 4 个" in never
    worst = check(always("最差的目标", [0.97, 0.95, 0.99], low=0.9))
    assert worst.summary.startswith("全部 3 个都满足，最小的 0.950（要求每个都 ≥ 0.9）")
    html = worst._repr_html_()
    assert html.startswith('<details class="evidence"><summary>') and "<th>结果</th>" in html
    for reviewer_word in ("余量", "最不利的值", "个数"):
        assert reviewer_word not in repr(worst) + html


def test_claims_without_values_or_bounds_are_refused():
    with pytest.raises(ValueError):
        always("没有界限", [1.0])
    with pytest.raises(ValueError):
        sometimes("没有值", [], at_least=1)


def test_check_appends_to_the_log_when_asked(tmp_path, monkeypatch):
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv(claims.LOG_ENV, str(log))
    monkeypatch.setenv(claims.PAGE_ENV, "07_transformer_block")
    check(always("a", [1.0, 2.0], low=0.5), title="t")
    with pytest.raises(AssertionError):
        check(sometimes("b", [0, 0], at_least=1))
    rows = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert [(r["page"], r["text"], r["holds"]) for r in rows] == [("07_transformer_block", "a", True),
                                                                  ("07_transformer_block", "b", False)]
    assert rows[0]["values"] == [1.0, 2.0] and rows[0]["margin"] == 0.5 and rows[0]["title"] == "t"


def test_a_frequency_over_seeds_and_examples_counts_places_not_seeds():
    """10 个种子 × 2 个例句是 20 处，不是“20 个种子”（一位讲课的老师会被学生问住）。"""
    text = repr(check(sometimes("找主语的头看主语（种子 × 例句）", [1] * 14 + [0] * 6, at_least=12, of="处")))
    assert "20 处里 14 处" in text and "至少 12 处" in text and "个种子" not in text
    assert "10 个种子里 3 个" in repr(check(sometimes("x", [1, 1, 1] + [0] * 7, at_most=4)))


def test_the_seed_nearest_the_bound_is_named_by_what_it_is():
    """“最差的 0.495（要求 ≤ 0.7）”让学生以为 0.495 是个坏数：只有上界时说“最大的”，只有下界时说“最小的”。"""
    assert "最大的 0.495" in check(always("较散的头", [0.3, 0.495], high=0.7)).summary
    assert "最小的 0.956" in check(always("W 的差", [1.2, 0.956], low=0.1)).summary
    assert "最接近界限的 0.04" in check(always("差", [0.01, 0.04], low=-0.05, high=0.05)).summary
