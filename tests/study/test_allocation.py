"""An allocated study (``zerogap evaluate --budget`` / ``--target-half-width``) end to end on the
reduced study's tiny models: the plan is computed from the second clean batch and recorded,
every strategy samples at it, resuming or adding a strategy samples only what is missing, a
raised budget only extends questions, TED reads its kept samples among the first m_q, and the
report states the allocation."""

import json
import shutil

import pytest

from helpers import ToyArith, refused
from zerogap.analysis.allocation import read_allocation
from zerogap.analysis.report import summary_table
from zerogap.engine.base import EngineOptions
from zerogap.io.counts import read_counts
from zerogap.readout import question_counts
from zerogap.store import PER_QUESTION, RunStore
from zerogap.study.run import evaluate
from zerogap.study.spec import SettingSpec, StudySpec
from zerogap.tasks.base import Grade, registered_task

STRATEGIES = ("identity", "ted", "railcap", "all-zero")
# Batch size and threads fixed, so that two runs of the same seed draw the same samples
# whatever else differs between them (a different m per question, the questions beside).
ENGINE = EngineOptions(max_batch=8, threads=1)


class SpreadTask(ToyArith):
    """toy-arith graded so that the tiny random models solve the questions as a benchmark's
    clean model does (most never, a few in the upper strata, where an allocation puts the
    samples): a response is correct when its bytes sum, modulo 10, below the question's
    threshold (a solve probability of about threshold / 10)."""

    THRESHOLDS = (0, 0, 0, 0, 0, 0, 2, 5, 8, 10)

    def grade(self, question, response):
        threshold = self.THRESHOLDS[int(question.id.removeprefix("test-"))]
        return Grade(response[:4], sum(response.encode()) % 10 < threshold)


@pytest.fixture(scope="module", autouse=True)
def _spread_task():
    with registered_task("toy-spread", SpreadTask):
        yield


@pytest.fixture(scope="module")
def spread_study(study_models):
    """Factory of the reduced study (tests/conftest.py) on toy-spread."""
    def make(**changes) -> StudySpec:
        setting = SettingSpec(name="tiny-toy", clean=str(study_models["clean"]),
                              contaminated=str(study_models["contaminated"]),
                              task="toy-spread", split_file=str(study_models["split"]))
        fields = dict(settings=(setting,), strategies=STRATEGIES, m=4, max_new_tokens=6,
                      resamples=200, title="allocated")
        return StudySpec(**{**fields, **changes})

    return make


def _entry(out):
    return json.loads((out / "study.json").read_text())["settings"][0]


def _stored(run_dir) -> dict[tuple[str, int], str]:
    with RunStore(run_dir, create=False) as store:
        return {(r.question_id, r.sample): r.text for r in store.samples()}


def _counts(run_dir) -> dict[str, int]:
    with RunStore(run_dir, create=False) as store:
        return store.sample_counts()


@pytest.fixture(scope="module")
def allocated(spread_study, tmp_path_factory):
    """The reduced study with a budget of 3 samples per question and strategy (m = 4)."""
    out = tmp_path_factory.mktemp("allocated")
    study = spread_study(budget=3)
    report = evaluate(study, out, engine=ENGINE)
    return out, report, study


def test_every_strategy_samples_at_the_recorded_plan(allocated):
    out, report, study = allocated
    entry = _entry(out)
    plan = read_allocation(out / entry["allocation"]["plan"])
    ids = [f"test-{i}" for i in range(10)]
    assert sorted(plan.samples) == sorted(ids) and plan.mean_samples <= 3
    assert len(set(plan.samples.values())) > 1  # the strata of the spread task tell them apart
    assert plan.inputs["clean_batch"] == entry["runs"]["clean, 2nd batch"].split("/")[-1]
    assert plan.inputs["budget"] == 3 and plan.inputs["pilot"] is None
    # the second clean batch stays at m; the reference batch holds the plan's reference, never
    # below m, more where the rule asks (K = 2: identity and railcap sample, TED filters
    # identity's, All-Zero draws none); the strategies hold exactly the plan
    assert set(read_counts(out / entry["counts"]["repeat"]).samples) == {4}
    assert plan.reference_strategies == 2
    assert min(plan.reference.values()) == 4 < max(plan.reference.values())
    reference = read_counts(out / entry["counts"]["clean"])
    assert dict(zip(reference.ids, reference.samples.tolist(), strict=True)) == plan.reference
    assert _counts(out / entry["runs"]["clean"]) == plan.reference
    for label in ("identity", "railcap", "ted"):
        assert _counts(out / entry["runs"][label]) == plan.samples
        with RunStore(out / entry["runs"][label], create=False) as store:
            assert store.config()["m"] == PER_QUESTION
        counts = read_counts(out / entry["counts"]["strategies"][label])
        if label != "ted":
            assert dict(zip(counts.ids, counts.samples.tolist(), strict=True)) == plan.samples
    # the samples drawn, by run: TED filters identity's and draws none
    drawn = entry["allocation"]["drawn"]
    assert drawn["identity"] == drawn["railcap"] == sum(plan.samples.values())
    assert drawn["clean"] == sum(plan.reference.values())
    assert drawn["clean, 2nd batch"] == 40 and drawn["pilot"] == 0
    assert "ted" not in drawn
    lines = report.checks["tiny-toy"].lines()
    assert lines[0].startswith("allocation: budget 3 samples per question and strategy")
    assert "reference batch at r_q from 4 to" in lines[0] and "for 2 sampled strategies" in lines[0]
    assert any("uniform m for the same half-width: not estimated" in line for line in lines)
    assert "allocation: budget 3" in summary_table(report)
    assert "Allocated samples (tiny-toy)" in report.html.read_text()
    assert "allocation: budget 3" in report.markdown.read_text()
    # each strategy's shift of SA-PPG at the plan from uniform m: in study.json and the report
    shift = entry["allocation"]["shift"]
    assert {"identity", "railcap", "ted"} <= set(shift)
    assert all(isinstance(s["shift"], float) and s["se"] >= 0 for s in shift.values())
    assert any(line.startswith("  shift of each strategy's expected SA-PPG") for line in lines)
    assert "shift of each strategy's expected SA-PPG" in report.markdown.read_text()


def test_teds_readout_counts_its_kept_samples_among_the_first_m_q(allocated):
    out, _, _ = allocated
    entry = _entry(out)
    plan = read_allocation(out / entry["allocation"]["plan"])
    with RunStore(out / entry["runs"]["ted"], create=False) as store:
        rows: dict[str, list] = {}
        for r in store.samples():
            rows.setdefault(r.question_id, []).append(r)
    counts = read_counts(out / entry["counts"]["strategies"]["ted"])
    for qid, correct, samples in zip(counts.ids, counts.correct, counts.samples, strict=True):
        first = rows[qid][:plan.samples[qid]]
        assert (correct, samples) == question_counts(
            "ted-kept", [r.correct for r in first], [r.stats for r in first])


def test_the_samples_a_question_shares_with_a_uniform_run_are_the_same(allocated,
                                                                         spread_study, tmp_path):
    """Identity's first m_q samples of every question are a uniform study's at the same seed,
    and so are the clean reference batch's first r_q."""
    out, _, _ = allocated
    entry = _entry(out)
    plan = read_allocation(out / entry["allocation"]["plan"])
    uniform = tmp_path / "uniform"
    most = max(*plan.samples.values(), *plan.reference.values())
    evaluate(spread_study(strategies=("identity",), m=most), uniform, engine=ENGINE)
    for run, wanted in (("identity", plan.samples), ("clean", plan.reference)):
        whole = _stored(uniform / _entry(uniform)["runs"][run])
        allocated_samples = _stored(out / entry["runs"][run])
        assert allocated_samples == {(q, s): whole[q, s] for q, m in wanted.items()
                                     for s in range(m)}


def test_resuming_or_adding_a_strategy_samples_only_what_is_missing(allocated, spread_study,
                                                                     tmp_path):
    out = tmp_path / "study"
    shutil.copytree(allocated[0], out)
    entry = _entry(out)
    plan_file = out / entry["allocation"]["plan"]
    recorded = plan_file.read_text()
    states = []
    evaluate(spread_study(budget=3), out, engine=ENGINE,
             progress=states.append)
    assert states[-1].rows_total == 0 and states[-1].rows_done == 0
    # a strategy added later samples at the recorded plan, nothing else samples again
    before = {label: _stored(out / run) for label, run in entry["runs"].items()
              if not run.split("/")[-1].startswith("greedy")}
    states.clear()
    evaluate(spread_study(strategies=(*STRATEGIES, "lne-blocking"), budget=3), out,
             engine=ENGINE, progress=states.append)
    assert plan_file.read_text() == recorded
    plan = read_allocation(plan_file)
    added = _entry(out)["runs"]["lne-blocking"]
    assert _counts(out / added) == plan.samples
    assert states[-1].rows_done == sum(plan.samples.values())
    assert all(_stored(out / entry["runs"][label]) == samples
               for label, samples in before.items())


def test_a_raised_budget_only_extends_questions(allocated, spread_study, tmp_path):
    out = tmp_path / "study"
    shutil.copytree(allocated[0], out)
    entry = _entry(out)
    first = read_allocation(out / entry["allocation"]["plan"])
    old = first.samples
    identity = _stored(out / entry["runs"]["identity"])
    states = []
    evaluate(spread_study(budget=5), out, engine=ENGINE,
             progress=states.append)
    raised = read_allocation(out / entry["allocation"]["plan"])
    new = raised.samples
    assert _entry(out)["runs"] == entry["runs"]  # the same runs, grown
    assert all(new[q] >= old[q] for q in old) and sum(new.values()) > sum(old.values())
    assert all(raised.reference[q] >= first.reference[q] for q in old)
    grown = sum(new.values()) - sum(old.values())
    grown_reference = sum(raised.reference.values()) - sum(first.reference.values())
    # identity and railcap (TED filters identity's), and the reference batch's growth
    assert states[-1].rows_done == 2 * grown + grown_reference
    after = _stored(out / entry["runs"]["identity"])
    assert {key: after[key] for key in identity} == identity
    for label in ("identity", "railcap", "ted"):
        assert _counts(out / entry["runs"][label]) == new
    # a lowered budget draws nothing: the runs keep their samples, the counts the new plan's
    states.clear()
    evaluate(spread_study(budget=3), out, engine=ENGINE,
             progress=states.append)
    assert states[-1].rows_done == 0
    assert _counts(out / entry["runs"]["identity"]) == new
    counts = read_counts(out / entry["counts"]["strategies"]["identity"])
    assert dict(zip(counts.ids, counts.samples.tolist(), strict=True)) == old
    counts = read_counts(out / entry["counts"]["clean"])
    assert dict(zip(counts.ids, counts.samples.tolist(), strict=True)) == first.reference


def test_a_pilot_predicts_half_widths_and_a_target_is_reached(spread_study, tmp_path):
    """With a pilot of each strategy the plan predicts half-widths and the uniform m of the
    same precision; a target is then sized to the fewest samples that reach it."""
    out = tmp_path / "budget"
    report = evaluate(spread_study(strategies=("identity", "railcap"), budget=4, pilot=2),
                      out, engine=ENGINE)
    entry = _entry(out)
    plan = read_allocation(out / entry["allocation"]["plan"])
    assert set(plan.half_widths) == {"identity", "railcap", "identity - railcap"}
    assert plan.uniform_samples is not None and plan.inputs["pilot"]["m"] == 2
    assert entry["allocation"]["drawn"]["pilot"] == 2 * 10 * 2
    assert any(line.startswith("  uniform m for the same largest predicted half-width")
               and "the whole study with the clean reference batch" in line
               for line in report.checks["tiny-toy"].lines())
    # the pilots draw on a seed of their own: none of their samples is a scored one
    pilots = {name for name in plan.inputs["pilot"]["runs"].values()}
    assert not pilots & {run.split("/")[-1] for run in entry["runs"].values()}
    target = max(plan.half_widths.values()) * (1 + 1e-9)  # the budget's plan reaches it
    aimed = tmp_path / "target"
    evaluate(spread_study(strategies=("identity", "railcap"), target_half_width=target,
                           pilot=2), aimed, engine=ENGINE)
    reached = read_allocation(aimed / _entry(aimed)["allocation"]["plan"])
    assert max(reached.half_widths.values()) <= target
    assert reached.mean_samples <= plan.mean_samples


@pytest.mark.parametrize("argv, fragments", [
    (["--budget", "3", "--target-half-width", "0.1"],
     ["--target-half-width and budget (--budget) are two ways"]),
    (["--target-half-width", "0.1"], ["--target-half-width needs a pilot"]),
    (["--pilot", "2"], ["--pilot applies to an allocated study only"]),
    (["--budget", "2", "--min-samples", "3"], ["--budget must be at least min_samples (3)"]),
    (["--budget", "3", "--max-samples", "2", "--min-samples", "3"],
     ["--max-samples must be at least min_samples (3)"]),
    (["--budget", "0.5"], ["--budget must be at least 1, got 0.5"]),
])
def test_contradictory_allocation_settings_are_one_line_exit_2(argv, fragments, tmp_path,
                                                               capsys):
    out = tmp_path / "out"
    refused(capsys, ["evaluate", "--clean", tmp_path / "c", "--contaminated", tmp_path / "d",
                     "--task", "arith", "--out", out, *argv], *fragments)
    assert not out.exists()


def test_a_study_files_allocation_errors_name_the_file(tmp_path, capsys):
    study = tmp_path / "study.toml"
    study.write_text('out = "o"\nbudget = 3\ntarget_half_width = 0.1\n[[setting]]\n'
                     'clean = "c"\ncontaminated = "d"\ntask = "arith"\n')
    refused(capsys, ["evaluate", study], f"{study}: StudySpec.target_half_width and budget")
    # a flag overriding the file is named as the flag
    study.write_text('out = "o"\nbudget = 3\n[[setting]]\nclean = "c"\ncontaminated = "d"\n'
                     'task = "arith"\n')
    refused(capsys, ["evaluate", study, "--target-half-width", "0.1", "--pilot", "2"],
            "error: --target-half-width and budget")
    assert not (tmp_path / "o").exists()
