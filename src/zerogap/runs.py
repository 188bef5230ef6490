"""Resumable runs: a task's questions through the engine into a run store.

:func:`run_sample` and :func:`run_greedy` validate the whole run (settings, strategy, one built
prompt within the model's context: :func:`check_sample`, :func:`check_greedy`, which a front end
calls on its own to refuse bad input before it creates a store) before they record its
configuration in the store (refusing a directory that holds a different run), skip the
questions already stored, and write each question's graded results in one transaction as soon
as it is complete. Killing a run loses at
most the questions in flight; running the same call again finishes it, and because each
sample's noise depends only on (seed, question id, sample index, step), the resumed run stores
the samples an uninterrupted run would have stored.

Strategies (:mod:`zerogap.strategies`) plug in through :func:`strategy_hooks`: a validated
strategy gets what it needs prepared (greedy decodes, reused from a store; a patch source) and
yields a backend-neutral :class:`~zerogap.engine.base.InterventionSpec` that the backend turns
into its own hooks; its per-sample statistics land in each
sample's ``stats``, and its readout kind, recorded with the run, is what
:func:`zerogap.readout.run_counts` applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from zerogap.decoding.specs import answer_marker_ids
from zerogap.engine.base import Backend, Capabilities, Generation, InterventionSpec, SamplingSpec
from zerogap.engine.hf import HFBackend
from zerogap.errors import UserError
from zerogap.models import LoadedModel
from zerogap.progress import ProgressCallback
from zerogap.provenance import package_versions
from zerogap.store import GreedyRow, RunStore, SampleRow
from zerogap.strategies import PrepareContext, Strategy, get_strategy
from zerogap.tasks.base import Question, Task
from zerogap.tasks.extract import ANSWER_MARKERS


def build_strategy(name: str, options: dict | None,
                   capabilities: Capabilities | None = None) -> Strategy:
    """The validated strategy ``name`` with ``options``, its inputs checked.

    With ``capabilities`` (the backend's), a strategy needing one the backend lacks is refused
    with a :class:`~zerogap.errors.UserError` naming both; all before any model loads.
    """
    strategy = get_strategy(name, options or {})
    if capabilities is not None:
        _check_capabilities(strategy, capabilities)
    strategy.check_inputs()
    return strategy


def _check_capabilities(strategy: Strategy, capabilities: Capabilities) -> None:
    missing = capabilities.missing(strategy.requires)
    if missing:
        raise UserError(f"strategy {strategy.name} needs {', '.join(missing)} support, which "
                        "this backend lacks")


def _chosen(strategy: str | Strategy, options: dict | None, capabilities: Capabilities | None
            ) -> Strategy:
    """``strategy`` built here from its name and ``options``, or as given when it is built
    already (by :func:`build_strategy`, which the caller ran before loading a model; its
    ``options`` are its own): then only held against the loaded backend's ``capabilities``
    (where there is one), which can be narrower than its class's (a vLLM engine started
    without full logprobs)."""
    if not isinstance(strategy, Strategy):
        return build_strategy(strategy, options, capabilities)
    if capabilities is not None:
        _check_capabilities(strategy, capabilities)
    return strategy


def strategy_hooks(strategy: Strategy, loaded: LoadedModel, task: Task,
                   questions: Sequence[Question], greedy_store: RunStore, *, split: str, m: int,
                   max_new_tokens: int, backend: Backend,
                   progress: ProgressCallback | None = None
                   ) -> tuple[InterventionSpec, list[GreedyRow] | None]:
    """Prepare ``strategy`` for ``questions`` (in order): its intervention and the greedy rows
    used.

    The strategy asks its context for what it needs: greedy decodes come from ``greedy_store``
    (missing ones are decoded there first, with entropies, under its ``greedy_*`` config
    check); a patch source is loaded on the model's device. Nothing is made unless asked for.
    """

    def greedy_rows() -> list[GreedyRow]:
        # The sampling run that asks checked these prompts and this token limit already.
        decodes = GreedyRun(loaded, task, questions, split,
                            SamplingSpec(m=1, max_new_tokens=max_new_tokens, stop=task.stop),
                            get_strategy("identity", {}), backend)
        decodes.into(greedy_store, progress=progress)
        stored = greedy_store.greedy()
        return [stored[q.id] for q in questions]

    def load(spec: str):
        from zerogap.models import load_beside

        return load_beside(spec, loaded.model).model

    ctx = PrepareContext(m=m, greedy_source=greedy_rows, load_model=load,
                         answer_markers=lambda: answer_marker_ids(loaded.tokenizer,
                                                                  ANSWER_MARKERS))
    hooks = strategy.prepare(ctx)
    return hooks, ctx.greedy() if strategy.needs_greedy else None


def check_first_prompt(loaded: LoadedModel, task: Task, questions: Sequence[Question],
                       max_new_tokens: int) -> None:
    """Build the first question's prompt and check that the model can hold it plus
    ``max_new_tokens``: task options that fail only when a prompt is built (exemplars, a
    missing train split) and token limits beyond the model's context are refused here, before
    a run records its configuration.

    The context is the model config's ``max_position_embeddings`` (positions it was trained
    on); a backend without an in-process model (vLLM) checks its own at admission.
    """
    if not questions:
        return
    prompt = task.prompt(questions[0])
    config = getattr(loaded.model, "config", None)
    context = None if config is None else getattr(
        config.get_text_config(decoder=True), "max_position_embeddings", None)
    if context is None:
        return
    n_prompt = len(loaded.tokenizer(prompt)["input_ids"])
    if n_prompt + max_new_tokens > context:
        raise UserError(f"max_new_tokens {max_new_tokens}: the prompt of {questions[0].id} "
                        f"({n_prompt} tokens) plus {max_new_tokens} new tokens exceeds the "
                        f"model's context of {context} tokens")


def _base_fields(loaded: LoadedModel, backend: Backend, task: Task, split: str
                 ) -> dict[str, Any]:
    fields = {
        "backend": backend.name,
        "noise": backend.noise,
        "model": loaded.spec,
        "model_fingerprint": loaded.fingerprint,
        "task": task.name,
        "task_config": task.config(),
        "split": split,
        "versions": package_versions(),
    }
    # The weights' dtype, so that a resume without --dtype takes the run's own (the HF
    # fingerprint already differs by dtype; vLLM's, taken over the files, does not).
    if loaded.dtype is not None:
        fields["dtype"] = loaded.dtype
    return fields


@dataclass(frozen=True)
class SampleRun:
    """A sampling run checked whole (:func:`check_sample`) and not yet recorded anywhere.

    A front end that must refuse bad input before it creates a store checks first, creates the
    store, then calls :meth:`into`; :func:`run_sample` does both for Python callers.
    """

    loaded: LoadedModel
    task: Task
    questions: Sequence[Question]
    spec: SamplingSpec  # with its stop strings (the task's where none were given)
    split: str
    strategy: Strategy
    backend: Backend

    def into(self, store: RunStore, *, greedy_store: RunStore | None = None,
             progress: ProgressCallback | None = None) -> int:
        """Record the run's configuration in ``store`` (refusing a store of another run) and
        sample every question it lacks; see :func:`run_sample`. Returns questions sampled."""
        loaded, task, spec, chosen, backend = (self.loaded, self.task, self.spec, self.strategy,
                                               self.backend)
        store.check_config({
            **_base_fields(loaded, backend, task, self.split), **spec.to_dict(),
            "strategy": chosen.name, "strategy_config": chosen.config.to_dict(),
            "readout": chosen.readout,
        })
        done = store.completed_questions()
        todo = [q for q in self.questions if q.id not in done]
        if not todo:
            return 0
        if not chosen.samples_model:
            for q in todo:
                store.add_samples([SampleRow(q.id, s, "", 0, "synthetic", None, False, {})
                                   for s in range(spec.m)])
            return len(todo)
        hooks, greedy_rows = strategy_hooks(
            chosen, loaded, task, todo, greedy_store or store, split=self.split, m=spec.m,
            max_new_tokens=spec.max_new_tokens, backend=backend, progress=progress,
        )

        def write(i: int, generations: list[Generation]) -> None:
            q = todo[i]
            if len(generations) != spec.m:  # a backend bug; never store a partial question
                raise RuntimeError(f"{backend.name} returned {len(generations)} samples of "
                                   f"{q.id}, not m = {spec.m}")
            greedy_text = None if greedy_rows is None else greedy_rows[i].text
            extra = chosen.sample_stats(greedy_text, [g.text for g in generations],
                                        loaded.tokenizer)
            rows = []
            for s, (g, more) in enumerate(zip(generations, extra, strict=True)):
                grade = task.grade(q, g.text)
                rows.append(SampleRow(q.id, s, g.text, len(g.token_ids), g.finish,
                                      grade.extracted, grade.correct, {**g.stats, **more}))
            store.add_samples(rows)

        backend.sample([task.prompt(q) for q in todo], spec, question_ids=[q.id for q in todo],
                       intervention=hooks.logits, patch=hooks.patch, progress=progress,
                       on_question=write)
        return len(todo)


def check_sample(loaded: LoadedModel, task: Task, questions: Sequence[Question],
                 spec: SamplingSpec, *, split: str, strategy: str | Strategy = "identity",
                 strategy_options: dict | None = None, max_batch: int | None = None,
                 backend: Backend | None = None) -> SampleRun:
    """The sampling run of :func:`run_sample`, checked whole and written nowhere: the strategy
    against the backend's capabilities, the first prompt within the model's context."""
    backend = backend or HFBackend(loaded.model, loaded.tokenizer, max_batch=max_batch)
    chosen = _chosen(strategy, strategy_options, backend.capabilities)
    spec = spec if spec.stop else replace(spec, stop=task.stop)
    check_first_prompt(loaded, task, questions, spec.max_new_tokens)
    return SampleRun(loaded, task, questions, spec, split, chosen, backend)


def run_sample(loaded: LoadedModel, task: Task, questions: Sequence[Question], store: RunStore,
               spec: SamplingSpec, *, split: str, strategy: str | Strategy = "identity",
               strategy_options: dict | None = None, greedy_store: RunStore | None = None,
               max_batch: int | None = None, progress: ProgressCallback | None = None,
               backend: Backend | None = None) -> int:
    """Sample ``spec.m`` responses for every question not yet in ``store``; grade and store.

    ``spec`` holds every sampling setting (a spec without stop strings takes the task's);
    ``strategy_options`` override the settings of the strategy named ``strategy``, which may
    also be one that :func:`build_strategy` built and checked already. Greedy decodes a strategy
    needs are read from (and, when missing, decoded into) ``greedy_store``, by default ``store``
    itself. All-Zero samples nothing: it stores ``m`` empty, incorrect responses per question
    with ``finish="synthetic"``. ``backend`` samples (default: the HF engine on
    ``loaded.model``); the store records it and its noise scheme, so a resume by another backend
    is refused. The run is checked whole (:func:`check_sample`) before ``store`` records it.

    Returns
    -------
    int
        Number of questions sampled by this call (0 when the run was already complete).
    """
    run = check_sample(loaded, task, questions, spec, split=split, strategy=strategy,
                       strategy_options=strategy_options, max_batch=max_batch, backend=backend)
    return run.into(store, greedy_store=greedy_store, progress=progress)


@dataclass(frozen=True)
class GreedyRun:
    """Greedy decodes checked whole (:func:`check_greedy`) and not yet recorded anywhere."""

    loaded: LoadedModel
    task: Task
    questions: Sequence[Question]
    split: str
    spec: SamplingSpec  # m = 1, the token limit and the task's stop strings
    strategy: Strategy
    backend: Backend

    def into(self, store: RunStore, *, progress: ProgressCallback | None = None) -> int:
        """Record the decodes' ``greedy_*`` configuration in ``store`` and decode every question
        it lacks; see :func:`run_greedy`. Returns questions decoded."""
        loaded, task, chosen, backend = self.loaded, self.task, self.strategy, self.backend
        store.check_config({
            **_base_fields(loaded, backend, task, self.split),
            "greedy_max_new_tokens": self.spec.max_new_tokens, "greedy_strategy": chosen.name,
            "greedy_strategy_config": chosen.config.to_dict(),
        })
        done = store.completed_greedy()
        todo = [q for q in self.questions if q.id not in done]
        if not todo:
            return 0
        hooks, _ = strategy_hooks(chosen, loaded, task, todo, store, split=self.split, m=1,
                                  max_new_tokens=self.spec.max_new_tokens, backend=backend)
        if hooks.logits is not None:
            raise UserError(f"strategy {chosen.name!r} edits logits; greedy decodes take "
                            "patches only")

        def write(i: int, g: Generation) -> None:
            q = todo[i]
            grade = task.grade(q, g.text)
            store.add_greedy([GreedyRow(q.id, g.token_ids, g.text, g.finish, grade.extracted,
                                        grade.correct, g.entropies)])

        backend.greedy([task.prompt(q) for q in todo], self.spec,
                       entropies=backend.capabilities.entropies, patch=hooks.patch,
                       progress=progress, on_question=write)
        return len(todo)


def check_greedy(loaded: LoadedModel, task: Task, questions: Sequence[Question], *, split: str,
                 max_new_tokens: int, strategy: str | Strategy = "identity",
                 strategy_options: dict | None = None, max_batch: int | None = None,
                 backend: Backend | None = None) -> GreedyRun:
    """The greedy decodes of :func:`run_greedy`, checked whole and written nowhere."""
    backend = backend or HFBackend(loaded.model, loaded.tokenizer, max_batch=max_batch)
    chosen = _chosen(strategy, strategy_options, backend.capabilities)
    if chosen.needs_greedy or not chosen.samples_model:
        raise UserError(f"strategy {chosen.name!r} does not apply to greedy decodes")
    spec = SamplingSpec(m=1, max_new_tokens=max_new_tokens, stop=task.stop)
    check_first_prompt(loaded, task, questions, max_new_tokens)
    return GreedyRun(loaded, task, questions, split, spec, chosen, backend)


def run_greedy(loaded: LoadedModel, task: Task, questions: Sequence[Question], store: RunStore,
               *, split: str, max_new_tokens: int, strategy: str | Strategy = "identity",
               strategy_options: dict | None = None, max_batch: int | None = None,
               progress: ProgressCallback | None = None, backend: Backend | None = None) -> int:
    """Greedy-decode (with per-step entropies where ``backend`` gives them) every question not
    yet in the greedy table.

    Its fields are recorded as ``greedy_*`` so that a sampling run and its greedy decodes (which
    RailCap, TED and LNE-blocking reuse) share one run directory. Only strategies that need no
    greedy decode and edit no logits (identity, shortcut) apply; ``strategy`` is a name (with
    ``strategy_options``) or a built strategy, as for :func:`run_sample`. Returns questions
    decoded.
    """
    run = check_greedy(loaded, task, questions, split=split, max_new_tokens=max_new_tokens,
                       strategy=strategy, strategy_options=strategy_options,
                       max_batch=max_batch, backend=backend)
    return run.into(store, progress=progress)


def run_filter(source: RunStore, store: RunStore, greedy_store: RunStore, tokenizer, *,
               strategy: str | Strategy, strategy_options: dict | None = None) -> int:
    """A filtering strategy's run made from the plain samples of ``source``: nothing sampled.

    A strategy whose decoding is plain sampling (TED: ``Strategy.filters_only``) draws exactly
    what an identity run of the same model, sampling settings and seed draws, so its run is
    that run's samples with the strategy's per-sample statistics added (from the greedy decodes
    in ``greedy_store``). The store records ``source``'s configuration with this strategy's and
    ``samples_of`` (the source directory's name). Returns questions added; like the sampling
    runs it resumes, and refuses a source of another strategy or a question without a decode.
    """
    chosen = _chosen(strategy, strategy_options, None)
    if not chosen.filters_only:
        raise UserError(f"strategy {chosen.name!r} changes the decoding; it cannot reuse "
                        "samples")
    config = source.config()
    if config.get("strategy") != "identity":
        raise UserError(f"{source.run_dir} holds a {config.get('strategy')!r} run, not plain "
                        "samples")
    store.check_config({
        **{k: v for k, v in config.items() if not k.startswith("greedy_")},
        "strategy": chosen.name, "strategy_config": chosen.config.to_dict(),
        "readout": chosen.readout, "samples_of": source.run_dir.name,
    })
    done = store.completed_questions()
    greedy = greedy_store.greedy()
    grouped: dict[str, list[SampleRow]] = {}
    for row in source.samples():
        if row.question_id not in done:
            grouped.setdefault(row.question_id, []).append(row)
    missing = [q for q in grouped if q not in greedy]
    if missing:
        raise UserError(f"{greedy_store.run_dir} lacks the greedy decode of {missing[0]} (and "
                        f"{len(missing) - 1} more) that {chosen.name} filters against")
    for qid, rows in grouped.items():
        extra = chosen.sample_stats(greedy[qid].text, [r.text for r in rows], tokenizer)
        store.add_samples([replace(r, stats={**r.stats, **more})
                           for r, more in zip(rows, extra, strict=True)])
    return len(grouped)
