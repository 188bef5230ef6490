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
