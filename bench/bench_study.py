"""A whole study run two ways, measured in one sitting: its jobs one at a time against two side
by side, or on local threads against a Ray cluster on the same machine.

``zerogap evaluate`` and ``zerogap demo`` run a study's jobs (the clean model's two batches,
the greedy decodes, each strategy's run, shortcut-neuron location, the controls) in worker
threads, two at once on a CPU with two or more threads, each with its share of torch's threads
(:mod:`zerogap.study.workers`); ``--executor ray`` runs each as a task on a Ray cluster
(:mod:`zerogap.study.ray_executor`). This times the demo's study on models built by ``zerogap
contaminate --preset laptop`` (or ``zerogap demo``'s ``runs/demo/models``), the two ways
alternately, each into a fresh folder, and reports

* the wall time of each study (jobs and the report; no model build) and each job's seconds;
* the ratio of the two walls, per repeat: one at a time / side by side (``--executor local``),
  or Ray / local threads (``--executor ray``: Ray's overhead, 1.0 for none);
* how many stored responses the two ways share (the same seeds: a response moves only where a
  near-tie falls the other way under another batch size or thread count), and whether the
  printed SA-PPG of every strategy is the same;
* the load average when each study started.

``--executor ray`` starts a Ray cluster in this process (``--workers`` CPUs, every process on
127.0.0.1; its start is timed apart, as a cluster outlives one study) and runs both ways with
``--workers`` jobs at a time on one torch thread each (a Ray task's CPU), so the ratio is the
executor's alone; give ``--batch-size`` to fix the batches too, and the responses are the same.

Usage (the demo's full size, 128 x 8, takes about 2 x 8 minutes on 2 cores)::

    python bench/bench_study.py MODELS [--questions 128] [-m 8] [--repeat 1] [--dtype auto]
        [--executor local|ray] [--workers 2] [--batch-size N] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from zerogap.engine.base import EngineOptions
from zerogap.store import RunStore
from zerogap.study.demo import DEMO_M, DEMO_QUESTIONS, demo_study
from zerogap.study.run import evaluate


def responses(folder: Path) -> dict:
    """Every stored response of the study in ``folder``, keyed by run, question and sample."""
    entry = json.loads((folder / "study.json").read_text())["settings"][0]
    found = {}
    for label, run in {**entry["runs"], **entry["control_runs"]}.items():
        with RunStore(folder / run, create=False) as store:
            if run.startswith("runs/greedy"):
                found.update({(label, q, 0): g.text for q, g in store.greedy().items()})
            else:
                found.update({(label, r.question_id, r.sample): r.text for r in store.samples()})
    return found


def one_study(models: Path, way: str, workers: int, args: argparse.Namespace) -> dict:
    """The demo's study into a fresh folder, its jobs run ``way`` (an executor's name) by
    ``workers`` at a time."""
    out = Path(tempfile.mkdtemp(prefix=f"bench-study-{way}-w{workers}-"))
    study = dataclasses.replace(demo_study(models, questions=args.questions, m=args.m),
                                executor=way)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    report = evaluate(study, out, engine=EngineOptions(dtype=args.dtype,
                                                        max_batch=args.batch_size),
                      workers=workers)
    wall = time.perf_counter() - started
    entry = json.loads((out / "study.json").read_text())["settings"][0]
    score = report.scores[entry["name"]]
    return {"way": way, "workers": workers, "wall_s": round(wall, 1), "load": round(load, 2),
            "folder": str(out), "seconds": entry["seconds"],
            "sa_ppg": {v.name: round(v.sa_ppg, 4) for v in score.verdicts}}


def start_ray(cpus: int) -> float:
    """A Ray cluster of ``cpus`` CPUs in this process, every process on the loopback address
    (Ray reads the variable when it is imported); the seconds it took to start."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    started = time.perf_counter()
    ray.init(num_cpus=cpus, address="local", include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    return time.perf_counter() - started


def compare(args: argparse.Namespace, ways: dict, names: tuple[str, str], repeat: int) -> dict:
    """One repeat: the study run both ways (``ways["a"]``, ``ways["b"]``), and what differs."""
    # Alternate which way goes first, so a machine that slows down mid-sitting favours neither.
    order = ("a", "b") if repeat % 2 == 0 else ("b", "a")
    pair = {key: one_study(args.models, *ways[key], args) for key in order}
    a, b = responses(Path(pair["a"]["folder"])), responses(Path(pair["b"]["folder"]))
    same = sum(a[k] == b.get(k) for k in a)
    ratio = pair["b"]["wall_s"] / pair["a"]["wall_s"] if args.executor == "ray" else \
        pair["a"]["wall_s"] / pair["b"]["wall_s"]
    row = {"repeat": repeat, names[0]: pair["a"], names[1]: pair["b"], "ratio": round(ratio, 3),
           "identical_responses": f"{same}/{len(a)}",
           "same_sa_ppg": pair["a"]["sa_ppg"] == pair["b"]["sa_ppg"]}
    print(f"repeat {repeat}: {names[0]} {pair['a']['wall_s']} s (load {pair['a']['load']}), "
          f"{names[1]} {pair['b']['wall_s']} s (load {pair['b']['load']}): {row['ratio']}x; "
          f"identical responses {same}/{len(a)}; same SA-PPG {row['same_sa_ppg']}",
          file=sys.stderr)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", type=Path, help="a zerogap contaminate --preset laptop folder")
    parser.add_argument("--questions", type=int, default=DEMO_QUESTIONS)
    parser.add_argument("-m", type=int, default=DEMO_M)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--dtype", default="auto", choices=("float32", "bfloat16", "auto"))
    parser.add_argument("--executor", default="local", choices=("local", "ray"),
                        help="local: one at a time against two side by side; ray: local "
                             "threads against a Ray cluster, --workers at a time")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.executor == "ray":
        import torch

        torch.set_num_threads(1)  # a job's thread on local threads as in a Ray task
        ways = {"a": ("local", args.workers), "b": ("ray", args.workers)}
        names = ("local threads", "ray")
        print(f"ray cluster of {args.workers} CPUs started in {start_ray(args.workers):.1f} s",
              file=sys.stderr)
    else:
        ways = {"a": ("local", 1), "b": ("local", 2)}
        names = ("one at a time", "side by side")
    try:
        rows = [compare(args, ways, names, repeat) for repeat in range(args.repeat)]
    finally:
        if args.executor == "ray":
            import ray

            ray.shutdown()  # on every way out: the cluster's processes end with it
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            for way in names:
                r = row[way]
                print(f"[{row['repeat']}] {way}: {r['wall_s']} s (load {r['load']}); jobs "
                      + ", ".join(f"{k} {v}" for k, v in r["seconds"].items()))
                print(f"    SA-PPG {r['sa_ppg']}")
            print(f"[{row['repeat']}] ratio {row['ratio']}x "
                  f"({'ray / local' if args.executor == 'ray' else 'one / two at a time'}), "
                  f"identical responses {row['identical_responses']}, same SA-PPG "
                  f"{row['same_sa_ppg']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
