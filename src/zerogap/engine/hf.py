"""The sampling loop for transformers models with full attention in every layer.

How one call works:

1. Every prompt is tokenised; the longest common token prefix of all prompts (the k-shot
   exemplars) is encoded once (or read from this machine's file of it, see
   :mod:`zerogap.engine.prefix_cache`), and its keys and values are stored once.
2. Each question's remaining tokens are encoded on top of that prefix once, the questions
   that join the batch together in one left-padded forward call; all its samples start from
   those keys.
3. Rows (one per sample) from several questions decode together in a
   :class:`~zerogap.engine.cache.RowCache`: the prefix once, a question's tokens once for its
   rows, each row's generated keys in preallocated buffers written in place. The attention of
   :mod:`zerogap.engine.attention` reads the prefix once per step for all rows, a question's
   keys once for its rows, and merges them exactly with each row's own part (log-sum-exp);
   position ids are explicit.
4. Finished rows (EOS, a stop string, or the token limit) leave the batch at once (the last
   rows move into their slots), and queued samples take the free slots when enough are free.

The batch size is chosen from the process's memory budget (:mod:`zerogap.engine.memory`) and
the timing of the call's own first decode steps (:class:`BatchSizer`) unless the caller fixes
it; when memory runs short while the call decodes, it goes on with half the rows.

Sampling uses :mod:`zerogap.engine.noise`, so a sample's tokens depend on (seed, question id,
sample index, step) and the logits only: not on batch size, batch composition or resumption.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from zerogap.engine import noise
from zerogap.engine.attention import (
    ROWS_KWARG,
    cache_kwarg,
    check_supported,
    prefix_attention,
)
from zerogap.engine.base import (
    ActivationPatch,
    Capabilities,
    EngineOptions,
    Generation,
    LogitsEdit,
    SamplingSpec,
    register_backend,
)
from zerogap.engine.batching import BatchSizer
from zerogap.engine.cache import RowCache, question_share
from zerogap.engine.hooks import (
    Intervention,
    Patch,
    patch_cache_layers,
    patched,
    reads_row_cache,
    restart_samples,
    sample_stats,
)
from zerogap.engine.memory import (
    ENV,
    FLAG,
    MemoryShortError,
    MemoryWatch,
    available_bytes,
    decode_row_bytes,
    format_size,
    process_budget,
    release_freed,
)
from zerogap.engine.memory import override as memory_override
from zerogap.engine.prefill import Prefill, head_dim, kv_heads
from zerogap.engine.prefix_cache import PrefixCache, limit_bytes, weights_state
from zerogap.engine.rows import Batch, Rows
from zerogap.engine.stops import Stopping, eos_ids
from zerogap.engine.threads import governed, override
from zerogap.progress import Progress, ProgressCallback

_log = logging.getLogger("zerogap.engine")

# Most key positions (prefix copies included) that one batched question encode holds: on the
# embedded model 8192 positions are about 0.4 GB of float32 keys and values.
_ENCODE_POSITIONS = 8192


def _common_prefix_length(ids: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix, leaving every prompt at least one token of its own."""
    shortest = min(len(x) for x in ids)
    n = 0
    while n < shortest - 1 and all(x[n] == ids[0][n] for x in ids):
        n += 1
    return n


class _Decoder:
    """Shared machinery of :func:`sample` and :func:`greedy` for one engine call."""

    def __init__(self, model, tokenizer, prompts: Sequence[str], *, max_new_tokens: int,
                 stop: Sequence[str], max_batch: int | None, prefixes: PrefixCache | None,
                 threads: int | None = None):
        if not prompts:
            raise ValueError("no prompts to decode")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        check_supported(model)
        self.model, self.tokenizer = model, tokenizer
        self.device = next(model.parameters()).device
        self.cache_arg = cache_kwarg(model)
        self.max_new = max_new_tokens
        self.stopping = Stopping(tokenizer, eos_ids(model, tokenizer), stop, max_new_tokens)
        self.ids = [tokenizer(p)["input_ids"] for p in prompts]
        if min(len(x) for x in self.ids) == 0:
            raise ValueError("a prompt tokenises to nothing")
        self.prefix_len = _common_prefix_length(self.ids)
        self.prefill = Prefill(model, prefixes)
        self.own_layers = model.config.get_text_config(decoder=True).num_hidden_layers
        self.max_question = max(len(x) for x in self.ids) - self.prefix_len
        self.max_own = self.max_question + max_new_tokens
        # Questions encoded per forward call; each row of the call holds the prefix's keys.
        # Left padding needs a prefix key that every pad can see, so no prefix, no batching.
        self.encode_rows = (max(1, _ENCODE_POSITIONS // (self.prefix_len + self.max_question))
                            if self.prefix_len else 1)
        if max_batch is not None and max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.max_rows = max_batch  # None: chosen in run() by a BatchSizer
        self.threads = threads  # None: chosen as it runs (zerogap.engine.threads)
        self.budget = process_budget()
        self.row_bytes = 0  # a row's bytes at its peak, once run() has sized the batch
        self.batch: Batch | None = None  # made inside run(), under the caller's patch
        self.generated = 0

    def _row_bytes(self, patch: Patch | None, rows_per_group: float) -> tuple[int, int]:
        """(one decode row's bytes at its peak, one token's keys and values over the cache's
        layers): :func:`~zerogap.engine.memory.decode_row_bytes` for this call, whose
        ``rows_per_group`` rows on average share a question's keys
        (:func:`~zerogap.engine.cache.question_share`). A ``patch`` whose source keeps its
        keys in the row cache adds its layers to every row."""
        cfg = self.model.config.get_text_config(decoder=True)
        per_token = ((self.own_layers + patch_cache_layers(patch)) * kv_heads(cfg)
                     * head_dim(cfg) * 2 * self.model.dtype.itemsize)
        own = self.max_new + math.ceil(self.max_question * question_share(rows_per_group))
        row = decode_row_bytes(
            per_token=per_token, own_tokens=own,
            attended=self.prefix_len + self.max_own, heads=cfg.num_attention_heads,
            vocab=self.model.get_output_embeddings().weight.shape[0])
        _log.info("a decode row holds about %d bytes at its peak (%d tokens of keys and values "
                  "at %d bytes a token)", row, own, per_token,
                  extra={"engine": {"row_bytes": row}})
        return row, per_token

    def _memory_rows(self, patch: Patch | None, rows_per_group: float) -> int:
        """Rows whose decode fits in memory at its peak: on a GPU half its free memory, on a
        CPU the calling worker's share of the process's budget
        (:meth:`~zerogap.engine.memory.MemoryBudget.room`), less the question encodes' keys.
        A :class:`~zerogap.engine.memory.MemoryShortError` where not even one row fits."""
        self.row_bytes, per_token = self._row_bytes(patch, rows_per_group)
        if self.device.type != "cpu":
            return max(1, available_bytes(self.device) // 2 // self.row_bytes)
        # One batched encode holds the prefix's keys once per question it encodes.
        encode = per_token * min(_ENCODE_POSITIONS,
                                 self.encode_rows * (self.prefix_len + self.max_question))
        room = self.budget.room() - encode
        if room < self.row_bytes:
            raise self._short(room)
        return room // self.row_bytes

    def _short(self, room: int) -> MemoryShortError:
        budget = self.budget
        return MemoryShortError(
            f"memory budget {format_size(budget.total)} ({budget.source}) leaves "
            f"{format_size(max(0, room))} for decoding and one row of this call needs "
            f"{format_size(self.row_bytes)} (the process holds "
            f"{format_size(budget.resident() or 0)}); give more with {FLAG} or {ENV}, "
            "and the same command resumes what was stored")

    # -- the loop -------------------------------------------------------------------------------

    def run(self, indices: Sequence[range], choose: Callable, *, keys: Callable[[int, int], int],
            intervention: Intervention | None, patch: Patch | None, with_entropy: bool,
            on_question: Callable[[int, list[Generation]], None] | None,
            progress: ProgressCallback | None):
        """Decode rows ``indices[q]`` (sample indices, a non-empty range) of each prompt ``q``;
        return per prompt its generations in index order; ``progress`` hears of every finished
        question and, at most once a second, the rate."""
        n_q = len(self.ids)
        if len(indices) != n_q or not all(len(r) for r in indices):
            raise ValueError(f"need one non-empty range of sample indices per prompt ({n_q})")
        # A patch's source layers are read densely unless the source reads the row cache.
        dense_from = None if reads_row_cache(patch) else self.own_layers
        results: list[list[Generation | None]] = [[None] * len(r) for r in indices]
        left = [len(r) for r in indices]
        rows_per_group = sum(left) / n_q  # a question's samples share its keys
        queue = deque((q, s) for q in range(n_q) for s in indices[q])
        prefilled: dict[int, tuple] = {}
        sizer: BatchSizer | None = None  # while the batch size is being chosen
        host_tokens: list[list[int]] = []
        host_entropy: list[list[float]] = []
        start, last_note, n_done = time.perf_counter(), 0.0, 0

        def report(note: str = "") -> None:
            if progress is not None:
                progress(Progress("questions", n_done, n_q, "q", note))

        report()

        def encode(questions: list[int], prefix_kv: list) -> None:
            """Encode those of ``questions`` not encoded yet on top of ``prefix_kv``,
            ``encode_rows`` per call."""
            # By length, so that a call pads little.
            todo = sorted((q for q in questions if q not in prefilled),
                          key=lambda q: len(self.ids[q]))
            for at in range(0, len(todo), self.encode_rows):
                chunk = todo[at : at + self.encode_rows]
                logits, kv = self.prefill.encode([self.ids[q][self.prefix_len:] for q in chunk],
                                                 prefix_kv, self.prefix_len)
                for i, q in enumerate(chunk):
                    prefilled[q] = (logits[i : i + 1], kv[i])

        def admit(batch: Batch) -> None:
            n_rows, max_rows = batch.live, self.max_rows or 1
            room = max_rows - n_rows
            if not queue or room <= 0:
                return
            # Refill once a quarter of the batch (at most the next question's rows) is free, not
            # per freed row; while the batch size is being chosen, fill up to the size on trial.
            rows_next = len(indices[queue[0][0]])
            least = 1 if sizer is not None else max(1, min(rows_next, max_rows // 4))
            if n_rows and room < min(least, len(queue)):
                return
            plan = []
            while queue and room > 0:
                q = queue[0][0]
                samples = []
                while queue and queue[0][0] == q and room > 0:
                    samples.append(queue.popleft()[1])
                    room -= 1
                plan.append((q, samples))
            encode([q for q, _ in plan], batch.prefix_kv)
            groups = [(q, samples, *prefilled[q]) for q, samples in plan]
            for q, _ in plan:
                if not queue or queue[0][0] != q:  # all its rows are in: no later admit reads it
                    del prefilled[q]
            # While the batch size is being chosen it doubles: the buffers grow ahead of it,
            # to four times the size on trial (zeroing them is most of the cost of growing),
            # never to the memory bound itself, which can be far beyond the size chosen.
            ahead = max_rows if sizer is None else min(sizer.limit, 4 * max_rows)
            batch.join(groups, keys, ahead)
            for _, samples, _, _ in groups:
                host_tokens.extend([] for _ in samples)
                host_entropy.extend([] for _ in samples)

        def shrink(batch: Batch) -> None:
            """Memory ran short (:class:`~zerogap.engine.memory.MemoryWatch`): every live row
            goes back to the queue, the row cache is freed, and the call goes on with half the
            rows. A restarted row draws the same tokens (its noise depends on its seed,
            question, sample and step only); the intervention forgets its statistics."""
            nonlocal sizer
            rows = batch.rows
            assert rows is not None
            live, limit = len(rows.lengths), self.max_rows or 1
            if limit <= 1:
                raise self._short(self.budget.room())
            self.max_rows = max(1, min(limit, live) // 2)
            sizer = None
            restart = sorted(zip(rows.question.tolist(), rows.sample.tolist(), strict=True))
            restart_samples(intervention, rows.question, rows.sample)
            queue.extendleft(reversed(restart))
            batch.clear()
            host_tokens.clear()
            host_entropy.clear()
            release_freed()
            _log.warning("memory short (budget %s, %s resident): the batch goes from %d to %d "
                         "rows", format_size(self.budget.total),
                         format_size(self.budget.resident() or 0), live, self.max_rows,
                         extra={"engine": {"rows": self.max_rows, "shrunk_from": live}})

        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.inference_mode())
            stack.enter_context(patched(patch, self.model))
            stack.enter_context(prefix_attention(self.model))
            # On a CPU the thread count follows the cores other processes leave (threads.py).
            cpu = stack.enter_context(governed("decode", self.threads, device=self.device))
            # The running rows, made once the shared prefix is encoded (under the patch).
            batch = self.batch = Batch(
                self.prefill.prefix(self.ids[0][: self.prefix_len], patch),
                prefix_len=self.prefix_len, max_new=self.max_new,
                max_question=self.max_question, dense_from=dense_from, device=self.device,
                rows_per_group=rows_per_group)
            if self.max_rows is None:
                sizer = BatchSizer(min(self._memory_rows(patch, rows_per_group), sum(left)))
                self.max_rows = sizer.size
                if sizer.done:
                    sizer = None
            else:
                # logged: what a fixed batch's rows are expected to hold
                self._row_bytes(patch, rows_per_group)
            # A row count the caller fixed is not shrunk: it said what it needs.
            watch = MemoryWatch(self.budget) if self.row_bytes else None
            while True:
                if watch is not None and batch.live and watch.short():
                    shrink(batch)
                before = batch.live
                admit(batch)
                rows = batch.rows
                if rows is None or len(rows.lengths) == 0:
                    break
                joined = len(rows.lengths) != before
                if sizer is not None:
                    sizer.step(len(rows.lengths), admitted=joined, can_grow=bool(queue))
                    self.max_rows = sizer.size
                    if sizer.done:
                        sizer = None
                logits = batch.logits
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
                # The step's one transfer to the host: the tokens (and entropies, if asked).
                if entropy is None:
                    chosen_host, entropy_host = chosen.tolist(), None
                else:
                    both = torch.stack([chosen.double(), entropy.double()]).tolist()
                    chosen_host, entropy_host = [int(t) for t in both[0]], both[1]
                self.generated += len(chosen_host)
                finished = self.stopping.advance(chosen_host, entropy_host, host_tokens,
                                                 host_entropy)
                if finished:
                    q_host, s_host = rows.question.tolist(), rows.sample.tolist()
                    for r, how in finished.items():
                        q, s = q_host[r], s_host[r]
                        results[q][s - indices[q].start] = self.stopping.finish(
                            host_tokens[r], how, host_entropy[r] if with_entropy else None,
                            sample_stats(intervention, q, s))
                        left[q] -= 1
                        if left[q] == 0:
                            if on_question is not None:
                                on_question(q, results[q])
                            n_done += 1
                            report()
                    order, keep = batch.remove(list(finished))
                    host_tokens[:] = [host_tokens[r] for r in order]
                    host_entropy[:] = [host_entropy[r] for r in order]
                    chosen = chosen[keep]
                now = time.perf_counter()
                if progress is not None and now - last_note > 1.0:
                    report(f"{self.generated / (now - start):.0f} tok/s")
                    last_note = now
                if len(chosen):
                    assert batch.rows is not None
                    batch.logits = self._step(chosen, batch.rows.position - 1)
                # A step in which rows joined also encoded them: not timed.
                cpu.step(len(chosen_host), timed=not joined, settled=sizer is None)
        return results

    def _step(self, tokens: torch.Tensor, position: torch.Tensor,
              cache: RowCache | None = None) -> torch.Tensor:
        """Feed each live row its newest token at ``position``; return the next logits (R, V)
        float32."""
        if cache is None:
            assert self.batch is not None and self.batch.cache is not None
            cache = self.batch.cache
        mask = cache.padding_mask() if cache.needs_mask else None
        out = self.model(input_ids=tokens[:, None], attention_mask=mask,
                         position_ids=position[:, None], use_cache=True,
                         **{self.cache_arg: cache, ROWS_KWARG: cache})
        cache.advance()
        return out.logits[:, -1].float()


def sample(model, tokenizer, prompts: Sequence[str], *, m: int, temperature: float,
           max_new_tokens: int, question_ids: Sequence[str], seed: int = 0,
           stop: Sequence[str] = (), intervention: Intervention | None = None,
           patch: Patch | None = None, top_k: int | None = None, top_p: float | None = None,
           max_batch: int | None = None, progress: ProgressCallback | None = None,
           on_question: Callable[[int, list[Generation]], None] | None = None,
           prefixes: PrefixCache | None = None, threads: int | None = None,
           indices: Sequence[range] | None = None) -> list[list[Generation]]:
    """Draw ``m`` responses per prompt at ``temperature`` (or the samples ``indices`` name).

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
        Most rows decoded together; default: chosen from the process's memory budget and the
        timing of the call's first decode steps (see :class:`BatchSizer`).
    progress : callable, optional
        ``progress(Progress("questions", done, N, "q", note))`` at the start, at every finished
        question and at most once a second with the rate (``"312 tok/s"``); ``cli/`` draws it.
    on_question : callable, optional
        ``on_question(i, generations)`` as soon as prompt ``i`` has all its samples (completion
        order, not prompt order): the hook for writing results as they come.
    prefixes : PrefixCache, optional
        This machine's files of encoded prefixes for ``model`` (see
        :mod:`zerogap.engine.prefix_cache`): read instead of encoding, written after an
        encode. They hold the bits an encode gives, so no draw changes.
    threads : int, optional
        Torch threads for the whole call on a CPU; default: the caller's count at most,
        fewer while other processes hold cores (:mod:`zerogap.engine.threads`, where
        ``ZEROGAP_THREADS`` also fixes it).
    indices : sequence of N ranges, optional
        Instead of ``range(m)`` for every prompt, the sample indices each prompt draws (an
        allocated study's m per question, or the samples a stored question still lacks).

    Returns
    -------
    list of N lists of m (or ``len(indices[i])``) :class:`Generation`
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
                       max_batch=max_batch, prefixes=prefixes, threads=threads)
    vocab = None

    def choose(logits: torch.Tensor, rows: Rows) -> torch.Tensor:
        nonlocal vocab
        if vocab is None:
            vocab = noise.token_hashes(logits.shape[-1], logits.device)
        if top_k is None and top_p is None:  # divide only the draw's candidates
            return noise.gumbel_argmax(logits, rows.keys, rows.lengths, vocab, temperature)
        scores = noise.filter_top_k_top_p(logits / temperature, top_k, top_p)
        return noise.gumbel_argmax(scores, rows.keys, rows.lengths, vocab)

    def key(q: int, s: int) -> int:
        return noise.row_key(seed, question_ids[q], s)

    return decoder.run([range(m)] * len(prompts) if indices is None else indices, choose,
                       keys=key, intervention=intervention, patch=patch, with_entropy=False,
                       on_question=on_question, progress=progress)


def greedy(model, tokenizer, prompts: Sequence[str], *, max_new_tokens: int,
           stop: Sequence[str] = (), return_entropy: bool = False, patch: Patch | None = None,
           max_batch: int | None = None, progress: ProgressCallback | None = None,
           on_question: Callable[[int, Generation], None] | None = None,
           prefixes: PrefixCache | None = None, threads: int | None = None
           ) -> list[Generation]:
    """Greedy (argmax, lowest token id on ties) decode of each prompt.

    Parameters are as for :func:`sample`. With ``return_entropy`` each :class:`Generation` holds
    the per-step entropy of the next-token distribution (nats, temperature 1, after ``patch``),
    one value per generated token including a final EOS.

    Returns
    -------
    list of N :class:`Generation`, in prompt order.
    """
    decoder = _Decoder(model, tokenizer, prompts, max_new_tokens=max_new_tokens, stop=stop,
                       max_batch=max_batch, prefixes=prefixes, threads=threads)
    callback = None if on_question is None else (lambda q, gens: on_question(q, gens[0]))
    out = decoder.run([range(1)] * len(prompts), lambda logits, rows: logits.argmax(-1),
                      keys=lambda q, s: 0, intervention=None, patch=patch,
                      with_entropy=return_entropy, on_question=callback, progress=progress)
    return [gens[0] for gens in out]


HF_CAPABILITIES = Capabilities(logits=True, patching=True, entropies=True, device=True,
                               sample_ranges=True)


@register_backend("hf")
@dataclass
class HFBackend:
    """The :class:`~zerogap.engine.base.Backend` over a transformers model and tokenizer: edits
    and patches run in process, as the spec's torch hook and torch patch. ``prefixes``: the
    on-disk prefix cache for the model as loaded (:meth:`start` opens it)."""

    model: Any
    tokenizer: Any
    max_batch: int | None = None
    threads: int | None = None
    name: ClassVar[str]
    noise: str = noise.SCHEME
    capabilities: Capabilities = HF_CAPABILITIES
    prefixes: PrefixCache | None = None

    @classmethod
    def check_available(cls, options: EngineOptions) -> None:
        from zerogap.models import check_device

        check_device(options.device)  # a bogus or absent device is one line before any load
        limit_bytes()  # so is a bad $ZEROGAP_PREFIX_CACHE_MB
        override()  # a bad $ZEROGAP_THREADS
        memory_override()  # and a bad $ZEROGAP_MAX_MEMORY

    @classmethod
    def start(cls, spec: str, options: EngineOptions):
        from zerogap.models import load_model

        loaded = load_model(spec, device=options.device, dtype=options.dtype)
        prefixes = PrefixCache.open(loaded.fingerprint, weights_state(loaded.model))
        return loaded, cls(loaded.model, loaded.tokenizer, max_batch=options.max_batch,
                           threads=options.threads, prefixes=prefixes)

    def _patch(self, patch: ActivationPatch | None) -> Patch | None:
        return None if patch is None else patch.torch_patch()

    def sample(self, prompts, spec: SamplingSpec, *, question_ids,
               intervention: LogitsEdit | None = None, patch: ActivationPatch | None = None,
               progress: ProgressCallback | None = None, on_question=None, indices=None):
        hook = None if intervention is None else intervention.torch_hook(
            samples_per_question=spec.m if indices is None else max(r.stop for r in indices),
            device=self.model.device)
        return sample(self.model, self.tokenizer, prompts, m=spec.m,
                      temperature=spec.temperature, max_new_tokens=spec.max_new_tokens,
                      question_ids=question_ids, seed=spec.seed, stop=spec.stop,
                      intervention=hook, patch=self._patch(patch), top_k=spec.top_k,
                      top_p=spec.top_p, max_batch=self.max_batch, progress=progress,
                      on_question=on_question, prefixes=self.prefixes, threads=self.threads,
                      indices=indices)

    def greedy(self, prompts, spec: SamplingSpec, *, entropies=False,
               patch: ActivationPatch | None = None, progress: ProgressCallback | None = None,
               on_question=None):
        return greedy(self.model, self.tokenizer, prompts, max_new_tokens=spec.max_new_tokens,
                      stop=spec.stop, return_entropy=entropies, patch=self._patch(patch),
                      max_batch=self.max_batch, progress=progress, on_question=on_question,
                      prefixes=self.prefixes, threads=self.threads)

    def forced_ranks(self, prompts: Sequence[str], forced: Sequence[Sequence[int]]
                     ) -> list[list[int]]:
        """Teacher-forced ranks, one full forward pass per prompt (paper Figure 1 b/d)."""
        device = next(self.model.parameters()).device
        out: list[list[int]] = []
        for prompt, tokens in zip(prompts, forced, strict=True):
            if not len(tokens):
                out.append([])
                continue
            prefix = self.tokenizer(prompt)["input_ids"]
            with torch.no_grad():
                logits = self.model(torch.tensor([[*prefix, *tokens]], device=device)).logits[0]
            start = len(prefix) - 1
            rows = logits[start : start + len(tokens)]  # (steps, V): row t predicts tokens[t]
            target = rows.gather(1, torch.tensor(list(tokens), device=device)[:, None])
            out.append([int(r) for r in ((rows > target).sum(dim=1) + 1).tolist()])
        return out

    def close(self) -> None:
        """Nothing to shut down: the model is an ordinary torch module, freed with its last
        reference."""
