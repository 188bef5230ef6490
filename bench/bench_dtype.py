"""How far bfloat16 weights move what a run measures, against float32, on the same prompts.

Not a timing: the agreement figures ``--dtype auto`` rests on (docs/engine.md). The embedded
model is loaded in both dtypes; on the prompts of ``arith`` (and W, GSM8K 8-shot CoT, with
``--gsm8k``) it reports

* next-token logits: largest absolute difference, the largest logit magnitude, how many
  prompts keep their argmax, mean KL(float32 || bfloat16) in nats;
* samples (same seed, so the same noise): how many of the N x m responses are identical;
* per-question solve probabilities r(q) = c_q / m: mean |r_bf16 - r_fp32| and both means
  (arXiv 2608.07341, §3: the quantity SA-PPG compares).

Usage::

    python bench/bench_dtype.py [--questions 8] [-m 16] [--tokens 48] [--gsm8k DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from zerogap.engine import sample
from zerogap.models import load_model
from zerogap.tasks import get_task, task_from_strings


def next_token_agreement(models: dict, tokenizer, prompts) -> dict:
    diffs, peaks, same, kls = [], [], 0, []
    with torch.inference_mode():
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            a, b = (models[d](input_ids=ids, logits_to_keep=1).logits[0, -1].float()
                    for d in ("float32", "bfloat16"))
            diffs.append(float((a - b).abs().max()))
            peaks.append(float(a.abs().max()))
            same += int(a.argmax() == b.argmax())
            kls.append(float(torch.sum(a.softmax(-1) * (a.log_softmax(-1) - b.log_softmax(-1)))))
    return {"max_abs_logit_diff": max(diffs), "max_abs_logit": max(peaks),
            "same_argmax": f"{same}/{len(prompts)}", "mean_kl": sum(kls) / len(kls)}


def workload(models: dict, tokenizer, task, n: int, m: int, tokens: int) -> dict:
    questions = task.questions("test")[:n]
    prompts = [task.prompt(q) for q in questions]
    ids = [q.id for q in questions]
    out = {"questions": n, "m": m, "max_new_tokens": tokens,
           "logits": next_token_agreement(models, tokenizer, prompts)}
    draws, solve = {}, {}
    for dtype, model in models.items():
        t0 = time.perf_counter()
        gens = sample(model, tokenizer, prompts, m=m, temperature=0.7, max_new_tokens=tokens,
                      question_ids=ids, stop=task.stop)
        out[f"{dtype}_s"] = time.perf_counter() - t0
        draws[dtype] = [[g.token_ids for g in row] for row in gens]
        solve[dtype] = [sum(task.grade(q, g.text).correct for g in row) / m
                        for q, row in zip(questions, gens, strict=True)]
    same = sum(a == b for qa, qb in zip(draws["float32"], draws["bfloat16"], strict=True)
               for a, b in zip(qa, qb, strict=True))
    gaps = [abs(a - b) for a, b in zip(solve["float32"], solve["bfloat16"], strict=True)]
    out.update(identical_samples=f"{same}/{n * m}", mean_abs_solve_diff=sum(gaps) / n,
               max_abs_solve_diff=max(gaps),
               mean_solve_float32=sum(solve["float32"]) / n,
               mean_solve_bfloat16=sum(solve["bfloat16"]) / n)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("-m", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--gsm8k", type=Path, default=None,
                        help="also W: GSM8K 8-shot CoT from this folder (128 new tokens)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    loaded = {d: load_model(args.model, device="cpu", dtype=d) for d in ("float32", "bfloat16")}
    models = {d: x.model for d, x in loaded.items()}
    tokenizer = loaded["float32"].tokenizer
    results = {"arith": workload(models, tokenizer, get_task("arith"), args.questions,
                                 args.m, args.tokens)}
    if args.gsm8k is not None:
        task = task_from_strings("gsm8k", {"path": str(args.gsm8k)})
        results["gsm8k"] = workload(models, tokenizer, task, args.questions, args.m, 128)
    if args.json:
        print(json.dumps(results))
        return
    for name, r in results.items():
        lg = r["logits"]
        print(f"[{name}] {r['questions']} questions x m={r['m']}, {r['max_new_tokens']} tokens")
        print(f"  logits: max |fp32 - bf16| {lg['max_abs_logit_diff']:.3f} (logits up to "
              f"{lg['max_abs_logit']:.1f}); same argmax {lg['same_argmax']}; mean KL "
              f"{lg['mean_kl']:.5f} nats")
        print(f"  samples identical {r['identical_samples']}; solve probability |diff| mean "
              f"{r['mean_abs_solve_diff']:.4f}, max {r['max_abs_solve_diff']:.4f} (means "
              f"{r['mean_solve_float32']:.4f} fp32, {r['mean_solve_bfloat16']:.4f} bf16)")
        print(f"  sampling wall: float32 {r['float32_s']:.1f} s, bfloat16 {r['bfloat16_s']:.1f} s")


if __name__ == "__main__":
    main()
