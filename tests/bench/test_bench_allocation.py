"""bench/bench_allocation.py's main mode runs end to end on the demo's profile and prints each
design's line (it broke silently once when the intervals' fields were renamed: nothing ran it).
A handful of studies per design on a seed where the allocated design matches (at 16 studies
some seeds match at none): the figures are noisy, the lines and their shape are not."""

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_allocation.py"


def test_the_main_mode_prints_every_design_and_the_target():
    done = subprocess.run([sys.executable, str(BENCH), "--profile", "demo", "--reps", "16",
                           "--stated", "2", "--draws", "2", "--seed", "2"],
                          capture_output=True, text=True, timeout=300)
    # demo's profile is not the target's (PAPER's): the command exits 0 whatever it reads
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "uniform m = 8: 1.96 sd railcap" in out
    share = re.search(r"reference allocated: .* whole study \(reference \+ K = 5\): "
                      r"([0-9.]+) of uniform's samples", out)
    assert share and 0 < float(share.group(1)) <= 1.5
    assert re.search(r"simulation noise \(bootstrap over the 16 studies, 200 resamples\): sd "
                     r"[0-9.]+, 95% [0-9.]+-[0-9.]+", out)
    assert re.search(r"coverage railcap [01]\.\d+, identity [01]\.\d+, railcap - identity", out)
    assert "bound of allocations fixed before the reference batch" in out


def _bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_allocation", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_designs_share_their_random_numbers():
    # Common random numbers: study i of every design reads the same second batch and the same
    # noise, laid out by sample index. A design whose plan is uniform's reads uniform's
    # estimates exactly; one that gives some questions more samples keeps every other
    # question's outcomes and only adds to the others'.
    import numpy as np

    from zerogap.uncertainty.calibration import DEMO

    bench = _bench()
    truth = DEMO.draw(np.random.default_rng(4))
    plans = bench.Plans(DEMO, truth, seed=4)
    uniform = bench.studies(plans, None, None, 6, 0)

    class Same(bench.Plans):
        def __call__(self, i, budget, reference):
            return np.full(DEMO.n, DEMO.m), np.full(DEMO.n, DEMO.m)

    same = bench.studies(Same(DEMO, truth, seed=4), 3.0, 5, 6, 0)
    np.testing.assert_array_equal(same["estimates"], uniform["estimates"])

    m = np.full(DEMO.n, DEMO.m)
    more = m + 3 * (np.arange(DEMO.n) % 2)
    few_ref, few, few_joint = plans.outcomes(2, m, m, joint=True)
    more_ref, more_counts, more_joint = plans.outcomes(2, more, more + 5, joint=True)
    kept = more == m
    np.testing.assert_array_equal(few[:, kept], more_counts[:, kept])
    np.testing.assert_array_equal(few_joint[..., kept], more_joint[..., kept])
    assert np.all(more_counts >= few) and np.all(more_ref >= few_ref)
    assert np.any(more_counts > few) and np.any(more_ref > few_ref)


def test_the_plans_are_allocate_samples_plans():
    # The bench scales each study's score itself (once per study, not once per budget): it
    # must give what allocate_samples gives for every budget, reference at m or allocated.
    import numpy as np

    from zerogap.uncertainty import allocate_samples
    from zerogap.uncertainty.calibration import DEMO, PAPER

    bench = _bench()
    for profile in (DEMO, PAPER):
        plans = bench.Plans(profile, profile.draw(np.random.default_rng(1)), seed=1)
        second, m = plans.second(3), np.full(profile.n, profile.m)
        for budget in (1.5, 0.4 * profile.m, float(profile.m)):
            for reference in (None, 5):
                samples, ref = plans(3, budget, reference)
                plan = allocate_samples(second, m, budget=budget, bins=profile.bins,
                                        max_samples=8 * profile.m,
                                        reference_strategies=reference)
                np.testing.assert_array_equal(samples, plan.samples)
                np.testing.assert_array_equal(ref, plan.reference)
