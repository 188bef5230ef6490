"""The study's tests run the tiny models of the reduced study (tests/conftest.py) on the
toy-arith task."""

import pytest

import helpers  # noqa: F401  (registers the toy-arith task)


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_thread):
    """Every test here samples from tiny models: torch on one thread."""
