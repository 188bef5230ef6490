"""``zerogap paraphrase``: a checked PQ set (paper Appendix A) from a local model or an endpoint."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from zerogap.errors import UserError
from zerogap.io.files import check_output, read_text

EXAMPLES = """examples:
  zerogap paraphrase --task arith --ids runs/laptop/split.json --backend local --model embedded \\
      --out runs/pq.jsonl
  export DEEPSEEK_API_KEY=...
  zerogap paraphrase --task gsm8k --task-option path=data/gsm8k --ids runs/llama2/split.json \\
      --backend endpoint --base-url https://api.deepseek.com/v1 --endpoint-model deepseek-chat \\
      --api-key-env DEEPSEEK_API_KEY --out runs/gsm8k-pq.jsonl
  zerogap contaminate ... --paraphrases runs/gsm8k-pq.jsonl --out runs/llama2-pq
"""


def register(subparsers) -> None:
    from zerogap.tasks.paraphrase import DEFAULT_MAX_OVERLAP

    p = subparsers.add_parser(
        "paraphrase", help="rewrite questions keeping every number (PQ), checked and resumable",
        description="Rewrite a task's questions with a language model; every rewrite must keep "
                    "the multiset of numbers and share at most --max-overlap of the original's "
                    "word bigrams, else it is retried and finally kept as the original, flagged.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--task", required=True)
    p.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE",
                   help="task option, converted by its declared type ('zerogap task show')")
    p.add_argument("--split", default="test")
    p.add_argument("--ids", type=Path, default=None,
                   help="only these questions: a contaminate split.json (its leaked ids) or a "
                        "file of ids, one per line (default: the whole split)")
    p.add_argument("--limit", type=int, default=None, help="first N of those questions only")
    p.add_argument("--backend", choices=("local", "endpoint"), required=True)
    p.add_argument("--model", help="local backend: model spec (models.py)")
    p.add_argument("--device", default=None, help="local backend: torch device")
    p.add_argument("--max-new-tokens", type=int, default=160, help="local backend")
    p.add_argument("--seed", type=int, default=0, help="local backend: seed of attempt 1")
    p.add_argument("--base-url", help="endpoint backend: e.g. https://api.openai.com/v1")
    p.add_argument("--endpoint-model", help="endpoint backend: the model name to request")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY",
                   help="endpoint backend: environment variable holding the key (never stored; "
                        "unset: a warning, and requests go without a key; '' for no key)")
    p.add_argument("--timeout", type=float, default=60.0, help="endpoint backend: seconds")
    p.add_argument("--workers", type=int, default=4, help="endpoint backend: parallel requests")
    p.add_argument("-T", "--temperature", type=float, default=0.7)
    p.add_argument("--attempts", type=int, default=3, help="tries per question before flagging")
    p.add_argument("--max-overlap", type=float, default=DEFAULT_MAX_OVERLAP,
                   help="most of the original's word bigrams a rewrite may keep")
    p.add_argument("--out", required=True, type=Path, help="result JSONL (also the resume cache)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_paraphrase)


def read_ids(path: Path) -> list[str]:
    """Question ids from a ``split.json`` (its ``leaked`` list) or a file of ids, one a line."""
    text = read_text(path)
    if path.suffix == ".json":
        try:
            ids = json.loads(text)["leaked"]
        except (ValueError, KeyError, TypeError, RecursionError):  # not JSON, no list
            raise UserError(f"{path}: expected a split.json with a 'leaked' list") from None
    else:
        ids = [line.strip() for line in text.splitlines() if line.strip()]
    if not isinstance(ids, list) or not ids or not all(isinstance(q, str) for q in ids):
        raise UserError(f"{path}: no question ids")
    return ids


def _paraphrase(args) -> int:
    from zerogap.config import parse_pairs
    from zerogap.tasks import task_from_strings
    from zerogap.tasks.paraphrase import EndpointBackend, LocalBackend, paraphrase

    if args.attempts < 1:
        raise UserError(f"--attempts must be at least 1, got {args.attempts}")
    if not 0 <= args.max_overlap < 1:
        raise UserError(f"--max-overlap must be in [0, 1), got {args.max_overlap}")
    if not args.temperature > 0:
        raise UserError(f"--temperature must be > 0, got {args.temperature}")
    if args.backend == "local" and not args.model:
        raise UserError("--backend local needs --model")
    if args.backend == "endpoint" and not (args.base_url and args.endpoint_model):
        raise UserError("--backend endpoint needs --base-url and --endpoint-model")
    if args.backend == "local":
        from zerogap.engine.base import SamplingSpec

        SamplingSpec(m=1, max_new_tokens=args.max_new_tokens, seed=args.seed)  # its limits
    check_output(args.out, "--out", inputs=[] if args.ids is None else [args.ids])
    task = task_from_strings(args.task, parse_pairs("--task-option", args.task_option))
    questions = task.questions(args.split)
    if args.ids is not None:
        by_id = {q.id: q for q in questions}
        wanted = read_ids(args.ids)
        unknown = [q for q in wanted if q not in by_id]
        if unknown:
            raise UserError(f"{args.ids}: {len(unknown)} ids not in split {args.split!r} of "
                            f"{args.task} (first: {unknown[0]!r})")
        questions = [by_id[q] for q in wanted]
    if args.limit is not None:
        if args.limit < 1:
            raise UserError(f"--limit must be at least 1, got {args.limit}")
        questions = questions[: args.limit]
    backend: EndpointBackend | LocalBackend
    if args.backend == "endpoint":
        endpoint = EndpointBackend(
            args.base_url, args.endpoint_model, api_key_env=args.api_key_env,
            temperature=args.temperature, timeout=args.timeout, workers=args.workers)
        if endpoint.key_missing:
            print(f"zerogap paraphrase: warning: ${endpoint.key_missing} is not set; requests go "
                  "without a key (--api-key-env '' sends none without this warning)",
                  file=sys.stderr)
        backend = endpoint
    else:
        from zerogap.models import load_model

        if args.quiet:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        backend = LocalBackend(load_model(args.model, device=args.device),
                               temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                               seed=args.seed)
    counts = paraphrase(questions, backend, args.out, attempts=args.attempts,
                        max_overlap=args.max_overlap, progress=not args.quiet)
    print(f"{counts['questions']} questions: {counts['rewritten']} rewritten "
          f"({counts['retried']} after a retry), {counts['flagged']} flagged (kept as the "
          f"original) -> {args.out}")
    return 0
