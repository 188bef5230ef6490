"""Running a strategy: greedy decodes from (or into) a store, sampling, grading, storing, readout.

This is the glue between :mod:`zerogap.strategies`, the engine and the run store that
``zerogap sample --strategy NAME`` uses; it is usable from Python as well.

Greedy decodes are kept in a run store (the run's own, or a shared ``greedy_store`` that every
strategy run of one model and task points to), always with their per-step entropies, so one
decode serves RailCap, TED and LNE-blocking across runs. A store holding a greedy decode made
without entropies cannot serve LNE-blocking; that is reported, not silently redone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zerogap.store import GreedyRow, RunStore, SampleRow
from zerogap.strategies import Strategy


def ensure_greedy(
    store: RunStore, model, tokenizer, task, questions: Sequence, *, max_new_tokens: int,
    progress: bool = False,
) -> dict[str, GreedyRow]:
    """Greedy decodes of ``questions`` by id: stored ones reused, missing ones decoded and stored.

    Each question's decode is written as soon as it is done, so an interrupted call keeps them.
    """
    from zerogap.engine import greedy

    have = store.greedy()
    todo = [q for q in questions if q.id not in have]
    if todo:
        def write(i: int, gen) -> None:
            grade = task.grade(todo[i], gen.text)
            store.add_greedy([GreedyRow(todo[i].id, gen.token_ids, gen.text, gen.finish,
                                        grade.extracted, grade.correct, gen.entropies)])

        greedy(model, tokenizer, [task.prompt(q) for q in todo], max_new_tokens=max_new_tokens,
               stop=task.stop, return_entropy=True, progress=progress, on_question=write)
        have = store.greedy()
    return {q.id: have[q.id] for q in questions}


def run_strategy(
    strategy: Strategy,
    store: RunStore,
    model,
    tokenizer,
    task,
    questions: Sequence,
    *,
    m: int,
    max_new_tokens: int,
    seed: int,
    greedy_store: RunStore | None = None,
    base_model=None,
    max_batch: int | None = None,
    progress: bool = False,
) -> int:
    """Draw ``m`` graded samples per question under ``strategy`` into ``store``; resumable.

    Questions already in ``store`` are skipped. Each question's samples are written in one
    transaction once all are drawn, with the engine's per-sample statistics (e.g. RailCap's
    intervention counts) and the strategy's (e.g. TED's ``ted_kept``) in ``stats``.
    All-Zero draws nothing: it stores ``m`` empty, incorrect responses per question, marked
    ``finish="synthetic"``.

    Returns
    -------
    int
        Number of questions sampled by this call.
    """
    done = store.completed_questions()
    todo = [q for q in questions if q.id not in done]
    if not todo:
        return 0
    if not strategy.samples_model:
        for q in todo:
            store.add_samples([SampleRow(q.id, j, "", 0, "synthetic", None, False, {})
                               for j in range(m)])
        return len(todo)
    greedy_rows: list[GreedyRow] | None = None
    if strategy.needs_greedy:
        found = ensure_greedy(greedy_store or store, model, tokenizer, task, todo,
                              max_new_tokens=max_new_tokens, progress=progress)
        greedy_rows = [found[q.id] for q in todo]
        if strategy.needs_entropy:
            missing = [r.question_id for r in greedy_rows if r.entropies is None]
            if missing:
                raise ValueError(
                    f"strategy {strategy.name} needs greedy entropies, but the stored greedy "
                    f"decode of {missing[0]} (and {len(missing) - 1} more) has none"
                )
    device = next(model.parameters()).device
    hooks = strategy.hooks(
        greedy=None if greedy_rows is None else [r.token_ids for r in greedy_rows],
        entropies=None if greedy_rows is None else [r.entropies for r in greedy_rows],
        m=m, device=device, base_model=base_model,
    )

    def write(i: int, gens) -> None:
        q = todo[i]
        greedy_text = None if greedy_rows is None else greedy_rows[i].text
        extra = strategy.sample_stats(greedy_text, [g.text for g in gens], tokenizer)
        rows = []
        for j, (gen, more) in enumerate(zip(gens, extra, strict=True)):
            grade = task.grade(q, gen.text)
            rows.append(SampleRow(q.id, j, gen.text, len(gen.token_ids), gen.finish,
                                  grade.extracted, grade.correct, {**gen.stats, **more}))
        store.add_samples(rows)

    from zerogap.engine import sample

    sample(model, tokenizer, [task.prompt(q) for q in todo], m=m,
           temperature=strategy.temperature, max_new_tokens=max_new_tokens,
           question_ids=[q.id for q in todo], seed=seed, stop=task.stop,
           intervention=hooks.intervention, patch=hooks.patch, max_batch=max_batch,
           progress=progress, on_question=write)
    return len(todo)


def strategy_counts(strategy: Strategy, store: RunStore) -> list[dict[str, Any]]:
    """Per-question ``{"id", "correct", "samples", "first"}`` under the strategy's readout.

    ``correct / samples`` is the readout (TED: correct kept / kept); ``first`` grades sample 0,
    the one-draw readout G-AP uses (0 for All-Zero). This is ``zerogap score``'s counts format.
    """
    grouped: dict[str, list[SampleRow]] = {}
    for row in store.samples():
        grouped.setdefault(row.question_id, []).append(row)
    out = []
    for qid, rows in grouped.items():
        correct, samples = strategy.counts([r.correct for r in rows], [r.stats for r in rows])
        first = int(rows[0].correct) if strategy.samples_model else 0
        out.append({"id": qid, "correct": correct, "samples": samples, "first": first})
    return out
