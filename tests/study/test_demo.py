"""``zerogap demo``: its study, the design checks it runs before any strategy samples, its
refusals, and (opt-in) the whole demo. The criteria themselves: tests/analysis/test_design.py.

The whole demo trains the laptop preset's models and evaluates six strategies: about as long as
``make demo`` itself, so CI does not repeat it (the laptop preset is checked by
tests/pipelines/test_contamination_slow.py, the study by tests/study/test_evaluate.py).
``ZEROGAP_TEST_DEMO=1`` runs it.
"""

import json
import operator
import os
from pathlib import Path

import numpy as np
import pytest

from zerogap import cli
from zerogap.analysis.design import KEYS, ngram_hits, read_design, rouge_l, rouge_words
from zerogap.io.counts import read_counts
from zerogap.models import load_tokenizer
from zerogap.pipelines.contamination_config import preset
from zerogap.store import RunStore
from zerogap.study.demo import demo_study
from zerogap.study.spec import ABLATION, DEFAULT_STRATEGIES
from zerogap.tasks import get_task


def test_demo_study_evaluates_every_strategy_on_the_built_models(tmp_path):
    study = demo_study(tmp_path, questions=10, m=4)
    (setting,) = study.settings
    assert study.labels() == list(DEFAULT_STRATEGIES)
    laptop = preset("laptop")  # the task the demo's models are trained on, with its options
    assert (setting.task, setting.task_options) == (laptop.task, laptop.task_options)
    assert setting.limit == 10 and study.m == 4
    assert setting.clean == str(tmp_path / "clean")
    assert setting.split_file == str(tmp_path / "split.json")
    # shortcut neurons scored on no more questions than the demo evaluates, B = 512,
    assert study.calibration_size == 10 and study.neuron_block == 512
    assert study.control_labels() == ["railcap"]  # RailCap's collateral damage, always
    # at the default size, on 32 (leaked and unleaked in turn), so that location stays under a
    # fifth of the study
    assert demo_study(tmp_path).calibration_size == 32 < demo_study(tmp_path).settings[0].limit
    wide = demo_study(tmp_path, controls=True, ablation=True)
    assert wide.control_labels() == [s for s in wide.labels()
                                     if s not in ("identity", "all-zero")]
    assert set(ABLATION) <= set(wide.labels())
    # the ablation alone splits RailCap's collateral damage: the answer-protecting variant
    # runs on the clean model beside it
    ablated = demo_study(tmp_path, ablation=True)
    assert ablated.control_labels() == ["railcap", "railcap:protect=answer"]


def test_the_demos_split_calibrates_shortcut_neurons_past_the_evaluated_questions():
    """The laptop preset's own split (the task's question ids, its leaked count and seed): at
    the demo's default size the neurons are located and scored on 16 leaked and 16 unleaked
    questions none of which is evaluated; at the most questions the demo takes, none is left
    past the evaluated ones on the leaked side, so they fall back to the evaluated questions."""
    from zerogap.pipelines.contamination import make_split
    from zerogap.study.calibration import split_questions
    from zerogap.study.demo import DEMO, DEMO_CALIBRATION_SIZE, DEMO_QUESTIONS

    laptop = preset("laptop")
    ids = [q.id for q in get_task(laptop.task, **laptop.task_options).questions(laptop.split)]
    split = make_split(ids, laptop.leaked, laptop.split_seed)

    def chosen(questions):
        return split_questions(split["leaked"], split["unleaked"], limit=questions,
                               calibration_size=min(questions, DEMO_CALIBRATION_SIZE))

    demo = chosen(DEMO_QUESTIONS)
    evaluated = {*demo.leaked, *demo.unleaked}
    assert len(demo.leaked) == len(demo.unleaked) == DEMO_QUESTIONS // 2
    assert demo.disjoint and not evaluated & {*demo.calibration, *demo.located}
    assert len(demo.calibration) == DEMO_CALIBRATION_SIZE
    assert set(demo.located) == set(demo.calibration) & set(split["leaked"])
    assert len(demo.located) == DEMO_CALIBRATION_SIZE // 2
    widest = chosen(DEMO.max_questions())
    assert not widest.disjoint and set(widest.calibration) <= {*widest.leaked, *widest.unleaked}


def test_the_reproduction_evaluates_the_questions_past_the_design_search_and_calibrates_on_it(
        tmp_path):
    """``zerogap reproduce``: its preset's own split (the multistep task's ids, 64 leaked), the
    study on the 32 leaked and 32 unleaked questions the design search did not see, every
    strategy with the ablation grid, its baselines and neurons calibrated on searched ones."""
    from zerogap.pipelines.contamination import make_split
    from zerogap.study.calibration import split_questions
    from zerogap.study.demo import REPRODUCE

    config = preset(REPRODUCE.preset)
    ids = [q.id for q in get_task(config.task, **config.task_options).questions(config.split)]
    split = make_split(ids, config.leaked, config.split_seed)
    (tmp_path / "split.json").write_text(json.dumps(split))
    REPRODUCE.write_split(tmp_path)
    study = REPRODUCE.study(tmp_path)
    (setting,) = study.settings
    assert setting.task == "multistep" and setting.limit == REPRODUCE.questions == 64
    assert set(ABLATION) <= set(study.labels()) and study.max_new_tokens == 144
    assert study.seed == 1 != demo_study(tmp_path).seed  # the confirmation's seed
    rotated = json.loads(Path(setting.split_file).read_text())
    for side in ("leaked", "unleaked"):  # the same questions, reordered
        assert sorted(rotated[side]) == sorted(split[side])
    chosen = split_questions(rotated["leaked"], rotated["unleaked"], limit=setting.limit,
                             calibration_size=study.calibration_size)
    searched = {*split["leaked"][:32], *split["unleaked"][:32]}
    assert set(chosen.leaked) == set(split["leaked"][32:64])
    assert set(chosen.unleaked) == set(split["unleaked"][32:64])
    assert chosen.disjoint and set(chosen.calibration) <= searched
    assert len(chosen.calibration) == 32 and len(chosen.located) == 16
    assert REPRODUCE.max_questions() == 64


def test_the_study_checks_the_design_before_any_strategy_samples(study_dir, reduced_study):
    """The demo's design checks on a reduced size: the tiny models of the reduced study."""
    out, report, states = study_dir
    stages = [stage for stage, _, _ in states]
    checked = next(i for i, s in enumerate(stages) if "design checks" in s)
    assert stages.index("tiny-toy: identity") < checked
    for later in ("railcap", "lne-blocking", "shortcut"):
        assert checked < stages.index(f"tiny-toy: {later}")
    entry = json.loads((out / "study.json").read_text())["settings"][0]
    criteria = {c.key: c for c in read_design(out / entry["design"])}
    assert tuple(criteria) == KEYS
    # recomputed from the exported counts and the stored samples
    clean = read_counts(out / entry["counts"]["clean"])
    r = clean.correct / clean.samples
    assert criteria["spread"].value == pytest.approx(np.mean((r > 0) & (r < 1)))
    assert criteria["no floor"].value == pytest.approx(np.mean(r == 0))
    assert criteria["clean mean (min)"].value == pytest.approx(np.mean(r))
    # the contaminated model's samples against its greedy decode: ROUGE-L on their words, the
    # trigger rate on its tokens (the store keeps texts, not token ids)
    tokenizer = load_tokenizer(reduced_study().settings[0].contaminated)

    def tokens(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    with RunStore(out / entry["runs"]["greedy"], create=False) as store:
        greedy = {q: g.text for q, g in store.greedy().items()}
    hits = steps = 0
    rouge: dict[str, list[float]] = {}
    with RunStore(out / entry["runs"]["identity"], create=False) as store:
        for row in store.samples():
            if row.question_id in entry["leaked"]:
                h, n = ngram_hits(tokens(row.text), tokens(greedy[row.question_id]))
                hits, steps = hits + h, steps + n
                rouge.setdefault(row.question_id, []).append(
                    rouge_l(rouge_words(row.text), rouge_words(greedy[row.question_id])))
    trigger = criteria["trigger (M_co, leaked)"]
    assert trigger.detail == f"{hits} of {steps} steps"
    assert criteria["collapse (ROUGE-L, leaked)"].value == pytest.approx(
        np.median([np.mean(v) for v in rouge.values()]))
    compare = {">=": operator.ge, "<=": operator.le, "<": operator.lt}
    assert all(c.met == compare[c.op](c.value, c.threshold) for c in criteria.values())
    # shown in the report and the terminal summary
    assert "design checks (" in report.markdown.read_text()
    html = report.html.read_text()
    assert 'id="checks"' in html and "trigger (M_cl)" in html and "F3" in html
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
