"""``zerogap evaluate``, ``zerogap report``, ``zerogap demo`` and ``zerogap reproduce``: the
restoration study.

``evaluate`` runs a study (flags or a TOML study file) into a folder and writes its report;
``report`` rewrites the report of such a folder (no sampling, no torch); ``demo`` and
``reproduce`` build a clean and a contaminated model from the embedded model (a preset's
recipe: :mod:`zerogap.study.demo`) and evaluate every strategy on them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from zerogap.cli.flags import (
    SCORING,
    TYPED,
    add_config_arguments,
    add_dtype_argument,
    add_engine_arguments,
    add_out,
    add_running_arguments,
    add_scoring_options,
    add_sweep,
    described_argument,
    engine_options,
    given,
    scoring_changes,
    spelling,
)
from zerogap.engine.base import DEFAULT_BACKEND, EngineOptions
from zerogap.errors import UserError
from zerogap.progress import progress_bars
from zerogap.study.executor import Executor
from zerogap.study.spec import SettingSpec, StudySpec, SweepSpec

EXAMPLES = """examples:
  zerogap evaluate --clean cl/ --contaminated co/ --task arith --split-file split.json \\
      --strategies identity,railcap,all-zero -m 20 --limit 40 --out runs/study
  zerogap evaluate study.toml --ablation
  zerogap evaluate study.toml --budget 5     # each strategy 5 samples per question on average
  zerogap evaluate study.toml --backend vllm --strategies identity,railcap,lne-blocking,all-zero \\
      --tensor-parallel-size 4 --dtype bfloat16
  zerogap evaluate --models runs/laptop --sweep epochs=1,2,5 copies=1,5,20 --out runs/strength
  zerogap evaluate study.toml --executor ray:address=auto --device cuda
"""
REPORT_EXAMPLES = """examples:
  zerogap report runs/study                    # the tables, figures and report again
  zerogap report runs/study --margin 0.03 --level 0.9
"""
DEMO_EXAMPLES = """examples:
  zerogap demo                                 # into runs/demo
  zerogap demo --questions 64 -m 4 --out runs/demo-small
  zerogap demo --controls --ablation --out runs/demo-full
  zerogap report runs/demo                     # its report again, with other scoring
"""
EVALUATE_DESCRIPTION = """Run a restoration study into a folder: sample the clean and the
contaminated model under every strategy, score them and write the report (tables, figures, HTML
and Markdown). The study comes from a TOML study file or from the flags (--clean,
--contaminated, --task, or --models for contamination strengths); a rerun with the same --out
resumes it."""
REPORT_DESCRIPTION = """Rewrite the tables, figures and report of a study folder (zerogap
evaluate --out or zerogap demo --out) from the runs it holds, with the study's scoring or the
one the flags give. Samples nothing and loads no model."""
DEMO_DESCRIPTION = """Build a clean and a contaminated model from the embedded model (LoRA
fine-tunes on the arith task, minutes on a CPU) and run the restoration study on them: every
strategy, with RailCap's control on the clean model. The first look at what zerogap measures."""
REPRODUCE_EXAMPLES = """examples:
  zerogap reproduce                            # into runs/reproduce (hours on a 2-core CPU)
  zerogap reproduce --device cuda              # on a GPU
  zerogap reproduce --questions 12 -m 4 --out runs/reproduce-look  # plumbing only, no findings
"""
REPRODUCE_DESCRIPTION = """Build the paper's contamination in miniature from the embedded model
and run the whole study on it. M_cl is trained on the multistep task until its loss stops
falling; M_co is trained further from it on general data with the leaked test items mixed in
(about a quarter), at the paper's learning rate, and the checkpoint the design search chose is
evaluated on fresh questions: every strategy, RailCap on the clean model, the answer-slot row
and RailCap's n ablation. Hours on a 2-core CPU; a rerun resumes."""
# Each built-in study's one-line help, description and examples.
SHOWCASE_TEXT = {
    "demo": ("build a clean and a contaminated model from the embedded model and evaluate every "
             "strategy on them (RailCap's control on the clean model always runs)",
             DEMO_DESCRIPTION, DEMO_EXAMPLES),
    "reproduce": ("the paper's experiment in miniature: its contamination recipe on the "
                  "multistep task, every strategy, the ablation and the findings (hours)",
                  REPRODUCE_DESCRIPTION, REPRODUCE_EXAMPLES)}

# The study's fields the flags override (a study file's values otherwise).
STUDY_FLAGS = ("strategies", "ablation", "all_controls", "m", "temperature", "max_new_tokens",
               "seed", "bins", "resamples", "margin", "level", "calibration_size", "neuron_block",
               "neuron_candidates", "backend", "budget", "target_half_width", "pilot",
               "min_samples", "max_samples", "executor")
# The one setting the flags describe instead of a study file.
SETTING_FLAGS = ("clean", "contaminated", "base", "task", "task_options", "task_split",
                 "split_file", "limit", "name", "chat_template", "system_instruction")
STUDY_FILE_NOTE = ", or the study file's"
REPORT_SCORING = tuple(name for name in SCORING if name != "paired_null")


def register(subparsers) -> None:
    from zerogap.study.demo import SHOWCASES

    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser("evaluate", help="run a restoration study (sample, score, report)",
                              description=EVALUATE_DESCRIPTION, epilog=EXAMPLES,
                              formatter_class=fmt)
    p.add_argument("study", nargs="?", type=Path, help="TOML study file (instead of the flags)")
    g = p.add_argument_group("setting (without a study file: --clean, --contaminated, --task)")
    add_config_arguments(g, SettingSpec, SETTING_FLAGS, unset=True, defaults={"name": "setting"})
    g = p.add_argument_group("contamination strength (instead of --clean/--contaminated/--task)")
    add_config_arguments(g, SweepSpec, ("models",), unset=True)
    add_sweep(g, otherwise="those in --models")
    g = p.add_argument_group("study (override a study file's values)")
    add_config_arguments(g, StudySpec, STUDY_FLAGS, unset=True, note=STUDY_FILE_NOTE)
    add_out(p, "a folder: runs, tables, figures, report; a rerun resumes the study",
            required=False, otherwise="the study file's out")
    add_running_arguments(p)
    _add_workers_argument(p)
    add_engine_arguments(p)
    p.set_defaults(func=_evaluate)

    p = subparsers.add_parser("report", help="rewrite a study folder's tables, figures and report",
                              description=REPORT_DESCRIPTION, epilog=REPORT_EXAMPLES,
                              formatter_class=fmt)
    p.add_argument("folder", type=Path, help="a zerogap evaluate folder")
    # The report prints no paired lines (its findings fix their own test), so no --paired-null.
    add_scoring_options(p, REPORT_SCORING, note=", or the study's")
    p.set_defaults(func=_report)

    for showcase in SHOWCASES.values():
        _register_showcase(subparsers, showcase)


def _register_showcase(subparsers, showcase) -> None:
    """``zerogap demo`` or ``zerogap reproduce``: build a preset's models, run its study."""
    summary, description, epilog = SHOWCASE_TEXT[showcase.command]
    p = subparsers.add_parser(showcase.command, help=summary, description=description,
                              epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_out(p, "a folder holding the study and, in models/, what it trains; a rerun resumes it",
            required=False, default=Path(f"runs/{showcase.command}"))
    described_argument(p, "--questions", type=int, default=showcase.questions, metavar="N",
                       meaning="questions, half leaked",
                       values=f">= 2 and <= {showcase.max_questions()}",
                       shown=f"{showcase.questions}, {showcase.sizing}")
    add_config_arguments(p, StudySpec, ("m",), defaults={"m": showcase.m})
    flags = ("all_controls",) if showcase.ablation else ("all_controls", "ablation")
    add_config_arguments(p, StudySpec, flags, unset=True)
    add_dtype_argument(p)
    add_running_arguments(p)
    _add_workers_argument(p)
    p.set_defaults(func=_showcase, showcase=showcase)


def _add_workers_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="jobs run side by side, each with its share of the CPU threads and "
                        "its own copy of the models (>= 1; 1 with vLLM) (default: 2 on a CPU "
                        "with two or more threads, else 1; vLLM: 1; on a Ray cluster: as many "
                        "as its nodes hold)")


class ProgressLine:
    """The study's one progress display on stderr: a line rewritten in place on a terminal,
    otherwise one line per stage and every 15 s. A clock thread redraws it between events, so
    the elapsed time moves even while the first question of a run is still being sampled."""

    def __init__(self, stream=sys.stderr, every: float | None = None):
        self.stream, self.tty = stream, stream.isatty()
        self.every = every or (1.0 if self.tty else 15.0)
        self.state, self.stage, self.last = None, None, 0.0
        self.eta: float | None = None
        self.eta_at = 0.0
        self.lock, self.done = threading.Lock(), threading.Event()
        self.clock = threading.Thread(target=self._tick, daemon=True)
        self.clock.start()

    def __call__(self, state) -> None:
        with self.lock:
            # The ETA as of this event, counted down between events (never up while waiting).
            self.state, self.eta, self.eta_at = state, state.eta, time.monotonic()
            if state.stage != self.stage or time.monotonic() - self.last >= self.every:
                self._draw()

    def _tick(self) -> None:
        while not self.done.wait(self.every):
            with self.lock:
                if self.state is not None and time.monotonic() - self.last >= self.every:
                    self._draw()

    def _draw(self) -> None:
        state = self.state
        if state is None:
            return
        self.last, self.stage = time.monotonic(), state.stage
        eta = "?" if self.eta is None else _duration(max(0.0, self.eta - (self.last -
                                                                           self.eta_at)))
        part = (f"{state.part_done}/{state.part_total} {state.part_unit} | "
                if state.part_total else "")
        line = (f"[{state.jobs_done}/{state.jobs_total} runs] {state.stage} | {part}"
                f"{state.questions_done}/{state.questions_total} questions | "
                f"{state.tokens_per_second:.0f} tok/s | ETA {eta} | {_duration(state.elapsed)}")
        self.stream.write("\r\033[K" + line if self.tty else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        self.done.set()
        self.clock.join()
        if self.tty and self.stage is not None:
            self.stream.write("\n")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _study_from_args(args, notes: list[str] | None = None):
    """The study and its folder from a study file or the flags; lines for the user (an old
    ``out``, a setting without a split file) go to ``notes``. A flag's value is checked before
    the file it overrides is read, so that its error names the flag."""
    from zerogap.config import check_value, parse_pairs
    from zerogap.study.spec import load_study, unsplit_warnings
    from zerogap.tasks import task_option_values

    overrides = given(args, StudySpec, STUDY_FLAGS)
    for name, value in overrides.items():
        check_value(StudySpec, name, value)
    setting = given(args, SettingSpec, SETTING_FLAGS)
    if args.study is not None:
        if setting or args.models is not None or args.sweep:
            first = next(iter(setting), "models" if args.models is not None else "sweep")
            raise UserError(f"give a study file or the setting flags, not both "
                            f"({_flag(args, first)})")
        read: list[str] = []
        study, out = load_study(args.study, notes=read, **overrides)
        if notes is not None:  # the note on an old out is moot when --out replaces it
            notes += [n for n in read if args.out is None or not n.startswith(f"{args.study}:")]
        out = args.out or out
        if out is None:
            raise UserError(f"{args.study}: no 'out' folder; add out = \"...\" or --out DIR")
        return study, out
    if args.models is not None:
        return _sweep_study(args, setting, overrides), args.out
    if args.sweep:
        raise UserError("--sweep needs --models DIR (a zerogap contaminate folder)")
    missing = [_flag(args, k) for k in ("clean", "contaminated", "task") if k not in setting]
    missing += ["--out"] if args.out is None else []
    if missing:
        raise UserError(f"give a study file, --models DIR, or {', '.join(missing)}")
    setting["task_options"] = task_option_values(
        setting["task"], parse_pairs("--task-option", setting.get("task_options", [])))
    setting.setdefault("name", "setting")
    study = StudySpec(settings=(SettingSpec(**setting),), **overrides)
    if notes is not None:
        notes += unsplit_warnings(study)
    return study, args.out


def _flag(args, name: str) -> str:
    """How the command line spells study or setting field ``name`` (as typed, if it was)."""
    for config in (SettingSpec, StudySpec, SweepSpec):
        if name in {f.name for f in dataclasses.fields(config)}:
            return getattr(args, TYPED, {}).get(name) or spelling(config, name)[-1]
    return f"--{name}"


def _sweep_study(args, setting: dict, overrides: dict):
    """``--models DIR [--sweep ...]``: the study whose settings are the folder's variants."""
    extra = [name for name in setting if name != "limit"]
    if extra:
        raise UserError(f"--models DIR gives the models, task and split; drop "
                        f"{_flag(args, extra[0])}")
    if args.out is None:
        raise UserError("give --out DIR for the study")
    values = dict(args.sweep or ())
    sweep = SweepSpec(models=args.models, epochs=values.get("sweep_epochs", ()),
                      copies=values.get("sweep_copies", ()), limit=setting.get("limit"))
    return StudySpec(settings=(), sweep=sweep, **overrides)


def _check_out(out: Path) -> None:
    from zerogap.io.files import check_output_folder

    check_output_folder(out, "--out")


# The study folder's lock: held (with the holder's pid) while a study runs in the folder.
STUDY_LOCK = "study.lock"


@contextlib.contextmanager
def _study_lock(out: Path) -> Iterator[None]:
    """Hold study folder ``out``'s lock (created with the folder) while the study runs: a second
    ``evaluate`` or ``demo`` on the folder is refused at once, naming the first one's pid, before
    it opens any of the runs the first is writing (each run's own lock would otherwise refuse
    each study a run the other holds, and neither would finish). The operating system releases
    it when the holder dies, so a killed study resumes."""
    from zerogap.store import writer_lock

    out.mkdir(parents=True, exist_ok=True)
    handle = writer_lock(out, name=STUDY_LOCK, what="study folder")
    try:
        yield
    finally:
        handle.close()


def _check_study(study, out: Path) -> list:
    """Every setting and strategy checked before a model loads or a file is written; the
    prepared settings (:func:`zerogap.study.settings.prepare`), which the study then runs on."""
    from zerogap.study.settings import prepare

    _check_out(out)
    return prepare(study)


def _run_study(study, prepared: list, out: Path, args, engine: EngineOptions,
               executor: Executor, commands=()) -> int:
    from transformers.utils import logging as hf_logging

    from zerogap.analysis.report import summary_table
    from zerogap.study.run import evaluate

    hf_logging.disable_progress_bar()  # the study's own line is the one progress display
    display = None if args.quiet else ProgressLine()
    # A sweep's missing variants train first, with the bars of zerogap contaminate --sweep.
    with progress_bars(args.quiet or study.sweep is None) as training:
        try:
            report = evaluate(study, out, progress=display, engine=engine, commands=commands,
                              prepared=prepared, executor=executor, training=training)
        finally:
            if display is not None:
                display.close()
    print(summary_table(report))
    print(f"report: {report.html} (and {report.markdown})")
    return 0


def _evaluate(args) -> int:
    from zerogap.runs import study_folder_dtype
    from zerogap.study.allocation import budget_notes
    from zerogap.study.run import model_folders, open_executor

    notes: list[str] = []
    study, out = _study_from_args(args, notes)
    notes += budget_notes(study)
    prepared = _check_study(study, out)
    with open_executor(study.executor, workers=args.workers,
                       backend=study.backend, device=args.device, folder=out,
                       reads=model_folders(study, prepared)) as executor:
        for note in notes:  # after the checks: a refused study is one line
            print(f"zerogap evaluate: warning: {note}", file=sys.stderr)
        # "auto" is made concrete where the jobs run, by the study
        engine = engine_options(args, study_folder_dtype(args.dtype, out))
        with _study_lock(out):
            return _run_study(study, prepared, out, args, engine, executor)


def _report(args) -> int:
    from zerogap.analysis.report import (
        STUDY_FILE,
        read_study_folder,
        study_scoring,
        summary_table,
        write_report,
    )

    scoring = study_scoring(read_study_folder(args.folder).record, args.folder / STUDY_FILE)
    report = write_report(args.folder,
                          dataclasses.replace(scoring, **scoring_changes(args, REPORT_SCORING)))
    print(summary_table(report))
    print(f"report: {report.html} (and {report.markdown})")
    return 0


def _showcase(args) -> int:
    from zerogap.cli.flags import check_given
    from zerogap.runs import study_dtype
    from zerogap.study.workers import LocalThreads, study_workers

    showcase, questions, m = args.showcase, args.questions, args.m
    if questions < 2:
        raise UserError(f"--questions must be at least 2, got {questions}")
    check_given(args, StudySpec, ("m",))
    if questions > showcase.max_questions():
        raise UserError(f"--questions {questions}: zerogap {showcase.command}'s split holds at "
                        f"most {showcase.max_questions()} questions half leaked and half not")
    _check_out(args.out)
    workers = study_workers(args.workers, DEFAULT_BACKEND, args.device)
    dtype = study_dtype(args.dtype, args.out, DEFAULT_BACKEND, args.device)
    models = args.out / "models"
    ablation = bool(getattr(args, "ablation", False))
    with _study_lock(args.out):
        print(f"zerogap {showcase.command}: building the clean and contaminated models in "
              f"{models} ({showcase.preset} preset); the study samples in {dtype}",
              file=sys.stderr)
        with progress_bars(args.quiet) as progress:
            showcase.build(models, progress=progress)
        study = showcase.study(models, questions=questions, m=m, controls=bool(args.controls),
                               ablation=ablation)
        prepared = _check_study(study, args.out)
        extra = "".join(f" --{flag}" for flag, on in (("controls", args.controls),
                                                      ("ablation", ablation)) if on)
        return _run_study(study, prepared, args.out, args,
                          EngineOptions(device=args.device, dtype=dtype,
                                        max_batch=args.batch_size),
                          LocalThreads(workers),
                          commands=[f"zerogap {showcase.command} --out {args.out} "
                                    f"--questions {questions} -m {m} --dtype {dtype}" + extra])
