"""A budget no allocation can spend is stated before the study runs."""

from zerogap.study.allocation import MAX_SAMPLES, budget_notes


def test_a_budget_past_max_samples_is_stated(reduced_study):
    (note,) = budget_notes(reduced_study(budget=1e9))
    assert note.startswith(f"budget 1e+09 is at least max_samples ({MAX_SAMPLES}): every "
                           f"question of every strategy gets {MAX_SAMPLES} samples")
    (note,) = budget_notes(reduced_study(budget=40, max_samples=32))
    assert "budget 40 is at least max_samples (32)" in note
    assert budget_notes(reduced_study(budget=5)) == []
    assert budget_notes(reduced_study()) == []
