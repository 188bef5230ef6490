"""``zerogap demo``: its study, its refusal without the contamination pipeline, and (slow) the
whole demo where that pipeline is installed."""

import importlib.util

import pytest

from zerogap import cli
from zerogap.analysis.evaluate import demo_study
from zerogap.analysis.study import DEFAULT_STRATEGIES

HAS_PIPELINE = importlib.util.find_spec("zerogap.pipelines") is not None and \
    importlib.util.find_spec("zerogap.pipelines.contamination") is not None


def test_demo_study_evaluates_every_strategy_on_the_built_models(tmp_path):
    study = demo_study(tmp_path, questions=10, m=4)
    (setting,) = study.settings
    assert study.labels() == list(DEFAULT_STRATEGIES)
    assert setting.task == "arith" and setting.limit == 10 and study.m == 4
    assert setting.clean == str(tmp_path / "clean")
    assert setting.split_file == str(tmp_path / "split.json")


@pytest.mark.skipif(HAS_PIPELINE, reason="the contamination pipeline is installed")
def test_demo_without_the_pipeline_is_a_one_line_error(tmp_path, capsys):
    assert cli.main(["demo", "--out", str(tmp_path / "demo"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "zerogap.pipelines.contamination" in err[-1]
    assert not (tmp_path / "demo" / "models").exists()


@pytest.mark.parametrize("argv", [["--questions", "1"], ["-m", "1"]])
def test_demo_refuses_sizes_below_two(argv, tmp_path, capsys):
    assert cli.main(["demo", "--out", str(tmp_path), *argv]) == 2
    assert "at least 2" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PIPELINE, reason="needs zerogap.pipelines.contamination")
def test_whole_demo_writes_the_report(tmp_path, capsys):
    out = tmp_path / "demo"
    assert cli.main(["demo", "--out", str(out), "--questions", "8", "-m", "4", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "SA-PPG" in printed and str(out / "report.html") in printed
    assert (out / "report.html").stat().st_size > 10_000
