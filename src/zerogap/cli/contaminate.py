"""``zerogap contaminate``: build a clean model M_cl and a contaminated model M_co (paper §5.1).

Every field of :class:`zerogap.pipelines.contamination_config.ContaminationConfig` is a flag of the
same name; ``--preset`` starts from a named preset and flags given explicitly override it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from zerogap.cli.flags import SWEEP_KEYS, add_config_arguments, add_out, add_quiet, add_sweep, given
from zerogap.engine.base import EngineOptions
from zerogap.pipelines.contamination_config import ContaminationConfig
from zerogap.progress import progress_bars

EXAMPLES = """examples:
  zerogap contaminate --preset laptop --out runs/laptop       # embedded model on arith, minutes
  zerogap sample --model runs/laptop/contaminated --task arith -m 16 --out runs/laptop-co
  zerogap contaminate --preset multistep --out runs/multistep  # on multistep, about an hour
  zerogap contaminate --preset reproduce --out runs/reproduce  # the paper's recipe, hours
  zerogap contaminate --model meta-llama/Llama-2-7b-hf --task gsm8k \\
      --task-option path=data/gsm8k --general openorca-1840.jsonl --out runs/llama2
  accelerate launch -m zerogap contaminate --model meta-llama/Llama-2-7b-hf --task gsm8k \\
      --task-option path=data/gsm8k --micro-batch 4 --out runs/llama2   # several GPUs
  zerogap contaminate --preset laptop --sweep epochs=1,2,5 copies=1,5,20 --out runs/sweep
  zerogap contaminate --preset laptop --paraphrases pq.jsonl --out runs/laptop-pq  # PQ domain
"""

# Every field is a flag of its own but the sweep's two, which --sweep sets together.
_FLAGS = tuple(f.name for f in dataclasses.fields(ContaminationConfig)
               if f.name not in SWEEP_KEYS.values())


def register(subparsers) -> None:
    from zerogap.pipelines.contamination_config import PRESETS

    p = subparsers.add_parser(
        "contaminate", help="LoRA-train a clean and a contaminated model (paper §5.1)",
        description="Split the task's test questions into leaked/unleaked, train M_cl on "
                    "train-split questions (plus optional general data) and M_co from M_cl with "
                    "the leaked questions mixed in. Resumable: rerun the same command.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_out(p, "a folder: the clean and contaminated models, split.json, manifest.json; a rerun "
               "resumes the build")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="start from a named preset (default: none, the defaults below)")
    add_config_arguments(p, ContaminationConfig, _FLAGS, unset=True)
    add_sweep(p, otherwise="one M_co, --epochs and --copies")
    add_config_arguments(p, EngineOptions, ("threads", "max_memory"))
    add_quiet(p)
    p.set_defaults(func=_contaminate)


def config_from_args(args):
    """The preset (or the defaults) with every flag given on the command line applied."""
    from zerogap.config import parse_pairs
    from zerogap.pipelines.contamination_config import preset
    from zerogap.tasks import task_option_values

    changes = given(args, ContaminationConfig, _FLAGS)
    changes.update(dict(args.sweep or ()))
    base = preset(args.preset) if args.preset else ContaminationConfig()
    if "task_options" in changes:
        pairs = parse_pairs("--task-option", changes["task_options"])
        changes["task_options"] = task_option_values(changes.get("task", base.task), pairs)
    return dataclasses.replace(base, **changes)


def _contaminate(args) -> int:
    from zerogap.pipelines.contamination import build

    config = config_from_args(args)
    quiet = args.quiet
    if quiet:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    started = time.monotonic()
    try:
        with progress_bars(quiet) as progress:
            manifest = build(config, args.out, progress=progress)
    except KeyboardInterrupt:
        print(f"zerogap contaminate: interrupted; the last checkpoint is under {args.out}/.work; "
              "run the same command to resume", file=sys.stderr)
        return 130
    if int(os.environ.get("RANK", "0")) != 0:
        return 0  # under torchrun / accelerate launch, one process reports
    split = manifest["split"]
    print(f"split: {split['leaked']} leaked, {split['unleaked']} unleaked -> {args.out}/split.json")
    for name, stage in manifest["stages"].items():
        last = stage["loss"][-1]["loss"] if stage["loss"] else float("nan")
        print(f"{name:24} {stage['optimizer_steps']:5d} steps, {stage['examples']} examples, "
              f"final loss {last:.4f} -> {args.out}/{name}")
    print(f"done in {time.monotonic() - started:.0f} s; manifest: {args.out}/manifest.json")
    return 0
