"""The study's figures (paper arXiv 2608.07341, Figures 1 and 2, and per-stratum gaps).

Each function returns a matplotlib :class:`~matplotlib.figure.Figure` built without pyplot (no
global state, no display); :func:`save` writes it as PNG and SVG. Inputs are plain per-question
data, so the figures can be drawn from any stores, not only a study's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from zerogap.io.files import atomic_write
from zerogap.metrics import RestorationGaps

LEAKED_COLOUR, UNLEAKED_COLOUR = "#c0392b", "#2c7fb8"
RANK_CAP = 10  # ranks above this are pooled into one ">10" bar


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F-measure between two texts, on whitespace tokens (LCS-based; Lin, 2004).

    Examples
    --------
    >>> round(rouge_l("the answer is 7", "so the answer is 7"), 4)
    0.8889
    >>> rouge_l("", "x")
    0.0
    """
    from rapidfuzz.distance import LCSseq

    a, b = candidate.split(), reference.split()
    if not a or not b:
        return 0.0
    lcs = LCSseq.similarity(a, b)
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(a), lcs / len(b)
    return 2 * precision * recall / (precision + recall)


def _rouge_panel(ax, per_question: Sequence[Sequence[float]], colour: str, title: str) -> None:
    for x, scores in enumerate(per_question):
        ax.scatter(np.full(len(scores), x), scores, s=6, alpha=0.18, color=colour, lw=0)
    means = [float(np.mean(s)) if len(s) else np.nan for s in per_question]
    ax.scatter(np.arange(len(means)), means, s=16, color=colour, label="per-question mean")
    ax.set(title=title, xlabel="question (sorted by mean)", ylabel="ROUGE-L to greedy",
           ylim=(-0.03, 1.03))
    ax.legend(loc="lower right", fontsize=7)


def _rank_panel(ax, ranks: Sequence[int], colour: str, title: str) -> None:
    values = np.minimum(np.asarray(ranks, dtype=int), RANK_CAP + 1)
    labels = [str(r) for r in range(2, RANK_CAP + 1)] + [f">{RANK_CAP}"]
    counts = np.array([np.count_nonzero(values == r) for r in range(2, RANK_CAP + 2)])
    share = counts / max(counts.sum(), 1)
    ax.bar(labels, share, color=colour)
    ax.set(title=title, xlabel="rank of the clean model's token", ylabel="share of steps",
           ylim=(0, 1))
    if counts.sum():
        ax.text(0.97, 0.95, f"runner-up: {share[0]:.0%} of {counts.sum()} steps",
                transform=ax.transAxes, ha="right", va="top", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no disagreeing steps", transform=ax.transAxes, ha="center")


def figure1(rouge: Mapping[str, Sequence[float]], ranks: Mapping[str, Sequence[int]],
            leaked: frozenset[str]) -> Figure:
    """Figure 1: the contaminated model's generation behaviour, leaked vs unleaked questions.

    Parameters
    ----------
    rouge : mapping question id -> ROUGE-L of each sample against that question's greedy
        trajectory (panels a, c: faint dots per sample, solid per-question means).
    ranks : mapping question id -> ranks (1 = argmax) of the clean model's greedy token under
        the contaminated model teacher-forced on the clean greedy prefix, at the first ten
        decoding steps where the two disagree (panels b, d; rank 1 cannot occur there).
    leaked : the leaked question ids.
    """
    fig = Figure(figsize=(11, 6.5), layout="constrained")
    axes = fig.subplots(2, 2)
    for row, (is_leaked, name, colour) in enumerate(
        ((True, "leaked", LEAKED_COLOUR), (False, "unleaked", UNLEAKED_COLOUR))
    ):
        ids = [q for q in rouge if (q in leaked) == is_leaked]
        ids.sort(key=lambda q: float(np.mean(rouge[q])) if len(rouge[q]) else 0.0)
        tag = "ac"[row]
        _rouge_panel(axes[row, 0], [rouge[q] for q in ids], colour,
                     f"({tag}) {name}: samples vs greedy ({len(ids)} questions)")
        pooled = [r for q, rs in ranks.items() if (q in leaked) == is_leaked for r in rs]
        _rank_panel(axes[row, 1], pooled, colour, f"({'bd'[row]}) {name}: rank where models differ")
    return fig


def readout_gap(first: np.ndarray, second: np.ndarray) -> float:
    """Mean per-question |difference| between two batches' readouts (Figure 2's figure).

    Examples
    --------
    >>> readout_gap(np.array([1, 0, 1]), np.array([1, 1, 0]))
    0.6666666666666666
    """
    return float(np.mean(np.abs(np.asarray(first, float) - np.asarray(second, float))))


def figure2(draw1, draw2, r1, r2, *, m: int, seed: int = 0) -> Figure:
    """Figure 2: two independent batches of the clean model, 0/1 readout vs solve probability.

    Parameters
    ----------
    draw1, draw2 : array of 0/1, shape (n_questions,)
        One sampled response's grade per question from each batch (m = 1).
    r1, r2 : array of float, shape (n_questions,)
        Each batch's solve probability from its m samples.
    m : samples per question (shown in the title).
    seed : seed of the small vertical jitter that keeps 0/1 dots apart.
    """
    fig = Figure(figsize=(11, 4), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    jitter = np.random.default_rng(seed).uniform(-0.03, 0.03, size=(2, len(draw1)))
    for ax, (a, b), title, shake in (
        (left, (draw1, draw2), "0/1 readout (m = 1)", jitter),
        (right, (r1, r2), f"solve probability (m = {m})", np.zeros_like(jitter)),
    ):
        a, b = np.asarray(a, float), np.asarray(b, float)
        order = np.argsort(a, kind="stable")
        x = np.arange(a.size)
        ax.scatter(x, a[order] + shake[0], s=10, color="#333333", label="batch 1")
        ax.scatter(x, b[order] + shake[1], s=10, color="#e67e22", alpha=0.7, label="batch 2")
        ax.set(title=f"{title}: mean per-question gap {readout_gap(a, b):.3f}",
               xlabel="question (sorted by batch 1)", ylim=(-0.08, 1.08))
        ax.legend(loc="upper left", fontsize=7)
    left.set_ylabel("readout")
    return fig


def stratum_figure(gaps: Mapping[str, RestorationGaps]) -> Figure:
    """Per-stratum gaps of each strategy: what SA-PPG averages (one panel per strategy).

    Bars above zero are a stratum's mean Δ+ (under-suppression, inflation left), below zero its
    mean Δ- (over-suppression, damage), over the clean solve probability's strata; ``gaps``
    maps each strategy to its :class:`~zerogap.metrics.RestorationGaps` (a scorecard's
    estimates), all on the same clean run.
    """
    names = list(gaps)
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig = Figure(figsize=(4 * cols, 2.8 * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, sharey=True, squeeze=False)).ravel()
    for ax, name in zip(axes, names, strict=False):
        g = gaps[name]
        centres = (np.asarray(g.strata_used) + 0.5) / g.bins
        ax.bar(centres, g.stratum_delta_plus, width=0.9 / g.bins, color=LEAKED_COLOUR,
               label="Δ+ (inflation left)")
        ax.bar(centres, -np.asarray(g.stratum_delta_minus), width=0.9 / g.bins,
               color=UNLEAKED_COLOUR, label="Δ- (damage)")
        ax.axhline(0, color="black", lw=0.6)
        ax.set(title=f"{name}: SA-PPG {g.sa_ppg:.3f}", xlim=(0, 1), ylim=(-1, 1),
               xlabel="clean solve probability (stratum)")
    for ax in axes[len(names):]:
        ax.set_axis_off()
    axes[0].set_ylabel("mean gap in stratum")
    axes[0].legend(loc="lower left", fontsize=7)
    return fig


Interval = tuple[float, float, float]  # estimate, low, high


def headline_figure(strategies: Mapping[str, Interval], floor: float,
                    controls: Mapping[str, Interval], paper: Mapping[str, float]) -> Figure:
    """The report's first figure: SA-PPG per strategy with its interval, at a glance.

    Parameters
    ----------
    strategies : mapping name -> (SA-PPG, low, high) on the contaminated model, table order.
    floor : the clean model's noise floor (the SA-PPG two of its batches read), drawn as a
        band from 0: a strategy inside it is as close to the clean model as the clean model
        is to itself.
    controls : mapping name -> (SA-PPG, low, high) of the same strategy on the clean model
        (collateral damage alone), drawn beside the strategy's own row.
    paper : mapping name -> the paper's SA-PPG (Llama-2, GSM8K; arXiv 2608.07341 §5.2),
        drawn as reference marks where the paper reports the same strategy.
    """
    names = list(strategies)
    fig = Figure(figsize=(8, 0.55 * len(names) + 1.6), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(names))[::-1].astype(float)
    ax.axvspan(0, floor, color="#dddddd", label=f"noise floor ({floor:.3f})")
    for row, name in zip(y, names, strict=True):
        est, low, high = strategies[name]
        ax.errorbar(est, row, xerr=[[est - low], [high - est]], fmt="o", color=LEAKED_COLOUR,
                    capsize=3, label="contaminated model" if row == y[0] else None)
        if name in controls:
            est, low, high = controls[name]
            ax.errorbar(est, row - 0.25, xerr=[[est - low], [high - est]], fmt="s",
                        mfc="white", color=UNLEAKED_COLOUR, capsize=3,
                        label="same strategy on the clean model")
        if name in paper:
            ax.plot(paper[name], row, "x", color="#555555", ms=8,
                    label="paper (Llama-2, GSM8K)")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))  # one legend entry per kind
    ax.legend(unique.values(), unique.keys(), loc="lower right", fontsize=7)
    ax.set(yticks=y, yticklabels=names, xlim=(0, 1), xlabel="SA-PPG (0: restored)",
           title="Restoration per strategy, with 95% intervals")
    return fig


def save(fig: Figure, folder: Path, stem: str) -> dict[str, Path]:
    """Write ``fig`` as ``folder/stem.png`` (150 dpi) and ``.svg``; returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"png": folder / f"{stem}.png", "svg": folder / f"{stem}.svg"}
    for kind, path in paths.items():
        with atomic_write(path, binary=True) as handle:  # all or nothing, as every write
            fig.savefig(handle, format=kind, dpi=150 if kind == "png" else "figure")
    return paths
