import pytest

import helpers  # (registers the toy-arith task)


@pytest.fixture(scope="session")
def tiny():
    return helpers.tiny_model(), helpers.byte_tokenizer()


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_thread):
    """The tiny model gains nothing from threads: torch on one thread for every test here."""
