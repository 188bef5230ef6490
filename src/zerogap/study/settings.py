"""A study's settings made concrete before any model loads: strategies, tasks, questions, splits.

:func:`prepare` validates a whole :class:`~zerogap.study.spec.StudySpec` (strategy labels against
the registry and the study's backend, every setting's task, split file and model paths, the
folder names the settings and strategies will take) and returns one :class:`Setting` per
setting, with its questions, its leaked half and its shortcut-neuron calibration questions.
Nothing here loads a model's weights (a chat template loads a tokenizer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zerogap.analysis.score import REPEAT
from zerogap.errors import DataError, UserError, ZerogapError
from zerogap.io.files import slug
from zerogap.study.calibration import split_questions
from zerogap.study.spec import SettingSpec, StudySpec, read_split
from zerogap.study.sweep import sweep_settings

# The record saying whose reference solutions the task-derived settings were measured on:
# "calibration" (the calibration split's) or "evaluated" (no calibration split).
SOLUTION_LENGTHS = "solution_lengths"

if TYPE_CHECKING:
    from zerogap.strategies import Strategy


def parse_strategy(label: str) -> tuple[str, dict]:
    """``"railcap:n=3,mode=ban"`` -> ``("railcap", {"n": 3, "mode": "ban"})``, typed.

    Raises :class:`~zerogap.errors.UserError` naming the label for an unknown strategy or setting
    (a strategy that ``needs_neurons`` takes none: the study locates them); the values are
    checked when each setting builds the strategy (:func:`_setting_strategies`).
    """
    from zerogap.strategies import parse_overrides, split_label, strategy_class

    name, pairs = split_label(label)
    try:
        options = parse_overrides(name, pairs)
        if strategy_class(name).needs_neurons and options:
            raise UserError(f"{name}'s neurons and base come from the study; give no settings")
    except ValueError as err:
        raise UserError(f"strategy {label!r}: {err}") from None
    return name, options


def _setting_strategies(labels: dict[str, tuple[str, dict]], task: Any, split: str,
                        measured: Sequence, *, calibrating: bool
                        ) -> tuple[dict[str, tuple[str, dict]], dict[str, Strategy], Strategy,
                                   dict, frozenset[str]]:
    """Each label's final ``(name, options)`` in a setting, each strategy built from them once
    per setting (:func:`prepare` held their classes against the backend), the plain sampling of
    the clean batches and greedy decodes (the identity label's, if any), the records of what
    the setting's task set, and the labels whose settings the calibration split sets.

    A strategy takes its :meth:`~zerogap.strategies.Strategy.task_settings` from the setting's
    task and the ``measured`` questions (the calibration split's where there is one, else the
    evaluated ones) where its label sets none (LNE-blocking's T_task); each value taken is
    recorded under its class's ``task_setting_records`` key, so the report states only those.
    Where the setting is ``calibrating`` (a calibration split disjoint from its questions), a
    strategy with ``calibration_records`` whose label sets none of them (LNE-blocking's beta)
    takes them from its model's greedy decodes of that split, and like a strategy that
    ``needs_neurons`` (its neuron list is the study's to locate first) is built when its run
    starts.
    """
    from zerogap.runs import build_strategy
    from zerogap.strategies import PLAIN, strategy_class

    final: dict[str, tuple[str, dict]] = {}
    built: dict[str, Strategy] = {}
    derived: dict[str, dict] = {}  # strategy name -> what the task sets, measured once
    records: dict[str, Any] = {}
    calibrated: set[str] = set()
    for label, (name, options) in labels.items():
        cls = strategy_class(name)
        if name not in derived:
            derived[name] = cls.task_settings(task, split, measured)
        taken = {key: value for key, value in derived[name].items() if key not in options}
        records.update({cls.task_setting_records[key]: value for key, value in taken.items()
                        if key in cls.task_setting_records})
        final[label] = (name, {**taken, **options})
        if calibrating and cls.calibration_records and not set(cls.calibration_records) & set(
                options):
            calibrated.add(label)
        try:  # built now to check its values, kept where nothing is left to set at its run
            strategy = None if cls.needs_neurons else build_strategy(name, final[label][1])
        except ValueError as err:
            raise UserError(f"strategy {label!r}: {err}") from None
        if strategy is not None and label not in calibrated:
            built[label] = strategy
    plain = built.get(PLAIN) or build_strategy(PLAIN, {})
    return final, built, plain, records, frozenset(calibrated)


@dataclass
class Setting:
    """A setting made concrete: its task, questions and split (no model loaded).

    ``leaked`` holds the evaluated leaked ids (None without a split file). Its shortcut neurons
    are located on the greedy answers to the ``located`` questions and scored causally on the
    ``calibration`` questions, both disjoint from the evaluated questions where
    ``calibration_disjoint`` (:func:`~zerogap.study.calibration.split_questions`).

    ``strategies`` maps each of the study's strategy labels to its ``(name, options)`` in this
    setting, and ``built`` to the strategy built from them (:func:`_setting_strategies`; one
    that needs neurons is built when its run starts); ``plain`` samples the clean batches and
    decodes greedily. ``records`` holds what the setting's task set a strategy to, by the key
    ``study.json`` records it under (LNE-blocking's T_task: ``lne_t_task``), for the strategies
    the study runs only, and under :data:`SOLUTION_LENGTHS` whose questions it was measured on.
    ``calibrated`` holds the labels whose settings their model's greedy decodes of the
    calibration questions set when their run starts (LNE-blocking's beta), so that model's
    greedy decodes cover those questions too (:attr:`greedy_questions`).
    """

    spec: SettingSpec
    task: Any
    questions: list
    leaked: list[str] | None
    calibration: list
    located: list
    calibration_disjoint: bool
    strategies: dict[str, tuple[str, dict]] = field(default_factory=dict)
    built: dict[str, Strategy] = field(default_factory=dict)
    plain: Strategy | None = None
    records: dict[str, Any] = field(default_factory=dict)
    calibrated: frozenset[str] = frozenset()

    @property
    def greedy_questions(self) -> list:
        """The questions each model decodes greedily: the evaluated ones, then the calibration
        questions where a label is ``calibrated``."""
        if not self.calibrated:
            return self.questions
        evaluated = {q.id for q in self.questions}
        return self.questions + [q for q in self.calibration if q.id not in evaluated]


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
                     calibration_size: int, *, check_models: bool = True) -> Setting:
    from zerogap.runs import first_questions
    from zerogap.strategies import strategy_class
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
    chosen = None
    if spec.split_file:
        split = read_split(spec.split_file)
        by_id = {q.id: q for q in questions}
        for key in ("leaked", "unleaked"):
            unknown = [q for q in split[key] if q not in by_id]
            if unknown:
                raise DataError(f"{spec.split_file}: {len(unknown)} {key} ids are not in "
                                 f"split {spec.task_split!r} of {spec.task} (first: "
                                 f"{unknown[0]!r})")
        try:
            chosen = split_questions(split["leaked"], split["unleaked"], limit=spec.limit,
                                     calibration_size=calibration_size)
        except ValueError as err:
            raise UserError(f"setting {spec.name}: {spec.split_file}: {err}") from None
        wanted = {*chosen.leaked, *chosen.unleaked}
        questions = [q for q in questions if q.id in wanted]
        leaked = list(chosen.leaked)
    else:
        questions = list(first_questions(questions, spec.limit))
    if not questions:
        raise UserError(f"setting {spec.name}: no questions to evaluate")
    needing = [name for name, _ in strategies.values() if strategy_class(name).needs_neurons]
    if needing and leaked is None:
        raise UserError(f"setting {spec.name}: strategy {needing[0]} needs a split file (the "
                        "leaked questions locate its neurons); give --split-file or leave it out "
                        "of --strategies")
    calibration, located = [], []
    if chosen is not None:
        calibration = [by_id[q] for q in chosen.calibration]
        located = [by_id[q] for q in chosen.located]
    disjoint = chosen is not None and chosen.disjoint
    calibrating = disjoint and bool(calibration)
    # What a strategy takes from the task (T_task, tau: the reference solutions' length) is
    # read off the calibration questions where there are any, never the evaluated ones.
    setting = Setting(spec, task, questions, leaked, calibration, located, disjoint,
                      *_setting_strategies(strategies, task, spec.task_split,
                                           calibration if calibrating else questions,
                                           calibrating=calibrating))
    if setting.records:
        setting.records[SOLUTION_LENGTHS] = "calibration" if calibrating else "evaluated"
    return setting


def _check_model_spec(setting: str, key: str, spec: str) -> None:
    """Refuse a model that cannot be loaded (:func:`zerogap.models.check_model_spec`), before
    anything is loaded (hub ids pass)."""
    from zerogap.models import check_model_spec

    try:
        check_model_spec(spec)
    except ZerogapError as err:
        raise type(err)(f"setting {setting}: {key} model: {err}") from None


def _check_folder_names(kind: str, names: Sequence[str]) -> None:
    """Refuse names that would share a file or folder name in the study folder (counts, ranks,
    figures are named by :func:`~zerogap.io.files.slug`), compared without case as
    macOS and Windows file systems compare them: one would overwrite the other's results."""
    seen: dict[str, str] = {}
    for name in names:
        key = slug(name).lower()
        if key in seen and seen[key] != name:
            raise UserError(f"{kind} names {seen[key]!r} and {name!r} would share the file "
                            f"name {slug(name)!r} in the study folder; rename one")
        seen[key] = name


def prepare(study: StudySpec) -> list[Setting]:
    """Validate strategies and every setting (tasks, splits, model paths); loads no model.

    A strategy the study's backend cannot run is refused, naming the capability it lacks
    (:func:`zerogap.runs.check_strategy`, each strategy once). A sweep's settings follow the
    study's own; their models are not checked, as :func:`~zerogap.study.sweep.build_sweep`
    makes the missing ones from the folder's manifest.
    """
    from zerogap.engine.base import backend_capabilities
    from zerogap.runs import check_strategy
    from zerogap.strategies import strategy_class

    capabilities = backend_capabilities(study.backend)
    strategies = {label: parse_strategy(label) for label in study.labels()}
    for name in dict.fromkeys(name for name, _ in strategies.values()):
        check_strategy(strategy_class(name), capabilities, study.backend, name)
    swept = () if study.sweep is None else sweep_settings(study.sweep)
    names = [s.name for s in (*study.settings, *swept)]
    if len(set(names)) != len(names):
        raise UserError(f"setting names must differ, got {names}")
    _check_folder_names("setting", names)
    _check_folder_names("strategy", ["clean", REPEAT, *study.labels()])
    return [_prepare_setting(s, strategies, study.calibration_size, check_models=checked)
            for group, checked in ((study.settings, True), (swept, False)) for s in group]
