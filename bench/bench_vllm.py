"""The vLLM backend against vLLM called directly, RailCap inside vLLM against plain sampling, the
vLLM backend against the HF engine, and greedy decodes with full-vocabulary entropies (what
LNE-blocking needs) against plain ones, measured side by side in one process.

Run it in the virtualenv that has vLLM (``make test`` builds ``.venv-vllm``)::

    .venv-vllm/bin/python bench/bench_vllm.py [--questions 8] [-m 16] [--tokens 64] [--repeats 3]
        [--skip-hf] [--skip-greedy]

Workload: the embedded SmolLM2-135M (fp32) on the first questions of the ``arith`` task (its
2-shot prompt), m samples per question at T = 0.7, at most ``--tokens`` new tokens, the same
request seeds in every variant (so the direct and the backend variants draw the same tokens;
RailCap changes what is drawn, so rates are compared in tokens per second). Targets
(issue 12): zerogap's backend within 5% of vLLM called directly; RailCap within 3% of plain
sampling. The greedy variants decode each question once (with entropies: ``logprobs=-1``, 4
requests in flight). Repeats are interleaved; per-repeat ratios and the best of each are
printed, because a shared machine makes single timings noisy.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("-m", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-hf", action="store_true", help="leave out the HF engine")
    parser.add_argument("--skip-greedy", action="store_true",
                        help="leave out the greedy variants (with entropies they are slow)")
    args = parser.parse_args()

    import torch
    from vllm import LLM, SamplingParams

    from zerogap.decoding.settings import RailCapConfig
    from zerogap.decoding.specs import RailCapEdit
    from zerogap.engine import hf
    from zerogap.engine.base import SamplingSpec
    from zerogap.engine.vllm import VLLMBackend, request_seed
    from zerogap.models import load_model, model_folder
    from zerogap.tasks import get_task

    task = get_task("arith")
    questions = task.questions("test")[: args.questions]
    prompts = [task.prompt(q) for q in questions]
    ids = [q.id for q in questions]
    llm = LLM(model=model_folder("embedded"), dtype="float32", max_model_len=1024,
              enforce_eager=True, seed=0, gpu_memory_utilization=0.15,
              distributed_executor_backend="uni", enable_prefix_caching=True,
              max_logprobs=-1)
    backend = VLLMBackend(llm)
    spec = SamplingSpec(m=args.m, temperature=0.7, max_new_tokens=args.tokens)
    greedy = backend.greedy(prompts, spec)
    railcap = RailCapEdit(tuple(tuple(g.token_ids) for g in greedy), RailCapConfig())

    def direct():
        params = [SamplingParams(n=args.m, temperature=0.7, max_tokens=args.tokens,
                                 seed=request_seed(0, qid)) for qid in ids]
        outs = llm.generate(prompts, params, use_tqdm=False)
        return sum(len(c.token_ids) for o in outs for c in o.outputs)

    def through_backend(intervention=None):
        def run():
            before = backend.generated
            backend.sample(prompts, spec, question_ids=ids, intervention=intervention)
            return backend.generated - before
        return run

    def greedy_decodes(entropies: bool):
        def run():
            return sum(len(g.token_ids) for g in backend.greedy(prompts, spec,
                                                                 entropies=entropies))
        return run

    variants = {"vllm direct": direct, "zerogap vllm": through_backend(),
                "zerogap vllm + railcap": through_backend(railcap)}
    if not args.skip_greedy:
        variants.update({"greedy": greedy_decodes(False),
                         "greedy + entropies": greedy_decodes(True)})
    if not args.skip_hf:
        loaded = load_model("embedded", device="cpu")
        variants["zerogap hf engine"] = lambda: sum(
            len(g.token_ids) for q in hf.sample(
                loaded.model, loaded.tokenizer, prompts, m=args.m, temperature=0.7,
                max_new_tokens=args.tokens, question_ids=ids) for g in q)
    print(f"workload: {args.questions} arith questions x m = {args.m}, <= {args.tokens} tokens, "
          f"torch threads {torch.get_num_threads()}")
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for repeat in range(args.repeats):
        for name, run in variants.items():
            t0 = time.perf_counter()
            tokens = run()
            rates[name].append(tokens / (time.perf_counter() - t0))
        print(f"repeat {repeat + 1}: " + ", ".join(f"{n} {r[-1]:.0f} tok/s"
                                                 for n, r in rates.items()))

    def ratio(a: str, b: str) -> str:
        per = [x / y for x, y in zip(rates[a], rates[b], strict=True)]
        return (f"{a} / {b}: best-of {max(rates[a]) / max(rates[b]):.3f} "
                f"(per repeat {', '.join(f'{p:.3f}' for p in per)})")

    print(ratio("zerogap vllm", "vllm direct"), "[target >= 0.95]")
    print(ratio("zerogap vllm + railcap", "zerogap vllm"), "[target >= 0.97]")
    if "greedy" in rates:
        print(ratio("greedy + entropies", "greedy"), "[the cost of LNE-blocking's input]")
    if "zerogap hf engine" in rates:
        print(ratio("zerogap hf engine", "vllm direct"), "[issue 13: the HF engine against vLLM]")


if __name__ == "__main__":
    main()
