"""One configuration of the embedded demo's regime, judged by its design criteria alone.

The demo (``zerogap demo``) is a miniature of the paper's experiment (arXiv 2608.07341 §5), and
it can only test the paper's claims where the paper's premise holds (issue 47). This script
measures that for one configuration (the task and its difficulty mix, the contamination
preset's ranks, learning rate, epochs and exposures of the leaked items, sizes):

1. it builds M_cl and M_co through ``zerogap contaminate``'s code path
   (:func:`zerogap.pipelines.contamination.build`) from the ``laptop`` preset with the
   overrides given;
2. it runs a study of Identity alone on a held-out set of the split's questions (half leaked):
   M_cl sampled twice, M_co plainly, both models' greedy decodes, and the study's design-check
   job (:mod:`zerogap.analysis.design`); no other strategy samples, so how strategies rank is
   never seen;
3. it prints every criterion with its value, met or not, the build's time and the tokens per
   answer, and writes them to ``OUT/result.json``.

Usage::

    python bench/regime_search.py --out runs/regime/C1 [--questions 64] [-m 8]
        [--max-new-tokens 112] [--max-batch 64] [--threads 1]
        -- [zerogap contaminate's flags: --lora-r 16 --epochs 6 --task-option ...]

Rerunning the same command resumes (both the build and the study are resumable). Run it with
one torch thread where the machine is shared; ``--threads`` sets it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch

from zerogap.pipelines.contamination import build, differing_fields
from zerogap.pipelines.contamination_config import ContaminationConfig
from zerogap.progress import Progress
from zerogap.tasks import get_task


def configuration(flags: list[str], out: Path) -> ContaminationConfig:
    """What ``zerogap contaminate --preset laptop FLAGS`` would build (its own parser)."""
    from zerogap.cli import build_parser
    from zerogap.cli.contaminate import config_from_args

    args = build_parser().parse_args(["contaminate", "--preset", "laptop", "--out", str(out),
                                      *flags])
    return config_from_args(args)


# Fields that shape only M_co or the split: two configurations equal in every other field train
# the same M_cl.
M_CO_FIELDS = {"epochs", "copies", "sweep_epochs", "sweep_copies", "save_steps", "leaked",
               "split", "split_seed", "paraphrases", "contaminated_learning_rate", "replay",
               "merge"}


def share_clean(config: ContaminationConfig, other: Path, out: Path) -> None:
    """Start ``out`` from the M_cl of another run of this script (``other``) whose config trains
    the same M_cl: a link to its model, its manifest's clean stage, and the study's runs of that
    model (named by its resolved path, so the study finds them done)."""
    import shutil

    from zerogap.store import RunStore

    manifest = json.loads((other / "models" / "manifest.json").read_text())
    differ = differing_fields(config, manifest["config"], ignore=M_CO_FIELDS)
    if differ:
        raise SystemExit(f"--clean-from {other}: its M_cl differs in {', '.join(differ)}")
    models = out / "models"
    if not models.exists():
        models.mkdir(parents=True)
        (models / "clean").symlink_to((other / "models" / "clean").resolve())
        manifest.update(config=config.to_dict(), stages={"clean": manifest["stages"]["clean"]})
        (models / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    clean = str((other / "models" / "clean").resolve())
    for run in sorted((other / "study" / "runs").glob("*")):
        with RunStore(run, create=False) as store:
            model = store.config().get("model")
        if model == clean and not (out / "study" / "runs" / run.name).exists():
            shutil.copytree(run, out / "study" / "runs" / run.name,
                            ignore=shutil.ignore_patterns("run.lock"))


def answer_tokens(config: ContaminationConfig, models: Path) -> float:
    """Mean tokens of the test split's reference solutions (what a leaked item is memorised
    as), with the base model's tokenizer."""
    from zerogap.models import load_tokenizer

    tokenizer = load_tokenizer(str(models / "clean"))
    task = get_task(config.task, **config.task_options)
    rows = task.rows(config.split)
    return statistics.mean(len(tokenizer(" " + r.answer, add_special_tokens=False)["input_ids"])
                           for r in rows)


def sampled_tokens(run_dir: Path) -> float:
    """Mean generated tokens per sample of one run."""
    from zerogap.store import RunStore

    with RunStore(run_dir, create=False) as store:
        return statistics.mean(row.n_tokens for row in store.samples())


def task_dispersion(config: ContaminationConfig, questions: int, m: int) -> dict:
    """ROUGE-L and trigger rate of the task's own solution generator: for each of the first
    ``questions`` test problems, ``m`` solutions drawn afresh against one more draw standing in
    for the greedy decode, tokenised with the base model's tokenizer. What a model that samples
    exactly the training distribution would show; a model that prefers some paths is sharper."""
    import random

    import numpy as np

    from zerogap.analysis.design import trajectory_stats
    from zerogap.models import load_tokenizer
    from zerogap.tasks.multistep import write_solution

    tokenizer = load_tokenizer(config.model)
    task = get_task(config.task, **config.task_options)
    samples, greedy = [], []
    for index in range(questions):
        problem, _ = task.problem(config.split, index)
        draw = random.Random(f"dispersion/{index}")
        greedy.append(" " + write_solution(problem, draw))
        samples.append([" " + write_solution(problem, draw) for _ in range(m)])
    stats = trajectory_stats(samples, greedy, lambda text: tokenizer(
        text, add_special_tokens=False)["input_ids"])
    return {"rouge_l_median": round(float(np.median(stats.rouge)), 3),
            "trigger": round(int(stats.hits.sum()) / int(stats.steps.sum()), 3),
            "tokens": round(statistics.mean(len(tokenizer(g, add_special_tokens=False)[
                "input_ids"]) for g in greedy), 1)}


class Log:
    """Progress as plain lines (a log file, not a terminal): a training stage every tenth of its
    steps, a study stage when it starts."""

    def __init__(self) -> None:
        self.last = ""

    def __call__(self, state) -> None:
        if isinstance(state, Progress):
            step = max(1, state.total // 10)
            if state.done % step == 0 or state.done == state.total:
                print(f"{time.strftime('%H:%M:%S')} {state.stage}: {state.done}/{state.total} "
                      f"{state.note}", flush=True)
        elif state.stage != self.last:
            self.last = state.stage
            print(f"{time.strftime('%H:%M:%S')} {state.stage}", flush=True)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("flags", nargs="*", metavar="FLAG",
                        help="zerogap contaminate's flags over its laptop preset, after --")
    parser.add_argument("--questions", type=int, default=64,
                        help="held-out questions, half leaked (default 64)")
    parser.add_argument("-m", type=int, default=8, help="samples per question (default 8)")
    parser.add_argument("--max-new-tokens", type=int, default=112)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clean-from", type=Path, metavar="OTHER_OUT",
                        help="reuse the M_cl (model and clean runs) of another run of this "
                             "script whose config trains the same M_cl")
    parser.add_argument("--task-only", action="store_true",
                        help="print the task generator's own ROUGE-L and trigger rate; no model")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.task_only:
        found = task_dispersion(configuration(args.flags, args.out / "models"), args.questions,
                                args.m)
        print(f"task generator: {found}")
        return found

    from zerogap.analysis.design import read_design
    from zerogap.study.run import evaluate
    from zerogap.study.spec import SettingSpec, StudySpec

    models = args.out / "models"
    config = configuration(args.flags, models)
    if args.clean_from is not None:
        share_clean(config, args.clean_from, args.out)
    started = time.monotonic()
    manifest = build(config, models, progress=Log())
    built = time.monotonic() - started
    setting = SettingSpec(name="regime", clean=str(models / "clean"),
                          contaminated=str(models / "contaminated"), task=config.task,
                          task_options=dict(config.task_options),
                          split_file=str(models / "split.json"), limit=args.questions)
    study = StudySpec(settings=(setting,), strategies=("identity",), m=args.m,
                      max_new_tokens=args.max_new_tokens,
                      calibration_size=min(args.questions, 100), title="regime search")
    started = time.monotonic()
    evaluate(study, args.out / "study", max_batch=args.max_batch, workers=1, progress=Log())
    studied = time.monotonic() - started
    entry = json.loads((args.out / "study" / "study.json").read_text())["settings"][0]
    criteria = read_design(args.out / "study" / entry["design"])
    stages = manifest["stages"]
    result = {
        "config": config.to_dict(),
        "questions": args.questions, "m": args.m, "max_new_tokens": args.max_new_tokens,
        "threads": args.threads,
        "build_seconds": {name: stage["seconds_this_run"] for name, stage in stages.items()},
        "build_sequences": {name: stage["examples"] * stage["epochs"]
                            for name, stage in stages.items()},
        "final_loss": {name: statistics.mean(e["loss"] for e in stage["loss"][-5:])
                       for name, stage in stages.items() if stage["loss"]},
        "wall_seconds": {"build": round(built, 1), "study": round(studied, 1)},
        "answer_tokens": round(answer_tokens(config, models), 1),
        "sampled_tokens": {label: round(sampled_tokens(args.out / "study" / entry["runs"][label]),
                                        1) for label in ("clean", "identity")},
        "met": sum(c.met for c in criteria),
        "criteria": [dataclasses.asdict(c) for c in criteria],
    }
    (args.out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"build: {result['build_seconds']} s for {result['build_sequences']} sequences; "
          f"final loss {result['final_loss']}")
    print(f"study: {studied:.0f} s; tokens per answer: reference {result['answer_tokens']}, "
          f"sampled {result['sampled_tokens']}")
    print(f"design criteria ({result['met']} of {len(criteria)} met):")
    for c in criteria:
        print(f"  {c.sentence()}")
    return result


if __name__ == "__main__":
    main()
