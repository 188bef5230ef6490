"""The sensitivity table: SA-PPG and its ranking over B and subsampled m."""

import numpy as np

from zerogap.analysis.score import ScoreSettings, score
from zerogap.analysis.sensitivity import sensitivity_table, subsample

from .test_tables import setting


def test_subsampling_draws_without_replacement_from_each_questions_samples():
    rng = np.random.default_rng(0)
    correct, samples = np.array([0, 20, 7, 3]), np.array([20, 20, 10, 4])
    for fraction in (0.25, 0.5):
        c, m = subsample(correct, samples, fraction, rng)
        assert np.array_equal(m, np.maximum(1, np.round(fraction * samples)))
        assert np.all(c <= np.minimum(correct, m)) and np.all(m - c <= samples - correct)
        assert c[0] == 0 and c[1] == m[1]  # never-solved and always-solved stay so
    c, m = subsample(correct, samples, 1.0, rng)
    assert np.array_equal(c, correct) and np.array_equal(m, samples)


def test_every_b_and_m_gets_a_column_and_the_full_run_reads_as_scored():
    clean, runs, references, _ = setting(n=60, m=20)
    card = score(clean, runs, ScoreSettings(bins=10, resamples=0, noise_sims=50))
    table = sensitivity_table("s", card)
    assert len(table.columns) == 12 and table.columns[-3] == "B=10,m=20"
    (section,) = table.sections
    for label, cells in section.rows:
        assert cells["B=10,m=20"] == card.interval(label, "sa_ppg")
        assert cells["B=10,m=5"].estimate != cells["B=10,m=20"].estimate or label == "all-zero"
    assert any("ranking by SA-PPG" in note for note in table.notes)
    assert sum(note.startswith("B=") for note in table.notes) == 12
    assert "| B = 5, m = 5 |" in table.to_markdown()
