"""The design criteria of a study setting (:mod:`zerogap.analysis.design`) against their
definitions, on arrays whose every statistic is known by construction."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerogap.analysis.design import (
    KEYS,
    design_criteria,
    lcs_length,
    ngram_hits,
    rouge_l,
    rouge_words,
    sign_test,
    trajectory_stats,
)


def _by_key(criteria):
    return {c.key: c for c in criteria}


def _brute_lcs(a, b) -> int:
    """The longest common subsequence by trying every subsequence of the shorter one."""
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    for size in range(len(short), 0, -1):
        for chosen in itertools.combinations(short, size):
            it = iter(long_)
            if all(x in it for x in chosen):  # `in` on an iterator consumes it: a subsequence
                return size
    return 0


@given(st.lists(st.integers(0, 3), max_size=7), st.lists(st.integers(0, 3), max_size=7))
def test_lcs_is_the_longest_common_subsequence(a, b):
    assert lcs_length(a, b) == _brute_lcs(a, b) == lcs_length(b, a)


@given(st.lists(st.integers(0, 5), max_size=12), st.lists(st.integers(0, 5), max_size=12))
def test_rouge_l_is_a_symmetric_f_measure_in_0_1(a, b):
    score = rouge_l(a, b)
    assert 0 <= score <= 1 and score == pytest.approx(rouge_l(b, a))
    assert (score == 1) == (a == b)


def test_rouge_l_of_a_prefix_and_of_unrelated_texts():
    assert rouge_l([1, 2, 3, 4, 5, 6], [1, 2, 3]) == pytest.approx(2 * 3 / 9)  # P 1/2, R 1
    assert rouge_l([1, 2, 3], [4, 5, 6]) == 0 and rouge_l([], [1]) == 0 and rouge_l([], []) == 1
    # a reordering keeps the longest common run in order, not the bag of tokens
    assert rouge_l([1, 2, 3, 4], [3, 4, 1, 2]) == pytest.approx(0.5)


def test_ngram_hits_count_the_windows_found_in_the_trajectory():
    trajectory = [5, 6, 7, 8, 9]
    assert ngram_hits(trajectory, trajectory, n=4) == (2, 2)  # every window of itself
    assert ngram_hits([1, 2, 3, 4, 5], trajectory, n=4) == (0, 2)
    # a sample that leaves the trajectory and falls back onto it: windows on either side hit
    assert ngram_hits([5, 6, 7, 8, 0, 6, 7, 8, 9], trajectory, n=4) == (2, 6)
    assert ngram_hits([5, 6, 7], trajectory, n=4) == (0, 0)  # no step with 4 tokens behind it
    with pytest.raises(ValueError, match="n must be"):
        ngram_hits([1], [1], n=0)


def test_rouge_words_are_the_standard_rouge_tokens():
    assert rouge_words("Tom's 3 * 4 = 12 pens.") == ["tom", "s", "3", "4", "12", "pens"]
    assert rouge_words("  ") == []


def test_trajectory_stats_per_question():
    """ROUGE-L on the texts' words, the trigger rate on the tokenizer's tokens (here one
    character each)."""
    decode = "ab cd ef"
    stats = trajectory_stats([[decode, "AB CD EF"], ["xy zw"], []], [decode] * 3, list, n=3)
    assert stats.rouge[:2].tolist() == [1.0, 0.0] and math.isnan(stats.rouge[2])
    # 6 windows of 3 characters each: all in the decode, none of the upper-case ones
    assert stats.hits.tolist() == [6, 0, 0] and stats.steps.tolist() == [12, 3, 0]
    with pytest.raises(ValueError, match="greedy decodes"):
        trajectory_stats([["a"]], [], list)


def _stats(copies: list[bool], length: int = 12):
    """Per question, 4 samples that are its greedy decode (True) or share no word with it."""
    decode = " ".join(f"w{i}" for i in range(length))
    other = " ".join(f"v{i}" for i in range(length))
    return trajectory_stats([[decode if same else other] * 4 for same in copies],
                            [decode] * len(copies), str.split)


def test_design_criteria_follow_their_definitions():
    # 6 questions, 3 leaked: clean solves 2 strictly between 0 and 1, 2 never
    clean = [0.0, 0.5, 1.0, 0.0, 0.25, 1.0]
    leaked = [True, True, True, False, False, False]
    co = [1.0, 1.0, 1.0, 0.0, 0.25, 1.0]  # up on 2 leaked, unchanged on unleaked
    collapsed = _stats([True, True, True, False, False, False])  # M_co: memory where leaked
    dispersed = _stats([False] * 6)  # M_cl: never its own greedy text
    got = _by_key(design_criteria(clean, [0.0, 0.25, 1.0, 0.25, 0.5, 0.75], co, leaked,
                                  co=collapsed, cl=dispersed))
    assert tuple(got) == KEYS
    assert got["spread"].value == pytest.approx(2 / 6) and not got["spread"].met
    assert got["no floor"].value == pytest.approx(2 / 6) and got["no floor"].met
    mean = np.mean(clean)  # 0.458: above the paper's range
    assert got["clean mean (min)"].value == got["clean mean (max)"].value == pytest.approx(mean)
    assert got["clean mean (min)"].met and not got["clean mean (max)"].met
    assert got["contamination"].value == pytest.approx(sign_test(2, 0)) == 0.25
    assert not got["contamination"].met  # two wins cannot reach p <= 0.01
    assert got["no spill-over"].value == 0 and got["no spill-over"].met
    assert got["collapse (ROUGE-L, leaked)"].value == 1 and got["collapse (ROUGE-L, leaked)"].met
    assert got["dispersion (ROUGE-L, unleaked)"].value == 0
    assert got["dispersion (ROUGE-L, unleaked)"].met
    assert got["trigger (M_co, leaked)"].value == 1 and got["trigger (M_co, leaked)"].met
    assert got["trigger (M_co, unleaked)"].value == 0 and got["trigger (M_cl)"].value == 0
    assert got["trigger (M_co, unleaked)"].met and got["trigger (M_cl)"].met
    # A-PPG(identity) = mean |r_co - r_cl| = (1 + 0.5) / 6 = 0.25, below the clean mean
    below = got["clean mean below A-PPG"]
    assert below.threshold == pytest.approx(0.25) and below.value == pytest.approx(mean)
    assert not below.met
    # M_co far above M_cl on every unleaked question: outside any band the clean batches give
    shifted = _by_key(design_criteria(clean, clean, [1.0] * 6, leaked, co=collapsed,
                                      cl=dispersed))
    assert shifted["no spill-over"].value > 0 and not shifted["no spill-over"].met
    # samples that are their greedy decodes everywhere: no dispersion, triggers everywhere
    verbatim = _by_key(design_criteria(clean, clean, co, leaked, co=_stats([True] * 6),
                                       cl=_stats([True] * 6)))
    for key in ("dispersion (ROUGE-L, unleaked)", "trigger (M_co, unleaked)", "trigger (M_cl)"):
        assert verbatim[key].value == 1 and not verbatim[key].met
    with pytest.raises(ValueError, match="equal-length"):
        design_criteria(clean, clean[:5], co, leaked, co=collapsed, cl=dispersed)


def test_the_clean_mean_criteria_bound_it_from_both_sides():
    leaked = [True, False] * 4
    stats = _stats([False] * 8)
    for clean, low_met, high_met in (([0.0] * 8, False, True), ([0.25] * 8, True, True),
                                     ([0.5] * 8, True, False)):
        got = _by_key(design_criteria(clean, clean, [1.0, *clean[1:]], leaked, co=stats,
                                      cl=stats))
        assert got["clean mean (min)"].met == low_met and got["clean mean (max)"].met == high_met


def test_sign_test_is_the_binomial_tail():
    assert sign_test(7, 0) == 2.0**-7 and sign_test(0, 3) == 1.0
    assert sign_test(5, 5) == pytest.approx(sum(math.comb(10, k) for k in range(5, 11)) / 1024)
