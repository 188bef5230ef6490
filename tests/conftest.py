"""Shared test set-up: the real GSM8K files, the weight-free tiny Llamas used for mechanics
tests (the 49,152-token one here, the byte-level one of tests/helpers.py saved as a folder),
the reduced study that the study and the reading-side tests share, and `gpu` tests that skip
themselves where no CUDA device is present."""

import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

# The real GSM8K release files (never copied into the repository): ../shared/data/gsm8k next to
# the repository, as the project's machines lay it out.
GSM8K_DIR = Path(
    os.environ.get(
        "ZEROGAP_GSM8K", Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k"
    )
)
# tests/helpers.py (byte tokenizer, tiny Llama, the toy-arith task) is imported by the tests
# of several folders. It is imported where a test needs it, not here: importing it registers
# toy-arith, which only those tests should see.
sys.path.insert(0, str(Path(__file__).parent))


def cores_per_worker() -> int:
    """The torch threads a test process may use: every core, or its share of them when
    ``make test`` runs the suite in pytest-xdist workers (one per core), so that the workers'
    threads do not outnumber the cores and wait for each other."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, (os.cpu_count() or 1) // workers)


def pytest_configure(config):
    torch.set_num_threads(cores_per_worker())


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _own_memory_budget(monkeypatch):
    """Each test starts and ends with the environment's memory budget: ``--max-memory`` given
    to ``cli.main`` in this process sets ``ZEROGAP_MAX_MEMORY`` (for the processes a command
    starts), and a small budget left behind would stop the next test's model in this worker."""
    from zerogap.engine import memory

    monkeypatch.setenv(memory.ENV, os.environ.get(memory.ENV, ""))
    yield
    memory.reset_budget()


def _tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def ctrl_c():
    """Python's own SIGINT handler for the test, as a user's process has it: the tests that
    press Ctrl-C with ``_thread.interrupt_main()`` (which does nothing where another handler, or
    none, holds SIGINT) then get KeyboardInterrupt whatever an earlier test in the same worker
    process left installed."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    if not (GSM8K_DIR / "test.jsonl").is_file():
        pytest.skip(f"GSM8K not found at {GSM8K_DIR} (set ZEROGAP_GSM8K)")
    return GSM8K_DIR


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


@pytest.fixture
def register_task():
    """``register_task(cls)``: the task class is registered under ``cls.name`` for this test
    only, instead of for the whole session."""
    from zerogap.tasks.base import registered_task

    with contextlib.ExitStack() as stack:
        yield lambda cls: stack.enter_context(registered_task(cls.name, cls))


@contextlib.contextmanager
def _single_thread():
    """Tiny models gain nothing from two threads, and on a shared 2-core machine threads that
    wait for each other make every op several times slower."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread for the module's tests (see ``_single_thread``)."""
    with _single_thread():
        yield


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """The byte-level tiny Llama of tests/helpers.py saved as a model folder."""
    import helpers

    return helpers.save_tiny(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def study_models(tmp_path_factory) -> dict[str, Path]:
    """A clean model folder, a LoRA adapter on it as the contaminated model, and a split file.

    The adapter's weights are random (``init_lora_weights=False``), so the contaminated model
    really differs from the clean one; a merged adapter is how ``zerogap contaminate`` ships one.
    Importing toy registers the toy-arith task the reduced study evaluates.
    """
    from peft import LoraConfig, get_peft_model

    import helpers

    root = tmp_path_factory.mktemp("study-models")
    clean = helpers.save_tiny(root / "clean")
    torch.manual_seed(1)
    config = LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj", "up_proj"],
                        init_lora_weights=False)
    adapter = get_peft_model(helpers.tiny_model(), config)
    adapter.save_pretrained(root / "contaminated")
    meta = root / "contaminated" / "adapter_config.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()),
                                "base_model_name_or_path": str(clean)}))
    split = root / "split.json"
    split.write_text(json.dumps({"leaked": [f"test-{i}" for i in range(5)],
                                 "unleaked": [f"test-{i}" for i in range(5, 10)]}))
    return {"clean": clean, "contaminated": root / "contaminated", "split": split}


@pytest.fixture(scope="session")
def reduced_study(study_models):
    """Factory of the reduced study: every strategy, the toy task, m = 4, 6 new tokens."""
    from zerogap.study.spec import SettingSpec, StudySpec

    def make(**changes) -> StudySpec:
        setting = SettingSpec(name="tiny-toy", clean=str(study_models["clean"]),
                              contaminated=str(study_models["contaminated"]),
                              base=str(study_models["clean"]), task="toy-arith",
                              split_file=str(study_models["split"]))
        fields = dict(settings=(setting,),
                      strategies=("identity", "ted", "lne-blocking", "shortcut", "railcap",
                                  "all-zero"),
                      m=4, max_new_tokens=6, resamples=200, calibration_size=2, title="reduced")
        return StudySpec(**{**fields, **changes})

    return make


@pytest.fixture(scope="session")
def study_dir(reduced_study, tmp_path_factory):
    """The reduced study, evaluated once: (folder, report, progress states seen)."""
    from zerogap.study.run import evaluate

    out = tmp_path_factory.mktemp("study")
    states = []
    with _single_thread():
        report = evaluate(reduced_study(), out,
                          progress=lambda s: states.append((s.stage, s.rows_done, s.rows_total)))
    return out, report, states
