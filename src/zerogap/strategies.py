"""The mitigation strategies compared in the paper, as a registry of frozen, validated configs.

Each strategy builds a backend-neutral :class:`~zerogap.engine.base.InterventionSpec` (a logits
edit, an activation patch, plain data of :mod:`zerogap.decoding.specs`) in ``prepare(ctx)``,
asking the :class:`PrepareContext` for what it needs (greedy trajectories, their entropies, a
patch source model), which the context produces lazily; each backend turns the spec into its own
hooks or request arguments. A strategy adds its per-sample statistics and carries its readout
kind (:mod:`zerogap.readout`), which turns a question's graded samples into the counts
``(correct, samples)`` whose ratio is its readout:

=============  ===========================================  =====================================
name           decoding                                     readout
=============  ===========================================  =====================================
identity       plain sampling at tau                        correct / m
railcap        RailCap, cap to the runner-up (paper §4)     correct / m
railcap-ban    RailCap, ban (-inf)                          correct / m
ted            plain sampling; TED filter afterwards        correct kept / kept, 0 if none kept
ted-scaled     the same, tau scaled to the task's length    correct kept / kept, 0 if none kept
lne-blocking   argmax banned at the first n positions       correct / m
shortcut       top-K shortcut neurons patched from base     correct / m
all-zero       none (synthetic reference)                   0
=============  ===========================================  =====================================

Examples
--------
>>> s = get_strategy("railcap", parse_overrides("railcap", ["n=3"]))
>>> s.name, s.config.n, s.config.mode, s.needs_greedy
('railcap', 3, 'cap', True)
>>> get_strategy("ted").readout
'ted-kept'

Importing this module imports no torch (``zerogap strategy list`` runs without it): the
strategies' settings and specs are torch-free; ``prepare`` imports the torch cores it uses.
Third-party strategies register with :func:`register_strategy` in a module named by a
``zerogap.strategies`` entry point.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from zerogap.config import JsonConfig, check_names, from_strings, parse_pairs
from zerogap.decoding.settings import LNEBlockingConfig, RailCapConfig, ShortcutConfig
from zerogap.decoding.specs import BlockingEdit, NeuronPatchSpec, RailCapEdit
from zerogap.decoding.ted import TEDConfig, scaled_tau, ted_keep
from zerogap.engine.base import InterventionSpec
from zerogap.errors import DataError, StoreError, UserError
from zerogap.readout import check_readout, kept_statistic
from zerogap.registry import Registry

STRATEGY_ENTRY_POINTS = "zerogap.strategies"

PLAIN = "identity"
"""The strategy that samples the model as it is: every other is measured against its runs."""


@dataclass(frozen=True)
class NoSettings(JsonConfig):
    """Identity and All-Zero take no settings (the temperature is the run's SamplingSpec)."""


@dataclass
class PrepareContext:
    """What a strategy may ask for while preparing one engine call, each made on first request.

    ``m``: samples per question; ``greedy_source``: returns the greedy decode of every question
    of the call, in its order (rows with ``token_ids``, ``text`` and ``entropies``);
    ``load_model``: model spec -> model (a patch source on the evaluated model's device);
    ``answer_markers``: the task's answer marker as the evaluated model's token sequences
    (:func:`zerogap.decoding.specs.answer_marker_ids`). Each is None where the caller has none
    to offer.
    """

    m: int
    greedy_source: Callable[[], Sequence[Any]] | None = None
    load_model: Callable[[str], Any] | None = None
    answer_markers: Callable[[], tuple[tuple[int, ...], ...]] | None = None
    _rows: list | None = field(default=None, init=False, repr=False)

    def greedy(self) -> list:
        """The greedy decodes, produced once."""
        if self._rows is None:
            if self.greedy_source is None:
                raise UserError("this call has no greedy decodes to offer")
            self._rows = list(self.greedy_source())
        return self._rows

    def entropies(self, strategy: str) -> list[list[float]]:
        """The greedy decodes' per-step entropies; a :class:`StoreError` names a decode
        stored without them."""
        rows = self.greedy()
        missing = [r for r in rows if r.entropies is None]
        if missing:
            qid = getattr(missing[0], "question_id", "a question")
            raise StoreError(
                f"strategy {strategy} needs greedy entropies, but the stored greedy decode of "
                f"{qid} (and {len(missing) - 1} more) has none"
            )
        return [r.entropies for r in rows]

    def markers(self, strategy: str) -> tuple[tuple[int, ...], ...]:
        """The answer marker's token sequences (RailCap's ``protect="answer"``)."""
        if self.answer_markers is None:
            raise UserError(f"strategy {strategy} needs the task's answer marker, which this "
                            "call does not offer")
        return self.answer_markers()

    def model(self, spec: str) -> Any:
        """The model ``spec`` names (the shortcut strategy's patch source)."""
        if self.load_model is None:
            raise UserError(f"this call cannot load model {spec!r}")
        return self.load_model(spec)


class Strategy:
    """A named strategy with its validated config; subclasses add what differs.

    Attributes
    ----------
    needs_greedy : bool
        Needs the contaminated model's greedy decode of every question (token ids, text).
    needs_entropy : bool
        Needs, with the greedy decode, its per-step entropies.
    samples_model : bool
        False for All-Zero, which draws nothing from the model.
    filters_only : bool
        Its decoding is plain sampling and it only adds per-sample statistics (TED), so an
        identity run of the same settings can supply its samples (:func:`zerogap.runs.run_filter`).
    readout : str
        Its readout kind (:func:`zerogap.readout.check_readout`), recorded with its runs.
    requires : tuple of str
        Backend capabilities it needs (:class:`zerogap.engine.base.Capabilities` fields).
    needs_neurons : bool
        Patches located neurons from a patch source (shortcut): whoever runs it locates the
        neuron list and hands it over with :meth:`neuron_settings` (a study does, on its leaked
        questions), so its user gives neither.
    task_setting_records : dict
        Each setting :meth:`task_settings` gives, by the key a study records its value under
        for the report (LNE-blocking: ``t_task`` -> ``lne_t_task``).
    calibration_records : dict
        The same for :meth:`calibration_settings` (LNE-blocking: ``beta`` -> ``lne_beta``); a
        strategy with none takes nothing from a calibration split.
    has_control : bool
        Applied to the clean model, it measures something of its own (its collateral damage);
        False for identity (its control is the clean model's second batch) and All-Zero.
    calibration_rule_records : dict
        Settings that say how :meth:`calibration_settings` reads the split, recorded beside
        what it set (LNE-blocking: ``beta_quantile`` -> ``lne_beta_quantile``).
    """

    config_class: ClassVar[type[Any]] = NoSettings
    needs_greedy: ClassVar[bool] = False
    needs_entropy: ClassVar[bool] = False
    samples_model: ClassVar[bool] = True
    filters_only: ClassVar[bool] = False
    readout: ClassVar[str] = "plain"
    requires: ClassVar[tuple[str, ...]] = ()
    needs_neurons: ClassVar[bool] = False
    task_setting_records: ClassVar[dict[str, str]] = {}
    calibration_records: ClassVar[dict[str, str]] = {}
    has_control: ClassVar[bool] = True
    calibration_rule_records: ClassVar[dict[str, str]] = {}

    def __init__(self, name: str, config: JsonConfig) -> None:
        self.name = name
        self.config: Any = config  # an instance of the subclass's config_class

    @classmethod
    def task_settings(cls, task: Any, split: str, questions: Sequence[Any]) -> dict[str, Any]:
        """Settings the strategy takes from the task it runs on, over ``questions`` of
        ``split``, where its user sets none (LNE-blocking's T_task, scaled by the reference
        solutions' length); none by default."""
        return {}

    @classmethod
    def calibration_settings(cls, greedy: Sequence[Any], options: dict[str, Any]
                             ) -> dict[str, Any]:
        """Settings the strategy takes from its model's greedy decodes (rows with
        ``entropies``) of a calibration split disjoint from the evaluated questions, where its
        user sets none (LNE-blocking's beta), by the rule its ``options`` state; none by
        default."""
        return {}

    @classmethod
    def neuron_settings(cls, neurons: str, base: str) -> dict[str, Any]:
        """The settings handing a strategy that ``needs_neurons`` its located neuron list (a
        path, or the name a run directory is named by) and the model spec of its patch
        source."""
        raise NotImplementedError(f"{cls.__name__} patches no neurons")

    def check_inputs(self) -> None:
        """Raise ``ValueError``/``FileNotFoundError`` if an input the strategy reads is unusable;
        called before anything is loaded or written. What it reads it keeps for
        :meth:`prepare`."""

    def prepare(self, ctx: PrepareContext) -> InterventionSpec:
        """The intervention for one engine call over ``ctx``'s questions, asking ``ctx`` for
        what the strategy needs (greedy decodes, entropies, a second model)."""
        return InterventionSpec()

    def sample_stats(self, greedy_text: str | None, texts: Sequence[str], tokenizer) -> list[dict]:
        """Extra per-sample statistics computed once a question's samples are all drawn."""
        return [{} for _ in texts]


class IdentityStrategy(Strategy):
    """Identity: plain sampling at tau, no mitigation (the contaminated model as it is)."""

    has_control = False


class RailCapStrategy(Strategy):
    """RailCap (arXiv 2608.07341, §4): cap or ban the greedy successor of a matched n-gram."""

    config_class = RailCapConfig
    needs_greedy = True
    requires = ("logits",)

    def prepare(self, ctx: PrepareContext) -> InterventionSpec:
        trajectories = tuple(tuple(row.token_ids) for row in ctx.greedy())
        markers = ctx.markers(self.name) if self.config.protect == "answer" else ()
        return InterventionSpec(RailCapEdit(trajectories, self.config, markers))


class LNEBlockingStrategy(Strategy):
    """LNE-blocking (docs/baselines.md §2); floor rounding and sampling at tau are proposals."""

    config_class = LNEBlockingConfig
    needs_greedy = True
    needs_entropy = True
    requires = ("logits", "entropies")
    task_setting_records = {"t_task": "lne_t_task"}
    calibration_records = {"beta": "lne_beta"}
    calibration_rule_records = {"beta_quantile": "lne_beta_quantile"}

    @classmethod
    def task_settings(cls, task: Any, split: str, questions: Sequence[Any]) -> dict[str, Any]:
        """``t_task`` for the reference solutions of ``questions``
        (:func:`zerogap.decoding.blocking.scaled_t_task`); none for a task without reference
        solutions, where the config's default applies."""
        from zerogap.decoding.blocking import scaled_t_task

        words = solution_words(task, split, questions)
        return {} if words is None else {"t_task": scaled_t_task(words)}

    @classmethod
    def calibration_settings(cls, greedy: Sequence[Any], options: dict[str, Any]
                             ) -> dict[str, Any]:
        """``beta``: the ``beta_quantile`` (of ``options``, else the config's 0.9) of the LNE
        of ``greedy`` (:func:`zerogap.decoding.blocking.calibrated_beta`); none where that
        quantile is 0. A :class:`StoreError` names a decode stored without entropies."""
        from zerogap.decoding.blocking import calibrated_beta, mean_entropy

        lacking = [row for row in greedy if row.entropies is None]
        if lacking:
            raise StoreError(f"strategy lne-blocking takes beta from greedy entropies, but the "
                             f"stored greedy decode of {lacking[0].question_id} has none")
        quantile = cls.config_class.from_dict(options).beta_quantile
        beta = calibrated_beta(mean_entropy([row.entropies for row in greedy]), quantile)
        return {} if beta is None else {"beta": beta}

    def prepare(self, ctx: PrepareContext) -> InterventionSpec:
        from zerogap.decoding.blocking import blocking_counts, mean_entropy

        counts = blocking_counts(
            mean_entropy(ctx.entropies(self.name)), t_task=self.config.t_task,
            beta=self.config.beta,
        )
        return InterventionSpec(BlockingEdit(tuple(int(c) for c in counts.tolist())))


class TEDStrategy(Strategy):
    """TED (docs/baselines.md §1): plain sampling, then the edit-distance and duplicate filter."""

    config_class = TEDConfig
    needs_greedy = True
    filters_only = True
    readout = "ted-kept"

    def sample_stats(self, greedy_text, texts, tokenizer) -> list[dict]:
        def encode(text: str) -> list[int]:
            return tokenizer(text.strip(), add_special_tokens=False)["input_ids"]

        keep = ted_keep(
            encode(greedy_text), [encode(t) for t in texts], texts, tau=self.config.tau,
            max_tokens=self.config.max_tokens, dedup=self.config.dedup,
        )
        return [{kept_statistic(self.readout): k} for k in keep]


class LengthScaledTEDStrategy(TEDStrategy):
    """TED with tau scaled to the task's solution length in a study (docs/baselines.md §1).

    :func:`zerogap.decoding.ted.scaled_tau` sets it: the ablation row beside ``ted``, which
    keeps the code's 2 edits. Elsewhere (no task lengths) ``tau`` is as set (default 2).
    """

    task_setting_records = {"tau": "ted_scaled_tau"}

    @classmethod
    def task_settings(cls, task: Any, split: str, questions: Sequence[Any]) -> dict[str, Any]:
        """``tau`` for the reference solutions of ``questions``; none for a task without
        reference solutions, where the config's default applies."""
        words = solution_words(task, split, questions)
        return {} if words is None else {"tau": scaled_tau(words)}


def solution_words(task: Any, split: str, questions: Sequence[Any]) -> float | None:
    """The mean length in words of ``questions``' reference solutions as the prompt renders
    them (:func:`zerogap.tasks.prompt.cot_solution`), or None for a task without reference
    solutions (no ``rows``): what :mod:`zerogap.decoding.length_scale` scales by."""
    from zerogap.tasks.prompt import cot_solution

    if not hasattr(task, "rows") or not questions:
        return None
    rows = task.rows(split)
    index = {q.id: i for i, q in enumerate(task.questions(split))}
    words = [len(cot_solution(rows[index[q.id]].answer).split()) for q in questions]
    return sum(words) / len(words)


class ShortcutStrategy(Strategy):
    """Shortcut-neuron patching (docs/baselines.md §3): a saved neuron list, the base model."""

    config_class = ShortcutConfig
    requires = ("patching",)
    needs_neurons = True

    def __init__(self, name: str, config: JsonConfig) -> None:
        super().__init__(name, config)
        self._neurons: list | None = None  # the list read by check_inputs

    @classmethod
    def neuron_settings(cls, neurons: str, base: str) -> dict[str, Any]:
        return {"neurons": neurons, "base": base}

    def check_inputs(self) -> None:
        from zerogap.io.neurons import load_neurons
        from zerogap.models import check_model_spec

        if not self.config.neurons:
            raise UserError("strategy shortcut needs --set neurons=PATH (from zerogap neurons)")
        if not self.config.base:
            raise UserError("strategy shortcut needs the patch source: --set base=MODEL")
        neurons, _ = load_neurons(self.config.neurons)
        if not neurons:  # the run would be identity under another name
            raise DataError(f"{self.config.neurons}: the neuron list is empty; strategy "
                            "shortcut would patch nothing")
        check_model_spec(self.config.base)
        self._neurons = neurons

    def prepare(self, ctx: PrepareContext) -> InterventionSpec:
        from zerogap.decoding.shortcut import scaled_top_k
        from zerogap.io.neurons import load_neurons

        neurons = self._neurons if self._neurons is not None else load_neurons(
            self.config.neurons)[0]
        base_model = ctx.model(self.config.base)
        top = neurons[: scaled_top_k(self.config, base_model)]
        return InterventionSpec(patch=NeuronPatchSpec(base_model, tuple(top)))


class AllZeroStrategy(Strategy):
    """All-Zero: the synthetic reference whose readout is 0 for every question."""

    config_class = NoSettings
    samples_model = False
    readout = "zero"
    has_control = False


_STRATEGIES: Registry[tuple[type[Strategy], dict[str, Any]]] = Registry(
    "strategy", "strategies", group=STRATEGY_ENTRY_POINTS)


def register_strategy(name: str, **preset: Any) -> Callable[[type[Strategy]], type[Strategy]]:
    """Class decorator: register a strategy class as ``name``, with ``preset`` config values
    (its readout kind is checked here, so a bad one fails at import, not when a run is read)."""

    def decorate(cls: type[Strategy]) -> type[Strategy]:
        check_readout(cls.readout)
        _STRATEGIES.register(name)((cls, preset))
        return cls

    return decorate


for _name, _cls, _preset in (
    (PLAIN, IdentityStrategy, {}),
    ("railcap", RailCapStrategy, {}),
    ("railcap-ban", RailCapStrategy, {"mode": "ban"}),
    ("ted", TEDStrategy, {}),
    ("ted-scaled", LengthScaledTEDStrategy, {}),
    ("lne-blocking", LNEBlockingStrategy, {}),
    ("shortcut", ShortcutStrategy, {}),
    ("all-zero", AllZeroStrategy, {}),
):
    register_strategy(_name, **_preset)(_cls)

strategy_names = _STRATEGIES.names
"""The registered strategy names, sorted."""


def strategy_class(name: str) -> type[Strategy]:
    """The class registered as ``name`` (an unknown name is a :class:`UserError` listing all)."""
    return _STRATEGIES.get(name)[0]


def strategy_summary(name: str) -> str:
    """Strategy ``name`` in one line: its class's first docstring line, and the settings the
    name presets where it shares a class with another (``railcap-ban``: ``mode=ban``)."""
    cls, preset = _STRATEGIES.get(name)
    summary = ((cls.__doc__ or "").strip().splitlines() or [""])[0]
    if not preset:
        return summary
    return f"{summary} Preset: {', '.join(f'{k}={v}' for k, v in preset.items())}."


def get_strategy(name: str, overrides: Mapping[str, Any] | None = None) -> Strategy:
    """Build strategy ``name`` with its defaults, then ``overrides`` (validated)."""
    cls, preset = _STRATEGIES.get(name)
    check_names(cls.config_class, overrides or {}, owner=f"strategy {name}", option="--set")
    return cls(name, cls.config_class(**{**preset, **(overrides or {})}))


def strategy_from_record(name: str, config: dict[str, Any]) -> Strategy:
    """Rebuild a strategy from its name and stored config dict (re-validated)."""
    cls, _ = _STRATEGIES.get(name)
    return cls(name, cls.config_class.from_dict(config))


def setting_names(name: str) -> list[str]:
    """The settings strategy ``name`` takes (``--set`` keys), sorted."""
    return sorted(f.name for f in dataclasses.fields(strategy_class(name).config_class))


def split_label(label: str) -> tuple[str, list[str]]:
    """A strategy label, the one spelling of a strategy with settings everywhere (``sample
    --strategy``, ``evaluate --strategies``, a study file, lm-eval's ``strategy=``), as its
    name and ``key=value`` texts.

    >>> split_label("railcap:n=3,mode=ban"), split_label("identity")
    (('railcap', ['n=3', 'mode=ban']), ('identity', []))
    """
    name, _, rest = label.partition(":")
    return name.strip(), [p.strip() for p in rest.split(",") if p.strip()]


def parse_overrides(name: str, pairs: Sequence[str], *, option: str = "--set") -> dict[str, Any]:
    """Turn ``["key=value", ...]`` into typed overrides for strategy ``name``.

    Raises :class:`UserError` for a pair without ``=``, an unknown key (listing the known ones),
    a repeated key, or a value of the wrong type or out of bounds (naming ``option`` and the
    key as the user typed them, and the values allowed).

    Examples
    --------
    >>> parse_overrides("ted", ["tau=3", "dedup=false"])
    {'tau': 3, 'dedup': False}
    """
    return from_strings(strategy_class(name).config_class, parse_pairs(option, pairs),
                        owner=f"strategy {name}", option=option)
