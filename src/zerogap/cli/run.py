"""``zerogap sample``, ``zerogap greedy`` and ``zerogap runs show|export``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from zerogap.cli.flags import (
    add_config_arguments,
    add_engine_arguments,
    add_json,
    add_out,
    add_running_arguments,
    add_strategy_arguments,
    engine_options,
)
from zerogap.errors import UserError
from zerogap.progress import progress_bars

SAMPLE_EXAMPLES = """examples:
  zerogap sample --model embedded --task gsm8k --task-option path=data/gsm8k --limit 20 \\
      -m 50 -T 0.7 --out runs/base
  zerogap sample --model con/ --task gsm8k --strategy railcap:n=4,mode=cap \\
      --greedy-dir runs/con-greedy --out runs/con-railcap
  zerogap sample --model con/ --task gsm8k --strategy shortcut --set neurons=neurons.json \\
      --set base=embedded --out runs/con-shortcut
  zerogap runs export runs/base --counts base.jsonl    # zerogap score's input
"""
GREEDY_EXAMPLES = """examples:
  zerogap greedy --model embedded --task gsm8k --task-option path=data/gsm8k --limit 20 \\
      --out runs/base-greedy
  zerogap greedy --model con/ --task arith --max-new-tokens 128 --out runs/con-greedy
"""
RUNS_EXAMPLES = """examples:
  zerogap runs show runs/base
  zerogap runs show runs/base --json summary.json
  zerogap runs export runs/base --counts base.jsonl --jsonl samples.jsonl
"""


def _add_common(p: argparse.ArgumentParser) -> None:
    from zerogap.cli.flags import add_limit, add_model
    from zerogap.engine.base import SamplingSpec
    from zerogap.study.spec import SettingSpec, StudySpec

    add_model(p, required=True)
    add_config_arguments(p, SettingSpec, ("task", "task_options", "task_split"))
    add_limit(p)
    add_config_arguments(p, SamplingSpec, ("max_new_tokens",))
    add_strategy_arguments(p)
    add_config_arguments(p, SettingSpec, ("chat_template", "system_instruction"))
    add_out(p, "a run directory; a rerun resumes it")
    add_running_arguments(p)
    add_config_arguments(p, StudySpec, ("backend",))
    add_engine_arguments(p)


def register(subparsers) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser("sample", help="sample m responses per question into a run dir",
                              description="Sample m responses per question of a task from one "
                                          "model under one strategy into a run directory, "
                                          "graded as they come; a rerun with the same --out "
                                          "resumes it.",
                              epilog=SAMPLE_EXAMPLES, formatter_class=fmt)
    _add_common(p)
    from zerogap.engine.base import SamplingSpec

    add_config_arguments(p, SamplingSpec, ("m", "temperature", "seed", "top_k", "top_p"))
    p.add_argument("--greedy-dir", type=Path, default=None, metavar="DIR",
                   help="run dir holding (or receiving) the greedy decodes that railcap, ted and "
                        "lne-blocking reuse (default: --out)")
    p.set_defaults(func=_sample)

    p = subparsers.add_parser("greedy", help="greedy decodes (with entropies) into a run dir",
                              description="Decode every question of a task greedily, once, "
                                          "with each token's entropy, into a run directory: "
                                          "the trajectories RailCap, TED and LNE-blocking "
                                          "read (zerogap sample --greedy-dir).",
                              epilog=GREEDY_EXAMPLES, formatter_class=fmt)
    _add_common(p)
    p.set_defaults(func=_greedy)

    p = subparsers.add_parser("runs", help="inspect or export a run dir",
                              description="Inspect a run directory (its settings, counts and "
                                          "the responses cut at the token limit) or export "
                                          "its samples and per-question counts.",
                              epilog=RUNS_EXAMPLES, formatter_class=fmt)
    sub = p.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    show = sub.add_parser("show", help="summarise a run dir: every setting it holds, its "
                                       "counts and the responses cut at the token limit")
    show.add_argument("run_dir", type=Path, help="a run directory (zerogap sample --out)")
    add_json(show)
    show.set_defaults(func=_show)
    export = sub.add_parser("export", help="export samples or per-question counts")
    export.add_argument("run_dir", type=Path, help="a run directory (zerogap sample --out)")
    export.add_argument("--counts", type=Path, metavar="FILE",
                        help="per-question counts JSONL, zerogap score's input (default: none)")
    export.add_argument("--jsonl", type=Path, metavar="FILE",
                        help="every sample as JSONL (default: none)")
    export.add_argument("--parquet", type=Path, metavar="FILE",
                        help="every sample as Parquet (default: none)")
    export.set_defaults(func=_export)


def _spec(args):
    from zerogap.engine.base import WARN_TEMPERATURE, SamplingSpec

    if args.command == "sample":
        spec = SamplingSpec(m=args.m, temperature=args.temperature, seed=args.seed,
                            max_new_tokens=args.max_new_tokens, top_k=args.top_k,
                            top_p=args.top_p)
        if spec.temperature > WARN_TEMPERATURE:
            print(f"zerogap sample: warning: -T {spec.temperature:g} is far above the paper's "
                  "0.7; responses at this temperature are close to random text", file=sys.stderr)
        return spec
    return SamplingSpec(m=1, max_new_tokens=args.max_new_tokens)


def _prepare(args):
    """The run the flags ask for (:func:`zerogap.runs.prepare`) and its stores, in the order
    that touches nothing on bad input: the request is checked whole before the model loads
    (:class:`zerogap.runs.RunRequest`), and against the run ``--out`` holds
    (:func:`zerogap.runs.check_resume`), the run against the loaded model before a store is
    created. None when ``--out`` holds every question already: nothing loads."""
    from zerogap.config import parse_pairs
    from zerogap.engine.base import backend_capabilities
    from zerogap.models import check_model_path
    from zerogap.runs import (
        RunRequest,
        build_strategy,
        check_resume,
        check_strategy,
        first_questions,
        prepare,
        resume_dtype,
    )
    from zerogap.store import DB_NAME, RunStore, check_store_dir
    from zerogap.strategies import parse_overrides, split_label, strategy_class
    from zerogap.tasks import task_from_strings
    from zerogap.tasks.chat import read_template

    # Held against the backend's capabilities after the resume check: that imports the backend
    # (torch), and a refusal of a changed setting or a resume with nothing to do need neither.
    # A new run loads its model anyway, so there the strategy's class is held against them
    # first, before its settings read any file (shortcut's neurons on a backend that cannot
    # patch are refused as such).
    name, pairs = split_label(args.strategy)
    if not (args.out / DB_NAME).is_file():
        check_strategy(strategy_class(name), backend_capabilities(args.backend), args.backend,
                       name)
    strategy = build_strategy(name, parse_overrides(name, pairs + args.settings))
    task = task_from_strings(args.task, parse_pairs("--task-option", args.task_option))
    questions = first_questions(task.questions(args.split), args.limit)
    chat = (read_template(args.chat_template), args.system_instruction)
    greedy_dir = getattr(args, "greedy_dir", None)
    if greedy_dir is not None and greedy_dir.resolve() == args.out.resolve():
        greedy_dir = None  # one store, one writer
    for folder in (args.out, greedy_dir):
        if folder is not None:
            check_store_dir(folder)
    engine = engine_options(args, resume_dtype(args.dtype, (args.out, greedy_dir)))
    request = RunRequest(args.model, task, args.split, questions, strategy, _spec(args),
                         greedy=args.command == "greedy", backend=args.backend, engine=engine,
                         chat=chat)
    check_model_path(args.model)  # a missing model is named as such, resumed run or not
    if check_resume(request, args.out, greedy_dir) == 0:
        return None
    check_strategy(strategy, backend_capabilities(args.backend), args.backend)
    if args.quiet:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    run = prepare(request)  # loads the model; the run is checked against it before any store
    store = RunStore(args.out)
    try:
        greedy_store = None if greedy_dir is None else RunStore(greedy_dir)
    except BaseException:
        store.close()
        raise
    return run, store, greedy_store


def _complete(args, what: str, table: str) -> int:
    """Say that ``--out`` holds every question asked for, and its truncation: a resume with
    nothing to do, which loaded no model."""
    from zerogap.store import RunStore

    with RunStore(args.out, create=False) as store:
        truncation = store.truncation(table)
    print(f"nothing to do: {args.out} holds {what} of every question asked for; no model was "
          "loaded")
    say_truncation(args.command, "responses" if table == "samples" else "greedy decodes",
                   truncation, args.max_new_tokens)
    return 0


def _sample(args) -> int:
    prepared = _prepare(args)
    if prepared is None:
        return _complete(args, f"m={args.m} samples", "samples")
    run, store, greedy_store = prepared
    with store, progress_bars(args.quiet) as progress:
        try:
            n = run.into(store, greedy_store=greedy_store, progress=progress)
        finally:
            if greedy_store is not None:
                greedy_store.close()
        total = len(store.completed_questions())
        truncation = store.truncation("samples")
    print(f"sampled {n} questions ({total} stored, m={run.spec.m}) in {args.out}")
    say_truncation("sample", "responses", truncation, run.spec.max_new_tokens)
    return 0


def _greedy(args) -> int:
    prepared = _prepare(args)
    if prepared is None:
        return _complete(args, "the greedy decode", "greedy")
    run, store, _ = prepared
    with store, progress_bars(args.quiet) as progress:
        n = run.into(store, progress=progress)
        total = len(store.completed_greedy())
        truncation = store.truncation("greedy")
    print(f"decoded {n} questions greedily ({total} stored) in {args.out}")
    say_truncation("greedy", "greedy decodes", truncation, args.max_new_tokens)
    return 0


def say_truncation(command: str, what: str, truncation: tuple[int, int], limit: int) -> None:
    """How many of the stored ``what`` hit the token limit ``limit``, and a warning when most
    did (their answers are graded on what fits)."""
    from zerogap.cli.output import truncation_warning

    cut, total = truncation
    print(f"{cut} of {total} stored {what} cut at the token limit (--max-new-tokens {limit})")
    if cut * 2 > total:
        print(f"zerogap {command}: warning: {truncation_warning(cut, total)}", file=sys.stderr)


# The configuration fields ``runs show`` lists first, in this order; every other one follows.
_FIRST = ("backend", "model", "model_fingerprint", "dtype", "task", "split", "strategy", "m",
          "temperature", "seed", "max_new_tokens", "top_k", "top_p")


def run_summary(config: dict, counts: list[dict], greedy: dict,
                truncation: tuple[int, int], greedy_truncation: tuple[int, int]) -> dict:
    """What ``runs show`` reports about a run, as one JSON-ready record: every setting the
    store holds, its counts, and the responses cut at the token limit.

    ``histogram`` counts questions per solve-probability tenth, [0, 0.1) ... [0.9, 1.0];
    ``truncated`` and ``greedy_truncated`` are ``{"responses", "of"}`` of the stored samples
    and greedy decodes (:meth:`zerogap.store.RunStore.truncation`).
    """
    from zerogap.readout import readout_of

    n_samples = sum(c["samples"] for c in counts)
    bins = [0] * 10
    for c in counts:
        bins[min(9, int(10 * c["correct"] / c["samples"]))] += 1
    order = [key for key in _FIRST if key in config] + sorted(set(config) - set(_FIRST))
    return {
        "config": {key: config[key] for key in order},
        "readout": readout_of(config),
        "questions_done": len(counts),
        "samples": n_samples,
        "accuracy": sum(c["correct"] for c in counts) / n_samples if n_samples else None,
        "histogram": bins if n_samples else None,
        "truncated": dict(zip(("responses", "of"), truncation, strict=True)),
        "greedy_decodes": len(greedy),
        "greedy_accuracy": (sum(g.correct for g in greedy.values()) / len(greedy)
                            if greedy else None),
        "greedy_truncated": dict(zip(("responses", "of"), greedy_truncation, strict=True)),
    }


def _show(args) -> int:
    from zerogap.cli.output import STDOUT, emit_json, json_destination, truncation_warning
    from zerogap.readout import run_counts
    from zerogap.store import RunStore

    out = None if args.json is None else json_destination(args.json, "--json",
                                                          inputs=[args.run_dir])
    with RunStore(args.run_dir, create=False) as store:
        summary = run_summary(store.config(), run_counts(store), store.greedy(),
                              store.truncation("samples"), store.truncation("greedy"))
    table = sys.stderr if out == STDOUT else sys.stdout
    for key, value in summary["config"].items():
        if key != "readout":  # its own line below, for stores that predate the field too
            print(f"{key:18} {json.dumps(value)}", file=table)
    print(f"{'readout':18} {summary['readout']}", file=table)
    print(f"{'questions done':18} {summary['questions_done']}", file=table)
    print(f"{'samples':18} {summary['samples']}", file=table)
    if summary["samples"]:
        print(f"{'accuracy':18} {summary['accuracy']:.4f}", file=table)
        cut, total = summary["truncated"].values()
        print(f"{'cut at the limit':18} {cut} of {total} samples ({cut / total:.0%})",
              file=table)
        print("solve probability histogram (questions per bin):", file=table)
        width = max(summary["histogram"])
        for b, n in enumerate(summary["histogram"]):
            hi = "1.0]" if b == 9 else f"{(b + 1) / 10:.1f})"
            print(f"  [{b / 10:.1f}, {hi:5} {n:6d} {'#' * round(40 * n / width)}", file=table)
    if summary["greedy_decodes"]:
        cut = summary["greedy_truncated"]["responses"]
        print(f"{'greedy decodes':18} {summary['greedy_decodes']} "
              f"(accuracy {summary['greedy_accuracy']:.4f}, {cut} cut at the limit)",
              file=table)
    for what, part in (("samples", "truncated"), ("greedy decodes", "greedy_truncated")):
        cut, total = summary[part].values()
        if cut * 2 > total:
            print(f"zerogap runs show: warning: {what}: {truncation_warning(cut, total)}",
                  file=sys.stderr)
    if out is not None:
        emit_json(out, summary)
    return 0


def _export(args) -> int:
    from zerogap.cli.output import json_destination, report_stream, written_file
    from zerogap.store import RunStore

    targets = [("counts", args.counts), ("jsonl", args.jsonl), ("parquet", args.parquet)]
    if not any(path for _, path in targets):
        raise UserError("give at least one of --counts, --jsonl, --parquet")
    chosen = [(f"--{kind}", path) for kind, path in targets if path is not None]
    for i, (flag, path) in enumerate(chosen):
        json_destination(path, flag, inputs=[args.run_dir])
        same = next((other for other, earlier in chosen[:i]
                     if os.path.realpath(earlier) == os.path.realpath(path)), None)
        if same is not None:
            raise UserError(f"{flag} {path}: is also {same}; each export needs its own file")
    said = report_stream(path for _, path in chosen)
    with RunStore(args.run_dir, create=False) as store:
        for kind, destination in targets:
            if destination is None:
                continue
            with written_file(destination) as path:
                if kind == "counts":  # under the run's strategy readout (TED: kept samples only)
                    from zerogap.io.counts import write_counts
                    from zerogap.provenance import run_record
                    from zerogap.readout import run_counts

                    rows = run_counts(store)
                    write_counts(path, *(
                        [r[key] for r in rows] for key in ("id", "correct", "samples", "first")
                    ), provenance=run_record(args.run_dir, store.config()),
                        truncated=[r["truncated"] for r in rows])
                    n = len(rows)
                else:
                    n = getattr(store, f"export_{kind}")(path)
            print(f"wrote {n} {'questions' if kind == 'counts' else 'samples'} to {destination}",
                  file=said)
    return 0
