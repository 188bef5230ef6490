"""Where the benchmarks find the data they share with the tests: GSM8K's release files.

``$ZEROGAP_GSM8K`` when set, else ``<checkout>/../shared/data/gsm8k`` (the tests' rule,
tests/conftest.py); each benchmark's ``--gsm8k DIR`` overrides both. The repository ships no
copy of the data.
"""

import os
from pathlib import Path

GSM8K = Path(os.environ.get("ZEROGAP_GSM8K",
                            Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k"))
