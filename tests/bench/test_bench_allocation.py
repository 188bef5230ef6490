"""bench/bench_allocation.py's main mode runs end to end on the demo's profile and prints each
design's line (it broke silently once when the intervals' fields were renamed: nothing ran it).
A handful of studies per design: the figures are noisy, the lines and their shape are not."""

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_allocation.py"


def test_the_main_mode_prints_every_design_and_the_target():
    done = subprocess.run([sys.executable, str(BENCH), "--profile", "demo", "--reps", "12",
                           "--stated", "2", "--draws", "2"],
                          capture_output=True, text=True, timeout=300)
    # demo's profile is not the target's (PAPER's): the command exits 0 whatever it reads
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "uniform m = 8: 1.96 sd railcap" in out
    share = re.search(r"reference allocated: .* whole study \(reference \+ K = 5\): "
                      r"([0-9.]+) of uniform's samples", out)
    assert share and 0 < float(share.group(1)) <= 1.5
    assert re.search(r"coverage railcap [01]\.\d+, identity [01]\.\d+, railcap - identity", out)
    assert "bound of allocations fixed before the reference batch" in out
