"""Issue 9's user-visible defects in ``zerogap score`` input handling and error reporting.

Each case crashed with a traceback, or gave an error naming no file or line, before the fix.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from zerogap import cli
from zerogap.io.counts import read_counts

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CLEAN = str(EXAMPLES / "clean.jsonl")


def _score(*args):
    return cli.main(["score", "--resamples", "20", "--noise-sims", "10", "--clean", *args])


def _bad_inputs(tmp_path):
    """(file name, bytes, message the one-line error must carry)."""
    deep = '{"id": "q000", "correct": 1, "samples": 2, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    return [
        ("long.csv", b"id,correct,samples\n" + b"q" * 200_000 + b",1,2\n",
         "long.csv:2: unreadable CSV (field larger than field limit"),
        ("huge.jsonl", b'{"id": "q000", "correct": 1, "samples": 1' + b"0" * 30 + b"}\n",
         "huge.jsonl:1: samples is 1e+30; at most 2147483647"),
        ("deep.jsonl", deep.encode(), "deep.jsonl:1: JSON nested too deeply"),
        ("latin1.csv", b"id,correct,samples\nq\xe9,1,2\n",
         "latin1.csv:2: not UTF-8 text (byte 0xe9)"),
        ("digits.jsonl", b'{"id": "q000", "correct": ' + b"7" * 5000 + b', "samples": 2}\n',
         "digits.jsonl:1: unreadable JSON value (Exceeds the limit (4300 digits)"),
        ("digits.csv", b"id,correct,samples\nq000,1," + b"7" * 5000 + b"\n",
         "digits.csv:2: samples has 5000 digits; at most 2147483647"),
    ]


@pytest.mark.parametrize("case", range(6))
def test_bad_score_inputs_get_one_line_naming_file_and_line(tmp_path, capsys, case):
    name, content, message = _bad_inputs(tmp_path)[case]
    path = tmp_path / name
    path.write_bytes(content)
    assert _score(str(path), "--mitigated", f"r={CLEAN}") == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_a_directory_given_as_input_is_named_as_one(tmp_path, capsys):
    assert _score(CLEAN, "--mitigated", f"r={tmp_path}") == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}: a directory without a run store (run.sqlite)" in err


def test_json_output_that_is_a_directory_fails_before_any_work(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    assert _score(CLEAN, "--mitigated", f"r={CLEAN}", "--json", str(out)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no table printed before the failure
    assert f"--json {out}: is a directory" in captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no out.tmp left behind
    assert list(out.iterdir()) == []


def test_a_byte_order_mark_is_accepted(tmp_path, capsys):
    plain = (EXAMPLES / "railcap.jsonl").read_bytes()
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + plain)
    csv = tmp_path / "bom.csv"
    csv.write_bytes(b"\xef\xbb\xbfid,correct,samples\nq000,1,2\n")
    assert read_counts(bom).ids == read_counts(EXAMPLES / "railcap.jsonl").ids
    assert read_counts(csv).ids == ("q000",)
    assert _score(CLEAN, "--mitigated", f"r={bom}") == 0
    capsys.readouterr()


def test_internal_errors_keep_their_traceback(monkeypatch, capsys):
    import zerogap.cli.score

    def broken(*args, **kwargs):
        raise ValueError("an internal bug, not the user's input")

    monkeypatch.setattr(zerogap.cli.score, "score", broken)
    with pytest.raises(ValueError, match="internal bug"):
        _score(CLEAN, "--mitigated", f"r={CLEAN}")


def test_traceback_flag_shows_user_errors_in_full(capsys):
    argv = ["score", "--clean", CLEAN, "--mitigated", "r=missing.jsonl"]
    assert cli.main(argv) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert cli.main(["--traceback", *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.rstrip().endswith("missing.jsonl: no such file")


def test_every_command_group_is_one_module_without_import_cycles():
    for name in cli.COMMAND_MODULES:
        code = f"import {name}; assert callable({name}.register)"
        env = {"PYTHONPATH": str(ROOT / "src")}
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                env=env)
        assert result.returncode == 0, (name, result.stderr)


def test_score_json_carries_inputs_and_settings(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert _score(CLEAN, "--mitigated", f"r={CLEAN}", "--json", str(out)) == 0
    capsys.readouterr()
    record = json.loads(out.read_text())
    assert record["inputs"]["clean"]["path"] == CLEAN
    assert record["settings"]["resamples"] == 20 and record["best"] == "r"
    assert record["strategies"]["r"]["verdict"]["outcome"] == "restored"
