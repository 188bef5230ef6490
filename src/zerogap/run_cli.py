"""``zerogap sample``, ``zerogap greedy`` and ``zerogap runs show|export``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from zerogap.cli import UserError

EXAMPLES = """examples:
  zerogap sample --model embedded --task gsm8k --limit 20 -m 50 -T 0.7 --run-dir runs/base
  zerogap greedy --model embedded --task gsm8k --limit 20 --run-dir runs/base
  zerogap sample --model con/ --task gsm8k --strategy railcap --set n=4 --set mode=cap \
      --greedy-dir runs/con-greedy --run-dir runs/con-railcap
  zerogap sample --model con/ --task gsm8k --strategy shortcut --set neurons=neurons.json \
      --set base=embedded --run-dir runs/con-shortcut
  zerogap runs show runs/base
  zerogap runs export runs/base --counts base.jsonl
"""


def _task_option(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True,
                   help="'embedded', a .gguf file, a model or PEFT-adapter folder, or a hub id")
    p.add_argument("--task", required=True, help="registered task name, e.g. gsm8k")
    p.add_argument("--task-option", action="append", default=[], type=_task_option,
                   metavar="KEY=VALUE", help="task option (value parsed as JSON when it can be)")
    p.add_argument("--split", default="test")
    p.add_argument("--limit", type=int, default=None, help="first N questions only")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--strategy", default="identity",
                   help="identity, railcap, railcap-ban, ted, lne-blocking, shortcut, all-zero")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                   help="strategy setting, e.g. --set n=4 (type-checked; repeatable)")
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--device", default=None, help="torch device (default: cuda if present)")
    p.add_argument("--max-batch", type=int, default=None,
                   help="most rows decoded together (default: from free memory)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "auto"),
                   help="weight dtype; auto: bfloat16 where the CPU (AMX/AVX512-BF16) or GPU "
                        "computes it natively (default: float32)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def register(subparsers) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser("sample", help="sample m responses per question into a run dir",
                              epilog=EXAMPLES, formatter_class=fmt)
    _add_common(p)
    p.add_argument("-m", type=int, default=50, help="samples per question")
    p.add_argument("-T", "--temperature", type=float, default=None,
                   help="sampling temperature (default: the strategy's, 0.7)")
    p.add_argument("--greedy-dir", type=Path, default=None,
                   help="run dir holding (or receiving) the greedy decodes that railcap, ted and "
                        "lne-blocking reuse (default: --run-dir)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.set_defaults(func=_sample)

    p = subparsers.add_parser("greedy", help="greedy decodes (with entropies) into a run dir",
                              epilog=EXAMPLES, formatter_class=fmt)
    _add_common(p)
    p.set_defaults(func=_greedy)

    p = subparsers.add_parser("runs", help="inspect or export a run dir", epilog=EXAMPLES,
                              formatter_class=fmt)
    sub = p.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    show = sub.add_parser("show", help="summarise a run dir")
    show.add_argument("run_dir", type=Path)
    show.set_defaults(func=_show)
    export = sub.add_parser("export", help="export samples or per-question counts")
    export.add_argument("run_dir", type=Path)
    export.add_argument("--counts", type=Path, help="per-question counts JSONL (zerogap score)")
    export.add_argument("--jsonl", type=Path, help="every sample as JSONL")
    export.add_argument("--parquet", type=Path, help="every sample as Parquet")
    export.set_defaults(func=_export)


def _prepare(args):
    """Task, questions, model and store, in the order that touches nothing on bad input."""
    from zerogap.runs import build_strategy
    from zerogap.store import DB_NAME, RunStore
    from zerogap.strategies import parse_overrides
    from zerogap.tasks import get_task

    args.strategy_options = parse_overrides(args.strategy, args.settings)
    build_strategy(args.strategy, args.strategy_options, getattr(args, "temperature", None))
    task = get_task(args.task, **dict(args.task_option))
    questions = task.questions(args.split)
    if args.limit is not None:
        if args.limit < 1:
            raise UserError(f"--limit must be at least 1, got {args.limit}")
        questions = questions[: args.limit]
    if not questions:
        raise UserError(f"task {args.task} has no questions in split {args.split!r}")
    for folder in (args.run_dir, getattr(args, "greedy_dir", None)):
        if folder is not None and (folder / DB_NAME).exists():  # read-only, before the model load
            RunStore(folder, create=False).close()
    from zerogap.models import load_model

    if args.quiet:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    loaded = load_model(args.model, device=args.device, dtype=args.dtype)
    return task, questions, loaded, RunStore(args.run_dir)


def _sample(args) -> int:
    from zerogap.runs import SampleSettings, run_sample
    from zerogap.store import RunStore

    task, questions, loaded, store = _prepare(args)
    temperature = args.temperature
    if temperature is None:
        temperature = args.strategy_options.get("temperature", 0.7)
    settings = SampleSettings(m=args.m, temperature=temperature,
                              max_new_tokens=args.max_new_tokens, seed=args.seed,
                              top_k=args.top_k, top_p=args.top_p)
    greedy_store = None if args.greedy_dir is None else RunStore(args.greedy_dir)
    with store:
        try:
            n = run_sample(loaded, task, questions, store, settings, split=args.split,
                           strategy=args.strategy, strategy_options=args.strategy_options,
                           greedy_store=greedy_store, max_batch=args.max_batch,
                           progress=not args.quiet)
        finally:
            if greedy_store is not None:
                greedy_store.close()
        total = len(store.completed_questions())
    print(f"sampled {n} questions ({total} stored, m={args.m}) in {args.run_dir}")
    return 0


def _greedy(args) -> int:
    from zerogap.runs import run_greedy

    task, questions, loaded, store = _prepare(args)
    with store:
        n = run_greedy(loaded, task, questions, store, split=args.split,
                       max_new_tokens=args.max_new_tokens, strategy=args.strategy,
                       strategy_options=args.strategy_options, max_batch=args.max_batch,
                       progress=not args.quiet)
        total = len(store.completed_greedy())
    print(f"decoded {n} questions greedily ({total} stored) in {args.run_dir}")
    return 0


def _show(args) -> int:
    from zerogap.store import RunStore

    with RunStore(args.run_dir, create=False) as store:
        config, counts, greedy = store.config(), store.counts(), store.greedy()
    for key in ("model", "model_fingerprint", "task", "split", "strategy", "m", "temperature",
                "seed", "max_new_tokens", "top_k", "top_p"):
        if key in config:
            print(f"{key:18} {json.dumps(config[key])}")
    n_samples = sum(c["samples"] for c in counts)
    n_correct = sum(c["correct"] for c in counts)
    print(f"{'questions done':18} {len(counts)}")
    print(f"{'samples':18} {n_samples}")
    if n_samples:
        print(f"{'accuracy':18} {n_correct / n_samples:.4f}")
        print("solve probability histogram (questions per bin):")
        bins = [0] * 10
        for c in counts:
            bins[min(9, int(10 * c["correct"] / c["samples"]))] += 1
        width = max(bins)
        for b, n in enumerate(bins):
            hi = "1.0]" if b == 9 else f"{(b + 1) / 10:.1f})"
            print(f"  [{b / 10:.1f}, {hi:5} {n:6d} {'#' * round(40 * n / width)}")
    if greedy:
        acc = sum(g.correct for g in greedy.values()) / len(greedy)
        print(f"{'greedy decodes':18} {len(greedy)} (accuracy {acc:.4f})")
    return 0


def _export(args) -> int:
    from zerogap.store import RunStore

    targets = [("counts", args.counts), ("jsonl", args.jsonl), ("parquet", args.parquet)]
    if not any(path for _, path in targets):
        raise UserError("give at least one of --counts, --jsonl, --parquet")
    with RunStore(args.run_dir, create=False) as store:
        for kind, path in targets:
            if path is None:
                continue
            if kind == "counts":  # under the run's strategy readout (TED: kept samples only)
                from zerogap.io.counts import write_counts
                from zerogap.runs import run_counts

                rows = run_counts(store)
                write_counts(path, *(
                    [r[key] for r in rows] for key in ("id", "correct", "samples", "first")
                ))
                n = len(rows)
            else:
                n = getattr(store, f"export_{kind}")(path)
            print(f"wrote {n} {'questions' if kind == 'counts' else 'samples'} to {path}",
                  file=sys.stdout)
    return 0
