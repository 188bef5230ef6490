"""Real parts for the tests: a byte-level tokenizer, a weight-free tiny Llama, a toy task, and
the ``zerogap sample`` command line run in this process or in a subprocess.

Imported by the tests (``tests/conftest.py`` puts this folder on ``sys.path``) and by the scripts
their subprocesses run (:data:`RUN_SCRIPT`), so the same task is registered in both.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import tomllib
from pathlib import Path

from zerogap.tasks.base import Grade, Question, register_task, task_names

VOCAB = 257  # 256 byte tokens and one end-of-text token


def byte_tokenizer():
    """A byte-level BPE tokenizer without merges: every byte is one token, id 256 is EOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab["<eos>"] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", pad_token="<eos>")


def tiny_model(seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         tie_word_embeddings=True, eos_token_id=VOCAB - 1,
                         pad_token_id=VOCAB - 1, bos_token_id=None)
    return LlamaForCausalLM(config).eval()


def save_tiny(folder: Path) -> Path:
    """Write the tiny model and its tokenizer as a loadable model folder."""
    tiny_model().save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


PAIRS = [(2, 3), (10, 7), (4, 4), (21, 9), (6, 1), (13, 13), (8, 5), (30, 12), (1, 0), (9, 9)]


class ToyArith:
    """Additions with a 2-shot prompt; the grader compares the first integer of the response."""

    name = "toy-arith"

    def __init__(self, n: int = len(PAIRS), stop: str = "\n\n"):
        if not 1 <= n <= len(PAIRS):
            raise ValueError(f"n must be in 1..{len(PAIRS)}, got {n}")
        self.n = n
        self.stop = (stop,)

    def questions(self, split: str = "test") -> list[Question]:
        if split != "test":
            raise ValueError(f"toy-arith has only a test split, not {split!r}")
        return [Question(f"test-{i}", f"{a}+{b}=?", str(a + b))
                for i, (a, b) in enumerate(PAIRS[: self.n])]

    def prompt(self, question: Question) -> str:
        return f"Q: 1+1=?\nA: 2\n\nQ: 3+4=?\nA: 7\n\nQ: {question.text}\nA:"

    def grade(self, question: Question, response: str) -> Grade:
        found = re.search(r"-?\d+", response)
        extracted = found.group(0) if found else None
        return Grade(extracted, extracted == question.answer)

    def config(self) -> dict:
        return {"n": self.n, "stop": self.stop[0]}


# pytest's doctest collection imports this file a second time under another module name.
if ToyArith.name not in task_names():
    register_task(ToyArith.name)(ToyArith)


# -- the run command line -------------------------------------------------------------------------

HERE = Path(__file__).parent
SRC = HERE.parent / "src"
# The real dispatcher, with only the run commands (sample, greedy, runs): the tests that use it
# are about those, and a subprocess starts faster without the other command modules.
RUN_COMMANDS = ("zerogap.cli.run",)
RUN_SCRIPT = f"""
import sys
sys.path[:0] = [{str(HERE)!r}, {str(SRC)!r}]
import helpers
from zerogap import cli
cli.COMMAND_MODULES = {RUN_COMMANDS!r}
sys.exit(cli.main(sys.argv[1:]))
"""


def run_main(argv: list[str]) -> int:
    """``zerogap`` with :data:`RUN_COMMANDS`, in this process; returns the exit code."""
    from zerogap import cli

    saved, cli.COMMAND_MODULES = cli.COMMAND_MODULES, RUN_COMMANDS
    try:
        return cli.main(argv)
    finally:
        cli.COMMAND_MODULES = saved


def sample_args(model_dir, run_dir, *extra) -> list[str]:
    """``zerogap sample`` of toy-arith (m = 6, T = 0.9, 24 new tokens, seed 3) into
    ``run_dir``."""
    return ["sample", "--model", str(model_dir), "--task", "toy-arith", "-m", "6", "-T", "0.9",
            "--max-new-tokens", "24", "--seed", "3", "--out", str(run_dir), "--quiet",
            "--task-option", "stop=Q:", *extra]


def refused(capsys, argv, *fragments) -> str:
    """Run the CLI in process: it must exit 2 with one line on stderr (no traceback) holding
    every fragment; returns that line."""
    from zerogap import cli

    code = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("zerogap ") and "Traceback" not in err, err
    for fragment in fragments:
        assert str(fragment) in err, err
    return err


def stored_samples(run_dir) -> list[tuple]:
    """Every stored sample of ``run_dir``'s store, in (question, sample) order."""
    from zerogap.store import DB_NAME

    con = sqlite3.connect(run_dir / DB_NAME)
    try:
        return con.execute("SELECT question_id, sample, text, n_tokens, finish, correct "
                           "FROM samples ORDER BY question_id, sample").fetchall()
    finally:
        con.close()


def count_stored(run_dir) -> int:
    """Samples in ``run_dir``'s store, read-only; 0 without a store or while it cannot be read
    (a writer mid-creation)."""
    from zerogap.store import DB_NAME

    if not (run_dir / DB_NAME).exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{run_dir / DB_NAME}?mode=ro", uri=True)
        try:
            return con.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def tree_digest(folder: Path) -> dict[str, str]:
    """Each file under ``folder`` (relative path) -> its SHA-256: a tree unchanged, byte for
    byte."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def install_example(example: Path, site: Path) -> None:
    """What ``pip install example`` leaves in ``site`` for entry points (a plugin under
    ``examples/``): the module and a dist-info with METADATA and entry_points.txt, both from
    the example's own files; no network."""
    project = tomllib.loads((example / "pyproject.toml").read_text())["project"]
    for module in example.glob("*.py"):
        (site / module.name).write_text(module.read_text())
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\n"
                                   f"Version: {project['version']}\n")
    lines = [f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items())
             for group, entries in project["entry-points"].items()]
    (info / "entry_points.txt").write_text("\n".join(lines))
