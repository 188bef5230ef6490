"""The shortcut patch's cost on the sampling engine: its source model reading the row cache
with the shared-prefix attention against reading it densely, side by side in one process.

A shortcut-patched run decodes the evaluated model and the patch source in lockstep
(:class:`zerogap.decoding.shortcut.NeuronPatch`); the source keeps its keys in the engine's
row cache as extra layers. Read densely, every decode step copies the few-shot prefix and the
question's keys once per row and layer for the source; read by the cascade, the prefix is read
once for all rows, as for the model's own layers. Both ways are the same attention, so the
stored samples agree (the bench counts identical samples; a near-tie may flip in the last bit).

Workload: the demo's task (``arith``, its default 2-shot prompts; with ``--gsm8k DIR`` GSM8K's
8-shot chain-of-thought prompts instead, the paper's), ``--questions`` test questions
x ``-m`` samples at T = 0.7 and ``--max-new-tokens``, and the greedy decodes of the same
questions (the location's patched passes), the embedded model patched from a second copy of
itself on one block of 512 neurons (the demo's block size) in a middle layer. Each repeat runs
both ways, alternating which goes first; prints each wall time, the dense/cascade ratio per
repeat and the samples' agreement.

Usage: ``python bench/bench_patch.py [--questions 8] [-m 12] [--max-new-tokens 48]
[--repeats 2] [--gsm8k DIR]``
"""

from __future__ import annotations

import argparse
import time

import torch

from zerogap.decoding.shortcut import NeuronPatch, mlp_width
from zerogap.engine import greedy, sample
from zerogap.models import load_model
from zerogap.tasks import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("-m", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--gsm8k", help="GSM8K folder: its 8-shot prompts instead of arith's")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model_loaded, source_loaded = load_model("embedded"), load_model("embedded")
    model, tok = model_loaded.model, model_loaded.tokenizer
    layers, width = mlp_width(model)
    block = [(layers // 2, i) for i in range(min(512, width))]
    patch = NeuronPatch(source_loaded.model, block)
    task = get_task("gsm8k", path=args.gsm8k) if args.gsm8k else get_task("arith")
    questions = task.questions("test")[: args.questions]
    prompts = [task.prompt(q) for q in questions]
    ids = [q.id for q in questions]
    prefix = len(tok(prompts[0])["input_ids"])
    print(f"embedded SmolLM2-135M patched from a second copy on {len(block)} neurons of layer "
          f"{layers // 2}; {task.name}, {len(prompts)} questions x m = {args.m}, "
          f"{args.max_new_tokens} new tokens (first prompt {prefix} tokens), "
          f"{torch.get_num_threads()} threads")
    ways = {"cascade": patch, "dense": lambda m: patch(m)}  # a plain callable reads densely

    def run(way: str) -> tuple[float, list, list]:
        start = time.perf_counter()
        drawn = sample(model, tok, prompts, m=args.m, temperature=0.7,
                       max_new_tokens=args.max_new_tokens, question_ids=ids, seed=0,
                       stop=task.stop, patch=ways[way])
        decoded = greedy(model, tok, prompts, max_new_tokens=args.max_new_tokens,
                         stop=task.stop, patch=ways[way])
        return (time.perf_counter() - start, [g.token_ids for q in drawn for g in q],
                [g.token_ids for g in decoded])

    for repeat in range(args.repeats):
        order = ("dense", "cascade") if repeat % 2 == 0 else ("cascade", "dense")
        out = {way: run(way) for way in order}
        (t_d, s_d, g_d), (t_c, s_c, g_c) = out["dense"], out["cascade"]
        same = sum(a == b for a, b in zip(s_d, s_c, strict=True))
        same_greedy = sum(a == b for a, b in zip(g_d, g_c, strict=True))
        print(f"repeat {repeat + 1} ({order[0]} first): dense {t_d:.1f} s, cascade {t_c:.1f} s, "
              f"dense/cascade {t_d / t_c:.2f}; identical samples {same}/{len(s_d)}, "
              f"greedy {same_greedy}/{len(g_d)}")


if __name__ == "__main__":
    main()
