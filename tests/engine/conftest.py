import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import toy  # noqa: E402  (registers the toy-arith task)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    return toy.save_tiny(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny():
    return toy.tiny_model(), toy.byte_tokenizer()


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The tiny model gains nothing from threads, and on a shared 2-core machine OpenMP threads
    that wait for each other make every op many times slower."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
