"""Every command the docs show runs as printed from a checkout.

The fenced shell blocks of README.md, docs/*.md and examples/README.md are read line by line.
A zerogap command that needs no model and reads only files of the checkout is executed (exit
code 0, and where the page prints its output under ``<!-- output of the command above -->``,
that output exactly); every other zerogap command is parsed by zerogap's own parser in a fresh
interpreter, where a removed flag, an old spelling or a second spelling of a flag fails, and
what it hands to lm-evaluation-harness by the harness's parser. ``python bench/...`` lines may
use only the flags their script declares, ``make`` only the Makefile's targets, ``pip install``
only a checkout's path and its declared extras. The pages stand alone: every relative link
leads to a file and a heading that exist, and no page cites a file outside the repository,
holds a commit hash, or dates a run (earlier measurements live in git history). The ``>>>``
examples of a page's fenced ``python`` blocks run as one doctest per page, from the checkout's
root (docs/python-api.md reproduces ``zerogap score``'s numbers on examples/*.jsonl that way).
"""

from __future__ import annotations

import ast
import doctest
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

import helpers  # tests/helpers.py, on sys.path through tests/conftest.py

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples" / "README.md"]
SHELL = ("bash", "sh", "shell")
OUTPUT_MARK = "<!-- output of the command above -->"
# Commands that read files and print, and need no model: executed where their inputs exist.
RUNNABLE = {"score", "import", "report", "runs", "strategy", "task"}
# Flags whose value is a file or folder the command writes, not one it reads.
WRITES = {"--out", "--output-path", "--json", "--counts", "--jsonl", "--parquet", "--output_path"}
OTHER_PROGRAMS = {"rm", "export", "ray", "cd", "git", "mkdir"}
FENCE = re.compile(r"^```(\S*)\n(.*?)^```\n", re.M | re.S)


@dataclass(frozen=True)
class Command:
    page: Path
    line: int
    words: tuple[str, ...]
    after_install: bool  # a pip install earlier in its block: what it names may be needed
    output: str | None  # what the page prints as this command's output

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _logical_lines(block: str, first: int):
    """(line number, text) of each command line of a shell block, continuations joined."""
    pending, start = "", first
    for number, raw in enumerate(block.splitlines(), first):
        if not pending:
            start = number
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        yield start, pending + raw
        pending = ""


def _commands(page: Path):
    text = page.read_text(encoding="utf-8")
    for match in FENCE.finditer(text):
        if match.group(1) not in SHELL:
            continue
        first = text.count("\n", 0, match.start(2)) + 1
        rest = text[match.end():].lstrip("\n")
        output = None
        if rest.startswith(OUTPUT_MARK):
            shown = FENCE.match(rest[len(OUTPUT_MARK):].lstrip("\n"))
            assert shown, f"{page.name}:{first}: {OUTPUT_MARK} is not followed by a fenced block"
            output = shown.group(2)
        found, installed = [], False
        for number, line in _logical_lines(match.group(2), first):
            # $(zerogap models path embedded) inside an argument: its own command, then a value.
            inner = re.findall(r"\$\(([^()]*)\)", line)
            line = re.sub(r"\$\(([^()]*)\)", "SUBSTITUTED", line)
            for words in [shlex.split(part, comments=True) for part in [*inner, line]]:
                while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                    words = words[1:]  # VAR=value before the program
                if words:
                    found.append(Command(page, number, tuple(words), installed, None))
                    installed = installed or words[:2] == ["pip", "install"]
        if output is not None:
            assert len(found) == 1, f"{page.name}:{first}: output shown for {len(found)} commands"
            found = [Command(page, found[0].line, found[0].words, False, output)]
        yield from found


COMMANDS = [command for page in PAGES for command in _commands(page)]


def _zerogap_argv(words: tuple[str, ...]) -> list[str] | None:
    """The arguments after ``zerogap`` when ``words`` run zerogap, else None."""
    if words[0] in ("zerogap", ".venv/bin/zerogap"):
        return list(words[1:])
    for i in range(len(words) - 1):  # python -m zerogap, accelerate launch ... -m zerogap
        if words[i] == "-m" and words[i + 1] == "zerogap":
            return list(words[i + 2:])
    return None


ZEROGAP = [c for c in COMMANDS if _zerogap_argv(c.words) is not None]


def _reads(argv: list[str]) -> list[str]:
    """The paths ``argv`` reads: path-like words (or values of KEY=PATH) that no write flag
    takes."""
    paths = []
    for before, word in zip(["", *argv], argv, strict=False):
        if before in WRITES or word.startswith("-") or "://" in word:
            continue
        value = word.split("=", 1)[-1]
        if "/" in value or re.search(r"\.(jsonl|json|toml|csv|txt|gguf|yaml)$", value):
            paths.append(value)
    return paths


# The checkout's folders a run may read; it runs in a folder of its own holding links to them,
# so that whatever a command writes lands outside the checkout.
READABLE = ("examples", "docs")


def _runnable(command: Command) -> bool:
    argv = _zerogap_argv(command.words)
    if argv is None or command.after_install or not argv or argv[0] == "lm-eval":
        return False
    asks_help = any(word in ("-h", "--help", "--version") for word in argv)
    return asks_help or (argv[0] in RUNNABLE and all(
        Path(p).parts[0] in READABLE and (ROOT / p).exists() for p in _reads(argv)))


RUNS = [c for c in ZEROGAP if _runnable(c)]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("cwd")
    for name in READABLE:
        (cwd / name).symlink_to(ROOT / name)
    return cwd


# One fresh interpreter parses every command: it sees the example plugins installed, and no
# registration other tests made in this process.
PARSE = r"""
import argparse, contextlib, io, json, sys
from zerogap.cli import _split_passthrough, build_parser

def leaf(parser, words):
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = next((w for w in words if subs and w in subs[0].choices), None)
        if name is None:
            return parser
        parser, words = subs[0].choices[name], words[words.index(name) + 1:]

def parse(parser, argv):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit as stop:
        if stop.code:
            return err.getvalue().strip().splitlines()[-1:]
    return [line for line in err.getvalue().splitlines() if "note:" in line]

out = []
for argv in json.load(sys.stdin):
    own, passed = _split_passthrough(argv)
    problems = parse(build_parser(), own)
    # A flag's first long spelling, the one docs/flags.md lists (short ones are not checked).
    first = {s: longs[0] for a in leaf(build_parser(), own)._actions
             for longs in [[s for s in a.option_strings if s.startswith("--")]] for s in longs}
    problems += [f"{w.split('=')[0]} is a second spelling of {first[w.split('=')[0]]}"
                 for w in own if first.get(w.split("=")[0], w.split("=")[0]) != w.split("=")[0]]
    if passed:
        try:
            from lm_eval._cli import HarnessCLI
        except ImportError:
            problems.append("lm-evaluation-harness is not installed to parse this")
        else:
            problems += parse(HarnessCLI()._parser, passed)
    out.append(problems)
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def parsed(tmp_path_factory) -> dict[Command, list[str]]:
    site = tmp_path_factory.mktemp("site-packages")
    for plugin in ("no-stutter", "generate-backend"):
        helpers.install_example(ROOT / "examples" / plugin, site)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{site}"}
    done = subprocess.run([sys.executable, "-c", PARSE], input=json.dumps(
        [_zerogap_argv(c.words) for c in ZEROGAP]), capture_output=True, text=True, env=env,
        timeout=300, check=True)
    return dict(zip(ZEROGAP, json.loads(done.stdout), strict=True))


def test_the_pages_show_commands_and_some_of_them_run():
    assert len(ZEROGAP) >= 40 and len(RUNS) >= 10
    shown = [c for c in COMMANDS if c.output is not None]
    assert len(shown) >= 2 and set(shown) <= set(RUNS)


@pytest.mark.parametrize("command", ZEROGAP, ids=lambda c: c.where)
def test_each_zerogap_command_parses_with_the_flags_it_names_first(command, parsed):
    assert parsed[command] == [], f"{command.where}: {shlex.join(command.words)}"


@pytest.mark.parametrize("command", [c for c in ZEROGAP if "--include_path" in c.words],
                         ids=lambda c: c.where)
def test_the_harness_tasks_the_docs_name_are_in_the_folder_they_pass(command):
    words = list(command.words)
    folder = ROOT / words[words.index("--include_path") + 1]
    assert folder.is_dir(), f"{command.where}: --include_path {folder.name} is not in the checkout"
    tasks = {t for f in folder.glob("*.yaml") for t in re.findall(r"^task: (\S+)$",
                                                                   f.read_text(), re.M)}
    assert set(words[words.index("--tasks") + 1].split(",")) <= tasks


@pytest.mark.parametrize("command", RUNS, ids=lambda c: c.where)
def test_each_command_that_needs_no_model_runs_as_printed(command, checkout):
    done = subprocess.run([sys.executable, "-m", "zerogap", *_zerogap_argv(command.words)],
                          cwd=checkout, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, f"{command.where}: {done.stderr}"
    if command.output is not None:
        assert (done.stdout + done.stderr).rstrip() == command.output.rstrip(), (
            f"{command.where}: the page's output drifted; paste the command's output there")


OTHERS = [c for c in COMMANDS if _zerogap_argv(c.words) is None]


def _declared_flags(script: Path) -> set[str]:
    """The option strings of every ``add_argument`` call in ``script``'s source."""
    flags = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags |= {a.value for a in node.args
                      if isinstance(a, ast.Constant) and str(a.value).startswith("-")}
    return flags


def _makefile_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w.-]*)\s*:", (ROOT / "Makefile").read_text(), re.M))


def _makefile_variables() -> set[str]:
    """The variables a user may set on make's command line: those the Makefile declares with
    ``?=`` (a default the command line overrides)."""
    return set(re.findall(r"^([A-Z][A-Z_]*)\s*\?=", (ROOT / "Makefile").read_text(), re.M))


def _extras() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["optional-dependencies"])


@pytest.mark.parametrize("command", OTHERS, ids=lambda c: c.where)
def test_each_other_command_names_what_the_checkout_has(command):
    words = list(command.words)
    if words[0] in ("python", "python3") and words[1].endswith(".py"):
        script = ROOT / words[1]
        assert script.is_file(), f"{command.where}: {words[1]} is not in the checkout"
        unknown = {w.split("=")[0] for w in words[2:] if w.startswith("-")}
        unknown -= _declared_flags(script)
        assert not unknown, f"{command.where}: {words[1]} declares no {sorted(unknown)}"
    elif words[0] == "make":
        targets = [w for w in words[1:] if "=" not in w]
        assert set(targets) <= _makefile_targets(), f"{command.where}: no such make target"
        variables = {w.split("=")[0] for w in words[1:] if "=" in w}
        assert variables <= _makefile_variables(), f"{command.where}: no such make variable"
    elif words[:2] == ["pip", "install"]:
        for word in (w for w in words[2:] if not w.startswith("-")):
            name, _, extras = word.partition("[")
            if name.startswith("."):
                assert (ROOT / name).exists(), f"{command.where}: {name} is not in the checkout"
                assert set(filter(None, extras.rstrip("]").split(","))) <= _extras(), (
                    f"{command.where}: pyproject.toml declares no extra of {word}")
            else:
                assert not name.startswith("zerogap"), (
                    f"{command.where}: zerogap installs from a checkout (pip install -e .)")
    else:
        assert words[0] in OTHER_PROGRAMS, f"{command.where}: unknown program {words[0]}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_of_the_repository(page):
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.is_relative_to(ROOT) and file.exists(), f"{page.name}: {target}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", FENCE.sub("", file.read_text()), re.M)
            assert anchor in {_slug(h) for h in headings}, f"{page.name}: no heading #{anchor}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_page_stands_alone_and_is_no_lab_notebook(page):
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"\.\./shared|/work/|DESIGN\.md|reference/baselines", text)
    hashes = re.findall(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", text)
    assert hashes == [], f"{page.name} names commits: {hashes}"
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), f"{page.name} dates a run"


def test_the_readme_reaches_a_runnable_example_within_40_lines():
    first = next(c for c in COMMANDS if c.page == ROOT / "README.md")
    assert first.line <= 40 and first.words[:2] == ("make", "demo")


def _python_examples(page: Path) -> str:
    """The ``>>>`` examples of ``page``'s fenced python blocks, blank-line separated, with
    blank lines before each block's place so that doctest's line numbers are the page's."""
    text = page.read_text(encoding="utf-8")
    lines = [""] * (text.count("\n") + 1)
    for match in FENCE.finditer(text):
        if match.group(1) in ("python", "pycon") and ">>>" in match.group(2):
            first = text.count("\n", 0, match.start(2))
            for i, line in enumerate(match.group(2).splitlines()):
                lines[first + i] = line
    return "\n".join(lines)


DOCTEST_PAGES = [page for page in PAGES if ">>>" in _python_examples(page)]


def test_the_python_api_page_is_doctested():
    assert ROOT / "docs" / "python-api.md" in DOCTEST_PAGES
    assert ROOT / "docs" / "scoring.md" in DOCTEST_PAGES


@pytest.mark.parametrize("page", DOCTEST_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_pages_python_examples_run_as_printed(page, monkeypatch):
    monkeypatch.chdir(ROOT)  # the examples read examples/*.jsonl by their checkout paths
    name = str(page.relative_to(ROOT))
    test = doctest.DocTestParser().get_doctest(_python_examples(page), {}, name, name, 0)
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    result = runner.run(test, out=report.append)
    assert result.attempted > 0 and result.failed == 0, "".join(report)
