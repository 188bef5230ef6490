"""The restoration study in one call (paper arXiv 2608.07341 §5): sample, score, report.

A study is one or more *settings* (a clean model, a contaminated model and a task, optionally a
split into leaked and unleaked questions) and a list of strategies. :func:`evaluate` samples
whatever is missing into run directories named by their configuration's content (so a rerun,
a larger ``limit`` or an added strategy resumes instead of starting over), then writes
``study.json`` and the report (:mod:`zerogap.analysis.report`). Per setting it runs:

* the clean model twice (seeds ``seed`` and ``seed + 1``): the reference and an independent
  second batch, for the measured noise floor and Figure 2;
* greedy decodes of both models, once, shared by every strategy that needs them (RailCap, TED,
  LNE-blocking; the clean ones give Figure 1 b/d);
* identity on the contaminated model (seed ``seed + 2``, so no run shares noise with the
  clean ones: the noise floor assumes independent batches), then the design checks
  (:mod:`zerogap.analysis.design`), measured on the two models alone before any other
  strategy samples;
* shortcut neurons, located once per (models, leaked questions, calibration) and saved;
* each other strategy on the contaminated model (seed ``seed + 2``); TED filters identity's
  samples rather than drawing the same ones again, and All-Zero samples nothing (the report
  scores it from the clean counts);
* the controls: strategies applied to the clean model (``StudySpec.controls``);
* the teacher-forced ranks of Figure 1 b/d.

Each setting's jobs run through an executor (:mod:`~zerogap.study.executor`, the study's
``executor`` key): worker threads of this process by default, or tasks on a Ray cluster
(:mod:`~zerogap.study.ray_executor`) writing into a study folder every node reaches.

Every run is sampled by ``study.backend``: zerogap's HF engine or vLLM
(:mod:`zerogap.engine.base`); a backend's runs are kept in directories of their own, and a
strategy the backend cannot run is refused by :func:`~zerogap.study.settings.prepare`.

A study's sweep (:class:`~zerogap.study.spec.SweepSpec`) adds one such setting per
contamination strength of a ``zerogap contaminate`` folder; variants the folder lacks are first
trained there by :func:`zerogap.pipelines.contamination.build`, the command's own code path.

The study sits above :mod:`zerogap.runs` and touches the model side (:mod:`zerogap.runs`,
:mod:`zerogap.models`, :mod:`zerogap.strategies`, :mod:`zerogap.pipelines.neurons`) only inside
the functions that sample: importing it costs no torch. Its parts, one concern a module:
:mod:`~zerogap.study.settings` (the settings made concrete and checked),
:mod:`~zerogap.study.sweep` (contamination sweeps), :mod:`~zerogap.study.plan` (which jobs, in
which run directories), :mod:`~zerogap.study.job` (what a job is; :mod:`~zerogap.study.kinds`
registers its kinds), :mod:`~zerogap.study.sampling` (the runs as jobs),
:mod:`~zerogap.study.jobs` (running each), :mod:`~zerogap.study.executor` (the contract of what
schedules them, and the executors by name), :mod:`~zerogap.study.workers` (local threads side by
side, the default), :mod:`~zerogap.study.ray_executor` (a Ray cluster),
:mod:`~zerogap.study.neurons` (shortcut-neuron location), :mod:`~zerogap.study.checks` (design
checks, Figure 1's ranks), :mod:`~zerogap.study.progress`; this module runs them in order and
writes ``study.json``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerogap.analysis.report import STUDY_FILE, STUDY_FORMAT, Report, write_report
from zerogap.analysis.score import REPEAT
from zerogap.io.files import slug, write_text
from zerogap.progress import ProgressCallback
from zerogap.strategies import PLAIN, split_label, strategy_class
from zerogap.study.executor import Executor, Opening, executor_choice
from zerogap.study.job import SettingRuns
from zerogap.study.jobs import Models, SettingJobs, run_jobs
from zerogap.study.plan import plan_setting
from zerogap.study.progress import StudyProgress, Tracker
from zerogap.study.settings import Setting, prepare
from zerogap.study.spec import StudySpec, study_toml
from zerogap.study.sweep import build_sweep, missing_variants

if TYPE_CHECKING:
    from zerogap.engine.base import EngineOptions


def _recorded_times(out: Path) -> dict[str, tuple[dict[str, float], float | None]]:
    """Each setting's job times and wall time in an earlier ``study.json`` of ``out`` (none
    when there is none or it cannot be read: the times are a report's aside, never a reason to
    stop; a wall time of None where an older study recorded none)."""
    try:
        record = json.loads((out / STUDY_FILE).read_text(encoding="utf-8"))
        return {e["name"]: ({k: float(v) for k, v in e.get("seconds", {}).items()},
                            None if e.get("wall_seconds") is None else float(e["wall_seconds"]))
                for e in record["settings"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def evaluate(study: StudySpec, out: str | Path, *, progress: Callable | None = None,
             device: str | None = None, max_batch: int | None = None,
             engine: EngineOptions | None = None,
             commands: Sequence[str] = (), prepared: Sequence[Setting] | None = None,
             workers: int | None = None, executor: Executor | None = None,
             training: ProgressCallback | None = None) -> Report:
    """Run the study into ``out`` (resumable) and write its report; see the module docstring.

    ``progress(state: StudyProgress)`` is called at every stage and every stored question.
    ``engine`` (:class:`zerogap.engine.base.EngineOptions`) says how models load for
    ``study.backend`` (checked once, where the jobs run, before anything runs:
    :meth:`~zerogap.study.executor.Executor.check_engine`); without it, ``device`` and
    ``max_batch`` for the HF engine. ``commands`` are shown first among the report's commands
    to reproduce. ``prepared`` is what :func:`~zerogap.study.settings.prepare` returned for
    this study, where the caller checked it first (the CLI does, before it prints anything):
    its tasks and questions are not loaded again. ``executor`` runs each setting's jobs
    (:mod:`zerogap.study.executor`); by default the one ``study.executor`` names, opened here
    and closed at the end (:func:`open_executor`, with ``workers``:
    on local threads two on a CPU with at least two threads, else one). A sweep's missing
    variants are trained first, here (the one place that builds them), reporting to
    ``training`` where given.
    """
    from zerogap.engine.base import EngineOptions

    out = Path(out)
    engine = engine or EngineOptions(device=device, max_batch=max_batch)
    prepared = prepare(study) if prepared is None else prepared
    opened = nullcontext(executor) if executor is not None else open_executor(
        study.executor, workers=workers, backend=study.backend,
        device=engine.device, folder=out, reads=model_folders(study, prepared))
    with opened as running:
        return _run(study, out, prepared, running, engine, progress, commands, training)


def model_folders(study: StudySpec, prepared: Sequence[Setting]) -> list[Path]:
    """The folders on this machine whose models the study's jobs load (a sweep's folder, which
    its variants are trained into): a cluster's every node must reach them."""
    specs = [p for s in prepared for p in (s.spec.clean, s.spec.contaminated, s.spec.base)]
    found = [Path(p) for p in specs if Path(p).is_absolute() and Path(p).exists()]
    swept = [] if study.sweep is None else [Path(study.sweep.models)]
    return list(dict.fromkeys([*swept, *found]))


def _run(study: StudySpec, out: Path, prepared: Sequence[Setting], executor: Executor,
         engine: EngineOptions, progress: Callable | None, commands: Sequence[str],
         training: ProgressCallback | None) -> Report:
    """:func:`evaluate` once its executor is open."""
    from zerogap.engine.memory import process_budget

    # Run directories are named by the dtype the weights hold, so "auto" is resolved here.
    options = executor.check_engine(study.backend, engine)
    planned = [plan_setting(study, s, out, options.dtype) for s in prepared]
    state = StudyProgress(jobs_total=sum(len(p.jobs) for p in planned),
                          questions_total=sum(left.questions for p in planned for left in p.left),
                          rows_total=sum(left.rows for p in planned for left in p.left))
    tracker = Tracker(progress, state)
    if study.sweep is not None and missing_variants(study.sweep):
        if training is None:  # else the caller shows the training's own progress
            tracker.stage("training the sweep's missing contamination variants")
        build_sweep(study.sweep, progress=training)
    entries = []
    earlier = _recorded_times(out)
    for setting in planned:
        s = setting.setting
        pool = [Models(s.spec, study.backend, options) for _ in range(executor.width)]
        # Time of each job, whenever it ran: a resumed study keeps the earlier runs' times.
        # The design checks run at every invocation (they read runs that may have grown); their
        # first time stands too, so a resumed study records and prints what the first one did.
        # The wall time adds this invocation's where it ran more than the untimed jobs (jobs
        # side by side take less wall time than their sum); unknown if an earlier run kept none.
        seconds, wall = earlier.get(s.spec.name, ({}, 0.0))
        seconds = dict(seconds)
        fingerprints: dict[str, str] = {}
        todo = setting.unfinished()
        state.jobs_done += len(setting.jobs) - len(todo)  # finished by an earlier call
        started = time.monotonic()
        try:
            run_jobs(SettingJobs(todo, study, s, setting.runs, options, executor.width > 1, pool),
                     tracker, seconds, fingerprints, executor)
        finally:
            for models in pool:
                models.close()
        if wall is not None and any(job.timed for job in todo):
            wall += time.monotonic() - started
        entries.append({**_entry(s, setting.runs, fingerprints, out, setting.ranks,
                                 setting.allocation),
                        "seconds": seconds,
                        **({} if wall is None else {"wall_seconds": round(wall, 1)})})
    tracker.stage("writing the report")
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "study.toml", study_toml(study))
    record = {
        "format": STUDY_FORMAT, "version": 1, "title": study.title or out.name,
        "config": study.to_dict(), "scoring": asdict(study.scoring()), "settings": entries,
        # The dtype is no study key (float32 studies' runs keep their names), yet it moves the
        # draws: the record and the rerun command say it, and the report states it.
        "dtype": options.dtype,
        "executor": executor.name,
        "workers": executor.width,
        # This process's budget and peak (a cluster's tasks keep their own).
        "memory": process_budget().record(),
        "commands": [*commands, f"zerogap evaluate {out / 'study.toml'}"
                     + (f" --dtype {options.dtype}" if options.dtype != "float32" else ""),
                     f"zerogap report {out}"],
        "versions": _versions(),
    }
    write_text(out / STUDY_FILE, json.dumps(record, indent=2) + "\n")
    return write_report(out)


def _entry(s: Setting, runs: SettingRuns, loaded: dict[str, str], out: Path, ranks: Path,
           allocation: Path | None) -> dict:
    """The setting's record in study.json; counts exported, paths relative to ``out``;
    ``loaded`` holds the fingerprints of the models loaded this time, by role; ``allocation``
    is an allocated setting's plan file, whose m per question the allocated runs' counts keep
    (their first m_q samples, the reference batch's first r_q: a run holding more from a
    larger budget keeps them unscored)."""
    from zerogap.analysis.allocation import read_allocation
    from zerogap.store import RunStore
    from zerogap.study.allocation import samples_drawn, shift_record

    ids = [q.id for q in s.questions]
    plan = None if allocation is None else read_allocation(allocation)
    limit = None if plan is None else plan.samples
    base = out / "counts" / slug(s.spec.name)
    files = {}
    for label, run_dir in runs.scored().items():
        target = base / f"{slug(label)}.jsonl"
        _export_counts(run_dir, target, ids,
                       plan.reference_samples() if plan and run_dir == runs.clean else limit)
        files[label] = str(target.relative_to(out))
    control_files = {}
    for label, run_dir in runs.controls.items():
        target = base / "controls" / f"{slug(label)}.jsonl"
        _export_counts(run_dir, target, ids, limit)
        control_files[label] = str(target.relative_to(out))
    design = out / "design" / f"{slug(s.spec.name)}.json"
    labelled = runs.labelled()
    fingerprints = {}
    for role, label in (("clean", "clean"), ("contaminated", PLAIN)):
        if label in labelled:
            with RunStore(labelled[label], create=False) as store:
                fingerprints[role] = store.config().get("model_fingerprint")
    fingerprints.update(loaded)
    files_clean, repeat = files.pop("clean"), files.pop(REPEAT)
    return {
        "name": s.spec.name, "task": s.spec.task, "task_config": s.task.config(),
        "split": s.spec.task_split, "split_file": s.spec.split_file, "questions": len(ids),
        "leaked": s.leaked,
        "clean": {"spec": s.spec.clean, "fingerprint": fingerprints.get("clean")},
        "contaminated": {"spec": s.spec.contaminated,
                         "fingerprint": fingerprints.get("contaminated")},
        "base": s.spec.base,
        "counts": {"clean": files_clean, "repeat": repeat,
                   "strategies": files, "controls": control_files},
        "runs": {label: str(d.relative_to(out)) for label, d in labelled.items()},
        "control_runs": {label: str(d.relative_to(out)) for label, d in runs.controls.items()},
        "design": str(design.relative_to(out)) if design.is_file() else None,
        "baselines": _baselines(s, runs.strategies),
        "figure_runs": {k: str(labelled[k].relative_to(out)) for k in (PLAIN, "greedy")
                        if k in labelled},
        # Which labels the report treats as references, from what the strategies declare, so
        # that the report (which may not import them) names none itself.
        "references": {"unmitigated": PLAIN,
                       "reads_zero": [label for label in files
                                      if strategy_class(split_label(label)[0]).readout == "zero"]},
        "ranks": str(ranks.relative_to(out)),
        "allocation": None if plan is None or allocation is None else {
            "plan": str(allocation.relative_to(out)),
            "drawn": samples_drawn(plan, out / "runs", runs),
            "shift": shift_record(plan, out, files_clean, files, plan.level)},
    }


def _baselines(s: Setting, strategy_runs: dict[str, Path]) -> dict:
    """What the study set the strategies it ran to at this scale, for the report: what the
    setting's task set (LNE-blocking's T_task), what the calibration questions set
    (LNE-blocking's beta, with the quantile it read and their number: for the strategy's own
    row, not a sensitivity row such as ``lne-blocking:beta_quantile=1``) and, for a strategy
    patching located neurons,
    the location's block size, blocks scored and calibration questions (how many, how many
    leaked, whether disjoint from the evaluated questions: None for a list located before the
    choice was recorded)."""
    from zerogap.io.neurons import load_neurons
    from zerogap.store import RunStore

    out: dict[str, Any] = dict(s.records)
    for label, (name, _) in s.strategies.items():
        chosen = strategy_class(name)
        records = {**chosen.calibration_records, **chosen.calibration_rule_records}
        if label in s.calibrated and label in strategy_runs and (
                label == name or not set(records.values()) & set(out)):
            # What the calibration questions set, as the run recorded it.
            with RunStore(strategy_runs[label], create=False) as store:
                used = store.config()["strategy_config"]
            out.update({record: used[key] for key, record in records.items()})
            out["calibration_questions"] = len(s.calibration)
        if label not in strategy_runs or not chosen.needs_neurons:
            continue
        with RunStore(strategy_runs[label], create=False) as store:
            _, meta = load_neurons(store.config()["strategy_config"]["neurons"])
        leaked = set(meta.get("leaked_ids", ()))
        calibration = meta.get("calibration_ids", [])
        out[label] = {
            "block_size": meta.get("block_size"), "blocks_total": meta.get("blocks_total"),
            "blocks_scored": len(meta.get("blocks_scored", [])),
            "calibration": len(calibration),
            "calibration_leaked": sum(q in leaked for q in calibration),
            "calibration_disjoint": meta.get("calibration_disjoint"),
        }
    return out


def _versions() -> dict[str, str]:
    from zerogap.provenance import package_versions

    return package_versions()


def _export_counts(run_dir: Path, target: Path, ids: Sequence[str],
                   limit: Mapping[str, int] | None) -> None:
    """``ids``' counts of ``run_dir`` into ``target``; a run sampled at a plan's m per question
    (``m = "per question"``) counted on the first ``limit[q]`` samples of each."""
    from zerogap.io.counts import write_counts
    from zerogap.readout import run_counts
    from zerogap.store import PER_QUESTION, RunStore

    with RunStore(run_dir, create=False) as store:
        allocated = store.config().get("m") == PER_QUESTION
        rows = {r["id"]: r for r in run_counts(store, limit if allocated else None)}
    missing = [q for q in ids if q not in rows]
    if missing:
        raise RuntimeError(f"{run_dir} lacks {len(missing)} questions after sampling")
    target.parent.mkdir(parents=True, exist_ok=True)
    chosen = [rows[q] for q in ids]
    write_counts(target, *([r[k] for r in chosen] for k in ("id", "correct", "samples", "first")))


def open_executor(label: str, *, workers: int | None = None, backend: str,
                  device: str | None, folder: Path, reads: Sequence[Path] = ()
                  ) -> AbstractContextManager[Executor]:
    """The executor ``label`` names (``NAME[:KEY=VALUE,...]``:
    :func:`~zerogap.study.executor.executor_choice`) for a study written into ``folder`` whose
    jobs read the files and folders ``reads`` (model folders), closed on exit.

    ``workers`` caps the jobs run at once (default: the executor's own: two local threads on
    a CPU with two or more threads; every slot of a cluster). Refused in one line
    (:class:`~zerogap.errors.UserError`) before any job runs: a worker count the backend
    cannot use, a cluster that cannot be reached, or a node of it that cannot read
    ``folder`` or ``reads``.
    """
    chosen, options = executor_choice(label)
    return chosen.opened(Opening(folder, backend, device, workers, reads), options)
