"""Real parts for engine tests: a byte-level tokenizer, a weight-free tiny Llama, a toy task.

Imported by the tests here and by the scripts their subprocesses run (``sys.path`` gets this
folder), so the same task is registered in both.
"""

from __future__ import annotations

import re
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
