"""What the baselines actually did in a study, read from their run stores.

At a scale other than the one they were published at, two baselines can degenerate without any
metric showing why (docs/baselines.md §1-2):

* **TED** drops every sample within ``tau`` token edits of the greedy output; on short answers
  it may keep nothing, and a question with nothing kept reads 0, as All-Zero's does.
  :func:`run_readouts` gives, per leaked and unleaked question group, the share of samples
  kept (the mean over questions of kept / m) and the questions where nothing was kept.
* **LNE-blocking** blocks ``n = floor(T_task * clip(1 - LNE / beta, 0, 1))`` positions per
  question; when ``T_task`` is small every question gets the same ``n`` and the per-question
  estimate never acts. :func:`run_readouts` gives, too, how many questions (leaked,
  unleaked) got each count.

Both are read from what each run stored: a sample's kept flag under its run's ``NAME-kept``
readout (:func:`zerogap.readout.kept_statistic`), and the blocking count each blocked sample's
statistics record. Torch-free.

>>> groups = (KeptShare("leaked", 4, 0.125, 3), KeptShare("unleaked", 4, 0.5, 1))
>>> FilterReadout("ted", {"tau": 2}, groups).sentence()  # doctest: +NORMALIZE_WHITESPACE
"ted (tau 2): samples kept (mean over questions of kept / m) leaked 12.5%, unleaked 50.0%;
 nothing kept (readout 0, as All-Zero's) on 3 of 4 leaked and 1 of 4 unleaked questions"
>>> BlockingReadout("lne-blocking", {1: {"leaked": 2, "unleaked": 2}}, 0).sentence()
'lne-blocking: blocking count 1 on every question (4): the per-question estimate never acts'
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from zerogap.readout import kept_statistic, readout_of
from zerogap.store import RunStore, SampleRow

# The per-sample statistic of a blocked sample's count (zerogap.decoding.specs.BlockingEdit
# records it from every backend; the analysis imports no engine, so the stored key is named here).
BLOCKING_STAT = "blocking_count"
BLOCKING_STRATEGY = "lne-blocking"  # a run of it without the statistic is reported as such
GROUPS = ("leaked", "unleaked")
ALL = "all"  # the one group of a setting without a split


@dataclass(frozen=True)
class KeptShare:
    """One question group's kept samples under a filtering readout: ``kept_share`` is the mean
    over its ``questions`` of kept / m, ``none_kept`` the questions with nothing kept (whose
    readout is then 0)."""

    group: str
    questions: int
    kept_share: float
    none_kept: int

    def share(self) -> str:
        return _named(f"{self.kept_share:.1%}", self.group, before=True)

    def none(self) -> str:
        return _named(f"{self.none_kept} of {self.questions}", self.group)


def _named(text: str, group: str, *, before: bool = False) -> str:
    """``text`` with its group's name beside it; the one group of an unsplit setting unnamed."""
    if group == ALL:
        return text
    return f"{group} {text}" if before else f"{text} {group}"


@dataclass(frozen=True)
class FilterReadout:
    """A filtering strategy's (TED's) kept samples per question group; ``settings`` is its
    stored configuration (``tau`` among them)."""

    label: str
    settings: Mapping
    groups: tuple[KeptShare, ...]

    def sentence(self) -> str:
        tau = f" (tau {self.settings['tau']})" if "tau" in self.settings else ""
        return (f"{self.label}{tau}: samples kept (mean over questions of kept / m) "
                + ", ".join(g.share() for g in self.groups)
                + "; nothing kept (readout 0, as All-Zero's) on "
                + " and ".join(g.none() for g in self.groups) + " questions")


@dataclass(frozen=True)
class BlockingReadout:
    """LNE-blocking's blocking counts: ``counts[n][group]`` questions of ``group`` blocked at
    ``n`` positions; ``unrecorded`` questions whose stored samples carry no count."""

    label: str
    counts: Mapping[int, Mapping[str, int]]
    unrecorded: int

    def sentence(self) -> str:
        total = sum(sum(by.values()) for by in self.counts.values())
        gap = f"; {self.unrecorded} questions without a recorded count" if self.unrecorded \
            else ""
        if not total:
            return f"{self.label}: no blocking count recorded{gap}"
        if len(self.counts) == 1:
            (n,) = self.counts
            every = "every recorded question" if self.unrecorded else "every question"
            return (f"{self.label}: blocking count {n} on {every} ({total}): the "
                    f"per-question estimate never acts{gap}")
        spread = "; ".join(f"{n}: " + ", ".join(_named(str(k), g) for g, k in by.items())
                           for n, by in sorted(self.counts.items()))
        return f"{self.label}: questions per blocking count, {spread}{gap}"


def _group(qid: str, leaked: Collection[str] | None) -> str:
    if leaked is None:
        return ALL
    return GROUPS[0] if qid in leaked else GROUPS[1]


def _ordered_groups(leaked: Collection[str] | None) -> tuple[str, ...]:
    return (ALL,) if leaked is None else GROUPS


def _kept(label: str, config: Mapping, key: str, grouped: Mapping[str, list[SampleRow]],
          leaked: Collection[str] | None) -> FilterReadout:
    shares: dict[str, list[float]] = {g: [] for g in _ordered_groups(leaked)}
    for qid, rows in grouped.items():
        shares[_group(qid, leaked)].append(sum(bool(r.stats.get(key)) for r in rows) / len(rows))
    groups = tuple(KeptShare(g, len(s), sum(s) / len(s), sum(x == 0 for x in s))
                   for g, s in shares.items() if s)
    return FilterReadout(label, config.get("strategy_config") or {}, groups)


def _blocking(label: str, grouped: Mapping[str, list[SampleRow]],
              leaked: Collection[str] | None) -> BlockingReadout:
    counts: dict[int, dict[str, int]] = {}
    unrecorded = 0
    for qid, rows in grouped.items():
        # One count per question by construction (the hook reads it by question): the first.
        recorded = [r.stats[BLOCKING_STAT] for r in rows if BLOCKING_STAT in r.stats]
        if not recorded:
            unrecorded += 1
            continue
        by = counts.setdefault(int(recorded[0]), dict.fromkeys(_ordered_groups(leaked), 0))
        by[_group(qid, leaked)] += 1
    return BlockingReadout(label, dict(sorted(counts.items())), unrecorded)


def run_readouts(label: str, run_dir: str | os.PathLike, ids: Sequence[str],
                 leaked: Collection[str] | None, *, limit: Mapping[str, int] | None = None
                 ) -> list[FilterReadout | BlockingReadout]:
    """What run ``run_dir`` (a strategy labelled ``label``) did over questions ``ids``, per
    group (leaked and unleaked, or "all" without a split): its kept samples under a
    ``NAME-kept`` readout, its blocking counts when it is LNE-blocking (by its stored strategy)
    or its samples record them; empty for any other run. ``limit`` (question id -> m_q) reads
    each question's first m_q samples only, as an allocated study's counts do.
    """
    wanted = set(ids)
    grouped: dict[str, list[SampleRow]] = {}
    with RunStore(Path(run_dir), create=False) as store:
        config = store.config()
        for row in store.samples():
            if row.question_id in wanted and (
                    limit is None or row.sample < limit.get(row.question_id, row.sample + 1)):
                grouped.setdefault(row.question_id, []).append(row)
    out: list[FilterReadout | BlockingReadout] = []
    key = kept_statistic(readout_of(config))
    if key is not None:
        out.append(_kept(label, config, key, grouped, leaked))
    if config.get("strategy") == BLOCKING_STRATEGY or any(
            BLOCKING_STAT in r.stats for rows in grouped.values() for r in rows):
        out.append(_blocking(label, grouped, leaked))
    return out


def setting_readouts(folder: str | os.PathLike, entry: Mapping,
                     limit: Mapping[str, int] | None = None
                     ) -> tuple[FilterReadout | BlockingReadout, ...]:
    """:func:`run_readouts` of every strategy run a study folder's setting ``entry`` records
    (``entry["runs"]``; a study recorded before runs were listed gives none), over the
    setting's questions (those of its clean counts), in the study's strategy order."""
    from zerogap.io.counts import read_counts

    folder = Path(folder)
    runs = entry.get("runs") or {}
    ids = read_counts(folder / entry["counts"]["clean"]).ids
    leaked = entry.get("leaked")
    out: list[FilterReadout | BlockingReadout] = []
    for label in entry["counts"]["strategies"]:
        if label in runs:
            out += run_readouts(label, folder / runs[label], ids,
                                None if leaked is None else frozenset(leaked), limit=limit)
    return tuple(out)
