"""Exact behaviour of the RailCap core and its engine hook on hand-built logits and trajectories."""

import math

import pytest
import torch

from zerogap.decoding.railcap import (
    RailCapConfig,
    RailCapHook,
    ends_with_marker,
    pad_markers,
    pad_trajectories,
    railcap_apply,
    recent_tokens,
)
from zerogap.decoding.specs import RailCapEdit

V = 8


def logits_row(*values):
    return torch.tensor([list(values)], dtype=torch.float32)


def apply(logits, recent, trajectories, mode="cap", rows=None):
    traj, traj_len = pad_trajectories(trajectories)
    return railcap_apply(
        logits, torch.tensor(recent), traj, traj_len, mode=mode, rows=rows
    )


def test_match_at_start_caps_successor_to_runner_up():
    # trajectory 1 2 | 3 ...: last two tokens (1, 2) are the first window, successor 3.
    logits = logits_row(0, 1, 2, 9, 4, 5, 6, 7)
    out, on, hit = apply(logits, [[1, 2]], [[1, 2, 3, 4, 5]])
    assert out.tolist() == [[0, 1, 2, 7, 4, 5, 6, 7]]
    assert on.tolist() == [True] and hit.tolist() == [True]


def test_window_at_end_without_successor_does_not_match():
    # (4, 5) is the trajectory's last window: it has no successor, so nothing to cap.
    logits = logits_row(0, 1, 2, 3, 4, 5, 6, 7)
    out, on, hit = apply(logits.clone(), [[4, 5]], [[1, 2, 3, 4, 5]])
    assert torch.equal(out, logits) and on.tolist() == [False] and hit.tolist() == [False]
    # (3, 4) is the last window that has one: its successor 5 is below v2 = 6, so the cap leaves
    # it; the row is on the trajectory but not intervened on.
    out, on, hit = apply(logits.clone(), [[3, 4]], [[1, 2, 3, 4, 5]])
    assert torch.equal(out, logits) and on.tolist() == [True] and hit.tolist() == [False]


def test_match_at_end_caps_last_successor():
    logits = logits_row(0, 1, 2, 3, 4, 9, 6, 7)
    out, _, hit = apply(logits, [[3, 4]], [[1, 2, 3, 4, 5]])
    assert out[0, 5] == 7 and hit.tolist() == [True]


def test_repeated_ngram_caps_every_successor():
    # (1, 2) occurs twice, followed by 3 and by 6: both are capped.
    logits = logits_row(0, 1, 2, 9, 4, 5, 8, 7)
    out, _, _ = apply(logits, [[1, 2]], [[1, 2, 3, 0, 1, 2, 6]])
    # v2 of the original logits is 8; 3 goes from 9 to 8, 6 stays at 8 (min(8, 8)).
    assert out.tolist() == [[0, 1, 2, 8, 4, 5, 8, 7]]
    out, _, _ = apply(logits_row(0, 1, 2, 9, 4, 5, 8, 7), [[1, 2]], [[1, 2, 3, 0, 1, 2, 6]], "ban")
    assert out[0, 3] == -math.inf and out[0, 6] == -math.inf
    assert out[0, [0, 1, 2, 4, 5, 7]].tolist() == [0, 1, 2, 4, 5, 7]


def test_same_successor_under_two_windows_is_capped_once():
    logits = logits_row(0, 1, 2, 9, 4, 5, 6, 7)
    out, _, _ = apply(logits, [[1, 2]], [[1, 2, 3, 1, 2, 3]])
    assert out.tolist() == [[0, 1, 2, 7, 4, 5, 6, 7]]


def test_tied_maximum_leaves_cap_without_effect():
    # Successor 3 ties with token 7 for the max: v2 = 9 too, so the cap changes nothing.
    logits = logits_row(0, 1, 2, 9, 4, 5, 6, 9)
    out, on, hit = apply(logits.clone(), [[1, 2]], [[1, 2, 3]])
    assert torch.equal(out, logits) and on.tolist() == [True] and hit.tolist() == [False]
    # Ban still removes it.
    out, _, hit = apply(logits.clone(), [[1, 2]], [[1, 2, 3]], "ban")
    assert out[0, 3] == -math.inf and hit.tolist() == [True]


def test_cap_ties_successor_with_runner_up():
    logits = logits_row(0, 1, 2, 9, 4, 5, 6, 8)
    out, _, _ = apply(logits, [[1, 2]], [[1, 2, 3]])
    assert out[0, 3] == out[0, 7] == 8


def test_n_longer_than_trajectory_is_a_no_op():
    logits = logits_row(0, 1, 2, 3, 4, 5, 6, 7)
    out, on, hit = apply(logits.clone(), [[1, 2, 3, 4]], [[1, 2, 3]])
    assert torch.equal(out, logits) and not on.any() and not hit.any()
    # Trajectory exactly n long: one window, no successor.
    out, on, _ = apply(logits.clone(), [[1, 2, 3]], [[1, 2, 3]])
    assert torch.equal(out, logits) and not on.any()


def test_rows_without_match_untouched_in_a_mixed_batch():
    torch.manual_seed(0)
    logits = torch.randn(4, V)
    logits[:, 5] = 10.0  # successor 5 is every row's argmax
    before = logits.clone()
    recent = [[1, 2], [2, 1], [-1, -1], [1, 2]]
    # row 3 uses question 1, whose trajectory lacks (1, 2).
    out, on, hit = apply(logits, recent, [[1, 2, 5], [2, 2, 5]], rows=torch.tensor([0, 0, 0, 1]))
    assert on.tolist() == [True, False, False, False]
    assert hit.tolist() == [True, False, False, False]
    assert torch.equal(out[1:], before[1:])
    assert out[0, 5] == before[0].topk(2).values[1]


@pytest.mark.parametrize("mode", ["cap", "ban"])
def test_sparse_second_largest_changes_nothing(mode):
    # sparse=True computes v2 only for matching rows; the result must equal the dense path's,
    # ties at the maximum included.
    gen = torch.Generator().manual_seed(3)
    logits = torch.randint(0, 4, (12, V), generator=gen).float()  # many tied logits
    trajectories = [torch.randint(0, 3, (6,), generator=gen).tolist() for _ in range(3)]
    recent = torch.randint(0, 3, (12, 2), generator=gen)
    rows = torch.arange(12) % 3
    traj, traj_len = pad_trajectories(trajectories)
    dense = railcap_apply(logits.clone(), recent, traj, traj_len, mode=mode, rows=rows)
    sparse = railcap_apply(logits.clone(), recent, traj, traj_len, mode=mode, rows=rows,
                           sparse=True)
    assert 0 < int(dense[1].sum()) < 12  # some rows match, some do not
    for a, b in zip(dense, sparse, strict=True):
        assert torch.equal(a, b)


def test_short_trajectory_in_batch_with_long_one():
    # Question 1's trajectory is padded with -1; a row whose recent tokens are -1 never matches it.
    logits = torch.zeros(2, V)
    logits[:, 0] = 5.0
    out, on, _ = apply(logits, [[-1, -1], [3, 4]], [[1, 2, 3, 4, 0], [3, 4, 0]])
    assert on.tolist() == [False, True] and out[1, 0] == 0.0 and out[0, 0] == 5.0


def test_recent_tokens_gathers_last_n_and_marks_short_rows():
    tokens = torch.tensor([[5, 6, 7, 8], [9, 1, -1, -1], [-1, -1, -1, -1]])
    out = recent_tokens(tokens, torch.tensor([4, 2, 0]), 3)
    assert out.tolist() == [[6, 7, 8], [-1, -1, -1], [-1, -1, -1]]
    assert recent_tokens(torch.zeros(2, 0, dtype=torch.long), torch.tensor([0, 0]), 2).tolist() == [
        [-1, -1],
        [-1, -1],
    ]


def test_hook_counts_steps_on_trajectory_and_interventions():
    hook = RailCapHook([[1, 2, 3, 4], [7, 7, 7]], RailCapConfig(n=2), samples_per_question=2)
    logits = torch.zeros(3, V)
    logits[:, 3] = 5.0
    logits[:, 7] = 4.0
    tokens = torch.tensor([[1, 2], [7, 7], [0, 1]])
    question, sample = torch.tensor([0, 1, 0]), torch.tensor([1, 0, 0])
    for _ in range(2):
        hook(logits.clone(), tokens, torch.tensor([2, 2, 2]), question, sample)
    assert hook.sample_stats(0, 1) == {"interventions": 2, "steps_on_trajectory": 2}
    # Question 1: (7, 7) -> 7 is on the trajectory but 7 is only the runner-up.
    assert hook.sample_stats(1, 0) == {"interventions": 0, "steps_on_trajectory": 2}
    assert hook.sample_stats(0, 0) == {"interventions": 0, "steps_on_trajectory": 0}


def test_core_traces_without_graph_breaks():
    # A graph break is where dynamo would fall back to Python, e.g. a host sync (.item()).
    traj, traj_len = pad_trajectories([[1, 2, 3, 4, 5], [2, 3]])
    args = (torch.randn(3, V), torch.tensor([[1, 2], [2, 3], [0, 0]]), traj, traj_len)
    rows = torch.tensor([0, 1, 0])
    for mode in ("cap", "ban"):
        torch._dynamo.reset()
        report = torch._dynamo.explain(lambda *a, m=mode: railcap_apply(*a, mode=m, rows=rows))(
            *args
        )
        assert report.graph_count == 1 and report.break_reasons == []

    for config, markers in ((RailCapConfig(n=2), ()),
                            (RailCapConfig(n=2, protect="answer"), [[2, 3], [4]])):
        hook = RailCapHook([[1, 2, 3, 4, 5], [2, 3]], config, samples_per_question=2,
                           answer_markers=markers)
        torch._dynamo.reset()
        report = torch._dynamo.explain(hook)(
            torch.randn(3, V), torch.tensor([[1, 2, -1], [2, 3, 1], [0, 0, 0]]),
            torch.tensor([2, 2, 3]), rows, torch.tensor([0, 1, 1]),
        )
        assert report.graph_count == 1 and report.break_reasons == []

    def syncing(x):
        return railcap_apply(*x, rows=rows)[0].sum().item()

    torch._dynamo.reset()
    assert torch._dynamo.explain(syncing)(args).break_reasons  # the check can fail


def test_ends_with_marker_sees_any_form_ending_at_the_last_token():
    markers = pad_markers([[5, 6, 7], [6, 7]])  # a form and its shorter variant
    tokens = torch.tensor([[1, 5, 6, 7, 2],    # the long form, then one more token
                           [6, 7, 0, 0, 0],    # the short one, alone at the start
                           [1, 6, 2, 7, 0],    # its tokens, not in a row
                           [1, 2, 6, 7, 0],    # past the row's length: ignored
                           [1, 2, 3, 6, 7],    # at the end of a full row
                           [1, 5, 6, 7, 0]])   # the long form at the end
    lengths = torch.tensor([5, 2, 4, 3, 5, 4])
    assert ends_with_marker(tokens, lengths, markers).tolist() == [
        False, True, False, False, True, True]
    assert ends_with_marker(tokens[:, :0], torch.zeros(6, dtype=torch.long), markers).tolist() \
        == [False] * 6
    with pytest.raises(ValueError, match="non-empty"):
        pad_markers([[1], []])


def test_protected_rows_are_on_the_trajectory_but_never_capped():
    logits = torch.zeros(2, V)
    logits[:, 3] = 9.0  # successor 3 is the argmax of both rows
    traj, traj_len = pad_trajectories([[1, 2, 3]])
    out, on, hit = railcap_apply(logits, torch.tensor([[1, 2], [1, 2]]), traj, traj_len,
                                 rows=torch.tensor([0, 0]), protected=torch.tensor([True, False]))
    assert on.tolist() == [True, True] and hit.tolist() == [False, True]
    assert out[0, 3] == 9.0 and out[1, 3] == 0.0


def test_hook_protecting_the_answer_caps_before_the_marker_and_never_after():
    # Trajectory "1 2 3 8 9 3 4": the marker (8, 9) sits inside it; every window's successor is
    # the argmax, so an unprotected row on the trajectory is always capped.
    trajectory = [1, 2, 3, 8, 9, 3, 4]
    protect = RailCapHook([trajectory], RailCapConfig(n=2, protect="answer"),
                          samples_per_question=1, answer_markers=[[8, 9]])
    plain = RailCapHook([trajectory], RailCapConfig(n=2), samples_per_question=1)
    for t in range(2, len(trajectory)):
        tokens = torch.tensor([trajectory[:t]])
        logits = torch.zeros(1, 10)
        logits[0, trajectory[t]] = 5.0
        args = (tokens, torch.tensor([t]), torch.tensor([0]), torch.tensor([0]))
        capped = plain(logits.clone(), *args)[0, trajectory[t]] < 5.0
        kept = protect(logits.clone(), *args)[0, trajectory[t]] == 5.0
        assert capped  # Algorithm 1 caps at every step on the trajectory, answer slot included
        assert kept == (t >= 5), t  # protected from the token right after the marker on
    assert protect.sample_stats(0, 0) == {"interventions": 3, "steps_on_trajectory": 5}


def test_protecting_the_answer_needs_the_markers():
    with pytest.raises(ValueError, match="answer marker"):
        RailCapHook([[1, 2, 3]], RailCapConfig(protect="answer"), samples_per_question=1)
    with pytest.raises(ValueError, match="answer marker"):
        RailCapEdit(((1, 2, 3),), RailCapConfig(protect="answer"))
    edit = RailCapEdit(((1, 2, 3),), RailCapConfig(protect="answer"), ((8, 9), (7, 8, 9)))
    assert edit.request_args(0)["railcap"]["answer_markers"] == [[8, 9], [7, 8, 9]]
    assert "answer_markers" not in RailCapEdit(((1,),), RailCapConfig()).request_args(0)["railcap"]


@pytest.mark.parametrize(
    "kwargs",
    [{"n": 0}, {"n": 2.0}, {"n": True}, {"mode": "clip"}, {"mode": 1}, {"protect": "all"}],
)
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        RailCapConfig(**kwargs)


def test_config_round_trips_json():
    cfg = RailCapConfig(n=3, mode="ban")
    assert RailCapConfig.from_json(cfg.to_json()) == cfg
    # A default RailCap's record is the one stored before protect existed (runs compare it on
    # resume); a protected one records it.
    assert cfg.to_dict() == {"n": 3, "mode": "ban"}
    protected = RailCapConfig(protect="answer")
    assert RailCapConfig.from_json(protected.to_json()) == protected
    assert protected.to_dict()["protect"] == "answer"
    with pytest.raises(ValueError, match="unknown field"):
        RailCapConfig.from_dict({"n": 3, "tau": 1.0})
