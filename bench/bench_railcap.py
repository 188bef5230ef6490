"""RailCap's cost: the batched core alone, and RailCap against Identity on the sampling engine.

Part 1 (no engine): time per step of ``railcap_apply`` for 256 rows, vocabulary 49,152,
trajectories of 512 tokens, n = 4, in both modes, next to a plain ``topk(2)`` over the same logits
(the floor any cap needs), with about a quarter of the rows on their trajectory.

Part 2 (engine): tokens/s of ``zerogap.engine.sample`` on the embedded SmolLM2 model, the same
prompts, seed and budget, Identity vs RailCap, interleaved repeats; prints the ratio
(target >= 0.97).

Usage: ``python bench/bench_railcap.py [--part core|engine|all] [--rows 64] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import time

import torch

from zerogap.decoding.railcap import railcap_apply, recent_tokens


def time_per_call(fn, repeats: int) -> float:
    fn()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def bench_core(rows=256, vocab=49_152, length=512, n=4, repeats=20) -> None:
    gen = torch.Generator().manual_seed(0)
    trajectory = torch.randint(0, vocab, (rows, length), generator=gen)  # (R, L)
    traj_len = torch.full((rows,), length)  # (R,)
    tokens = torch.randint(0, vocab, (rows, 200), generator=gen)  # (R, S)
    tokens[: rows // 4, 100:104] = trajectory[: rows // 4, 300:304]  # a quarter on the rails
    lengths = torch.full((rows,), 104)
    logits = torch.randn(rows, vocab, generator=gen)  # (R, V)
    question = torch.arange(rows)
    recent = recent_tokens(tokens, lengths, n)
    print(f"core: rows={rows} vocab={vocab} trajectory={length} n={n}, "
          f"{torch.get_num_threads()} threads")
    floor = time_per_call(lambda: logits.topk(2, dim=-1), repeats)
    print(f"  topk(2) alone           {floor * 1e3:8.2f} ms/step")
    for mode in ("cap", "ban"):
        t = time_per_call(
            lambda m=mode: railcap_apply(
                logits.clone(), recent_tokens(tokens, lengths, n), trajectory, traj_len,
                mode=m, rows=question,
            ),
            repeats,
        )
        clone = time_per_call(logits.clone, repeats)
        ms = (t - clone) * 1e3
        print(f"  railcap_apply ({mode})     {ms:8.2f} ms/step (logits copy excluded)")
    _, on, hit = railcap_apply(logits.clone(), recent, trajectory, traj_len, rows=question)
    print(f"  rows on trajectory: {int(on.sum())}/{rows}, capped: {int(hit.sum())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("core", "engine", "all"), default="all")
    parser.add_argument("--rows", type=int, default=64, help="engine rows (questions x m)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.part in ("core", "all"):
        bench_core()


if __name__ == "__main__":
    main()
