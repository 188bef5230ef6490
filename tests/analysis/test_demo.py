"""``zerogap demo``: its study, its refusals, and (opt-in) the whole demo.

The whole demo trains the laptop preset's models and evaluates six strategies: about as long as
``make demo`` itself, so CI does not repeat it (the laptop preset is checked by
tests/pipelines/test_contamination_slow.py, the study by tests/analysis/test_evaluate.py).
``ZEROGAP_TEST_DEMO=1`` runs it.
"""

import json
import os

import numpy as np
import pytest

from zerogap import cli
from zerogap.analysis.design import design_criteria, read_design, sign_test
from zerogap.io.counts import read_counts
from zerogap.store import RunStore
from zerogap.study.run import demo_study
from zerogap.study.spec import ABLATION, DEFAULT_STRATEGIES


def test_demo_study_evaluates_every_strategy_on_the_built_models(tmp_path):
    study = demo_study(tmp_path, questions=10, m=4)
    (setting,) = study.settings
    assert study.labels() == list(DEFAULT_STRATEGIES)
    assert setting.task == "arith" and setting.limit == 10 and study.m == 4
    assert setting.clean == str(tmp_path / "clean")
    assert setting.split_file == str(tmp_path / "split.json")
    # shortcut neurons scored on the demo's own questions (leaked half included), B = 512
    assert study.calibration_size == 10 and study.neuron_block == 512
    assert study.control_labels() == ["railcap"]  # RailCap's collateral damage, always
    wide = demo_study(tmp_path, controls=True, ablation=True)
    assert wide.control_labels() == [s for s in wide.labels()
                                     if s not in ("identity", "all-zero")]
    assert set(ABLATION) <= set(wide.labels())


def _by_key(criteria):
    return {c.key: c for c in criteria}


def test_design_criteria_follow_their_definitions():
    # 6 questions, 3 leaked: clean solves 2 strictly between 0 and 1, 2 never
    clean = [0.0, 0.5, 1.0, 0.0, 0.25, 1.0]
    leaked = [True, True, True, False, False, False]
    co = [1.0, 1.0, 1.0, 0.0, 0.25, 1.0]  # up on 2 leaked, unchanged on unleaked
    copies, samples = [4, 4, 3, 1, 0, 0], [4, 4, 4, 4, 4, 4]
    got = _by_key(design_criteria(clean, [0.0, 0.25, 1.0, 0.25, 0.5, 0.75], co, copies, samples,
                                  leaked))
    assert got["spread"].value == pytest.approx(2 / 6) and not got["spread"].met
    assert got["no floor"].value == pytest.approx(2 / 6) and got["no floor"].met
    assert got["collapse (leaked)"].value == pytest.approx(11 / 12) and got["collapse (leaked)"].met
    assert got["dispersion"].value == pytest.approx(1 / 12) and got["dispersion"].met
    assert got["contamination"].value == pytest.approx(sign_test(2, 0)) == 0.25
    assert not got["contamination"].met  # two wins cannot reach p <= 0.01
    assert got["no spill-over"].value == 0 and got["no spill-over"].met
    # M_co far above M_cl on every unleaked question: outside any band the clean batches give
    shifted = _by_key(design_criteria(clean, clean, [1.0] * 6, copies, samples, leaked))
    assert shifted["no spill-over"].value > 0 and not shifted["no spill-over"].met
    with pytest.raises(ValueError, match="equal-length"):
        design_criteria(clean, clean[:5], co, copies, samples, leaked)


def test_sign_test_is_the_binomial_tail():
    assert sign_test(7, 0) == 2.0**-7 and sign_test(0, 3) == 1.0
    assert sign_test(5, 5) == pytest.approx(sum(__import__("math").comb(10, k)
                                                for k in range(5, 11)) / 1024)


def test_the_study_checks_the_design_before_any_strategy_samples(study_dir):
    """The demo's design checks on a reduced size: the tiny models of the reduced study."""
    out, report, states = study_dir
    stages = [stage for stage, _, _ in states]
    checked = next(i for i, s in enumerate(stages) if "design checks" in s)
    assert stages.index("tiny-toy: identity") < checked
    for later in ("railcap", "lne-blocking", "shortcut"):
        assert checked < stages.index(f"tiny-toy: {later}")
    entry = json.loads((out / "study.json").read_text())["settings"][0]
    criteria = _by_key(read_design(out / entry["design"]))
    assert list(criteria) == ["spread", "no floor", "collapse (leaked)", "dispersion",
                              "contamination", "no spill-over"]
    # recomputed from the exported counts and the stored samples
    clean = read_counts(out / entry["counts"]["clean"])
    r = clean.correct / clean.samples
    assert criteria["spread"].value == pytest.approx(np.mean((r > 0) & (r < 1)))
    assert criteria["no floor"].value == pytest.approx(np.mean(r == 0))
    with RunStore(out / entry["runs"]["greedy"], create=False) as store:
        greedy = {q: g.text.strip() for q, g in store.greedy().items()}
    with RunStore(out / entry["runs"]["identity"], create=False) as store:
        same = [(row.question_id in entry["leaked"], row.text.strip() == greedy[row.question_id])
                for row in store.samples()]
    leaked_same = [s for inside, s in same if inside]
    assert criteria["collapse (leaked)"].value == pytest.approx(np.mean(leaked_same))
    assert all(c.met == (c.value >= c.threshold if c.op == ">=" else c.value <= c.threshold)
               for c in criteria.values())
    # shown in the report and the terminal summary
    assert "design checks (" in report.markdown.read_text()
    html = report.html.read_text()
    assert 'id="checks"' in html and "no spill-over" in html and "F3" in html
    from zerogap.analysis.report import summary_table

    assert "spread:" in summary_table(report) and "F1 " in summary_table(report)


@pytest.mark.parametrize("argv", [["--questions", "1"], ["-m", "1"]])
def test_demo_refuses_sizes_below_two(argv, tmp_path, capsys):
    assert cli.main(["demo", "--out", str(tmp_path), *argv]) == 2
    assert "at least 2" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("ZEROGAP_TEST_DEMO"), reason="ZEROGAP_TEST_DEMO=1 runs it")
def test_whole_demo_writes_the_report(tmp_path, capsys):
    out = tmp_path / "demo"
    assert cli.main(["demo", "--out", str(out), "--questions", "8", "-m", "4", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "SA-PPG" in printed and str(out / "report.html") in printed
    assert (out / "report.html").stat().st_size > 10_000
