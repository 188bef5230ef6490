"""Tables 1-4 from synthetic per-question counts whose truth is known by construction."""

import csv
import io
import json
import subprocess
import sys

import numpy as np
import pytest

from zerogap.analysis.scores import REPEAT, ScoreSettings, SettingCounts, score_setting
from zerogap.analysis.tables import study_tables, table1, table2, table3, table4, verdict_table
from zerogap.io.counts import QuestionCounts

FAST = ScoreSettings(n_boot=200, noise_sims=200, bins=10)


def counts(ids, p, m, rng):
    c = rng.binomial(m, p)
    return QuestionCounts("(test)", ids, c, np.full(len(ids), m), rng.binomial(1, p))


def setting(name="s", n=60, m=20, seed=0, strategies=("identity", "faithful")):
    rng = np.random.default_rng(seed)
    ids = tuple(f"q{i}" for i in range(n))
    p = rng.random(n)
    leaked = np.arange(n) < n // 2
    truth = {"identity": np.where(leaked, np.clip(p + 0.5, 0, 1), p),  # inflation left
             "faithful": p, "railcap:n=1": np.where(leaked, p, p * 0.3)}
    return SettingCounts(name, counts(ids, p, m, rng),
                         {s: counts(ids, truth.get(s, p), m, rng) for s in strategies},
                         repeat=counts(ids, p, m, rng),
                         leaked=frozenset(ids[: n // 2]))


@pytest.fixture(scope="module")
def scores():
    return score_setting(setting(), FAST)


def test_table1_marks_the_faithful_strategy_best_and_reports_each_subset(scores):
    t = table1(scores)
    assert [s.label for s in t.sections] == ["all questions", "leaked", "unleaked"]
    for section in t.sections:
        labels = [label for label, _ in section.rows]
        assert labels == ["identity", "faithful", "all-zero", REPEAT]
    for section in t.sections[:2]:  # on unleaked questions identity is faithful too
        assert section.best("sa_ppg") == {"faithful"}
    md = t.to_markdown()
    faithful = next(line for line in md.splitlines() if line.startswith("| faithful"))
    assert "**" in faithful.split("|")[3]  # best SA-PPG of the first section
    assert "noise floor" in md and REPEAT in md


def test_the_identity_gap_sits_on_the_leaked_questions(scores):
    leaked = scores.subsets[1].interval("identity", "delta_plus")
    unleaked = scores.subsets[2].interval("identity", "delta_plus")
    assert leaked.low > unleaked.high
    assert scores.verdict("identity").outcome == "not restored"
    assert scores.verdict("faithful").outcome != "not restored"


def test_csv_and_json_carry_every_cell_with_its_interval(scores):
    t = table2(scores)
    rows = list(csv.DictReader(io.StringIO(t.to_csv())))
    assert len(rows) == 3 * 4 * 5  # sections x rows x columns
    for row in rows:
        assert float(row["low"]) <= float(row["estimate"]) + 1e-12
        assert float(row["estimate"]) <= float(row["high"]) + 1e-12
    zero = [r for r in rows if r["row"] == "all-zero" and r["column"] == "sa_ppg"]
    assert len(zero) == 3 and all(r["best"] == "0" for r in zero)  # a reference, never best
    data = json.loads(json.dumps(t.to_dict()))
    assert data["sections"][0]["best"]["a_ppg"] == ["faithful"]
    assert {r["row"] for r in data["sections"][0]["rows"]} >= {"all-zero", REPEAT}


def test_table3_spans_settings_and_leaves_missing_strategies_empty():
    a = score_setting(setting("a"), FAST)
    b = score_setting(setting("b", seed=1, strategies=("identity",)), FAST)
    t = table3([a, b])
    assert t.columns == ("a", "b")
    cells = dict(t.sections[0].rows)
    assert cells["faithful"]["b"] is None and cells["faithful"]["a"] is not None
    assert "| faithful |" in t.to_markdown() and "–" in t.to_markdown()
    assert [x.key for x in study_tables([a, b])] == ["table1", "table2", "table3", "table4"]


def test_table4_lists_railcap_variants_by_n_then_ban_with_the_stratified_split():
    s = score_setting(setting(strategies=("railcap-ban", "faithful", "railcap", "railcap:n=1")),
                      FAST)
    t = table4(s)
    assert [label for label, _ in t.sections[0].rows] == [
        "railcap:n=1", "railcap", "railcap-ban", "all-zero", REPEAT]
    cells = dict(t.sections[0].rows)["railcap:n=1"]
    total = cells["s_delta_plus"].estimate + cells["s_delta_minus"].estimate
    assert total == pytest.approx(cells["sa_ppg"].estimate)
    assert not any("--ablation" in n for n in t.notes)
    assert "| s | railcap:n=1 |" in verdict_table([s])
    single = table4(score_setting(setting(strategies=("railcap:n=1",)), FAST))
    assert any("--ablation" in n for n in single.notes)


def test_a_split_without_unleaked_questions_is_refused():
    base = setting()
    bad = SettingCounts("s", base.clean, base.strategies, base.repeat,
                        frozenset(base.clean.ids))
    with pytest.raises(ValueError, match="no unleaked questions"):
        score_setting(bad, FAST)


def test_reading_side_never_imports_torch():
    code = ("import sys, zerogap.analysis.report, zerogap.analysis.tables, "
            "zerogap.analysis.figures, zerogap.analysis.study, zerogap.analysis.evaluate, "
            "zerogap.cli.evaluate; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_ties_share_the_mark_and_a_column_where_all_tie_marks_none():
    from zerogap.analysis.tables import Section
    from zerogap.uncertainty import Interval

    def row(label, v):
        return label, {"sa_ppg": Interval(v, v, v, 0.95)}

    assert Section("x", (row("a", 0.1), row("b", 0.1), row("c", 0.2))).best("sa_ppg") == {"a", "b"}
    assert Section("x", (row("a", 0.1), row("b", 0.1))).best("sa_ppg") == frozenset()
    assert Section("x", (row("a", 0.3), row(REPEAT, 0.0))).best("sa_ppg") == {"a"}
