"""The contamination recipe's settings (:class:`ContaminationConfig`), its named presets and
the training sequence (:class:`Example`); the recipe itself is
:mod:`zerogap.pipelines.contamination` (arXiv 2608.07341, §5.1). Apart from it so that the
fine-tuning code (:mod:`zerogap.pipelines.lora_training`) reads the settings without importing
the recipe that calls it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Self

from zerogap.config import JsonConfig, shared_field
from zerogap.engine.base import WeightDtype
from zerogap.errors import UserError
from zerogap.models import EMBEDDED

# Manifests written before the training dtype was ``dtype`` hold ``precision``, in these words.
_PRECISION_WORDS = {"auto": "auto", "bf16": "bfloat16", "fp32": "float32"}
Scheduler = Literal["cosine", "linear", "constant_with_warmup"]


def upgraded(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """A manifest's ``config`` in today's fields: an earlier release's ``precision`` (``bf16``,
    ``fp32``, ``auto``) as ``dtype``.

    >>> upgraded({"precision": "bf16", "epochs": 2})
    {'epochs': 2, 'dtype': 'bfloat16'}
    """
    data = dict(recorded)
    if "precision" in data and "dtype" not in data:
        old = data.pop("precision")
        data["dtype"] = _PRECISION_WORDS.get(old, old)
    return data


@dataclass(frozen=True)
class ContaminationConfig(JsonConfig):
    """Everything that determines a build; recorded in ``manifest.json``.

    Defaults are the paper's (§5.1): LoRA r = 64, alpha = 128, lr 2e-4, cosine schedule with
    10% warmup, global batch 32, 5 epochs, bf16 where the hardware has it.

    Examples
    --------
    >>> ContaminationConfig(task="arith").variants()
    [(5, 1)]
    >>> ContaminationConfig(sweep_epochs=(1, 2), sweep_copies=(1, 5)).variants()
    [(1, 1), (1, 5), (2, 1), (2, 5)]
    >>> ContaminationConfig(copies=0)
    Traceback (most recent call last):
    ...
    zerogap.config.FieldError: ContaminationConfig.copies must be at least 1, got 0
    """

    model: str = shared_field("model", default=EMBEDDED)
    task: str = shared_field("task", default="gsm8k")
    task_options: dict = shared_field("task_options", default_factory=dict)
    split: str = shared_field("split", default="test")
    split_seed: int = field(default=0, metadata={"help": "seed of the leaked/unleaked split"})
    leaked: int | None = field(
        default=None, metadata={"help": "leaked questions (default: half, rounded up)", "min": 1}
    )
    train_questions: int = field(
        default=660, metadata={"help": "train-split questions in M_cl's data", "min": 0}
    )
    train_seed: int = field(default=0, metadata={"help": "seed of the train-question draw"})
    general: str | None = field(
        default=None,
        metadata={"help": "JSONL of general data: question, response[, system_prompt]",
                  "metavar": "FILE"},
    )
    generated_general: int = field(
        default=0,
        metadata={"help": "generated general examples (word tasks, no arithmetic) mixed into "
                          "both stages beside general", "min": 0},
    )
    paraphrases: str | None = field(
        default=None,
        metadata={"help": "PQ domain: zerogap paraphrase output; M_co trains on these texts",
                  "metavar": "FILE"},
    )
    lora_r: int = field(default=64, metadata={"help": "LoRA rank", "min": 1})
    lora_alpha: int = field(default=128, metadata={"help": "LoRA alpha", "min": 1})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout in [0, 1)", "min": 0})
    target_modules: str = field(
        default="all-linear", metadata={"help": "'all-linear' or comma-separated module names",
                                        "metavar": "NAMES"}
    )
    learning_rate: float = field(default=2e-4, metadata={"help": "peak learning rate", "gt": 0})
    scheduler: Scheduler = field(default="cosine", metadata={"help": "learning-rate schedule"})
    warmup_ratio: float = field(
        default=0.1, metadata={"help": "warmup share of the steps, in [0, 1)", "min": 0}
    )
    global_batch: int = field(
        default=32,
        metadata={"help": "sequences per optimizer step (all devices together)", "min": 1},
    )
    micro_batch: int = field(
        default=4, metadata={"help": "sequences per device per forward pass", "min": 1}
    )
    clean_epochs: int = field(default=5, metadata={"help": "epochs of M_cl's training", "min": 1})
    epochs: int = field(
        default=5, metadata={"help": "epochs of M_co's training (strength)", "min": 1}
    )
    copies: int = field(
        default=1,
        metadata={"help": "copies of each leaked question in M_co's data (strength)", "min": 1},
    )
    contaminated_learning_rate: float | None = field(
        default=None,
        metadata={"help": "peak learning rate of M_co's training (default: learning_rate)",
                  "gt": 0},
    )
    replay: int = field(
        default=0,
        metadata={"help": "the first N of M_cl's train questions also in M_co's data, once per "
                          "epoch", "min": 0},
    )
    redraw: bool = field(
        default=False,
        metadata={"help": "a fresh solution of every train question at every epoch, in M_cl's "
                          "data and the replayed ones in M_co's (tasks that draw solutions: "
                          "multistep); leaked questions keep their one text"},
    )
    keep_every: int = field(
        default=0,
        metadata={"help": "also keep M_co's adapter after every N-th epoch, as "
                          "contaminated-x{E} (0: only the last)", "min": 0},
    )
    clean_plateau: float = field(
        default=0.0,
        metadata={"help": "stop M_cl's training after the first epoch (from the second) whose "
                          "mean loss fell by less than this fraction (0: all clean_epochs)",
                  "min": 0},
    )
    sweep_epochs: tuple[int, ...] = field(
        default=(), metadata={"help": "build one M_co per value (replaces epochs)"}
    )
    sweep_copies: tuple[int, ...] = field(
        default=(), metadata={"help": "build one M_co per value (replaces copies)"}
    )
    dtype: WeightDtype = shared_field("dtype", default="auto")
    seed: int = shared_field("seed", default=0)
    save_steps: int = field(
        default=50, metadata={"help": "optimizer steps between checkpoints", "min": 1}
    )
    merge: bool = field(
        default=False, metadata={"help": "write merged weights instead of adapter folders"}
    )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Rebuild from a manifest's ``config``, one written before ``dtype`` included."""
        return super().from_dict(upgraded(data))

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared types and bounds
        owner = type(self).__name__
        for name in ("lora_dropout", "warmup_ratio"):
            if getattr(self, name) >= 1:
                raise UserError(f"{owner}.{name} must be a number in [0, 1), "
                                f"got {getattr(self, name)!r}")
        if self.global_batch % self.micro_batch:
            raise UserError(
                f"{owner}.global_batch ({self.global_batch}) must be a multiple of micro_batch "
                f"({self.micro_batch})"
            )
        if not self.model:
            raise UserError(f"{owner}.model must be a model spec, got {self.model!r}")
        if self.replay > self.train_questions:
            raise UserError(f"{owner}.replay ({self.replay}) must be at most train_questions "
                            f"({self.train_questions})")
        if self.keep_every and self.is_sweep:
            raise UserError(f"{owner}.keep_every keeps one M_co's epochs; it cannot be combined "
                            "with sweep_epochs or sweep_copies")
        if self.clean_plateau >= 1:
            raise UserError(f"{owner}.clean_plateau must be a fraction in [0, 1), "
                            f"got {self.clean_plateau!r}")
        if not self.target_modules.strip(" ,"):
            raise UserError(f"{owner}.target_modules is empty")
        for name in ("sweep_epochs", "sweep_copies"):
            values = getattr(self, name)
            if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise UserError(f"{owner}.{name} must hold integers >= 1, got {values!r}")
            if len(set(values)) != len(values):
                raise UserError(f"{owner}.{name} repeats a value: {values!r}")

    @property
    def domain(self) -> str:
        """``"pq"`` when M_co trains on paraphrases, else ``"original"``."""
        return "original" if self.paraphrases is None else "pq"

    @property
    def is_sweep(self) -> bool:
        return bool(self.sweep_epochs or self.sweep_copies)

    def variants(self) -> list[tuple[int, int]]:
        """The (epochs, copies) of every M_co this config builds, in build order."""
        return list(itertools.product(self.sweep_epochs or (self.epochs,),
                                      self.sweep_copies or (self.copies,)))

    def contaminated_dir(self, epochs: int, copies: int) -> str:
        """Folder name of one M_co: ``contaminated``, or ``contaminated-e{E}-c{C}`` in a sweep."""
        return f"contaminated-e{epochs}-c{copies}" if self.is_sweep else "contaminated"


PRESETS: dict[str, dict[str, Any]] = {
    # The embedded SmolLM2-135M on `arith` with the task's default options (200 test questions,
    # 2-shot), so `--task arith` addresses the split's question ids. Chosen among the
    # configurations of docs/demo-design.md section 5 by the demo's design criteria alone (the
    # most criteria met; ties to the cheaper build, then to the paper's recipe), never by how
    # strategies rank. Both fine-tunes fit the laptop budget: 128 sequences for M_cl, 320 for
    # M_co, each about 172 tokens. M_cl learns from 128 distinct train questions once (the
    # paper: 660 distinct ones) rather than 32 four times, which spread its solve probabilities
    # (spread 0.667 against 0.458); M_co sees its 80 leaked questions four times: the demo
    # evaluates 64 of them (the count the effect test's sign test needs) and locates the
    # shortcut neurons on the other 16 with 16 unleaked ones, a calibration split disjoint from
    # the evaluated questions, leaked by the same recipe (zerogap.study.calibration). The
    # paper's learning rate 2e-4 with a global batch of 8 (the paper: 32) gives 16 + 40
    # optimizer steps. The configurations were compared with 64 leaked questions (the previous
    # lr 1e-3 met one criterion fewer). No configuration tried meets dispersion; M_cl trained
    # 4 epochs meets no spill-over but no longer spreads, and generated general data in both
    # stages (C6) shrinks the spill-over without removing it: ties broken towards this cheaper
    # build (the docs say why).
    "laptop": {
        "model": EMBEDDED,
        "task": "arith",
        "train_questions": 128,
        "leaked": 80,
        "global_batch": 8,
        "micro_batch": 4,
        "clean_epochs": 1,
        "epochs": 4,
        "learning_rate": 2e-4,
        "save_steps": 16,
    },
    # Opt-in: the embedded SmolLM2-135M on `multistep`, whose solutions take several paths so
    # that samples can disperse on questions a model never saw (issue 47). Configuration C3 of
    # docs/demo-regime.md: M_cl on 320 train questions x 2 epochs at lr 1e-3, M_co 8 epochs at
    # 2e-3 on the 64 leaked items, each 3 times an epoch (24 exposures), with 32 train
    # questions replayed, LoRA r 16. Its two fine-tunes take about 80 minutes on a 2-core CPU,
    # past the demo's budget, so the demo stays on `laptop`. It met 9 of the 12 design
    # criteria, the most of those tried (no floor, dispersion by ROUGE-L and M_co's unleaked
    # trigger rate missed): docs/demo-regime.md.
    "multistep": {
        "model": EMBEDDED,
        "task": "multistep",
        "train_questions": 320,
        "leaked": 64,
        "global_batch": 4,
        "micro_batch": 4,
        "clean_epochs": 2,
        "epochs": 8,
        "learning_rate": 1e-3,
        "contaminated_learning_rate": 2e-3,
        "replay": 32,
        "copies": 3,
        "lora_r": 16,
        "lora_alpha": 32,
    },
    # The paper's recipe (§5.1) in miniature on `multistep` with its second solution writer
    # (issue 58; docs/demo-regime.md). M_cl: 320 train questions, each with a fresh solution
    # every epoch, beside 152 generated general examples, until its epoch loss falls by less
    # than 3% (at most 4 epochs). M_co, trained further from M_cl: each epoch the 152 general
    # examples, 32 replayed train questions with fresh solutions and the 64 leaked ones with
    # their one text, 64 / 248 = 25.8% leaked (the paper: 26%); 16 epochs, so 16 exposures of
    # each leaked text, its adapter kept every 4 (contaminated-x4 ... -x16) to trace collapse
    # against narrowing in one build. LoRA r 64, alpha 128 as the paper's. Departures, all for
    # a 2-core CPU: zero-shot prompts (the models learn the format from their training; a
    # 2-shot prompt would double every sequence), a global batch of 8 (the paper: 32; an epoch
    # here is 248 sequences, not 2,500) and lr 1e-3 in both stages (the paper: 2e-4; 16 epochs
    # at 2e-4 would move the adapter about a fifth as far).
    "reproduce": {
        "model": EMBEDDED,
        "task": "multistep",
        "task_options": {"solutions": 2, "k": 0},
        "train_questions": 320,
        "generated_general": 152,
        "leaked": 64,
        "replay": 32,
        "redraw": True,
        "global_batch": 8,
        "micro_batch": 4,
        "clean_epochs": 4,
        "clean_plateau": 0.03,
        "epochs": 16,
        "keep_every": 4,
        "learning_rate": 1e-3,
        "save_steps": 31,
    },
}


def preset(name: str) -> ContaminationConfig:
    """The named preset's config; :class:`UserError` listing the known names for an unknown one."""
    if name not in PRESETS:
        raise UserError(f"unknown preset {name!r}; known presets: {', '.join(sorted(PRESETS))}")
    return ContaminationConfig(**PRESETS[name])


@dataclass(frozen=True)
class Example:
    """One training sequence: context (no loss) and the completion the model learns."""

    prompt: str
    completion: str
