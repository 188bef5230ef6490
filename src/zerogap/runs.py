"""Resumable runs: one validated request, one preparation, one run into a store.

A :class:`RunRequest` is one run as asked (model, task and split, questions, strategy,
sampling spec, backend and engine options; greedy decodes or samples), validated whole when it
is made, before any model loads: its questions (at least one; the first prompt is built, so
task options that fail only then fail here), the strategy's inputs (a neuron list, a patch
source: read once and kept), whether the strategy applies to greedy decodes. The strategy comes
from :func:`build_strategy`, which holds it against the capabilities its backend declares.

:func:`prepare` holds the request against the engine that runs it: the one given (a study
loads each model once for many runs) or the one it loads (:func:`check_engine` once, then
:func:`start_engine`); the strategy against the loaded backend's capabilities (a vLLM engine
started without full logprobs has fewer than its class declares) and the first prompt plus the
token limit against the model's context. It returns a :class:`SampleRun` or :class:`GreedyRun`,
written nowhere yet, so a front end refuses bad input before it creates a store; ``into``
records the run's configuration in a store (refusing a directory that holds a different run),
skips the questions already stored, and writes each question's graded results in one
transaction as soon as it is complete. Killing a run loses at most the questions in flight;
running the same call again finishes it, and because each sample's noise depends only on (seed,
question id, sample index, step), the resumed run stores the samples an uninterrupted run would
have stored. A run may give each question its own m (``RunRequest.samples``: an allocated
study's, :mod:`zerogap.uncertainty.allocation`): question q then holds sample indices
``0 .. m_q - 1``, the very samples a uniform run of the same seed draws there, and a larger m_q
later adds only the indices it lacks.

Strategies (:mod:`zerogap.strategies`) declare what they need prepared; a
:class:`LoadedEngine` gives it to them (:meth:`LoadedEngine.intervention`: greedy decodes,
reused from a store, a patch source loaded once) and hands the backend-neutral
:class:`~zerogap.engine.base.InterventionSpec` they build to its backend. Their per-sample
statistics land in each sample's ``stats``, and their readout kind, recorded with the run, is
what :func:`zerogap.readout.run_counts` applies. The lm-evaluation-harness model
(:mod:`zerogap.harness`) serves its requests through the same engine, checks and preparation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from zerogap.decoding.specs import answer_marker_ids
from zerogap.engine.base import (
    DEFAULT_BACKEND,
    Backend,
    Capabilities,
    EngineOptions,
    Generation,
    InterventionSpec,
    SamplingSpec,
    WeightDtype,
    backend_capabilities,
    backend_class,
    concrete_dtype,
)
from zerogap.errors import UserError
from zerogap.models import LoadedModel
from zerogap.progress import ProgressCallback
from zerogap.provenance import package_versions
from zerogap.store import (
    DB_NAME,
    M_RAISED_FROM,
    PER_QUESTION,
    GreedyRow,
    RunStore,
    SampleRow,
    inspect_store,
)
from zerogap.strategies import PLAIN, PrepareContext, Strategy, get_strategy
from zerogap.tasks.base import Question, Task
from zerogap.tasks.extract import ANSWER_MARKERS


def build_strategy(name: str, options: dict | None, backend: str | None = None) -> Strategy:
    """The validated strategy ``name`` with ``options``, held against the capabilities
    ``backend`` declares (None: no backend yet); all before any model loads.

    A strategy needing a capability the backend lacks is refused by :func:`check_strategy`.
    """
    strategy = get_strategy(name, options or {})
    if backend is not None:
        check_strategy(strategy, backend_capabilities(backend), backend)
    return strategy


def check_strategy(strategy: Strategy | type[Strategy], capabilities: Capabilities,
                   backend: str, name: str | None = None) -> None:
    """Refuse ``strategy`` (a built one or its class, registered as ``name``) when it needs a
    capability ``capabilities`` lacks, in one line naming both and the backend."""
    missing = capabilities.missing(strategy.requires)
    if missing:
        name = name or getattr(strategy, "name", "?")
        raise UserError(f"strategy {name} needs {', '.join(missing)} support, which the "
                        f"{backend} backend lacks")


def first_questions(questions: Sequence[Question], limit: int | None) -> tuple[Question, ...]:
    """The first ``limit`` of ``questions`` (all of them when None): the one rule of
    ``--limit``, at least 1."""
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1, got {limit}")
    return tuple(questions[:limit])


# The weight dtype a run or a study resumes in: the one its stores record (a flag may say
# otherwise, and the fingerprint check then names the mismatch).


def resume_dtype(flag: str | None, run_dirs) -> str:
    """The weight dtype a run is made or resumed in.

    ``flag`` (``--dtype``) wins; without it, the dtype the first of ``run_dirs`` holding a run
    records, so a stored run resumes as it was made. A run stored before runs recorded their
    dtype was made in float32 (then the default), unless ``--dtype`` said otherwise, in which
    case the fingerprint check names the mismatch. Otherwise ``auto``, made concrete when the
    run is prepared (:func:`check_engine`).
    """
    from zerogap.store import DB_NAME, inspect_store

    for folder in run_dirs if flag is None else ():
        if folder is not None and (folder / DB_NAME).is_file() and inspect_store(folder / DB_NAME):
            with RunStore(folder, create=False) as store:
                config = store.config()
            if config:
                return config.get("dtype", "float32")
    return flag or "auto"


def study_folder_dtype(flag: str | None, out: Path) -> str:
    """The weight dtype a study samples in, as given: ``flag`` (``--dtype``) when given, else
    the dtype the study folder ``out`` records (its record, else its runs: a study made before
    in float32 resumes into its own runs), else ``auto``, which the study makes concrete where
    its jobs run (the study's executor checks the engine there)."""
    import json

    from zerogap.analysis.folder import STUDY_FILE

    record = out / STUDY_FILE
    if flag is None and record.is_file():
        return json.loads(record.read_text(encoding="utf-8")).get("dtype", "float32")
    runs = sorted((out / "runs").iterdir()) if (out / "runs").is_dir() else []
    return resume_dtype(flag, runs)


def study_dtype(flag: str | None, out: Path, backend: str, device: str | None) -> WeightDtype:
    """:func:`study_folder_dtype` made concrete on this machine
    (:func:`~zerogap.engine.base.concrete_dtype`)."""
    return concrete_dtype(study_folder_dtype(flag, out), backend, device)


def check_engine(backend: str, options: EngineOptions) -> EngineOptions:
    """``options`` checked on this machine for ``backend`` (vLLM importable, the HF engine's
    device present), before any model loads, with ``dtype="auto"`` made concrete
    (:func:`~zerogap.engine.base.concrete_dtype`: runs are recorded by the dtype the weights
    hold). Called once per process; :func:`start_engine` takes what it returns."""
    backend_class(backend).check_available(options)
    return replace(options, dtype=concrete_dtype(options.dtype, backend, options.device))


def start_engine(model: str, backend: str, options: EngineOptions) -> LoadedEngine:
    """Model ``model`` loaded on ``backend`` with ``options`` (as :func:`check_engine` returned
    them). On a backend that holds the weights in its own engine (vLLM), ``loaded.model`` is
    None and ``loaded.fingerprint`` is :func:`zerogap.models.files_fingerprint` of the folder."""
    return LoadedEngine(*backend_class(backend).start(model, options))


@dataclass
class LoadedEngine:
    """A model loaded on its backend: what every run of that model samples with.

    ``sources`` keeps the patch source models (shortcut's base) loaded beside the model, one
    per spec, so the runs and requests that ask for one load it once, until
    :meth:`release_sources`.
    """

    loaded: LoadedModel
    backend: Backend
    sources: dict[str, Any] = field(default_factory=dict, repr=False)

    def accept(self, strategy: Strategy) -> None:
        """Refuse ``strategy`` when this backend, as started, lacks a capability it needs."""
        check_strategy(strategy, self.backend.capabilities, self.backend.name)

    def context(self) -> int | None:
        """The model's context in tokens (its config's ``max_position_embeddings``, the
        positions it was trained on), or None where the backend holds no in-process model
        (vLLM checks its own at admission) or the config states none."""
        config = getattr(self.loaded.model, "config", None)
        if config is None:
            return None
        return getattr(config.get_text_config(decoder=True), "max_position_embeddings", None)

    def check_fits(self, prompts: Sequence[str], names: Sequence[str], max_new_tokens: int,
                   limit: str = "max_new_tokens") -> None:
        """Refuse a prompt (``names[i]`` names ``prompts[i]``) that, with ``max_new_tokens``
        (spelled ``limit`` to the user), exceeds the model's context: a model that cut the
        prompt's start would answer another question."""
        context = self.context()
        if context is None:
            return
        for prompt, name in zip(prompts, names, strict=True):
            n_prompt = len(self.loaded.tokenizer(prompt)["input_ids"])
            if n_prompt + max_new_tokens > context:
                raise UserError(f"{limit} {max_new_tokens}: the prompt of {name} ({n_prompt} "
                                f"tokens) plus {max_new_tokens} new tokens exceeds the model's "
                                f"context of {context} tokens")

    def intervention(self, strategy: Strategy, *, m: int,
                     greedy: Callable[[], Sequence[Any]] | None = None) -> InterventionSpec:
        """``strategy``'s intervention for one engine call of ``m`` samples per question,
        ``greedy`` giving the call's greedy decodes in question order when it asks for them
        (nothing is decoded or loaded unless asked for)."""
        tokenizer = self.loaded.tokenizer
        return strategy.prepare(PrepareContext(
            m=m, greedy_source=greedy, load_model=self._source,
            answer_markers=lambda: answer_marker_ids(tokenizer, ANSWER_MARKERS)))

    def _source(self, spec: str) -> Any:
        if spec not in self.sources:
            from zerogap.models import load_beside

            self.sources[spec] = load_beside(spec, self.loaded.model).model
        return self.sources[spec]

    def release_sources(self) -> None:
        """Let the patch sources go (their memory is the next run's)."""
        self.sources.clear()

    def close(self) -> None:
        """Release the engine (a vLLM engine is shut down); unusable afterwards."""
        self.release_sources()
        self.backend.close()


@dataclass(frozen=True)
class RunRequest:
    """One run as asked, validated whole when made, before any model loads.

    ``questions`` are the ones to run (:func:`first_questions`); ``strategy`` is built for
    ``backend`` (:func:`build_strategy`); ``spec`` holds every sampling setting (m = 1 for
    greedy decodes, which ``greedy`` asks for; a spec without stop strings takes the task's);
    ``engine`` says how ``model`` loads when :func:`prepare` loads it. ``chat`` is a chat
    template (Jinja text or ``"tokenizer"``) and system instruction, applied with the loaded
    model's tokenizer (:func:`zerogap.tasks.chat.chat_prompts`), or None. ``samples`` gives
    each question its own m (question id -> m_q, every question one; ``spec.m`` is then
    unused): the run is recorded with ``m = "per question"``, needs a backend that draws ranges
    of sample indices, and a question stored with fewer samples gets the ones it lacks.
    """

    model: str
    task: Task
    split: str
    questions: tuple[Question, ...]
    strategy: Strategy
    spec: SamplingSpec
    greedy: bool = False
    backend: str = DEFAULT_BACKEND
    engine: EngineOptions = field(default_factory=EngineOptions)
    chat: tuple[str | None, str | None] | None = None
    samples: Mapping[str, int] | None = None
    first_prompt: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.questions:
            raise UserError(f"task {self.task.name} has no questions in split {self.split!r}")
        if self.samples is not None:
            self._check_samples(self.samples)
        if self.greedy and (self.strategy.needs_greedy or not self.strategy.samples_model):
            raise UserError(f"strategy {self.strategy.name!r} does not apply to greedy decodes")
        if self.greedy and self.spec.m != 1:
            raise UserError(f"greedy decodes draw one response per question, not m = "
                            f"{self.spec.m}")
        if not self.spec.stop:
            object.__setattr__(self, "spec", replace(self.spec, stop=self.task.stop))
        self.strategy.check_inputs()
        # Task options that fail only when a prompt is built fail here; prepare measures it.
        object.__setattr__(self, "first_prompt", self.task.prompt(self.questions[0]))

    def _check_samples(self, samples: Mapping[str, int]) -> None:
        """Refuse a per-question m this run cannot draw, in one line."""
        if self.greedy:
            raise UserError("greedy decodes draw one response per question, not m per question")
        if not backend_capabilities(self.backend).sample_ranges:
            raise UserError(f"the {self.backend} backend cannot draw a different m per "
                            "question (an allocated study); use the hf or vllm backend")
        limit = SamplingSpec.__dataclass_fields__["m"].metadata["max"]
        for q in self.questions:
            m = samples.get(q.id)
            if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= limit:
                raise UserError(f"question {q.id}: samples per question must be an integer "
                                f"from 1 to {limit}, got {m!r}")


def prepare(request: RunRequest, engine: LoadedEngine | None = None) -> SampleRun | GreedyRun:
    """The run ``request`` asks for, checked against the engine that runs it and written
    nowhere: ``engine`` (``request.model`` loaded already), or the one loaded here.

    Checked once, here: the strategy against the loaded backend's capabilities, the first
    prompt (through the chat template, when the request has one) plus the token limit against
    the model's context.
    """
    if engine is None:
        engine = start_engine(request.model, request.backend,
                              check_engine(request.backend, request.engine))
    task = request.task
    if request.chat is not None:
        from zerogap.tasks.chat import chat_prompts

        template, system = request.chat
        task = chat_prompts(task, engine.loaded.tokenizer, template=template, system=system)
    engine.accept(request.strategy)
    first = request.questions[0]
    prompt = request.first_prompt if task is request.task else task.prompt(first)
    engine.check_fits([prompt], [first.id], request.spec.max_new_tokens)
    if request.greedy:
        return GreedyRun(engine, task, request.questions, request.spec, request.split,
                         request.strategy)
    return SampleRun(engine, task, request.questions, request.spec, request.split,
                     request.strategy, request.samples)


def check_resume(request: RunRequest, run_dir: Path, greedy_dir: Path | None = None) -> int:
    """How many of ``request``'s questions ``run_dir`` still lacks, all read before any model
    loads: a stored run whose settings differ from the request's is refused here (the
    :class:`StoreError` :meth:`RunStore.check_config` raises after the load, naming every
    differing field), and 0 means a resume has nothing to do, so nothing need load.

    Compared here, without importing torch: every field a run records that the request
    fixes (backend, model spec, task and its options, split, weight dtype once concrete,
    sampling settings, strategy and its options, readout, the prompting: :func:`_prompting`),
    and the greedy decodes' fields in ``greedy_dir`` (default ``run_dir``) where the strategy
    reuses them. The model's fingerprint, the backend's noise scheme and the tokenizer's own
    chat template need the loaded model (or its backend) and are checked when the run is
    recorded. A larger m is no
    difference: the questions get the sample indices they lack.
    """
    task, strategy = request.task, request.strategy
    known: dict[str, Any] = {"backend": request.backend, "model": request.model,
                             "task": task.name, "split": request.split}
    if request.engine.dtype not in (None, "auto"):
        known["dtype"] = request.engine.dtype
    if request.greedy:
        own = _greedy_fields(request.spec.max_new_tokens, strategy)
    else:
        own = _sample_fields(request.spec, request.samples, strategy)
    reused = _greedy_fields(request.spec.max_new_tokens, get_strategy(PLAIN))
    if strategy.needs_greedy and greedy_dir is not None and _stored(greedy_dir):
        with RunStore(greedy_dir, create=False) as store:
            store.refuse_other({**known, **_prompting(request, store), **reused})
    if not _stored(run_dir):
        return len(request.questions)
    with RunStore(run_dir, create=False) as store:
        store.refuse_other({**known, **_prompting(request, store), **own,
                            **(reused if strategy.needs_greedy and greedy_dir is None else {})})
        if request.greedy:
            done = store.completed_greedy()
            return sum(q.id not in done for q in request.questions)
        counts = store.sample_counts()
    wanted = request.samples or {}
    return sum(counts.get(q.id, 0) < wanted.get(q.id, request.spec.m) for q in request.questions)


def _prompting(request: RunRequest, store: RunStore) -> dict[str, Any]:
    """The ``task_config`` ``request`` records, for :func:`check_resume`: the task's options,
    and with a chat the system instruction and the template's digest. The tokenizer's own
    template is read once the model loads, so its digest is taken as ``store`` holds it here
    (the recorded run checks it then)."""
    from zerogap.tasks.chat import TOKENIZER_TEMPLATE, template_digest

    config = request.task.config()
    template, system = request.chat if request.chat is not None else (None, None)
    if system:
        config["system_instruction"] = system
    if template == TOKENIZER_TEMPLATE:
        stored = store.config().get("task_config") or {}
        if "chat_template" in stored:
            config["chat_template"] = stored["chat_template"]
    elif template is not None:
        config["chat_template"] = template_digest(template)
    return {"task_config": config}


def _stored(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a whole run store (checked read-only)."""
    return (run_dir / DB_NAME).is_file() and inspect_store(run_dir / DB_NAME)


def _sample_fields(spec: SamplingSpec, samples: Mapping[str, int] | None,
                   strategy: Strategy) -> dict[str, Any]:
    """The configuration fields a sampling run records beside :func:`_base_fields`."""
    return {**spec.to_dict(), **({} if samples is None else {"m": PER_QUESTION}),
            "strategy": strategy.name, "strategy_config": strategy.config.to_dict(),
            "readout": strategy.readout}


def _greedy_fields(max_new_tokens: int, strategy: Strategy) -> dict[str, Any]:
    """The configuration fields greedy decodes record beside :func:`_base_fields`."""
    return {"greedy_max_new_tokens": max_new_tokens, "greedy_strategy": strategy.name,
            "greedy_strategy_config": strategy.config.to_dict()}


def _base_fields(engine: LoadedEngine, task: Task, split: str) -> dict[str, Any]:
    loaded, backend = engine.loaded, engine.backend
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


def _staged(progress: ProgressCallback | None, stage: str) -> ProgressCallback | None:
    """``progress`` with the engine's events relabelled ``stage``: a run's greedy pass and its
    sampling are two stages, each named, not two bars both called "questions"."""
    if progress is None:
        return None
    return lambda event: progress(replace(event, stage=stage))


def _added_stats(strategy: Strategy, greedy_text: str | None, stored: Sequence[SampleRow],
                 texts: Sequence[str], tokenizer) -> list[dict]:
    """``strategy``'s statistics of samples ``texts`` added after a question's ``stored`` ones.

    :meth:`~zerogap.strategies.Strategy.sample_stats` sees all of the question's samples, in
    index order. A sample's statistics may depend on the samples before it (TED drops a
    duplicate of an earlier kept one) but never on later ones, so the stored samples' must come
    out unchanged; otherwise the first m_q samples would read otherwise than a run of m_q.
    """
    every = strategy.sample_stats(greedy_text, [*(r.text for r in stored), *texts], tokenizer)
    for row, more in zip(stored, every, strict=False):
        if any(row.stats.get(key) != value for key, value in more.items()):
            raise RuntimeError(f"strategy {strategy.name}: the statistics of sample "
                               f"{row.sample} of {row.question_id} changed when later samples "
                               "were added; sample_stats must read only earlier samples")
    return every[len(stored):]


@dataclass(frozen=True)
class SampleRun:
    """A sampling run checked whole (:func:`prepare`) and not yet recorded anywhere;
    ``samples`` is each question's m where the run gives each its own (None: ``spec.m``)."""

    engine: LoadedEngine
    task: Task
    questions: Sequence[Question]
    spec: SamplingSpec  # with its stop strings (the task's where none were given)
    split: str
    strategy: Strategy
    samples: Mapping[str, int] | None = None

    def into(self, store: RunStore, *, greedy_store: RunStore | None = None,
             progress: ProgressCallback | None = None) -> int:
        """Record the run's configuration in ``store`` (refusing a store of another run) and
        sample every question it lacks, or the samples a question lacks of its own m (samples
        beyond it are kept). Greedy decodes the strategy needs are read from (and, when
        missing, decoded into) ``greedy_store``, by default ``store`` itself. A strategy that
        samples nothing (All-Zero) stores ``m`` empty, incorrect responses per question with
        ``finish="synthetic"``. Returns questions sampled (0 when the run was complete).
        """
        task, spec, chosen, backend = self.task, self.spec, self.strategy, self.engine.backend
        store.check_config({**_base_fields(self.engine, task, self.split),
                            **_sample_fields(spec, self.samples, chosen)})
        stored = store.sample_counts()
        wanted = {q.id: spec.m if self.samples is None else self.samples[q.id]
                  for q in self.questions}
        todo = [q for q in self.questions if stored.get(q.id, 0) < wanted[q.id]]
        if not todo:
            store.settle_m()
            return 0
        ranges = [range(stored.get(q.id, 0), wanted[q.id]) for q in todo]
        if not chosen.samples_model:
            for q, indices in zip(todo, ranges, strict=True):
                store.add_samples([SampleRow(q.id, s, "", 0, "synthetic", None, False, {})
                                   for s in indices])
                store.settle_m()
            return len(todo)
        rows: list[GreedyRow] = []

        def greedy() -> list[GreedyRow]:
            # Greedy decodes of this run's checked prompts and token limit, decoded into the
            # greedy store where missing, read once.
            if not rows:
                source = greedy_store or store
                what = "trajectories and entropies" if chosen.needs_entropy else "trajectories"
                GreedyRun(self.engine, task, todo,
                          SamplingSpec(m=1, max_new_tokens=spec.max_new_tokens, stop=spec.stop),
                          self.split, get_strategy(PLAIN)).into(
                    source, progress=progress, stage=f"greedy decodes for {chosen.name}'s {what}")
                stored = source.greedy()
                rows[:] = [stored[q.id] for q in todo]
            return rows

        hooks = self.engine.intervention(chosen, m=max(r.stop for r in ranges), greedy=greedy)
        if chosen.needs_greedy:  # a filter's statistics read them though its decoding does not
            greedy()

        def write(i: int, generations: list[Generation]) -> None:
            q, indices = todo[i], ranges[i]
            if len(generations) != len(indices):  # a backend bug; never store a partial draw
                raise RuntimeError(f"{backend.name} returned {len(generations)} samples of "
                                   f"{q.id}, not the {len(indices)} asked for")
            earlier = store.question_samples(q.id) if indices.start else []
            extra = _added_stats(chosen, rows[i].text if rows else None, earlier,
                                 [g.text for g in generations], self.engine.loaded.tokenizer)
            # What the edit set for this question (LNE-blocking's count), from any backend.
            edited = {} if hooks.logits is None else hooks.logits.question_stats(i)
            graded = []
            for s, g, more in zip(indices, generations, extra, strict=True):
                grade = task.grade(q, g.text)
                graded.append(SampleRow(q.id, s, g.text, len(g.token_ids), g.finish,
                                        grade.extracted, grade.correct,
                                        {**g.stats, **edited, **more}))
            store.add_samples(graded)

        # A backend is asked for ranges of sample indices only where a run needs them.
        extend = {} if all(r == range(spec.m) for r in ranges) else {"indices": ranges}
        backend.sample([task.prompt(q) for q in todo], spec, question_ids=[q.id for q in todo],
                       intervention=hooks.logits, patch=hooks.patch,
                       progress=_staged(progress, f"{chosen.name} samples"),
                       on_question=write, **extend)
        store.settle_m()
        return len(todo)


@dataclass(frozen=True)
class GreedyRun:
    """Greedy decodes checked whole (:func:`prepare`) and not yet recorded anywhere.

    Their fields are recorded as ``greedy_*`` so that a sampling run and its greedy decodes
    (which RailCap, TED and LNE-blocking reuse) share one run directory.
    """

    engine: LoadedEngine
    task: Task
    questions: Sequence[Question]
    spec: SamplingSpec  # m = 1, the token limit and the stop strings
    split: str
    strategy: Strategy

    def into(self, store: RunStore, *, progress: ProgressCallback | None = None,
             stage: str = "greedy decodes") -> int:
        """Record the decodes' ``greedy_*`` configuration in ``store`` and decode (with per-step
        entropies where the backend gives them) every question it lacks, reported to
        ``progress`` as ``stage``. Returns questions decoded."""
        task, chosen, backend = self.task, self.strategy, self.engine.backend
        store.check_config({**_base_fields(self.engine, task, self.split),
                            **_greedy_fields(self.spec.max_new_tokens, chosen)})
        done = store.completed_greedy()
        todo = [q for q in self.questions if q.id not in done]
        if not todo:
            return 0
        hooks = self.engine.intervention(chosen, m=1)
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
                       progress=_staged(progress, stage), on_question=write)
        return len(todo)


def _python_run(loaded: LoadedModel, task: Task, questions: Sequence[Question],
                spec: SamplingSpec, *, split: str, strategy: str | Strategy,
                strategy_options: dict | None, greedy: bool, max_batch: int | None,
                backend: Backend | None) -> SampleRun | GreedyRun:
    """The run of :func:`run_sample` or :func:`run_greedy` on a model loaded already."""
    if backend is None:
        from zerogap.engine.hf import HFBackend

        backend = HFBackend(loaded.model, loaded.tokenizer, max_batch=max_batch)
    if not isinstance(strategy, Strategy):
        strategy = build_strategy(strategy, strategy_options, backend.name)
    request = RunRequest(loaded.spec, task, split, tuple(questions), strategy, spec,
                         greedy=greedy, backend=backend.name)
    return prepare(request, LoadedEngine(loaded, backend))


def run_sample(loaded: LoadedModel, task: Task, questions: Sequence[Question], store: RunStore,
               spec: SamplingSpec, *, split: str, strategy: str | Strategy = PLAIN,
               strategy_options: dict | None = None, greedy_store: RunStore | None = None,
               max_batch: int | None = None, progress: ProgressCallback | None = None,
               backend: Backend | None = None) -> int:
    """For Python callers holding a loaded model: sample ``spec.m`` responses for every
    question not yet in ``store``, grade and store them (:class:`SampleRun`).

    ``strategy`` is a name (with ``strategy_options``) or a strategy :func:`build_strategy`
    built; ``backend`` samples (default: the HF engine on ``loaded.model``); the store records
    it and its noise scheme, so a resume by another backend is refused. The run is requested
    and prepared whole (:class:`RunRequest`, :func:`prepare`) before ``store`` records it.
    Returns questions sampled.
    """
    run = _python_run(loaded, task, questions, spec, split=split, strategy=strategy,
                      strategy_options=strategy_options, greedy=False, max_batch=max_batch,
                      backend=backend)
    assert isinstance(run, SampleRun)
    return run.into(store, greedy_store=greedy_store, progress=progress)


def run_greedy(loaded: LoadedModel, task: Task, questions: Sequence[Question], store: RunStore,
               *, split: str, max_new_tokens: int, strategy: str | Strategy = PLAIN,
               strategy_options: dict | None = None, max_batch: int | None = None,
               progress: ProgressCallback | None = None, backend: Backend | None = None) -> int:
    """:func:`run_sample`'s twin for greedy decodes (:class:`GreedyRun`): only strategies that
    need no greedy decode and edit no logits (identity, shortcut) apply. Returns questions
    decoded."""
    run = _python_run(loaded, task, questions, SamplingSpec(m=1, max_new_tokens=max_new_tokens),
                      split=split, strategy=strategy, strategy_options=strategy_options,
                      greedy=True, max_batch=max_batch, backend=backend)
    return run.into(store, progress=progress)


def run_filter(source: RunStore, store: RunStore, greedy_store: RunStore, tokenizer, *,
               strategy: Strategy) -> int:
    """A filtering strategy's run made from the plain samples of ``source``: nothing sampled.

    A strategy whose decoding is plain sampling (TED: ``Strategy.filters_only``) draws exactly
    what an identity run of the same model, sampling settings and seed draws, so its run is
    that run's samples with the strategy's per-sample statistics added (from the greedy decodes
    in ``greedy_store``). The store records ``source``'s configuration with this strategy's and
    ``samples_of`` (the source directory's name). Returns questions added (or extended: a
    source question that gained samples, an allocated study's larger m_q, gets them here too);
    like the sampling runs it resumes, and refuses a source of another strategy or a question
    without a decode.
    """
    if not strategy.filters_only:
        raise UserError(f"strategy {strategy.name!r} changes the decoding; it cannot reuse "
                        "samples")
    config = source.config()
    if config.get("strategy") != PLAIN:
        raise UserError(f"{source.run_dir} holds a {config.get('strategy')!r} run, not plain "
                        "samples")
    store.check_config({
        **{k: v for k, v in config.items()
           if not k.startswith("greedy_") and k != M_RAISED_FROM},
        "strategy": strategy.name, "strategy_config": strategy.config.to_dict(),
        "readout": strategy.readout, "samples_of": source.run_dir.name,
    })
    done = store.sample_counts()
    greedy = greedy_store.greedy()
    grouped: dict[str, list[SampleRow]] = {}
    for row in source.samples():
        grouped.setdefault(row.question_id, []).append(row)
    grouped = {q: rows for q, rows in grouped.items() if len(rows) > done.get(q, 0)}
    missing = [q for q in grouped if q not in greedy]
    if missing:
        raise UserError(f"{greedy_store.run_dir} lacks the greedy decode of {missing[0]} (and "
                        f"{len(missing) - 1} more) that {strategy.name} filters against")
    for qid, rows in grouped.items():
        kept = store.question_samples(qid) if qid in done else []
        added = rows[len(kept):]
        extra = _added_stats(strategy, greedy[qid].text, kept, [r.text for r in added],
                             tokenizer)
        store.add_samples([replace(r, stats={**r.stats, **more})
                           for r, more in zip(added, extra, strict=True)])
    return len(grouped)

