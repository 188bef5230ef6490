"""LNE-blocking (Hou et al., 2025; spec in ``docs/baselines.md`` §2): pure-torch core.

The contaminated model's greedy decode of a question gives per-step entropies ``H_i`` of the
full next-token distribution (natural log, temperature 1); their mean is the question's LNE. The
blocking count is

    n = floor(T_task * clip(1 - LNE / beta, 0, 1)),   beta = 2, T_task = 7 for GSM8K,

and at the first ``n`` generated positions of every sample the argmax token is banned.

``T_task`` is "task-dependent, model-independent" and given only for HumanEval (4) and GSM8K
(7); how to set it for another task is not known (docs/baselines.md §2). Our rule, a proposal
(:func:`scaled_t_task`): the blocked positions keep GSM8K's share of a reference solution, so
``T_task = max(1, round(7 * W / 54.8))`` with ``W`` the mean reference-solution length in words
(:mod:`zerogap.decoding.length_scale`) of a study's calibration questions, or of its evaluated
questions where it has no calibration split; ``arith``'s one-line solutions (16.2 words on its
default test split) give 2.

``beta`` is where "LNE typically falls" ([0, 2] for the authors' 7B models on GSM8K), so that
``1 - LNE / beta`` spans [0, 1] over the questions and the count over [0, T_task]. A small model
fine-tuned on a template task has greedy entropies a tenth of that: at ``beta = 2`` every
question's score is above 0.9 and every question gets the same count. A study with a
calibration split disjoint from its evaluated questions (:mod:`zerogap.study.calibration`) sets
``beta`` to the 0.9 quantile of the LNE of the sampled model's greedy decodes of those
questions (:func:`calibrated_beta`), half leaked and half not: our proposal. The largest LNE
would follow the one most uncertain decode and grow with the calibration's size; the 0.9
quantile estimates a fixed point of the model's LNE distribution, and still gives count 0 to
the most uncertain tenth of the questions. The maximum, the median and the published 2 are
ablation rows.

Proposals (the sources are silent; see docs/baselines.md §2): the rounding (floor) and the clipping
of the blocked-position count (Hou et al.'s Eq. 10, in the LNE-blocking paper, not the
restoration paper's eq. 10) are our choice; positions are counted literally from the first
response token, whitespace included; the LNE averages whatever steps the greedy decode reports
(the engine includes the step that produced EOS). Following the issue's protocol, the blocked
samples are then drawn at temperature ``tau`` like every other strategy's (the original method
decodes one greedy output); with a tied maximum, only the token ``argmax`` returns (the lowest
id) is banned.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zerogap.decoding.length_scale import length_scaled

GSM8K_T_TASK = 7
BETA_QUANTILE = 0.9  # the calibration decodes' LNE quantile a study takes as beta


def scaled_t_task(solution_words: float) -> int:
    """``T_task`` for a task whose reference solutions average ``solution_words`` words:
    GSM8K's 7 scaled by length, at least 1 (see the module docstring).

    Examples
    --------
    >>> scaled_t_task(54.8), scaled_t_task(16.2), scaled_t_task(1.0)
    (7, 2, 1)
    """
    return length_scaled(GSM8K_T_TASK, solution_words, minimum=1)


def entropy(logits: Tensor) -> Tensor:
    """Entropy (nats) of ``softmax(logits)`` along the last axis, computed in float32.

    Examples
    --------
    >>> round(float(entropy(torch.zeros(4))), 4)  # uniform over 4 tokens: log 4
    1.3863
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    plogp = torch.where(logp > -torch.inf, logp.exp() * logp, 0.0)  # -inf logits add 0, not nan
    return -plogp.sum(-1)


def mean_entropy(entropies: list[list[float]]) -> Tensor:
    """Each question's LNE: the mean of its greedy decode's per-step entropies, ``(Q,)``.

    Raises ``ValueError`` naming the question (by position) whose entropy list is empty.

    Examples
    --------
    >>> mean_entropy([[0.5, 1.5], [0.2]]).tolist()
    [1.0, 0.2]
    """
    for i, values in enumerate(entropies):
        if len(values) == 0:
            raise ValueError(f"question {i}: the greedy decode has no per-step entropies")
    return torch.tensor([sum(v) / len(v) for v in entropies], dtype=torch.float64)


def blocking_counts(lne: Tensor, *, t_task: int = 7, beta: float = 2.0) -> Tensor:
    """``floor(t_task * clip(1 - lne / beta, 0, 1))`` per question, ``(Q,)`` long.

    Examples
    --------
    >>> blocking_counts(torch.tensor([0.1, 0.6, 2.5]), t_task=4).tolist()
    [3, 2, 0]
    """
    score = (1.0 - lne.double() / beta).clamp(0.0, 1.0)  # (Q,)
    return torch.floor(t_task * score).long()


def calibrated_beta(lne: Tensor, quantile: float = BETA_QUANTILE) -> float | None:
    """``beta`` from the LNEs of a calibration split's greedy decodes, ``(Q,)``: their
    ``quantile`` (linear interpolation between order statistics; 1 is the largest, 0.5 the
    median), the upper end of where LNE falls on this model and task; None when there is no
    question or that quantile is 0 (the decodes certain), where no scale can be read and the
    default stands.

    Examples
    --------
    >>> lne = torch.tensor([0.02, 0.11, 0.05, 0.07, 0.03])
    >>> calibrated_beta(lne), calibrated_beta(lne, 1.0), calibrated_beta(lne, 0.5)
    (0.094, 0.11, 0.05)
    >>> calibrated_beta(torch.tensor([0.0, 0.0])) is None
    True
    """
    if lne.numel() == 0:
        return None
    beta = float(torch.quantile(lne.double(), quantile))
    # stored in the run's config: a short, exact number
    return round(beta, 6) if beta > 0.0 else None


def block_argmax(logits: Tensor, lengths: Tensor, counts: Tensor) -> tuple[Tensor, Tensor]:
    """Ban the argmax of each row still inside its first ``counts`` generated positions, in place.

    Parameters
    ----------
    logits : (R, V) float
    lengths : (R,) long
        Tokens each row has generated; the token being chosen has 0-based position ``lengths``.
    counts : (R,) long
        Blocking count of each row.

    Returns
    -------
    logits : (R, V) float
        The same tensor.
    blocked : (R,) bool
        Rows whose argmax was set to ``-inf``.

    Examples
    --------
    >>> out, blocked = block_argmax(torch.tensor([[1.0, 3.0], [1.0, 3.0]]),
    ...                             torch.tensor([0, 2]), torch.tensor([2, 2]))
    >>> out.tolist(), blocked.tolist()
    ([[1.0, -inf], [1.0, 3.0]], [True, False])
    """
    blocked = lengths < counts  # (R,)
    top = logits.argmax(dim=-1, keepdim=True)  # (R, 1)
    current = logits.gather(1, top)  # (R, 1)
    logits.scatter_(1, top, torch.where(blocked[:, None], float("-inf"), current))
    return logits, blocked


class LNEBlockingHook:
    """The engine's intervention hook for LNE-blocking.

    Parameters
    ----------
    counts : (Q,) long
        Blocking count of each question of the engine call (from :func:`blocking_counts`).
    device : torch.device or str, optional
        Where the engine's logits live.
    """

    def __init__(self, counts: Tensor, *, device=None) -> None:
        self.counts = counts.to(device)

    def __call__(
        self, logits: Tensor, tokens: Tensor, lengths: Tensor, question: Tensor, sample: Tensor
    ) -> Tensor:
        counts = self.counts.index_select(0, question)  # (R,)
        return block_argmax(logits, lengths, counts)[0]
