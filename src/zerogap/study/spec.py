"""A restoration study as data: its settings, strategies and sampling sizes, and its TOML file.

A study (paper arXiv 2608.07341 §5) is one or more settings, each a clean model, a contaminated
model and a task with an optional split file ``{"leaked": [ids], "unleaked": [ids]}``, and the
strategies compared on every setting. :func:`load_study` reads a TOML study file (one reviewable
file per study) and :func:`study_toml` writes one back. A :class:`SweepSpec` adds one setting per
contamination strength (epochs x copies) of a ``zerogap contaminate`` folder, so Table 3 reads
across strengths (§5.3.1). Plain data: strategy labels are checked against the registry, and a
sweep's variants are built, when the study is prepared (:mod:`zerogap.study.run`).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from zerogap.analysis.score import ScoreSettings
from zerogap.config import FieldError, JsonConfig, bounds_text, same_field, shared_field
from zerogap.engine.base import DEFAULT_BACKEND, SamplingSpec, backend_names
from zerogap.errors import DataError, UserError
from zerogap.io.files import read_text
from zerogap.io.jsonlines import read_json_object
from zerogap.study.executor import DEFAULT_EXECUTOR, executor_choice
from zerogap.study.kinds import added_kind
from zerogap.tasks.chat import TOKENIZER_TEMPLATE

DEFAULT_STRATEGIES = ("identity", "ted", "lne-blocking", "shortcut", "railcap", "all-zero")
# Paper Table 4 and beyond: n = 1..8 and 12 with the cap ("railcap" is n = 4), n = 4 with the
# ban, n = 4 with the answer slot exempt, LNE-blocking at its published T_task = 7 and beta = 2
# (the study sets T_task for its task and beta from a calibration split otherwise) and with
# beta the calibration decodes' largest and median LNE (the study takes their 0.9 quantile),
# and TED with tau scaled to the task's solution length (the study keeps the code's tau = 2
# otherwise).
ABLATION = (*("railcap" if n == 4 else f"railcap:n={n}" for n in (*range(1, 9), 12)),
            "railcap-ban", "railcap:protect=answer", "lne-blocking:t_task=7,beta=2",
            "lne-blocking:beta_quantile=1", "lne-blocking:beta_quantile=0.5", "ted-scaled")
# A setting's keys that name files (relative ones are read beside the study file).
_PATH_KEYS = ("clean", "contaminated", "base", "split_file", "chat_template")


def _has_control(label: str) -> bool:
    """Whether strategy ``label``'s strategy measures anything applied to the clean model
    (:attr:`~zerogap.strategies.Strategy.has_control`)."""
    from zerogap.strategies import strategy_class

    return strategy_class(label.partition(":")[0]).has_control


def split_labels(text: str) -> tuple[str, ...]:
    """Strategy labels from one comma-separated string, a label's own settings kept with it: a
    piece ``key=value`` without a ``name:`` continues the label before it.

    >>> split_labels("identity,railcap:n=3,mode=ban,all-zero")
    ('identity', 'railcap:n=3,mode=ban', 'all-zero')
    """
    labels: list[str] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        name = piece.partition(":")[0]
        if labels and "=" in name and ":" in labels[-1]:
            labels[-1] += f",{piece}"
        else:
            labels.append(piece)
    return tuple(labels)


@dataclass(frozen=True)
class SettingSpec(JsonConfig):
    """One setting: models, task and (optional) split file ``{"leaked": [...], "unleaked": [...]}``.

    ``limit`` keeps the first N questions (with a split: the first N/2 leaked and N/2 unleaked
    ones; the split's rest on both sides, if any, locates the shortcut neurons); ``base`` is
    the shortcut strategy's patch source and the base of neuron location.
    """

    name: str = field(metadata={"help": "the setting's name in the tables (default: setting-N "
                                        "in a study file, setting on the command line)"})
    clean: str = field(metadata={"help": "the clean model M_cl", "values": "a model spec",
                                 "metavar": "MODEL"})
    contaminated: str = field(metadata={"help": "the contaminated model M_co (a model spec)",
                                        "metavar": "MODEL"})
    task: str = shared_field("task")
    base: str = field(default="embedded", metadata={
        "help": "the base model M_cl and M_co were fine-tuned from: the shortcut strategy's "
                "patch source and neuron location's base", "metavar": "MODEL"})
    task_options: dict = shared_field("task_options", default_factory=dict)
    task_split: str = shared_field("split", default="test")
    split_file: str | None = field(default=None, metadata={
        "help": "the leaked/unleaked split of the task's questions",
        "values": "zerogap contaminate's split.json, {leaked: [ids], unleaked: [ids]}; without "
                  "it the report has no per-split rows and a strategy that needs the split "
                  "(shortcut) is refused", "metavar": "FILE"})
    limit: int | None = field(default=None, metadata={
        "help": "the first N questions (default: all)", "min": 1, "metavar": "N",
        "values": "with a split file, N/2 leaked and N/2 unleaked, the rest of both sides "
                  "calibrating shortcut neurons"})
    chat_template: str | None = field(default=None, metadata={
        "help": "prompt instruct models through a chat template: the tokenizer's own "
                "(\"tokenizer\", or the flag without a value) or a Jinja file; recorded with "
                "the runs (default: the raw prompt)",
        "metavar": "FILE", "nargs": "?", "const": TOKENIZER_TEMPLATE})
    system_instruction: str | None = field(default=None, metadata={
        "help": "a system message (with a chat template; else put before the prompt, then a "
                "blank line); recorded with the runs", "metavar": "TEXT"})

    def __post_init__(self):
        super().__post_init__()  # every field of its declared type (a study file can hold anything)
        for key in ("name", "clean", "contaminated", "task", "base"):
            if not getattr(self, key):
                raise UserError(f"setting {self.name or '?'}: {key} must be a non-empty string")
        for key in _PATH_KEYS:
            if getattr(self, key) != TOKENIZER_TEMPLATE:
                object.__setattr__(self, key, _absolute(getattr(self, key)))


def _absolute(value: str | None) -> str | None:
    """Existing paths become absolute: they name run directories and are recorded in them, so
    the same study run from another folder must spell them the same way."""
    if value and Path(value).expanduser().exists():
        return str(Path(value).expanduser().resolve())
    return value


@dataclass(frozen=True)
class SweepSpec(JsonConfig):
    """Contamination strengths as settings: one per (epochs, copies) variant of ``models``.

    ``models`` is a ``zerogap contaminate`` folder (``clean/``, ``split.json``, ``manifest.json``);
    its manifest gives the task, the base model and every other training value. ``epochs`` and
    ``copies`` list the variants (``zerogap contaminate --sweep``), missing ones built before
    sampling; a list left empty keeps the folder's single value, and both empty evaluate the
    variants the folder was built with. ``limit`` is :class:`SettingSpec`'s, for every variant.
    """

    models: str = field(metadata={
        "help": "a zerogap contaminate folder: one setting per contaminated variant in it",
        "metavar": "DIR"})
    epochs: tuple[int, ...] = field(default=(), metadata={
        "help": "M_co variants by training epochs (empty: the folder's)"})
    copies: tuple[int, ...] = field(default=(), metadata={
        "help": "M_co variants by copies of each leaked question (empty: the folder's)"})
    limit: int | None = same_field(SettingSpec, "limit", help="as a setting's, for every variant")

    def __post_init__(self):
        super().__post_init__()
        if not self.models:
            raise UserError("sweep: models must be a zerogap contaminate folder")
        object.__setattr__(self, "models", _absolute(self.models))
        for key in ("epochs", "copies"):
            values = getattr(self, key)
            if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise UserError(f"sweep: {key} must be a list of integers >= 1, got {values!r}")


@dataclass(frozen=True)
class StudySpec(JsonConfig):
    """What a study runs; a TOML study file holds exactly these fields (see :func:`load_study`).

    ``strategies`` are names or ``name:key=value,...`` (``railcap:n=3``); ``ablation`` adds
    :data:`ABLATION` (RailCap at n = 1..8 and 12 with the cap, n = 4 with the ban and with the
    answer slot exempt; LNE-blocking at GSM8K's T_task and beta, and with beta the calibration
    decodes' largest and median LNE; TED at a length-scaled tau).
    ``controls`` lists strategies also applied to the clean model, where any gap is collateral
    damage alone; ``all_controls`` applies every strategy that has one
    (:attr:`~zerogap.strategies.Strategy.has_control`). Shortcut-neuron location scores
    ``calibration_size`` questions of the split, half leaked and half not, taken from the
    questions past a setting's ``limit`` where the split has some on both sides and else from
    the evaluated ones, as the authors do (:func:`zerogap.study.calibration.split_questions`),
    in blocks of ``neuron_block`` neurons (the nearest divisor of the MLP width; 0: one MLP
    layer per block), and scores causally only the ``neuron_candidates`` blocks of highest
    comparative score (0: every block).
    ``backend`` samples every run: ``"hf"`` (zerogap's engine) or ``"vllm"``; its runs are
    others than the HF engine's (another noise scheme), kept in their own run directories.
    ``sweep`` adds a setting per contamination variant after ``settings``.
    ``budget`` or ``target_half_width`` allocates the strategies' samples by design
    (:func:`zerogap.uncertainty.allocate_samples`, from the clean model's second batch and an
    optional ``pilot``), each question its own m within ``min_samples .. max_samples``; the
    clean model's two batches keep ``m``. ``executor`` says what runs the jobs, with its own
    options (:mod:`zerogap.study.executor`), not what they sample.
    """

    settings: tuple[SettingSpec, ...] = field(metadata={"help": "the [[setting]] tables"})
    sweep: SweepSpec | None = field(default=None, metadata={"help": "the [sweep] table"})
    strategies: tuple[str, ...] = field(default=DEFAULT_STRATEGIES, metadata={
        "help": "strategy labels, comma-separated: a name or name:key=value,... "
                "(railcap:n=3,mode=ban)", "parse": split_labels, "metavar": "LABELS"})
    ablation: bool = field(default=False, metadata={
        "help": "add the ablation rows: RailCap n = 1..8 and 12 (cap), n = 4 (ban), n = 4 "
                "with the answer slot exempt; LNE-blocking at the published T_task = 7, "
                "beta = 2, and with beta the calibration decodes' largest and median LNE; TED "
                "with tau scaled to the task's solution length"})
    controls: tuple[str, ...] = field(default=(), metadata={
        "help": "strategies also applied to the clean model (collateral damage alone)"})
    all_controls: bool = field(default=False, metadata={
        "help": "apply every strategy that has a control (all but identity and all-zero) to "
                "the clean model too: collateral damage alone", "flag": "--controls"})
    # The sampling and scoring fields are the runs' and the scorecard's own declarations (a
    # study's m is at least 2: its 0/1 readout needs at least 2).
    m: int = same_field(SamplingSpec, "m", min=2)
    temperature: float = same_field(SamplingSpec, "temperature")
    max_new_tokens: int = same_field(SamplingSpec, "max_new_tokens")
    seed: int = same_field(SamplingSpec, "seed")
    bins: int | None = same_field(ScoreSettings, "bins")
    resamples: int = same_field(ScoreSettings, "resamples")
    margin: float = same_field(ScoreSettings, "margin")
    level: float = same_field(ScoreSettings, "level")
    # Allocation by design (zerogap.uncertainty.allocation): each strategy's m per question.
    budget: float | None = field(default=None, metadata={
        "help": "allocate the strategies' samples by design, this many per question and "
                "strategy on average, where they decide SA-PPG (the clean model's second "
                "batch stays at m, its reference batch gets m or more) (default: none, a "
                "uniform m)", "min": 1, "metavar": "X"})
    target_half_width: float | None = field(default=None, metadata={
        "help": "allocate the fewest samples whose predicted half-width of every strategy's "
                "SA-PPG and every paired difference is at most this (needs a pilot) (default: "
                "none)", "gt": 0, "max": 1, "metavar": "X"})
    pilot: int = field(default=0, metadata={
        "help": "an allocated study's pilot: samples per question of each strategy on a seed "
                "of their own, never scored, that give each question's spread, the predicted "
                "half-widths and what uniform m would cost (0: none)", "min": 0,
        "max": 1 << 16, "metavar": "N"})
    min_samples: int = field(default=1, metadata={
        "help": "an allocated study's fewest samples of a question", "min": 1, "max": 1 << 16,
        "metavar": "N"})
    max_samples: int | None = field(default=None, metadata={
        "help": "an allocated study's most samples of a question (default: 65536)", "min": 1,
        "max": 1 << 16, "metavar": "N"})
    calibration_size: int = field(default=100, metadata={
        "help": "calibration questions, leaked and unleaked in turn: greedy accuracy on them "
                "gives the neurons' causal score (past --limit where the split has some on "
                "both sides, else the evaluated questions)",
        "min": 1, "metavar": "N"})
    neuron_block: int = field(default=512, metadata={
        "help": "neurons per causal block: the divisor of the MLP width nearest to this (0: "
                "one MLP layer)", "min": 0, "metavar": "N"})
    neuron_candidates: int = field(default=0, metadata={
        "help": "blocks scored causally, those of highest comparative score (0: all)",
        "min": 0, "metavar": "N"})
    title: str = field(default="", metadata={"help": "the report's title (empty: out's name)"})
    backend: str = field(default=DEFAULT_BACKEND, metadata={
        "help": "sampling engine: zerogap's transformers engine (hf) or vLLM (vllm); the runs "
                "of each are kept apart", "choices": backend_names})
    jobs: tuple[str, ...] = field(default=(), metadata={
        "help": "kinds of work added to every setting after the built-in jobs, by registered "
                "name (a package's zerogap.job_kinds entry point)"})
    executor: str = field(default=DEFAULT_EXECUTOR, metadata={
        "help": "what runs the jobs: worker threads of this process (local) or tasks on a Ray "
                "cluster (ray; pip install -e '.[ray]'), whose every node reaches the study "
                "folder and the models; an executor's own options follow its name: "
                "ray:address=auto joins the cluster this machine belongs to (or RAY_ADDRESS), "
                "ray:address=HOST:PORT that one (ray alone starts one on this machine for the "
                "study)", "metavar": "NAME[:KEY=VALUE,...]"})

    def __post_init__(self):
        super().__post_init__()
        for key in ("strategies", "controls"):
            if not all(isinstance(label, str) for label in getattr(self, key)):
                raise UserError(f"{key} must be a list of names, got {list(getattr(self, key))}")
        unknown = [c for c in self.controls if c not in self.labels()]
        if unknown:
            raise UserError(f"control {unknown[0]!r} is not one of the study's strategies")
        without = [c for c in self.controls if not _has_control(c)]
        if without:
            raise UserError(f"{without[0]} has no control on the clean model (identity's is the "
                            "clean model's second batch; all-zero samples nothing)")
        if not self.settings and self.sweep is None:
            raise UserError("a study needs at least one setting or a sweep")
        names = [s.name for s in self.settings]
        if len(set(names)) != len(names):
            raise UserError(f"setting names must differ, got {names}")
        if not self.strategies:
            raise UserError("a study needs at least one strategy")
        if self.backend not in backend_names():
            raise UserError(f"backend must be one of {', '.join(backend_names())}, got "
                            f"{self.backend!r}")
        executor_choice(self.executor)  # a known executor with its own options
        for name in self.jobs:
            added_kind(name)
        self._check_allocation()

    @property
    def allocated(self) -> bool:
        """Whether the strategies' samples are allocated by design (a budget or a target)."""
        return self.budget is not None or self.target_half_width is not None

    def _check_allocation(self) -> None:
        """Refuse allocation settings that contradict each other, naming the field (the
        command line names the flag typed)."""
        def refuse(name: str, problem: str) -> None:
            raise FieldError(type(self).__name__, name, problem)

        if self.budget is not None and self.target_half_width is not None:
            refuse("target_half_width", "and budget (--budget) are two ways to size the "
                   "allocation: give one")
        if self.target_half_width is not None and not self.pilot:
            refuse("target_half_width", "needs a pilot of each strategy to predict "
                   "half-widths: give pilot (--pilot N) too")
        if not self.allocated:
            for name in ("pilot", "min_samples", "max_samples"):
                default = next(f.default for f in fields(self) if f.name == name)
                if getattr(self, name) != default:
                    refuse(name, "applies to an allocated study only: give budget (--budget) "
                           "or target_half_width (--target-half-width) too")
        if self.max_samples is not None and self.max_samples < self.min_samples:
            refuse("max_samples", f"must be at least min_samples ({self.min_samples}), got "
                   f"{self.max_samples}")
        if self.budget is not None and self.budget < self.min_samples:
            refuse("budget", f"must be at least min_samples ({self.min_samples}), got "
                   f"{self.budget}")

    def labels(self) -> list[str]:
        """Strategy labels in table order, the ablation grid added (duplicates dropped)."""
        extra = ABLATION if self.ablation else ()
        return list(dict.fromkeys((*self.strategies, *extra)))

    def control_labels(self) -> list[str]:
        """Strategy labels also applied to the clean model, in table order."""
        if self.all_controls:
            return [s for s in self.labels() if _has_control(s)]
        return [s for s in self.labels() if s in self.controls]

    def scoring(self) -> ScoreSettings:
        return ScoreSettings(bins=self.bins, resamples=self.resamples, level=self.level,
                             margin=self.margin, seed=self.seed)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["settings"] = [asdict(s) for s in self.settings]
        return out


_SETTING_KEYS = {f.name for f in fields(SettingSpec)}
_SWEEP_KEYS = {f.name for f in fields(SweepSpec)}
_STUDY_KEYS = {f.name for f in fields(StudySpec)} - {"settings", "sweep"}
# Task options that name files (gsm8k's and jsonl's data, any task's exemplars).
_TASK_PATH_KEYS = ("path", "exemplars")


def _relative_to_file(path: Path, entry: dict, keys) -> dict:
    """Relative paths in ``keys`` that exist beside the study file are taken from there (a
    value that exists nowhere there, a hub id say, stays as written)."""
    entry = dict(entry)
    for key in keys:
        value = entry.get(key)
        if isinstance(value, str) and (path.parent / value).exists() \
                and not Path(value).is_absolute():
            entry[key] = str(path.parent / value)
    return entry


def _holds_study(folder: Path) -> bool:
    """Whether ``folder`` is a study folder: its record, or runs of one cut short before it."""
    from zerogap.analysis.folder import STUDY_FILE

    return (folder / STUDY_FILE).is_file() or (folder / "runs").is_dir()


def study_out(path: Path, value: str) -> tuple[Path, str | None]:
    """The folder ``out = value`` of study file ``path`` names, and a note when it is read the
    old way.

    ``out`` is relative to the study file, as every other path in it. A study that ran before
    this rule read ``out`` relative to the working folder: when nothing is beside the file
    under that name but the working folder holds a study there, that folder is taken (so the
    study resumes instead of sampling again), with a note; likewise a ``study.toml`` written
    back into a study folder before this rule (its ``out`` then named that folder from
    wherever it ran).
    """
    out = Path(value).expanduser()
    if out.is_absolute():
        return out, None
    beside = path.parent / out
    if _holds_study(beside):
        return beside, None
    for legacy, where in ((out, "the working folder"), (path.parent, "this file's own folder")):
        if _holds_study(legacy) and legacy.resolve() != beside.resolve():
            return legacy, (f"{path}: out = {value!r} is read relative to the study file now "
                            f"({beside} holds no study); using the study in {legacy} "
                            f"({where}) that it named before; write out = "
                            f"{json.dumps(str(legacy.resolve()))} to silence this")
    return beside, None


def _table(path: Path, table: Any, known: set, where: str) -> dict:
    """``table`` of the study file, refused unless it is a table of ``known`` keys."""
    if not isinstance(table, dict):
        raise DataError(f"{path}: {where} must be a table")
    bad = sorted(set(table) - known)
    if bad:
        raise DataError(f"{path}: {where}: unknown key(s) {', '.join(bad)}; known: "
                         f"{', '.join(sorted(known))}")
    return table


def _build(path: Path, cls, entry: dict, where: str | None):
    """``cls(**entry)``; its errors name the file (and ``where``, unless they say it already)."""
    try:
        return cls(**entry)
    except (TypeError, ValueError) as err:
        raise DataError(f"{path}: {where + ': ' if where else ''}{err}") from None


def load_study(path: str | Path, *, notes: list[str] | None = None,
               **overrides) -> tuple[StudySpec, Path | None]:
    """Read a TOML study file: top-level study fields, ``out``, ``[[setting]]`` tables and an
    optional ``[sweep]`` table (:class:`SweepSpec`'s fields); docs/study.md lists every key.

    Every relative path is taken relative to the file's folder: ``out`` always (see
    :func:`study_out`, which reads a study that ran before this rule as it did then), model,
    split, sweep and task-option paths (``path``, ``exemplars``) when they exist there.
    ``overrides`` replace top-level fields. Returns the spec and ``out`` (or None); lines for
    the user (an old ``out``, a setting without a split file) are appended to ``notes``.
    Raises ``ValueError`` naming the file and the bad key or value.
    """
    path = Path(path)
    text = read_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise DataError(f"{path}: not valid TOML ({err})") from None
    except RecursionError:
        raise DataError(f"{path}: TOML nested too deeply") from None
    out = data.pop("out", None)
    if "bootstrap" in data and "resamples" not in data:  # study files written before issue 19
        data["resamples"] = data.pop("bootstrap")
    if out is not None and (not isinstance(out, str) or not out):
        raise DataError(f"{path}: out must be a folder name (a string), got {out!r}")
    raw_settings = data.pop("setting", [])
    sweep = None
    if "sweep" in data:
        table = _table(path, data.pop("sweep"), _SWEEP_KEYS, "[sweep]")
        sweep = _build(path, SweepSpec, _relative_to_file(path, table, ("models",)), None)
    unknown = sorted(set(data) - _STUDY_KEYS)
    if unknown:
        raise DataError(f"{path}: unknown key(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(_STUDY_KEYS | {'out', 'setting', 'sweep'}))}")
    if not isinstance(raw_settings, list) or not (raw_settings or sweep):
        raise DataError(f"{path}: needs at least one [[setting]] table or a [sweep] table")
    settings = []
    for i, entry in enumerate(raw_settings, 1):
        where = f"[[setting]] {i}"
        entry = _relative_to_file(path, _table(path, entry, _SETTING_KEYS, where), _PATH_KEYS)
        if isinstance(entry.get("task_options"), dict):
            entry["task_options"] = _relative_to_file(path, entry["task_options"],
                                                      _TASK_PATH_KEYS)
        entry.setdefault("name", f"setting-{i}")
        settings.append(_build(path, SettingSpec, entry, where))
    for key in ("strategies", "controls"):
        if isinstance(data.get(key), list):
            data[key] = tuple(data[key])
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        spec = StudySpec(settings=tuple(settings), sweep=sweep, **data)
    except FieldError as err:
        if overrides.get(err.field) is not None:  # a flag's value: the error names the flag
            raise
        raise DataError(f"{path}: {err}") from None
    except (TypeError, ValueError) as err:
        raise DataError(f"{path}: {err}") from None
    folder = None
    if out is not None:
        folder, note = study_out(path, out)
        if note and notes is not None:
            notes.append(note)
    if notes is not None:
        notes += unsplit_warnings(spec)
    return spec, folder


def unsplit_warnings(spec: StudySpec) -> list[str]:
    """A line per setting without a split file: its questions are not told apart as leaked
    and unleaked, so the report has no per-split rows and the shortcut strategy cannot run."""
    return [f"setting {s.name} has no split_file: its questions are scored together, with no "
            "leaked/unleaked rows (give the split.json zerogap contaminate wrote)"
            for s in spec.settings if not s.split_file]


OUT_HELP = ("the study folder (runs, tables, report), relative to the study file; "
            "--out overrides it")


def study_key_table() -> str:
    """Markdown: every key of a study file, from the fields' declarations (docs/study.md)."""
    def rows(where: str, cls, skip=()) -> list[str]:
        out = []
        for f in fields(cls):
            if f.name in skip:
                continue
            if f.default_factory is not MISSING:
                default = f"`{_toml_value(f.default_factory())}`"
            elif f.default is not MISSING:
                default = f"`{_toml_value(f.default)}`" if f.default not in (None, "") else "—"
            else:
                default = "see meaning" if "default" in f.metadata["help"] else "required"
            bounds = "; ".join(t for t in (f.metadata.get("values"), bounds_text(f.metadata)) if t)
            meaning = f.metadata["help"] + (f" ({bounds})" if bounds else "")
            out.append(f"| {where} | `{f.name}` | {default} | "
                       f"{meaning.replace('|', chr(92) + '|')} |")
        return out

    lines = ["| table | key | default | meaning |", "|---|---|---|---|",
             f"| top level | `out` | — | {OUT_HELP} |"]
    lines += rows("top level", StudySpec, skip=("settings", "sweep"))
    lines += rows("`[[setting]]`", SettingSpec)
    lines += rows("`[sweep]`", SweepSpec)
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) \
            + "}"
    raise TypeError(f"cannot write {value!r} to TOML")


def study_toml(spec: StudySpec) -> str:
    """The study as the TOML file written into its own folder (``out = "."``, which
    :func:`load_study` reads relative to the file), None values left out."""
    data = spec.to_dict()
    lines = ['out = "."']
    lines += [f"{k} = {_toml_value(v)}" for k, v in data.items()
              if k not in ("settings", "sweep") and v is not None]
    if data["sweep"] is not None:
        lines += ["", "[sweep]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in data["sweep"].items() if v is not None]
    for s in data["settings"]:
        lines += ["", "[[setting]]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in s.items() if v is not None]
    return "\n".join(lines) + "\n"



def read_split(path: str | Path) -> dict[str, list[str]]:
    """A split file ``{"leaked": [ids], "unleaked": [ids]}``; ``ValueError`` naming the problem."""
    data = read_json_object(path, "split file")
    out = {}
    for key in ("leaked", "unleaked"):
        ids = data.get(key)
        if not isinstance(ids, list) or not ids or not all(isinstance(q, str) for q in ids):
            raise DataError(f"{path}: '{key}' must be a non-empty list of question ids")
        out[key] = ids
    both = set(out["leaked"]) & set(out["unleaked"])
    if both:
        raise DataError(f"{path}: {len(both)} ids are both leaked and unleaked "
                         f"(first: {sorted(both)[0]!r})")
    return out
