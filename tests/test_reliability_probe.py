"""Issue 46, the last findings of a reliability probe of every command: each bad input is one
line, exit 2, nothing written (a chat template the Jinja sandbox refuses, an export onto a
symbolic link or twice onto one file, a hub id that cannot be fetched offline); responses cut
at the token limit are counted wherever counts are shown; ``runs show`` shows every setting the
store holds; ``task show`` needs no ``--index``. Each failed on main at f6fe317 (a traceback
and an empty file, a link replaced by a file, one export overwriting the other, a minute of
retries, truncation reported nowhere, settings left out, ``--index`` demanded)."""

import http.server
import json
import shutil
import socket
import threading

import pytest

from helpers import refused, run_main, sample_args, stored_samples
from zerogap import cli
from zerogap.errors import UserError
from zerogap.io.counts import read_counts
from zerogap.store import RunStore

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def short_run(tiny_dir, tmp_path_factory):
    """Two questions sampled with a 2-token limit: the tiny model rarely stops that early, so
    most responses are cut (what is asserted below is read from the store, whatever it holds)."""
    run_dir = tmp_path_factory.mktemp("short") / "run"
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "2", "--max-new-tokens", "2")) == 0
    return run_dir


def _cut(run_dir) -> tuple[int, int]:
    finishes = [row[4] for row in stored_samples(run_dir)]
    return finishes.count("length"), len(finishes)


def test_sample_says_how_many_responses_hit_the_limit(tiny_dir, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert run_main(sample_args(tiny_dir, run_dir, "--limit", "2", "--max-new-tokens", "2")) == 0
    captured = capsys.readouterr()
    cut, total = _cut(run_dir)
    assert total == 12 and f"{cut} of 12 stored responses cut at the token limit " \
                            "(--max-new-tokens 2)" in captured.out
    warned = "warning: " in captured.err and f"{cut} of 12 responses were cut" in captured.err
    assert warned == (cut * 2 > total)


def test_runs_show_holds_every_setting_and_the_truncation(short_run, capsys):
    assert run_main(["runs", "show", str(short_run), "--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    with RunStore(short_run, create=False) as store:
        config = store.config()
    assert summary["config"] == config  # dtype, strategy and task settings included
    assert {"dtype", "task_config", "strategy"} <= set(summary["config"])
    cut, total = _cut(short_run)
    assert summary["truncated"] == {"responses": cut, "of": total}
    assert f"cut at the limit   {cut} of {total} samples" in captured.err  # the table
    for key in config:
        assert f"\n{key:18} " in "\n" + captured.err


def test_score_and_export_count_the_truncated_responses(short_run, tmp_path, capsys):
    cut, total = _cut(short_run)
    counts = tmp_path / "counts.jsonl"
    assert run_main(["runs", "export", str(short_run), "--counts", str(counts)]) == 0
    assert read_counts(counts).truncated.sum() == cut
    capsys.readouterr()
    for clean in (short_run, counts):  # a run directory, or the counts it exported
        assert cli.main(["score", "--clean", str(clean), "--mitigated", f"r={counts}",
                         "--resamples", "20", "--noise-sims", "10"]) == 0
        out = capsys.readouterr().out
        assert f"responses cut at the token limit: clean {cut} of {total}" in out
        assert (f"warning: r: {cut} of {total} responses were cut" in out) == (cut * 2 > total)


def test_an_export_onto_a_symbolic_link_is_refused_keeping_the_link(short_run, tmp_path,
                                                                    capsys):
    target = tmp_path / "kept.jsonl"
    target.write_text("kept\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    refused(capsys, ["runs", "export", short_run, "--jsonl", link],
            f"--jsonl {link}: is a symbolic link")
    assert link.is_symlink() and target.read_text() == "kept\n"


def test_two_exports_onto_one_file_are_refused_before_either_is_written(short_run, tmp_path,
                                                                      capsys):
    out = tmp_path / "both.jsonl"
    refused(capsys, ["runs", "export", short_run, "--counts", out, "--jsonl", tmp_path / "." /
                     "both.jsonl"], "is also --counts; each export needs its own file")
    assert not out.exists()


def test_task_show_shows_the_first_question_without_index(capsys):
    assert cli.main(["task", "show", "arith"]) == 0
    default = capsys.readouterr().out
    assert cli.main(["task", "show", "arith", "--index", "0"]) == 0
    assert default == capsys.readouterr().out and "question test-0" in default


def test_a_chat_template_the_sandbox_refuses_is_one_line_and_writes_nothing(tiny_dir,
                                                                           tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(tiny_dir, folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = "{{ ''.__class__.__mro__ }}"  # Python internals: refused
    config_path.write_text(json.dumps(config))
    out = tmp_path / "pq.jsonl"
    refused(capsys, ["paraphrase", "--task", "arith", "--limit", "1", "--model", folder,
                     "--out", out, "--quiet"],
            "the chat template cannot render the prompt: SecurityError")
    assert not out.exists()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_hub_id_is_refused_at_once_when_the_hub_cannot_answer(monkeypatch):
    from huggingface_hub import constants

    from zerogap.models import check_model_spec

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError, match="'someorg/no-model' is no local file or folder .* "
                                        r"is off \(HF_HUB_OFFLINE\)"):
        check_model_spec("someorg/no-model")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(UserError, match="cannot be reached"):
        check_model_spec("someorg/no-model")


def test_a_spec_the_hub_client_refuses_to_spell_is_one_line():
    from zerogap.models import check_model_spec

    with pytest.raises(UserError, match="'org--x/m' is no local file or folder, nor a hub id"):
        check_model_spec("org--x/m")


def test_a_hub_that_answers_leaves_the_hub_id_to_the_download(monkeypatch):
    """A hub answering even with an error page is reachable: the download says what it lacks."""
    from huggingface_hub import constants

    from zerogap.models import check_model_spec

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        check_model_spec("someorg/no-model")  # no error: the hub answered (501)
    finally:
        server.shutdown()
        server.server_close()


def test_sample_refuses_an_unreachable_hub_id_before_writing(tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    run_dir = tmp_path / "run"
    refused(capsys, sample_args("someorg/no-model", run_dir), "is off (HF_HUB_OFFLINE)")
    assert not run_dir.exists()
