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


STRATEGIES = ("identity", "ted", "lne-blocking", "shortcut", "railcap", "all-zero")


@pytest.fixture(scope="session")
def reduced_study(study_models):
    """Factory of the reduced study: every strategy, the toy task, m = 4, 6 new tokens."""
    from zerogap.study.spec import SettingSpec, StudySpec

    def make(**changes) -> StudySpec:
        setting = SettingSpec(name="tiny-toy", clean=str(study_models["clean"]),
                              contaminated=str(study_models["contaminated"]),
                              base=str(study_models["clean"]), task="toy-arith",
                              split_file=str(study_models["split"]))
        fields = dict(settings=(setting,), strategies=STRATEGIES, m=4, max_new_tokens=6,
                      resamples=200, calibration_size=2, title="reduced")
        return StudySpec(**{**fields, **changes})

    return make


@pytest.fixture(scope="session")
def study_dir(reduced_study, tmp_path_factory):
    """The reduced study, evaluated once: (folder, report, progress states seen)."""
    import torch

    from zerogap.study.run import evaluate

    out = tmp_path_factory.mktemp("study")
    states = []
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        report = evaluate(reduced_study(), out,
                          progress=lambda s: states.append((s.stage, s.rows_done, s.rows_total)))
    finally:
        torch.set_num_threads(saved)
    return out, report, states


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
