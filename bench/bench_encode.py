"""Question encodes (and the comparative score's teacher-forced passes) batched against one
question per forward call, side by side in one process.

Before a question's rows join the decode batch, its tokens after the shared few-shot prefix are
encoded on top of the prefix's keys (:mod:`zerogap.engine.hf`). One question per call makes
small matrix products (a question is 20-40 tokens on the demo's ``arith``); the engine now
encodes the questions admitted together in one left-padded call. This matters most where each
question has one row: the greedy decodes, above all shortcut-neuron location's patched passes
(the model and its patch source both encode). Both ways compute the same attention, so the
decodes agree (the bench counts identical ones; a near-tie may flip in the last bit). The
location's comparative score teacher-forces each leaked question's greedy answer through two
models; it too now runs right-padded batches (:mod:`zerogap.pipelines.neurons`).

Workloads (the embedded model; ``arith``'s 2-shot prompts, or GSM8K's 8-shot ones with
``--gsm8k DIR``): greedy decodes of ``--questions`` questions patched from a second copy of the
model on one block of 512 neurons (a location pass), the same unpatched, and ``-m`` samples of
a quarter of the questions at T = 0.7, and the comparative score of half the questions'
greedy answers between the model and a copy with its MLP weights perturbed. The batch is fixed
at ``--max-batch`` rows (default: one per question), so that both ways decode the same batches:
left to choose, the engine's batch sizer times its first steps, and on a shared machine its
choice alone can move a run's wall by half. Each repeat runs both ways, alternating which goes
first; prints each wall time and the per-question/batched ratio.

Usage: ``python bench/bench_encode.py [--questions 96] [-m 12] [--max-new-tokens 48]
[--max-batch N] [--repeats 2] [--gsm8k DIR]``
"""

from __future__ import annotations

import argparse
import time

import torch

from zerogap.decoding.shortcut import NeuronPatch, mlp_width
from zerogap.engine import greedy, hf, sample
from zerogap.models import load_model
from zerogap.pipelines import neurons
from zerogap.tasks import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=96)
    parser.add_argument("-m", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--max-batch", type=int, help="rows decoded together")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--gsm8k", help="GSM8K folder: its 8-shot prompts instead of arith's")
    args = parser.parse_args()
    model_loaded, source_loaded = load_model("embedded"), load_model("embedded")
    model, tok = model_loaded.model, model_loaded.tokenizer
    layers, width = mlp_width(model)
    patch = NeuronPatch(source_loaded.model, [(layers - 2, i) for i in range(min(512, width))])
    task = get_task("gsm8k", path=args.gsm8k) if args.gsm8k else get_task("arith")
    questions = task.questions("test")[: args.questions]
    prompts = [task.prompt(q) for q in questions]
    few = max(1, len(prompts) // 4)
    rows = args.max_batch or len(prompts)
    print(f"embedded SmolLM2-135M, {task.name}: {len(prompts)} questions, {args.max_new_tokens} "
          f"new tokens, batches of {rows} rows, {torch.get_num_threads()} threads")
    batched = hf._ENCODE_POSITIONS, neurons._FORCED_TOKENS

    def location_pass():
        return [g.token_ids for g in greedy(model, tok, prompts, patch=patch, max_batch=rows,
                                            max_new_tokens=args.max_new_tokens, stop=task.stop)]

    def greedy_pass():
        return [g.token_ids for g in greedy(model, tok, prompts, max_batch=rows,
                                            max_new_tokens=args.max_new_tokens, stop=task.stop)]

    perturbed = load_model("embedded").model
    torch.manual_seed(0)
    with torch.no_grad():
        for name, weight in perturbed.named_parameters():
            if ".mlp." in name:
                weight.add_(torch.randn_like(weight), alpha=1e-3)
    half = prompts[: max(1, len(prompts) // 2)]
    items = [(tok(prompt)["input_ids"], g.token_ids) for prompt, g in zip(
        half, greedy(model, tok, half, max_new_tokens=args.max_new_tokens, stop=task.stop),
        strict=True)]

    def comparative():
        return neurons.comparative_scores(model, perturbed, items)

    def samples():
        drawn = sample(model, tok, prompts[:few], m=args.m, temperature=0.7,
                       max_new_tokens=args.max_new_tokens, seed=0, stop=task.stop, max_batch=rows,
                       question_ids=[q.id for q in questions[:few]])
        return [g.token_ids for q in drawn for g in q]

    workloads = {"greedy, patched (a location pass)": location_pass,
                 "greedy": greedy_pass, f"{few} questions x m = {args.m}": samples,
                 f"comparative score, {len(items)} answers": comparative}
    for name, work in workloads.items():
        for repeat in range(args.repeats):
            order = ("per question", "batched") if repeat % 2 == 0 else ("batched", "per question")
            out = {}
            for way in order:
                # Budgets of 0 and 1 position: one question per call, the way before batching.
                hf._ENCODE_POSITIONS, neurons._FORCED_TOKENS = (
                    batched if way == "batched" else (0, 1))
                start = time.perf_counter()
                decoded = work()
                out[way] = (time.perf_counter() - start, decoded)
            hf._ENCODE_POSITIONS, neurons._FORCED_TOKENS = batched
            (t_one, d_one), (t_all, d_all) = out["per question"], out["batched"]
            print(f"{name}, repeat {repeat + 1} ({order[0]} first): per question {t_one:.1f} s, "
                  f"batched {t_all:.1f} s, ratio {t_one / t_all:.2f}; {_agreement(d_one, d_all)}")


def _agreement(one, other) -> str:
    """Identical decodes out of all, or the scores' largest relative difference."""
    if isinstance(one, torch.Tensor):
        worst = float((one - other).abs().max() / one.abs().max())
        return f"scores differ by at most {worst:.1e} of the largest"
    return f"identical {sum(a == b for a, b in zip(one, other, strict=True))}/{len(one)}"


if __name__ == "__main__":
    main()
