"""Collection rules for the whole repository (tests and the package's doctests).

Modules that import vLLM at the top are left out of doctest collection where vLLM is not
installed (the first virtualenv); the vLLM virtualenv collects them. The same holds for the
lm-evaluation-harness model (the ``lmeval`` extra, not installed in the vLLM virtualenv). Every other import error
fails collection: an ignored import error would silently skip a whole test file.
"""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("vllm") else ["src/zerogap/decoding/vllm.py"]
if not importlib.util.find_spec("lm_eval"):
    collect_ignore.append("src/zerogap/harness.py")
