"""``zerogap evaluate`` end to end on a reduced study: a tiny Llama as the clean model, a LoRA
adapter on it as the contaminated one, the toy task, every strategy, m = 4."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from zerogap import cli
from zerogap.io.counts import read_counts
from zerogap.study.checks import RanksJob
from zerogap.study.run import evaluate
from zerogap.study.sampling import FilterJob, GreedyJob, SampleJob
from zerogap.study.spec import load_study


def test_study_samples_every_run_and_writes_the_report(study_dir, reduced_study):
    out, report, states = study_dir
    strategies = reduced_study().strategies
    study = json.loads((out / "study.json").read_text())
    entry = study["settings"][0]
    assert entry["questions"] == 10 and len(entry["leaked"]) == 5
    # All-Zero samples nothing: no run, scored from the clean counts by the report
    assert set(entry["counts"]["strategies"]) == set(strategies) - {"all-zero"}
    for path in [entry["counts"]["clean"], entry["counts"]["repeat"],
                 *entry["counts"]["strategies"].values()]:
        counts = read_counts(out / path)
        assert len(counts) == 10 and (set(counts.samples) == {4} or path.endswith("ted.jsonl"))
    # one progress display for the whole study: rows only ever grow, up to the planned total;
    # TED filters identity's samples, so only identity, LNE-blocking, shortcut and RailCap sample
    rows = [r for _, r, _ in states]
    planned = 10 * 4 * (2 + 4) + 2 * 10  # 2 clean batches, 2 greedy decodes
    assert rows == sorted(rows) and rows[-1] == states[-1][2] == planned
    assert any("neurons" in stage for stage, _, _ in states)
    # every job this invocation ran has its wall time, and the summary states location's share
    assert {"clean", "identity", "shortcut neurons"} <= set(entry["seconds"])
    assert all(v >= 0 for v in entry["seconds"].values())
    # wall time and job time apart (jobs side by side take less wall than their sum)
    assert entry["wall_seconds"] > 0
    time_line = next(line for line in report.checks["tiny-toy"].lines()
                     if line.startswith("time:"))
    assert " s wall time, " in time_line and " s summed over the jobs, shortcut-neuron " \
        "location " in time_line
    assert "shortcut-neuron location" in report.markdown.read_text()
    # the toy task has no reference solutions: nothing set LNE-blocking's T_task, none stated
    assert "lne_t_task" not in entry["baselines"]
    ranks = json.loads((out / entry["ranks"]).read_text())
    assert set(ranks["ranks"]) == {f"test-{i}" for i in range(10)}
    assert all(r > 1 for rs in ranks["ranks"].values() for r in rs)
    # the two clean batches and the contaminated runs draw independent noise
    assert len({entry["runs"]["clean"], entry["runs"]["clean, 2nd batch"]}) == 2
    assert report.html.is_file() and report.markdown.is_file()
    keys = ["table1", "table2", "table3", "table4", "sensitivity"]
    assert [t.key for t in report.tables] == keys
    for key in keys:
        for ext in ("md", "csv", "json"):
            assert (out / "tables" / f"{key}.{ext}").stat().st_size > 0
    assert {p.suffix for p in report.figures} == {".png", ".svg"}
    assert len(report.figures) == 8  # headline, Figure 1, 2, per-stratum gaps; PNG and SVG
    assert report.figures[0].name == "tiny-toy-headline.png"
    markdown = report.markdown.read_text()
    # the headline figure and the three findings come before every other section
    glance = markdown.index("## At a glance")
    assert glance < markdown.index("figures/tiny-toy-headline.png") < markdown.index("## Design")
    assert all(glance < markdown.index(f"- {key} ") < markdown.index("## Design")
               for key in ("F1", "F2", "F3"))
    verdicts = report.scores["tiny-toy"].verdicts
    assert len(verdicts) == len(strategies)
    assert {v.outcome for v in verdicts} <= {"restored", "not restored", "inconclusive"}


def test_ted_reads_identitys_samples_and_its_first_read_is_a_kept_one(study_dir):
    from zerogap.store import RunStore

    out, _, _ = study_dir
    entry = json.loads((out / "study.json").read_text())["settings"][0]
    with RunStore(out / entry["runs"]["identity"], create=False) as store:
        plain = [(r.question_id, r.sample, r.text, r.correct) for r in store.samples()]
    with RunStore(out / entry["runs"]["ted"], create=False) as store:
        ted = list(store.samples())
        config = store.config()
    assert [(r.question_id, r.sample, r.text, r.correct) for r in ted] == plain
    assert config["samples_of"] == Path(entry["runs"]["identity"]).name
    assert config["strategy"] == "ted" and config["readout"] == "ted-kept"
    counts = read_counts(out / entry["counts"]["strategies"]["ted"])
    by_question: dict[str, list] = {}
    for r in ted:
        by_question.setdefault(r.question_id, []).append(r)
    for qid, first in zip(counts.ids, counts.first, strict=True):
        kept = [r for r in by_question[qid] if r.stats["ted_kept"]]
        assert first == (int(kept[0].correct) if kept else 0)


def test_rerun_samples_nothing_and_reuses_the_runs(study_dir, reduced_study):
    out, first, _ = study_dir
    before = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("run.sqlite")}
    seconds = json.loads((out / "study.json").read_text())["settings"][0]["seconds"]
    states, stages = [], []
    again = evaluate(reduced_study(), out,
                     progress=lambda s: states.append(s) or stages.append(s.stage))
    assert states[-1].rows_total == 0 and states[-1].questions_done == 0
    after = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("run.sqlite")}
    assert after.keys() == before.keys()
    # the jobs' times are the earlier run's, so the resumed study prints the same summary
    assert json.loads((out / "study.json").read_text())["settings"][0]["seconds"] == seconds
    from zerogap.analysis.report import summary_table

    assert summary_table(again) == summary_table(first)
    # Figure 1's ranks are kept while their inputs are those they were computed from
    assert stages and not any("Figure 1 ranks" in stage for stage in stages)
    entry = json.loads((out / "study.json").read_text())["settings"][0]
    ranks = json.loads((out / entry["ranks"]).read_text())
    assert ranks["inputs"] == {"greedy": Path(entry["runs"]["clean greedy"]).name,
                               "contaminated": reduced_study().settings[0].contaminated}
    (out / entry["ranks"]).write_text(json.dumps(
        {**ranks, "inputs": {**ranks["inputs"], "contaminated": "another model"}}))
    stages.clear()
    evaluate(reduced_study(), out, progress=lambda s: stages.append(s.stage))
    assert any("Figure 1 ranks" in stage for stage in stages)
    assert json.loads((out / entry["ranks"]).read_text()) == ranks


def test_a_study_made_before_wall_times_and_ranks_inputs_resumes_as_it_was(study_dir,
                                                                          reduced_study,
                                                                          tmp_path):
    """A study folder whose study.json records no wall time and whose ranks file no inputs
    (made before either was recorded): its rerun keeps the ranks, records no wall time it
    cannot know, and states the jobs' time alone."""
    import shutil

    out = tmp_path / "old"
    shutil.copytree(study_dir[0], out)
    record = json.loads((out / "study.json").read_text())
    entry = record["settings"][0]
    del entry["wall_seconds"]
    (out / "study.json").write_text(json.dumps(record))
    ranks = json.loads((out / entry["ranks"]).read_text())
    del ranks["inputs"]
    (out / entry["ranks"]).write_text(json.dumps(ranks))
    stages = []
    report = evaluate(reduced_study(), out, progress=lambda s: stages.append(s.stage))
    assert stages and not any("Figure 1 ranks" in stage for stage in stages)
    assert json.loads((out / entry["ranks"]).read_text()) == ranks
    assert "wall_seconds" not in json.loads((out / "study.json").read_text())["settings"][0]
    time_line = next(line for line in report.checks["tiny-toy"].lines()
                     if line.startswith("time:"))
    assert "wall" not in time_line and " s summed over the jobs" in time_line


def test_two_workers_run_jobs_side_by_side_and_store_the_same_study(study_dir, reduced_study,
                                                                    tmp_path):
    """``workers=2``: jobs overlap (the progress line shows two stages), each run is complete
    and, sampled by the same engine with the same seeds, holds the responses the one-worker
    study stored (a near-tie may move with another batch size: at least 90% identical). With
    two torch threads, each worker decodes on one while the other works, and the caller gets
    its two back."""
    import threading

    import torch

    from zerogap.store import RunStore

    first, _, _ = study_dir
    out = tmp_path / "side"
    stages, threads = [], set()

    def progress(state) -> None:
        stages.append(state.stage)
        if threading.current_thread() is not threading.main_thread():
            threads.add(torch.get_num_threads())  # the worker's own count at its event

    torch.set_num_threads(2)
    try:
        evaluate(reduced_study(), out, progress=progress, workers=2)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
    assert any(" | " in stage for stage in stages)  # two jobs' stages at once
    assert 1 in threads and threads <= {1, 2}
    record = json.loads((out / "study.json").read_text())
    entry = record["settings"][0]
    assert record["workers"] == 2
    single = json.loads((first / "study.json").read_text())["settings"][0]
    assert entry["runs"] == single["runs"]  # the same runs, named by content
    same = total = 0
    for run in entry["runs"].values():
        with RunStore(first / run, create=False) as a, RunStore(out / run, create=False) as b:
            if run.startswith("runs/greedy"):
                ours = {q: g.text for q, g in b.greedy().items()}
                theirs = {q: g.text for q, g in a.greedy().items()}
            else:
                ours = {(r.question_id, r.sample): r.text for r in b.samples()}
                theirs = {(r.question_id, r.sample): r.text for r in a.samples()}
        assert ours.keys() == theirs.keys()
        same += sum(ours[k] == theirs[k] for k in ours)
        total += len(ours)
    assert total >= 200 and same >= 0.9 * total


def test_a_larger_m_samples_into_new_run_dirs(study_dir, reduced_study):
    """Run dirs are named by content: another m is another run, the greedy decodes are shared."""
    out, _, _ = study_dir
    study = reduced_study(m=5, strategies=("identity", "railcap"))
    from zerogap.study.plan import plan_setting
    from zerogap.study.settings import prepare

    planned = plan_setting(study, prepare(study)[0], out)
    todo = {label: left.todo for label, (_, left) in planned.by_label().items()}
    assert todo["clean"] == todo["identity"] == todo["railcap"] == 10
    assert todo["clean greedy"] == todo["contaminated greedy"] == 0


def test_study_file_round_trips_and_cli_report_rewrites(study_dir, reduced_study, capsys):
    out, _, _ = study_dir
    study, folder = load_study(out / "study.toml")
    assert folder == out and study.strategies == reduced_study().strategies and study.m == 4
    (out / "report.html").unlink()
    assert cli.main(["report", str(out), "--resamples", "100"]) == 0
    printed = capsys.readouterr().out
    assert "SA-PPG" in printed and "report:" in printed
    assert (out / "report.html").is_file()


@pytest.mark.parametrize("argv, message", [
    (["--clean", "nowhere/", "--contaminated", "x/", "--task", "toy-arith"], "--out"),
    (["--clean", "./nowhere", "--contaminated", "./x", "--task", "toy-arith", "--out", "{tmp}"],
     "does not exist"),
    (["--clean", "{clean}", "--contaminated", "{clean}", "--task", "toy-arith", "--out", "{tmp}",
      "--strategies", "railcap:n=0"], "railcap:n=0"),
    (["--clean", "{clean}", "--contaminated", "{clean}", "--task", "toy-arith", "--out", "{tmp}",
      "--strategies", "identity,shortcut"], "needs a split file"),
    (["--clean", "{clean}", "--contaminated", "{clean}", "--task", "toy-arith", "--out", "{tmp}",
      "--split-file", "{tmp}/missing.json"], "no such split file"),
    # checked before vLLM is looked for: this suite runs without it
    (["--clean", "{clean}", "--contaminated", "{clean}", "--task", "toy-arith", "--out", "{tmp}",
      "--backend", "vllm", "--strategies", "identity,shortcut"],
     "strategy shortcut needs patching support, which the vllm backend lacks"),
    (["--clean", "{clean}", "--contaminated", "{clean}", "--task", "toy-arith", "--out", "{tmp}",
      "--strategies", "identity", "--workers", "0"], "--workers must be at least 1, got 0"),
    (["--clean", "{clean}", "--contaminated", "{clean}", "--task", "toy-arith", "--out", "{tmp}",
      "--backend", "vllm", "--strategies", "identity", "--workers", "2"],
     "--workers 2: the vllm backend holds one engine at a time"),
    (["--clean", "{clean}", "--contaminated", "{clean}", "--task", "toy-arith", "--out", "{tmp}",
      "--executor", "ray:port=1"], "executor ray has no option 'port'; known: address"),
    (["--clean", "{clean}", "--contaminated", "{clean}", "--task", "toy-arith", "--out", "{tmp}",
      "--executor", "local:address=auto"], "executor local has no option 'address'; known: none"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(argv, message, study_models, tmp_path,
                                                        capsys):
    out = tmp_path / "out"
    argv = [a.format(tmp=out, clean=study_models["clean"]) for a in argv]
    assert cli.main(["evaluate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_split_with_unknown_ids_is_refused(study_models, tmp_path, capsys):
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"leaked": ["test-0", "nope"], "unleaked": ["test-1"]}))
    code = cli.main(["evaluate", "--clean", str(study_models["clean"]), "--contaminated",
                     str(study_models["contaminated"]), "--task", "toy-arith", "--split-file",
                     str(split), "--out", str(tmp_path / "out")])
    assert code == 2
    assert "'nope'" in capsys.readouterr().err


def test_study_file_errors_name_the_file_and_key(tmp_path, capsys):
    bad = tmp_path / "study.toml"
    bad.write_text('out = "x"\nsamples = 5\n[[setting]]\nclean = "embedded"\n')
    with pytest.raises(ValueError, match=r"study.toml: unknown key\(s\) samples"):
        load_study(bad)
    bad.write_text('m = 4\n[[setting]]\nclean = "embedded"\ncontaminated = "embedded"\n'
                   'task = "arith"\nlimt = 3\n')
    with pytest.raises(ValueError, match=r"\[\[setting\]\] 1: unknown key\(s\) limt"):
        load_study(bad)
    assert cli.main(["evaluate", str(bad), "--clean", "embedded"]) == 2
    assert "not both" in capsys.readouterr().err


def test_study_file_paths_are_relative_to_the_file(study_models, tmp_path):
    folder = study_models["clean"].parent
    study = folder / "rel.toml"
    study.write_text('m = 3\n[[setting]]\nname = "x"\nclean = "clean"\n'
                     'contaminated = "contaminated"\ntask = "toy-arith"\n'
                     'split_file = "split.json"\n')
    spec, out = load_study(study, m=5)
    assert out is None and spec.m == 5
    assert spec.settings[0].clean == str(study_models["clean"].resolve())
    assert spec.settings[0].split_file == str(study_models["split"].resolve())


def test_progress_line_redraws_on_its_own_clock():
    import io
    import time

    from zerogap.cli.evaluate import ProgressLine
    from zerogap.study.progress import StudyProgress

    stream = io.StringIO()
    line = ProgressLine(stream, every=0.05)
    line(StudyProgress(stage="s: clean", jobs_total=3, rows_total=10))
    time.sleep(0.3)  # no event: the clock alone redraws
    line.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3 and all("[0/3 runs] s: clean" in x for x in lines)
    assert "ETA ?" in lines[0]


def test_a_model_against_itself_decodes_its_greedy_once(reduced_study, tmp_path):
    from dataclasses import replace

    from zerogap.study.plan import plan_setting
    from zerogap.study.settings import prepare

    study = reduced_study(strategies=("identity",))
    same = replace(study.settings[0], contaminated=study.settings[0].clean)
    study = replace(study, settings=(same,))
    planned = plan_setting(study, prepare(study)[0], tmp_path)
    greedy = [(job, left) for job, left in zip(planned.jobs, planned.left, strict=True)
              if isinstance(job, GreedyJob)]
    assert greedy[0][0].output == greedy[1][0].output
    assert [left.todo for _, left in greedy] == [10, 0]


def test_runs_of_another_backend_or_dtype_get_their_own_dirs(study_dir, reduced_study):
    """The backend and dtype are part of a run's configuration: a vLLM (or bfloat16) study in
    the same folder plans every run anew, while the HF float32 runs keep their names."""
    from dataclasses import replace

    from zerogap.study.plan import plan_setting
    from zerogap.study.settings import prepare

    out, _, _ = study_dir
    study = reduced_study(strategies=("identity", "railcap", "all-zero"))
    setting = prepare(study)[0]
    # the design checks are recomputed every time (they read the runs, and cost nothing);
    # Figure 1's ranks are one file per setting, recomputed when their inputs change
    runs = (SampleJob, GreedyJob, FilterJob)
    jobs = {label: (j, left) for label, (j, left) in plan_setting(study, setting, out)
            .by_label().items() if isinstance(j, runs)}
    assert all(left.todo == 0 for _, left in jobs.values())  # the study_dir runs, found again
    for other, dtype in ((replace(study, backend="vllm"), "float32"), (study, "bfloat16")):
        planned = plan_setting(other, setting, out, dtype).by_label()
        again = {label: (j, left) for label, (j, left) in planned.items()
                 if isinstance(j, runs)}
        assert again.keys() == jobs.keys()
        assert all(again[k][0].output != jobs[k][0].output for k in jobs)
        assert all(left.todo == 10 for _, left in again.values())
        # another clean greedy run: the ranks' inputs have changed
        assert [left.todo for j, left in planned.values() if isinstance(j, RanksJob)] == [1]


def test_backend_is_a_study_key(tmp_path):
    study = tmp_path / "study.toml"
    study.write_text('backend = "vllm"\nstrategies = ["identity", "railcap"]\n[[setting]]\n'
                     'clean = "embedded"\ncontaminated = "embedded"\ntask = "arith"\n')
    spec, _ = load_study(study)
    assert spec.backend == "vllm"
    assert load_study(study, backend="hf")[0].backend == "hf"  # --backend overrides the file
    study.write_text(study.read_text().replace('"vllm"', '"tgi"'))
    with pytest.raises(ValueError, match=r"study.toml: backend must be one of hf, vllm"):
        load_study(study)


def test_the_executor_and_its_address_are_study_keys(tmp_path):
    """What runs the jobs, with the executor's own options (Ray's address), is written into
    the study folder's study.toml with the rest, so the rerun command runs them the same way;
    ``--executor local`` overrides the file."""
    from zerogap.study.spec import study_toml

    study = tmp_path / "study.toml"
    study.write_text('executor = "ray:address=auto"\nstrategies = ["identity"]\n'
                     '[[setting]]\nclean = "embedded"\ncontaminated = "embedded"\n'
                     'task = "arith"\n')
    spec, _ = load_study(study)
    assert spec.executor == "ray:address=auto"
    (tmp_path / "again.toml").write_text(study_toml(spec))
    assert load_study(tmp_path / "again.toml")[0] == spec
    assert load_study(study, executor="local")[0].executor == "local"
    study.write_text(study.read_text().replace('"ray:address=auto"', '"dask"'))
    with pytest.raises(ValueError, match=r"study.toml: unknown executor 'dask'; known "
                                         r"executors: local, ray"):
        load_study(study)


@pytest.mark.parametrize("limit", [None, 6])
def test_a_study_stopped_while_locating_neurons_resumes_from_its_journal(
        reduced_study, tmp_path, monkeypatch, limit):
    """Without a limit the neurons are located and scored on evaluated questions, reusing the
    study's greedy decodes; with ``limit = 6`` on questions the study never decodes (test-3,
    test-8), which location decodes and journals itself."""
    import zerogap.engine
    from zerogap.pipelines.neurons import Journal

    study = reduced_study(strategies=("identity", "shortcut"))
    study = replace(study, settings=(replace(study.settings[0], limit=limit),))
    decoded = []
    greedy = zerogap.engine.greedy

    def counting_greedy(model, tokenizer, prompts, **kw):
        decoded.append(len(prompts))
        return greedy(model, tokenizer, prompts, **kw)

    monkeypatch.setattr(zerogap.engine, "greedy", counting_greedy)
    evaluate(study, tmp_path / "whole")
    whole = sum(decoded)
    # Decoded for location: base unpatched, base and contaminated patched (one block), each
    # over the 2 calibration questions. In sample, the contaminated model's answers to the 5
    # leaked questions and its 2 unpatched grades come from the study's greedy decodes of it;
    # disjoint, its answer to the 1 leaked calibration question and its 2 grades are decoded.
    seeded = 5 + 2 if limit is None else 0
    assert whole == 3 * 2 + (0 if limit is None else 1 + 2)
    (ranking,) = (tmp_path / "whole" / "neurons").glob("*.json")

    record, kept = Journal.record, seeded + 2
    def stop_after_kept(self, key, question_id, value):
        record(self, key, question_id, value)
        if len(self) == kept:
            raise KeyboardInterrupt

    monkeypatch.setattr(Journal, "record", stop_after_kept)
    with pytest.raises(KeyboardInterrupt):
        evaluate(study, tmp_path / "stopped")
    (journal,) = (tmp_path / "stopped" / "neurons").glob("*.journal.jsonl")
    monkeypatch.setattr(Journal, "record", record)
    decoded.clear()
    evaluate(study, tmp_path / "stopped")
    assert sum(decoded) == whole - (kept - seeded)  # only what the journal lacked
    assert not journal.exists()
    resumed = json.loads((tmp_path / "stopped" / "neurons" / ranking.name).read_text())
    assert resumed["neurons"] == json.loads(ranking.read_text())["neurons"]


def test_shortcut_neurons_are_scored_on_leaked_and_unleaked_questions(study_dir, reduced_study):
    from zerogap.io.neurons import load_neurons
    from zerogap.study.settings import prepare

    out, _, _ = study_dir
    (setting,) = prepare(reduced_study())
    assert [q.id for q in setting.calibration] == ["test-0", "test-5"]  # leaked, unleaked
    neurons = next((out / "neurons").glob("*.json"))
    _, meta = load_neurons(neurons)
    assert meta["calibration_ids"] == ["test-0", "test-5"]
    assert meta["block_size"] == 128  # the tiny Llama's MLP width, the divisor nearest 512
    assert meta["calibration_disjoint"] is False  # no limit: every question is evaluated
    entry = json.loads((out / "study.json").read_text())["settings"][0]
    assert entry["baselines"]["shortcut"] == {"block_size": 128, "blocks_total": 1,
                                              "blocks_scored": 1, "calibration": 2,
                                              "calibration_leaked": 1,
                                              "calibration_disjoint": False}
    assert ("scored causally on 2 questions (1 leaked): the evaluated questions (in sample)"
            in (out / "report.md").read_text())


def test_shortcut_neurons_are_located_and_scored_past_the_evaluated_questions(
        reduced_study, study_models, tmp_path):
    """A limit of 6 evaluates test-0..2 and test-5..7 of the 5 + 5 split: the neurons are
    located on the greedy answer to test-3 and scored on test-3 and test-8, half leaked and
    none evaluated, and the report says so."""
    from zerogap.io.neurons import load_neurons
    from zerogap.study.settings import prepare

    study = reduced_study(strategies=("identity", "shortcut"))
    study = replace(study, settings=(replace(study.settings[0], limit=6),))
    (setting,) = prepare(study)
    split = json.loads(study_models["split"].read_text())
    evaluated = {q.id for q in setting.questions}
    calibration = [q.id for q in setting.calibration]
    assert evaluated == {"test-0", "test-1", "test-2", "test-5", "test-6", "test-7"}
    assert calibration == ["test-3", "test-8"] and not evaluated & set(calibration)
    assert sum(q in split["leaked"] for q in calibration) == len(calibration) // 2
    assert [q.id for q in setting.located] == ["test-3"] and setting.calibration_disjoint
    evaluate(study, tmp_path)
    _, meta = load_neurons(next((tmp_path / "neurons").glob("*.json")))
    assert meta["leaked_ids"] == ["test-3"] and meta["calibration_ids"] == calibration
    assert meta["calibration_disjoint"] is True
    entry = json.loads((tmp_path / "study.json").read_text())["settings"][0]
    assert entry["baselines"]["shortcut"]["calibration_disjoint"] is True
    assert ("scored causally on 2 questions (1 leaked): disjoint from the evaluated questions"
            in (tmp_path / "report.md").read_text())


def test_lne_blocking_takes_the_tasks_t_task_and_the_gsm8k_value_as_ablation(tmp_path):
    from zerogap.study.plan import plan_setting
    from zerogap.study.settings import prepare
    from zerogap.study.spec import SettingSpec, StudySpec

    setting = SettingSpec(name="arith", clean="embedded", contaminated="embedded", task="arith",
                          limit=8)
    study = StudySpec(settings=(setting,), strategies=("identity", "lne-blocking"),
                      ablation=True, m=2)
    (prepared,) = prepare(study)
    # 16.2 words a solution against GSM8K's 54.8: 7 -> 2, recorded as the study took it (and
    # the ablation's ted-scaled: TED's 2 edits -> 1)
    # (no split file: no calibration split, so the evaluated questions' solutions, stated)
    assert prepared.records == {"lne_t_task": 2, "ted_scaled_tau": 1,
                                "solution_lengths": "evaluated"}
    jobs = {job.label: job for job in plan_setting(study, prepared, tmp_path).jobs}
    assert jobs["lne-blocking"].options == {"t_task": 2}
    published = "lne-blocking:t_task=7,beta=2"
    assert jobs[published].options == {"t_task": 7, "beta": 2.0}
    assert jobs["lne-blocking"].output != jobs[published].output
    # only what runs is recorded: no LNE-blocking, no T_task; only its ablation, none taken
    (without,) = prepare(StudySpec(settings=(setting,), strategies=("identity", "railcap"), m=2))
    assert without.records == {}
    (own,) = prepare(StudySpec(settings=(setting,), strategies=("lne-blocking:t_task=7",), m=2))
    assert own.records == {}


def test_task_settings_are_measured_on_the_calibration_questions(tmp_path, monkeypatch):
    """T_task (and ted-scaled's tau) come from the reference solutions of the calibration
    split's questions, never the evaluated ones, and the study records whose they were."""
    from zerogap.strategies import LNEBlockingStrategy
    from zerogap.study.settings import prepare
    from zerogap.study.spec import SettingSpec, StudySpec
    from zerogap.tasks import get_task

    ids = [q.id for q in get_task("arith").questions("test")[:12]]
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"leaked": ids[:6], "unleaked": ids[6:]}))
    measured = []
    original = LNEBlockingStrategy.task_settings.__func__

    def spy(cls, task, split_name, questions):
        measured.append([q.id for q in questions])
        return original(cls, task, split_name, questions)

    monkeypatch.setattr(LNEBlockingStrategy, "task_settings", classmethod(spy))
    setting = SettingSpec(name="arith", clean="embedded", contaminated="embedded", task="arith",
                          split_file=str(split), limit=8)
    (prepared,) = prepare(StudySpec(settings=(setting,), strategies=("identity", "lne-blocking"),
                                    m=2, calibration_size=4))
    assert prepared.calibration_disjoint and len(prepared.calibration) == 4
    assert measured == [[q.id for q in prepared.calibration]]
    assert not set(measured[0]) & {q.id for q in prepared.questions}
    assert prepared.records == {"lne_t_task": 2, "solution_lengths": "calibration"}


def test_lne_blocking_takes_beta_from_the_calibration_questions(reduced_study, tmp_path):
    """With a calibration split past the evaluated questions (limit 6 of the 5 + 5 split:
    test-3 and test-8), LNE-blocking's beta is the 0.9 quantile of the LNE of the contaminated
    model's greedy decodes of those two (the sensitivity row ``beta_quantile=1`` their
    largest); every blocked sample's count is Hou et al.'s Eq. 10 at that beta; the published
    beta stays a row of its own, and the report states the beta taken and its quantile."""
    import math

    import numpy as np

    from zerogap.store import RunStore
    from zerogap.study.plan import plan_setting
    from zerogap.study.settings import prepare

    largest = "lne-blocking:beta_quantile=1"
    study = reduced_study(strategies=("identity", "lne-blocking", "lne-blocking:beta=2",
                                      largest))
    study = replace(study, settings=(replace(study.settings[0], limit=6),))
    (setting,) = prepare(study)
    assert setting.calibrated == {"lne-blocking", largest}
    calibration = [q.id for q in setting.calibration]
    jobs = {job.label: job for job in plan_setting(study, setting, tmp_path).jobs}
    assert [q.id for q in jobs["contaminated greedy"].questions] == [
        *(q.id for q in setting.questions), *calibration]
    assert jobs["lne-blocking"].calibrated and jobs["lne-blocking"].built is None
    assert not jobs["lne-blocking:beta=2"].calibrated
    evaluate(study, tmp_path)
    entry = json.loads((tmp_path / "study.json").read_text())["settings"][0]
    with RunStore(tmp_path / entry["runs"]["greedy"], create=False) as store:
        greedy = store.greedy()

    def lne(q: str) -> float:
        return sum(greedy[q].entropies) / len(greedy[q].entropies)

    beta = round(float(np.quantile([lne(q) for q in calibration], 0.9)), 6)
    assert entry["baselines"]["lne_beta"] == beta and entry["baselines"][
        "calibration_questions"] == 2 and entry["baselines"]["lne_beta_quantile"] == 0.9
    for label, used in (("lne-blocking", beta), ("lne-blocking:beta=2", 2.0),
                        (largest, round(max(lne(q) for q in calibration), 6))):
        with RunStore(tmp_path / entry["runs"][label], create=False) as store:
            assert store.config()["strategy_config"]["beta"] == used
            t_task = store.config()["strategy_config"]["t_task"]
            recorded = {r.question_id: r.stats["blocking_count"] for r in store.samples()}
        assert recorded == {q.id: math.floor(t_task * min(max(1 - lne(q.id) / used, 0), 1))
                            for q in setting.questions}
    assert f"LNE-blocking: beta {beta:.3g}, the 0.9 quantile of the LNE" in (
        tmp_path / "report.md").read_text()
    # the evaluated questions alone (no rest past them): the published beta, nothing taken
    (in_sample,) = prepare(reduced_study(strategies=("identity", "lne-blocking")))
    assert in_sample.calibrated == frozenset()


def test_controls_apply_strategies_to_the_clean_model(study_models, reduced_study, tmp_path,
                                                      monkeypatch):
    import zerogap.runs
    from zerogap.store import RunStore

    built = []
    build = zerogap.runs.build_strategy

    def counting_build(name, options, capabilities=None):
        built.append(name)
        return build(name, options, capabilities)

    monkeypatch.setattr(zerogap.runs, "build_strategy", counting_build)
    study = reduced_study(strategies=("identity", "ted", "railcap"), controls=("ted", "railcap"))
    report = evaluate(study, tmp_path)
    # Each label is built once, when its setting is checked; its runs on both models (and
    # TED's filters) use that one.
    assert sorted(built) == ["identity", "railcap", "ted"]
    entry = json.loads((tmp_path / "study.json").read_text())["settings"][0]
    assert set(entry["counts"]["controls"]) == {"ted", "railcap"}
    clean_print = entry["clean"]["fingerprint"]
    for label, run in entry["control_runs"].items():
        with RunStore(tmp_path / run, create=False) as store:
            assert store.config()["model_fingerprint"] == clean_print, label
    # TED on the clean model filters the clean model's second batch
    with RunStore(tmp_path / entry["control_runs"]["ted"], create=False) as store:
        assert store.config()["samples_of"] == Path(entry["runs"]["clean, 2nd batch"]).name
    controls = report.checks["tiny-toy"].controls
    assert controls is not None and list(controls.strategies) == ["ted", "railcap"]
    with pytest.raises(ValueError, match="identity.*no control"):
        reduced_study(controls=("identity",))
    with pytest.raises(ValueError, match="not one of the study's strategies"):
        reduced_study(strategies=("identity",), controls=("railcap",))



def test_an_auto_dtype_study_samples_into_the_runs_of_the_dtype_it_resolves_to(
        reduced_study, tmp_path, monkeypatch):
    """``auto`` (the demo's default) is resolved before runs are named: on a CPU with
    AVX512-BF16 the study's runs are the bfloat16 ones, made in bfloat16 (shortcut's base model
    too), and on a CPU without, the float32 ones, named as before dtypes."""
    from zerogap import models
    from zerogap.engine.base import EngineOptions
    from zerogap.store import RunStore
    from zerogap.study.plan import plan_setting
    from zerogap.study.settings import prepare

    study = reduced_study(strategies=("identity", "shortcut"))
    setting = prepare(study)[0]
    cpuinfo = tmp_path / "cpuinfo"
    monkeypatch.setattr(models, "CPUINFO", cpuinfo)
    for flags, dtype in (("avx512f avx512_bf16", "bfloat16"), ("avx512f", "float32")):
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 {flags}\n")
        out = tmp_path / dtype
        evaluate(study, out, engine=EngineOptions(dtype="auto"))
        commands = json.loads((out / "study.json").read_text())["commands"]
        # the command that reruns it names the dtype, unless float32, evaluate's default
        assert commands[0].endswith(f"study.toml --dtype {dtype}" if dtype != "float32"
                                    else "study.toml")
        # and the report says which dtype the weights held, in both its forms
        assert json.loads((out / "study.json").read_text())["dtype"] == dtype
        assert f"- sampled with the weights in {dtype}" in (out / "report.md").read_text()
        assert f"weights in {dtype}," in (out / "report.html").read_text()
        planned = [(j, left) for j, left in plan_setting(study, setting, out, dtype)
                   .by_label().values() if isinstance(j, SampleJob | GreedyJob)]
        assert planned and all(left.todo == 0 for _, left in planned)  # made, under these names
        assert {j.output for j, _ in planned} == {p for p in (out / "runs").iterdir()}
        for job, _ in planned:
            with RunStore(job.output, create=False) as store:
                assert store.config()["dtype"] == dtype, job.label
    float32 = {p.name for p in (tmp_path / "float32" / "runs").iterdir()}
    assert float32.isdisjoint(p.name for p in (tmp_path / "bfloat16" / "runs").iterdir())
    assert float32 == {j.output.name for j in plan_setting(study, setting, tmp_path, "float32")
                       .jobs if isinstance(j, SampleJob | GreedyJob)}
