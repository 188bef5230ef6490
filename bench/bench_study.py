"""A whole study with its jobs one at a time against two side by side, measured in one sitting.

``zerogap evaluate`` and ``zerogap demo`` run a study's jobs (the clean model's two batches,
the greedy decodes, each strategy's run, shortcut-neuron location, the controls) in worker
threads, two at once on a CPU with two or more threads, each with its share of torch's threads
(:mod:`zerogap.study.workers`). This times the demo's study on models built by ``zerogap
contaminate --preset laptop`` (or ``zerogap demo``'s ``runs/demo/models``) with ``workers=1``
and ``workers=2``, alternately, each into a fresh folder, and reports

* the wall time of each study (jobs and the report; no model build) and each job's seconds;
* the ratio one-at-a-time / side by side, per repeat;
* how many stored responses the two ways share (the same seeds: a response moves only where a
  near-tie falls the other way under another batch size or thread count), and whether the
  printed SA-PPG of every strategy is the same.

Usage (the demo's full size, 128 x 8, takes about 2 x 8 minutes on 2 cores)::

    python bench/bench_study.py MODELS [--questions 128] [-m 8] [--repeat 1] [--dtype auto]
        [--json]
"""

from __future__ import annotations

import argparse
import json
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


def one_study(models: Path, workers: int, questions: int, m: int, dtype: str) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"bench-study-w{workers}-"))
    started = time.perf_counter()
    report = evaluate(demo_study(models, questions=questions, m=m), out,
                      engine=EngineOptions(dtype=dtype), workers=workers)
    wall = time.perf_counter() - started
    entry = json.loads((out / "study.json").read_text())["settings"][0]
    score = report.scores[entry["name"]]
    return {"workers": workers, "wall_s": round(wall, 1), "folder": str(out),
            "seconds": entry["seconds"],
            "sa_ppg": {v.name: round(v.sa_ppg, 4) for v in score.verdicts}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", type=Path, help="a zerogap contaminate --preset laptop folder")
    parser.add_argument("--questions", type=int, default=DEMO_QUESTIONS)
    parser.add_argument("-m", type=int, default=DEMO_M)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--dtype", default="auto", choices=("float32", "bfloat16", "auto"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for repeat in range(args.repeat):
        # Alternate which way goes first, so a machine that slows down mid-sitting favours
        # neither.
        order = (1, 2) if repeat % 2 == 0 else (2, 1)
        pair = {w: one_study(args.models, w, args.questions, args.m, args.dtype) for w in order}
        a, b = responses(Path(pair[1]["folder"])), responses(Path(pair[2]["folder"]))
        same = sum(a[k] == b.get(k) for k in a)
        rows.append({"repeat": repeat, "one_at_a_time": pair[1], "side_by_side": pair[2],
                     "ratio": round(pair[1]["wall_s"] / pair[2]["wall_s"], 2),
                     "identical_responses": f"{same}/{len(a)}",
                     "same_sa_ppg": pair[1]["sa_ppg"] == pair[2]["sa_ppg"]})
        print(f"repeat {repeat}: one at a time {pair[1]['wall_s']} s, side by side "
              f"{pair[2]['wall_s']} s: {rows[-1]['ratio']}x; identical responses "
              f"{same}/{len(a)}; same SA-PPG {rows[-1]['same_sa_ppg']}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            for way in ("one_at_a_time", "side_by_side"):
                r = row[way]
                print(f"[{row['repeat']}] {way}: {r['wall_s']} s; jobs "
                      + ", ".join(f"{k} {v}" for k, v in r["seconds"].items()))
                print(f"    SA-PPG {r['sa_ppg']}")
            print(f"[{row['repeat']}] ratio {row['ratio']}x, identical responses "
                  f"{row['identical_responses']}, same SA-PPG {row['same_sa_ppg']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
