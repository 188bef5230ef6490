"""``zerogap sample``, ``zerogap greedy`` and ``zerogap runs show|export``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from zerogap.cli.flags import (
    add_config_arguments,
    add_out,
    add_running_arguments,
    add_task_arguments,
    renamed,
)
from zerogap.engine.base import DEFAULT_BACKEND, backend_names
from zerogap.errors import UserError
from zerogap.progress import progress_bars

# How SamplingSpec's fields are spelled on the command line (the rest: --field-name).
SAMPLING_FLAGS = {"m": ("-m",), "temperature": ("-T", "--temperature")}

EXAMPLES = """examples:
  zerogap sample --model embedded --task gsm8k --task-option path=data/gsm8k --limit 20 \\
      -m 50 -T 0.7 --out runs/base
  zerogap greedy --model embedded --task gsm8k --task-option path=data/gsm8k --limit 20 \\
      --out runs/base
  zerogap sample --model con/ --task gsm8k --strategy railcap --set n=4 --set mode=cap \\
      --greedy-dir runs/con-greedy --out runs/con-railcap
  zerogap sample --model con/ --task gsm8k --strategy shortcut --set neurons=neurons.json \\
      --set base=embedded --out runs/con-shortcut
  zerogap runs show runs/base [--json [OUT]]
  zerogap runs export runs/base --counts base.jsonl
"""


def _add_common(p: argparse.ArgumentParser) -> None:
    from zerogap.engine.base import SamplingSpec

    p.add_argument("--model", required=True,
                   help="'embedded', a .gguf file, a model or PEFT-adapter folder, or a hub id")
    add_task_arguments(p)
    p.add_argument("--limit", type=int, default=None,
                   help="first N questions only (default: all)")
    add_config_arguments(p, SamplingSpec, ("max_new_tokens",))
    p.add_argument("--strategy", default="identity",
                   help="registered strategy name (see 'zerogap strategy list')")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                   help="strategy setting, e.g. --set n=4 (type-checked; repeatable)")
    add_chat_arguments(p)
    add_out(p, "run directory (SQLite store) to create or resume")
    renamed(p, "--run-dir", "--out")
    add_running_arguments(p)
    p.add_argument("--backend", choices=backend_names(), default=DEFAULT_BACKEND,
                   help="sampling engine: zerogap's transformers engine (default) or vLLM")
    add_engine_arguments(p, dtype_default=None)


def add_chat_arguments(p) -> None:
    """``--chat-template [FILE]`` and ``--system-instruction TEXT`` (sample, greedy, evaluate)."""
    from zerogap.tasks.chat import TOKENIZER_TEMPLATE

    p.add_argument("--chat-template", nargs="?", const=TOKENIZER_TEMPLATE, default=None,
                   metavar="FILE",
                   help="prompt instruct models through a chat template: the tokenizer's own "
                        "(no value) or a Jinja file; recorded with the run (default: the raw "
                        "prompt)")
    p.add_argument("--system-instruction", default=None, metavar="TEXT",
                   help="a system message (with --chat-template; else put before the prompt, "
                        "then a blank line); recorded with the run (default: none)")


def add_dtype_argument(p: argparse.ArgumentParser, default: str | None) -> None:
    """``--dtype``; ``default`` None: the dtype the run directory records, else auto."""
    default_help = ("the dtype the run directory records, else auto" if default is None
                    else default)
    p.add_argument("--dtype", default=default, choices=("float32", "bfloat16", "auto"),
                   help="weight dtype; auto: bfloat16 where the CPU (AMX-BF16 or "
                        f"AVX512-BF16) or GPU computes it natively (default: {default_help})")


def add_engine_arguments(p: argparse.ArgumentParser, *, dtype_default: str | None = "float32"
                         ) -> None:
    """The weight dtype and vLLM's flags (``zerogap sample``, ``greedy`` and ``evaluate``).

    ``dtype_default`` None (``sample`` and ``greedy``): the dtype the run directory records,
    else ``auto`` (:func:`run_dtype`).
    """
    add_dtype_argument(p, dtype_default)
    p.add_argument("--tensor-parallel-size", type=int, default=1, metavar="N",
                   help="vLLM: GPUs per model replica (tensor parallel)")
    p.add_argument("--pipeline-parallel-size", type=int, default=1, metavar="P",
                   help="vLLM: pipeline stages (across nodes with vLLM's Ray executor)")
    p.add_argument("--vllm-option", action="append", default=[], metavar="KEY=VALUE",
                   help="vLLM: another vllm.LLM argument, value read as JSON when it parses "
                        "(e.g. gpu_memory_utilization=0.5, max_model_len=4096)")


def register(subparsers) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser("sample", help="sample m responses per question into a run dir",
                              epilog=EXAMPLES, formatter_class=fmt)
    _add_common(p)
    from zerogap.engine.base import SamplingSpec

    add_config_arguments(p, SamplingSpec, ("m", "temperature", "seed", "top_k", "top_p"),
                         flags=SAMPLING_FLAGS)
    p.add_argument("--greedy-dir", type=Path, default=None,
                   help="run dir holding (or receiving) the greedy decodes that railcap, ted and "
                        "lne-blocking reuse (default: --out)")
    p.set_defaults(func=_sample)

    p = subparsers.add_parser("greedy", help="greedy decodes (with entropies) into a run dir",
                              epilog=EXAMPLES, formatter_class=fmt)
    _add_common(p)
    p.set_defaults(func=_greedy)

    p = subparsers.add_parser("runs", help="inspect or export a run dir", epilog=EXAMPLES,
                              formatter_class=fmt)
    sub = p.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    show = sub.add_parser("show", help="summarise a run dir")
    show.add_argument("run_dir", type=Path, help="a run directory (zerogap sample --out)")
    show.add_argument("--json", nargs="?", const="-", metavar="OUT",
                      help="the summary as JSON instead of the table: on stdout with '-' or no "
                           "value, else into the file OUT (default: the table)")
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


def engine_options(args, dtype: str | None = None):
    """The :class:`~zerogap.engine.base.EngineOptions` the flags ask for, ``dtype`` (default:
    ``--dtype``, else auto) as the weights' dtype; checked on this machine once, when the run
    or study that uses them is prepared. ``--vllm-option`` values read as JSON when they
    parse."""
    from typing import cast

    from zerogap.config import parse_pairs
    from zerogap.engine.base import EngineOptions, WeightDtype

    options = {}
    for key, text in parse_pairs("--vllm-option", args.vllm_option).items():
        try:
            options[key] = json.loads(text)
        except json.JSONDecodeError:
            options[key] = text
    return EngineOptions(device=args.device,
                         dtype=cast(WeightDtype, dtype or args.dtype or "auto"),
                         max_batch=args.batch_size,
                         tensor_parallel_size=args.tensor_parallel_size,
                         pipeline_parallel_size=args.pipeline_parallel_size,
                         vllm_options=options)


def run_dtype(flag: str | None, run_dirs) -> str:
    """The weight dtype a run is made or resumed in.

    ``flag`` (``--dtype``) wins; without it, the dtype the first of ``run_dirs`` holding a run
    records, so a stored run resumes as it was made. A run stored before runs recorded their
    dtype was made in float32 (then the default), unless ``--dtype`` said otherwise, in which
    case the fingerprint check names the mismatch. Otherwise ``auto``, made concrete when the
    run is prepared (:func:`zerogap.runs.check_engine`).
    """
    from zerogap.store import DB_NAME, RunStore, inspect_store

    for folder in run_dirs if flag is None else ():
        if folder is not None and (folder / DB_NAME).is_file() and inspect_store(folder / DB_NAME):
            with RunStore(folder, create=False) as store:
                config = store.config()
            if config:
                return config.get("dtype", "float32")
    return flag or "auto"


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
    (:class:`zerogap.runs.RunRequest`), the run against the loaded model before a store is
    created."""
    from zerogap.config import parse_pairs
    from zerogap.runs import RunRequest, build_strategy, first_questions, prepare
    from zerogap.store import RunStore, check_store_dir
    from zerogap.strategies import parse_overrides
    from zerogap.tasks import task_from_strings
    from zerogap.tasks.chat import read_template

    strategy = build_strategy(args.strategy, parse_overrides(args.strategy, args.settings),
                              args.backend)
    task = task_from_strings(args.task, parse_pairs("--task-option", args.task_option))
    questions = first_questions(task.questions(args.split), args.limit)
    chat = (read_template(args.chat_template), args.system_instruction)
    greedy_dir = getattr(args, "greedy_dir", None)
    if greedy_dir is not None and greedy_dir.resolve() == args.out.resolve():
        greedy_dir = None  # one store, one writer
    for folder in (args.out, greedy_dir):
        if folder is not None:
            check_store_dir(folder)
    engine = engine_options(args, run_dtype(args.dtype, (args.out, greedy_dir)))
    request = RunRequest(args.model, task, args.split, questions, strategy, _spec(args),
                         greedy=args.command == "greedy", backend=args.backend, engine=engine,
                         chat=chat)
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


def _sample(args) -> int:
    run, store, greedy_store = _prepare(args)
    with store, progress_bars(args.quiet) as progress:
        try:
            n = run.into(store, greedy_store=greedy_store, progress=progress)
        finally:
            if greedy_store is not None:
                greedy_store.close()
        total = len(store.completed_questions())
    print(f"sampled {n} questions ({total} stored, m={run.spec.m}) in {args.out}")
    return 0


def _greedy(args) -> int:
    run, store, _ = _prepare(args)
    with store, progress_bars(args.quiet) as progress:
        n = run.into(store, progress=progress)
        total = len(store.completed_greedy())
    print(f"decoded {n} questions greedily ({total} stored) in {args.out}")
    return 0


# The configuration fields ``runs show`` lists, in order.
_SHOWN = ("backend", "model", "model_fingerprint", "task", "split", "strategy", "m",
          "temperature", "seed", "max_new_tokens", "top_k", "top_p")


def run_summary(config: dict, counts: list[dict], greedy: dict) -> dict:
    """What ``runs show`` reports about a run, as one JSON-ready record.

    ``histogram`` counts questions per solve-probability tenth, [0, 0.1) ... [0.9, 1.0].
    """
    from zerogap.readout import readout_of

    n_samples = sum(c["samples"] for c in counts)
    bins = [0] * 10
    for c in counts:
        bins[min(9, int(10 * c["correct"] / c["samples"]))] += 1
    return {
        "config": {key: config[key] for key in _SHOWN if key in config},
        "readout": readout_of(config),
        "questions_done": len(counts),
        "samples": n_samples,
        "accuracy": sum(c["correct"] for c in counts) / n_samples if n_samples else None,
        "histogram": bins if n_samples else None,
        "greedy_decodes": len(greedy),
        "greedy_accuracy": (sum(g.correct for g in greedy.values()) / len(greedy)
                            if greedy else None),
    }


def _show(args) -> int:
    from zerogap.cli.output import emit_json, json_destination
    from zerogap.readout import run_counts
    from zerogap.store import RunStore

    out = None if args.json is None else json_destination(args.json, "--json")
    with RunStore(args.run_dir, create=False) as store:
        summary = run_summary(store.config(), run_counts(store), store.greedy())
    if out is not None:
        emit_json(out, summary)
        return 0
    for key, value in summary["config"].items():
        print(f"{key:18} {json.dumps(value)}")
    print(f"{'readout':18} {summary['readout']}")
    print(f"{'questions done':18} {summary['questions_done']}")
    print(f"{'samples':18} {summary['samples']}")
    if summary["samples"]:
        print(f"{'accuracy':18} {summary['accuracy']:.4f}")
        print("solve probability histogram (questions per bin):")
        width = max(summary["histogram"])
        for b, n in enumerate(summary["histogram"]):
            hi = "1.0]" if b == 9 else f"{(b + 1) / 10:.1f})"
            print(f"  [{b / 10:.1f}, {hi:5} {n:6d} {'#' * round(40 * n / width)}")
    if summary["greedy_decodes"]:
        print(f"{'greedy decodes':18} {summary['greedy_decodes']} "
              f"(accuracy {summary['greedy_accuracy']:.4f})")
    return 0


def _export(args) -> int:
    from zerogap.io.files import check_output
    from zerogap.store import RunStore

    targets = [("counts", args.counts), ("jsonl", args.jsonl), ("parquet", args.parquet)]
    if not any(path for _, path in targets):
        raise UserError("give at least one of --counts, --jsonl, --parquet")
    for kind, path in targets:
        if path is not None:
            check_output(path, f"--{kind}", inputs=[args.run_dir])
    with RunStore(args.run_dir, create=False) as store:
        for kind, path in targets:
            if path is None:
                continue
            if kind == "counts":  # under the run's strategy readout (TED: kept samples only)
                from zerogap.io.counts import write_counts
                from zerogap.provenance import run_record
                from zerogap.readout import run_counts

                rows = run_counts(store)
                write_counts(path, *(
                    [r[key] for r in rows] for key in ("id", "correct", "samples", "first")
                ), provenance=run_record(args.run_dir, store.config()))
                n = len(rows)
            else:
                n = getattr(store, f"export_{kind}")(path)
            print(f"wrote {n} {'questions' if kind == 'counts' else 'samples'} to {path}",
                  file=sys.stdout)
    return 0
