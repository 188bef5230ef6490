"""A model spec and a backend name -> the loaded model and the backend that samples it.

The one place that knows how each backend is started, shared by ``zerogap sample`` and
``zerogap evaluate``: the HF engine on a transformers model, or vLLM on the spec's folder
(:func:`zerogap.models.model_folder`; ``embedded``, GGUF files and PEFT adapters become plain
folders vLLM loads). :func:`backend_capabilities` answers what a backend can run without
starting it, so that a strategy it cannot run is refused before anything loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zerogap.engine.base import Backend, Capabilities
from zerogap.errors import UserError
from zerogap.models import LoadedModel

BACKENDS = ("hf", "vllm")


@dataclass(frozen=True)
class EngineOptions:
    """How models are loaded: not part of what a run samples (so not of its identity), except
    ``dtype``, which callers that name runs by content record themselves.

    ``device`` and ``max_batch`` are the HF engine's; the parallel sizes and ``vllm_options``
    (further ``vllm.LLM`` arguments) are vLLM's.
    """

    device: str | None = None
    dtype: str = "float32"
    max_batch: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    vllm_options: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("max_batch", "tensor_parallel_size", "pipeline_parallel_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                flag = "--" + name.replace("_", "-")
                raise UserError(f"{flag} must be at least 1, got {value}")


def backend_capabilities(name: str) -> Capabilities:
    """What backend ``name`` can run (vLLM's module loads without vLLM itself).

    >>> backend_capabilities("vllm").patching
    False
    """
    if name not in BACKENDS:
        raise UserError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "vllm":
        from zerogap.engine.vllm import VLLM_CAPABILITIES

        return VLLM_CAPABILITIES
    from zerogap.engine.hf import HF_CAPABILITIES

    return HF_CAPABILITIES


def load_engine(spec: str, backend: str = "hf", options: EngineOptions | None = None
                ) -> tuple[LoadedModel, Backend]:
    """``(loaded model, backend)`` for model ``spec``.

    With vLLM, ``loaded.model`` is None (vLLM holds the weights in its own engine) and
    ``loaded.fingerprint`` is :func:`zerogap.models.files_fingerprint` of the folder it loads.
    """
    from zerogap.models import files_fingerprint, load_model, model_folder

    options = options or EngineOptions()
    backend_capabilities(backend)  # an unknown name is refused here
    if backend == "vllm":
        from zerogap.engine.vllm import VLLMBackend

        folder = model_folder(spec)
        engine = VLLMBackend.load(folder, tensor_parallel_size=options.tensor_parallel_size,
                                  pipeline_parallel_size=options.pipeline_parallel_size,
                                  dtype=options.dtype, **options.vllm_options)
        loaded = LoadedModel(None, engine.tokenizer, spec, files_fingerprint(folder),
                             dtype=options.dtype)
        return loaded, engine
    from zerogap.engine.hf import HFBackend

    loaded = load_model(spec, device=options.device, dtype=options.dtype)
    return loaded, HFBackend(loaded.model, loaded.tokenizer, max_batch=options.max_batch)
