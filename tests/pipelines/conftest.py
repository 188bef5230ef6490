"""Fixtures for the pipeline tests: a saved weight-free tiny Llama with the byte tokenizer."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
import toy  # noqa: E402


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    return toy.save_tiny(tmp_path_factory.mktemp("tiny-llama"))
