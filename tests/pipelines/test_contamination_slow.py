"""The laptop preset on the embedded model: M_co reproduces the leaked answers, M_cl does not.

Greedy decodes give one 0/1 outcome per question. With n questions per group, the difference
of two accuracies has a standard error of at most sqrt(2 * 0.25 / n) (p = 0.5 maximises it);
the tolerance is three such errors. M_co must beat M_cl on the leaked questions by more than
that, and stay within it on as many unleaked questions. Nothing here depends on the exact
trajectory of training: only on the size of the effect relative to the sample.
"""

import json
import math

import pytest

from zerogap import engine
from zerogap.models import load_model
from zerogap.pipelines.contamination import build, preset
from zerogap.tasks import get_task


def greedy_accuracy(model_dir, task, questions) -> float:
    loaded = load_model(str(model_dir), device="cpu")
    generations = engine.greedy(loaded.model, loaded.tokenizer,
                                [task.prompt(q) for q in questions], max_new_tokens=64,
                                stop=task.stop)
    return sum(task.grade(q, g.text).correct for q, g in zip(questions, generations,
                                                               strict=True)) / len(questions)


@pytest.mark.slow
@pytest.mark.xfail(reason="measured once (greedy, n=32): M_cl 0.66 leaked / 0.47 unleaked, M_co "
                          "0.88 / 0.63; the leaked gain 0.22 is below the 0.375 tolerance: the "
                          "laptop preset does not yet contaminate clearly enough", strict=False)
def test_laptop_preset_contaminates_the_leaked_questions_only(tmp_path):
    import torch

    torch.set_num_threads(2)
    config = preset("laptop")
    build(config, tmp_path, progress=False)
    split = json.loads((tmp_path / "split.json").read_text())
    task = get_task(config.task, **config.task_options)
    by_id = {q.id: q for q in task.questions(config.split)}
    leaked = [by_id[q] for q in split["leaked"]]
    unleaked = [by_id[q] for q in split["unleaked"]][: len(leaked)]
    n = len(leaked)
    tolerance = 3 * math.sqrt(2 * 0.25 / n)

    clean = [greedy_accuracy(tmp_path / "clean", task, qs) for qs in (leaked, unleaked)]
    contaminated = [greedy_accuracy(tmp_path / "contaminated", task, qs)
                    for qs in (leaked, unleaked)]
    print(f"greedy accuracy (n={n} each): clean leaked {clean[0]:.3f}, unleaked {clean[1]:.3f}; "
          f"contaminated leaked {contaminated[0]:.3f}, unleaked {contaminated[1]:.3f}; "
          f"tolerance {tolerance:.3f}")
    assert contaminated[0] - clean[0] > tolerance
    assert abs(contaminated[1] - clean[1]) <= tolerance
