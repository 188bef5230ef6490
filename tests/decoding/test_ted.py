"""TED's filter and readout on hand-built token sequences (docs/baselines.md §1)."""

import pytest

from zerogap.decoding.ted import TEDConfig, ted_keep, ted_readout


def test_distance_threshold_is_absolute_and_inclusive():
    g = [1, 2, 3, 4, 5, 6]
    samples = [
        [1, 2, 3, 4, 5, 6],  # distance 0
        [1, 2, 9, 4, 9, 6],  # 2 substitutions: dropped at tau=2
        [9, 2, 9, 4, 9, 6],  # 3: kept
        [2, 3, 4, 5, 6, 7],  # shift: 1 deletion + 1 insertion = 2: dropped
    ]
    assert ted_keep(g, samples, tau=2) == [False, False, True, False]
    assert ted_keep(g, samples, tau=0) == [False, True, True, True]


def test_sample_is_truncated_to_greedy_prefix_length():
    g = list(range(150))
    # Same first 100 tokens as greedy, different tail: a near-copy over the compared window.
    assert ted_keep(g, [list(range(100)) + [7] * 80], max_tokens=100) == [False]
    # A greedy-prefix continuation that is longer than the greedy output is truncated too.
    assert ted_keep([1, 2, 3], [[1, 2, 3, 4, 5, 6, 7]]) == [False]
    # A short sample is compared as is: 3 deletions > tau.
    assert ted_keep([1, 2, 3, 4, 5], [[1, 2]]) == [True]


def test_exact_duplicates_of_kept_samples_are_dropped_by_text():
    g = [1, 1, 1, 1]
    samples = [[5, 5, 5, 5], [5, 5, 5, 5], [6, 6, 6, 6]]
    assert ted_keep(g, samples, ["a", "a", "b"]) == [True, False, True]
    # Same tokens, different texts (e.g. whitespace): not duplicates.
    assert ted_keep(g, samples, ["a", "a ", "b"]) == [True, True, True]
    assert ted_keep(g, samples, dedup=False) == [True, True, True]


def test_readout_counts_kept_only_and_zero_when_empty():
    assert ted_readout([True, True, False, True], [True, False, True, True]) == pytest.approx(2 / 3)
    assert ted_readout([False, False], [True, True]) == 0.0
    with pytest.raises(ValueError, match="2 keep flags but 1 grades"):
        ted_readout([True, False], [True])


@pytest.mark.parametrize("kwargs", [{"tau": -1}, {"max_tokens": 1.5}, {"dedup": "yes"}])
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        TEDConfig(**kwargs)
