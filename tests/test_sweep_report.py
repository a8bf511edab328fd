"""lib/tools/sweep_report.py：各页记下的结论合成 docs/sweep_tables.md 里的表（每一次抽样一列）。"""
import json

import pytest

from lib.claims import always, check, sometimes
from lib.tools import sweep_report


def _record(tmp_path, monkeypatch, draw, claims, page="07_transformer_block"):
    monkeypatch.setenv("COURSE_CLAIMS_LOG", str(tmp_path / "claims" / f"{draw}.jsonl"))
    monkeypatch.setenv("COURSE_NOTEBOOK", page)
    (tmp_path / "claims").mkdir(exist_ok=True)
    try:
        check(*claims, title="§7.1")
    except AssertionError:
        pass


def test_table_has_a_column_per_draw_and_marks_failures(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_report, "CLAIMS_DIR", tmp_path / "claims")
    _record(tmp_path, monkeypatch, "shipped", [always("Pre-LN：准确率", [1.0, 0.995], low=0.99),
                                               sometimes("Post-LN 卡住的种子", [1, 0, 0, 1], at_least=1, at_most=3)])
    _record(tmp_path, monkeypatch, "avx2", [always("Pre-LN：准确率", [1.0, 0.98], low=0.99)])
    table = sweep_report.table()
    assert "| 结论 | 类型 | 要求 | 随仓库发布的结果 | AVX2 计算核，现场重训 |" in table
    assert "| Pre-LN：准确率 | 每个种子 | ≥ 0.99 | 0.995（2） | 0.98（2） ✗ |" in table
    assert "| Post-LN 卡住的种子 | 频率 | 1–3 次 | 2/4 | — |" in table  # 这一次没有记下这条：—


def test_the_tables_file_is_wholly_generated(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_report, "CLAIMS_DIR", tmp_path / "claims")
    _record(tmp_path, monkeypatch, "shipped", [always("a", [1.0], low=0.5)])
    doc = tmp_path / "sweep_tables.md"
    doc.write_text("旧的表，合并时留下的冲突标记 <<<<<<<\n", encoding="utf-8")
    sweep_report.write_tables(doc)
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# 各页训练结论的汇总") and "生成的文件" in text and "旧的表" not in text
    assert "| a | 每个种子 | ≥ 0.5 | 1（1） |" in text


def test_re_recording_one_page_leaves_the_other_pages_lines_and_order(tmp_path, monkeypatch):
    """只重新执行一页（--pages）：别的页的行一个字节都不变，文件和表都按 PAGES 的顺序（几个人各自重新生成不同的页，
    合并时不冲突；表的顺序不随执行的先后变）。"""
    monkeypatch.setattr(sweep_report, "CLAIMS_DIR", tmp_path / "claims")
    log = tmp_path / "claims" / "shipped.jsonl"
    for page in ("07_transformer_block", "11_mini_gpt_vs_rnn"):
        _record(tmp_path, monkeypatch, "shipped", [always(f"{page} 的结论", [1.0], low=0.5)], page=page)
    before = log.read_text(encoding="utf-8").splitlines()

    def fake_run(path, **kw):  # 重新执行第 7 页：它的结论换了一个值
        _record(tmp_path, monkeypatch, "shipped", [always("07_transformer_block 的结论", [0.9], low=0.5)])
        return 1.0, []

    monkeypatch.setattr(sweep_report, "run", fake_run)
    assert sweep_report.record("shipped", ["07_transformer_block"], {}) == []
    after = log.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["page"] for line in after] == ["07_transformer_block", "11_mini_gpt_vs_rnn"]
    assert after[1] == before[1] and after[0] != before[0]
    table = sweep_report.table()
    assert table.index("**07_transformer_block**") < table.index("**11_mini_gpt_vs_rnn**")


def test_the_tables_in_docs_are_up_to_date_with_the_recorded_claims():
    """docs/sweep_tables.md 是 artifacts/claims/*.jsonl 生成的：两者不一致（例如合并之后）时重新生成。"""
    assert sweep_report.TABLES.read_text(encoding="utf-8") == sweep_report.render(), (
        "docs/sweep_tables.md 和 artifacts/claims/ 里记下的结论不一致：运行 python -m lib.tools.sweep_report --table")


def test_the_recorded_sweep_covers_every_training_page():
    """随仓库发布的结果记下的结论：每一页都有，而且都成立（页面上的 check 本来就保证这一点；这里防的是漏记一页）。"""
    rows = [json.loads(line) for line in (sweep_report.CLAIMS_DIR / "shipped.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["page"] for r in rows} == set(sweep_report.PAGES)
    assert all(r["holds"] for r in rows)
