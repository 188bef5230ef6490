"""The restoration study in one call (paper arXiv 2608.07341 §5): sample, score, report.

A study is one or more *settings* (a clean model, a contaminated model and a task, optionally a
split into leaked and unleaked questions) and a list of strategies. :func:`evaluate` samples
whatever is missing into run directories named by their configuration's content (so a rerun,
a larger ``limit`` or an added strategy resumes instead of starting over), then writes
``study.json`` and the report (:mod:`zerogap.analysis.report`). Per setting it runs:

* the clean model twice (seeds ``seed`` and ``seed + 1``): the reference and an independent
  second batch, for the measured noise floor and Figure 2;
* greedy decodes of both models, once, shared by every strategy that needs them (RailCap, TED,
  LNE-blocking; the clean ones give Figure 1 b/d);
* identity on the contaminated model (seed ``seed + 2``, so no run shares noise with the
  clean ones: the noise floor assumes independent batches), then the design checks
  (:mod:`zerogap.analysis.design`), measured on the two models alone before any other
  strategy samples;
* shortcut neurons, located once per (models, leaked questions, calibration) and saved;
* each other strategy on the contaminated model (seed ``seed + 2``); TED filters identity's
  samples rather than drawing the same ones again, and All-Zero samples nothing (the report
  scores it from the clean counts);
* the controls: strategies applied to the clean model (``StudySpec.controls``);
* the teacher-forced ranks of Figure 1 b/d.

Every run is sampled by ``study.backend``: zerogap's HF engine or vLLM
(:mod:`zerogap.engine.base`); a backend's runs are kept in directories of their own, and a
strategy the backend cannot run is refused by :func:`prepare`.

A study's sweep (:class:`~zerogap.study.spec.SweepSpec`) adds one such setting per
contamination strength of a ``zerogap contaminate`` folder; variants the folder lacks are first
trained there by :func:`zerogap.pipelines.contamination.build`, the command's own code path.

The study sits above :mod:`zerogap.runs` and touches the model side (:mod:`zerogap.runs`,
:mod:`zerogap.models`, :mod:`zerogap.strategies`, :mod:`zerogap.pipelines.neurons`) only inside
the functions that sample: importing it costs no torch.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerogap.analysis.report import STUDY_FILE, STUDY_FORMAT, Report, slug, write_report
from zerogap.analysis.score import REPEAT
from zerogap.engine.base import DEFAULT_BACKEND
from zerogap.errors import DataError, UserError, ZerogapError
from zerogap.io.files import write_text
from zerogap.io.jsonlines import read_json_object
from zerogap.progress import ProgressCallback
from zerogap.study.spec import SettingSpec, StudySpec, SweepSpec, read_split, study_toml

if TYPE_CHECKING:
    from zerogap.engine.base import EngineOptions
    from zerogap.strategies import Strategy

RANK_STEPS = 10  # Figure 1 b/d reads the first ten decoding steps


def parse_strategy(label: str) -> tuple[str, dict]:
    """``"railcap:n=3,mode=ban"`` -> ``("railcap", {"n": 3, "mode": "ban"})``, typed.

    Raises :class:`~zerogap.errors.UserError` naming the label for an unknown strategy or setting;
    the values are checked when each setting builds the strategy (:func:`_setting_strategies`).
    """
    from zerogap.strategies import parse_overrides

    name, _, rest = label.partition(":")
    pairs = [p for p in rest.split(",") if p.strip()]
    try:
        options = parse_overrides(name, pairs)
        if name == "shortcut" and options:
            raise UserError("shortcut's neurons and base come from the study; give no settings")
    except ValueError as err:
        raise UserError(f"strategy {label!r}: {err}") from None
    return name, options


def _setting_strategies(labels: dict[str, tuple[str, dict]], t_task: int | None
                        ) -> tuple[dict[str, tuple[str, dict]], dict[str, Strategy], Strategy]:
    """Each label's final ``(name, options)`` in a setting (LNE-blocking takes the setting's
    ``t_task`` unless its label sets one), each strategy built from them, once per setting, and
    the plain sampling of the clean batches and greedy decodes (the identity label's, if any).

    Shortcut is built when its run starts: its neuron list is the study's to locate first.
    """
    from zerogap.runs import build_strategy

    final: dict[str, tuple[str, dict]] = {}
    built: dict[str, Strategy] = {}
    for label, (name, options) in labels.items():
        if name == "lne-blocking" and "t_task" not in options and t_task is not None:
            options = {**options, "t_task": t_task}
        final[label] = (name, options)
        if name != "shortcut":
            try:
                built[label] = build_strategy(name, options, None)
            except ValueError as err:
                raise UserError(f"strategy {label!r}: {err}") from None
    plain = built.get("identity") or build_strategy("identity", {}, None)
    return final, built, plain


# -- planning ------------------------------------------------------------------------------------


@dataclass
class _Setting:
    """A setting made concrete: its task, questions and split (no model loaded).

    ``t_task`` is LNE-blocking's task threshold for this task (None where the task has no
    reference solutions to measure: the strategy's own default then applies). ``strategies``
    maps each of the study's strategy labels to its ``(name, options)`` in this setting, and
    ``built`` to the strategy built from them (:func:`_setting_strategies`; shortcut's is built
    when its run starts); ``plain`` samples the clean batches and decodes greedily.
    """

    spec: SettingSpec
    task: Any
    questions: list
    leaked: list[str] | None
    calibration: list
    t_task: int | None = None
    strategies: dict[str, tuple[str, dict]] = field(default_factory=dict)
    built: dict[str, Strategy] = field(default_factory=dict)
    plain: Strategy | None = None


def _alternate(first: Sequence[str], second: Sequence[str]) -> list[str]:
    """``first[0], second[0], first[1], ...``, the longer list's rest at the end."""
    out = [x for pair in zip(first, second, strict=False) for x in pair]
    short = min(len(first), len(second))
    return out + list(first[short:]) + list(second[short:])


def _t_task(task: Any, split: str, every: Sequence, questions: Sequence) -> int | None:
    """LNE-blocking's T_task for the reference solutions of ``questions`` (some of ``every``,
    the split's questions in its rows' order; :func:`zerogap.decoding.blocking.scaled_t_task`),
    or None for a task without them."""
    from zerogap.decoding.blocking import scaled_t_task
    from zerogap.tasks.prompt import cot_solution

    if not hasattr(task, "rows"):
        return None
    rows = task.rows(split)
    index = {q.id: i for i, q in enumerate(every)}
    words = [len(cot_solution(rows[index[q.id]].answer).split()) for q in questions]
    return scaled_t_task(sum(words) / len(words))


def _chat_task(spec: SettingSpec, task: Any) -> Any:
    """``task`` prompted as the setting asks, rendered with the contaminated model's tokenizer
    (its template file read and the tokenizer loaded now: no weights, before any sampling).
    Both models see the same prompts, so their solve probabilities compare."""
    from zerogap.models import load_tokenizer
    from zerogap.tasks.chat import chat_prompts, read_template

    template = read_template(spec.chat_template)
    return chat_prompts(task, load_tokenizer(spec.contaminated), template=template,
                        system=spec.system_instruction)


def _prepare_setting(spec: SettingSpec, strategies: dict[str, tuple[str, dict]],
                     calibration_size: int, *, check_models: bool = True) -> _Setting:
    from zerogap.tasks import get_task

    for key in ("clean", "contaminated", "base") if check_models else ():
        _check_model_spec(spec.name, key, getattr(spec, key))
    try:
        task = get_task(spec.task, **spec.task_options)
        every = task.questions(spec.task_split)
        if spec.chat_template or spec.system_instruction:
            task = _chat_task(spec, task)
            if every:  # a template that cannot render this task's prompt fails here
                task.prompt(every[0])
    except ZerogapError as err:
        raise type(err)(f"setting {spec.name}: task {spec.task}: {err}") from None
    questions = every
    leaked = None
    calibration: list = []
    if spec.split_file:
        split = read_split(spec.split_file)
        by_id = {q.id: q for q in questions}
        for key in ("leaked", "unleaked"):
            unknown = [q for q in split[key] if q not in by_id]
            if unknown:
                raise DataError(f"{spec.split_file}: {len(unknown)} {key} ids are not in "
                                 f"split {spec.task_split!r} of {spec.task} (first: "
                                 f"{unknown[0]!r})")
        half = None if spec.limit is None else spec.limit - spec.limit // 2
        keep_leaked = split["leaked"][:half]
        keep_unleaked = split["unleaked"][: None if spec.limit is None else spec.limit // 2]
        if spec.limit is not None and len(keep_leaked) + len(keep_unleaked) < spec.limit:
            # Fewer would unbalance the halves the stratified comparison rests on.
            raise UserError(f"setting {spec.name}: limit {spec.limit} needs {half} leaked and "
                            f"{spec.limit // 2} unleaked questions; {spec.split_file} has "
                            f"{len(split['leaked'])} and {len(split['unleaked'])}")
        wanted = set(keep_leaked) | set(keep_unleaked)
        questions = [q for q in questions if q.id in wanted]
        leaked = keep_leaked
        # The authors' scoring set is the test set, leaked half included (baselines.md §3, A2):
        # without leaked items, Acc(M_co) - Acc(M_co + patch) never sees the inflation.
        calibration = [by_id[q] for q in _alternate(split["leaked"], split["unleaked"])
                       ][:calibration_size]
    elif spec.limit is not None:
        questions = questions[: spec.limit]
    if not questions:
        raise UserError(f"setting {spec.name}: no questions to evaluate")
    if "shortcut" in {name for name, _ in strategies.values()} and leaked is None:
        raise UserError(f"setting {spec.name}: strategy shortcut needs a split file (the "
                         "leaked questions locate its neurons); give --split-file or leave it out "
                         "of --strategies")
    t_task = _t_task(task, spec.task_split, every, questions)
    return _Setting(spec, task, questions, leaked, calibration, t_task,
                    *_setting_strategies(strategies, t_task))


def _check_model_spec(setting: str, key: str, spec: str) -> None:
    """Refuse a model that cannot be loaded (:func:`zerogap.models.check_model_spec`), before
    anything is loaded (hub ids pass)."""
    from zerogap.models import check_model_spec

    try:
        check_model_spec(spec)
    except ZerogapError as err:
        raise type(err)(f"setting {setting}: {key} model: {err}") from None


def _digest(fields_: dict) -> str:
    text = json.dumps(fields_, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass
class _Job:
    """One resumable unit of a study: a sampling run, greedy decodes, a filter over another
    run's samples (TED), neuron location, or the design checks.

    ``greedy_dir`` holds the greedy decodes of ``role``'s model that the strategy reads;
    ``source`` is the run a filter reads its samples from; ``built`` is the strategy named by
    ``strategy`` and ``options`` where the setting built it already (None: built at its run).
    ``reads`` lists the other jobs' outputs (run directories, files) this one opens: it starts
    only after the jobs that write them (:func:`zerogap.study.workers.run_side_by_side`).
    """

    kind: str  # "sample" | "greedy" | "filter" | "neurons" | "design"
    label: str
    role: str  # whose model: "clean" | "contaminated"
    run_dir: Path
    strategy: str = "identity"
    options: dict = field(default_factory=dict)
    seed: int = 0
    greedy_dir: Path | None = None
    source: Path | None = None
    built: Strategy | None = None
    todo: int = 0
    rows: int = 0
    reads: tuple[Path, ...] = ()


def _missing(run_dir: Path, ids: set[str], greedy: bool) -> int:
    from zerogap.store import DB_NAME, RunStore

    if not (run_dir / DB_NAME).exists():
        return len(ids)
    with RunStore(run_dir, create=False) as store:  # also refuses a foreign file up front
        done = store.completed_greedy() if greedy else store.completed_questions()
    return len(ids - done)


def _plan(study: StudySpec, s: _Setting, out: Path, dtype: str = "float32"
          ) -> tuple[list[_Job], dict[str, Path], dict[str, Path]]:
    """The jobs of one setting in execution order, each strategy label's run dir, and each
    control's (a strategy applied to the clean model) run dir.

    The greedy decodes come first: every sampling job opens its model's greedy store, read-only
    (jobs side by side share it; the strategies that need greedy decodes read them there).

    The backend and the weight dtype are part of a run's configuration: runs made otherwise
    get other directories (named as before for the HF engine in float32). Identity comes
    first, then the design checks (which read it), then the other strategies, then the
    controls. A strategy that samples nothing (All-Zero) gets no run: the report scores it
    from the clean counts. A filtering strategy (TED) reads the plain samples of its model
    (identity's run; for the clean model, its second batch) instead of sampling them again.
    """
    from zerogap.strategies import strategy_class

    spec = s.spec
    ids = {q.id for q in s.questions}
    task_id = {"task": spec.task, "task_config": s.task.config(), "split": spec.task_split}
    if study.backend != DEFAULT_BACKEND:  # the default's runs are named as before backends
        task_id["backend"] = study.backend
    if dtype != "float32":
        task_id["dtype"] = dtype
    sampling = {"m": study.m, "temperature": study.temperature,
                "max_new_tokens": study.max_new_tokens}

    def run_dir(kind: str, model: str, **extra) -> Path:
        return out / "runs" / f"{kind}-{_digest({'model': model, **task_id, **extra})}"

    greedy = {role: run_dir("greedy", getattr(spec, role),
                            greedy_max_new_tokens=study.max_new_tokens)
              for role in ("clean", "contaminated")}
    jobs = [
        _Job("greedy", "clean greedy", "clean", greedy["clean"], built=s.plain),
        _Job("greedy", "contaminated greedy", "contaminated", greedy["contaminated"],
             built=s.plain),
        _Job("sample", "clean", "clean", run_dir("clean", spec.clean, seed=study.seed,
                                                 **sampling), seed=study.seed,
             greedy_dir=greedy["clean"], built=s.plain),
        _Job("sample", REPEAT, "clean", run_dir("clean", spec.clean, seed=study.seed + 1,
                                                **sampling), seed=study.seed + 1,
             greedy_dir=greedy["clean"], built=s.plain),
    ]
    dirs: dict[str, Path] = {"clean": jobs[2].run_dir, REPEAT: jobs[3].run_dir,
                             "greedy": greedy["contaminated"], "clean greedy": greedy["clean"]}
    neurons = out / "neurons" / (_digest({
        "models": [spec.base, spec.contaminated, spec.clean], **task_id,
        "leaked": sorted(s.leaked or []), "calibration": [q.id for q in s.calibration],
        "block": study.neuron_block, "candidates": study.neuron_candidates,
        "max_new_tokens": study.max_new_tokens,
    }) + ".json")

    def strategy_job(label: str, role: str, plain: Path | None) -> _Job | None:
        name, options = s.strategies[label]
        chosen = strategy_class(name)
        if not chosen.samples_model:
            return None
        model = getattr(spec, role)
        if name == "shortcut":
            if not any(job.kind == "neurons" for job in jobs):
                jobs.append(_Job("neurons", "shortcut neurons", "contaminated", neurons))
            # The run records the list's absolute path; its name (a digest) names the run.
            options = {"neurons": str(neurons.resolve()), "base": spec.base}
        named = {**options, "neurons": Path(options["neurons"]).name} if "neurons" in options \
            else options
        shown = label if role == "contaminated" else f"{label} on the clean model"
        if chosen.filters_only and plain is not None:
            return _Job("filter", shown, role,
                        run_dir(slug(name), model, strategy=name, options=named,
                                samples_of=plain.name),
                        strategy=name, options=options, greedy_dir=greedy[role], source=plain,
                        built=s.built.get(label))
        return _Job("sample", shown, role,
                    run_dir(slug(name), model, strategy=name, options=named,
                            seed=study.seed + 2, **sampling),
                    strategy=name, options=options, seed=study.seed + 2,
                    greedy_dir=greedy[role], built=s.built.get(label))

    labels = study.labels()
    made: dict[str, Path] = {}
    # Identity first: the design checks read it before any strategy samples.
    for label in sorted(labels, key=lambda label: label != "identity"):
        job = strategy_job(label, "contaminated", made.get("identity"))
        if job is not None:
            jobs.append(job)
            made[label] = job.run_dir
        if label == "identity":
            jobs.append(_Job("design", "design checks", "contaminated",
                             out / "design" / f"{slug(spec.name)}.json"))
    dirs.update({label: made[label] for label in labels if label in made})  # table order
    controls: dict[str, Path] = {}
    for label in study.control_labels():
        job = strategy_job(label, "clean", dirs[REPEAT])
        if job is not None:
            jobs.append(job)
            controls[label] = job.run_dir
    seen: set[Path] = set()
    for job in jobs:
        if job.kind == "design":
            job.reads = (dirs["clean"], dirs[REPEAT], dirs["identity"], dirs["greedy"])
        elif job.kind == "neurons":
            job.reads = (greedy["contaminated"],)
        else:  # every sampling job opens its model's greedy store, even if it reads nothing
            job.reads = tuple(p for p in (job.greedy_dir, job.source,
                                          neurons if job.strategy == "shortcut" else None) if p)
        if job.kind == "neurons":
            job.todo = 0 if job.run_dir.is_file() else 1
        elif job.kind == "design":
            job.todo = 1  # cheap, and it reads runs that may have grown: always recomputed
        elif job.run_dir in seen:  # the same run twice (clean = contaminated): sampled once
            job.todo = 0
        else:
            seen.add(job.run_dir)
            job.todo = _missing(job.run_dir, ids, job.kind == "greedy")
            job.rows = job.todo * (study.m if job.kind == "sample" else
                                   1 if job.kind == "greedy" else 0)
    return jobs, dirs, controls


# -- progress ------------------------------------------------------------------------------------


@dataclass
class StudyProgress:
    """The one progress state of a whole study; ``eta`` is None until a rate is known.

    ``part_*`` count the current stage's own units when it has some (neuron location's greedy
    decodes), which the questions counter does not see; a stage change clears them.
    ``row_seconds`` is the time the rows took up to their last advance and ``part_rate`` the
    seconds per part unit (0 until known), so the ETA is a rate of work done, not of time spent
    loading models or in other stages, and stays put between advances (a display may count it
    down).
    """

    stage: str = ""
    jobs_done: int = 0
    jobs_total: int = 0
    questions_done: int = 0
    questions_total: int = 0
    rows_done: int = 0
    rows_total: int = 0
    tokens: int = 0
    started: float = field(default_factory=time.monotonic)
    row_seconds: float = 0.0
    part_unit: str = ""
    part_done: int = 0
    part_total: int = 0
    part_rate: float = 0.0

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def eta(self) -> float | None:
        """Seconds left: the sampling rows that remain at the rate of those done so far, plus,
        within a stage counting its own units, those that remain at that stage's rate."""
        if not self.rows_done:
            return None
        left = self.row_seconds / self.rows_done * (self.rows_total - self.rows_done)
        return left + self.part_rate * (self.part_total - self.part_done)


class _Tracker:
    """Turns the study's events into :class:`StudyProgress`; jobs may report from several
    worker threads at once (:mod:`zerogap.study.workers`), so every change holds a lock and
    the stage shown is each working thread's own, joined in the order they started."""

    def __init__(self, callback: Callable[[StudyProgress], None] | None, state: StudyProgress):
        self.callback, self.state = callback, state
        self.mark = time.monotonic()  # the start of the work the next advance counts
        self.part_start, self.part_first = 0.0, 0
        self.part_owner: int | None = None  # the thread whose stage counts parts
        self.stages: dict[int, str] = {}  # thread -> its stage
        self.lock = threading.RLock()
        self.stopping = False  # Ctrl-C during jobs side by side: workers end at their next event
        self.local = threading.local()  # a worker's own hook, called at each of its events

    def stage(self, text: str) -> None:
        """A new stage of the calling thread: its work is timed from now (after any model it
        loaded) unless another thread's work is being timed already."""
        me = threading.get_ident()
        with self.lock:
            alone = not self.stages.keys() - {me}
            self.stages[me] = text
            self.state.stage = " | ".join(self.stages.values())
            if self.part_owner in (None, me):
                self._clear_part()
            if alone:
                self.mark = time.monotonic()
            self.emit()

    def leave(self) -> None:
        """The calling thread has no stage any more (a worker between jobs)."""
        me = threading.get_ident()
        with self.lock:
            if self.stages.pop(me, None) is not None:
                self.state.stage = " | ".join(self.stages.values())
            if self.part_owner == me:
                self._clear_part()

    def _clear_part(self) -> None:
        self.state.part_unit, self.state.part_done, self.state.part_total = "", 0, 0
        self.state.part_rate = 0.0
        self.part_owner = None

    def advance(self, rows: Sequence, greedy: bool = False) -> None:
        with self.lock:
            now = time.monotonic()
            self.state.row_seconds += now - self.mark
            self.mark = now
            self.state.questions_done += 1
            self.state.rows_done += len(rows)
            self.state.tokens += sum(len(r.token_ids) if greedy else r.n_tokens for r in rows)
            self.emit()

    def part(self, unit: str, done: int, total: int) -> None:
        """The stage's own counter (``done`` of ``total`` ``unit``); its rate counts only the
        units done since the first report (a resumed stage's earlier ones took no time)."""
        with self.lock:
            now, state = time.monotonic(), self.state
            if state.part_unit != unit:
                state.part_unit, self.part_start, self.part_first = unit, now, done
            self.part_owner = threading.get_ident()
            state.part_total, state.part_done = total, done
            made = done - self.part_first
            state.part_rate = (now - self.part_start) / made if made else 0.0
            self.emit()

    def job_done(self) -> None:
        with self.lock:
            self.state.jobs_done += 1
            self.emit()

    def stop(self) -> None:
        """Ctrl-C while workers run jobs: each worker ends its job at its next event (a stored
        question, a neuron decode), so every store closes cleanly before the study stops."""
        with self.lock:
            self.stopping = True
            self.stages.clear()
            self.state.stage = "interrupted: ending the running jobs at their next question"
            self.emit()

    def on_event(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` in the calling thread at each of its later events (a worker retaking
        its share of the CPU's threads as other jobs start and end)."""
        self.local.hook = hook

    def emit(self) -> None:
        if self.stopping and threading.current_thread() is not threading.main_thread():
            raise KeyboardInterrupt
        hook = getattr(self.local, "hook", None)
        if hook is not None:
            hook()
        if self.callback is not None:
            with self.lock:
                self.callback(self.state)


def _counting_store(run_dir: Path, tracker: _Tracker):
    """A run store that reports every question it writes to the study's progress."""
    from zerogap.store import RunStore

    class CountingStore(RunStore):
        def add_samples(self, rows):
            rows = list(rows)
            super().add_samples(rows)
            tracker.advance(rows)

        def add_greedy(self, rows):
            rows = list(rows)
            super().add_greedy(rows)
            tracker.advance(rows, greedy=True)

    return CountingStore(run_dir)


# -- running -------------------------------------------------------------------------------------


class _Models:
    """Models of one setting, each loaded once when first needed (by spec: a model that is
    both clean and contaminated loads once), with the backend that samples it.

    A vLLM engine claims most of a GPU's memory, so with vLLM only one is alive at a time:
    loading another model closes the previous one (the jobs use the clean model first, then
    the contaminated one, so each loads once per setting).
    """

    def __init__(self, spec: SettingSpec, backend: str, engine: EngineOptions,
                 tracker: _Tracker):
        self.spec, self.backend, self.engine, self.tracker = spec, backend, engine, tracker
        self.loaded: dict[str, tuple[Any, Any]] = {}  # model spec -> (LoadedModel, Backend)
        self.prints: dict[str, str] = {}  # role -> fingerprint

    def _load(self, role: str) -> tuple[Any, Any]:
        from zerogap.engine.base import backend_capabilities, load_engine

        model = getattr(self.spec, role)
        if model not in self.loaded:
            if backend_capabilities(self.backend).exclusive:
                self.close()
            self.tracker.stage(f"{self.spec.name}: loading the {role} model")
            self.loaded[model] = load_engine(model, self.backend, self.engine)
        self.prints[role] = self.loaded[model][0].fingerprint
        return self.loaded[model]

    def __call__(self, role: str):
        return self._load(role)[0]

    def backend_of(self, role: str):
        return self._load(role)[1]

    def fingerprints(self) -> dict[str, str]:
        return dict(self.prints)

    def close(self) -> None:
        """Release every loaded model (vLLM engines are shut down)."""
        for _, backend in self.loaded.values():
            backend.close()
        self.loaded.clear()


def _run_job(job: _Job, study: StudySpec, s: _Setting, models: _Models,
             dirs: dict[str, Path], tracker: _Tracker) -> None:
    from zerogap.engine.base import SamplingSpec
    from zerogap.runs import run_filter, run_greedy, run_sample
    from zerogap.store import RunStore

    if job.kind == "neurons":
        _locate_neurons(job.run_dir, study, s, models, dirs["greedy"], tracker)
        return
    if job.kind == "design":
        tracker.stage(f"{s.spec.name}: design checks")
        criteria = _design_checks(job.run_dir, s, dirs)
        met = sum(c.met for c in criteria)
        tracker.stage(f"{s.spec.name}: design checks: {met} of {len(criteria)} met")
        return
    loaded, backend = models(job.role), models.backend_of(job.role)
    tracker.stage(f"{s.spec.name}: {job.label}")
    if job.kind == "filter":  # no sampling: rows are not the study's progress
        assert job.source is not None and job.greedy_dir is not None
        with RunStore(job.run_dir) as store, RunStore(job.source, create=False) as source, \
                RunStore(job.greedy_dir, create=False) as greedy_store:
            run_filter(source, store, greedy_store, loaded.tokenizer,
                       strategy=job.built or job.strategy, strategy_options=job.options)
        return
    with _counting_store(job.run_dir, tracker) as store:
        if job.kind == "greedy":
            run_greedy(loaded, s.task, s.questions, store, split=s.spec.task_split,
                       max_new_tokens=study.max_new_tokens, strategy=job.built or job.strategy,
                       backend=backend)
            return
        settings = SamplingSpec(m=study.m, temperature=study.temperature,
                                max_new_tokens=study.max_new_tokens, seed=job.seed)
        assert job.greedy_dir is not None
        # Read-only: the greedy job wrote every decode before this job started, and jobs side
        # by side may read the same greedy store (a writer would hold its lock).
        with RunStore(job.greedy_dir, create=False) as greedy_store:
            run_sample(loaded, s.task, s.questions, store, settings, split=s.spec.task_split,
                       strategy=job.built or job.strategy, strategy_options=job.options,
                       greedy_store=greedy_store, backend=backend)


def _design_checks(path: Path, s: _Setting, dirs: dict[str, Path]) -> list:
    """Measure the design criteria on the two models alone (clean batches, identity, greedy)
    and write them to ``path``; see :mod:`zerogap.analysis.design`."""
    import numpy as np

    from zerogap.analysis.design import design_criteria, write_design
    from zerogap.readout import run_counts
    from zerogap.store import RunStore

    ids = [q.id for q in s.questions]

    def solve(label: str) -> np.ndarray:
        with RunStore(dirs[label], create=False) as store:
            rows = {r["id"]: r for r in run_counts(store)}
        return np.array([rows[q]["correct"] / rows[q]["samples"] for q in ids])

    with RunStore(dirs["greedy"], create=False) as store:
        greedy = {q: g.text.strip() for q, g in store.greedy().items()}
    copies = dict.fromkeys(ids, 0)
    samples = dict.fromkeys(ids, 0)
    with RunStore(dirs["identity"], create=False) as store:
        for row in store.samples():
            if row.question_id in copies:
                samples[row.question_id] += 1
                copies[row.question_id] += row.text.strip() == greedy[row.question_id]
    leaked = set(s.leaked or ())
    criteria = design_criteria(
        solve("clean"), solve(REPEAT), solve("identity"),
        np.array([copies[q] for q in ids]), np.array([samples[q] for q in ids]),
        np.array([q in leaked for q in ids]),
    )
    write_design(path, criteria, ids)
    return criteria


def _locate_neurons(path: Path, study: StudySpec, s: _Setting, models: _Models,
                    greedy_dir: Path, tracker: _Tracker) -> None:
    """Rank the setting's neurons into ``path``; each question's result is journaled beside
    it first, so a study stopped during this (hours on a 7B model) resumes where it stopped.

    The contaminated model's unpatched greedy passes (its answers to leaked questions, its
    grades on calibration questions) are the study's own greedy decodes of that model in
    ``greedy_dir`` (same prompts, token limit and stop strings), so they enter the journal
    from there instead of being decoded again.
    """
    from zerogap.decoding.shortcut import mlp_width
    from zerogap.io.neurons import save_neurons
    from zerogap.models import load_beside
    from zerogap.pipelines.neurons import (
        Journal,
        journal_path,
        locate_neurons,
        nearest_block_size,
    )
    from zerogap.store import RunStore

    contaminated, clean = models("contaminated"), models("clean")
    tracker.stage(f"{s.spec.name}: loading the base model")
    base = load_beside(s.spec.base, contaminated.model)
    tracker.stage(f"{s.spec.name}: locating shortcut neurons")
    by_id = {q.id: q for q in s.questions}
    leaked = [by_id[q] for q in s.leaked or [] if q in by_id]
    d_ff = mlp_width(contaminated.model)[1]
    block = nearest_block_size(d_ff, study.neuron_block or d_ff)
    setup = {"task": s.task.name, "task_config": s.task.config(), "split": s.spec.task_split,
             "leaked_ids": [q.id for q in leaked],
             "calibration_ids": [q.id for q in s.calibration]}
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = journal_path(path)
    journal = Journal(kept, {**setup, "block_size": block,
                             "candidates": study.neuron_candidates,
                             "max_new_tokens": study.max_new_tokens})
    journal.check_models({"base": base.fingerprint, "contaminated": contaminated.fingerprint,
                          "uncontaminated": clean.fingerprint})
    with RunStore(greedy_dir, create=False) as store:
        decoded = store.greedy()
    for key, questions, value in (
            ("leaked", leaked, lambda g: list(g.token_ids)),
            ("contaminated", s.calibration, lambda g: int(g.correct))):
        done = journal.results.get(key, {})
        for q in questions:
            if q.id in decoded and q.id not in done:
                journal.record(key, q.id, value(decoded[q.id]))
    ranking, meta = locate_neurons(
        base.model, contaminated.model, clean.model, contaminated.tokenizer, s.task, leaked,
        s.calibration, block_size=block, candidates=study.neuron_candidates,
        max_new_tokens=study.max_new_tokens, journal=journal,
        progress=lambda event: tracker.part("neuron decodes", event.done, event.total),
    )
    meta.update({
        "base": {"spec": s.spec.base, "fingerprint": base.fingerprint},
        "contaminated": {"spec": s.spec.contaminated, "fingerprint": contaminated.fingerprint},
        "uncontaminated": {"spec": s.spec.clean, "fingerprint": clean.fingerprint},
        **setup,
    })
    save_neurons(path, ranking, meta)
    kept.unlink()  # everything it kept is in the ranking now


def _ranks(path: Path, s: _Setting, models: _Models, greedy_clean: Path,
           tracker: _Tracker) -> None:
    from zerogap.store import RunStore

    ids = [q.id for q in s.questions]
    if path.is_file() and _kept_ranks(path).get("questions") == ids:
        return
    tracker.stage(f"{s.spec.name}: Figure 1 ranks (teacher-forced)")
    with RunStore(greedy_clean, create=False) as store:
        greedy = store.greedy()
    prompts = [s.task.prompt(q) for q in s.questions]
    # The clean model's greedy tokens, teacher-forced into the contaminated model; only the
    # steps where the two disagree (rank > 1) are kept, as in paper Figure 1 b/d.
    forced = [greedy[q.id].token_ids[:RANK_STEPS] for q in s.questions]
    scored = models.backend_of("contaminated").forced_ranks(prompts, forced)
    ranks = {q.id: [r for r in rs if r > 1] for q, rs in zip(s.questions, scored, strict=True)}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps({"questions": ids, "ranks": ranks}) + "\n")


def _kept_ranks(path: Path) -> dict:
    """The ranks file a previous run left, or ``{}`` (computed again) when it is unreadable:
    it is derived data, so a damaged one costs a recomputation, not a failed rerun."""
    try:
        return read_json_object(path, "ranks file")
    except DataError:
        return {}


def _export_counts(run_dir: Path, target: Path, ids: Sequence[str]) -> None:
    from zerogap.io.counts import write_counts
    from zerogap.readout import run_counts
    from zerogap.store import RunStore

    with RunStore(run_dir, create=False) as store:
        rows = {r["id"]: r for r in run_counts(store)}
    missing = [q for q in ids if q not in rows]
    if missing:
        raise RuntimeError(f"{run_dir} lacks {len(missing)} questions after sampling")
    target.parent.mkdir(parents=True, exist_ok=True)
    chosen = [rows[q] for q in ids]
    write_counts(target, *([r[k] for r in chosen] for k in ("id", "correct", "samples", "first")))


def _check_folder_names(kind: str, names: Sequence[str]) -> None:
    """Refuse names that would share a file or folder name in the study folder (counts, ranks,
    figures are named by :func:`~zerogap.analysis.report.slug`), compared without case as
    macOS and Windows file systems compare them: one would overwrite the other's results."""
    seen: dict[str, str] = {}
    for name in names:
        key = slug(name).lower()
        if key in seen and seen[key] != name:
            raise UserError(f"{kind} names {seen[key]!r} and {name!r} would share the file "
                            f"name {slug(name)!r} in the study folder; rename one")
        seen[key] = name


def prepare(study: StudySpec) -> list[_Setting]:
    """Validate strategies and every setting (tasks, splits, model paths); loads no model.

    A strategy the study's backend cannot run is refused, naming the capability it lacks. A
    sweep's settings follow the study's own; their models are not checked, as
    :func:`build_sweep` makes the missing ones from the folder's manifest.
    """
    from zerogap.engine.base import backend_capabilities
    from zerogap.strategies import strategy_class

    capabilities = backend_capabilities(study.backend)
    strategies = {label: parse_strategy(label) for label in study.labels()}
    for name, _ in strategies.values():
        missing = capabilities.missing(strategy_class(name).requires)
        if missing:
            raise UserError(f"strategy {name} needs {', '.join(missing)} support, which the "
                            f"{study.backend} backend lacks; leave it out of --strategies or "
                            "use --backend hf")
    swept = () if study.sweep is None else sweep_settings(study.sweep)
    names = [s.name for s in (*study.settings, *swept)]
    if len(set(names)) != len(names):
        raise UserError(f"setting names must differ, got {names}")
    _check_folder_names("setting", names)
    _check_folder_names("strategy", ["clean", REPEAT, *study.labels()])
    return [_prepare_setting(s, strategies, study.calibration_size, check_models=checked)
            for group, checked in ((study.settings, True), (swept, False)) for s in group]


# -- contamination sweeps ------------------------------------------------------------------------


def sweep_config(sweep: SweepSpec):
    """What ``zerogap contaminate --sweep`` builds in ``sweep.models``: the folder's recorded
    :class:`~zerogap.pipelines.contamination.ContaminationConfig` with the sweep's strengths.
    Loads no model; a :class:`~zerogap.errors.ZerogapError` for a folder without a manifest."""
    from zerogap.pipelines.contamination import ContaminationConfig

    path = Path(sweep.models) / "manifest.json"
    if not path.is_file():
        raise UserError(f"sweep: {sweep.models} holds no manifest.json; build the models first "
                        f"with zerogap contaminate --out {sweep.models}")
    try:
        config = ContaminationConfig.from_dict(read_json_object(path)["config"])
    except (KeyError, TypeError) as err:
        raise DataError(f"{path}: not a contamination manifest ({err})") from None
    if sweep.epochs or sweep.copies:
        config = replace(config, sweep_epochs=sweep.epochs, sweep_copies=sweep.copies)
    return config


def sweep_settings(sweep: SweepSpec) -> tuple[SettingSpec, ...]:
    """One setting ``e{E}-c{C}`` per variant: the folder's M_cl, that M_co, its split and task."""
    config = sweep_config(sweep)
    models = Path(sweep.models)
    return tuple(
        SettingSpec(name=f"e{epochs}-c{copies}", clean=str(models / "clean"),
                    contaminated=str(models / config.contaminated_dir(epochs, copies)),
                    task=config.task, base=config.model, task_options=config.task_options,
                    task_split=config.split, split_file=str(models / "split.json"),
                    limit=sweep.limit)
        for epochs, copies in config.variants()
    )


def missing_variants(sweep: SweepSpec) -> list[str]:
    """Folder names of the sweep's M_co variants not yet built in ``sweep.models``."""
    config = sweep_config(sweep)
    names = [config.contaminated_dir(e, c) for e, c in config.variants()]
    return [name for name in names if not (Path(sweep.models) / name).is_dir()]


def build_sweep(sweep: SweepSpec, *, progress: ProgressCallback | None = None) -> None:
    """Train the variants ``sweep.models`` lacks (resumable; nothing to do when all exist)."""
    from zerogap.pipelines.contamination import build

    if missing_variants(sweep):
        build(sweep_config(sweep), Path(sweep.models), progress=progress)


def _recorded_seconds(out: Path) -> dict[str, dict[str, float]]:
    """Each setting's job times in an earlier ``study.json`` of ``out`` (none when there is
    none or it cannot be read: the times are a report's aside, never a reason to stop)."""
    try:
        record = json.loads((out / STUDY_FILE).read_text(encoding="utf-8"))
        return {e["name"]: {k: float(v) for k, v in e.get("seconds", {}).items()}
                for e in record["settings"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def evaluate(study: StudySpec, out: str | Path, *, progress: Callable | None = None,
             device: str | None = None, max_batch: int | None = None,
             engine: EngineOptions | None = None,
             commands: Sequence[str] = (), prepared: Sequence[_Setting] | None = None,
             workers: int | None = None) -> Report:
    """Run the study into ``out`` (resumable) and write its report; see the module docstring.

    ``progress(state: StudyProgress)`` is called at every stage and every stored question.
    ``engine`` (:class:`zerogap.engine.base.EngineOptions`) says how models load for
    ``study.backend``; without it, ``device`` and ``max_batch`` for the HF engine.
    ``commands`` are shown first among the report's commands to reproduce. ``prepared`` is
    what :func:`prepare` returned for this study, where the caller checked it first (the CLI
    does, before it prints anything): its tasks and questions are not loaded again.
    ``workers`` jobs run side by side, each on its own share of torch's threads
    (:mod:`zerogap.study.workers`; default: two on a CPU with at least two threads, else one).
    """
    from zerogap.engine.base import EngineOptions, concrete_dtype

    out = Path(out)
    engine = engine or EngineOptions(device=device, max_batch=max_batch)
    # Run directories are named by the dtype the weights hold, so "auto" is resolved here.
    engine = replace(engine, dtype=concrete_dtype(engine.dtype, study.backend, engine.device))
    prepared = prepare(study) if prepared is None else prepared
    planned = [(s, *_plan(study, s, out, engine.dtype)) for s in prepared]
    state = StudyProgress(jobs_total=sum(len(jobs) for _, jobs, _, _ in planned),
                          questions_total=sum(j.todo for _, jobs, _, _ in planned for j in jobs
                                              if j.kind in ("sample", "greedy")),
                          rows_total=sum(j.rows for _, jobs, _, _ in planned for j in jobs))
    tracker = _Tracker(progress, state)
    if study.sweep is not None and missing_variants(study.sweep):
        tracker.stage("training the sweep's missing contamination variants")
        build_sweep(study.sweep)
    workers = study_workers(workers, study.backend, engine.device)
    entries = []
    earlier = _recorded_seconds(out)
    for s, jobs, dirs, controls in planned:
        pool = [_Models(s.spec, study.backend, engine, tracker) for _ in range(workers)]
        # Wall time of each job, whenever it ran: a resumed study keeps the earlier runs' times.
        # The design checks run at every invocation (they read runs that may have grown); their
        # first time stands too, so a resumed study records and prints what the first one did.
        seconds: dict[str, float] = dict(earlier.get(s.spec.name, {}))
        state.jobs_done += sum(not job.todo for job in jobs)  # finished by an earlier call
        try:
            _run_jobs([job for job in jobs if job.todo], study, s, pool, dirs, tracker,
                      seconds)
            ranks = out / "ranks" / f"{slug(s.spec.name)}.json"
            _ranks(ranks, s, pool[0], dirs["clean greedy"], tracker)
        finally:
            for models in pool:
                models.close()
        fingerprints = {role: fp for models in pool for role, fp in models.fingerprints().items()}
        entries.append({**_entry(s, dirs, controls, fingerprints, out, ranks),
                        "seconds": seconds})
    tracker.stage("writing the report")
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "study.toml", study_toml(study))
    record = {
        "format": STUDY_FORMAT, "version": 1, "title": study.title or out.name,
        "config": study.to_dict(), "scoring": asdict(study.scoring()), "settings": entries,
        # The dtype is no study key (float32 studies' runs keep their names), yet it moves the
        # draws: the record and the rerun command say it, and the report states it.
        "dtype": engine.dtype,
        "workers": workers,
        "commands": [*commands, f"zerogap evaluate {out / 'study.toml'}"
                     + (f" --dtype {engine.dtype}" if engine.dtype != "float32" else ""),
                     f"zerogap report {out}"],
        "versions": _versions(),
    }
    write_text(out / STUDY_FILE, json.dumps(record, indent=2) + "\n")
    return write_report(out)


def study_workers(workers: int | None, backend: str, device: str | None) -> int:
    """The study's worker count (:func:`evaluate`): ``workers`` checked (:class:`UserError`
    in one line), or the default for the device."""
    from zerogap.engine.base import backend_capabilities
    from zerogap.study.workers import default_workers

    exclusive = backend_capabilities(backend).exclusive
    if workers is None:
        from zerogap.models import check_device

        return default_workers(check_device(device).split(":")[0], exclusive)
    if workers < 1:
        raise UserError(f"--workers must be at least 1, got {workers}")
    if workers > 1 and exclusive:
        raise UserError(f"--workers {workers}: the {backend} backend holds one engine at a "
                        "time; use --workers 1")
    return workers


def _run_jobs(todo: Sequence[_Job], study: StudySpec, s: _Setting, pool: Sequence[_Models],
              dirs: dict[str, Path], tracker: _Tracker, seconds: dict[str, float]) -> None:
    """Run a setting's unfinished jobs, one per model set of ``pool`` at a time; with more
    than one, each worker thread gets an even share of torch's threads among the jobs running,
    retaken at each of its events (a stored question, a neuron decode)."""
    from zerogap.study.workers import run_side_by_side, threads_per_worker

    side_by_side = len(pool) > 1
    if side_by_side:
        import torch

        from zerogap.engine.threads import core_limit, share

        saved = torch.get_num_threads()
        budget = min(saved, core_limit())  # the cores a cgroup's CPU quota leaves, at most
        tracker.leave()  # the line shows the workers' stages from here

    def run(item: int, worker: int, running: Callable[[], int]) -> None:
        job = todo[item]
        if side_by_side:
            def take_share() -> None:
                # The calling thread's own OpenMP count, or its engine's ceiling mid-call.
                share(threads_per_worker(running(), budget))

            take_share()
            tracker.on_event(take_share)
        started = time.monotonic()
        try:
            _run_job(job, study, s, pool[worker], dirs, tracker)
        finally:
            if side_by_side:
                tracker.leave()
        if job.kind != "design" or job.label not in seconds:
            seconds[job.label] = round(time.monotonic() - started, 1)
        tracker.job_done()

    try:
        run_side_by_side([job.run_dir for job in todo], [job.reads for job in todo], run,
                         len(pool), interrupted=tracker.stop)
    finally:
        if side_by_side:
            torch.set_num_threads(saved)  # MKL's count is process-wide: give it back


def _entry(s: _Setting, dirs: dict[str, Path], controls: dict[str, Path],
           loaded: dict[str, str], out: Path, ranks: Path) -> dict:
    """The setting's record in study.json; counts exported, paths relative to ``out``;
    ``loaded`` holds the fingerprints of the models loaded this time, by role."""
    from zerogap.store import RunStore

    ids = [q.id for q in s.questions]
    base = out / "counts" / slug(s.spec.name)
    files = {}
    for label, run_dir in dirs.items():
        if label in ("greedy", "clean greedy"):
            continue
        target = base / f"{slug(label)}.jsonl"
        _export_counts(run_dir, target, ids)
        files[label] = str(target.relative_to(out))
    control_files = {}
    for label, run_dir in controls.items():
        target = base / "controls" / f"{slug(label)}.jsonl"
        _export_counts(run_dir, target, ids)
        control_files[label] = str(target.relative_to(out))
    design = out / "design" / f"{slug(s.spec.name)}.json"
    fingerprints = {}
    for role, label in (("clean", "clean"), ("contaminated", "identity")):
        if label in dirs:
            with RunStore(dirs[label], create=False) as store:
                fingerprints[role] = store.config().get("model_fingerprint")
    fingerprints.update(loaded)
    return {
        "name": s.spec.name, "task": s.spec.task, "task_config": s.task.config(),
        "split": s.spec.task_split, "split_file": s.spec.split_file, "questions": len(ids),
        "leaked": s.leaked,
        "clean": {"spec": s.spec.clean, "fingerprint": fingerprints.get("clean")},
        "contaminated": {"spec": s.spec.contaminated,
                         "fingerprint": fingerprints.get("contaminated")},
        "base": s.spec.base,
        "counts": {"clean": files.pop("clean"), "repeat": files.pop(REPEAT),
                   "strategies": files, "controls": control_files},
        "runs": {label: str(d.relative_to(out)) for label, d in dirs.items()},
        "control_runs": {label: str(d.relative_to(out)) for label, d in controls.items()},
        "design": str(design.relative_to(out)) if design.is_file() else None,
        "baselines": _baselines(s, dirs),
        "figure_runs": {k: str(dirs[k].relative_to(out)) for k in ("identity", "greedy")
                        if k in dirs},
        "ranks": str(ranks.relative_to(out)),
    }


def _baselines(s: _Setting, dirs: dict[str, Path]) -> dict:
    """What the baselines were set to at this scale, for the report: LNE-blocking's T_task and
    shortcut-neuron location's block size, blocks scored and calibration questions."""
    from zerogap.io.neurons import load_neurons
    from zerogap.store import RunStore

    out: dict[str, Any] = {"lne_t_task": s.t_task}
    if "shortcut" in dirs:
        with RunStore(dirs["shortcut"], create=False) as store:
            _, meta = load_neurons(store.config()["strategy_config"]["neurons"])
        leaked = set(meta.get("leaked_ids", ()))
        calibration = meta.get("calibration_ids", [])
        out["shortcut"] = {
            "block_size": meta.get("block_size"), "blocks_total": meta.get("blocks_total"),
            "blocks_scored": len(meta.get("blocks_scored", [])),
            "calibration": len(calibration),
            "calibration_leaked": sum(q in leaked for q in calibration),
        }
    return out


def _versions() -> dict[str, str]:
    from zerogap.provenance import package_versions

    return package_versions()
