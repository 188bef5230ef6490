"""PQ paraphrases: the checks, the endpoint backend against a real HTTP server on localhost, the
resume cache, the CLI, and the local backend on the embedded model (slow)."""

import json
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from zerogap import cli
from zerogap.tasks.base import Question
from zerogap.tasks.paraphrase import (
    EndpointBackend,
    LocalBackend,
    bigram_overlap,
    check_rewrite,
    extract_rewrite,
    paraphrase,
)

KEY = "sk-test-4c1d0f"

# Question text -> the server's behaviour. Good rewrites keep every number and reword.
QUESTIONS = {
    "ok": ("Ann has 12 pens and buys 5 more. How many pens does Ann have now?",
           "After a purchase of 5 extra pens, how many does Ann own if she began with 12?"),
    "flaky": ("Ben bakes 3 trays of 8 cookies. How many cookies does he bake?",
              "Counting 8 cookies on each of 3 trays, what is Ben's total output of cookies?"),
    "slow": ("Cid reads 20 pages a day for 4 days. How many pages does he read?", None),
    "badnum": ("Dan shares 18 coins equally among 3 friends. How many coins does each get?",
               "If 18 coins are split evenly between 4 pals, what does every pal receive?"),
    "error": ("Eve sells 7 of her 15 shells. How many shells are left?", None),
}


class Quiet(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass


class LocalServer:
    """A real HTTP server on 127.0.0.1 answering with a handler class on its own thread;
    ``url`` is its endpoint's base URL."""

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Server(LocalServer):
    """An OpenAI-compatible ``/v1/chat/completions`` server: ``behaviour(question, n)`` gives the
    status and reply to the n-th request for a question (status "sleep": reply after 1 s)."""

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.requests = Counter()
        self.auth = set()
        server = self

        class Handler(Quiet):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.auth.add(self.headers.get("Authorization"))
                text = body["messages"][-1]["content"]
                server.requests[text] += 1
                status, reply = server.behaviour(text, server.requests[text])
                if status == "sleep":
                    time.sleep(1.0)
                    status = 200
                payload = json.dumps({"choices": [{"message": {"role": "assistant",
                                                               "content": reply}}]}).encode()
                if status != 200:
                    payload = b'{"error": "boom"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.serve(Handler)


NAME = {q: name for name, (q, _) in QUESTIONS.items()}


def first_run(text, count):
    name = NAME[text]
    if name == "flaky" and count == 1:
        return 500, None
    if name == "slow":
        return "sleep", "never read"
    if name == "error":
        return 503, None
    return 200, f"Rewritten: {QUESTIONS[name][1]}"


@pytest.fixture
def questions():
    return [Question(f"test-{i}", q, "0") for i, (q, _) in enumerate(QUESTIONS.values())]


@pytest.fixture
def serve():
    servers = []

    def start(behaviour):
        servers.append(Server(behaviour))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def test_endpoint_backend_retries_flags_and_resumes(questions, serve, tmp_path, monkeypatch):
    monkeypatch.setenv("ZG_TEST_KEY", KEY)
    server = serve(first_run)
    backend = EndpointBackend(server.url, "pq-model", api_key_env="ZG_TEST_KEY", timeout=0.3)
    out = tmp_path / "pq.jsonl"
    report = paraphrase(questions, backend, out, attempts=3)
    assert report == {"questions": 5, "rewritten": 2, "retried": 1, "flagged": 3}
    assert server.auth == {f"Bearer {KEY}"}
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    by_name = dict(zip(QUESTIONS, (rows[q.id] for q in questions), strict=True))
    assert by_name["ok"]["status"] == "rewritten" and by_name["ok"]["attempts"] == 1
    assert by_name["ok"]["text"] == QUESTIONS["ok"][1]
    assert by_name["flaky"]["status"] == "rewritten" and by_name["flaky"]["attempts"] == 2
    for name in ("slow", "badnum", "error"):
        row = by_name[name]
        assert row["status"] == "flagged" and row["attempts"] == 3
        assert row["text"] == row["original"] == QUESTIONS[name][0]
    assert by_name["badnum"]["reason"] == "numbers differ (missing 3; added 4)"
    assert not by_name["badnum"]["transport"]
    assert by_name["error"]["reason"] == "HTTP 503" and by_name["slow"]["transport"]
    counts = {NAME[t]: n for t, n in server.requests.items()}
    assert counts["badnum"] == 3 and counts["ok"] == 1
    assert KEY not in out.read_text()

    # Resume: only the questions the server failed to answer are asked again.
    healed = serve(lambda text, count: (200, f"Rewritten: {QUESTIONS['ok'][1]}"
                                        if NAME[text] != "slow" else
                                        "Rewritten: Over 4 days, Cid gets through 20 pages "
                                        "daily; what is the sum of pages?"))
    again = paraphrase(questions, EndpointBackend(healed.url, "pq-model", timeout=5), out)
    assert {NAME[t] for t in healed.requests} == {"slow", "error"}
    assert again["questions"] == 5 and again["flagged"] == 2  # badnum stays; error: numbers
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert sorted(ids) == sorted(q.id for q in questions)  # one row per question


def test_endpoint_rejection_stops_the_run_without_the_key(questions, serve, tmp_path,
                                                          monkeypatch):
    monkeypatch.setenv("ZG_TEST_KEY", KEY)
    server = serve(lambda text, count: (401, None))
    backend = EndpointBackend(server.url, "pq-model", api_key_env="ZG_TEST_KEY")
    with pytest.raises(ValueError, match="HTTP 401") as err:
        paraphrase(questions, backend, tmp_path / "pq.jsonl")
    assert KEY not in str(err.value)


def test_cli_reports_counts_and_rejects_bad_input(serve, tmp_path, monkeypatch, capsys):
    from zerogap.tasks import get_task

    monkeypatch.setenv("ZG_TEST_KEY", KEY)
    server = serve(lambda text, count: (
        200, "Rewritten: A puzzle about " + " then ".join(re.findall(r"\d+", text)) + "?"))
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"leaked": ["test-1", "test-3"], "unleaked": ["test-0"]}))
    out = tmp_path / "pq.jsonl"
    argv = ["paraphrase", "--task", "arith", "--task-option", "n_test=4", "--split-file",
            str(split),
            "--base-url", server.url, "--endpoint-model", "m",
            "--api-key-env", "ZG_TEST_KEY", "--quiet", "--out", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr()
    assert "2 questions: 2 rewritten (0 after a retry), 0 flagged" in printed.out
    assert KEY not in printed.out + printed.err + out.read_text()
    originals = {q.id: q.text for q in get_task("arith", n_test=4).questions()}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["test-1", "test-3"]
    assert all(r["original"] == originals[r["id"]] for r in rows)

    code = cli.main(["paraphrase", "--task", "arith", "--task-option", "n_test=4", "--split-file",
                     str(split), "--out", str(tmp_path / "x.jsonl")])
    assert code == 2 and "give --model SPEC" in capsys.readouterr().err
    split.write_text(json.dumps({"leaked": ["test-9"]}))
    code = cli.main(argv[:-1] + [str(tmp_path / "y.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and f"{split}: 1 ids not in split 'test'" in err
    assert not (tmp_path / "x.jsonl").exists() and not (tmp_path / "y.jsonl").exists()


def test_checks_hold_by_construction():
    text = QUESTIONS["ok"][0]
    assert check_rewrite(text, text).startswith("too close to the original (bigram overlap 1.00")
    assert check_rewrite(text, "") == "empty rewrite"
    assert check_rewrite(text, QUESTIONS["ok"][1]) is None
    assert check_rewrite(text, QUESTIONS["ok"][1] + " Answer: 17") == (
        "numbers differ (missing none; added 17)")
    assert bigram_overlap(text, QUESTIONS["ok"][1]) <= 0.5
    assert extract_rewrite("New Question: A b 3.") == "A b 3."


@pytest.mark.slow
def test_local_backend_on_the_embedded_model(tmp_path):
    """Real generation: the number check decides, and this small model often fails it."""
    from zerogap.models import load_model
    from zerogap.tasks import get_task

    questions = get_task("arith").questions()[:3]
    backend = LocalBackend(load_model("embedded", device="cpu"), max_new_tokens=64)
    out = tmp_path / "pq.jsonl"
    report = paraphrase(questions, backend, out, attempts=2)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert report["questions"] == len(rows) == 3
    assert report["rewritten"] + report["flagged"] == 3
    for row in rows:
        if row["status"] == "rewritten":
            assert check_rewrite(row["original"], row["text"]) is None
        else:
            assert row["text"] == row["original"] and row["attempts"] == 2 and row["reason"]


# -- issue 22: secrets across redirects and in URLs, an unset key, the cache's key ---------------

class Redirector(LocalServer):
    """A server that answers every request with ``status`` and ``Location: target``."""

    def __init__(self, status, target):
        class Handler(Quiet):
            def do_POST(self):
                self.send_response(status)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.serve(Handler)


class Recorder(Server):
    """:class:`Server` that also records GET requests (urllib turns a POST redirected by 302
    into a GET) with their Authorization header."""

    def __init__(self, behaviour):
        super().__init__(behaviour)
        handler = self.httpd.RequestHandlerClass
        auth = self.auth

        def do_GET(self):
            auth.add(self.headers.get("Authorization"))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        handler.do_GET = do_GET


def _paraphrase_argv(url, out, *extra):
    return ["paraphrase", "--task", "arith", "--task-option", "n_test=4", "--limit", "2",
            "--base-url", url, "--endpoint-model", "m", "--quiet",
            "--out", str(out), *extra]


def _good(text, count):
    return 200, "Rewritten: A puzzle about " + " then ".join(re.findall(r"\d+", text)) + "?"


@pytest.mark.parametrize("status", [302, 307])
def test_a_redirect_to_another_origin_never_carries_the_key(tmp_path, monkeypatch, capsys,
                                                            status):
    monkeypatch.setenv("ZG_TEST_KEY", KEY)
    elsewhere = Recorder(_good)
    redirector = Redirector(status, elsewhere.url + "/chat/completions")
    try:
        code = cli.main(_paraphrase_argv(redirector.url, tmp_path / "pq.jsonl",
                                         "--api-key-env", "ZG_TEST_KEY"))
    finally:
        redirector.close()
        elsewhere.close()
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"redirected (HTTP {status}) to another origin, {elsewhere.url}" in err
    assert f"Bearer {KEY}" not in elsewhere.auth and KEY not in err
    assert not elsewhere.requests  # nothing was sent there at all


def test_credentials_in_the_base_url_are_never_recorded(tmp_path, capsys, serve):
    server = serve(_good)
    out = tmp_path / "pq.jsonl"
    secret = "qs-secret-77"
    assert cli.main(_paraphrase_argv(f"{server.url}?key={secret}", out,
                                     "--api-key-env", "")) == 0
    printed = capsys.readouterr()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and secret not in out.read_text() + printed.out + printed.err
    assert rows[0]["backend"] == f"endpoint:{server.url}/chat/completions?key=REDACTED:m"

    password = "pw-hunter2"
    code = cli.main(_paraphrase_argv(server.url.replace("//", f"//bob:{password}@"),
                                     tmp_path / "other.jsonl"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "holds a user or password" in err, err
    assert password not in err and not (tmp_path / "other.jsonl").exists()


def test_an_unset_key_variable_is_warned_about(tmp_path, capsys, serve, monkeypatch):
    monkeypatch.delenv("ZG_UNSET_KEY", raising=False)
    server = serve(_good)
    assert cli.main(_paraphrase_argv(server.url, tmp_path / "pq.jsonl",
                                     "--api-key-env", "ZG_UNSET_KEY")) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning: $ZG_UNSET_KEY is not set" in err, err
    assert server.auth == {None}
    # Saying so (--api-key-env '') sends no key without the warning.
    assert cli.main(_paraphrase_argv(server.url, tmp_path / "pq2.jsonl", "--api-key-env", "")) == 0
    assert capsys.readouterr().err == ""


def test_rows_made_for_other_questions_under_the_same_ids_are_not_reused(tmp_path, capsys,
                                                                         serve):
    """Another task seed gives other questions the same ids: on f24be4b the rerun counted the
    other questions' rewrites as this run's."""
    server = serve(_good)
    out = tmp_path / "pq.jsonl"
    assert cli.main(_paraphrase_argv(server.url, out, "--api-key-env", "")) == 0
    capsys.readouterr()
    before = out.read_bytes()
    code = cli.main(_paraphrase_argv(server.url, out, "--api-key-env", "", "--task-option",
                                     "seed=5"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "cannot be reused: its question's text differs" in err
    assert out.read_bytes() == before  # nothing rewritten, nothing lost
    # Another temperature is another setting the rewrites depend on.
    code = cli.main(_paraphrase_argv(server.url, out, "--api-key-env", "", "-T", "0.9"))
    assert code == 2 and "another model, prompt or setting" in capsys.readouterr().err
    # The same command again reuses every row and asks nothing.
    asked = sum(server.requests.values())
    assert cli.main(_paraphrase_argv(server.url, out, "--api-key-env", "")) == 0
    assert sum(server.requests.values()) == asked


def test_a_row_cut_short_by_a_kill_is_dropped_and_asked_again(tmp_path, capsys, serve):
    server = serve(_good)
    out = tmp_path / "pq.jsonl"
    assert cli.main(_paraphrase_argv(server.url, out, "--api-key-env", "")) == 0
    rows = out.read_text().splitlines()
    out.write_text(rows[0] + "\n" + rows[1][: len(rows[1]) // 2])  # killed mid-line
    asked = sum(server.requests.values())
    assert cli.main(_paraphrase_argv(server.url, out, "--api-key-env", "")) == 0
    assert sum(server.requests.values()) == asked + 1  # only the cut row again
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        json.loads(r) for r in rows]
    capsys.readouterr()
