from pathlib import Path

import pytest

import helpers  # (registers the toy-arith task)


@pytest.fixture(scope="session")
def tiny():
    return helpers.tiny_model(), helpers.byte_tokenizer()


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_thread):
    """The tiny model gains nothing from threads: torch on one thread for every test here."""


@pytest.fixture
def cgroup_folder():
    """Writes a cgroup-like folder: ``cgroup_folder(path, memory__max="8\\n")`` makes ``path``
    and its file ``memory.max`` (``__`` spells the dot)."""

    def write(path: Path, **files: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (path / name.replace("__", ".")).write_text(text)

    return write
