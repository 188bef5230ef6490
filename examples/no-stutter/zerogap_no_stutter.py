"""An example third-party strategy that edits logits: a sampled token never repeats the token
before it (within ``window`` tokens). Everything a logits strategy needs is here: its settings,
its backend-neutral edit (plain data) with the torch hook an in-process backend runs, and the
registered strategy. It has no per-request form, so the vLLM backend refuses it in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerogap.config import JsonConfig
from zerogap.engine.base import InterventionSpec, LogitsEdit
from zerogap.strategies import PrepareContext, Strategy, register_strategy


@dataclass(frozen=True)
class NoStutterConfig(JsonConfig):
    window: int = field(default=1, metadata={"help": "recent tokens that may not recur",
                                             "min": 1})


@dataclass(frozen=True)
class NoStutterEdit(LogitsEdit):
    window: int

    def torch_hook(self, *, samples_per_question: int, device: Any) -> Any:
        return _ban_recent(self.window)


def _ban_recent(window: int):
    import torch

    def hook(logits, tokens, lengths, question, sample):
        # (R, window) positions of each row's last tokens; those before its start count not.
        steps = lengths[:, None] - torch.arange(1, window + 1, device=logits.device)
        valid = (steps >= 0).to(logits.dtype)
        recent = tokens.gather(1, steps.clamp(min=0)).clamp(min=0)
        # A scatter, not a boolean index: no host sync at a decoding step.
        hits = torch.zeros_like(logits).scatter_add_(1, recent, valid)
        return logits.masked_fill(hits > 0, -torch.inf)

    return hook


@register_strategy("no-stutter")
class NoStutterStrategy(Strategy):
    """No stutter: a sampled token differs from the last ``window`` tokens (an example plugin)."""

    config_class = NoStutterConfig
    requires = ("logits",)

    def prepare(self, ctx: PrepareContext) -> InterventionSpec:
        return InterventionSpec(NoStutterEdit(self.config.window))
