"""An example third-party backend: transformers' own ``model.generate``, one question at a time.

It fills the whole contract of :class:`zerogap.engine.base.Backend` and declares that it runs
no intervention (``Capabilities``), so zerogap refuses a strategy that edits logits or patches
activations on it before any model loads. Each question's noise comes from a torch seed
hashed from (seed, question id), so a resumed run redraws no finished question and a question's
samples do not depend on which others share the call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from zerogap.engine.base import Capabilities, EngineOptions, Generation, register_backend
from zerogap.errors import UserError


def question_seed(seed: int, question_id: str) -> int:
    digest = hashlib.blake2b(f"{seed}\0{question_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@register_backend("hf-generate")
class GenerateBackend:
    """transformers' ``generate`` on a model zerogap loads (an example plugin)."""

    noise = "torch-seed-per-question-v1"
    capabilities = Capabilities(logits=False, patching=False, entropies=False, device=True)

    def __init__(self, model, tokenizer) -> None:
        self.model, self.tokenizer = model, tokenizer

    @classmethod
    def check_available(cls, options: EngineOptions) -> None:
        from zerogap.models import check_device

        check_device(options.device)

    @classmethod
    def start(cls, spec: str, options: EngineOptions):
        from zerogap.models import load_model

        loaded = load_model(spec, device=options.device, dtype=options.dtype)
        return loaded, cls(loaded.model, loaded.tokenizer)

    def _generate(self, prompt: str, spec, *, n: int, greedy: bool, seed: int) -> list[Generation]:
        import torch

        inputs = self.tokenizer(prompt, return_tensors="pt").to(self.model.device)
        torch.manual_seed(seed)
        out = self.model.generate(
            **inputs, do_sample=not greedy, num_return_sequences=n,
            max_new_tokens=spec.max_new_tokens, pad_token_id=self.tokenizer.eos_token_id,
            **({} if greedy else {"temperature": spec.temperature, "top_k": spec.top_k or 0,
                                  "top_p": spec.top_p or 1.0}))
        return [self._finish(row) for row in out[:, inputs["input_ids"].shape[1]:].tolist()]

    def _finish(self, ids: list[int]) -> Generation:
        eos = self.tokenizer.eos_token_id
        finish = "eos" if eos in ids else "length"
        ids = ids[: ids.index(eos)] if eos in ids else ids
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Generation(ids, text, finish)

    def _stopped(self, g: Generation, stop: Sequence[str]) -> Generation:
        cut = min((g.text.find(s) for s in stop if s in g.text), default=-1)
        return g if cut < 0 else Generation(g.token_ids, g.text[:cut], "stop")

    def sample(self, prompts, spec, *, question_ids, intervention=None, patch=None,
               progress=None, on_question=None):
        if intervention is not None or patch is not None:
            raise UserError("backend hf-generate runs no intervention")
        out = []
        for q, (prompt, qid) in enumerate(zip(prompts, question_ids, strict=True)):
            gens = [self._stopped(g, spec.stop) for g in self._generate(
                prompt, spec, n=spec.m, greedy=False, seed=question_seed(spec.seed, qid))]
            if on_question is not None:
                on_question(q, gens)
            out.append(gens)
        return out

    def greedy(self, prompts, spec, *, entropies=False, patch=None, progress=None,
               on_question=None):
        if entropies or patch is not None:
            raise UserError("backend hf-generate gives no entropies and runs no patch")
        out = []
        for q, prompt in enumerate(prompts):
            g = self._stopped(self._generate(prompt, spec, n=1, greedy=True, seed=0)[0],
                              spec.stop)
            if on_question is not None:
                on_question(q, g)
            out.append(g)
        return out

    def forced_ranks(self, prompts, forced):
        import torch

        ranks: list[list[int]] = []
        device = self.model.device
        for prompt, tokens in zip(prompts, forced, strict=True):
            prefix = self.tokenizer(prompt)["input_ids"]
            if not len(tokens):
                ranks.append([])
                continue
            with torch.no_grad():
                logits = self.model(torch.tensor([[*prefix, *tokens]], device=device)).logits[0]
            rows = logits[len(prefix) - 1 : len(prefix) - 1 + len(tokens)]  # row t: tokens[t]
            target = rows.gather(1, torch.tensor(list(tokens), device=device)[:, None])
            ranks.append(((rows > target).sum(1) + 1).tolist())
        return ranks

    def close(self) -> None:
        """Nothing to shut down."""
