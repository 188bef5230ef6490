"""An allocated study's plan as a file: each question's m and what it was computed from.

An allocated study (``zerogap evaluate --budget`` or ``--target-half-width``) gives every
strategy the same m per question and the clean reference batch its own (upward from the
study's m), from :func:`zerogap.uncertainty.allocate_samples` on the
clean model's second batch (and, optionally, a pilot of each strategy). The study writes the
plan beside its runs, one file per setting (``allocation/<setting>.json``), and reuses it
while its inputs stay the same: a resumed study and a strategy added later sample at the
recorded m; a changed input (a raised budget) computes it again from the same batch. The report
reads it back to state the allocation and to simulate the noise floor at the planned m.

The file holds ``format``, ``inputs`` (what the plan was computed from: the clean batch's run,
the questions, B, the budget or target, the bounds, the reference m, the pilot's seed, m and
runs), ``samples`` (question id -> m), ``mean_samples``, ``reference`` (question id -> the
clean reference batch's m) and ``reference_strategies`` (the K it was allocated for),
``level``, ``half_widths`` (predicted, each strategy's SA-PPG and each pair's difference; empty
without a pilot) and ``uniform_samples`` (the uniform m with the same largest predicted
half-width; null without a pilot). Torch-free.

What the plan moves: each strategy's expected SA-PPG at the plan differs from a uniform study's
at m (:func:`plan_shifts`, simulated as the noise floor is); the report states it beside the
allocation, in the half-widths of the strategy's interval, and ``study.json`` records it in the
setting's ``allocation`` entry (``shift``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zerogap.errors import DataError
from zerogap.io.counts import QuestionCounts
from zerogap.io.files import write_text
from zerogap.io.jsonlines import read_json_object

ALLOCATION_FORMAT = "zerogap-allocation"


@dataclass(frozen=True)
class AllocationPlan:
    """One setting's allocation: ``samples`` maps each question id to every strategy's m.

    ``inputs`` says what it was computed from (a plan is reused only while they are the
    same); ``half_widths`` and ``uniform_samples`` are :class:`~zerogap.uncertainty.Allocation`'s
    (empty and None without a pilot).
    """

    inputs: dict[str, Any]
    samples: dict[str, int]
    level: float
    half_widths: dict[str, float] = field(default_factory=dict)
    uniform_samples: int | None = None
    reference: dict[str, int] = field(default_factory=dict)
    """The clean reference batch's m of each question (allocated upward, never below the
    study's m); empty: the batch keeps the study's m (a plan recorded before it was
    allocated)."""
    reference_strategies: int | None = None
    """K, the sampled strategies the reference batch was allocated for (Neyman's rule prices a
    reference sample at one and a strategy sample at K)."""

    @property
    def mean_samples(self) -> float:
        """Mean samples per question and strategy."""
        return float(np.mean(list(self.samples.values())))

    def vector(self, ids: Sequence[str]) -> np.ndarray:
        """(N,) the m of each question of ``ids``, in that order."""
        return np.array([self.samples[q] for q in ids], dtype=np.int64)

    def reference_samples(self) -> dict[str, int]:
        """The clean reference batch's m of each question: :attr:`reference`, or the study's m
        where the plan keeps it."""
        return self.reference or dict.fromkeys(self.samples, int(self.inputs["reference_m"]))

    def to_dict(self) -> dict[str, Any]:
        return {"format": ALLOCATION_FORMAT, "inputs": self.inputs, "samples": self.samples,
                "mean_samples": self.mean_samples, "reference": self.reference,
                "reference_strategies": self.reference_strategies, "level": self.level,
                "half_widths": self.half_widths, "uniform_samples": self.uniform_samples}

    def lines(self, spent: Mapping[str, int],
              shifts: Mapping[str, Mapping[str, float | None]] | None = None) -> list[str]:
        """Plain-text lines for the report: the rule and its inputs, the spread of m, the
        samples each run drew (``spent``: run label -> samples, ``"pilot"`` the pilots' sum),
        what a uniform m of the same largest predicted half-width would have cost, and each
        strategy's shift (:func:`plan_shifts`)."""
        inputs = self.inputs
        m = np.array(list(self.samples.values()))
        size = (f"budget {inputs['budget']:g} samples per question and strategy"
                if inputs.get("budget") is not None else
                f"target half-width {inputs['target_half_width']:g}")
        pilot = inputs.get("pilot")
        basis = "the clean model's second batch" + (
            f" and a pilot of {pilot['m']} samples per question of each strategy (seed "
            f"{pilot['seed']}, not scored)" if pilot else "")
        if self.reference:
            r = np.array(list(self.reference.values()))
            batches = (f"the clean model's reference batch at r_q from {r.min()} to {r.max()} "
                       f"(mean {r.mean():.2f}; allocated upward for "
                       f"{self.reference_strategies} sampled strategies, never below m = "
                       f"{inputs['reference_m']}), its second batch at m = "
                       f"{inputs['reference_m']}")
        else:
            r = np.full(m.size, int(inputs["reference_m"]))
            batches = f"the clean model's batches at m = {inputs['reference_m']}"
        out = [f"allocation: {size}, by design from {basis} (B = {inputs['bins']}); each "
               f"strategy samples question q m_q times, m_q from {m.min()} to {m.max()} "
               f"(median {np.median(m):g}, mean {m.mean():.2f}); {batches}"]
        drawn = ", ".join(f"{label} {n:,}" for label, n in spent.items())
        out.append(f"  samples drawn: {drawn}")
        strategies = len([k for k in spent if k not in ("clean", "clean, 2nd batch", "pilot")])
        if self.uniform_samples is None:
            out.append("  uniform m for the same half-width: not estimated (needs a pilot)")
        else:
            widest = max(self.half_widths.values())
            uniform = self.uniform_samples * len(m)
            whole = (strategies * int(m.sum()) + int(r.sum())) / ((strategies + 1) * uniform)
            out.append(f"  uniform m for the same largest predicted half-width ({widest:.4f}): "
                       f"{self.uniform_samples}, {uniform:,} samples per strategy against "
                       f"{int(m.sum()):,} allocated ({int(m.sum()) / uniform:.2f} of uniform's; "
                       f"{strategies} strategies sampled); the whole study with the clean "
                       f"reference batch {whole:.2f} of uniform's")
        if shifts:
            out.append("  shift of each strategy's expected SA-PPG at this plan from uniform "
                       f"m = {inputs['reference_m']} (simulated; in half-widths of its "
                       "interval): " + ", ".join(
                           f"{label} {s['shift']:+.4f} ("
                           + ("no interval" if s["half_widths"] is None
                              else f"{s['half_widths']:+.2f}") + ")"
                           for label, s in shifts.items()))
        return out


def write_allocation(path: Path, plan: AllocationPlan) -> None:
    """Write ``plan`` to ``path`` in one step (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(plan.to_dict(), indent=1) + "\n")


def read_allocation(path: Path) -> AllocationPlan:
    """The plan in ``path``; :class:`~zerogap.errors.DataError` naming the file and the key
    when it is not one."""
    data = read_json_object(path, "allocation file")
    if data.get("format") != ALLOCATION_FORMAT:
        raise DataError(f"{path}: not a zerogap allocation file (format "
                        f"{ALLOCATION_FORMAT!r} expected)")
    samples = _question_samples(path, data, "samples")
    # A plan recorded before the reference batch was allocated has no "reference".
    reference = _question_samples(path, data, "reference") if data.get("reference") else {}
    inputs, widths = data.get("inputs"), data.get("half_widths") or {}
    level, uniform = data.get("level"), data.get("uniform_samples")
    if not isinstance(inputs, dict) or not isinstance(widths, dict) \
            or not isinstance(level, int | float) \
            or not (uniform is None or isinstance(uniform, int)):
        raise DataError(f"{path}: keys inputs, half_widths, level, uniform_samples: expected "
                        "an object, an object, a number and an integer or null")
    strategies = data.get("reference_strategies")
    if reference and not (isinstance(strategies, int) and not isinstance(strategies, bool)
                          and strategies >= 1):
        raise DataError(f"{path}: key reference_strategies: expected an integer >= 1 beside "
                        "reference")
    return AllocationPlan(inputs, samples, level, widths, uniform, reference,
                          strategies if reference else None)


def _question_samples(path: Path, data: Mapping[str, Any], key: str) -> dict[str, int]:
    """``data[key]``, question ids mapped to m; :class:`~zerogap.errors.DataError` naming the
    file and the key when it is not."""
    value = data.get(key)
    if not isinstance(value, dict) or not value or not all(
            isinstance(m, int) and not isinstance(m, bool) and m >= 1 for m in value.values()):
        raise DataError(f"{path}: key {key}: expected question ids mapped to integers >= 1")
    return value


def plan_shifts(plan: AllocationPlan, clean: QuestionCounts,
                runs: Mapping[str, QuestionCounts], bins: int, level: float
                ) -> dict[str, dict[str, float | None]]:
    """Each run's shift of its expected SA-PPG at ``plan`` from uniform m (the plan's reference
    m): ``{label: {"shift", "se", "half_widths"}}``, ``half_widths`` being the shift over the
    half-width of the run's SA-PPG interval (None where it has none: too few questions)
    (:func:`~zerogap.uncertainty.allocation_shift`).
    ``runs`` are aligned to ``clean``'s questions."""
    from zerogap.uncertainty import allocation_shift, gap_intervals

    labels = list(runs)
    correct = np.stack([runs[k].correct for k in labels])
    samples = np.stack([runs[k].samples for k in labels])
    m = int(plan.inputs["reference_m"])
    shift, se = allocation_shift(clean.correct, clean.samples, correct, samples,
                                 plan.vector(clean.ids), clean.samples, m, bins=bins)
    gaps = gap_intervals(clean.correct, clean.samples, correct, samples, names=labels,
                         bins=bins, level=level, n_resamples=1)
    out = {}
    for k, label in enumerate(labels):
        ci = gaps.interval(label, "sa_ppg")
        half = (ci.high - ci.low) / 2
        out[label] = {"shift": float(shift[k]), "se": float(se[k]),
                      "half_widths": float(shift[k] / half) if ci.reason is None and half > 0
                      else None}
    return out
