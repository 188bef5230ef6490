"""Shared fixtures: the real GSM8K release files (never copied into the repository)."""

import os
from pathlib import Path

import pytest

# ../shared/data/gsm8k next to the repository, as the project's machines lay it out.
GSM8K_DIR = Path(
    os.environ.get(
        "ZEROGAP_GSM8K", Path(__file__).resolve().parents[3] / "shared" / "data" / "gsm8k"
    )
)


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    if not (GSM8K_DIR / "test.jsonl").is_file():
        pytest.skip(f"GSM8K not found at {GSM8K_DIR} (set ZEROGAP_GSM8K)")
    return GSM8K_DIR
