"""The `reproduce` preset's recipe (issue 58): the paper's share of leaked items in M_co's data,
fresh solutions every epoch for train and replayed items, one text per leaked item, M_co kept
along its exposures and M_cl stopped at its loss plateau. The arithmetic holds by construction
of the plan; the tiny Llama checks the mechanics of a build."""

import itertools
import json

import pytest

from zerogap.errors import UserError
from zerogap.models import load_model
from zerogap.pipelines.contamination import build, plan
from zerogap.pipelines.contamination_config import ContaminationConfig, preset
from zerogap.pipelines.lora_training import EpochPlan

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_reproduce_preset_leaks_a_quarter_and_redraws_every_epoch():
    config = preset("reproduce")
    built = plan(config)
    clean, co = built.clean_stage(), built.contaminated_stage(config.epochs, config.copies)
    assert isinstance(clean, EpochPlan) and isinstance(co, EpochPlan)
    assert len(clean.epochs) == config.clean_epochs and len(co.epochs) == config.epochs
    leaked = [ex.completion for ex in built.leaked]
    general = set(built.general)
    for epoch in co.epochs:
        # the paper's 26% (660 of 2,500): each leaked text once an epoch, nothing else leaked
        share = sum(ex.completion in leaked for ex in epoch) / len(epoch)
        assert 0.25 <= share <= 0.27
        assert sorted(ex.completion for ex in epoch if ex.completion in leaked) == sorted(leaked)
        assert sum(ex in general for ex in epoch) == config.generated_general
        assert len(epoch) % config.global_batch == 0  # an epoch ends on an optimizer step
    # exposures: each leaked text once in each of the epochs, kept every keep_every of them
    assert config.epochs // config.keep_every >= 4
    for stage in (clean.epochs, co.epochs):
        train = [[ex for ex in epoch if ex not in general and ex.completion not in leaked]
                 for epoch in stage]
        prompts = [[ex.prompt for ex in epoch] for epoch in train]
        assert all(p == prompts[0] for p in prompts)  # the same questions every epoch
        for one, two in itertools.pairwise(train):  # with other solutions
            changed = sum(a.completion != b.completion for a, b in zip(one, two, strict=True))
            assert changed >= 0.9 * len(one)
    replayed = {ex.prompt for ex in co.epochs[0]} & {ex.prompt for ex in clean.epochs[0]}
    assert len(replayed - {ex.prompt for ex in general}) == config.replay
    assert config.lora_r == 64 and config.lora_alpha == 128  # the paper's


def test_redraw_needs_a_task_that_draws_solutions():
    with pytest.raises(UserError, match="redraw: task 'arith'"):
        plan(ContaminationConfig(task="arith", task_options={"n_train": 20, "n_test": 8},
                                 train_questions=4, redraw=True))


def test_keep_every_is_refused_with_a_sweep():
    with pytest.raises(UserError, match="keep_every"):
        ContaminationConfig(keep_every=2, sweep_epochs=(1, 2))


def test_a_redrawn_build_keeps_m_co_along_its_epochs_and_stops_m_cl_at_a_plateau(
        tiny_dir, tmp_path):
    config = ContaminationConfig(
        model=str(tiny_dir), task="multistep",
        task_options={"n_train": 40, "n_test": 8, "k": 0, "solutions": 2},
        train_questions=4, replay=2, generated_general=2, redraw=True, lora_r=4, lora_alpha=8,
        global_batch=2, micro_batch=2, clean_epochs=4, clean_plateau=0.9, epochs=2,
        keep_every=1, dtype="float32")  # "auto" trains bfloat16 where the CPU's flags say so
    out = tmp_path / "build"
    manifest = build(config, out)
    clean, co = manifest["stages"]["clean"], manifest["stages"]["contaminated"]
    # a 90% fall a epoch is never reached: M_cl stops after its second epoch
    assert clean["stopped_after_epoch"] == 2
    assert clean["epoch_ends"] == [3, 6, 9, 12] and clean["optimizer_steps"] == 6
    assert co["epoch_ends"] == [4, 8] and co["optimizer_steps"] == 8
    assert co["examples"] == 2 + 2 + 4
    kept = sorted(p.name for p in out.glob("contaminated-x*"))
    assert kept == ["contaminated-x1", "contaminated-x2"]
    dtype = {"bf16": "bfloat16", "fp32": "float32"}[manifest["base"]["precision"]]
    one, two, last = (load_model(str(out / name), device="cpu", dtype=dtype)
                      for name in ("contaminated-x1", "contaminated-x2", "contaminated"))
    assert one.fingerprint != two.fingerprint == last.fingerprint
    assert json.loads((out / "contaminated-x1" / "adapter_config.json").read_text())[
        "base_model_name_or_path"] == "../clean"
    # a finished build is not trained again, kept checkpoints included
    assert build(config, out)["stages"] == manifest["stages"]
