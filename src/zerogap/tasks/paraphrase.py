"""PQ: paraphrased questions that keep every number and the answer (arXiv 2608.07341, App. A).

Each question is rewritten by a language model under :data:`INSTRUCTION` (a substantial
rephrasing that keeps all numbers and the answer, gives no solution, and fits on one line). Two
backends produce rewrites: :class:`LocalBackend` (any model ``models.py`` loads, through the
sampling engine) and :class:`EndpointBackend` (any OpenAI-compatible chat endpoint).

Every rewrite is checked (:func:`check_rewrite`):

* the multiset of numbers (as exact decimals: ``$1,000`` equals ``1000``) equals the original's;
* the rewrite differs substantially: at most ``max_overlap`` (default 0.5) of the original's
  word bigrams (lower-cased runs of letters and digits, counted with multiplicity) reappear in
  it; an unchanged copy has overlap 1.

A question whose rewrite fails is asked again (a new seed, or a new request), at most
``attempts`` times in all; then it keeps its original text and is flagged. Results go to a JSONL
file, one row per question as soon as it is final, so an interrupted run resumes where it
stopped. Questions flagged only because the backend could not be reached (timeouts, server
errors) are asked again on the next run.

Each row carries a ``key``: a digest of everything its content depends on (the question's
text, the instruction, the backend's model and sampling settings, the checks' threshold). A
rerun reuses a row only under the same key, and refuses a file whose rows were made for other
input (another task seed gives other questions under the same ids), so a rewrite is never
reused for a question it was not made from.

The endpoint client sends the key only to the endpoint's own origin: a redirect to another
scheme, host or port is refused (urllib would re-send the ``Authorization`` header there), and
a URL is recorded and quoted only with its query values redacted; credentials in the URL itself
(``user:password@``) are refused in favour of the key variable.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from zerogap.errors import DataError, UserError
from zerogap.io.files import atomic_write, refused_writes
from zerogap.io.jsonlines import read_jsonl
from zerogap.progress import Progress, ProgressCallback
from zerogap.tasks.base import Question
from zerogap.tasks.extract import all_numbers, canonical

INSTRUCTION = (
    "You rewrite grade-school math word problems. Reword the problem you are given thoroughly: "
    "change the sentence structure and the wording, not only a few words. Every number must "
    "appear exactly as in the original, and the problem must still have the same answer. Do not "
    "solve the problem and do not hint at its solution. Reply with one line and nothing else, "
    "in this form:\nRewritten: <the reworded problem>"
)
MARKER = re.compile(r"^\s*(?:\*\*)?(?:rewritten|new question)(?:\*\*)?\s*:\s*", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+")
DEFAULT_MAX_OVERLAP = 0.5
CHUNK = 16  # questions finished (and written) together: what an interruption can lose


@dataclass(frozen=True)
class Failure:
    """A rewrite that did not come back: ``transport`` failures are retried on the next run."""

    reason: str
    transport: bool = True


def extract_rewrite(response: str) -> str:
    """The rewrite in a model's reply: the line after "Rewritten:" if any, else the first line.

    Examples
    --------
    >>> extract_rewrite("Sure!\\nRewritten: A box holds 3 pens.\\nAnswer: 3")
    'A box holds 3 pens.'
    >>> extract_rewrite("  A box holds 3 pens.  \\n")
    'A box holds 3 pens.'
    """
    lines = [line for line in response.splitlines() if line.strip()]
    for line in lines:
        if MARKER.match(line):
            return MARKER.sub("", line).strip()
    return lines[0].strip() if lines else ""


def number_multiset(text: str) -> Counter:
    """The numbers in ``text`` as canonical decimal strings, with multiplicity.

    >>> sorted(number_multiset("Pay $1,000 for 2 hats and 2.50 for a pin").elements())
    ['1000', '2', '2.5']
    """
    return Counter(canonical(v) for v in all_numbers(text))


def bigram_overlap(original: str, rewrite: str) -> float:
    """Share of the original's word bigrams (with multiplicity) that reappear in the rewrite.

    >>> bigram_overlap("Tom has 3 red pens.", "Tom has 3 red pens.")
    1.0
    >>> bigram_overlap("Tom has 3 red pens.", "Three? No: 3 pens, all red, belong to Tom.")
    0.0
    """
    def grams(text: str) -> Counter:
        words = _WORD.findall(text.lower())
        return Counter(zip(words, words[1:], strict=False))

    ours = grams(original)
    if not ours:
        return 1.0 if original.strip().lower() == rewrite.strip().lower() else 0.0
    return sum((ours & grams(rewrite)).values()) / sum(ours.values())


def check_rewrite(original: str, rewrite: str, *, max_overlap: float = DEFAULT_MAX_OVERLAP,
                  ) -> str | None:
    """Why ``rewrite`` is not an acceptable paraphrase of ``original``; None when it is.

    Examples
    --------
    >>> original = "Ann has 3 cats and gets 2 more."
    >>> check_rewrite(original, "After receiving 2 extra, Ann owns 3 cats.")
    >>> check_rewrite(original, "Ann, owner of 4 cats, receives 2.")
    'numbers differ (missing 3; added 4)'
    """
    if not rewrite.strip():
        return "empty rewrite"
    ours, theirs = number_multiset(original), number_multiset(rewrite)
    if ours != theirs:
        missing = ", ".join(sorted((ours - theirs).elements())) or "none"
        added = ", ".join(sorted((theirs - ours).elements())) or "none"
        return f"numbers differ (missing {missing}; added {added})"
    overlap = bigram_overlap(original, rewrite)
    if overlap > max_overlap:
        return f"too close to the original (bigram overlap {overlap:.2f} > {max_overlap})"
    return None


Backend = Callable[[Sequence[Question], int], list["str | Failure"]]
"""``backend(questions, attempt)`` -> one raw reply (or :class:`Failure`) per question; a
backend's ``settings`` dict (if any) says what else its replies depend on (:func:`row_key`)."""


def row_key(question: Question, settings: dict) -> str:
    """Digest of everything a result row depends on: the question's text, the instruction and
    ``settings`` (the backend's model and sampling settings, the checks' threshold).

    >>> q = Question("test-0", "Ann has 3 cats.", "3")
    >>> row_key(q, {"model": "m"}) == row_key(Question("test-0", "Bo has 4 dogs.", "4"),
    ...                                       {"model": "m"})
    False
    """
    text = json.dumps({"question": question.text, "instruction": INSTRUCTION, **settings},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def redact_url(url: str) -> str:
    """``url`` safe to record: user and password dropped, every query value replaced.

    >>> redact_url("https://bob:hunter2@api.example.com:8443/v1?key=abc&api-version=2")
    'https://api.example.com:8443/v1?key=REDACTED&api-version=REDACTED'
    """
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    query = "&".join(f"{k}=REDACTED" for k, _ in
                     urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects followed only within the request's origin (scheme, host, port): urllib
    re-sends every header, ``Authorization`` among them, to wherever a 30x points."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if _origin(newurl) != _origin(req.full_url):
            fp.close()
            raise UserError(f"{redact_url(req.full_url)}: the endpoint redirected (HTTP {code}) "
                            f"to another origin, {redact_url(newurl)}; the key is not sent "
                            "there: give that URL as --base-url if you trust it")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class LocalBackend:
    """Rewrites with a loaded model (:class:`zerogap.models.LoadedModel`) through the engine.

    The instruction goes in the model's chat template when its tokenizer has one, else in a
    plain prompt. Attempt ``a`` samples with seed ``seed + a``, so retries draw new rewrites.
    """

    def __init__(self, loaded, *, temperature: float = 0.7, max_new_tokens: int = 160,
                 seed: int = 0):
        self.loaded, self.temperature = loaded, temperature
        self.max_new_tokens, self.seed = max_new_tokens, seed
        self.name = f"local:{loaded.spec}"
        self.settings = {"model": loaded.fingerprint, "temperature": temperature,
                         "max_new_tokens": max_new_tokens, "seed": seed}

    def prompt(self, text: str) -> str:
        tokenizer = self.loaded.tokenizer
        if getattr(tokenizer, "chat_template", None):
            from zerogap.tasks.chat import render_chat

            return render_chat(tokenizer, [{"role": "system", "content": INSTRUCTION},
                                           {"role": "user", "content": text}])
        return f"{INSTRUCTION}\n\nProblem: {text}\n"

    def __call__(self, questions: Sequence[Question], attempt: int) -> list[str | Failure]:
        from zerogap import engine

        out = engine.sample(
            self.loaded.model, self.loaded.tokenizer, [self.prompt(q.text) for q in questions],
            m=1, temperature=self.temperature, max_new_tokens=self.max_new_tokens,
            question_ids=[q.id for q in questions], seed=self.seed + attempt,
        )
        return [gens[0].text for gens in out]


class EndpointBackend:
    """Rewrites from an OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint.

    The key is read from the environment variable ``api_key_env`` at construction and sent only
    in the ``Authorization`` header, only to ``base_url``'s origin; it is never part of a
    result, a message or an error. ``key_missing`` names the variable when it is unset (the
    requests then carry no key). Timeouts, connection errors, HTTP 408/429/5xx and malformed
    replies are :class:`Failure` (retried); any other HTTP error (a wrong URL, model or key)
    and a redirect to another origin raise ``UserError`` at once.
    """

    def __init__(self, base_url: str, model: str, *, api_key_env: str | None = "OPENAI_API_KEY",
                 temperature: float = 0.7, timeout: float = 60.0, workers: int = 4):
        if not base_url.startswith(("http://", "https://")):
            raise UserError("--base-url must start with http:// or https://, got "
                            f"{redact_url(base_url)!r}")
        try:
            parts = urllib.parse.urlsplit(base_url)
            parts.port  # noqa: B018  (a port that is not a number raises here)
        except ValueError:
            raise UserError(f"--base-url {redact_url(base_url)!r} is not a valid URL") from None
        if parts.username is not None or parts.password is not None:
            raise UserError(f"--base-url {redact_url(base_url)}: holds a user or password; "
                            "put the key in an environment variable and name it with "
                            "--api-key-env instead")
        if workers < 1 or not timeout > 0:
            raise UserError("workers must be >= 1 and timeout > 0")
        path = parts.path.rstrip("/") + "/chat/completions"
        self.url = urllib.parse.urlunsplit(parts._replace(path=path, fragment=""))
        self.shown = redact_url(self.url)  # what messages and results may say
        self.model, self.temperature, self.timeout, self.workers = (
            model, temperature, timeout, workers)
        self._key = os.environ.get(api_key_env) if api_key_env else None
        self.key_missing = api_key_env if api_key_env and not self._key else None
        self.name = f"endpoint:{self.shown}:{model}"
        self.settings = {"model": model, "temperature": temperature}
        self._opener = urllib.request.build_opener(_SameOriginRedirects)

    def request(self, text: str) -> str | Failure:
        body = {"model": self.model, "temperature": self.temperature,
                "messages": [{"role": "system", "content": INSTRUCTION},
                             {"role": "user", "content": text}]}
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout) as reply:
                data = json.loads(reply.read().decode("utf-8"))
        except urllib.error.HTTPError as err:
            if err.code in (408, 429) or err.code >= 500:
                return Failure(f"HTTP {err.code}")
            raise UserError(f"{self.shown}: HTTP {err.code} {err.reason} (check --base-url, "
                             "--endpoint-model and the key variable)") from None
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            reason = getattr(err, "reason", err)
            return Failure(f"no reply ({type(reason).__name__}: {reason})")
        except (json.JSONDecodeError, UnicodeDecodeError):
            return Failure("reply is not JSON")
        try:
            return str(data["choices"][0]["message"]["content"])
        except (KeyError, IndexError, TypeError):
            return Failure("reply has no choices[0].message.content")

    def __call__(self, questions: Sequence[Question], attempt: int) -> list[str | Failure]:
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(self.request, [q.text for q in questions]))


def _load_cache(path: Path, keys: dict[str, str], questions: dict[str, Question]
                ) -> dict[str, dict]:
    """Final rows already in ``path``, by id; transport-flagged rows are dropped (asked again).

    A row for one of ``questions`` whose key is not ``keys[id]`` was made from another
    question text, model or setting: refused (:class:`UserError`), as reusing it would pass
    off a rewrite of something else, and redoing it would throw away paid-for work.
    """
    if not path.is_file():
        return {}
    rows = {}
    for line_no, row in read_jsonl(path, journal=True):
        if not isinstance(row.get("id"), str) or row.get("status") not in ("rewritten", "flagged"):
            raise DataError(f"{path}:{line_no}: not a zerogap paraphrase row")
        q = row["id"]
        if q in keys and not row.get("transport") and row.get("key") != keys[q]:
            what = ("its question's text differs (another task seed or data file?)"
                    if row.get("original") != questions[q].text
                    else "it was made with another model, prompt or setting")
            raise UserError(f"{path}:{line_no}: the row for {q} cannot be reused: {what}; give "
                            "another --out, or delete the file to ask every question again")
        rows[q] = row
    return {q: r for q, r in rows.items() if not r.get("transport")}


def report(rows: Sequence[dict]) -> dict[str, int]:
    """Counts over result rows: rewritten (retried: needed more than one attempt), flagged."""
    rewritten = [r for r in rows if r["status"] == "rewritten"]
    return {
        "questions": len(rows),
        "rewritten": len(rewritten),
        "retried": sum(r["attempts"] > 1 for r in rewritten),
        "flagged": sum(r["status"] == "flagged" for r in rows),
    }


def paraphrase(questions: Sequence[Question], backend: Backend, out: str | os.PathLike, *,
               attempts: int = 3, max_overlap: float = DEFAULT_MAX_OVERLAP,
               progress: ProgressCallback | None = None) -> dict[str, int]:
    """Paraphrase every question not final in ``out``; append a row per question to ``out``.

    A row is ``{"id", "original", "text", "status": "rewritten"|"flagged", "attempts",
    "reason", "transport", "backend"}``; ``text`` is the checked rewrite, or the original when
    flagged. Returns :func:`report` over all of ``questions``; ``progress`` hears of every
    chunk written (stage ``paraphrasing``).
    """
    if attempts < 1:
        raise UserError(f"attempts must be at least 1, got {attempts}")
    if not 0 <= max_overlap < 1:
        raise UserError(f"max_overlap must be in [0, 1), got {max_overlap}")
    path = Path(out)
    settings = {**getattr(backend, "settings", {"backend": getattr(backend, "name", "")}),
                "max_overlap": max_overlap}
    keys = {q.id: row_key(q, settings) for q in questions}
    done = _load_cache(path, keys, {q.id: q for q in questions})
    # Rewrite the file without the rows to redo, so each id appears once; the file is made
    # only when it has a row, so a command that fails first (an endpoint's 401) leaves none.
    if done:
        with atomic_write(path) as kept:
            kept.writelines(json.dumps(r) + "\n" for r in done.values())
    elif path.is_file():  # only rows to redo: they are asked again
        path.unlink()
    todo = [q for q in questions if q.id not in done]
    finished = len(questions) - len(todo)
    if progress is not None:
        progress(Progress("paraphrasing", finished, len(questions), "q"))
    with refused_writes(path, "the rows written before are kept; rerun to resume"), \
            contextlib.ExitStack() as stack:
        f: IO[str] | None = None
        for start in range(0, len(todo), CHUNK):
            rows = _paraphrase_chunk(todo[start:start + CHUNK], backend, attempts, max_overlap)
            if f is None:  # opened (made) once there is a row to write
                f = stack.enter_context(open(path, "a", encoding="utf-8"))
            for row in rows:
                row["key"] = keys[row["id"]]
                f.write(json.dumps(row) + "\n")
                done[row["id"]] = row
            f.flush()
            finished += min(CHUNK, len(todo) - start)
            if progress is not None:
                progress(Progress("paraphrasing", finished, len(questions), "q"))
    return report([done[q.id] for q in questions if q.id in done])


def _paraphrase_chunk(chunk: Sequence[Question], backend: Backend, attempts: int,
                      max_overlap: float) -> list[dict]:
    name = getattr(backend, "name", type(backend).__name__)
    pending, rows = list(chunk), []
    for attempt in range(attempts):
        retry = []
        for q, reply in zip(pending, backend(pending, attempt), strict=True):
            text: str | None
            reason: str | None
            if isinstance(reply, Failure):
                reason, transport, text = reply.reason, True, None
            else:
                text = extract_rewrite(reply)
                reason, transport = check_rewrite(q.text, text, max_overlap=max_overlap), False
            if reason is None or attempt == attempts - 1:
                rows.append({
                    "id": q.id, "original": q.text, "text": q.text if reason else text,
                    "status": "flagged" if reason else "rewritten", "attempts": attempt + 1,
                    "reason": reason, "transport": transport, "backend": name,
                })
            else:
                retry.append(q)
        pending = retry
        if not pending:
            break
    return rows
