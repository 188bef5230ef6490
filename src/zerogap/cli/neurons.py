"""``zerogap neurons``: locate shortcut neurons and save their ranking for the shortcut strategy."""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

from zerogap.cli.flags import (
    add_config_arguments,
    add_out,
    add_running_arguments,
    check_given,
    questions_by_ids,
)
from zerogap.errors import UserError
from zerogap.io.files import read_text
from zerogap.progress import progress_bars
from zerogap.study.calibration import split_questions

EXAMPLES = """examples:
  zerogap neurons --base embedded --contaminated con/ --clean cl/ --task gsm8k \\
      --split-file split.json --calibration-size 100 --out neurons.json
  zerogap sample --model con/ --task gsm8k --strategy shortcut --set neurons=neurons.json \\
      --set base=embedded --out runs/con-shortcut
"""

# What neurons' --split-file takes.
SPLIT_OR_IDS = ("a split.json, whose unleaked list is the other side, or a file of leaked ids, "
                "one per line, the split's other questions the other side")
# The search's sizes, declared (and worded) once with a study's.
SEARCH = ("calibration_size", "neuron_block", "neuron_candidates")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "neurons", help="rank shortcut neurons (comparative + causal score) into a JSON list",
        description="Locate shortcut neurons (Zhu et al., 2025) for the shortcut strategy.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from zerogap.engine.base import SamplingSpec
    from zerogap.study.spec import SettingSpec, StudySpec

    add_config_arguments(p, SettingSpec, ("base", "contaminated", "clean", "task",
                                          "task_options", "task_split", "split_file", "limit"),
                         defaults={"split_file": inspect.Parameter.empty},
                         values={"split_file": SPLIT_OR_IDS})
    add_config_arguments(p, StudySpec, SEARCH)
    add_config_arguments(p, SamplingSpec, ("max_new_tokens",))
    add_out(p, "a JSON file: the neurons ranked; a rerun resumes the location")
    add_running_arguments(p, batch=False)
    p.set_defaults(func=_neurons)


def _unleaked(path: Path, questions: list, leaked: set[str], split: str,
              task: str) -> list[str]:
    """The other side of the split: a split.json's ``unleaked`` list (its ids checked against
    the task's), else every question of the split not in ``leaked``, in the task's order."""
    data = json.loads(read_text(path)) if path.suffix == ".json" else {}
    if "unleaked" not in data:
        return [q.id for q in questions if q.id not in leaked]
    ids = [q.id for q in questions_by_ids(path, questions, split, task, key="unleaked")]
    both = leaked.intersection(ids)
    if both:
        raise UserError(f"{path}: {len(both)} ids are both leaked and unleaked (first: "
                        f"{sorted(both)[0]!r})")
    return ids


def _neurons(args) -> int:
    from zerogap.cli.output import STDOUT
    from zerogap.config import parse_pairs
    from zerogap.engine.base import SamplingSpec
    from zerogap.io.files import check_output
    from zerogap.study.spec import StudySpec
    from zerogap.tasks import task_from_strings

    check_given(args, StudySpec, SEARCH)
    check_given(args, SamplingSpec, ("max_new_tokens",))
    split_file = Path(args.split_file)
    if str(args.out) == STDOUT:  # its journal lives beside the file, for a resume
        raise UserError("--out -: neurons keeps a resumable journal beside its output file; "
                        "give a file name")
    check_output(args.out, "--out", inputs=[split_file])
    task = task_from_strings(args.task, parse_pairs("--task-option", args.task_option))
    questions = task.questions(args.split)
    leaked_ids = [q.id for q in questions_by_ids(split_file, questions, args.split, args.task)]
    unleaked = _unleaked(split_file, questions, set(leaked_ids), args.split, args.task)
    if not unleaked:
        raise UserError(f"--split-file {split_file}: every question of split "
                        f"{args.split!r} is leaked; none is left to calibrate against")
    try:
        chosen = split_questions(leaked_ids, unleaked, limit=args.limit,
                                 calibration_size=args.calibration_size)
    except ValueError as err:
        raise UserError(f"--limit: {err}") from None
    by_id = {q.id: q for q in questions}
    leaked = [by_id[q] for q in chosen.located]
    calibration = [by_id[q] for q in chosen.calibration]

    from zerogap.decoding.shortcut import mlp_width
    from zerogap.io.neurons import save_neurons
    from zerogap.models import check_device, check_model_spec, load_model
    from zerogap.pipelines.neurons import Journal, journal_path, locate_neurons, nearest_block_size

    check_device(args.device)
    # The models by the role the ranking records them in (the clean model as "uncontaminated").
    specs = {"base": args.base, "contaminated": args.contaminated, "uncontaminated": args.clean}
    for spec in specs.values():  # all three before the first loads
        check_model_spec(spec)
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
    models = {role: load_model(spec, device=args.device) for role, spec in specs.items()}
    journal.check_models({role: m.fingerprint for role, m in models.items()})
    _, width = mlp_width(models["contaminated"].model)
    block = nearest_block_size(width, args.neuron_block or width)
    if block != args.neuron_block:  # said before the hours of causal scoring, --quiet or not
        print(f"zerogap neurons: note: blocks of {block} neurons, the divisor of the MLP width "
              f"{width} nearest to --neuron-block {args.neuron_block}", file=sys.stderr)
    with progress_bars(args.quiet) as progress:
        ranking, meta = locate_neurons(
            models["base"].model, models["contaminated"].model, models["uncontaminated"].model,
            models["contaminated"].tokenizer, task, leaked, calibration,
            block_size=block, candidates=args.neuron_candidates,
            max_new_tokens=args.max_new_tokens, progress=progress, journal=journal,
        )
    meta.update({
        role: {"spec": m.spec, "fingerprint": m.fingerprint} for role, m in models.items()
    })
    meta.update(setup, calibration_disjoint=chosen.disjoint)
    save_neurons(args.out, ranking, meta)
    kept.unlink()  # everything it kept is in the ranking now
    print(f"ranked {len(ranking)} neurons into {args.out} (contaminated accuracy "
          f"{meta['accuracy']['contaminated']:.3f}, base {meta['accuracy']['base']:.3f} "
          f"on {len(calibration)} calibration questions: {chosen.choice})")
    return 0
