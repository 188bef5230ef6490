"""Shared test set-up: the weight-free tiny Llama used for mechanics tests, the real GSM8K
release files (never copied into the repository), and `gpu` tests that skip themselves where no
CUDA device is present."""

import os
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="session")
def make_tiny_llama():
    """Factory: ``make_tiny_llama(seed)`` -> a fresh weight-free tiny Llama (eval mode)."""
    return _tiny_llama


@pytest.fixture
def tiny_llama():
    return _tiny_llama()


@pytest.fixture(scope="session")
def smol_tokenizer():
    """The embedded SmolLM2 tokenizer (49,152 ids, as the tiny Llama), read from its GGUF file."""
    from transformers import AutoTokenizer

    from zerogap.models import embedded_gguf

    path = embedded_gguf()
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models gain nothing from two threads, and on a shared 2-core machine threads that
    wait for each other make every op several times slower."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


# ../shared/data/gsm8k next to the repository, as the project's machines lay it out.
GSM8K_DIR = Path(
    os.environ.get(
        "ZEROGAP_GSM8K", Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k"
    )
)


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    if not (GSM8K_DIR / "test.jsonl").is_file():
        pytest.skip(f"GSM8K not found at {GSM8K_DIR} (set ZEROGAP_GSM8K)")
    return GSM8K_DIR
