"""RailCap (paper §4, Algorithm 1): keep samples from falling back onto the greedy trajectory.

For each question, one greedy decode of the contaminated model gives a trajectory
``g = (g_1, ..., g_T)``; its windows and their successors are the map ``H`` (the paper's
eq. 14). While sampling, whenever the last ``n`` generated tokens equal a window
``(g_k, ..., g_{k+n-1})`` of the trajectory, that window's successor ``g_{k+n}`` has its logit
capped to the step's second-largest logit (``mode="cap"``) or removed (``mode="ban"``); then the
engine samples at temperature ``tau``.

Choices the paper leaves open, fixed here:

* **Repeated n-grams.** When an n-gram occurs several times in the trajectory with different
  successors, *every* successor is capped (the paper's map ``H`` would keep only one).
* **Second-largest logit.** ``v2`` is the second entry of the step's logits sorted in descending
  order, counting ties: if two tokens share the maximum, ``v2`` equals the maximum and the cap
  changes nothing (the model is already undecided at that step). Capping makes the trajectory
  token tie exactly with the runner-up; under sampling they become equally likely, as Eq. (15)
  says. All capped successors are capped to the ``v2`` of the *original* logits.
* **Only generated tokens count.** A window is matched against the last ``n`` generated tokens;
  the prompt never takes part (Algorithm 1, line 9: ``t > n``).
* **The answer slot** (``protect="answer"``, an ablation). Algorithm 1 caps the answer's own
  tokens too when a sample reaches "The answer is" on its trajectory. With the option, a row
  whose generated tokens hold the task's answer marker (any of its token sequences: the
  tokenizer writes "The answer is" differently after a space, a newline or a period) is never
  capped again: the whole rest of the sample is the slot the grader reads. Each step checks
  whether the tokens *end* with a marker and the adapters remember it per sample, so the check
  costs the same at every step. Not just the one
  token after the marker: SmolLM2's tokenizer writes " 42" as " ", "4", "2", so the first
  token after the marker is a lone space and the digits follow it.
* **Ban mode** sets matched successors to ``-inf``. If that removed every finite logit of a row,
  the row could not be sampled; with a trajectory successor set that small against a real
  vocabulary this does not happen in practice, and it is not guarded.

This module is pure torch (no transformers import). :func:`railcap_apply` is the batched core
used by both adapters: :class:`RailCapHook` (the engine's intervention hook, here) and
``zerogap.decoding.hf.RailCapLogitsProcessor`` (a standard transformers ``LogitsProcessor``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from zerogap.decoding.settings import MODES, RailCapConfig


def pad_trajectories(trajectories: list[list[int]], device=None) -> tuple[Tensor, Tensor]:
    """Stack token lists into a right-padded ``(Q, L)`` tensor (pad -1) and their ``(Q,)`` lengths.

    ``L`` is at least 1 so that an all-empty set still has a valid shape.

    Examples
    --------
    >>> traj, lengths = pad_trajectories([[5, 6, 7], [8]])
    >>> traj.tolist(), lengths.tolist()
    ([[5, 6, 7], [8, -1, -1]], [3, 1])
    """
    width = max([len(t) for t in trajectories] + [1])
    padded = torch.full((len(trajectories), width), -1, dtype=torch.long)  # (Q, L)
    for i, tokens in enumerate(trajectories):
        padded[i, : len(tokens)] = torch.as_tensor(tokens, dtype=torch.long)
    lengths = torch.as_tensor([len(t) for t in trajectories], dtype=torch.long)  # (Q,)
    return padded.to(device), lengths.to(device)


def recent_tokens(tokens: Tensor, lengths: Tensor, n: int) -> Tensor:
    """The last ``n`` generated tokens of each row, -1 where a row has fewer than ``n``.

    Parameters
    ----------
    tokens : (R, S) long
        Generated tokens, left-aligned; entries at positions ``>= lengths[r]`` are ignored.
    lengths : (R,) long
        Number of tokens each row has generated.
    n : int

    Returns
    -------
    (R, n) long

    Examples
    --------
    >>> recent_tokens(torch.tensor([[1, 2, 3, -1], [4, -1, -1, -1]]), torch.tensor([3, 1]), 2)
    tensor([[ 2,  3],
            [-1, -1]])
    """
    rows = tokens.shape[0]
    if tokens.shape[1] < n:  # no row can have n tokens yet
        return tokens.new_full((rows, n), -1)
    pos = lengths[:, None] - n + torch.arange(n, device=tokens.device)  # (R, n)
    recent = tokens.gather(1, pos.clamp(min=0))  # (R, n)
    return recent.masked_fill(pos[:, :1] < 0, -1)  # rows with fewer than n tokens


def pad_markers(markers: Sequence[Sequence[int]], device=None) -> Tensor:
    """Stack marker token sequences into a left-padded ``(P, K)`` tensor; -1 pads (a wildcard
    in :func:`ends_with_marker`). ``K`` is at least 1.

    Examples
    --------
    >>> pad_markers([[504, 2988, 314], [2988, 314]]).tolist()
    [[504, 2988, 314], [-1, 2988, 314]]
    """
    if any(len(m) == 0 or min(m) < 0 for m in markers):
        raise ValueError(f"answer markers must be non-empty token id lists, got {markers!r}")
    width = max([len(m) for m in markers] + [1])
    padded = torch.full((len(markers), width), -1, dtype=torch.long)  # (P, K)
    for i, tokens in enumerate(markers):
        padded[i, width - len(tokens):] = torch.as_tensor(tokens, dtype=torch.long)
    return padded.to(device)


def ends_with_marker(tokens: Tensor, lengths: Tensor, markers: Tensor) -> Tensor:
    """Whether each row's generated tokens end with one of the marker sequences.

    Called at every step, this sees every position a marker can end at once; the callers
    keep, per sample, whether one ever did (a whole-sequence search at every step would cost
    ``rows x tokens x markers`` comparisons a step, most of a step on a CPU).

    Parameters
    ----------
    tokens : (R, S) long
        Generated tokens, left-aligned; entries at positions ``>= lengths[r]`` are ignored.
    lengths : (R,) long
    markers : (P, K) long
        From :func:`pad_markers`: left-padded with -1, which matches any token.

    Returns
    -------
    (R,) bool

    Examples
    --------
    >>> tokens = torch.tensor([[7, 5, 6, 9], [5, 7, 6, 0], [6, 0, 0, 0]])
    >>> ends_with_marker(tokens, torch.tensor([3, 4, 1]), pad_markers([[5, 6], [6]])).tolist()
    [True, False, True]
    """
    rows, width = tokens.shape[0], markers.shape[1]
    if tokens.shape[1] == 0:  # nothing generated yet (a shape, not a value: no sync)
        return torch.zeros(rows, dtype=torch.bool, device=tokens.device)
    pos = lengths[:, None] - width + torch.arange(width, device=tokens.device)  # (R, K)
    # -2 before a row's first token: it only matches a marker's wildcard positions.
    last = tokens.gather(1, pos.clamp(min=0)).masked_fill(pos < 0, -2)  # (R, K)
    return ((last[:, None, :] == markers) | (markers < 0)).all(-1).any(-1)


def railcap_apply(
    logits: Tensor,
    recent: Tensor,
    trajectory: Tensor,
    traj_len: Tensor,
    *,
    mode: str = "cap",
    rows: Tensor | None = None,
    sparse: bool = False,
    protected: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """One RailCap step for a whole batch, in place, without host syncs (unless ``sparse``).

    Parameters
    ----------
    logits : (R, V) float
        Raw next-token logits; modified in place.
    recent : (R, n) long
        Each row's last ``n`` generated tokens; any negative entry (a row with fewer than ``n``
        tokens) never matches.
    trajectory : (Q, L) long
        Greedy trajectories, right-padded (pad value irrelevant).
    traj_len : (Q,) long
        Trajectory lengths.
    mode : {"cap", "ban"}
    rows : (R,) long, optional
        Trajectory index of each row; default ``arange(R)`` (then ``Q == R``).
    sparse : bool
        Find the second-largest logit only for the rows that match a window, at the price of
        one host sync. On a CPU the sync is free and the full-vocabulary ``topk`` is most of a
        step while few rows sit on their trajectory; on an accelerator leave it off.
    protected : (R,) bool, optional
        Rows that are never capped at this step (past the answer marker, ``protect="answer"``).
        They still count as on the trajectory when their last ``n`` tokens match.

    Returns
    -------
    logits : (R, V) float
        The same tensor, with every matched successor capped or banned.
    on_trajectory : (R,) bool
        The row's last ``n`` tokens match some trajectory window that has a successor
        (protected rows included).
    intervened : (R,) bool
        The logits were changed: a matched successor was above ``v2`` (cap) or finite (ban).

    Examples
    --------
    >>> logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    >>> traj, traj_len = torch.tensor([[0, 2, 1]]), torch.tensor([3])
    >>> out, on, hit = railcap_apply(logits, torch.tensor([[0, 2]]), traj, traj_len)
    >>> out.tolist(), on.tolist(), hit.tolist()
    ([[0.0, 2.0, 1.0, 2.0]], [True], [True])
    """
    if mode not in MODES:
        raise ValueError(f"railcap mode must be one of {MODES}, got {mode!r}")
    n = recent.shape[1]
    num_rows = logits.shape[0]
    width = trajectory.shape[1] - n  # windows that can have a successor
    if width <= 0:  # every trajectory is too short to hold an n-gram and its successor
        none = torch.zeros(num_rows, dtype=torch.bool, device=logits.device)
        return logits, none, none.clone()
    if rows is not None:
        trajectory = trajectory.index_select(0, rows)  # (R, L)
        traj_len = traj_len.index_select(0, rows)  # (R,)
    windows = trajectory[:, :-1].unfold(1, n, 1)  # (R, W, n): window k = g[k : k+n]
    successors = trajectory[:, n:]  # (R, W): g[k+n]
    has_successor = torch.arange(width, device=logits.device) + n < traj_len[:, None]  # (R, W)
    on_trajectory = (windows == recent[:, None, :]).all(-1) & has_successor  # (R, W)
    match = on_trajectory if protected is None else on_trajectory & ~protected[:, None]

    succ_idx = successors.clamp(min=0)  # (R, W); padding is never matched
    succ_logit = logits.gather(1, succ_idx)  # (R, W)
    if mode == "cap":
        limit = _second_largest(logits, match.any(-1) if sparse else None)  # (R, 1): v2
    else:
        limit = logits.new_full((num_rows, 1), float("-inf"))  # (R, 1)
    changed = match & (succ_logit > limit)  # (R, W)
    # amin makes repeated successors (one token under several windows) order-independent.
    new = torch.where(match, limit.expand_as(succ_logit), torch.inf)  # (R, W)
    logits.scatter_reduce_(1, succ_idx, new, reduce="amin", include_self=True)
    return logits, on_trajectory.any(-1), changed.any(-1)


def _second_largest(logits: Tensor, needed: Tensor | None) -> Tensor:
    """(R, 1): each row's second-largest logit, counting ties (if two tokens share the maximum,
    the maximum); with ``needed`` (R,) bool only for those rows (one host sync), ``-inf``
    elsewhere."""
    if needed is None:
        return logits.topk(2, dim=-1).values[:, 1:2]
    rows = needed.nonzero()[:, 0]
    limit = logits.new_full((logits.shape[0], 1), float("-inf"))
    if len(rows):
        limit[rows] = logits.index_select(0, rows).topk(2, dim=-1).values[:, 1:2]
    return limit


def answer_slot_markers(config: RailCapConfig, markers: Sequence[Sequence[int]],
                        device=None) -> Tensor | None:
    """``(P, K)`` padded markers when ``config`` protects the answer slot, else None; a
    :class:`ValueError` when it does and no marker is given (the cap would silently apply)."""
    if config.protect != "answer":
        return None
    if not markers:
        raise ValueError("RailCap with protect='answer' needs the task's answer marker tokens")
    return pad_markers(markers, device)


class RailCapHook:
    """The engine's intervention hook for RailCap (see ``notes/engine-interface.md``).

    Keeps, on the logits' device, per (question, sample) counts of steps on the trajectory and of
    interventions, and reports them through :meth:`sample_stats` once a sample finishes.

    Parameters
    ----------
    trajectories : list of list of int
        Greedy trajectory of each question, in the order of the engine call's questions.
    config : RailCapConfig
    samples_per_question : int
        ``m``, the number of samples each question gets in the engine call.
    device : torch.device or str, optional
    answer_markers : sequence of sequence of int
        The task's answer marker as token sequences (``protect="answer"`` needs them).
    """

    def __init__(
        self,
        trajectories: list[list[int]],
        config: RailCapConfig,
        *,
        samples_per_question: int,
        device=None,
        answer_markers: Sequence[Sequence[int]] = (),
    ) -> None:
        self.config = config
        self.trajectory, self.traj_len = pad_trajectories(trajectories, device)  # (Q, L), (Q,)
        self.markers = answer_slot_markers(config, answer_markers, device)  # (P, K) or None
        shape = (len(trajectories), samples_per_question)
        self.past_marker = torch.zeros(shape, dtype=torch.bool, device=device)  # (Q, m)
        self.on_trajectory = torch.zeros(shape, dtype=torch.long, device=device)  # (Q, m)
        self.interventions = torch.zeros(shape, dtype=torch.long, device=device)  # (Q, m)

    def __call__(
        self, logits: Tensor, tokens: Tensor, lengths: Tensor, question: Tensor, sample: Tensor
    ) -> Tensor:
        recent = recent_tokens(tokens, lengths, self.config.n)  # (R, n)
        protected = None
        if self.markers is not None:
            protected = self.past_marker[question, sample] | ends_with_marker(
                tokens, lengths, self.markers)  # (R,)
            self.past_marker[question, sample] = protected
        logits, on, hit = railcap_apply(
            logits, recent, self.trajectory, self.traj_len, mode=self.config.mode, rows=question,
            protected=protected,
        )
        self.on_trajectory.index_put_((question, sample), on.long(), accumulate=True)
        self.interventions.index_put_((question, sample), hit.long(), accumulate=True)
        return logits

    def restart(self, question: Tensor, sample: Tensor) -> None:
        """Rows ``(question[i], sample[i])`` start again: their counts and marker state go."""
        for state in (self.past_marker, self.on_trajectory, self.interventions):
            state[question, sample] = 0

    def sample_stats(self, question: int, sample: int) -> dict:
        """``{"interventions": int, "steps_on_trajectory": int}`` for one finished sample."""
        return {
            "interventions": int(self.interventions[question, sample]),
            "steps_on_trajectory": int(self.on_trajectory[question, sample]),
        }
