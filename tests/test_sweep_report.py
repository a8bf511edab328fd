"""lib/tools/sweep_report.py：各页记下的结论合成 CONTRIBUTING.md 里的表（每一次抽样一列）。"""
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


def test_contributing_section_is_rewritten_between_the_markers(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_report, "CLAIMS_DIR", tmp_path / "claims")
    _record(tmp_path, monkeypatch, "shipped", [always("a", [1.0], low=0.5)])
    doc = tmp_path / "CONTRIBUTING.md"
    doc.write_text(f"前面\n{sweep_report.BEGIN}\n旧的表\n{sweep_report.END}\n后面\n", encoding="utf-8")
    sweep_report.write_contributing(doc)
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("前面\n") and text.endswith(f"{sweep_report.END}\n后面\n") and "旧的表" not in text
    assert "| a | 每个种子 | ≥ 0.5 | 1（1） |" in text
    doc.write_text("没有标记", encoding="utf-8")
    with pytest.raises(SystemExit, match="标记"):
        sweep_report.write_contributing(doc)


def test_the_recorded_sweep_covers_every_training_page():
    """随仓库发布的结果记下的结论：每一页都有，而且都成立（页面上的 check 本来就保证这一点；这里防的是漏记一页）。"""
    rows = [json.loads(line) for line in (sweep_report.CLAIMS_DIR / "shipped.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["page"] for r in rows} == set(sweep_report.PAGES)
    assert all(r["holds"] for r in rows)
