"""Tables 1-4 from synthetic per-question counts whose truth is known by construction."""

import csv
import io
import json
import subprocess
import sys

import numpy as np
import pytest

from zerogap.analysis.score import REPEAT, ScoredRun, ScoreSettings, all_zero, score
from zerogap.analysis.tables import study_tables, table1, table2, table3, table4, verdict_table
from zerogap.io.counts import QuestionCounts

FAST = ScoreSettings(resamples=200, noise_sims=200, bins=10, margin=0.05)


def run(name, ids, p, m, rng):
    c = rng.binomial(m, p)
    return ScoredRun(name, QuestionCounts("(test)", ids, c, np.full(len(ids), m),
                                          rng.binomial(1, p)), {})


def setting(n=60, m=20, seed=0, strategies=("identity", "faithful"), split=None):
    """A study setting's inputs: clean, strategies (All-Zero last), references, leaked ids."""
    rng = np.random.default_rng(seed)
    ids = tuple(f"q{i}" for i in range(n))
    p = rng.random(n)
    leaked = np.arange(n) < n // 2
    truth = {"identity": np.where(leaked, np.clip(p + 0.5, 0, 1), p),  # inflation left
             "faithful": p, "railcap:n=1": np.where(leaked, p, p * 0.3)}
    clean = run("clean", ids, p, m, rng)
    runs = [run(s, ids, truth.get(s, p), m, rng) for s in strategies] + [all_zero(clean)]
    return clean, runs, [run(REPEAT, ids, p, m, rng)], frozenset(ids[: n // 2] if split is None
                                                               else split)


def scored(**kwargs):
    clean, runs, references, leaked = setting(**kwargs)
    return score(clean, runs, FAST, references=references, leaked=leaked)


@pytest.fixture(scope="module")
def scores():
    return scored()


def test_table1_marks_the_faithful_strategy_best_and_reports_each_subset(scores):
    t = table1("s", scores)
    assert [s.label for s in t.sections] == ["all questions", "leaked", "unleaked"]
    for section in t.sections:
        labels = [label for label, _ in section.rows]
        assert labels == ["identity", "faithful", "all-zero", REPEAT]
    for section in t.sections[:2]:  # on unleaked questions identity is faithful too
        assert section.best("sa_ppg") == {"faithful"}
    md = t.to_markdown()
    faithful = next(line for line in md.splitlines() if line.startswith("| faithful"))
    assert "**" in faithful.split("|")[3]  # best SA-PPG of the first section
    assert "noise floor" in md and REPEAT in md and "(first sample)" in md


def test_the_identity_gap_sits_on_the_leaked_questions(scores):
    leaked = scores.sections[1].interval("identity", "delta_plus")
    unleaked = scores.sections[2].interval("identity", "delta_plus")
    assert leaked.low > unleaked.high
    assert scores.verdict("identity").outcome == "not restored"
    assert scores.verdict("faithful").outcome != "not restored"


def test_a_sub_card_reads_what_its_questions_read_alone(scores):
    clean, runs, references, leaked = setting()
    inside = np.array([q in leaked for q in clean.counts.ids])

    def alone(run):
        c = run.counts
        return ScoredRun(run.name, QuestionCounts(c.path, tuple(np.asarray(c.ids)[inside]),
                                                  c.correct[inside], c.samples[inside],
                                                  c.first[inside]), {})

    card = score(alone(clean), [alone(r) for r in runs], FAST,
                 references=[alone(r) for r in references])
    sub = scores.sections[1]
    assert sub.label == "leaked" and sub.n_questions == inside.sum() == card.n_questions
    for name in (*card.strategies, REPEAT):
        assert sub.estimate(name) == card.estimate(name)
        assert sub.interval(name, "sa_ppg") == card.interval(name, "sa_ppg")
    assert sub.floor == card.floor and sub.best == card.best
    assert sub.verdicts == card.verdicts and len(scores.verdicts) == len(scores.strategies)


def test_csv_and_json_carry_every_cell_with_its_interval(scores):
    t = table2("s", scores)
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
    a = scored()
    b = scored(seed=1, strategies=("identity",))
    t = table3({"a": a, "b": b})
    assert t.columns == ("a", "b")
    cells = dict(t.sections[0].rows)
    assert cells["faithful"]["b"] is None and cells["faithful"]["a"] is not None
    assert "| faithful |" in t.to_markdown() and "–" in t.to_markdown()
    assert [x.key for x in study_tables({"a": a, "b": b})] == [
        "table1", "table2", "table3", "table4"]


def test_table4_lists_railcap_variants_by_n_then_ban_with_the_stratified_split():
    s = scored(strategies=("railcap-ban", "faithful", "railcap", "railcap:n=1"))
    t = table4("s", s)
    assert [label for label, _ in t.sections[0].rows] == [
        "railcap:n=1", "railcap", "railcap-ban", "all-zero", REPEAT]
    cells = dict(t.sections[0].rows)["railcap:n=1"]
    total = cells["s_delta_plus"].estimate + cells["s_delta_minus"].estimate
    assert total == pytest.approx(cells["sa_ppg"].estimate)
    assert not any("--ablation" in n for n in t.notes)
    assert "| s | railcap:n=1 |" in verdict_table({"s": s})
    single = table4("s", scored(strategies=("railcap:n=1",)))
    assert any("--ablation" in n for n in single.notes)


def test_a_split_without_unleaked_questions_is_refused():
    with pytest.raises(ValueError, match="no unleaked questions"):
        scored(split=[f"q{i}" for i in range(60)])


def test_reading_side_never_imports_torch():
    code = ("import sys, zerogap.analysis.report, zerogap.analysis.tables, "
            "zerogap.analysis.figures, zerogap.study.spec, zerogap.study.run, "
            "zerogap.study.settings, zerogap.cli.evaluate; "
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


def test_a_study_folder_written_before_the_scorecard_still_rescores():
    from zerogap.analysis.report import study_scoring

    old = {"bins": 10, "n_boot": 300, "level": 0.9, "margin": 0.03, "noise_sims": 200,
           "seed": 1, "within_questions": False}  # what study.json recorded before
    assert study_scoring({"scoring": old}) == ScoreSettings(
        bins=10, resamples=300, level=0.9, margin=0.03, noise_sims=200, seed=1)
