"""The settings of each decoding intervention, torch-free: a strategy's settings are validated,
listed and documented (``zerogap strategy``) without loading torch; the pure-torch cores
(:mod:`~zerogap.decoding.railcap`, :mod:`~zerogap.decoding.blocking`,
:mod:`~zerogap.decoding.shortcut`) read them.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Literal

from zerogap.config import JsonConfig

Mode = Literal["cap", "ban"]
MODES = typing.get_args(Mode)
Protect = Literal["none", "answer"]
PROTECTS = typing.get_args(Protect)

Neuron = tuple[int, int]  # (layer, index)


@dataclass(frozen=True)
class RailCapConfig(JsonConfig):
    """RailCap's parameters (paper defaults: n = 4, cap; tau = 0.7 is the run's SamplingSpec).

    ``protect="answer"`` exempts the answer slot: Algorithm 1 caps every trajectory successor,
    the answer's own tokens after "The answer is" included, and the paper does not say whether
    its runs did; with this option no step after the task's answer marker is capped (an
    ablation row, not the paper's default).
    """

    n: int = field(default=4, metadata={"help": "n-gram length that signals a fall-back",
                                        "min": 1})
    mode: Mode = field(default="cap", metadata={"help": "'cap' to the runner-up, or 'ban' (-inf)"})
    protect: Protect = field(default="none", metadata={
        "help": "'answer': never cap after the task's answer marker (the answer slot)"})

    def to_dict(self) -> dict:
        """The fields; ``protect`` only when set, so that the record of a default RailCap is
        the one stored before the option existed (a stored run compares it on resume)."""
        out = super().to_dict()
        if self.protect == "none":
            del out["protect"]
        return out


@dataclass(frozen=True)
class LNEBlockingConfig(JsonConfig):
    """LNE-blocking's parameters."""

    t_task: int = field(default=7, metadata={"help": "task threshold: 7 for math, 4 for code",
                                             "min": 0})
    beta: float = field(default=2.0, metadata={"help": "LNE normaliser (LNE typically in [0, 2])",
                                               "gt": 0})
    beta_quantile: float = field(default=0.9, metadata={
        "help": "in a study with a calibration split: the quantile of its greedy decodes' LNE "
                "taken as beta (1 the largest, 0.5 the median)", "gt": 0, "max": 1})


@dataclass(frozen=True)
class ShortcutConfig(JsonConfig):
    """Shortcut-neuron patching's parameters while sampling (locating has its own, recorded in
    the neuron list's ``meta``)."""

    neurons: str = field(default="", metadata={"help": "neuron list JSON (zerogap neurons)"})
    base: str = field(default="", metadata={"help": "model spec of the patch source (base)"})
    top_k: int = field(default=0, metadata={"help": "neurons patched; 0 = 4000 scaled to size",
                                            "min": 0})
