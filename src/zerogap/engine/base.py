"""The backend contract: what any sampling engine offers the runs, and the backend registry.

A backend decodes prompts under a :class:`SamplingSpec` (the one owner of m, temperature,
top-k/top-p, seed, token limit and stop strings) with backend-neutral intervention specs built
by the strategies (:class:`LogitsEdit`, :class:`ActivationPatch`), and says through
:class:`Capabilities` which kinds of intervention it can run, so that a strategy it cannot run
is refused before any model loads. Backends are found by name in a registry
(:func:`backend_class`): the built-in ``hf`` and ``vllm``, and third-party ones registered with
:func:`register_backend` in a module named by a ``zerogap.backends`` entry point. Nothing
outside this module compares backend names. Torch-free.

Protocol of the evaluation (arXiv 2608.07341, §5.1): m = 50 samples per question at T = 0.7.

>>> SamplingSpec(m=8, temperature=0.7, max_new_tokens=48).to_dict()["top_p"] is None
True
>>> SamplingSpec(m=0)
Traceback (most recent call last):
...
zerogap.config.FieldError: SamplingSpec.m must be at least 1, got 0
>>> SamplingSpec(temperature=float("inf"))
Traceback (most recent call last):
...
zerogap.config.FieldError: SamplingSpec.temperature must be a finite number, got inf
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, cast

from zerogap.config import JsonConfig, shared_field
from zerogap.progress import ProgressCallback
from zerogap.registry import Registry

if TYPE_CHECKING:
    from zerogap.models import LoadedModel

# The temperatures a run accepts. Below 0.01 a logit gap of 0.1 already means odds of e^10, so
# sampling is practically greedy decoding (``zerogap greedy`` does that), and near float32's
# smallest numbers logits / T overflow to inf and every draw is garbage; above 10 the
# next-token distribution is close to uniform, so responses are random text. Neither end says
# anything about a model; the paper samples at 0.7 (arXiv 2608.07341, §5.1).
MIN_TEMPERATURE = 0.01
MAX_TEMPERATURE = 10.0
# Above this, a run is legal but almost surely a typo: the command line warns.
WARN_TEMPERATURE = 2.0


@dataclass(frozen=True)
class SamplingSpec(JsonConfig):
    """What a run draws; every field is part of the run's identity in its store."""

    # Upper bounds refuse sizes no run can hold before anything is allocated or recorded: m up
    # to 2^16 (vLLM's per-question seed range, engine/vllm.py), responses up to 2^20 tokens
    # (beyond any model's context; the model's own context is checked once it is loaded).
    m: int = field(default=50, metadata={"help": "samples per question", "min": 1,
                                         "max": 1 << 16, "flag": "-m"})
    temperature: float = field(default=0.7, metadata={"help": "sampling temperature tau",
                                                      "min": MIN_TEMPERATURE,
                                                      "max": MAX_TEMPERATURE,
                                                      "flag": ("-T", "--temperature")})
    max_new_tokens: int = field(default=256, metadata={"help": "token limit per response",
                                                       "min": 1, "max": 1 << 20})
    seed: int = shared_field("seed", default=0)
    top_k: int | None = field(default=None, metadata={"help": "keep the k most likely tokens",
                                                      "min": 1})
    top_p: float | None = field(default=None, metadata={"help": "nucleus probability mass",
                                                        "gt": 0, "max": 1})
    stop: tuple[str, ...] = field(default=(), metadata={"help": "strings that end a response"})


WeightDtype = Literal["float32", "bfloat16", "auto"]
"""The weight dtypes a backend loads (:attr:`EngineOptions.dtype`)."""


@dataclass(frozen=True)
class EngineOptions(JsonConfig):
    """How models are loaded: not part of what a run samples (so not of its identity), except
    ``dtype``, which callers that name runs by content record themselves.

    ``device``, ``max_batch``, ``threads`` and ``max_memory`` (the process's budget,
    :mod:`zerogap.engine.memory`) are the HF engine's; the parallel sizes and
    ``vllm_options`` (further ``vllm.LLM`` arguments) are vLLM's; a backend ignores the
    others' options. The command line generates its flags from these fields (``max_batch`` is
    ``--batch-size``).
    """

    device: str | None = field(default=None, metadata={
        "help": "torch device, e.g. cpu or cuda:1 (default: cuda if present, else cpu)"})
    dtype: WeightDtype = shared_field("dtype", default="float32")
    max_batch: int | None = field(default=None, metadata={
        "help": "most rows decoded together (default: sized from the memory budget and the "
                "call's own timing)", "min": 1,
        "flag": "--batch-size", "metavar": "N"})
    threads: int | None = field(default=None, metadata={
        "help": "torch threads on a CPU, fixed (default: as many as the cores other processes "
                "leave, re-checked as the work runs; also ZEROGAP_THREADS)",
        "min": 1, "metavar": "N"})
    max_memory: str | None = field(default=None, metadata={
        "help": "memory the whole process may hold resident, e.g. 6GiB or 512MiB, shared by "
                "everything it runs (default: 30% of what the machine or its cgroup has "
                "available and the process holds at the start; also ZEROGAP_MAX_MEMORY)",
        "metavar": "SIZE"})
    tensor_parallel_size: int = field(default=1, metadata={
        "help": "vLLM: GPUs per model replica (tensor parallel)", "min": 1, "metavar": "N"})
    pipeline_parallel_size: int = field(default=1, metadata={
        "help": "vLLM: pipeline stages (across nodes with vLLM's Ray executor)", "min": 1,
        "metavar": "N"})
    vllm_options: dict = field(default_factory=dict, metadata={
        "help": "vLLM: another vllm.LLM argument, its value read as JSON where it parses "
                "(e.g. gpu_memory_utilization=0.5; repeatable)", "flag": "--vllm-option"})


@dataclass
class Generation:
    """One generated response.

    ``token_ids`` excludes the EOS token; when a stop string ended the response they run up to
    and including the token that completed it, while ``text`` is cut just before the stop string.
    ``finish`` is ``"eos"``, ``"stop"`` or ``"length"``. ``entropies`` (greedy decodes asked for
    them) holds, per generated token, the entropy in nats of the model's next-token distribution
    at temperature 1. ``stats`` are the intervention's per-sample statistics.
    """

    token_ids: list[int]
    text: str
    finish: str
    entropies: list[float] | None = None
    stats: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can run and how it must be handled.

    ``logits``: per-step logits edits (RailCap, LNE-blocking); ``patching``: activation patching
    from a second model (shortcut neurons); ``entropies``: full-vocabulary entropies of greedy
    decodes (LNE-blocking's input); ``device``: it places the model on
    :attr:`EngineOptions.device`; ``exclusive``: an engine claims most of the accelerator's
    memory, so only one may be alive at a time (close it before starting another);
    ``sample_ranges``: :meth:`Backend.sample` takes ``indices``, a range of sample indices per
    question drawn as a call of ``range(m)`` would draw them (an allocated study's m per
    question, samples added to a stored question).
    """

    logits: bool
    patching: bool
    entropies: bool
    device: bool = False
    exclusive: bool = False
    sample_ranges: bool = False

    def missing(self, needed: Sequence[str]) -> list[str]:
        """The capabilities in ``needed`` this backend lacks."""
        return [name for name in needed if not getattr(self, name)]


class LogitsEdit:
    """A backend-neutral per-step logits edit over one engine call's questions (plain data).

    A strategy builds one from what it prepared (greedy trajectories, counts); a backend turns
    it into its own form: an in-process backend calls :meth:`torch_hook`, a server-style backend
    whose logits processors are found by the server (vLLM) sends :meth:`request_args` with each
    question's request. An edit that has no request form leaves :meth:`request_args` raising,
    and such a backend refuses it in one line.
    """

    def torch_hook(self, *, samples_per_question: int, device: Any) -> Any:
        """The :class:`zerogap.engine.hooks.Intervention` that applies this edit to a batch of
        ``(rows, vocab)`` logits on ``device``; every sample index of the call is below
        ``samples_per_question``."""
        raise NotImplementedError(f"{type(self).__name__} has no in-process hook")

    def request_args(self, question: int) -> dict[str, Any]:
        """Question ``question``'s per-request arguments for server-side logits processors
        (vLLM's ``SamplingParams.extra_args``), keyed by processor."""
        raise NotImplementedError(f"{type(self).__name__} has no per-request form")

    def question_stats(self, question: int) -> dict[str, Any]:
        """What the edit set for question ``question``, recorded in the statistics of each of
        its samples whatever backend draws them (LNE-blocking's count); none by default."""
        return {}


class ActivationPatch:
    """A backend-neutral activation patch: a context that holds for every forward pass of an
    engine call (for example, neurons overwritten from a second model)."""

    def torch_patch(self) -> Any:
        """The :data:`zerogap.engine.hooks.Patch` for an in-process torch model: called with the
        model, it returns a context manager that patches it while entered."""
        raise NotImplementedError(f"{type(self).__name__} has no in-process form")


@dataclass(frozen=True)
class InterventionSpec:
    """What a strategy hands a backend for one engine call (None = none): a logits edit applied
    at every sampling step and an activation patch held through every forward pass."""

    logits: LogitsEdit | None = None
    patch: ActivationPatch | None = None


class Backend(Protocol):
    """A sampling engine. ``name`` and ``noise`` are recorded in every run store: a run is
    resumed only by the backend (and noise scheme) that started it."""

    name: ClassVar[str]
    noise: str
    capabilities: Capabilities

    @classmethod
    def check_available(cls, options: EngineOptions) -> None:
        """Refuse, in one line, options this machine cannot honour (a missing library or
        device), before anything loads."""
        ...

    @classmethod
    def start(cls, spec: str, options: EngineOptions) -> tuple[LoadedModel, Backend]:
        """Load model ``spec`` and the backend that samples it."""
        ...

    def sample(self, prompts: Sequence[str], spec: SamplingSpec, *, question_ids: Sequence[str],
               intervention: LogitsEdit | None = None, patch: ActivationPatch | None = None,
               progress: ProgressCallback | None = None,
               on_question: Callable[[int, list[Generation]], None] | None = None,
               indices: Sequence[range] | None = None) -> list[list[Generation]]:
        """``spec.m`` generations per prompt, in prompt order; with ``indices`` (a backend
        whose capabilities say ``sample_ranges``), the samples ``indices[i]`` of prompt ``i``,
        each the draw a call of ``range(m)`` makes at that index. Callers pass ``indices``
        only where some prompt draws other than ``range(spec.m)``."""
        ...

    def greedy(self, prompts: Sequence[str], spec: SamplingSpec, *, entropies: bool = False,
               patch: ActivationPatch | None = None, progress: ProgressCallback | None = None,
               on_question: Callable[[int, Generation], None] | None = None
               ) -> list[Generation]:
        """One greedy generation per prompt (``spec.max_new_tokens``, ``spec.stop``)."""
        ...

    def forced_ranks(self, prompts: Sequence[str], forced: Sequence[Sequence[int]]
                     ) -> list[list[int]]:
        """Teacher-forced ranks of ``forced[i]`` after ``prompts[i]``: at each step, the forced
        token's rank among the next-token logits, ``1 + #{larger logits}`` (1 = argmax)."""
        ...

    def close(self) -> None:
        """Release the engine's memory; the backend is unusable afterwards."""
        ...


BACKEND_ENTRY_POINTS = "zerogap.backends"
DEFAULT_BACKEND = "hf"

_BACKENDS: Registry[type[Backend]] = Registry("backend", group=BACKEND_ENTRY_POINTS)
for _name, _module in (("hf", "zerogap.engine.hf"), ("vllm", "zerogap.engine.vllm")):
    _BACKENDS.register_lazy(_name, _module)


def register_backend(name: str) -> Callable[[type], type]:
    """Class decorator: register a backend class as ``name`` (sets its ``name``).

    A third-party package decorates its class in a module and names that module in a
    ``zerogap.backends`` entry point under the same name; the module is imported when the
    backend is first asked for.
    """

    def decorate(cls: type) -> type:
        cls.name = name  # type: ignore[attr-defined]
        _BACKENDS.register(name)(cls)
        return cls

    return decorate


backend_names = _BACKENDS.names
"""The registered backend names (entry points included, none imported), sorted."""


def backend_class(name: str) -> type[Backend]:
    """The class registered as ``name``; an unknown name is a ``UserError`` listing all.

    >>> backend_class("vllm").capabilities.patching  # vLLM's module loads without vLLM
    False
    """
    return _BACKENDS.get(name)


def backend_capabilities(name: str) -> Capabilities:
    """What backend ``name`` can run, without starting it."""
    return backend_class(name).capabilities


def concrete_dtype(dtype: str | None, backend: str, device: str | None = None) -> WeightDtype:
    """``dtype`` as the weights will hold it: ``None`` and ``"auto"`` become
    :func:`zerogap.models.auto_dtype` of the device ``backend`` computes on (``device`` where the
    backend takes one, else CUDA if present, else the CPU).

    Runs are named and recorded by this value, never by ``"auto"``, which means bfloat16 on one
    machine and float32 on the next.
    """
    if dtype is None or dtype == "auto":
        import torch

        from zerogap.models import auto_dtype

        if backend_capabilities(backend).device and device is not None:
            dtype = auto_dtype(device)
        else:
            dtype = auto_dtype("cuda" if torch.cuda.is_available() else "cpu")
    # A named dtype passes through: EngineOptions checks it against WeightDtype's values.
    return cast(WeightDtype, dtype)

