"""The sampling loop for transformers models with a full-attention KV cache.

How one call works:

1. Every prompt is tokenised; the longest common token prefix of all prompts (the k-shot
   exemplars) is encoded once.
2. Each question's remaining tokens are encoded on top of that prefix once; all its samples
   start from that cache.
3. Rows (one per sample) from several questions decode together. The KV tensors hold the shared
   prefix, then each row's question tokens right-aligned behind masked padding, then the
   generated tokens; position ids are explicit, so the padding changes nothing.
4. Finished rows (EOS, a stop string, or the token limit) leave the batch at once, and queued
   samples join when enough room is free. Columns that every remaining row masks are dropped.

Sampling uses :mod:`zerogap.engine.noise`, so a sample's tokens depend on (seed, question id,
sample index, step) and the logits only: not on batch size, batch composition or resumption.
"""

from __future__ import annotations

import inspect
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from zerogap.engine import noise
from zerogap.engine.base import Capabilities, SamplingSpec
from zerogap.engine.hooks import Intervention, Patch, patched, sample_stats

# On CPU every decode step copies and reads each row's whole KV cache, which for a 1,170-token
# 8-shot prompt outweighs the weights: bench_engine.py measured 38 tok/s at 16 rows against 33 at
# 8, 22 at 32 and 15 at 48 (SmolLM2-135M, one thread). GPUs amortise weights over many more rows.
CPU_MAX_BATCH = 16
GPU_MAX_BATCH = 512


@dataclass
class Generation:
    """One generated response.

    ``token_ids`` excludes the EOS token; when a stop string ended the response they run up to
    and including the token that completed it, while ``text`` is cut just before the stop string.
    ``finish`` is ``"eos"``, ``"stop"`` or ``"length"``. ``entropies`` (greedy with
    ``return_entropy``) holds, per generated token, the entropy in nats of the model's
    next-token distribution at temperature 1.
    """

    token_ids: list[int]
    text: str
    finish: str
    entropies: list[float] | None = None
    stats: dict = field(default_factory=dict)


@dataclass
class _Rows:
    """Per-row state of the running batch (device tensors; row r is the same row in each)."""

    tokens: torch.Tensor  # (R, max_new) long, -1 padded
    lengths: torch.Tensor  # (R,) long
    question: torch.Tensor  # (R,) long
    sample: torch.Tensor  # (R,) long
    keys: torch.Tensor  # (R,) int32 noise keys
    position: torch.Tensor  # (R,) long position id of the next input token

    def select(self, idx: torch.Tensor) -> _Rows:
        return _Rows(*(t[idx] for t in self._fields()))

    def cat(self, other: _Rows) -> _Rows:
        pairs = zip(self._fields(), other._fields(), strict=True)
        return _Rows(*(torch.cat([a, b]) for a, b in pairs))

    def _fields(self):
        return (self.tokens, self.lengths, self.question, self.sample, self.keys, self.position)


def _common_prefix_length(ids: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix, leaving every prompt at least one token of its own."""
    shortest = min(len(x) for x in ids)
    n = 0
    while n < shortest - 1 and all(x[n] == ids[0][n] for x in ids):
        n += 1
    return n


def _eos_ids(model, tokenizer) -> list[int]:
    ids = {tokenizer.eos_token_id}
    configured = getattr(model.generation_config, "eos_token_id", None)
    ids.update(configured if isinstance(configured, list) else [configured])
    return sorted(i for i in ids if i is not None)


def _available_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
        return info["MemAvailable"]
    except (OSError, KeyError, ValueError):
        return 4 << 30


class _Decoder:
    """Shared machinery of :func:`sample` and :func:`greedy` for one engine call."""

    def __init__(self, model, tokenizer, prompts: Sequence[str], *, max_new_tokens: int,
                 stop: Sequence[str], max_batch: int | None, rows_per_question: int):
        if not prompts:
            raise ValueError("no prompts to decode")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        self.model, self.tokenizer = model, tokenizer
        self.device = next(model.parameters()).device
        # transformers 5.x renamed the forward argument; older releases only know the old name.
        params = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.max_new = max_new_tokens
        self.stop = tuple(s for s in stop if s)
        self.stop_tail = 2 * max((len(s) for s in self.stop), default=0) + 4
        self.eos = torch.tensor(_eos_ids(model, tokenizer), device=self.device)
        self.eos_set = set(self.eos.tolist())
        self.ids = [tokenizer(p)["input_ids"] for p in prompts]
        if min(len(x) for x in self.ids) == 0:
            raise ValueError("a prompt tokenises to nothing")
        self.prefix_len = _common_prefix_length(self.ids)
        self.prefix_kv = None  # encoded inside run(), under the caller's patch
        longest = max(len(x) for x in self.ids)
        self.max_rows = self._batch_rows(longest + max_new_tokens, max_batch)
        self.admit_min = max(1, min(rows_per_question, self.max_rows // 4))
        self.generated = 0

    # -- model calls ----------------------------------------------------------------------------

    def _cache(self, kv):
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        cache = DynamicCache(config=self.model.config)
        while len(cache.layers) < len(kv):  # a patch's source model keeps its kv as extra layers
            cache.layers.append(DynamicLayer())
        for layer, (k, v) in zip(cache.layers, kv, strict=True):
            if getattr(layer, "is_sliding", False):
                raise ValueError("the engine needs full-attention layers; this model uses sliding")
            layer.lazy_initialization(k, v)
            layer.keys, layer.values = k, v
        return cache

    def _encode(self, tokens: list[int], kv, start: int):
        """Run ``tokens`` (one sequence) on top of ``kv``; return last logits and the new kv."""
        cfg = self.model.config.get_text_config(decoder=True)
        if kv is None:
            kv = [
                (torch.empty(1, cfg.num_key_value_heads, 0, self._head_dim(cfg),
                             dtype=self.model.dtype, device=self.device),) * 2
                for _ in range(cfg.num_hidden_layers)
            ]
        if not tokens:
            return None, kv
        cache = self._cache(kv)
        n = len(tokens)
        out = self.model(
            input_ids=torch.tensor([tokens], device=self.device),
            attention_mask=torch.ones(1, start + n, dtype=torch.long, device=self.device),
            position_ids=torch.arange(start, start + n, device=self.device)[None],
            use_cache=True, logits_to_keep=1, **{self.cache_arg: cache},
        )
        return out.logits[:, -1].float(), [(layer.keys, layer.values) for layer in cache.layers]

    @staticmethod
    def _head_dim(cfg) -> int:
        return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads

    def _batch_rows(self, max_len: int, max_batch: int | None) -> int:
        """Rows that fit: KV for ``max_len`` tokens plus a few vocab-sized buffers per row."""
        if max_batch is not None:
            if max_batch < 1:
                raise ValueError(f"max_batch must be at least 1, got {max_batch}")
            return max_batch
        cfg = self.model.config.get_text_config(decoder=True)
        per_token = (cfg.num_hidden_layers * cfg.num_key_value_heads * self._head_dim(cfg) * 2
                     * self.model.dtype.itemsize)
        vocab = self.model.get_output_embeddings().weight.shape[0]
        per_row = per_token * max_len + vocab * 4 * 8
        # Keep half of what is free for activations, the allocator and everything else.
        budget = _available_bytes(self.device) // 2
        cap = GPU_MAX_BATCH if self.device.type == "cuda" else CPU_MAX_BATCH
        return max(1, min(cap, budget // per_row))

    # -- the loop -------------------------------------------------------------------------------

    def run(self, rows_per_question: int, choose: Callable, *, keys: Callable[[int, int], int],
            intervention: Intervention | None, patch: Patch | None, with_entropy: bool,
            on_question: Callable[[int, list[Generation]], None] | None, progress: bool):
        """Decode ``rows_per_question`` rows per prompt; return per prompt its generations."""
        from tqdm.auto import tqdm

        n_q = len(self.ids)
        results: list[list[Generation | None]] = [[None] * rows_per_question for _ in range(n_q)]
        left = [rows_per_question] * n_q
        queue = deque((q, s) for q in range(n_q) for s in range(rows_per_question))
        prefilled: dict[int, tuple] = {}
        state = {"kv": None, "mask": None, "rows": None, "logits": None}
        host_tokens: list[list[int]] = []
        host_entropy: list[list[float]] = []
        bar = tqdm(total=n_q, unit="q", disable=not progress, dynamic_ncols=True,
                   desc="questions", smoothing=0.05)
        start, last_note = time.perf_counter(), 0.0

        def admit():
            n_rows = 0 if state["rows"] is None else len(state["rows"].lengths)
            if n_rows == 0:  # start afresh: the old (empty) tensors may have another width
                state.update(kv=None, mask=None, rows=None, logits=None)
            room = self.max_rows - n_rows
            if not queue or room <= 0 or (n_rows and room < min(self.admit_min, len(queue))):
                return
            groups = []
            while queue and room > 0:
                q = queue[0][0]
                samples = []
                while queue and queue[0][0] == q and room > 0:
                    samples.append(queue.popleft()[1])
                    room -= 1
                if q not in prefilled:
                    logits, kv = self._encode(self.ids[q][self.prefix_len:], self.prefix_kv,
                                              self.prefix_len)
                    prefilled[q] = (logits, [(k[:, :, self.prefix_len:], v[:, :, self.prefix_len:])
                                             for k, v in kv])
                groups.append((q, samples, *prefilled[q]))
                if not queue or queue[0][0] != q:
                    del prefilled[q]
            self._join(state, groups, keys)
            for _, samples, _, _ in groups:
                host_tokens.extend([] for _ in samples)
                host_entropy.extend([] for _ in samples)

        with torch.inference_mode(), patched(patch, self.model):
            self.prefix_kv = self._encode(self.ids[0][: self.prefix_len], None, 0)[1]
            while True:
                admit()
                rows = state["rows"]
                if rows is None or len(rows.lengths) == 0:
                    break
                logits = state["logits"]
                entropy = None
                if with_entropy:
                    logp = logits.log_softmax(-1)
                    entropy = -(logp.exp() * logp).sum(-1)
                if intervention is not None:
                    logits = intervention(logits, rows.tokens, rows.lengths, rows.question,
                                          rows.sample)
                chosen = choose(logits, rows)
                rows.tokens[torch.arange(len(chosen), device=self.device), rows.lengths] = chosen
                rows.lengths += 1
                rows.position += 1
                chosen_host = chosen.tolist()
                entropy_host = entropy.tolist() if entropy is not None else None
                self.generated += len(chosen_host)
                finished = self._advance(chosen_host, entropy_host, host_tokens, host_entropy)
                if finished:
                    q_host, s_host = rows.question.tolist(), rows.sample.tolist()
                    for r, how in finished.items():
                        q, s = q_host[r], s_host[r]
                        results[q][s] = self._finish(host_tokens[r], how, host_entropy[r]
                                                     if with_entropy else None,
                                                     sample_stats(intervention, q, s))
                        left[q] -= 1
                        if left[q] == 0:
                            if on_question is not None:
                                on_question(q, results[q])
                            bar.update(1)
                    keep = [r for r in range(len(chosen_host)) if r not in finished]
                    host_tokens[:] = [host_tokens[r] for r in keep]
                    host_entropy[:] = [host_entropy[r] for r in keep]
                    self._evict(state, torch.tensor(keep, dtype=torch.long, device=self.device))
                    chosen = chosen[keep]
                now = time.perf_counter()
                if progress and now - last_note > 1.0:
                    rate = self.generated / (now - start)
                    bar.set_postfix_str(f"{rate:.0f} tok/s", refresh=False)
                    last_note = now
                if len(chosen):
                    state["logits"] = self._step(state, chosen)
        bar.close()
        return results

    def _advance(self, chosen, entropy, host_tokens, host_entropy) -> dict[int, str]:
        """Append each row's new token on the host; return {row: finish reason} for rows done."""
        finished = {}
        stop_rows = []
        for r, t in enumerate(chosen):
            if entropy is not None:
                host_entropy[r].append(entropy[r])
            if t in self.eos_set:
                finished[r] = "eos"
                continue
            host_tokens[r].append(t)
            if self.stop:
                stop_rows.append(r)
            if len(host_tokens[r]) >= self.max_new:
                finished[r] = "length"
        if stop_rows:
            tails = self.tokenizer.batch_decode(
                [host_tokens[r][-self.stop_tail:] for r in stop_rows]
            )
            for r, tail in zip(stop_rows, tails, strict=True):
                if any(s in tail for s in self.stop):
                    finished[r] = "stop"
        return finished

    def _finish(self, tokens, how, entropies, stats) -> Generation:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if how == "stop":
            text = text[: min(text.find(s) for s in self.stop if s in text)]
        return Generation(list(tokens), text, how, entropies, stats)

    def _join(self, state, groups, keys) -> None:
        """Append rows for ``groups`` of (question, sample list, first logits, question kv)."""
        p = self.prefix_len
        width = max(kv[0][0].shape[2] for *_, kv in groups)
        if state["rows"] is not None:
            have = state["kv"][0][0].shape[2] - p
            if width > have:  # older rows get masked columns right after the prefix
                state["kv"] = [tuple(_insert_zeros(t, p, width - have) for t in kv)
                               for kv in state["kv"]]
                state["mask"] = _insert_zeros(state["mask"], p, width - have, dim=1)
            width = max(width, have)
        new_kv, new_mask, new_logits, new_rows = [], [], [], []
        for q, samples, logits, kv in groups:
            n, s_len = len(samples), kv[0][0].shape[2]
            new_kv.append([
                tuple(torch.cat([pre.expand(n, -1, -1, -1),
                                 pre.new_zeros(n, pre.shape[1], width - s_len, pre.shape[3]),
                                 t.expand(n, -1, -1, -1)], dim=2)
                      for pre, t in zip(pkv, qkv, strict=True))
                for pkv, qkv in zip(self.prefix_kv, kv, strict=True)
            ])
            mask = torch.ones(n, p + width, dtype=torch.long, device=self.device)
            mask[:, p:p + width - s_len] = 0
            new_mask.append(mask)
            new_logits.append(logits.expand(n, -1))
            new_rows.append(_Rows(
                tokens=torch.full((n, self.max_new), -1, dtype=torch.long, device=self.device),
                lengths=torch.zeros(n, dtype=torch.long, device=self.device),
                question=torch.full((n,), q, dtype=torch.long, device=self.device),
                sample=torch.tensor(samples, dtype=torch.long, device=self.device),
                keys=torch.tensor([keys(q, s) for s in samples], dtype=torch.int32,
                                  device=self.device),
                position=torch.full((n,), p + s_len, dtype=torch.long, device=self.device),
            ))
        parts = ([] if state["rows"] is None else [state]) + [
            {"kv": kv, "mask": m, "logits": lg, "rows": r}
            for kv, m, lg, r in zip(new_kv, new_mask, new_logits, new_rows, strict=True)
        ]
        state["kv"] = [tuple(torch.cat([part["kv"][i][j] for part in parts]) for j in range(2))
                       for i in range(len(self.prefix_kv))]
        state["mask"] = torch.cat([part["mask"] for part in parts])
        state["logits"] = torch.cat([part["logits"] for part in parts])
        rows = parts[0]["rows"]
        for part in parts[1:]:
            rows = rows.cat(part["rows"])
        state["rows"] = rows

    def _evict(self, state, keep: torch.Tensor) -> None:
        """Keep only rows ``keep``; drop padding columns that no remaining row attends to."""
        mask = state["mask"][keep]
        cols = None
        if len(keep):
            live = mask.any(0)
            dead = int((~live).sum())
            if dead >= 16:
                cols = live.nonzero()[:, 0]
                mask = mask[:, cols]
        kv = []
        for k, v in state["kv"]:
            k, v = k[keep], v[keep]
            if cols is not None:
                k, v = k[:, :, cols], v[:, :, cols]
            kv.append((k, v))
        state["kv"], state["mask"], state["rows"] = kv, mask, state["rows"].select(keep)

    def _step(self, state, chosen: torch.Tensor) -> torch.Tensor:
        """Feed each row's newest token; return the next logits (R, V) float32."""
        rows = state["rows"]
        n = len(chosen)
        state["mask"] = torch.cat(
            [state["mask"], torch.ones(n, 1, dtype=torch.long, device=self.device)], dim=1
        )
        cache = self._cache(state["kv"])
        out = self.model(input_ids=chosen[:, None], attention_mask=state["mask"],
                         position_ids=(rows.position - 1)[:, None], use_cache=True,
                         **{self.cache_arg: cache})
        state["kv"] = [(layer.keys, layer.values) for layer in cache.layers]
        return out.logits[:, -1].float()


def _insert_zeros(t: torch.Tensor, at: int, n: int, dim: int = 2) -> torch.Tensor:
    shape = list(t.shape)
    shape[dim] = n
    return torch.cat([t.narrow(dim, 0, at), t.new_zeros(shape),
                      t.narrow(dim, at, t.shape[dim] - at)], dim=dim)


def sample(model, tokenizer, prompts: Sequence[str], *, m: int, temperature: float,
           max_new_tokens: int, question_ids: Sequence[str], seed: int = 0,
           stop: Sequence[str] = (), intervention: Intervention | None = None,
           patch: Patch | None = None, top_k: int | None = None, top_p: float | None = None,
           max_batch: int | None = None, progress: bool = False,
           on_question: Callable[[int, list[Generation]], None] | None = None,
           ) -> list[list[Generation]]:
    """Draw ``m`` responses per prompt at ``temperature``.

    Parameters
    ----------
    prompts : sequence of str, length N
        Full prompts; their longest common token prefix is encoded once.
    m : int
        Samples per prompt.
    temperature : float
        Softmax temperature (> 0). Pure temperature sampling unless ``top_k``/``top_p`` are given.
    max_new_tokens : int
        Token limit per response.
    question_ids : sequence of str, length N
        Stable ids; with ``seed`` they determine each sample's noise.
    stop : sequence of str
        Strings that end a response (the text is cut before them).
    intervention, patch
        Strategy hooks (:mod:`zerogap.engine.hooks`); ``question`` indices refer to ``prompts``.
    max_batch : int, optional
        Most rows decoded together; default from free memory (capped at 16 on CPU, 512 on GPU).
    progress : bool
        Show a progress bar (questions done, tokens/s, ETA) on stderr.
    on_question : callable, optional
        ``on_question(i, generations)`` as soon as prompt ``i`` has all its samples (completion
        order, not prompt order): the hook for writing results as they come.

    Returns
    -------
    list of N lists of m :class:`Generation`
        In prompt order, samples in index order.

    Notes
    -----
    Guarantee: sample ``j`` of question ``q`` is a function of (seed, ``question_ids[q]``, j) and
    the logits the model computes for that row. Batch size, batch composition, the other
    questions in the call and interruptions do not enter it. The logits themselves can differ in
    the last bits between batch shapes; a draw changes only if its two best Gumbel-perturbed
    scores are that close, which for a float32 model is a rare event (far below one in 10^5
    draws), not an impossible one.
    """
    if m < 1:
        raise ValueError(f"m must be at least 1, got {m}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (use greedy for argmax), got {temperature}")
    if len(question_ids) != len(prompts):
        raise ValueError(f"{len(question_ids)} question ids for {len(prompts)} prompts")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    decoder = _Decoder(model, tokenizer, prompts, max_new_tokens=max_new_tokens, stop=stop,
                       max_batch=max_batch, rows_per_question=m)
    vocab = None

    def choose(logits: torch.Tensor, rows: _Rows) -> torch.Tensor:
        nonlocal vocab
        if vocab is None:
            vocab = noise.token_hashes(logits.shape[-1], logits.device)
        scores = noise.filter_top_k_top_p(logits / temperature, top_k, top_p)
        return noise.gumbel_argmax(scores, rows.keys, rows.lengths, vocab)

    def key(q: int, s: int) -> int:
        return noise.row_key(seed, question_ids[q], s)

    return decoder.run(m, choose, keys=key, intervention=intervention, patch=patch,
                       with_entropy=False, on_question=on_question, progress=progress)


def greedy(model, tokenizer, prompts: Sequence[str], *, max_new_tokens: int,
           stop: Sequence[str] = (), return_entropy: bool = False, patch: Patch | None = None,
           max_batch: int | None = None, progress: bool = False,
           on_question: Callable[[int, Generation], None] | None = None) -> list[Generation]:
    """Greedy (argmax, lowest token id on ties) decode of each prompt.

    Parameters are as for :func:`sample`. With ``return_entropy`` each :class:`Generation` holds
    the per-step entropy of the next-token distribution (nats, temperature 1, after ``patch``),
    one value per generated token including a final EOS.

    Returns
    -------
    list of N :class:`Generation`, in prompt order.
    """
    decoder = _Decoder(model, tokenizer, prompts, max_new_tokens=max_new_tokens, stop=stop,
                       max_batch=max_batch, rows_per_question=1)
    callback = None if on_question is None else (lambda q, gens: on_question(q, gens[0]))
    out = decoder.run(1, lambda logits, rows: logits.argmax(-1), keys=lambda q, s: 0,
                      intervention=None, patch=patch, with_entropy=return_entropy,
                      on_question=callback, progress=progress)
    return [gens[0] for gens in out]


HF_CAPABILITIES = Capabilities(logits=True, patching=True, entropies=True)


@dataclass
class HFBackend:
    """The :class:`~zerogap.engine.base.Backend` over a transformers model and tokenizer."""

    model: Any
    tokenizer: Any
    max_batch: int | None = None
    name: str = "hf"
    noise: str = noise.SCHEME
    capabilities: Capabilities = HF_CAPABILITIES

    def sample(self, prompts, spec: SamplingSpec, *, question_ids, intervention=None, patch=None,
               progress=False, on_question=None):
        return sample(self.model, self.tokenizer, prompts, m=spec.m,
                      temperature=spec.temperature, max_new_tokens=spec.max_new_tokens,
                      question_ids=question_ids, seed=spec.seed, stop=spec.stop,
                      intervention=intervention, patch=patch, top_k=spec.top_k,
                      top_p=spec.top_p, max_batch=self.max_batch, progress=progress,
                      on_question=on_question)

    def greedy(self, prompts, spec: SamplingSpec, *, entropies=False, patch=None,
               progress=False, on_question=None):
        return greedy(self.model, self.tokenizer, prompts, max_new_tokens=spec.max_new_tokens,
                      stop=spec.stop, return_entropy=entropies, patch=patch,
                      max_batch=self.max_batch, progress=progress, on_question=on_question)
