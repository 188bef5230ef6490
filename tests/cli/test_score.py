import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from zerogap.cli import main
from zerogap.io.counts import read_counts, write_counts
from zerogap.metrics import restoration_gaps

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STRATEGIES = ("identity", "lne-blocking", "railcap", "all-zero")


def score_args(*extra):
    args = ["score", "--clean", str(EXAMPLES / "clean.jsonl")]
    for name in STRATEGIES:
        args += ["--mitigated", f"{name}={EXAMPLES / (name + '.jsonl')}"]
    return [*args, "--resamples", "500", "--noise-sims", "200", *extra]


def test_score_prints_a_table_and_writes_json_that_match_the_metrics(tmp_path, capsys):
    out = tmp_path / "scores.json"
    assert main(score_args("--json", str(out))) == 0
    table = capsys.readouterr().out
    assert "SA-PPG" in table and "noise floor" in table
    result = json.loads(out.read_text())
    clean = read_counts(EXAMPLES / "clean.jsonl")
    for name in STRATEGIES:
        run = read_counts(EXAMPLES / f"{name}.jsonl").aligned_to(clean)
        gaps = restoration_gaps(
            clean.correct / clean.samples,
            run.correct / run.samples,
            bins=result["settings"]["bins_used"],
            draw_clean=clean.first,
            draw_mitigated=run.first,
        )
        row = result["strategies"][name]
        for metric in ("g_ap", "a_ppg", "sa_ppg", "s_delta_minus"):
            entry = row[metric]
            assert entry["estimate"] == pytest.approx(getattr(gaps, metric))
            assert entry["low"] <= entry["high"]
        assert f"{gaps.sa_ppg:.4f}" in table
    assert result["settings"]["g_ap_readout"] == "first sample"
    assert result["settings"]["bins_used"] == 12  # round(300 / 26): the default for N = 300
    assert len(result["inputs"]["clean"]["sha256"]) == 64
    # The best strategy by SA-PPG is compared against every other one.
    best = min(STRATEGIES, key=lambda n: result["strategies"][n]["sa_ppg"]["estimate"])
    for metric in ("sa_ppg", "a_ppg"):
        pairs = [c for c in result["comparisons"] if c["metric"] == metric]
        assert {c["a"] for c in pairs} == set(STRATEGIES) - {best}
        assert all(c["b"] == best for c in pairs)


def test_paired_null_mean_tests_the_mean_difference_and_says_so(tmp_path, capsys):
    out = tmp_path / "scores.json"
    assert main(score_args("--paired-null", "mean", "--json", str(out))) == 0
    table = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["settings"]["paired_null"] == "mean"
    clean = read_counts(EXAMPLES / "clean.jsonl")
    best = min(STRATEGIES, key=lambda n: result["strategies"][n]["sa_ppg"]["estimate"])
    for c in (c for c in result["comparisons"] if c["metric"] == "a_ppg"):
        # A-PPG has no strata: Student's paired t on N - 1 degrees of freedom
        assert c["df"] == pytest.approx(clean.correct.size - 1)
        assert "stratified t" in c["method"] and c["low"] < c["difference"] < c["high"]
        run, ref = (read_counts(EXAMPLES / f"{n}.jsonl").aligned_to(clean) for n in (c["a"], best))
        r = clean.correct / clean.samples
        d = np.abs(run.correct / run.samples - r) - np.abs(ref.correct / ref.samples - r)
        assert c["difference"] == pytest.approx(d.mean())
    assert "stratified t, weak null" in table and " df" in table
    assert "paired tests: of the mean difference" in table


def test_all_zero_ranks_last_under_sa_ppg_but_not_under_a_ppg(tmp_path):
    out = tmp_path / "s.json"
    main(score_args("--json", str(out), "--resamples", "0"))
    rows = json.loads(out.read_text())["strategies"]
    sa = {n: rows[n]["sa_ppg"]["estimate"] for n in STRATEGIES}
    a = {n: rows[n]["a_ppg"]["estimate"] for n in STRATEGIES}
    assert max(sa, key=sa.get) == "all-zero"
    assert a["all-zero"] < a["identity"]


def test_a_margin_adds_one_verdict_per_strategy(tmp_path, capsys):
    out = tmp_path / "scores.json"
    assert main(score_args("--margin", "0.05", "--json", str(out))) == 0
    table = capsys.readouterr().out
    assert ("restoration verdicts (equivalence test of SA-PPG's excess over the floor, "
            "margin 0.05)") in table
    result = json.loads(out.read_text())
    assert result["settings"]["margin"] == 0.05
    for name in STRATEGIES:
        verdict = result["strategies"][name]["verdict"]
        assert verdict["name"] == name and verdict["margin"] == 0.05
        assert verdict["outcome"] in ("restored", "not restored", "inconclusive")
        assert f"  {name}: {verdict['outcome']}" in table
        # The verdict tests the same SA-PPG the table reports.
        assert verdict["sa_ppg"] == pytest.approx(result["strategies"][name]["sa_ppg"]["estimate"])


def test_counts_without_first_sample_use_a_seeded_draw(tmp_path, capsys):
    rng = np.random.default_rng(0)
    ids = [f"q{i}" for i in range(50)]
    for name in ("clean", "s"):
        write_counts(tmp_path / f"{name}.jsonl", ids, rng.integers(0, 11, 50), [10] * 50)
    args = [
        "score",
        "--clean",
        str(tmp_path / "clean.jsonl"),
        "--mitigated",
        f"s={tmp_path / 's.jsonl'}",
        "--resamples",
        "100",
        "--noise-sims",
        "50",
    ]
    main([*args, "--json", str(tmp_path / "a.json")])
    main([*args, "--json", str(tmp_path / "b.json")])
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert "seeded draw" in a["settings"]["g_ap_readout"]
    assert a["strategies"] == b["strategies"]
    capsys.readouterr()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mitigated", "noequals"], "--mitigated expects NAME=FILE"),
        (["--mitigated", "x=missing.jsonl"], "missing.jsonl: no such file"),
        (["--mitigated", f"r={EXAMPLES / 'railcap.jsonl'}", "--bins", "0"], "--bins must be"),
        (["--mitigated", f"r={EXAMPLES / 'railcap.jsonl'}", "--level", "2"],
         "--level must be less than 1, got 2.0"),
        (["--mitigated", f"r={EXAMPLES / 'railcap.jsonl'}", "--margin", "-0.1"],
         "--margin must be at least 0, got -0.1"),
        (["--mitigated", f"r={EXAMPLES / 'railcap.jsonl'}", "--resamples", "-1"],
         "--resamples must be at least 0, got -1"),
    ],
)
def test_user_errors_are_one_line(tmp_path, capsys, args, message):
    code = main(["score", "--clean", str(EXAMPLES / "clean.jsonl"), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1


def test_mismatched_question_sets_name_the_file_and_ids(tmp_path, capsys):
    lines = (EXAMPLES / "railcap.jsonl").read_text().splitlines()
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(lines[3:]) + "\n")
    code = main(["score", "--clean", str(EXAMPLES / "clean.jsonl"), "--mitigated", f"r={short}"])
    err = capsys.readouterr().err
    assert code == 2
    assert "short.jsonl: question set differs" in err and "3 missing (q000, q001, q002)" in err


def test_existing_json_output_survives_a_failed_run(tmp_path, capsys):
    out = tmp_path / "scores.json"
    out.write_text("previous results")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "q000", "correct": 9, "samples": 3}\n')
    main(
        [
            "score",
            "--clean",
            str(EXAMPLES / "clean.jsonl"),
            "--mitigated",
            f"b={bad}",
            "--json",
            str(out),
        ]
    )
    assert "exceeds samples" in capsys.readouterr().err
    assert out.read_text() == "previous results"


def test_scoring_never_imports_torch():
    code = (
        "import sys; from zerogap.cli import main; "
        f"main(['score', '--clean', {str(EXAMPLES / 'clean.jsonl')!r}, '--mitigated', "
        f"'r={EXAMPLES / 'railcap.jsonl'}', '--resamples', '10', '--noise-sims', '10']); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    src = Path(__file__).resolve().parents[2] / "src"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(src)}
    )
    assert result.returncode == 0, result.stderr


def test_too_few_questions_print_no_interval(tmp_path, capsys):
    ids = [f"q{i}" for i in range(11)]
    write_counts(tmp_path / "c.jsonl", ids, range(11), [12] * 11)
    write_counts(tmp_path / "s.jsonl", ids, [0] * 11, [12] * 11)
    args = ["score", "--clean", str(tmp_path / "c.jsonl"), "--mitigated",
            f"s={tmp_path / 's.jsonl'}", "--noise-sims", "20", "--resamples", "100"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "no intervals: too few questions (11 < 12)" in captured.out
    assert "s: inconclusive: too few questions" in captured.out


def test_a_closed_pipe_ends_quietly():
    src = Path(__file__).resolve().parents[2] / "src"
    proc = subprocess.Popen(
        [sys.executable, "-m", "zerogap", *score_args("--resamples", "50")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PYTHONPATH": str(src)},
    )
    proc.stdout.close()  # the reader is gone before the table is written, like `| head -0`
    stderr = proc.stderr.read().decode()
    assert proc.wait() == 141
    assert "Traceback" not in stderr


def test_json_dash_puts_the_record_on_stdout_and_the_table_on_stderr(tmp_path, capsys):
    clean, rail = tmp_path / "clean.jsonl", tmp_path / "rail.jsonl"
    write_counts(clean, ["a", "b", "c"], [3, 1, 0], [4, 4, 4])
    write_counts(rail, ["a", "b", "c"], [2, 1, 1], [4, 4, 4])
    assert main(["score", "--clean", str(clean), "--mitigated", f"railcap={rail}",
                 "--resamples", "0", "--noise-sims", "10", "--json", "-"]) == 0
    captured = capsys.readouterr()
    record = json.loads(captured.out)
    a_ppg = record["strategies"]["railcap"]["a_ppg"]["estimate"]
    assert a_ppg == pytest.approx((1 + 0 + 1) / 4 / 3)
    assert captured.err.startswith("3 questions, clean m = 4")
    assert not (tmp_path / "-").exists() and not Path("-").exists()


def test_version(capsys):
    from zerogap import __version__

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out == f"zerogap {__version__}\n"
