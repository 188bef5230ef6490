"""Student's t (zerogap.uncertainty.student_t) against its closed forms and the normal limit."""

import math
from statistics import NormalDist

import pytest

from zerogap.uncertainty.student_t import t_cdf, t_quantile


@pytest.mark.parametrize("x", [-30.0, -2.5, -0.3, 0.0, 0.7, 4.0, 100.0])
def test_cdf_matches_the_closed_forms_at_one_and_two_degrees_of_freedom(x):
    assert t_cdf(x, 1) == pytest.approx(0.5 + math.atan(x) / math.pi, abs=1e-10)
    assert t_cdf(x, 2) == pytest.approx(0.5 + x / (2 * math.sqrt(2 + x * x)), abs=1e-10)


@pytest.mark.parametrize("df", [1, 3, 7.5, 40, 400])
def test_cdf_is_symmetric_and_the_quantile_inverts_it(df):
    for x in (0.1, 1.0, 2.5):
        assert t_cdf(-x, df) == pytest.approx(1 - t_cdf(x, df), abs=1e-12)
    for prob in (0.01, 0.2, 0.5, 0.95, 0.999):
        assert t_cdf(t_quantile(prob, df), df) == pytest.approx(prob, abs=1e-9)


def test_heavier_tails_than_the_normal_which_they_approach():
    z = NormalDist().inv_cdf(0.975)
    quantiles = [t_quantile(0.975, df) for df in (2, 5, 30, 10_000)]
    assert quantiles == sorted(quantiles, reverse=True)
    assert all(q > z for q in quantiles)
    assert quantiles[-1] == pytest.approx(z, abs=1e-3)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: t_cdf(1.0, 0.5), "degrees of freedom"),
    (lambda: t_quantile(1.0, 5), "strictly between 0 and 1"),
])
def test_impossible_arguments_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()
