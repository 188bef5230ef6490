"""What TED kept and what LNE-blocking blocked, read from the reduced study's own run stores
(issue 47, item 4): the numbers follow from the stored samples and greedy decodes by
construction, and the report states them."""

import json
import math
from collections import Counter

from markupsafe import escape

from zerogap.analysis.baselines import BlockingReadout, FilterReadout, run_readouts
from zerogap.analysis.report import SettingChecks
from zerogap.store import RunStore, SampleRow


def _entry(out):
    return json.loads((out / "study.json").read_text())["settings"][0]


def test_teds_kept_share_and_empty_questions_per_split_follow_its_stored_flags(study_dir):
    out, report, _ = study_dir
    entry = _entry(out)
    leaked = set(entry["leaked"])
    (ted,) = [r for r in report.checks["tiny-toy"].readouts if r.label == "ted"]
    assert isinstance(ted, FilterReadout) and ted.settings["tau"] == 2
    with RunStore(out / entry["runs"]["ted"], create=False) as store:
        rows = list(store.samples())
    flags: dict[str, list[bool]] = {}
    for r in rows:
        flags.setdefault(r.question_id, []).append(bool(r.stats["ted_kept"]))
    for group in ted.groups:
        mine = [f for q, f in flags.items() if (q in leaked) == (group.group == "leaked")]
        assert group.questions == len(mine) == 5
        assert math.isclose(group.kept_share, sum(sum(f) / len(f) for f in mine) / len(mine))
        assert group.none_kept == sum(not any(f) for f in mine)
        assert 0 <= group.kept_share <= 1
    assert [g.group for g in ted.groups] == ["leaked", "unleaked"]
    # a question with nothing kept reads 0 in TED's counts, as All-Zero's does
    counts = {json.loads(line)["id"]: json.loads(line) for line in
              (out / entry["counts"]["strategies"]["ted"]).read_text().splitlines()}
    assert all(counts[q]["correct"] == 0 for q, f in flags.items() if not any(f))
    # the report's baselines lines and its HTML page say it
    assert ted.sentence() in report.markdown.read_text()
    assert escape(ted.sentence()) in report.html.read_text()


def test_lne_blockings_counts_are_its_formula_on_the_stored_greedy_entropies(study_dir):
    out, report, _ = study_dir
    entry = _entry(out)
    leaked = set(entry["leaked"])
    (blocked,) = [r for r in report.checks["tiny-toy"].readouts if r.label == "lne-blocking"]
    assert isinstance(blocked, BlockingReadout) and blocked.unrecorded == 0
    # the toy task has no reference solutions: T_task stays 7, beta 2 (docs/baselines.md §2)
    with RunStore(out / entry["runs"]["greedy"], create=False) as store:
        greedy = store.greedy()
    expected = Counter(
        (math.floor(7 * min(max(1 - sum(g.entropies) / len(g.entropies) / 2, 0), 1)),
         "leaked" if q in leaked else "unleaked") for q, g in greedy.items())
    found = Counter({(n, group): k for n, by in blocked.counts.items()
                     for group, k in by.items() if k})
    assert found == expected
    assert sum(found.values()) == entry["questions"]
    assert blocked.sentence() in report.markdown.read_text()
    assert escape(blocked.sentence()) in report.html.read_text()


def test_one_count_on_every_question_is_said_plainly_and_a_run_without_counts_too(tmp_path):
    ids = [f"q{i}" for i in range(4)]
    with RunStore(tmp_path / "run") as store:
        store.check_config({"strategy": "lne-blocking", "readout": "plain", "m": 2})
        store.add_samples([SampleRow(q, s, "x", 1, "stop", None, False,
                                     {"blocking_count": 1} if q != "q3" else {})
                           for q in ids for s in range(2)])
    (readout,) = run_readouts("lne-blocking", tmp_path / "run", ids[:3], {"q0", "q1"})
    assert readout.counts == {1: {"leaked": 2, "unleaked": 1}}
    assert readout.sentence() == ("lne-blocking: blocking count 1 on every question (3): the "
                                  "per-question estimate never acts")
    # q3's samples record no count (a backend without per-sample statistics): said, not hidden
    (partial,) = run_readouts("lne-blocking", tmp_path / "run", ids, None)
    assert partial.counts == {1: {"all": 3}} and partial.unrecorded == 1
    assert partial.sentence().endswith("; 1 questions without a recorded count")
    unsplit = BlockingReadout("lne-blocking", {0: {"all": 1}, 1: {"all": 2}}, 0)
    assert unsplit.sentence() == "lne-blocking: questions per blocking count, 0: 1; 1: 2"
    assert "every recorded question (3)" in partial.sentence()
    # counts that differ are listed per count and group
    spread = BlockingReadout("lne-blocking", {0: {"leaked": 1, "unleaked": 3},
                                              2: {"leaked": 3, "unleaked": 1}}, 0)
    assert spread.sentence() == ("lne-blocking: questions per blocking count, 0: 1 leaked, "
                                 "3 unleaked; 2: 3 leaked, 1 unleaked")


def test_a_plain_run_has_no_readout_and_an_allocated_one_reads_its_first_samples(tmp_path):
    with RunStore(tmp_path / "plain") as store:
        store.check_config({"strategy": "identity", "readout": "plain", "m": 2})
        store.add_samples([SampleRow("q0", s, "x", 1, "stop", None, True, {}) for s in range(2)])
    assert run_readouts("identity", tmp_path / "plain", ["q0"], None) == []
    with RunStore(tmp_path / "ted") as store:
        store.check_config({"strategy": "ted", "readout": "ted-kept", "m": "per question",
                            "strategy_config": {"tau": 1}})
        store.add_samples([SampleRow("q0", s, "x", 1, "stop", None, True, {"ted_kept": s >= 2})
                           for s in range(4)])
    (whole,) = run_readouts("ted", tmp_path / "ted", ["q0"], None)
    (first,) = run_readouts("ted", tmp_path / "ted", ["q0"], None, limit={"q0": 2})
    assert whole.groups[0].kept_share == 0.5 and whole.groups[0].none_kept == 0
    assert first.groups[0].kept_share == 0 and first.groups[0].none_kept == 1
    assert first.sentence() == ("ted (tau 1): samples kept (mean over questions of kept / m) "
                                "0.0%; nothing kept (readout 0, as All-Zero's) on 1 of 1 "
                                "questions")


def test_the_scaled_taus_line_says_what_tau_zero_drops():
    lines = SettingChecks((), (), None, {"ted_scaled_tau": 0, "lne_t_task": 2}).baseline_lines()
    assert lines[0].startswith("LNE-blocking: T_task 2")
    assert lines[1].startswith("ted-scaled: tau 0 for this task") and "only samples that " \
        "open with the greedy output" in lines[1]
    one = SettingChecks((), (), None, {"ted_scaled_tau": 1}).baseline_lines()
    assert one == ["ted-scaled: tau 1 for this task (the code's 2 edits scaled by the mean "
                   "reference-solution length)"]  # a folder from before the record: no source
    # Whose solutions were measured, as the study recorded it (docs/baselines.md §1-2).
    for recorded, said in (("calibration", "length of the calibration questions)"),
                           ("evaluated", "length of the evaluated questions: the study had no "
                                         "calibration split)")):
        lines = SettingChecks((), (), None, {"lne_t_task": 2, "ted_scaled_tau": 1,
                                             "solution_lengths": recorded}).baseline_lines()
        assert all(line.endswith(said) for line in lines), lines


def test_the_beta_line_states_the_quantile_it_read():
    def line(**baselines):
        return SettingChecks((), (), None, {"lne_beta": 0.0832, "calibration_questions": 32,
                                            **baselines}).baseline_lines()[0]

    assert line(lne_beta_quantile=0.9).startswith(
        "LNE-blocking: beta 0.0832, the 0.9 quantile of the LNE of the model's greedy decodes "
        "on the 32 calibration questions")
    assert "the largest, the median and the published 2 are ablation rows" in line(
        lne_beta_quantile=0.9)
    assert "beta 0.0832, the median LNE" in line(lne_beta_quantile=0.5)
    assert "beta 0.0832, the largest LNE" in line()  # a folder from before the quantile


def test_the_ablation_adds_ted_scaled_at_the_tasks_tau_and_ted_keeps_the_codes(tmp_path):
    from zerogap.decoding.ted import scaled_tau
    from zerogap.strategies import solution_words
    from zerogap.study.plan import plan_setting
    from zerogap.study.settings import prepare
    from zerogap.study.spec import SettingSpec, StudySpec

    setting = SettingSpec(name="arith", clean="embedded", contaminated="embedded", task="arith",
                          limit=8)
    plain = StudySpec(settings=(setting,), strategies=("identity", "ted"), m=2)
    assert "ted-scaled" not in plain.labels()
    study = StudySpec(settings=(setting,), strategies=("identity", "ted"), ablation=True, m=2)
    (prepared,) = prepare(study)
    tau = scaled_tau(solution_words(prepared.task, "test", prepared.questions))
    assert prepared.records["ted_scaled_tau"] == tau < 2  # arith's answers are short
    jobs = {job.label: job for job in plan_setting(study, prepared, tmp_path).jobs}
    assert jobs["ted-scaled"].options == {"tau": tau}
    assert jobs["ted"].options == {}  # the code's tau = 2
    assert jobs["ted-scaled"].output != jobs["ted"].output
