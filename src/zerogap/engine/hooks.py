"""The two hooks through which strategies change decoding (:mod:`zerogap.engine.base`).

* An :class:`Intervention` edits each step's next-token logits for the rows still running.
* A :data:`Patch` wraps every forward pass of an engine call in a context manager (for example
  forward hooks on MLP layers).

Identity is ``None`` for both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch

Patch = Callable[[Any], contextlib.AbstractContextManager]


@runtime_checkable
class Intervention(Protocol):
    """A batched logits edit applied at every sampling step, before temperature.

    Must not synchronise with the host per step (no ``.item()``, ``.tolist()`` or Python loops
    over rows): it runs once per decoding step for the whole batch.
    """

    def __call__(
        self,
        logits: torch.Tensor,
        tokens: torch.Tensor,
        lengths: torch.Tensor,
        question: torch.Tensor,
        sample: torch.Tensor,
    ) -> torch.Tensor:
        """Edit one step's logits.

        Parameters
        ----------
        logits : (R, V) float32
            Raw next-token logits of the R running rows.
        tokens : (R, S) long
            Tokens each row generated so far, left-aligned; positions ``>= lengths[r]`` are -1.
        lengths : (R,) long
            Number of generated tokens per row (0 at the first step).
        question : (R,) long
            Index of each row's question in the prompt list of the engine call.
        sample : (R,) long
            Each row's sample index within its question, ``0 .. m-1``.

        Returns
        -------
        (R, V) float32
            The edited logits (editing in place and returning ``logits`` is allowed).
        """
        ...


def sample_stats(intervention: Intervention | None, question: int, sample: int) -> dict:
    """The intervention's statistics for one finished sample, or ``{}`` if it keeps none."""
    if intervention is None or not hasattr(intervention, "sample_stats"):
        return {}
    return dict(intervention.sample_stats(question, sample))


def restart_samples(intervention: Intervention | None, question: torch.Tensor,
                    sample: torch.Tensor) -> None:
    """Rows ``(question[i], sample[i])`` start again from their first token (the engine freed
    their memory): an intervention that keeps per-sample state (:meth:`restart`) clears it."""
    if intervention is not None and hasattr(intervention, "restart"):
        intervention.restart(question, sample)


def reads_row_cache(patch: Patch | None) -> bool:
    """Whether the model ``patch`` runs beside the patched one (keeping its keys in the cache's
    layers past the model's own) reads the engine's row cache with the shared-prefix attention:
    such a patch says ``reads_rows = True`` and passes each forward call's row cache on. The
    engine hands any other patch's layers their dense keys and a padding mask, as an ordinary
    cache would."""
    return bool(getattr(patch, "reads_rows", False))


def patch_cache_layers(patch: Patch | None) -> int:
    """Layers the model ``patch`` runs beside the patched one keeps in the engine's row cache
    past the model's own (its ``cache_layers``; 0 without a patch or for one that keeps none):
    every decode row holds their keys too, so the batch is sized with them."""
    return int(getattr(patch, "cache_layers", 0))


def patched(patch: Patch | None, model) -> contextlib.AbstractContextManager:
    """``patch(model)``, or a no-op context when there is no patch."""
    return contextlib.nullcontext() if patch is None else patch(model)
