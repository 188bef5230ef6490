"""The built-in studies on the embedded model, each a contamination preset's clean and
contaminated models and the restoration study evaluated on them (arXiv 2608.07341 §5 in
miniature): ``zerogap demo`` (:data:`DEMO`, the laptop preset on ``arith``, minutes) and
``zerogap reproduce`` (:data:`REPRODUCE`, the paper's own recipe on ``multistep``, hours;
docs/reproduction.md). Kept apart from :mod:`zerogap.study.run` so that every command's
start-up reads their defaults without importing the study runner.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from zerogap.progress import ProgressCallback
from zerogap.study.spec import SettingSpec, StudySpec

# The split a study evaluates, written beside the models (a build's own split.json lists the
# leaked and unleaked questions in the order the design search evaluated them).
EVALUATED_SPLIT = "evaluated-split.json"


@dataclass(frozen=True)
class Showcase:
    """A built-in study: which preset builds the models and how the study on them is sized.

    ``questions``: evaluated, half leaked, by default (``sizing``: how that default was
    chosen, as ``--help`` states it); ``searched``: leaked and unleaked questions (each)
    at the head of the build's split that the preset's design search chose it on; the study
    evaluates the questions past them (the confirmation's, arXiv 2608.07341 §5's held-out
    test in miniature) and locates neurons and calibrates the baselines on the searched ones
    (:func:`zerogap.study.calibration.split_questions` takes the questions past the
    evaluated ones). ``ablation``: whether RailCap's ablation grid always runs; ``seed``: the
    study's sampling seed (the confirmation's, so that the study's design checks are the
    confirmation's measurement).
    """

    command: str
    preset: str
    questions: int
    m: int
    max_new_tokens: int
    neuron_block: int
    neuron_candidates: int
    calibration_size: int
    title: str
    sizing: str
    searched: int = 0
    ablation: bool = False
    seed: int = 0

    def max_questions(self) -> int:
        """The most questions the preset's split holds half leaked and half not past the
        searched ones, so a larger ``--questions`` is refused before training.

        The demo keeps a calibration rest of at least 16 leaked questions past the evaluated
        ones up to :data:`DEMO_QUESTIONS`; past it that rest shrinks, and at this maximum none
        is left, so the neurons are located and scored on the evaluated questions (in
        sample). The report says which.
        """
        from zerogap.pipelines.contamination_config import preset

        leaked = preset(self.preset).leaked
        assert leaked is not None, f"the {self.preset} preset names its leaked count"
        return 2 * (leaked - self.searched)

    def build(self, models: Path, *, progress: ProgressCallback | None = None) -> None:
        """Build the clean and contaminated models once (resumable: finished parts are kept)
        and write the split the study evaluates beside them."""
        from zerogap.pipelines.contamination import build
        from zerogap.pipelines.contamination_config import preset

        build(preset(self.preset), models, progress=progress)
        self.write_split(models)

    def write_split(self, models: Path) -> None:
        """Write the split the study evaluates beside the build's own (``split.json``): the
        questions past the searched ones first, the searched ones right after the evaluated
        ones (the calibration rest :func:`zerogap.study.calibration.split_questions` takes)."""
        if not self.searched:
            return
        split = json.loads((models / "split.json").read_text())
        head, searched = self.questions // 2, self.searched
        evaluated = {side: ids[searched:searched + head] + ids[:searched] + ids[searched + head:]
                     for side, ids in split.items()}
        (models / EVALUATED_SPLIT).write_text(json.dumps(evaluated) + "\n")

    def study(self, models: Path, *, questions: int | None = None, m: int | None = None,
              controls: bool = False, ablation: bool = False) -> StudySpec:
        """The study on models :meth:`build` made, on the preset's task and task options.

        RailCap always runs on the clean model too (its collateral damage); ``controls``
        applies every strategy there, ``ablation`` (or :attr:`ablation`) adds the grid
        :data:`zerogap.study.spec.ABLATION` and applies its answer-protecting RailCap to the
        clean model beside RailCap, so the report splits that damage between the answer slot
        and the reasoning steps (:func:`zerogap.analysis.findings.answer_slot`).
        """
        from zerogap.analysis.findings import PROTECTED, RAILCAP
        from zerogap.pipelines.contamination_config import preset

        config = preset(self.preset)
        questions = self.questions if questions is None else questions
        ablation = ablation or self.ablation
        split = models / (EVALUATED_SPLIT if self.searched else "split.json")
        setting = SettingSpec(name=f"smollm2-{config.task}", clean=str(models / "clean"),
                              contaminated=str(models / "contaminated"), base=config.model,
                              task=config.task,
                              task_options=dict(config.task_options), split_file=str(split),
                              limit=questions)
        return StudySpec(settings=(setting,), m=self.m if m is None else m, seed=self.seed,
                         max_new_tokens=self.max_new_tokens,
                         calibration_size=min(questions, self.calibration_size),
                         neuron_block=self.neuron_block,
                         neuron_candidates=self.neuron_candidates,
                         controls=(RAILCAP, PROTECTED) if ablation else (RAILCAP,),
                         all_controls=controls, ablation=ablation, title=self.title)


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

DEMO = Showcase(command="demo", preset="laptop", questions=DEMO_QUESTIONS, m=DEMO_M,
                max_new_tokens=DEMO_MAX_NEW_TOKENS, neuron_block=DEMO_NEURON_BLOCK,
                neuron_candidates=DEMO_NEURON_CANDIDATES,
                calibration_size=DEMO_CALIBRATION_SIZE, title="zerogap demo (embedded model)",
                sizing="sized for power")

# The reproduction: the reproduce preset's models (M_cl trained to its plateau, M_co trained
# further on general data with 26% leaked items, its adapter kept every 4 exposures), at the
# checkpoint the design search chose on the first 32 leaked and 32 unleaked questions (16
# exposures, the last: docs/demo-regime.md), evaluated on the 32 leaked and 32 unleaked
# questions past them, which the preset's 64 leaked items leave, at the search's m and answer
# length (a multistep solution runs to about 100 tokens) and its confirmation's sampling seed
# (the search sampled with seed 0). The searched questions are the calibration split. Every
# strategy runs, with RailCap's ablation grid and the answer-slot row.
REPRODUCE = Showcase(command="reproduce", preset="reproduce", questions=64, m=8,
                     max_new_tokens=144, neuron_block=DEMO_NEURON_BLOCK,
                     neuron_candidates=DEMO_NEURON_CANDIDATES, calibration_size=32,
                     title="zerogap reproduce (embedded model, the paper's recipe)",
                     sizing="the fresh questions past the design search's",
                     searched=32, ablation=True, seed=1)

SHOWCASES = {showcase.command: showcase for showcase in (DEMO, REPRODUCE)}


def demo_study(models: Path, *, questions: int = DEMO_QUESTIONS, m: int = DEMO_M,
               controls: bool = False, ablation: bool = False) -> StudySpec:
    """The demo's study (:meth:`Showcase.study` of :data:`DEMO`)."""
    return DEMO.study(models, questions=questions, m=m, controls=controls, ablation=ablation)
