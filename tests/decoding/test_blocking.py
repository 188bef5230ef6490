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


def test_beta_from_a_calibration_split_spreads_the_counts():
    """beta = the calibration decodes' largest LNE: the calibration's highest-entropy question
    maps to count 0 and a certain one to T_task, where the published beta = 2 gives one count
    to LNEs a tenth of it."""
    def row(q, entropies):
        return GreedyRow(q, [1] * len(entropies), "", "stop", None, False, entropies)

    calibration = [row("c0", [0.02, 0.06]), row("c1", [0.2, 0.0]), row("c2", [0.01, 0.01])]
    settings = LNEBlockingStrategy.calibration_settings(calibration)
    assert settings == {"beta": 0.1}
    lne = torch.tensor([0.0, 0.03, 0.06, 0.1, 0.15])
    assert blocking_counts(lne, t_task=4, **settings).tolist() == [4, 2, 1, 0, 0]
    assert blocking_counts(lne, t_task=4).tolist() == [4, 3, 3, 3, 3]
    # every decode certain: no scale to read, the default stands
    assert LNEBlockingStrategy.calibration_settings([row("c0", [0.0])]) == {}
    with pytest.raises(StoreError, match="c9"):
        LNEBlockingStrategy.calibration_settings([row("c0", [0.1]), GreedyRow(
            "c9", [1], "", "stop", None, False, None)])


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
