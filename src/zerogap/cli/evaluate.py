"""``zerogap evaluate``, ``zerogap report`` and ``zerogap demo``: the restoration study.

``evaluate`` runs a study (flags or a TOML study file) into a folder and writes its report;
``report`` rewrites the report of such a folder (no sampling, no torch); ``demo`` builds a
clean and a contaminated model from the embedded model and evaluates every strategy on them.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

from zerogap.cli.contaminate import sweep_item
from zerogap.cli.flags import (
    add_config_arguments,
    add_out,
    add_running_arguments,
    add_task_arguments,
    renamed,
)
from zerogap.cli.run import (
    SAMPLING_FLAGS,
    add_chat_arguments,
    add_dtype_argument,
    add_engine_arguments,
    engine_options,
)
from zerogap.cli.score import SCORING, add_scoring_options, score_settings, scoring_changes
from zerogap.engine.base import (
    DEFAULT_BACKEND,
    EngineOptions,
    SamplingSpec,
    backend_names,
    concrete_dtype,
)
from zerogap.errors import UserError
from zerogap.progress import progress_bars

EXAMPLES = """examples:
  zerogap evaluate --clean cl/ --contaminated co/ --task arith --split-file split.json \\
      --strategies identity,railcap,all-zero -m 20 --limit 40 --out runs/study
  zerogap evaluate study.toml --ablation
  zerogap evaluate study.toml --backend vllm --strategies identity,railcap,lne-blocking,all-zero \\
      --tensor-parallel-size 4 --dtype bfloat16
  zerogap evaluate --models runs/laptop --sweep epochs=1,2,5 copies=1,5,20 --out runs/strength
  zerogap report runs/study
  zerogap demo
"""

STUDY_FLAGS = ("strategies", "ablation", "all_controls", "m", "temperature", "max_new_tokens",
               "seed", "bins", "resamples", "margin", "level", "calibration_size", "neuron_block",
               "neuron_candidates", "backend")
SETTING_FLAGS = ("clean", "contaminated", "task", "split", "split_file", "limit", "task_option",
                 "chat_template", "system_instruction", "models", "sweep")
STUDY_FILE_NOTE = ", or the study file's"
REPORT_SCORING = tuple(name for name in SCORING if name != "paired_null")

def register(subparsers) -> None:
    from zerogap.study.demo import DEMO_M, DEMO_QUESTIONS

    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser("evaluate", help="run a restoration study (sample, score, report)",
                              description=__doc__, epilog=EXAMPLES, formatter_class=fmt)
    p.add_argument("study", nargs="?", type=Path, help="TOML study file (instead of the flags)")
    g = p.add_argument_group("setting (without a study file)")
    g.add_argument("--clean", help="clean model M_cl, any --model spec of zerogap sample "
                                   "(default: none; needed without a study file or --models)")
    g.add_argument("--contaminated", help="contaminated model M_co (default: none; needed "
                                          "with --clean)")
    g.add_argument("--base", default=None, help="base model for shortcut (default: embedded)")
    add_task_arguments(g, required=False, unset=True)
    renamed(p, "--task-split", "--split")
    g.add_argument("--split-file", type=Path, default=None, metavar="FILE",
                   help='JSON {"leaked": [ids], "unleaked": [ids]} (zerogap contaminate writes '
                        "it; default: none, every question unstratified)")
    g.add_argument("--limit", type=int, default=None,
                   help="first N questions (with a split file: N/2 leaked and N/2 unleaked; "
                        "default: all)")
    g.add_argument("--name", default="setting", help="setting name in the tables")
    add_chat_arguments(g)
    g = p.add_argument_group("contamination strength (instead of --clean/--contaminated/--task)")
    g.add_argument("--models", type=Path, default=None, metavar="DIR",
                   help="a zerogap contaminate folder: one setting per M_co variant in it "
                        "(default: none)")
    g.add_argument("--sweep", nargs="+", type=sweep_item, default=None, metavar="KEY=V,V,...",
                   help="variants to evaluate, built in --models when missing: epochs=1,2,5 "
                        "copies=1,5,20 (Table 3 reads across them; default: those in --models)")
    g = p.add_argument_group("study (override a study file's values)")
    g.add_argument("--strategies", default=None,
                   help="comma list; name or name:key=value,... (default identity,ted,"
                        "lne-blocking,shortcut,railcap,all-zero)")
    g.add_argument("--ablation", action="store_true", default=None,
                   help="add the ablation rows: RailCap n = 1..8 and 12 (cap), n = 4 (ban); "
                        "LNE-blocking at GSM8K's T_task = 7")
    g.add_argument("--controls", dest="all_controls", action="store_true", default=None,
                   help="also apply every strategy (but identity and all-zero) to the clean "
                        "model: collateral damage alone")
    add_config_arguments(g, SamplingSpec, ("m", "temperature", "max_new_tokens", "seed"),
                         flags=SAMPLING_FLAGS, unset=True, note=STUDY_FILE_NOTE)
    add_scoring_options(p, ("bins", "resamples", "margin", "level"), note=STUDY_FILE_NOTE,
                        group=g)
    g.add_argument("--calibration-size", type=int, default=None,
                   help="questions scoring shortcut neurons, half leaked (default 100)")
    g.add_argument("--neuron-block", type=int, default=None,
                   help="neurons per causal block, the nearest divisor of the MLP width "
                        "(default 512; 0: one MLP layer)")
    g.add_argument("--neuron-candidates", type=int, default=None,
                   help="blocks scored causally, by comparative score (default 0: all)")
    g.add_argument("--backend", choices=backend_names(), default=None,
                   help="sampling engine of every run: hf (default) or vllm (runs of each "
                        "backend are kept apart; vllm cannot run shortcut)")
    add_out(p, "study folder: runs, tables, report (default: the study file's out)",
            required=False)
    add_running_arguments(p)
    _add_workers_argument(p)
    add_engine_arguments(p)
    p.set_defaults(func=_evaluate)

    p = subparsers.add_parser("report", help="rewrite a study folder's tables, figures and report",
                              epilog=EXAMPLES, formatter_class=fmt)
    p.add_argument("folder", type=Path, help="a zerogap evaluate folder")
    # The report prints no paired lines (its findings fix their own test), so no --paired-null.
    add_scoring_options(p, REPORT_SCORING, note=", or the study's")
    p.set_defaults(func=_report)

    p = subparsers.add_parser("demo", help="build a clean and a contaminated model from the "
                              "embedded model and evaluate every strategy on them",
                              epilog=EXAMPLES, formatter_class=fmt)
    add_out(p, "the demo's folder: models, runs, report", required=False,
            default=Path("runs/demo"))
    p.add_argument("--questions", type=int, default=None,
                   help=f"questions, half leaked (default {DEMO_QUESTIONS}, sized for power)")
    p.add_argument("-m", type=int, default=None,
                   help=f"samples per question (default {DEMO_M}, sized for power)")
    p.add_argument("--controls", action="store_true",
                   help="every strategy on the clean model too (RailCap's always runs)")
    p.add_argument("--ablation", action="store_true",
                   help="RailCap n = 1..8, 12 and ban; LNE-blocking at T_task = 7")
    add_dtype_argument(p, "auto")
    add_running_arguments(p)
    _add_workers_argument(p)
    p.set_defaults(func=_demo)


def _add_workers_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="jobs run side by side, each with its share of the CPU threads and "
                        "its own copy of the models (default: 2 on a CPU with two or more "
                        "threads, else 1; vLLM: 1)")


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


def _old_split_file(args) -> None:
    """``--split FILE.json`` meant the split file before ``--split`` became the dataset split:
    read it so, with a note."""
    if args.split is not None and (args.split.endswith(".json") or Path(args.split).is_file()):
        print(f"zerogap: note: --split {args.split} reads as --split-file (--split is now the "
              "task's dataset split)", file=sys.stderr)
        if args.split_file is None:
            args.split_file = Path(args.split)
        args.split = None


def _study_from_args(args, notes: list[str] | None = None):
    """The study and its folder from a study file or the flags; lines for the user (an old
    ``out``, a setting without a split file) go to ``notes``."""
    from zerogap.config import parse_pairs
    from zerogap.study.spec import SettingSpec, StudySpec, load_study, unsplit_warnings
    from zerogap.tasks import task_option_values

    _old_split_file(args)
    scoring_changes(args, ())  # the note on a retired scoring flag
    overrides = {k: getattr(args, k) for k in STUDY_FLAGS}
    if overrides["strategies"] is not None:
        overrides["strategies"] = tuple(s.strip() for s in overrides["strategies"].split(",")
                                        if s.strip())
    if args.study is not None:
        given = [f"--{k.replace('_', '-')}" for k in SETTING_FLAGS if getattr(args, k)]
        if given:
            raise UserError(f"give a study file or the setting flags, not both ({given[0]})")
        read: list[str] = []
        study, out = load_study(args.study, notes=read, **overrides)
        if notes is not None:  # the note on an old out is moot when --out replaces it
            notes += [n for n in read if args.out is None or not n.startswith(f"{args.study}:")]
        out = args.out or out
        if out is None:
            raise UserError(f"{args.study}: no 'out' folder; add out = \"...\" or --out DIR")
        return study, out
    if args.models is not None:
        return _sweep_study(args, overrides), args.out
    if args.sweep:
        raise UserError("--sweep needs --models DIR (a zerogap contaminate folder)")
    missing = [f"--{k}" for k in ("clean", "contaminated", "task", "out")
               if getattr(args, k) is None]
    if missing:
        raise UserError(f"give a study file, --models DIR, or {', '.join(missing)}")
    setting = SettingSpec(
        name=args.name, clean=args.clean, contaminated=args.contaminated, task=args.task,
        base=args.base or "embedded",
        task_options=task_option_values(args.task, parse_pairs("--task-option", args.task_option)),
        task_split=args.split or "test",
        split_file=None if args.split_file is None else str(args.split_file), limit=args.limit,
        chat_template=args.chat_template, system_instruction=args.system_instruction,
    )
    study = StudySpec(settings=(setting,), **{k: v for k, v in overrides.items()
                                              if v is not None})
    if notes is not None:
        notes += unsplit_warnings(study)
    return study, args.out


def _sweep_study(args, overrides: dict):
    """``--models DIR [--sweep ...]``: the study whose settings are the folder's variants."""
    from zerogap.study.spec import StudySpec, SweepSpec

    given = [f"--{k.replace('_', '-')}" for k in ("clean", "contaminated", "task", "split",
                                                   "split_file", "task_option", "base",
                                                   "chat_template", "system_instruction")
             if getattr(args, k)]
    if given:
        raise UserError(f"--models DIR gives the models, task and split; drop {given[0]}")
    if args.out is None:
        raise UserError("give --out DIR for the study")
    values = dict(args.sweep or ())
    sweep = SweepSpec(models=str(args.models), epochs=values.get("sweep_epochs", ()),
                      copies=values.get("sweep_copies", ()), limit=args.limit)
    return StudySpec(settings=(), sweep=sweep,
                     **{k: v for k, v in overrides.items() if v is not None})


def _check_out(out: Path) -> None:
    from zerogap.io.files import check_output_folder

    check_output_folder(out, "--out")


def _check_study(study, out: Path) -> list:
    """Every setting and strategy checked before a model loads or a file is written; the
    prepared settings (:func:`zerogap.study.settings.prepare`), which the study then runs on."""
    from zerogap.study.settings import prepare

    _check_out(out)
    return prepare(study)


def _run_study(study, prepared: list, out: Path, args, engine: EngineOptions, workers: int,
               commands=()) -> int:
    from transformers.utils import logging as hf_logging

    from zerogap.analysis.report import summary_table
    from zerogap.study.run import evaluate
    from zerogap.study.sweep import build_sweep

    if study.sweep is not None:  # as zerogap contaminate --sweep, with its progress bar
        with progress_bars(args.quiet) as progress:
            build_sweep(study.sweep, progress=progress)
    hf_logging.disable_progress_bar()  # the study's own line is the one progress display
    display = None if args.quiet else ProgressLine()
    try:
        report = evaluate(study, out, progress=display, engine=engine, commands=commands,
                          prepared=prepared, workers=workers)
    finally:
        if display is not None:
            display.close()
    print(summary_table(report))
    print(f"report: {report.html} (and {report.markdown})")
    return 0


def _evaluate(args) -> int:
    from zerogap.study.jobs import study_workers

    notes: list[str] = []
    study, out = _study_from_args(args, notes)
    prepared = _check_study(study, out)
    workers = study_workers(args.workers, study.backend, args.device)
    for note in notes:  # after the checks: a refused study is one line
        print(f"zerogap evaluate: warning: {note}", file=sys.stderr)
    return _run_study(study, prepared, out, args, engine_options(args), workers)


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
                          score_settings(scoring, scoring_changes(args, REPORT_SCORING)))
    print(summary_table(report))
    print(f"report: {report.html} (and {report.markdown})")
    return 0


def _demo(args) -> int:
    from zerogap.study.demo import (
        DEMO_M,
        DEMO_QUESTIONS,
        build_demo_models,
        demo_max_questions,
        demo_study,
    )
    from zerogap.study.jobs import study_workers

    # None is "not given"; 0 is a value, refused like any other too small one.
    questions = DEMO_QUESTIONS if args.questions is None else args.questions
    m = DEMO_M if args.m is None else args.m
    if questions < 2 or m < 2:
        raise UserError(f"--questions and -m must be at least 2, got {questions} and {m}")
    if questions > demo_max_questions():
        raise UserError(f"--questions {questions}: the demo's split holds at most "
                        f"{demo_max_questions()} questions half leaked and half not")
    _check_out(args.out)
    workers = study_workers(args.workers, DEFAULT_BACKEND, args.device)
    dtype = concrete_dtype(args.dtype, DEFAULT_BACKEND, args.device)
    models = args.out / "models"
    print(f"zerogap demo: building the clean and contaminated models in {models}; the study "
          f"samples in {dtype}", file=sys.stderr)
    with progress_bars(args.quiet) as progress:
        build_demo_models(models, progress=progress)
    study = demo_study(models, questions=questions, m=m, controls=args.controls,
                       ablation=args.ablation)
    prepared = _check_study(study, args.out)
    extra = "".join(f" --{flag}" for flag in ("controls", "ablation") if getattr(args, flag))
    return _run_study(study, prepared, args.out, args,
                      EngineOptions(device=args.device, dtype=dtype, max_batch=args.batch_size),
                      workers,
                      commands=[f"zerogap demo --out {args.out} --questions {questions} -m {m}"
                                f" --dtype {dtype}" + extra])
