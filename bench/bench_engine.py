"""Sampling engine throughput, measured side by side in one process.

1. Workload throughput: GSM8K 8-shot prompts, N test questions, m samples each, T = 0.7, a
   token limit, stop string "Question:". Baseline: ``model.generate(num_return_sequences=m)``
   per question (pure temperature sampling, the same stop string). Engine: one
   ``zerogap.engine.sample`` call. Reported: generated tokens per second (tokens up to the
   end of each response) and the ratio.
2. Decode phase: one prompt, B = m rows, the full token limit (EOS banned through an
   intervention, which also exercises the hook). Baseline: a bare loop of forward passes on a
   batch-B KV cache with argmax, no sampling logic. Engine: ``sample`` with max_new_tokens L + 1
   and 1, so the difference is its decode phase (L forward passes). Two alternating repetitions,
   the best of each. Reported: decode tokens/s and the ratio.

Peak resident memory is reported for every phase (a thread polls /proc/self/status).

The 8-shot prompt is built here from the first GSM8K train items (calculator annotations
removed, "#### N" rewritten as "The answer is N."), so the bench needs no task module.

Usage::

    python bench/bench_engine.py [--gsm8k /work/shared/data/gsm8k] [--questions 10] [-m 16]
                                 [--max-new-tokens 128] [--skip-baseline] [--skip-decode]
                                 [--max-batch N] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from pathlib import Path

import torch

from zerogap.engine import sample
from zerogap.models import load_model

STOP = "Question:"


class PeakRss:
    """Peak resident set size (MiB) while the ``with`` block runs."""

    def __enter__(self):
        self.peak, self._stop = _rss_mib(), threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss_mib())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def build_prompts(gsm8k: Path, n_questions: int, shots: int = 8) -> list[str]:
    def solution(answer: str) -> str:
        body, final = answer.split("####")
        return re.sub(r"<<[^>]*>>", "", body).strip() + f" The answer is {final.strip()}."

    def rows(split):
        with open(gsm8k / f"{split}.jsonl") as f:
            return [json.loads(line) for line in f]

    prefix = "".join(
        f"Question: {r['question']}\nAnswer: {solution(r['answer'])}\n\n"
        for r in rows("train")[:shots]
    )
    return [f"{prefix}Question: {r['question']}\nAnswer:" for r in rows("test")[:n_questions]]


def response_length(ids: list[int], eos: int, tokenizer) -> int:
    """Tokens of one ``generate`` row up to its end (EOS, or the token completing the stop)."""
    n = ids.index(eos) if eos in ids else len(ids)
    for k in range(1, n + 1):
        if STOP in tokenizer.decode(ids[:k]):
            return k
    return n


def baseline_generate(model, tok, prompts, m, max_new):
    total = 0
    for prompt in prompts:
        enc = tok(prompt, return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(
                **enc, do_sample=True, temperature=0.7, top_k=0, top_p=1.0,
                num_return_sequences=m, max_new_tokens=max_new, stop_strings=[STOP],
                tokenizer=tok, pad_token_id=tok.eos_token_id,
            )
        new = out[:, enc.input_ids.shape[1]:].tolist()
        total += sum(response_length(row, tok.eos_token_id, tok) for row in new)
    return total


def bare_decode(model, tok, prompt, rows, steps):
    """Seconds for ``steps`` argmax forward passes of a batch of ``rows`` after the prompt."""
    enc = tok(prompt, return_tensors="pt")
    with torch.inference_mode():
        out = model(**enc, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        cache.batch_repeat_interleave(rows)
        nxt = out.logits[:, -1].argmax(-1).repeat(rows)[:, None]
        t0 = time.perf_counter()
        for _ in range(steps):
            out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        return time.perf_counter() - t0


class BanEos:
    """Intervention that forbids EOS, so every row runs to the token limit."""

    def __init__(self, eos: int):
        self.eos = eos

    def __call__(self, logits, tokens, lengths, question, sample):
        logits[:, self.eos] = float("-inf")
        return logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gsm8k", type=Path, default=Path("/work/shared/data/gsm8k"))
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("-m", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--skip-decode", action="store_true", help="skip the decode-phase part")
    parser.add_argument("--max-batch", type=int, default=None,
                        help="engine batch rows in the throughput part (default: automatic)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads; on a shared CPU, 1 avoids OpenMP oversubscription")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    loaded = load_model(args.model, device="cpu")
    model, tok = loaded.model, loaded.tokenizer
    prompts = build_prompts(args.gsm8k, args.questions)
    print(f"model {args.model}; {len(prompts)} questions x m={args.m}, "
          f"{args.max_new_tokens} new tokens; prompt {len(tok(prompts[0]).input_ids)} tokens; "
          f"torch threads {torch.get_num_threads()}")

    ids = [f"test-{i}" for i in range(len(prompts))]
    with PeakRss() as mem:
        t0 = time.perf_counter()
        gens = sample(model, tok, prompts, m=args.m, temperature=0.7,
                      max_new_tokens=args.max_new_tokens, question_ids=ids, stop=(STOP,),
                      max_batch=args.max_batch)
        t_engine = time.perf_counter() - t0
    n_engine = sum(len(g.token_ids) for q in gens for g in q)
    print(f"engine:   {n_engine} tokens in {t_engine:.1f} s = {n_engine / t_engine:.1f} tok/s, "
          f"peak RSS {mem.peak:.0f} MiB")
    if not args.skip_baseline:
        with PeakRss() as mem:
            t0 = time.perf_counter()
            n_base = baseline_generate(model, tok, prompts, args.m, args.max_new_tokens)
            t_base = time.perf_counter() - t0
        print(f"generate: {n_base} tokens in {t_base:.1f} s = {n_base / t_base:.1f} tok/s, "
              f"peak RSS {mem.peak:.0f} MiB")
        print(f"throughput ratio engine/generate: {(n_engine / t_engine) / (n_base / t_base):.2f}x")

    if args.skip_decode:
        return
    # Decode phase: two alternating repetitions, best of each (a shared machine is noisy).
    rows, steps = args.m, args.max_new_tokens
    ban = BanEos(tok.eos_token_id)
    bare, engine, peaks = [], [], {"bare": 0.0, "engine": 0.0}
    for _ in range(2):
        with PeakRss() as mem:
            bare.append(bare_decode(model, tok, prompts[0], rows, steps))
        peaks["bare"] = max(peaks["bare"], mem.peak)
        with PeakRss() as mem:
            timings = {}
            for n_new in (1, steps + 1):
                t0 = time.perf_counter()
                sample(model, tok, prompts[:1], m=rows, temperature=0.7, max_new_tokens=n_new,
                       question_ids=ids[:1], intervention=ban, max_batch=rows)
                timings[n_new] = time.perf_counter() - t0
            engine.append(timings[steps + 1] - timings[1])
        peaks["engine"] = max(peaks["engine"], mem.peak)
    t_bare, t_decode = min(bare), min(engine)
    print(f"bare decode loop: batch {rows}, {steps} steps: {rows * steps / t_bare:.1f} tok/s, "
          f"peak RSS {peaks['bare']:.0f} MiB")
    print(f"engine decode phase: batch {rows}, {steps} steps: {rows * steps / t_decode:.1f} tok/s, "
          f"peak RSS {peaks['engine']:.0f} MiB")
    print(f"decode ratio engine/bare loop: {t_bare / t_decode:.2f}")

if __name__ == "__main__":
    main()
