"""Output files in real processes: ``-`` is standard output for every flag that names an output
file, and a command that fails leaves no file (no 0-byte output) where it had none."""

import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

import pytest

from helpers import SRC, run_main, sample_args


def _zerogap(*argv, cwd=None, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerogap", *map(str, argv)], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(SRC), **env})


@pytest.fixture(scope="module")
def run_dir(tiny_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("outputs") / "run"
    assert run_main(sample_args(tiny_dir, folder, "--limit", "2", "-m", "2")) == 0
    return folder


@pytest.mark.parametrize("flag", ["--jsonl", "--counts"])
def test_runs_export_dash_writes_standard_output(run_dir, tmp_path, flag):
    file = tmp_path / "export.jsonl"
    assert _zerogap("runs", "export", run_dir, flag, file).returncode == 0
    done = _zerogap("runs", "export", run_dir, flag, "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == file.read_text(encoding="utf-8")  # the same bytes as the file
    assert "to -" in done.stderr  # the "wrote" line is not mixed into the data
    assert not (tmp_path / "-").exists()
    twice = _zerogap("runs", "export", run_dir, "--jsonl", "-", "--counts", "-")
    assert twice.returncode == 2 and "--jsonl -: is also --counts" in twice.stderr


def test_a_file_named_dash_is_given_with_its_folder(run_dir, tmp_path):
    done = _zerogap("runs", "export", run_dir, "--jsonl", tmp_path / "-")
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "-").read_text(encoding="utf-8").splitlines()) == 4


class _Endpoint:
    """A real OpenAI-compatible endpoint on 127.0.0.1 answering every request with ``status``
    (200: a rewrite that keeps the question's numbers)."""

    def __init__(self, status: int):
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                numbers = " ".join(w for w in body["messages"][-1]["content"].split()
                                   if any(c.isdigit() for c in w))
                payload = json.dumps({"choices": [{"message": {
                    "content": f"Reworded entirely, with the figures {numbers} kept?"}}]})
                data = payload.encode() if status == 200 else b'{"error": "no key"}'
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _paraphrase(url, out, cwd):
    return _zerogap("paraphrase", "--task", "arith", "--limit", "2", "--base-url", url,
                    "--endpoint-model", "m", "--api-key-env", "", "--attempts", "1", "--quiet",
                    "--out", out, cwd=cwd)


@pytest.mark.parametrize("status", [401, 404])
def test_paraphrase_refused_by_its_endpoint_leaves_no_file(tmp_path, status):
    endpoint = _Endpoint(status)
    try:
        done = _paraphrase(endpoint.url, tmp_path / "pq.jsonl", tmp_path)
        assert done.returncode == 2, done.stderr
        assert f"HTTP {status}" in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert list(tmp_path.iterdir()) == []
        to_stdout = _paraphrase(endpoint.url, "-", tmp_path)
        assert to_stdout.returncode == 2 and to_stdout.stdout == ""
        assert list(tmp_path.iterdir()) == []
    finally:
        endpoint.close()


def test_paraphrase_dash_writes_its_rows_to_standard_output(tmp_path):
    endpoint = _Endpoint(200)
    try:
        done = _paraphrase(endpoint.url, "-", tmp_path)
    finally:
        endpoint.close()
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["id"] for r in rows] == ["test-0", "test-1"], rows
    assert "-> -" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [
    ["paraphrase", "--task", "arith", "--limit", "1"],
    ["sample", "--task", "arith", "--limit", "1", "-m", "2"],
    ["neurons", "--task", "arith", "--base", "embedded", "--contaminated", "embedded",
     "--clean", "embedded"],
])
def test_a_bad_environment_override_is_refused_with_the_flags(tiny_dir, tmp_path, command):
    """``ZEROGAP_THREADS=abc`` is one line before anything loads or is written."""
    model = [] if command[0] == "neurons" else ["--model", tiny_dir]
    leaked = ["--split-file", tmp_path / "split.json"] if command[0] == "neurons" else []
    done = _zerogap(*command, *model, *leaked, "--out", tmp_path / "out", ZEROGAP_THREADS="abc")
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"zerogap {command[0]}: error: ZEROGAP_THREADS='abc': must be a whole " \
                          "number of threads >= 1\n"
    assert list(tmp_path.iterdir()) == []
