"""``zerogap demo``: its study, its refusals, and (opt-in) the whole demo.

The whole demo trains the laptop preset's models and evaluates six strategies: about as long as
``make demo`` itself, so CI does not repeat it (the laptop preset is checked by
tests/pipelines/test_contamination_slow.py, the study by tests/analysis/test_evaluate.py).
``ZEROGAP_TEST_DEMO=1`` runs it.
"""

import os

import pytest

from zerogap import cli
from zerogap.analysis.evaluate import demo_study
from zerogap.analysis.study import DEFAULT_STRATEGIES


def test_demo_study_evaluates_every_strategy_on_the_built_models(tmp_path):
    study = demo_study(tmp_path, questions=10, m=4)
    (setting,) = study.settings
    assert study.labels() == list(DEFAULT_STRATEGIES)
    assert setting.task == "arith" and setting.limit == 10 and study.m == 4
    assert setting.clean == str(tmp_path / "clean")
    assert setting.split_file == str(tmp_path / "split.json")


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
