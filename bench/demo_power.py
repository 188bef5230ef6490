"""The power calculation behind the demo's size (issue 21; README "How big the demo is").

For each number of questions N (half of them leaked) and samples per question m, over seeded
simulated studies (zerogap.calibration.paired_power): the power of the one-sided paired SA-PPG
test to find a mitigation whose expected SA-PPG lies 0.135 below Identity's (the paper's
RailCap-vs-Identity difference, arXiv 2608.07341 Table 1), and the mean half-width of the
two-sided 95% interval of that difference. The demo's targets: power >= 0.9, half-width <= 0.06.

    python bench/demo_power.py [--reps 100] [--effect 0.135]
"""

import argparse
import time

from zerogap.calibration import paired_power

SIZES = (24, 36, 48, 64, 96, 128)
SAMPLES = (6, 8, 12, 16)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--effect", type=float, default=0.135)
    args = parser.parse_args()
    print(f"paired SA-PPG test, true difference {args.effect}, {args.reps} studies per cell: "
          "power [95% Wilson] and mean 95% half-width")
    for n in SIZES:
        for m in SAMPLES:
            start = time.perf_counter()
            power, half = paired_power(n, m, args.reps, effect=args.effect)
            low, high = power.interval
            print(f"N = {n:3d}  m = {m:2d}  power {power.rate:.2f} [{low:.2f}, {high:.2f}]  "
                  f"half-width {half:.3f}  ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
