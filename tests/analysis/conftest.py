import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
import toy  # noqa: E402  (registers the toy-arith task)


@pytest.fixture(scope="session")
def study_models(tmp_path_factory) -> dict[str, Path]:
    """A clean model folder, a LoRA adapter on it as the contaminated model, and a split file.

    The adapter's weights are random (``init_lora_weights=False``), so the contaminated model
    really differs from the clean one; a merged adapter is how ``zerogap contaminate`` ships one.
    """
    import json

    import torch
    from peft import LoraConfig, get_peft_model

    root = tmp_path_factory.mktemp("study-models")
    clean = toy.save_tiny(root / "clean")
    torch.manual_seed(1)
    config = LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj", "up_proj"],
                        init_lora_weights=False)
    adapter = get_peft_model(toy.tiny_model(), config)
    adapter.save_pretrained(root / "contaminated")
    meta = root / "contaminated" / "adapter_config.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()),
                                "base_model_name_or_path": str(clean)}))
    split = root / "split.json"
    split.write_text(json.dumps({"leaked": [f"test-{i}" for i in range(5)],
                                 "unleaked": [f"test-{i}" for i in range(5, 10)]}))
    return {"clean": clean, "contaminated": root / "contaminated", "split": split}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
