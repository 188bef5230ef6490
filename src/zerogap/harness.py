"""zerogap's sampling engine as an lm-evaluation-harness model: ``--model zerogap``.

``lm-eval run --model zerogap --model_args pretrained=SPEC,strategy=NAME[,KEY=VALUE...]``
(through ``zerogap lm-eval``, which registers this class) serves the harness's
``generate_until`` requests with zerogap's engine under any registered strategy whose readout is
the plain ``correct / m`` (identity, railcap, railcap-ban, lne-blocking, shortcut), so RailCap
(arXiv 2608.07341, §4) runs inside the harness's own tasks, filters and metrics, and the
``--log_samples`` output scores with ``zerogap score``.

How requests map onto the engine:

* A task with ``repeats: K`` hands the model the same request object K times in a row; those K
  are served as one prompt with m = K samples, drawn together on the prompt's shared keys, and
  sample ``j`` of document ``d`` of task ``t`` is keyed by (``seed``, ``t/d/idx``, ``j``)
  (:mod:`zerogap.engine.noise`): per-request seeds that depend neither on the batch nor on the
  other documents of the run.
* Requests with the same generation settings and m go to one engine call, so the k-shot
  prefix every prompt shares is encoded once.
* ``do_sample: true`` with ``temperature`` > 0 samples at that temperature (``top_k`` and
  ``top_p`` as the harness gives them); otherwise the request is decoded greedily, once, and
  that response is repeated K times (greedy decoding has one answer). Logits strategies are
  defined on sampling only and refuse greedy requests.
* RailCap and LNE-blocking need the served model's greedy decode of each prompt; it is made
  first, under the request's own stop strings and token limit.

Model arguments: ``pretrained`` (any model spec zerogap takes, ``embedded`` by default),
``strategy`` (default ``identity``; a label with its settings, ``railcap:n=3``, as in
``zerogap sample --strategy`` and a study), ``dtype`` (default ``auto``, as the command line's
``--dtype``), ``seed`` (default 0), ``max_batch`` (most rows
decoded together; by default the engine sizes its batches itself, and the harness's
``--batch_size`` is not used), ``threads`` (torch threads on a CPU, fixed; by default they
follow the cores other processes leave, :mod:`zerogap.engine.threads`), ``device`` (the
harness's ``--device``); every other key is a
setting of the strategy (``n=3``, ``mode=ban``, ``neurons=PATH``...).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import normalize_gen_kwargs

from zerogap.config import show_value
from zerogap.engine.base import DEFAULT_BACKEND, SamplingSpec
from zerogap.errors import UserError
from zerogap.progress import ProgressCallback, progress_bars
from zerogap.strategies import Strategy, parse_overrides, split_label

__all__ = ["MODEL_NAME", "ZerogapLM", "plan_requests", "request_spec"]

MODEL_NAME = "zerogap"
_log = logging.getLogger("zerogap.harness")

# Generation settings of the harness that the engine honours; any other is refused rather than
# silently dropped (a repetition penalty the hf model would apply would change the answers).
_ENGINE_KWARGS = {"do_sample", "temperature", "until", "max_gen_toks", "top_k", "top_p"}
# The harness hands over its requests as they come, so they are served in this process by
# zerogap's own engine.
_BACKEND = DEFAULT_BACKEND


def request_spec(gen_kwargs: dict, *, m: int, seed: int, default_max_tokens: int
                 ) -> tuple[bool, SamplingSpec]:
    """``(greedy, spec)`` for one request's harness generation settings.

    The harness's own normalisation decides greedy or sampled (``do_sample`` false, or a
    temperature of 0, is greedy), the token limit (``max_gen_toks`` and its aliases) and the
    stop strings (``until``); ``top_k``/``top_p`` pass through. Anything else is a
    :class:`UserError` naming it.

    >>> greedy, spec = request_spec({"until": ["Q:"], "do_sample": True, "temperature": 0.7},
    ...                             m=4, seed=1, default_max_tokens=64)
    >>> greedy, spec.m, spec.temperature, spec.max_new_tokens, spec.stop
    (False, 4, 0.7, 64, ('Q:',))
    >>> request_spec({"until": "\\n\\n"}, m=1, seed=0, default_max_tokens=8)[0]
    True
    """
    kwargs = dict(normalize_gen_kwargs(gen_kwargs, default_max_tokens))
    unknown = sorted(set(kwargs) - _ENGINE_KWARGS)
    if unknown:
        raise UserError(f"--model {MODEL_NAME}: generation setting {unknown[0]!r} is not "
                        f"supported (supported: {', '.join(sorted(_ENGINE_KWARGS))})")
    until = kwargs["until"]
    stop = tuple(s for s in ([until] if isinstance(until, str) else until) if s)
    greedy = not kwargs["do_sample"] or float(kwargs["temperature"]) == 0.0
    spec = SamplingSpec(  # a greedy request's temperature is never used; any valid one does
        m=m, temperature=0.7 if greedy else float(kwargs["temperature"]),
        max_new_tokens=int(kwargs["max_gen_toks"]), seed=seed, top_k=kwargs.get("top_k"),
        top_p=kwargs.get("top_p"), stop=stop,
    )
    return greedy, spec


@dataclass
class RequestGroup:
    """Distinct requests that share generation settings and m, for one engine call.

    ``requests[i]`` answers the positions ``positions[i]`` of the harness's request list (its
    repeats); ``m`` is the number of those positions, the same for every request of the group.
    """

    gen_kwargs: dict
    m: int
    requests: list[Any]
    positions: list[list[int]]


def plan_requests(requests: Sequence[Any]) -> list[RequestGroup]:
    """Group a ``generate_until`` request list into engine calls.

    The harness lists a request with ``repeats: K`` as the same object K times; each distinct
    object becomes one prompt with m = K, and distinct objects with equal generation settings
    and equal m share a group, in first-seen order.

    >>> from types import SimpleNamespace as R
    >>> a, b = R(args=("2+2=", {"until": ["\\n"]})), R(args=("3+3=", {"until": ["\\n"]}))
    >>> [(g.m, g.positions) for g in plan_requests([a, a, b, b])]
    [(2, [[0, 1], [2, 3]])]
    """
    seen: dict[int, tuple[Any, list[int]]] = {}
    for pos, request in enumerate(requests):
        seen.setdefault(id(request), (request, []))[1].append(pos)
    groups: dict[tuple[str, int], RequestGroup] = {}
    for request, positions in seen.values():
        gen_kwargs = request.args[1]
        key = (json.dumps(gen_kwargs, sort_keys=True, default=str), len(positions))
        group = groups.setdefault(key, RequestGroup(gen_kwargs, len(positions), [], []))
        group.requests.append(request)
        group.positions.append(positions)
    return list(groups.values())


def question_id(request: Any) -> str:
    """The id that keys a request's sample noise: ``task/doc_id/idx``."""
    return f"{request.task_name}/{request.doc_id}/{request.idx}"


def _harness_device(device: str | None) -> str | None:
    """The harness's ``--device`` as zerogap's: its default ``cuda:0`` on a machine without
    CUDA means the best device there is, as for ``--model hf``; None means the same."""
    import torch

    if device is not None and device.startswith("cuda") and not torch.cuda.is_available():
        _log.warning("no CUDA device here: --device %s ignored, decoding on the CPU", device)
        return None
    return device


@register_model(MODEL_NAME)
class ZerogapLM(LM):
    """The harness model served by zerogap's engine under one strategy (see the module doc).

    The strategy, its settings and inputs and the engine options are validated before the
    model loads, with :mod:`zerogap.runs`' own checks; the model loads and serves through its
    :class:`~zerogap.runs.LoadedEngine` as a run's does. ``stats`` maps each sampled request's
    :func:`question_id` to what the strategy's hook counted for each of its m responses, in
    sample order (RailCap: ``interventions`` and ``steps_on_trajectory``).
    """


    def __init__(self, pretrained: str = "embedded", strategy: str = "identity",
                 dtype: str = "auto", seed: int = 0, max_batch: int | None = None,
                 threads: int | None = None, device: str | None = None, batch_size: Any = None,
                 max_batch_size: Any = None, max_gen_toks: int = 256, **settings: Any) -> None:
        super().__init__()
        from zerogap.engine.base import EngineOptions
        from zerogap.runs import build_strategy, check_engine, start_engine

        # The harness turns "3" into 3 and "true" into True; the strategy's own parser types
        # its settings from their text, with its one-line errors. A label's settings
        # (strategy=railcap:n=3) and the keys after it (,mode=ban) are one list.
        name, pairs = split_label(str(strategy))
        texts = pairs + [f"{key}={show_value(value)}" for key, value in settings.items()]
        self.strategy: Strategy = build_strategy(
            name, parse_overrides(name, texts, option="--model_args"), _BACKEND)
        if not self.strategy.samples_model or self.strategy.readout != "plain":
            raise UserError(f"--model {MODEL_NAME}: strategy {strategy} (readout "
                            f"{self.strategy.readout}) does not give one graded response per "
                            "sample, which the harness's metrics need; use zerogap sample")
        for name, value, least in (("seed", seed, 0), ("max_gen_toks", max_gen_toks, 1),
                                   ("max_batch", 1 if max_batch is None else max_batch, 1),
                                   ("threads", 1 if threads is None else threads, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise UserError(f"--model_args {name} must be an integer >= {least}, "
                                f"got {value!r}")
        # batch_size and max_batch_size (the harness's --batch_size) are not used: the engine
        # sizes its batches in rows from the process's memory budget (ZEROGAP_MAX_MEMORY) and its
        # first steps; max_batch caps them.
        # Its torch threads follow the cores other processes leave; threads fixes them.
        options = EngineOptions.from_dict({"device": _harness_device(device), "dtype": str(dtype),
                                           "max_batch": max_batch, "threads": threads})
        self.strategy.check_inputs()
        self.engine = start_engine(str(pretrained), _BACKEND, check_engine(_BACKEND, options))
        self.engine.accept(self.strategy)
        self.seed, self.max_gen_toks = seed, max_gen_toks
        self.stats: dict[str, list[dict]] = {}

    @property
    def tokenizer(self):
        return self.engine.loaded.tokenizer

    # -- what the harness calls -----------------------------------------------------------------

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        out = [""] * len(requests)  # every position belongs to exactly one group
        with progress_bars(quiet=disable_tqdm or self.rank != 0) as progress:
            for group in plan_requests(requests):
                for positions, texts in zip(group.positions, self._serve(group, progress),
                                            strict=True):
                    for pos, text in zip(positions, texts, strict=True):
                        out[pos] = text
        return out

    def loglikelihood(self, requests: list) -> list:
        raise UserError(f"--model {MODEL_NAME} serves generation tasks (generate_until) only; "
                        "score loglikelihood tasks with --model hf")

    def loglikelihood_rolling(self, requests: list) -> list:
        return self.loglikelihood(requests)

    @property
    def tokenizer_name(self) -> str:
        return str(self.tokenizer.name_or_path).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        if not chat_template:
            return None
        return self.tokenizer.chat_template or ""

    def apply_chat_template(self, chat_history: list[dict[str, str]],
                            add_generation_prompt: bool = True) -> str:
        if not self.tokenizer.chat_template:
            raise UserError(f"model {self.engine.loaded.spec} has no chat template; drop "
                            "--apply_chat_template")
        return self.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt)

    # -- serving --------------------------------------------------------------------------------

    def _serve(self, group: RequestGroup, progress: ProgressCallback | None
               ) -> list[list[str]]:
        """m response texts per request of ``group``, in its order."""
        greedy, spec = request_spec(group.gen_kwargs, m=group.m, seed=self.seed,
                                    default_max_tokens=self.max_gen_toks)
        prompts = [request.args[0] for request in group.requests]
        # A prompt cut at its start by a model's context would be another question.
        self.engine.check_fits(prompts, [question_id(r) for r in group.requests],
                               spec.max_new_tokens, limit="max_gen_toks")
        if greedy and "logits" in self.strategy.requires:
            raise UserError(
                f"strategy {self.strategy.name} edits sampling logits, and these requests "
                "decode greedily: give the task do_sample: true and a temperature > 0 "
                "(--gen_kwargs do_sample=true,temperature=0.7)")
        greedy_spec = SamplingSpec(m=1, max_new_tokens=spec.max_new_tokens, stop=spec.stop)
        backend = self.engine.backend

        def decode() -> list:  # the served model's greedy decodes, asked for by the strategy
            return backend.greedy(prompts, greedy_spec, entropies=self.strategy.needs_entropy,
                                  progress=progress)

        hooks = self.engine.intervention(self.strategy, m=spec.m, greedy=decode)
        if greedy:
            decoded = backend.greedy(prompts, greedy_spec, patch=hooks.patch, progress=progress)
            return [[g.text] * spec.m for g in decoded]
        samples = backend.sample(
            prompts, spec, question_ids=[question_id(r) for r in group.requests],
            intervention=hooks.logits, patch=hooks.patch, progress=progress)
        for request, generations in zip(group.requests, samples, strict=True):
            self.stats[question_id(request)] = [g.stats for g in generations]
        stats = [g.stats for generations in samples for g in generations]
        if any("interventions" in s for s in stats):
            _log.info("strategy %s intervened in %d of %d responses", self.strategy.name,
                      sum(1 for s in stats if s["interventions"]), len(stats))
        return [[g.text for g in generations] for generations in samples]
