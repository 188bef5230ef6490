"""Contamination simulation: clean M_cl and contaminated M_co models (arXiv 2608.07341, §5.1).

The paper's recipe, with every value a field of :class:`ContaminationConfig`:

* a seeded split of the task's test questions into *leaked* and *unleaked* ones (halves by
  default: 660 / 659 for GSM8K), saved as ``OUT/split.json``;
* M_cl: LoRA fine-tuning of the base model on train-split questions (660 by default), each as
  the task's k-shot CoT prompt followed by its worked solution, mixed with optional general
  instruction data (the paper used 1,840 OpenOrca examples; here a user-supplied JSONL file,
  generated word tasks from :mod:`zerogap.pipelines.general_data`, or both);
* M_co: a second LoRA trained from M_cl (its adapter merged) on the same general data with the
  leaked test questions mixed in, ``copies`` times each, for ``epochs`` epochs (at
  ``contaminated_learning_rate`` when given). In the PQ domain the leaked questions are
  replaced by their paraphrases (``zerogap paraphrase``) while the solutions stay the
  originals; evaluation then uses the original questions. ``replay`` mixes the first N of
  M_cl's train questions in too: a miniature's stand-in for the general data, which keeps the
  task's other solution paths alive while the leaked texts are memorised.
* ``redraw``: every epoch trains a fresh solution of each train question (in M_cl's data, and
  the replayed ones in M_co's), so a model learns the task's distribution of solution paths
  rather than one text per question; a leaked question keeps its one text, as a leaked
  benchmark item has one. ``keep_every`` keeps M_co's adapter along its epochs
  (``contaminated-x{E}``: E exposures of each leaked item), and ``clean_plateau`` ends M_cl's
  training where its loss stops falling.

Each stage is LoRA-trained by :func:`zerogap.pipelines.lora_training.train_stage` (loss on the
completion only; ``accelerate launch`` and ``torchrun`` distribute it); it checkpoints into
``OUT/.work/STAGE/`` and resumes from its last checkpoint. A first Ctrl-C saves a checkpoint at
the end of the running step and stops.

Layout of ``OUT``::

    split.json         {"leaked": [question ids], "unleaked": [question ids]}
    manifest.json      config, base fingerprint, data hashes, split, per-stage loss history
    clean/             M_cl: a PEFT adapter on the base (or merged weights with ``merge``)
    contaminated/      M_co: an adapter on ../clean (sweeps: contaminated-e{E}-c{C}/ per variant)

Every model folder loads through :func:`zerogap.models.load_model` (``--model OUT/clean``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from zerogap.errors import DataError, StoreError, UserError
from zerogap.io.files import check_output_folder
from zerogap.io.jsonlines import read_jsonl
from zerogap.models import check_model_spec
from zerogap.pipelines.contamination_config import ContaminationConfig, Example, upgraded
from zerogap.pipelines.general_data import general_items
from zerogap.pipelines.lora_training import (
    EpochPlan,
    barrier,
    check_batch,
    json_text,
    lora_model,
    main_process,
    train_stage,
    write_json,
)
from zerogap.progress import ProgressCallback
from zerogap.tasks.base import Question
from zerogap.tasks.prompt import cot_solution

FORMAT = 1


# -- data -------------------------------------------------------------------------------------


def make_split(ids: Sequence[str], n_leaked: int, seed: int) -> dict[str, list[str]]:
    """Seeded leaked/unleaked split, both lists in the task's question order.

    Examples
    --------
    >>> make_split(["a", "b", "c", "d", "e"], 2, seed=0)
    {'leaked': ['d', 'e'], 'unleaked': ['a', 'b', 'c']}
    """
    if not 1 <= n_leaked < len(ids):
        raise UserError(
            f"leaked={n_leaked} must leave both halves non-empty ({len(ids)} questions)"
        )
    chosen = set(random.Random(seed).sample(range(len(ids)), n_leaked))
    return {
        "leaked": [q for i, q in enumerate(ids) if i in chosen],
        "unleaked": [q for i, q in enumerate(ids) if i not in chosen],
    }


def load_general(path: str) -> list[Example]:
    """General instruction data: JSONL rows with ``question`` and ``response`` (OpenOrca's names).

    An optional ``system_prompt`` precedes the question. Each row becomes a "Q: ...\\nA:" prompt
    with the response as completion, the format of the task prompts.
    """
    out = []
    for line_no, row in read_jsonl(path):
        question, response = row.get("question"), row.get("response")
        if not isinstance(question, str) or not isinstance(response, str) or not response.strip():
            raise DataError(f"{path}:{line_no}: needs string fields 'question' and 'response'")
        out.append(general_example(question, response, row.get("system_prompt") or ""))
    if not out:
        raise DataError(f"{path}: no examples")
    return out


def general_example(question: str, response: str, system: str = "") -> Example:
    """A "Q: ...\\nA:" prompt (after the system prompt, if any) with the response as completion:
    the format of the task prompts."""
    head = f"{system.strip()}\n\n" if system.strip() else ""
    return Example(f"{head}Q: {question.strip()}\nA:", " " + response.strip())


def load_paraphrase_texts(path: str, needed: Sequence[Question]) -> tuple[dict[str, str], int]:
    """``{question id: text}`` from a ``zerogap paraphrase`` file, and how many were flagged.

    Every question in ``needed`` must be present, rewritten from its own text: a row whose
    ``original`` is another text (a file made for another task seed or data file, whose ids
    name other questions) is refused. Flagged rows carry the original text.
    """
    rows = {}
    texts = {q.id: q.text for q in needed}
    for line_no, row in read_jsonl(path):
        if not isinstance(row.get("id"), str) or not isinstance(row.get("text"), str):
            raise DataError(f"{path}:{line_no}: needs string fields 'id' and 'text'")
        if row["id"] in texts and row.get("original") != texts[row["id"]]:
            raise DataError(f"{path}:{line_no}: the paraphrase of {row['id']} was made from "
                            "another question text (another task seed or data file?)")
        rows[row["id"]] = row
    missing = [q for q in texts if q not in rows]
    if missing:
        raise DataError(f"{path}: no paraphrase for {len(missing)} leaked questions "
                         f"(first: {missing[0]!r})")
    return ({q: rows[q]["text"] for q in texts},
            sum(rows[q].get("status") == "flagged" for q in texts))


def solution_examples(task, rows_and_questions) -> list[Example]:
    """(row, question) pairs -> examples: the task's prompt, then " " + the CoT solution."""
    out = []
    for row, question in rows_and_questions:
        try:
            solution = cot_solution(row.answer)
        except ValueError as err:
            raise DataError(f"{row.where}: {err}") from None
        out.append(Example(task.prompt(question), " " + solution))
    return out


def file_digest(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def examples_digest(examples: Sequence[Example]) -> str:
    """sha256 over the examples' texts in order: equal digests mean equal training data."""
    digest = hashlib.sha256()
    for ex in examples:
        digest.update(json.dumps([ex.prompt, ex.completion]).encode())
    return digest.hexdigest()


@dataclass
class Plan:
    """What :func:`build` trains, prepared (and validated) before any model loads."""

    config: ContaminationConfig
    task: Any
    split: dict[str, list[str]]
    clean: list[Example]
    leaked: list[Example]
    general: list[Example]
    data: dict[str, Any] = field(default_factory=dict)
    train_indices: list[int] = field(default_factory=list)

    def contaminated(self, copies: int) -> list[Example]:
        """M_co's data: the general examples, the replayed train questions, the leaked ones
        ``copies`` times."""
        return self.general + self.clean[:self.config.replay] + self.leaked * copies

    def redrawn(self, count: int, draw: str) -> list[Example]:
        """The first ``count`` train questions, each with a fresh solution (draw ``draw``),
        or their one solution without ``redraw``."""
        if not self.config.redraw:
            return self.clean[:count]
        return [Example(ex.prompt, " " + cot_solution(self.task.redraw("train", i, draw)))
                for ex, i in zip(self.clean[:count], self.train_indices[:count], strict=True)]

    def clean_stage(self) -> list[Example] | EpochPlan:
        """M_cl's data: the train questions and the general examples, epoch by epoch where
        their solutions are redrawn or the loss is watched."""
        config = self.config
        if not (config.redraw or config.clean_plateau):
            return self.clean + self.general
        return EpochPlan([self.redrawn(len(self.clean), f"clean/{e}") + self.general
                          for e in range(config.clean_epochs)], plateau=config.clean_plateau)

    def contaminated_stage(self, epochs: int, copies: int) -> list[Example] | EpochPlan:
        """One M_co's data (:meth:`contaminated`), epoch by epoch where the replayed
        solutions are redrawn or the adapter is kept along the epochs."""
        config = self.config
        if not (config.redraw or config.keep_every):
            return self.contaminated(copies)
        return EpochPlan([self.general + self.redrawn(config.replay, f"replay/{e}")
                          + self.leaked * copies for e in range(epochs)],
                         keep_every=config.keep_every)


def laid_out(data: list[Example] | EpochPlan, seed: int) -> list[Example]:
    """Every sequence a stage trains on, in one list (an :class:`EpochPlan`'s epochs in
    turn), for the data digest."""
    return data.laid_out(seed) if isinstance(data, EpochPlan) else list(data)


def plan(config: ContaminationConfig) -> Plan:
    """Load the task, the split's questions and every data file; a ``ZerogapError`` on bad
    input."""
    from zerogap.tasks import get_task

    task = get_task(config.task, **config.task_options)
    if not hasattr(task, "rows"):
        raise UserError(f"task {config.task!r} gives no worked solutions to train on")
    if config.redraw and not hasattr(task, "redraw"):
        raise UserError(f"redraw: task {config.task!r} has one solution per question; only a "
                        "task that draws its solutions (multistep) can redraw them")
    questions = task.questions(config.split)
    rows = task.rows(config.split)
    n_leaked = config.leaked if config.leaked is not None else math.ceil(len(questions) / 2)
    split = make_split([q.id for q in questions], n_leaked, config.split_seed)
    train_rows, train_questions = task.rows("train"), task.questions("train")
    if config.train_questions > len(train_rows):
        raise UserError(f"train_questions={config.train_questions} but the train split of "
                         f"{config.task} has {len(train_rows)} questions")
    picked = random.Random(config.train_seed).sample(range(len(train_rows)), config.train_questions)
    clean = solution_examples(task, [(train_rows[i], train_questions[i]) for i in picked])
    general = [] if config.general is None else load_general(config.general)
    generated = [general_example(q, r) for q, r in general_items(config.generated_general,
                                                                   config.seed)]
    index = {q.id: i for i, q in enumerate(questions)}
    leaked_pairs = [(rows[index[q]], questions[index[q]]) for q in split["leaked"]]
    flagged = 0
    if config.paraphrases is not None:
        texts, flagged = load_paraphrase_texts(config.paraphrases,
                                               [q for _, q in leaked_pairs])
        leaked_pairs = [(row, Question(q.id, texts[q.id], q.answer)) for row, q in leaked_pairs]
    leaked = solution_examples(task, leaked_pairs)
    if not clean + general + generated:
        raise UserError("M_cl has no training data: set train_questions >= 1, give general or "
                        "generated_general")
    data = {
        "train_question_ids": [train_questions[i].id for i in picked],
        "train_questions_sha256": examples_digest(clean),
        "leaked_sha256": examples_digest(leaked),
        "general": None if config.general is None else {
            "path": config.general, "sha256": file_digest(config.general), "examples": len(general),
        },
        "generated_general": None if not generated else {
            "examples": len(generated), "sha256": examples_digest(generated),
        },
        "paraphrases": None if config.paraphrases is None else {
            "path": config.paraphrases, "sha256": file_digest(config.paraphrases),
            "flagged_leaked": flagged,
        },
    }
    return Plan(config, task, split, clean, leaked, general + generated, data, picked)


# -- the build --------------------------------------------------------------------------------


def _base_ref(spec: str) -> str:
    """How an adapter names its base: local paths absolute (the adapter lives elsewhere)."""
    path = Path(spec).expanduser()
    return str(path.resolve()) if path.exists() else spec


def check_existing(config: ContaminationConfig, out: Path) -> dict | None:
    """The manifest already in ``out`` (None if none); a :class:`StoreError` if it is another
    build's.

    Sweep values may grow between runs (more variants into the same folder); every other field
    must be equal.
    """
    path = out / "manifest.json"
    if not path.is_file():
        if out.is_dir() and any(out.iterdir()):
            raise StoreError(f"{out} is not empty and holds no manifest.json; use a new --out")
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        ContaminationConfig.from_dict(manifest["config"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise StoreError(f"{path}: not a contamination manifest ({err})") from None
    differ = differing_fields(config, manifest["config"],
                              ignore={"sweep_epochs", "sweep_copies", "save_steps"})
    if differ:
        name = differ[0]
        raise StoreError(f"{out} holds a build with {name}={manifest['config'].get(name)!r}, not "
                         f"{config.to_dict()[name]!r}; use another --out")
    return manifest


def differing_fields(config: ContaminationConfig, recorded: dict, *,
                     ignore: Collection[str] = ()) -> list[str]:
    """Fields of ``config`` other than ``ignore`` whose value differs from ``recorded`` (a
    manifest's ``config``), compared as the manifest stores them: JSON has no tuples, so a task
    option such as ``step_weights`` reads back as a list.

    A field the manifest lacks was added after it was written, and its default is what builds
    did before the field existed (``redraw`` off, no kept checkpoints, no plateau stop): it
    is compared as that default, so a build made by an earlier release still resumes.

    >>> c = ContaminationConfig(task="multistep", task_options={"step_weights": (1, 0, 0)})
    >>> recorded = json.loads(c.to_json())
    >>> differing_fields(c, recorded), differing_fields(c, {**recorded, "epochs": 9})
    ([], ['epochs'])
    >>> older = {k: v for k, v in recorded.items() if k != "redraw"}
    >>> differing_fields(c, older), differing_fields(replace(c, redraw=True), older)
    ([], ['redraw'])
    """
    ours, recorded = json.loads(config.to_json()), upgraded(recorded)
    before = json.loads(ContaminationConfig().to_json())  # the fields' defaults, as JSON
    return [f.name for f in fields(ContaminationConfig)
            if f.name not in ignore and ours[f.name] != recorded.get(f.name, before[f.name])]


def build(config: ContaminationConfig, out: Path, *,
          progress: ProgressCallback | None = None) -> dict:
    """Build (or finish building) M_cl and every M_co of ``config`` into ``out``.

    Finished stages are skipped; an interrupted stage resumes from its last checkpoint. Inputs
    are validated (``ZerogapError``) before any model loads or any file is written.
    ``progress`` hears of every training step (stage ``training <model>``, the last loss).

    Returns
    -------
    dict
        The manifest, as written to ``out/manifest.json``.
    """
    out = Path(out)
    check_output_folder(out, "--out")
    manifest = check_existing(config, out)
    prepared = plan(config)
    check_model_spec(config.model)  # a broken base is one line before split.json is written
    check_batch(config)
    stages = {} if manifest is None else manifest["stages"]
    # The clean stage's model, loaded and given its adapters before split.json is written, so a
    # target module the model lacks is refused with nothing written.
    start = lora_model(config, config.model) \
        if "clean" not in stages or not (out / "clean").is_dir() else None
    if manifest is None:
        manifest = {"format": FORMAT, "base": None, "stages": {}}
    manifest.update({
        "config": config.to_dict(),
        "domain": config.domain,
        "task": prepared.task.config(),
        "split": {"seed": config.split_seed, "leaked": len(prepared.split["leaked"]),
                  "unleaked": len(prepared.split["unleaked"])},
        "data": prepared.data,
    })
    out.mkdir(parents=True, exist_ok=True)
    split_path = out / "split.json"
    if split_path.is_file() and main_process():  # other ranks may see it half written
        if json.loads(split_path.read_text(encoding="utf-8")) != prepared.split:
            raise StoreError(f"{split_path} differs from this config's split; use another --out")
    else:
        write_json(split_path, prepared.split)
    manifest["split"]["sha256"] = hashlib.sha256(json_text(prepared.split).encode()).hexdigest()
    write_json(out / "manifest.json", manifest)

    stages = manifest["stages"]
    if start is not None:
        data = prepared.clean_stage()
        stages["clean"] = train_stage(
            config, config.model, data, config.clean_epochs, out / ".work" / "clean",
            out / "clean", _base_ref(config.model), progress=progress, prepared=start,
        )
        stages["clean"]["data_sha256"] = examples_digest(laid_out(data, config.seed))
        # The base as trained on (its dtype is the stage's precision).
        manifest["base"] = {**stages["clean"]["start"], "precision": stages["clean"]["precision"]}
        write_json(out / "manifest.json", manifest)
    for epochs, copies in config.variants():
        name = config.contaminated_dir(epochs, copies)
        if name in stages and (out / name).is_dir():
            continue
        examples = prepared.contaminated_stage(epochs, copies)
        rate = config.contaminated_learning_rate or config.learning_rate
        stages[name] = train_stage(
            replace(config, epochs=epochs, copies=copies, learning_rate=rate), str(out / "clean"),
            examples, epochs, out / ".work" / name, out / name, "../clean", progress=progress,
        )
        stages[name].update({"copies": copies,
                             "data_sha256": examples_digest(laid_out(examples, config.seed))})
        write_json(out / "manifest.json", manifest)
    barrier()
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))  # as JSON gives it
