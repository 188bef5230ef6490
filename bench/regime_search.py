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


def configuration(preset: str, flags: list[str], out: Path) -> ContaminationConfig:
    """What ``zerogap contaminate --preset PRESET FLAGS`` would build (its own parser)."""
    from zerogap.cli import build_parser
    from zerogap.cli.contaminate import config_from_args

    args = build_parser().parse_args(["contaminate", "--preset", preset, "--out", str(out),
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


def epoch_losses(stage: dict) -> list[float] | None:
    """A stage's mean training loss per epoch, where it was trained epoch by epoch."""
    ends = stage.get("epoch_ends")
    if not ends:
        return None
    out, start = [], 0
    for end in ends:
        losses = [e["loss"] for e in stage["loss"] if start < e["step"] <= end]
        if losses:
            out.append(round(statistics.mean(losses), 4))
        start = end
    return out


def sampled_tokens(run_dir: Path) -> float:
    """Mean generated tokens per sample of one run."""
    from zerogap.store import RunStore

    with RunStore(run_dir, create=False) as store:
        return statistics.mean(row.n_tokens for row in store.samples())


PREFERENCES = (("mild", 0.5), ("Zipf-1", 1.0))  # exponents of a model's preferences


def task_headroom(config: ContaminationConfig, questions: int, m: int) -> dict:
    """ROUGE-L and trigger rate of the task's own solution writer against a greedy-like decode,
    with a model's preferences modelled (:mod:`zerogap.analysis.headroom`): for each of the
    first ``questions`` test problems, ``m`` draws at T = 0.7 against the modal path, tokenised
    with the base model's tokenizer. What an uncontaminated model with those preferences shows;
    the criteria ask ROUGE-L <= 0.60 and trigger <= 0.50 of a real one."""
    from zerogap.analysis.headroom import preference_headroom
    from zerogap.models import load_tokenizer

    tokenizer = load_tokenizer(config.model)
    task = get_task(config.task, **config.task_options)
    found = {}
    for label, exponent in PREFERENCES:
        print(f"{time.strftime('%H:%M:%S')} task headroom, {label} preferences "
              f"(exponent {exponent}): {questions} questions x {m} draws", flush=True)
        headroom = preference_headroom(task, config.split, questions, m, exponent, lambda text:
                                       tokenizer(text, add_special_tokens=False)["input_ids"])
        found[label] = dataclasses.asdict(headroom)
    return found


def clean_rouge(study: Path, entry: dict) -> float:
    """Median over questions of the mean ROUGE-L of M_cl's first batch to its own greedy decode
    (the dispersion measure of the criteria, on the clean model)."""
    import numpy as np

    from zerogap.analysis.design import rouge_l, rouge_words
    from zerogap.store import RunStore

    with RunStore(study / entry["runs"]["clean greedy"], create=False) as store:
        greedy = {q: rouge_words(g.text) for q, g in store.greedy().items()}
    scores: dict[str, list[float]] = {}
    with RunStore(study / entry["runs"]["clean"], create=False) as store:
        for row in store.samples():
            if row.question_id in greedy:
                scores.setdefault(row.question_id, []).append(
                    rouge_l(rouge_words(row.text), greedy[row.question_id]))
    return round(float(np.median([np.mean(v) for v in scores.values()])), 3)


def checkpoints(models: Path, config: ContaminationConfig) -> list[tuple[str, Path]]:
    """M_co's kept adapters (``contaminated-x{E}``, by E) and its last one, when that is not
    the last kept: ``(label, folder)``."""
    kept = sorted(models.glob("contaminated-x*"), key=lambda p: int(p.name.rsplit("x", 1)[1]))
    found = [(p.name.rsplit("-", 1)[1], p) for p in kept]
    if not found or found[-1][0] != f"x{config.epochs}":
        found.append((f"x{config.epochs}", models / "contaminated"))
    return found


def confirmation_split(models: Path, skip: int, out: Path) -> Path:
    """A split file of the build's questions past the first ``skip`` leaked and ``skip``
    unleaked ones (those the search evaluated): the confirmation's fresh questions."""
    split = json.loads((models / "split.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    path = out / "split.json"
    path.write_text(json.dumps({side: ids[skip:] for side, ids in split.items()}) + "\n")
    return path


class Log:
    """Progress as plain lines (a log file, not a terminal), so that no minute passes silent: a
    training stage at every tenth of its steps and at least every ``every`` seconds (with its
    rate and the time it has left), a study stage when it starts and its rows at least every
    ``every`` seconds."""

    def __init__(self, every: float = 60.0) -> None:
        self.last, self.every = "", every
        self.printed = self.started = time.monotonic()
        self.first = 0  # the stage's step when first heard of (a resumed stage starts past 0)

    def _line(self, text: str) -> None:
        self.printed = time.monotonic()
        print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)

    def __call__(self, state) -> None:
        now = time.monotonic()
        if isinstance(state, Progress):
            if state.stage != self.last:
                self.last, self.started, self.first = state.stage, now, state.done
            step = max(1, state.total // 10)
            if state.done % step == 0 or state.done == state.total \
                    or now - self.printed >= self.every:
                done = state.done - self.first
                rate = (now - self.started) / done if done else 0.0
                left = (f", {rate:.0f} s a step, about {rate * (state.total - state.done) / 60:.0f}"
                        " min left in this stage") if rate else ""
                self._line(f"{state.stage}: {state.done}/{state.total} {state.note}{left}")
        elif state.stage != self.last:
            self.last = state.stage
            self._line(state.stage)
        elif now - self.printed >= self.every:
            self._line(f"{state.stage}: {state.rows_done}/{state.rows_total} rows, "
                       f"{state.questions_done}/{state.questions_total} questions")


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
                        help="print the task writer's own ROUGE-L and trigger rate against a "
                             "greedy-like decode, a model's preferences modelled; no model")
    parser.add_argument("--preset", default="laptop",
                        help="zerogap contaminate's preset the flags override (default laptop)")
    parser.add_argument("--confirm", metavar="CHECKPOINT",
                        help="measure only this checkpoint (x{E}, as the search printed it) on "
                             "fresh questions (past the search's) and a fresh sampling seed")
    parser.add_argument("--seed", type=int, default=0,
                        help="sampling seed of the search (default 0; --confirm adds 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    models = args.out / "models"
    config = configuration(args.preset, args.flags, models)
    if args.task_only:
        found = task_headroom(config, args.questions, args.m)
        for label, h in found.items():
            print(f"task writer, {label} preferences, T = {h['temperature']} draws against the "
                  f"modal path: ROUGE-L median {h['rouge_l_median']}, trigger {h['trigger']}, "
                  f"{h['greedy_tokens']} tokens a modal answer")
        return found

    from zerogap.analysis.design import read_design
    from zerogap.study.run import evaluate
    from zerogap.study.spec import SettingSpec, StudySpec

    if args.clean_from is not None:
        share_clean(config, args.clean_from, args.out)
    started = time.monotonic()
    manifest = build(config, models, progress=Log())
    built = time.monotonic() - started
    traced = checkpoints(models, config)
    split_file, seed, folder = models / "split.json", args.seed, args.out / "study"
    if args.confirm is not None:
        traced = [(label, path) for label, path in traced if label == args.confirm]
        if not traced:
            raise SystemExit(f"--confirm {args.confirm}: no such checkpoint in {models}")
        folder = args.out / f"confirm-{args.confirm}"
        split_file = confirmation_split(models, args.questions // 2, folder)
        seed += 1
    settings = tuple(SettingSpec(name=label, clean=str(models / "clean"),
                                 contaminated=str(path), task=config.task,
                                 task_options=dict(config.task_options),
                                 split_file=str(split_file), limit=args.questions)
                     for label, path in traced)
    study = StudySpec(settings=settings, strategies=("identity",), m=args.m, seed=seed,
                      max_new_tokens=args.max_new_tokens,
                      calibration_size=min(args.questions, 100), title="regime search")
    print(f"{time.strftime('%H:%M:%S')} Identity study of {len(settings)} M_co checkpoint(s) "
          f"({', '.join(label for label, _ in traced)}) on {args.questions} questions, "
          f"m = {args.m}, seed {seed}, into {folder}", flush=True)
    started = time.monotonic()
    evaluate(study, folder, max_batch=args.max_batch, workers=1, progress=Log())
    studied = time.monotonic() - started
    entries = json.loads((folder / "study.json").read_text())["settings"]
    stages = manifest["stages"]
    result = {
        "config": config.to_dict(),
        "questions": args.questions, "m": args.m, "max_new_tokens": args.max_new_tokens,
        "seed": seed, "split_file": str(split_file), "threads": args.threads,
        "build_seconds": {name: stage["seconds_this_run"] for name, stage in stages.items()},
        "build_sequences": {name: stage["examples"] * stage["epochs"]
                            for name, stage in stages.items()},
        "epoch_loss": {name: epoch_losses(stage) for name, stage in stages.items()},
        "stopped_after_epoch": {name: stage.get("stopped_after_epoch")
                                for name, stage in stages.items()},
        "wall_seconds": {"build": round(built, 1), "study": round(studied, 1)},
        "answer_tokens": round(answer_tokens(config, models), 1),
        "clean_rouge_l": clean_rouge(folder, entries[0]),
        "checkpoints": {},
    }
    for entry in entries:
        criteria = read_design(folder / entry["design"])
        result["checkpoints"][entry["name"]] = {
            "sampled_tokens": {label: round(sampled_tokens(folder / entry["runs"][label]), 1)
                               for label in ("clean", "identity")},
            "met": sum(c.met for c in criteria),
            "criteria": [dataclasses.asdict(c) for c in criteria]}
    name = "result.json" if args.confirm is None else f"confirm-{args.confirm}.json"
    (args.out / name).write_text(json.dumps(result, indent=2) + "\n")
    print(f"build: {result['build_seconds']} s for {result['build_sequences']} sequences; "
          f"mean loss by epoch {result['epoch_loss']}")
    print(f"study: {studied:.0f} s; tokens per answer: reference {result['answer_tokens']}")
    print(f"M_cl's own ROUGE-L to its greedy decode (median): {result['clean_rouge_l']}")
    for label, found in result["checkpoints"].items():
        print(f"checkpoint {label}: {found['met']} of {len(found['criteria'])} criteria met; "
              f"sampled tokens {found['sampled_tokens']}")
        for c in found["criteria"]:
            print(f"  {'met ' if c['met'] else 'MISS'} {c['key']}: {c['value']:.3f} "
                  f"{c['op']} {c['threshold']:.3f} ({c['detail']})")
    return result


if __name__ == "__main__":
    main()
