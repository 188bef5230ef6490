"""Generate the example counts files that the README and examples/README.md score (no model).

A synthetic benchmark of 300 questions, m = 50 samples each. The clean model's solve
probabilities pile up near 0, as for a weak clean model on GSM8K; half the questions are
"leaked", and the contaminated model solves those almost always. The strategies mimic the
patterns of the paper's Table 2: `identity` leaves the inflation, `lne-blocking` over-suppresses
some questions and under-suppresses others (so G-APP nearly cancels), `railcap` lands close to
the clean model everywhere, and `all-zero` fails every question.

    python examples/make_examples.py   # rewrites examples/*.jsonl deterministically
"""

from pathlib import Path

import numpy as np

from zerogap.io.counts import write_counts

N, M, SEED = 300, 50, 20260810
HERE = Path(__file__).parent


def main() -> None:
    rng = np.random.default_rng(SEED)
    ids = [f"q{i:03d}" for i in range(N)]
    never = rng.random(N) < 0.3
    p_clean = np.where(never, 0.0, rng.beta(1.2, 2.0, N))
    leaked = rng.random(N) < 0.5
    p_identity = np.where(leaked, 0.97, np.clip(p_clean + 0.03, 0, 1))
    p_railcap = np.clip(p_clean + rng.normal(0.0, 0.06, N) + 0.04 * leaked, 0, 1)
    shift = rng.choice([-0.25, 0.25], N)
    p_lne = np.clip(p_clean + np.where(leaked, shift + 0.05, -0.02), 0, 1)
    runs = {
        "clean": p_clean,
        "identity": p_identity,
        "railcap": p_railcap,
        "lne-blocking": p_lne,
        "all-zero": np.zeros(N),
    }
    for name, p in runs.items():
        outcomes = rng.random((N, M)) < p[:, None]  # (N, M) graded samples
        write_counts(HERE / f"{name}.jsonl", ids, outcomes.sum(1), [M] * N, first=outcomes[:, 0])


if __name__ == "__main__":
    main()
