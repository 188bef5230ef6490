"""vLLM tests run only in the virtualenv that has vLLM (``make test`` builds ``.venv-vllm``).

One ``vllm.LLM`` on the embedded model serves the whole module: vLLM takes ~20-30 s to start on
a 2-core CPU. The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and the
``uni`` executor) so that tests can watch the logits processors vLLM built.
"""

import os

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed in this environment")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


@pytest.fixture(scope="session")
def embedded_llm():
    from vllm import LLM

    from zerogap.models import model_folder

    folder = model_folder("embedded")
    llm = LLM(model=str(folder), dtype="float32", max_model_len=1024, enforce_eager=True,
              seed=0, gpu_memory_utilization=0.15, distributed_executor_backend="uni",
              max_logprobs=-1)  # full-vocabulary logprobs: greedy entropies
    yield llm
