"""The design criteria of a study setting (:mod:`zerogap.analysis.design`) against their
definitions, on arrays whose every statistic is known by construction."""

import math

import pytest

from zerogap.analysis.design import design_criteria, sign_test


def _by_key(criteria):
    return {c.key: c for c in criteria}


def test_design_criteria_follow_their_definitions():
    # 6 questions, 3 leaked: clean solves 2 strictly between 0 and 1, 2 never
    clean = [0.0, 0.5, 1.0, 0.0, 0.25, 1.0]
    leaked = [True, True, True, False, False, False]
    co = [1.0, 1.0, 1.0, 0.0, 0.25, 1.0]  # up on 2 leaked, unchanged on unleaked
    copies, samples = [4, 4, 3, 1, 0, 0], [4, 4, 4, 4, 4, 4]
    got = _by_key(design_criteria(clean, [0.0, 0.25, 1.0, 0.25, 0.5, 0.75], co, copies, samples,
                                  leaked))
    assert got["spread"].value == pytest.approx(2 / 6) and not got["spread"].met
    assert got["no floor"].value == pytest.approx(2 / 6) and got["no floor"].met
    assert got["collapse (leaked)"].value == pytest.approx(11 / 12) and got["collapse (leaked)"].met
    assert got["dispersion"].value == pytest.approx(1 / 12) and got["dispersion"].met
    assert got["contamination"].value == pytest.approx(sign_test(2, 0)) == 0.25
    assert not got["contamination"].met  # two wins cannot reach p <= 0.01
    assert got["no spill-over"].value == 0 and got["no spill-over"].met
    # M_co far above M_cl on every unleaked question: outside any band the clean batches give
    shifted = _by_key(design_criteria(clean, clean, [1.0] * 6, copies, samples, leaked))
    assert shifted["no spill-over"].value > 0 and not shifted["no spill-over"].met
    with pytest.raises(ValueError, match="equal-length"):
        design_criteria(clean, clean[:5], co, copies, samples, leaked)


def test_sign_test_is_the_binomial_tail():
    assert sign_test(7, 0) == 2.0**-7 and sign_test(0, 3) == 1.0
    assert sign_test(5, 5) == pytest.approx(sum(math.comb(10, k) for k in range(5, 11)) / 1024)
