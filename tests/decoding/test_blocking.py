"""LNE-blocking core: entropy, LNE, blocking counts and the argmax ban, on hand-built numbers."""

import math

import pytest
import torch

from zerogap.decoding.blocking import (
    LNEBlockingHook,
    block_argmax,
    blocking_counts,
    entropy,
    mean_entropy,
)
from zerogap.decoding.settings import LNEBlockingConfig
from zerogap.errors import StoreError
from zerogap.store import GreedyRow
from zerogap.strategies import LNEBlockingStrategy


def test_entropy_matches_closed_forms():
    peaked = torch.tensor([100.0, 0.0, 0.0])
    two = torch.tensor([[0.0, 0.0, -math.inf], [5.0, 5.0, 5.0]])
    assert float(entropy(peaked)) == pytest.approx(0.0, abs=1e-6)
    assert entropy(two).tolist() == pytest.approx([math.log(2), math.log(3)])


def row(q, entropies):
    return GreedyRow(q, [1] * len(entropies), "", "stop", None, False, entropies)


def test_beta_from_a_calibration_split_spreads_the_counts():
    """beta = a quantile of the calibration decodes' LNE (0.9 by default; 1 the largest, 0.5 the
    median, the sensitivity rows): the calibration's most uncertain questions map to count 0
    and a certain one to T_task, where the published beta = 2 gives one count to LNEs a tenth
    of it."""
    calibration = [row("c0", [0.02, 0.06]), row("c1", [0.2, 0.0]), row("c2", [0.01, 0.01])]
    # LNEs 0.04, 0.1, 0.01: the 0.9 quantile interpolates 0.04 + 0.8 * (0.1 - 0.04)
    assert LNEBlockingStrategy.calibration_settings(calibration, {}) == {"beta": 0.088}
    assert LNEBlockingStrategy.calibration_settings(calibration, {"beta_quantile": 0.5}) == {
        "beta": 0.04}
    settings = LNEBlockingStrategy.calibration_settings(calibration, {"beta_quantile": 1})
    assert settings == {"beta": 0.1}
    lne = torch.tensor([0.0, 0.03, 0.06, 0.1, 0.15])
    assert blocking_counts(lne, t_task=4, **settings).tolist() == [4, 2, 1, 0, 0]
    assert blocking_counts(lne, t_task=4).tolist() == [4, 3, 3, 3, 3]
    # every decode certain: no scale to read, the default stands
    assert LNEBlockingStrategy.calibration_settings([row("c0", [0.0])], {}) == {}
    with pytest.raises(StoreError, match="c9"):
        LNEBlockingStrategy.calibration_settings([row("c0", [0.1]), GreedyRow(
            "c9", [1], "", "stop", None, False, None)], {})


def test_beta_quantile_does_not_follow_one_outlier_or_the_calibration_size():
    """The largest LNE follows the one most uncertain decode and grows with the number of
    decodes; the 0.9 quantile estimates a fixed point of the LNE distribution."""
    rng = torch.Generator().manual_seed(0)

    def beta(n, quantile, outlier=None):
        lne = (0.05 + 0.02 * torch.randn(n, generator=rng, dtype=torch.float64)).abs().tolist()
        if outlier is not None:
            lne[0] = outlier
        rows = [row(f"c{i}", [x]) for i, x in enumerate(lne)]
        return LNEBlockingStrategy.calibration_settings(rows, {"beta_quantile": quantile})["beta"]

    assert beta(32, 1, outlier=1.0) == 1.0 and beta(32, 0.9, outlier=1.0) < 0.1
    small, large = (sum(beta(n, 1) for _ in range(20)) / 20 for n in (32, 512))
    assert large > small + 0.01  # the maximum grows with the calibration's size
    small, large = (sum(beta(n, 0.9) for _ in range(20)) / 20 for n in (32, 512))
    assert abs(large - small) < 0.005  # the quantile does not


def test_mean_entropy_and_empty_decode():
    assert mean_entropy([[1.0, 2.0, 3.0]]).tolist() == [2.0]
    with pytest.raises(ValueError, match="question 1"):
        mean_entropy([[1.0], []])


def test_blocking_counts_floor_and_clip():
    lne = torch.tensor([0.0, 0.1, 0.6, 1.0, 2.0, 3.0])
    # 7 * (1 - lne/2) = 7, 6.65, 4.9, 3.5, 0, clipped below at 0.
    assert blocking_counts(lne).tolist() == [7, 6, 4, 3, 0, 0]
    assert blocking_counts(lne, t_task=4).tolist() == [4, 3, 2, 2, 0, 0]
    assert blocking_counts(torch.tensor([-1.0]), t_task=7).tolist() == [7]  # clipped above at 1


def test_block_argmax_bans_only_inside_first_n_positions():
    logits = torch.tensor([[0.0, 2.0, 1.0], [0.0, 2.0, 1.0], [3.0, 3.0, 1.0]])
    out, blocked = block_argmax(logits, torch.tensor([2, 3, 0]), torch.tensor([3, 3, 1]))
    assert blocked.tolist() == [True, False, True]
    assert out.tolist() == [[0.0, -math.inf, 1.0], [0.0, 2.0, 1.0], [-math.inf, 3.0, 1.0]]


def test_hook_maps_rows_to_their_question_counts():
    hook = LNEBlockingHook(torch.tensor([0, 2]))
    logits = torch.tensor([[0.0, 5.0], [0.0, 5.0], [0.0, 5.0]])
    out = hook(logits, torch.zeros(3, 1, dtype=torch.long), torch.tensor([1, 1, 2]),
               torch.tensor([0, 1, 1]), torch.tensor([0, 0, 1]))
    assert out[:, 1].tolist() == [5.0, -math.inf, 5.0]


def test_hook_traces_without_graph_breaks():
    hook = LNEBlockingHook(torch.tensor([3, 1]))
    torch._dynamo.reset()
    report = torch._dynamo.explain(hook)(
        torch.randn(2, 5), torch.zeros(2, 1, dtype=torch.long), torch.tensor([0, 1]),
        torch.tensor([0, 1]), torch.tensor([0, 0]),
    )
    assert report.graph_count == 1 and report.break_reasons == []


@pytest.mark.parametrize(
    "kwargs", [{"t_task": -1}, {"t_task": 2.5}, {"beta": 0}, {"beta": float("inf")}]
)
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        LNEBlockingConfig(**kwargs)
