"""Fuzzing every file reader the command line reaches (issue 14): random bytes, random JSON and
JSON shaped like each file, fed through the real entry point ``zerogap.cli.main``.

Whatever the file holds, the command either succeeds or refuses it with exit code 2 and one
line on stderr, never a traceback, and writes nothing while refusing. Each command is set up so
that a file that happens to be valid still stops before any model loads (a model path that does
not exist, or ``--device bogus``), so an example costs milliseconds. Readers covered: counts
files and lm-evaluation-harness logs (``score``), task JSONL (``task show jsonl``), exemplar
files (``--exemplars``), leaked-id files (``neurons --leaked``), neuron lists
(``--set neurons=``), study TOML files (``evaluate FILE``; also with deeply nested and
mistyped values, issue 22) and split files (``--split``). Study folders are fuzzed in
``tests/analysis/test_study_folder.py``.
"""

import contextlib
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerogap import cli

CLEAN = str(Path(__file__).resolve().parents[1] / "examples" / "clean.jsonl")
NOWHERE = "./no-such-model"

# Any JSON value, NaN and infinities included (Python's json writes and reads them).
SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats()
           | st.text(max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)


def records(fields: tuple[str, ...], values=VALUES):
    """JSON objects whose keys are mostly the reader's own fields, with random values."""
    keys = st.sampled_from(fields) | st.text(max_size=6)
    return st.dictionaries(keys, values, max_size=len(fields) + 1)


def jsonl(record_strategy):
    return st.lists(record_strategy | VALUES, max_size=4).map(
        lambda rows: "\n".join(json.dumps(r) for r in rows).encode())


def toml(top: tuple[str, ...], table: tuple[str, ...]):
    """Text in TOML's shape: ``key = <JSON value>`` lines and ``[[setting]]`` tables. Many JSON
    values are TOML values too; the rest (null, objects, NaN) exercise the TOML errors."""
    def render(doc):
        head, tables = doc
        lines = [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in head.items()]
        for entry in tables:
            lines += ["[[setting]]", *(f"{json.dumps(k)} = {json.dumps(v)}"
                                       for k, v in entry.items())]
        return "\n".join(lines).encode()

    return st.tuples(records(top, SCALARS | st.lists(SCALARS, max_size=3)),
                     st.lists(records(table, SCALARS), max_size=2)).map(render)


def _contents(shaped):
    return st.binary(max_size=200) | jsonl(VALUES) | shaped


COUNT_FIELDS = ("id", "correct", "samples", "first", "outcomes", "sample", "provenance")
LMEVAL_FIELDS = ("doc_id", "resps", "target", "doc_hash", "filter", "doc", "filtered_resps")
QA_FIELDS = ("question", "answer")
STUDY_KEYS = ("out", "strategies", "m", "temperature", "max_new_tokens", "seed", "bins",
              "resamples", "margin", "level", "calibration_size", "neuron_block", "title",
              "ablation", "controls", "all_controls", "neuron_candidates")
SETTING_KEYS = ("name", "clean", "contaminated", "task", "base", "task_options", "task_split",
                "split_file", "limit")
NEURON_LISTS = st.fixed_dictionaries({
    "format": st.just("zerogap-shortcut-neurons") | st.text(max_size=6),
    "neurons": st.lists(st.lists(st.integers(-3, 2**64), max_size=3) | VALUES, max_size=4)
    | VALUES,
}, optional={"meta": VALUES}).map(lambda r: json.dumps(r).encode())
SPLITS = records(("leaked", "unleaked"), st.lists(st.text(max_size=8) | VALUES, max_size=3)
                 | VALUES).map(lambda r: json.dumps(r).encode())


def nested_toml():
    """Study files whose values nest deeply or have the wrong type (issue 22): one valid
    setting, then a study key, a setting key or a [sweep] key set to an array nested 1 to
    5,000 deep, or to any TOML-shaped value."""
    setting = '[[setting]]\nclean = "./no-such-model"\ncontaminated = "embedded"\n' \
              'task = "arith"\n'

    def render(doc):
        where, key, depth, value = doc
        text = "[" * depth + json.dumps(value) + "]" * depth
        if where == "study":
            return f"{key} = {text}\n{setting}".encode()
        if where == "setting":
            return f"{setting}{key} = {text}\n".encode()
        return f'[sweep]\nmodels = "."\n{key} = {text}\n'.encode()

    keys = st.sampled_from((*STUDY_KEYS, *SETTING_KEYS, "models", "epochs", "copies", "sweep",
                            "setting"))
    return st.tuples(st.sampled_from(("study", "setting", "sweep")), keys,
                     st.integers(0, 5000) | st.integers(0, 3), SCALARS).map(render)

# reader -> (file name, what the file may hold, argv given the file and a scratch folder)
READERS = {
    "counts": ("counts.jsonl", _contents(jsonl(records(COUNT_FIELDS))),
               lambda f, w: ["score", "--clean", f, "--mitigated", f"r={f}",
                             "--resamples", "0", "--noise-sims", "5", "--json", w / "s.json"]),
    "counts-csv": ("counts.csv", _contents(st.lists(st.lists(SCALARS.map(str), max_size=4),
                                                    max_size=4).map(
        lambda rows: "\n".join(",".join(r) for r in [list(COUNT_FIELDS[:3]), *rows]).encode())),
                   lambda f, w: ["score", "--clean", CLEAN, "--mitigated", f"r={f}",
                                 "--resamples", "0", "--noise-sims", "5"]),
    "lmeval-log": ("samples_gsm8k.jsonl", _contents(jsonl(records(LMEVAL_FIELDS))),
                   lambda f, w: ["score", "--clean", f, "--mitigated", f"r={f}",
                                 "--resamples", "0", "--noise-sims", "5"]),
    "task-jsonl": ("test.jsonl", _contents(jsonl(records(QA_FIELDS))),
                   lambda f, w: ["task", "show", "jsonl", "--task-option", f"path={f}",
                                 "--index", "0"]),
    "exemplars": ("exemplars.jsonl", _contents(jsonl(records(QA_FIELDS))),
                  lambda f, w: ["task", "show", "arith", "--index", "0", "--task-option", "k=1",
                                "--task-option", f"exemplars={f}"]),
    "leaked-ids": ("leaked.txt", _contents(st.lists(st.sampled_from(["test-0", "test-1"])
                                                    | st.text(max_size=8), max_size=4).map(
        lambda ids: "\n".join(ids).encode())),
                   lambda f, w: ["neurons", "--base", NOWHERE, "--contaminated", NOWHERE,
                                 "--clean", NOWHERE, "--task", "arith", "--split-file", f,
                                 "--out", w / "neurons.json"]),
    "neuron-list": ("neurons.json", _contents(NEURON_LISTS),
                    lambda f, w: ["sample", "--model", NOWHERE, "--task", "arith", "--strategy",
                                  "shortcut", "--set", f"neurons={f}", "--set",
                                  f"base={NOWHERE}", "--out", w / "run", "--quiet"]),
    "study-toml": ("study.toml", _contents(toml(STUDY_KEYS, SETTING_KEYS)),
                   lambda f, w: ["evaluate", f, "--out", w / "out", "--device", "bogus",
                                 "--quiet"]),
    "study-toml-nested": ("study.toml", _contents(nested_toml()),
                          lambda f, w: ["evaluate", f, "--out", w / "out", "--device", "bogus",
                                        "--quiet"]),
    "split-json": ("split.json", _contents(SPLITS),
                   lambda f, w: ["evaluate", "--clean", "embedded", "--contaminated", "embedded",
                                 "--task", "arith", "--split-file", f, "--out", w / "out",
                                 "--device", "bogus", "--quiet"]),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_no_file_content_gets_a_traceback(reader):
    name, contents, argv_for = READERS[reader]

    @settings(max_examples=40, deadline=None)
    @given(contents)
    def check(content: bytes):
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            path = work / name
            path.write_bytes(content)
            err = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                code = cli.main([str(a) for a in argv_for(path, work)])
            message = err.getvalue()
            assert code in (0, 2), (code, message)
            if code == 2:
                assert message.count("\n") == 1 and ": error: " in message, message
                assert sorted(p.name for p in work.iterdir()) == [name], message

    check()
