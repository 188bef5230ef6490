"""The laptop preset on the embedded model: M_co reproduces the leaked answers, M_cl does not.

The criterion was fixed from the sample size before the preset was resized and measured
(arXiv 2608.07341 §5.1: a contaminated model has memorised the leaked items, nothing more).
Greedy decodes give one 0/1 outcome per question and model.

* Leaked questions (all n of them), paired by question: of the questions the two models
  disagree on, b are solved by M_co only and c by M_cl only. Without an effect of the leak each
  of those b + c questions is a fair coin, b ~ Binomial(b + c, 1/2); the exact one-sided sign
  (McNemar) test must reject that at alpha = 0.01: P(X >= b) <= 0.01.
* Unleaked questions (the first n of them): the two accuracies may differ by at most three
  standard errors of a difference of two accuracies on n questions each, 3 sqrt(2 x 0.25 / n)
  (p = 0.5 gives the largest error): 0.265 at the preset's n = 64.

Nothing here depends on the exact trajectory of training, only on the size of the effect
relative to the sample.
"""

import json
import math

import pytest

from zerogap import engine
from zerogap.models import load_model
from zerogap.pipelines.contamination import build
from zerogap.pipelines.contamination_config import preset
from zerogap.tasks import get_task

ALPHA = 0.01


def sign_test(b: int, c: int) -> float:
    """One-sided exact p-value of b successes among b + c fair coin flips: P(X >= b)."""
    n = b + c
    return sum(math.comb(n, k) for k in range(b, n + 1)) / 2**n


def test_sign_test_is_the_binomial_tail():
    assert sign_test(7, 0) == 1 / 128
    assert sign_test(12, 1) == 14 / 2**13
    assert sign_test(0, 5) == 1.0
    assert sign_test(3, 3) == pytest.approx(0.65625)


def greedy_outcomes(model_dir, task, questions) -> list[bool]:
    loaded = load_model(str(model_dir), device="cpu")
    generations = engine.greedy(loaded.model, loaded.tokenizer,
                                [task.prompt(q) for q in questions], max_new_tokens=64,
                                stop=task.stop)
    return [task.grade(q, g.text).correct for q, g in zip(questions, generations, strict=True)]


@pytest.mark.slow
def test_laptop_preset_contaminates_the_leaked_questions_only(tmp_path):
    config = preset("laptop")
    build(config, tmp_path)
    split = json.loads((tmp_path / "split.json").read_text())
    task = get_task(config.task, **config.task_options)
    by_id = {q.id: q for q in task.questions(config.split)}
    leaked = [by_id[q] for q in split["leaked"]]
    unleaked = [by_id[q] for q in split["unleaked"]][: len(leaked)]
    n = len(leaked)
    tolerance = 3 * math.sqrt(2 * 0.25 / n)

    outcomes = {name: [greedy_outcomes(tmp_path / name, task, qs) for qs in (leaked, unleaked)]
                for name in ("clean", "contaminated")}
    (cl_leaked, cl_unleaked), (co_leaked, co_unleaked) = outcomes.values()
    b = sum(co and not cl for cl, co in zip(cl_leaked, co_leaked, strict=True))
    c = sum(cl and not co for cl, co in zip(cl_leaked, co_leaked, strict=True))
    p_value = sign_test(b, c)
    unleaked_gap = (sum(co_unleaked) - sum(cl_unleaked)) / n
    print(f"greedy accuracy (n={n} each): clean leaked {sum(cl_leaked) / n:.3f}, unleaked "
          f"{sum(cl_unleaked) / n:.3f}; contaminated leaked {sum(co_leaked) / n:.3f}, unleaked "
          f"{sum(co_unleaked) / n:.3f}; leaked b={b} c={c} sign-test p={p_value:.2g}; "
          f"unleaked gap {unleaked_gap:+.3f} (tolerance {tolerance:.3f})")
    assert p_value <= ALPHA, f"leaked: b={b}, c={c}, p={p_value:.3g} > {ALPHA}"
    assert abs(unleaked_gap) <= tolerance
