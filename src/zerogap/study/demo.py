"""``zerogap demo``'s study: the laptop preset's clean and contaminated models built from the
embedded model, and the study evaluated on them at the size the power calculation gives
(arXiv 2608.07341 §5 in miniature; docs/demo-design.md). Kept apart from :mod:`zerogap.study.run`
so that every command's start-up reads the demo's defaults without importing the study runner.
"""

from __future__ import annotations

from pathlib import Path

from zerogap.progress import ProgressCallback
from zerogap.study.spec import SettingSpec, StudySpec

# The demo's size, from the power calculation with the spread between questions measured by a
# pilot study apart from the tested run (its own questions and seeds; docs/demo-design.md
# section 6, bench/demo_power.py --study): 64 leaked and 64 unleaked questions of the laptop
# preset's split, at the cheapest m that meets both targets there (a 95% half-width of at most
# 0.06 on RailCap against Identity and against each baseline, power >= 0.9 for the paper's
# RailCap-vs-Identity difference of 0.135) and keeps the design criteria the preset meets: at
# m = 4 the clean batch the strata are built from puts too many questions at 0 or 1 for the
# spread criterion (section 6 there).
DEMO_QUESTIONS = 128
DEMO_M = 8
DEMO_MAX_NEW_TOKENS = 48
# Shortcut-neuron location at the demo's scale: SmolLM2-135M's MLP width 1536 takes the spec's
# B = 512 (3 blocks a layer, 87 in all), and the causal score runs for the 2 blocks of highest
# comparative score: one unpatched and four patched greedy passes instead of 176. The neurons
# are located and scored on a calibration split disjoint from the evaluated questions
# (zerogap.study.calibration), not on the evaluated questions as the authors do: the preset
# leaks 80 questions, the demo evaluates the first 64 leaked and 64 unleaked, and the other 16
# leaked with the next 16 unleaked are the 32 calibration questions. Location grows with the
# scoring set (scored on all 128 evaluated questions it took 25% of the study's jobs:
# docs/demo-design.md section 2); on these 32 it makes 160 greedy decodes (the clean model's
# unpatched pass and 4 patched passes of 32; the contaminated model's unpatched answers are the
# study's greedy decodes, which cover the calibration questions for LNE-blocking's beta).
DEMO_NEURON_BLOCK = 512
DEMO_NEURON_CANDIDATES = 2
DEMO_CALIBRATION_SIZE = 32


def demo_study(models: Path, *, questions: int = DEMO_QUESTIONS, m: int = DEMO_M,
               controls: bool = False, ablation: bool = False) -> StudySpec:
    """The demo's study on models built by ``zerogap contaminate``'s laptop preset, on the
    preset's task and task options.

    RailCap always runs on the clean model too (its collateral damage); ``controls`` applies
    every strategy there, ``ablation`` adds the grid :data:`zerogap.study.spec.ABLATION` and
    applies its answer-protecting RailCap to the clean model beside RailCap, so the report
    splits that damage between the answer slot and the reasoning steps
    (:func:`zerogap.analysis.findings.answer_slot`).
    """
    from zerogap.analysis.findings import PROTECTED, RAILCAP
    from zerogap.pipelines.contamination_config import preset

    config = preset("laptop")
    setting = SettingSpec(name=f"smollm2-{config.task}", clean=str(models / "clean"),
                          contaminated=str(models / "contaminated"), task=config.task,
                          task_options=dict(config.task_options),
                          split_file=str(models / "split.json"), limit=questions)
    return StudySpec(settings=(setting,), m=m, max_new_tokens=DEMO_MAX_NEW_TOKENS,
                     calibration_size=min(questions, DEMO_CALIBRATION_SIZE),
                     neuron_block=DEMO_NEURON_BLOCK,
                     neuron_candidates=DEMO_NEURON_CANDIDATES,
                     controls=(RAILCAP, PROTECTED) if ablation else (RAILCAP,),
                     all_controls=controls, ablation=ablation,
                     title="zerogap demo (embedded model)")


def demo_max_questions() -> int:
    """The most questions the demo's split holds half leaked and half not (the laptop
    preset's leaked questions, twice), so a larger ``--questions`` is refused before training.

    Up to :data:`DEMO_QUESTIONS` the split keeps a calibration rest of at least 16 leaked
    questions past the evaluated ones; past it that rest shrinks (fewer leaked than unleaked
    calibration questions), and at this maximum none is left, so the neurons are located and
    scored on the evaluated questions (in sample). The report says which.
    """
    from zerogap.pipelines.contamination_config import preset

    leaked = preset("laptop").leaked
    assert leaked is not None, "the laptop preset names its leaked count"
    return 2 * leaked


def build_demo_models(models: Path, *, progress: ProgressCallback | None = None) -> None:
    """Build the clean and contaminated models once (``zerogap contaminate``'s laptop preset)."""
    from zerogap.pipelines.contamination import build
    from zerogap.pipelines.contamination_config import preset

    build(preset("laptop"), models, progress=progress)  # resumable: finished parts are kept

