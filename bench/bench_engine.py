"""Sampling engine throughput, measured side by side in one process.

Two workloads (the issue's): ``gsm8k`` (W: 8-shot CoT prompts of ~1,170 tokens, N test
questions, m samples each, T = 0.7, 128 new tokens, stop "Question:") and ``arith`` (the
generated 2-shot word problems, m = 16, 48 new tokens, the task's stop strings). For each:

* ``engine_tok_s``: one ``zerogap.engine.sample`` call, end to end (prefix and question
  encodes, batch-size calibration, refills, stop handling), generated tokens per second;
* ``generate_tok_s``: ``model.generate(num_return_sequences=m)`` per question, pure temperature
  sampling with the same stop strings (tokens counted up to each response's end);
* ``previous_tok_s`` (``--previous REV``): the engine as it was at git revision REV, loaded
  from ``git show`` (the dense per-row cache before shared-prefix attention);
* ``decode_tok_s``: the engine's decode phase alone at the batch size it chose for the
  workload (that many rows split evenly over the workload's first questions, so that the
  question tokens shared by a question's rows count; rows banned from EOS, ``max_new_tokens``
  L + 1 minus 1);
* ``ceiling_tok_s``: a bare loop of one-token forward passes over the weights at that batch
  size with attention replaced by a no-op (the weights-only ceiling), so ``ratio_vs_ceiling``
  says how much of the step attention, sampling and host work take;
* ``previous_cascade`` (``--previous-cascade REV``): the decode phase again with the cascade
  attention of git revision REV, right after this tree's in every repetition, and the ratio of
  their step times (REV over this tree) per repetition;
* ``profile``: seconds per decode step split into weights (the ceiling's step), attention
  and cache (the engine's forward minus the weights), sampling (the hashed-noise draw) and
  the rest (host work: bookkeeping, stop checks, refills).
* ``bandwidth_ceiling_tok_s`` (on a GPU): the batch's rows over the time a step needs to read
  every weight once at the measured device-to-device copy bandwidth, the bound a decode step
  meets when nothing but weight reads costs time.

On a GPU (``--device cuda``) every timed part ends with ``torch.cuda.synchronize()``, so the
profile's parts are the GPU's work, not the launches. Where real weights cannot be had there,
``bench/random_model.py`` writes a model folder of random weights in the same shape (samples
then never stop early: compare decode rates, not end-to-end ones, with a real model's).

Timed parts run ``--repeat`` times alternately; the best is reported with the spread
(min-max). A shared machine is noisy: compare ratios, not absolute numbers, and on a loaded
one prefer ``--threads 1 --cpu-clock`` (CPU time of the one thread: the time other jobs held
the core is left out, the memory bandwidth they take is not).

The baselines (``generate`` and ``--previous``) decode only the first ``--baseline-questions``
questions (default 2): ``generate`` runs question by question and the previous engine is
several times slower, so on W all ten questions would take them most of an hour.

Usage (``--quick`` takes a few minutes on 2 cores; the full run about 15 on a quiet machine)::

    python bench/bench_engine.py [--quick] [--json] [--previous 6a1fe2c] [--threads 2]
        [--baseline-questions 2]
        [--workloads gsm8k arith] [--gsm8k DIR] [--questions 10] [-m 16]
        [--dtype float32|bfloat16|auto] [--skip-generate] [--repeat 2] [--decode-only ROWS]
        [--cpu-clock] [--device cpu|cuda] [--model embedded|FOLDER] [--previous-cascade REV]

The 8-shot prompt is built here from the first GSM8K train items (calculator annotations
removed, "#### N" rewritten as "The answer is N."). Anchor for short prompts: vLLM's CPU build
made ~319 tok/s with n = 16 on a machine of this kind (reference/environment.md).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from shared_data import GSM8K  # bench/shared_data.py: the data's folder beside the checkout
from zerogap.engine import attention, hf, noise, sample
from zerogap.models import load_model

STOP = "Question:"
# What the timed parts read: the wall by default; with --cpu-clock the process's CPU time,
# which on one thread leaves out the time other jobs on a shared machine held the core.
clock = time.perf_counter
ROOT = Path(__file__).resolve().parents[1]


def now() -> float:
    """The clock, once the GPU (if one is used) has finished the work queued so far: CUDA
    kernels run asynchronously, so an unsynchronised clock times only their launches."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return clock()


def gsm8k_workload(gsm8k: Path, n_questions: int, shots: int = 8):
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
    prompts = [f"{prefix}Question: {r['question']}\nAnswer:" for r in rows("test")[:n_questions]]
    return prompts, (STOP,)


def arith_workload(n_questions: int):
    from zerogap.tasks import get_task

    task = get_task("arith")
    questions = task.questions("test")[:n_questions]
    return [task.prompt(q) for q in questions], tuple(task.stop)


def response_length(ids: list[int], eos: int, tokenizer, stop) -> int:
    """Tokens of one ``generate`` row up to its end (EOS, or the token completing a stop)."""
    n = ids.index(eos) if eos in ids else len(ids)
    for k in range(1, n + 1):
        if any(s in tokenizer.decode(ids[:k]) for s in stop):
            return k
    return n


def generate_baseline(model, tok, prompts, m, max_new, stop) -> tuple[int, float]:
    total, t0 = 0, now()
    for prompt in prompts:
        enc = tok(prompt, return_tensors="pt").to(model.device)
        with torch.inference_mode():
            out = model.generate(
                **enc, do_sample=True, temperature=0.7, top_k=0, top_p=1.0,
                num_return_sequences=m, max_new_tokens=max_new, stop_strings=list(stop),
                tokenizer=tok, pad_token_id=tok.eos_token_id,
            )
        new = out[:, enc.input_ids.shape[1]:].tolist()
        total += sum(response_length(row, tok.eos_token_id, tok, stop) for row in new)
    return total, now() - t0


def module_at(rev: str, path: str):
    """The module at ``path`` as it was at git revision ``rev`` (a module of its own)."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"],
                            check=True, capture_output=True, text=True).stdout
    name = f"{Path(path).stem}_at_{rev}"
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
    return module


def previous_engine(rev: str):
    """``zerogap.engine.hf`` as it was at git revision ``rev``."""
    return module_at(rev, "src/zerogap/engine/hf.py")


def _no_attention(module, query, key, value, attention_mask, **kwargs):
    return query.transpose(1, 2), None


def ceiling_step(model, rows: int, steps: int = 4) -> float:
    """Seconds per one-token forward of ``rows`` rows with attention a no-op (weights only)."""
    from transformers import AttentionInterface

    AttentionInterface.register("bench_none", _no_attention)
    saved = model.config._attn_implementation
    model.set_attn_implementation("bench_none")
    try:
        ids = torch.zeros(rows, 1, dtype=torch.long, device=model.device)
        with torch.inference_mode():
            model(input_ids=ids, use_cache=False)
            t0 = now()
            for _ in range(steps):
                model(input_ids=ids, use_cache=False)
            return (now() - t0) / steps
    finally:
        model.set_attn_implementation(saved)


def copy_bandwidth(device: torch.device, nbytes: int = 1 << 30, repeat: int = 10) -> float:
    """Bytes per second a device-to-device copy moves (read plus written): the memory
    bandwidth a decode step's weight reads can reach at best."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t0 = now()
    for _ in range(repeat):
        dst.copy_(src)
    return 2 * nbytes * repeat / (now() - t0)


def weight_bytes(model) -> int:
    """Bytes of the weights one decode step reads (tied matrices counted once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


class BanEos:
    """Intervention that forbids EOS, so every row runs to the token limit."""

    def __init__(self, eos: int):
        self.eos = eos

    def __call__(self, logits, tokens, lengths, question, sample):
        logits[:, self.eos] = float("-inf")
        return logits


class StepTimer:
    """Time spent in the engine's forward passes and in its sampler while the block runs."""

    def __enter__(self):
        self.forward = self.sampling = 0.0
        self.steps = 0
        self._saved = hf._Decoder._step, noise.gumbel_argmax
        step, draw = self._saved

        def timed_step(decoder, *args, **kw):
            t0 = now()
            out = step(decoder, *args, **kw)
            self.forward += now() - t0
            self.steps += 1
            return out

        def timed_draw(*args, **kw):
            t0 = now()
            out = draw(*args, **kw)
            self.sampling += now() - t0
            return out

        hf._Decoder._step, noise.gumbel_argmax = timed_step, timed_draw
        return self

    def __exit__(self, *exc):
        hf._Decoder._step, noise.gumbel_argmax = self._saved


class ChosenBatch(logging.Handler):
    """Catches the batch size the engine's calibration logs."""

    def __init__(self):
        super().__init__()
        self.rows = None

    def emit(self, record):
        if "rows" in getattr(record, "engine", {}):
            self.rows = record.engine["rows"]


def spread(values) -> str:
    return f"{min(values):.1f}-{max(values):.1f}"


@contextlib.contextmanager
def cascade_of(cascade):
    """Decode with ``cascade`` as the engine's cascade attention for the ``with`` block (the
    registered attention function looks it up in its module at every call)."""
    saved = attention.cascade
    attention.cascade = cascade
    try:
        yield
    finally:
        attention.cascade = saved


def decode_seconds(model, tok, prompts, ids, per_q, max_new, ban) -> float:
    """Seconds of the decode phase alone: a run of ``max_new + 1`` tokens minus a run of one
    (encodes and the first step), every row banned from EOS."""
    rows, timings = per_q * len(prompts), {}
    for n_new in (1, max_new + 1):
        t0 = now()
        sample(model, tok, prompts, m=per_q, temperature=0.7, max_new_tokens=n_new,
               question_ids=ids, intervention=ban, max_batch=rows)
        timings[n_new] = now() - t0
    return timings[max_new + 1] - timings[1]


def run_workload(name, model, tok, prompts, stop, args, previous) -> dict:
    m, max_new = args.m, args.max_new_tokens[name]
    ids = [f"test-{i}" for i in range(len(prompts))]
    result = {"questions": len(prompts), "m": m, "max_new_tokens": max_new,
              "prompt_tokens": len(tok(prompts[0]).input_ids)}
    catcher = ChosenBatch()
    logging.getLogger("zerogap.engine").addHandler(catcher)
    logging.getLogger("zerogap.engine").setLevel(logging.INFO)
    rates, prev_rates = [], []
    # The baselines decode question by question (generate) or far slower (the previous engine),
    # so they run on the first k questions only and are compared in tokens per second.
    k = min(args.baseline_questions, len(prompts))
    baseline = prompts[:k]
    result["baseline_questions"] = k
    for _ in range(0 if args.decode_only else args.repeat):
        t0 = now()
        gens = sample(model, tok, prompts, m=m, temperature=0.7, max_new_tokens=max_new,
                      question_ids=ids, stop=stop)
        n = sum(len(g.token_ids) for q in gens for g in q)
        rates.append(n / (now() - t0))
        if previous is not None:
            t0 = now()
            old = previous.sample(model, tok, baseline, m=m, temperature=0.7,
                                  max_new_tokens=max_new, question_ids=ids[:k], stop=stop)
            n_old = sum(len(g.token_ids) for q in old for g in q)
            prev_rates.append(n_old / (now() - t0))
            same = sum(a.token_ids == b.token_ids for qa, qb in zip(gens, old, strict=False)
                       for a, b in zip(qa, qb, strict=True))
            result["identical_to_previous"] = f"{same}/{k * m}"
    if args.decode_only:
        result["batch"] = args.decode_only
    else:
        result.update(engine_tok_s=max(rates), engine_spread=spread(rates), tokens=n,
                      batch=catcher.rows or len(prompts) * m)
    if previous is not None and not args.decode_only:
        result.update(previous_tok_s=max(prev_rates), previous_spread=spread(prev_rates),
                      ratio_vs_previous=max(rates) / max(prev_rates))
    if not args.skip_generate and not args.decode_only:
        n_gen, t_gen = generate_baseline(model, tok, baseline, m, max_new, stop)
        result.update(generate_tok_s=n_gen / t_gen,
                      ratio_vs_generate=result["engine_tok_s"] / (n_gen / t_gen))

    # The decode phase on the workload's own questions (their tokens are the cascade's middle
    # level), the chosen batch split evenly over as many of them as it holds.
    n_q = max(1, min(len(prompts), result["batch"] // m))
    per_q = max(1, result["batch"] // n_q)
    rows = per_q * n_q
    ban = BanEos(tok.eos_token_id)
    # With --previous-cascade each repetition also decodes with that revision's cascade
    # attention, right after this tree's, so the two share the machine's state of the moment.
    cascades = {"this tree": attention.cascade}
    if args.previous_cascade:
        cascades[args.previous_cascade] = module_at(args.previous_cascade,
                                                    "src/zerogap/engine/attention.py").cascade
    decode, ceiling, profiles = [], [], []
    steps = {label: [] for label in cascades}
    for _ in range(args.repeat):
        timers = {}
        for label, cascade in cascades.items():
            with cascade_of(cascade), StepTimer() as timers[label]:
                t_decode = decode_seconds(model, tok, prompts[:n_q], ids[:n_q], per_q, max_new,
                                          ban)
            steps[label].append(t_decode / max_new)
        t_decode, timer = steps["this tree"][-1] * max_new, timers["this tree"]
        decode.append(rows * max_new / t_decode)
        t_weights = ceiling_step(model, rows)
        ceiling.append(rows / t_weights)
        per_step = t_decode / max_new
        forward, draw = timer.forward / timer.steps, timer.sampling / (timer.steps + 2)
        profiles.append({"step_s": per_step, "weights_s": t_weights,
                         "attention_and_cache_s": forward - t_weights, "sampling_s": draw,
                         "rest_s": per_step - forward - draw})
    if args.previous_cascade:
        previous = steps[args.previous_cascade]
        result["previous_cascade"] = {
            "rev": args.previous_cascade, "step_s": [round(t, 4) for t in previous],
            "this_tree_step_s": [round(t, 4) for t in steps["this tree"]],
            "step_ratio": [round(a / b, 3) for a, b in zip(previous, steps["this tree"],
                                                           strict=True)]}
    best = min(range(args.repeat), key=lambda i: profiles[i]["step_s"])
    if model.device.type == "cuda":
        # Reading every weight once per step at the copy bandwidth: rows tokens per step.
        result["bandwidth_ceiling_tok_s"] = (rows * copy_bandwidth(model.device)
                                             / weight_bytes(model))
        result["ratio_vs_bandwidth"] = max(decode) / result["bandwidth_ceiling_tok_s"]
    result.update(decode_rows=rows, decode_questions=n_q,
                  decode_tok_s=max(decode), decode_spread=spread(decode),
                  ceiling_tok_s=max(ceiling), ceiling_spread=spread(ceiling),
                  ratio_vs_ceiling=max(decode) / max(ceiling),
                  profile={k: round(v, 4) for k, v in profiles[best].items()})
    return result


def report(name: str, r: dict) -> None:
    print(f"\n[{name}] {r['questions']} questions x m={r['m']}, {r['max_new_tokens']} new "
          f"tokens, prompt {r['prompt_tokens']} tokens; engine batch {r['batch']}")
    if "engine_tok_s" in r:
        print(f"  engine    {r['engine_tok_s']:7.1f} tok/s end to end "
              f"(spread {r['engine_spread']})")
    if "previous_tok_s" in r:
        print(f"  previous  {r['previous_tok_s']:7.1f} tok/s on {r['baseline_questions']} "
              f"questions (spread {r['previous_spread']}): "
              f"engine/previous {r['ratio_vs_previous']:.2f}x; identical samples "
              f"{r['identical_to_previous']}")
    if "generate_tok_s" in r:
        print(f"  generate  {r['generate_tok_s']:7.1f} tok/s on {r['baseline_questions']} "
              f"questions: engine/generate "
              f"{r['ratio_vs_generate']:.2f}x")
    print(f"  decode    {r['decode_tok_s']:7.1f} tok/s at batch {r['decode_rows']} "
          f"({r['decode_questions']} questions; spread "
          f"{r['decode_spread']}); weights-only ceiling {r['ceiling_tok_s']:.1f} tok/s "
          f"(spread {r['ceiling_spread']}): {100 * r['ratio_vs_ceiling']:.0f}% of it")
    if "bandwidth_ceiling_tok_s" in r:
        print(f"  memory-bandwidth ceiling {r['bandwidth_ceiling_tok_s']:.0f} tok/s (every "
              f"weight read once a step at the measured copy bandwidth): decode at "
              f"{100 * r['ratio_vs_bandwidth']:.1f}% of it")
    if "previous_cascade" in r:
        c = r["previous_cascade"]
        pairs = ", ".join(f"{1000 * a:.0f}/{1000 * b:.0f}" for a, b in
                          zip(c["step_s"], c["this_tree_step_s"], strict=True))
        print(f"  cascade at {c['rev']} against this tree, ms a step per repetition: {pairs}; "
              f"ratio {', '.join(f'{x:.3f}' for x in c['step_ratio'])}")
    p = r["profile"]
    print("  one decode step: " + ", ".join(f"{k[:-2]} {1000 * v:.0f} ms" for k, v in p.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gsm8k", type=Path, default=GSM8K,
                        help=f"GSM8K release folder (default: $ZEROGAP_GSM8K, else {GSM8K})")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "auto"))
    parser.add_argument("--workloads", nargs="+", default=["gsm8k", "arith"],
                        choices=("gsm8k", "arith"))
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("-m", type=int, default=16)
    parser.add_argument("--quick", action="store_true",
                        help="at most 3 questions, 64 / 48 new tokens, one repetition "
                             "unless --repeat")
    parser.add_argument("--repeat", type=int, default=None,
                        help="repetitions of the timed parts (default 2, with --quick 1)")
    parser.add_argument("--previous", metavar="REV", default=None,
                        help="also time the engine of this git revision, e.g. 6a1fe2c")
    parser.add_argument("--previous-cascade", metavar="REV", default=None,
                        help="also decode with the cascade attention of this git revision, "
                             "alternating with this tree's in every repetition")
    parser.add_argument("--skip-generate", action="store_true")
    parser.add_argument("--decode-only", type=int, metavar="ROWS", default=None,
                        help="time only the decode phase and the ceiling, at ROWS rows")
    parser.add_argument("--baseline-questions", type=int, default=2,
                        help="questions the generate and previous-engine baselines decode")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads; on a shared CPU, fewer avoid oversubscription")
    parser.add_argument("--cpu-clock", action="store_true",
                        help="time with the process's CPU time (with --threads 1)")
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    args = parser.parse_args()
    args.max_new_tokens = {"gsm8k": 128, "arith": 48}
    if args.repeat is None:
        args.repeat = 1 if args.quick else 2
    if args.quick:
        if not args.decode_only:  # the decode phase alone is short on the full question set
            args.questions = min(args.questions, 3)
        args.max_new_tokens["gsm8k"] = 64
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cpu_clock:
        if torch.get_num_threads() != 1:
            parser.error("--cpu-clock needs --threads 1 (CPU time adds up the threads)")
        global clock
        clock = time.process_time
    previous = previous_engine(args.previous) if args.previous else None

    loaded = load_model(args.model, device=args.device, dtype=args.dtype)
    model, tok = loaded.model, loaded.tokenizer
    results = {"model": args.model, "device": str(model.device),
               "dtype": str(model.dtype).removeprefix("torch."),
               "threads": torch.get_num_threads(), "vllm_cpu_anchor_tok_s": 319}
    for name in args.workloads:
        prompts, stop = (gsm8k_workload(args.gsm8k, args.questions) if name == "gsm8k"
                         else arith_workload(args.questions))
        results[name] = run_workload(name, model, tok, prompts, stop, args, previous)
        if not args.json:
            report(name, results[name])
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
