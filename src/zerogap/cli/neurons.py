"""``zerogap neurons``: locate shortcut neurons and save their ranking for the shortcut strategy."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zerogap.cli.flags import (
    add_config_arguments,
    add_out,
    add_running_arguments,
    add_task_arguments,
    renamed,
)
from zerogap.cli.paraphrase import questions_by_ids
from zerogap.errors import UserError
from zerogap.progress import progress_bars

EXAMPLES = """examples:
  zerogap neurons --base embedded --contaminated con/ --uncontaminated un/ --task gsm8k \\
      --leaked-ids split.json --calibration-size 100 --out neurons.json
  zerogap sample --model con/ --task gsm8k --strategy shortcut --set neurons=neurons.json \\
      --set base=embedded --out runs/con-shortcut
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "neurons", help="rank shortcut neurons (comparative + causal score) into a JSON list",
        description="Locate shortcut neurons (Zhu et al., 2025) for the shortcut strategy.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from zerogap.engine.base import SamplingSpec

    p.add_argument("--base", required=True, help="pretrained base model (patch target/source)")
    p.add_argument("--contaminated", required=True, help="the contaminated fine-tune")
    p.add_argument("--uncontaminated", required=True, help="an uncontaminated fine-tune")
    add_task_arguments(p)
    p.add_argument("--leaked-ids", required=True, type=Path, metavar="FILE",
                   help="the leaked questions (comparative score): a split.json (its leaked "
                        "list) or a file of ids, one per line")
    renamed(p, "--leaked", "--leaked-ids")
    p.add_argument("--calibration-size", type=int, default=100,
                   help="questions not leaked, in split order, for the causal score")
    p.add_argument("--neuron-block", type=int, default=512, metavar="N",
                   help="neurons per causal block (the nearest divisor of the MLP width)")
    renamed(p, "--block-size", "--neuron-block")
    p.add_argument("--neuron-candidates", type=int, default=0, metavar="N",
                   help="blocks scored causally, by comparative score (0: all)")
    add_config_arguments(p, SamplingSpec, ("max_new_tokens",))
    add_out(p, "the ranking (JSON); OUT.journal.jsonl beside it keeps every question's result "
               "until it is written, so a rerun resumes an interrupted one")
    add_running_arguments(p, batch=False)
    p.set_defaults(func=_neurons)


def _neurons(args) -> int:
    from zerogap.config import parse_pairs
    from zerogap.engine.base import SamplingSpec
    from zerogap.io.files import check_output
    from zerogap.tasks import task_from_strings

    if args.calibration_size < 1 or args.neuron_block < 1 or args.neuron_candidates < 0:
        raise UserError("--calibration-size and --neuron-block must be at least 1, "
                        "--neuron-candidates at least 0")
    SamplingSpec(m=1, max_new_tokens=args.max_new_tokens)  # the greedy decodes' limits
    check_output(args.out, "--out", inputs=[args.leaked_ids])
    task = task_from_strings(args.task, parse_pairs("--task-option", args.task_option))
    questions = task.questions(args.split)
    leaked = questions_by_ids(args.leaked_ids, questions, args.split, args.task)
    leaked_ids = {q.id for q in leaked}
    calibration = [q for q in questions if q.id not in leaked_ids][: args.calibration_size]
    if not calibration:
        raise UserError(f"split {args.split!r} has no questions left for calibration")

    from zerogap.io.neurons import save_neurons
    from zerogap.models import check_device, check_model_spec, load_model
    from zerogap.pipelines.neurons import Journal, journal_path, locate_neurons

    check_device(args.device)
    for role in ("base", "contaminated", "uncontaminated"):  # all three before the first loads
        check_model_spec(getattr(args, role))
    setup = {"task": task.name, "task_config": task.config(), "split": args.split,
             "leaked_ids": [q.id for q in leaked], "calibration_ids": [q.id for q in calibration]}
    kept = journal_path(args.out)
    resumed = kept.is_file()
    # Candidates only when set, so a journal kept before the flag existed still resumes.
    journal = Journal(kept, {**setup, "block_size": args.neuron_block,
                             **({"candidates": args.neuron_candidates}
                                if args.neuron_candidates else {}),
                             "max_new_tokens": args.max_new_tokens})
    if resumed:
        print(f"resuming from {kept} ({len(journal)} question results kept)", file=sys.stderr)
    models = {role: load_model(getattr(args, role), device=args.device)
              for role in ("base", "contaminated", "uncontaminated")}
    journal.check_models({role: m.fingerprint for role, m in models.items()})
    with progress_bars(args.quiet) as progress:
        ranking, meta = locate_neurons(
            models["base"].model, models["contaminated"].model, models["uncontaminated"].model,
            models["contaminated"].tokenizer, task, leaked, calibration,
            block_size=args.neuron_block, candidates=args.neuron_candidates,
            max_new_tokens=args.max_new_tokens, progress=progress, journal=journal,
        )
    meta.update({
        role: {"spec": m.spec, "fingerprint": m.fingerprint} for role, m in models.items()
    })
    meta.update(setup)
    save_neurons(args.out, ranking, meta)
    kept.unlink()  # everything it kept is in the ranking now
    print(f"ranked {len(ranking)} neurons into {args.out} (contaminated accuracy "
          f"{meta['accuracy']['contaminated']:.3f}, base {meta['accuracy']['base']:.3f} "
          f"on {len(calibration)} calibration questions)")
    return 0
