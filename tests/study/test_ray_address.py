"""``zerogap evaluate --executor ray:address=HOST:PORT`` where no cluster listens: one line,
exit 2, within the stated connection timeout (Ray's own client retries without end)."""

import importlib.util
import os
import socket
import subprocess
import sys
import time

import pytest

from helpers import HERE, SRC
from zerogap.study.ray_executor import CONNECT_SECONDS

# Not imported here: Ray binds the loopback address only where the variable tests/study/
# test_ray.py sets is there when Ray is first imported, and a module collected beside it must
# not import Ray first.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray")


def _closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound once, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_address_where_nothing_listens_is_refused_in_one_line(study_models, tmp_path):
    port = _closed_port()
    out = tmp_path / "study"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path[:0] = [{str(HERE)!r}, {str(SRC)!r}]; "
         "import helpers; from zerogap import cli; sys.exit(cli.main(sys.argv[1:]))",
         "evaluate", "--clean", study_models["clean"], "--contaminated",
         study_models["contaminated"], "--task", "toy-arith", "--split-file",
         study_models["split"], "--strategies", "identity", "-m", "2", "--quiet",
         "--executor", f"ray:address=127.0.0.1:{port}", "--out", out],
        capture_output=True, text=True, timeout=120 + CONNECT_SECONDS,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert (f"executor ray:address=127.0.0.1:{port}: no Ray cluster to join (connecting to "
            f"127.0.0.1:{port}: Connection refused; waited at most 10 s)") in done.stderr
    assert time.monotonic() - started < 120
    assert not out.exists()
