"""``zerogap paraphrase``: a checked PQ set (paper Appendix A) from a local model or an endpoint."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zerogap.cli.flags import (
    add_config_arguments,
    add_limit,
    add_model,
    add_out,
    add_running_arguments,
    check_given,
    questions_by_ids,
)
from zerogap.cli.output import json_destination, report_stream, written_file
from zerogap.errors import UserError
from zerogap.progress import progress_bars

EXAMPLES = """examples:
  zerogap paraphrase --task arith --split-file runs/laptop/split.json --model embedded \\
      --out runs/pq.jsonl
  export DEEPSEEK_API_KEY=...
  zerogap paraphrase --task gsm8k --task-option path=data/gsm8k \\
      --split-file runs/llama2/split.json \\
      --base-url https://api.deepseek.com/v1 --endpoint-model deepseek-chat \\
      --api-key-env DEEPSEEK_API_KEY --out runs/gsm8k-pq.jsonl
  zerogap contaminate ... --paraphrases runs/gsm8k-pq.jsonl --out runs/llama2-pq
"""

# The rewrites' sampling, from the runs' declarations (a rewrite is longer than an answer's
# first line but shorter than a chain of thought: 160 tokens).
SAMPLING = ("max_new_tokens", "seed", "temperature")


def register(subparsers) -> None:
    from zerogap.tasks.paraphrase import DEFAULT_MAX_OVERLAP

    p = subparsers.add_parser(
        "paraphrase", help="rewrite questions keeping every number (PQ), checked and resumable",
        description="Rewrite a task's questions with a language model; every rewrite must keep "
                    "the multiset of numbers and share at most --max-overlap of the original's "
                    "word bigrams, else it is retried and finally kept as the original, flagged.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from zerogap.engine.base import SamplingSpec
    from zerogap.study.spec import SettingSpec

    add_config_arguments(p, SettingSpec, ("task", "task_options", "task_split"))
    add_config_arguments(p, SettingSpec, ("split_file",), unset=True,
                         defaults={"split_file": "the whole split"},
                         values={"split_file": "only its leaked questions: a split.json or a "
                                               "file of ids, one per line"})
    add_limit(p)
    g = p.add_argument_group("rewriter: a local model (--model) or an OpenAI-compatible "
                             "endpoint (--base-url), one of them")
    add_model(g, required=False)
    g.add_argument("--base-url", metavar="URL",
                   help="an endpoint, e.g. https://api.openai.com/v1 (default: none)")
    add_config_arguments(g, SamplingSpec, SAMPLING, defaults={"max_new_tokens": 160})
    g.add_argument("--endpoint-model", metavar="NAME",
                   help="endpoint: the model name to request (default: none; needed with "
                        "--base-url)")
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="endpoint: environment variable holding the key (never stored; "
                        "unset: a warning, and requests go without a key; '' for no key)")
    g.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="endpoint: seconds per request")
    g.add_argument("--concurrent", type=int, default=4, metavar="N",
                   help="endpoint: requests in flight at once")
    p.add_argument("--attempts", type=int, default=3, metavar="N",
                   help="tries per question before flagging")
    p.add_argument("--max-overlap", type=float, default=DEFAULT_MAX_OVERLAP, metavar="X",
                   help="most of the original's word bigrams a rewrite may keep, in [0, 1)")
    add_out(p, "a JSONL file of rewrites; a rerun resumes it")
    add_running_arguments(p, batch=False)
    p.set_defaults(func=_paraphrase)


def _paraphrase(args) -> int:
    from zerogap.config import parse_pairs
    from zerogap.engine.base import SamplingSpec
    from zerogap.tasks import task_from_strings
    from zerogap.tasks.paraphrase import EndpointBackend, LocalBackend, paraphrase

    if args.attempts < 1:
        raise UserError(f"--attempts must be at least 1, got {args.attempts}")
    if not 0 <= args.max_overlap < 1:
        raise UserError(f"--max-overlap must be in [0, 1), got {args.max_overlap}")
    check_given(args, SamplingSpec, SAMPLING)
    if bool(args.model) == bool(args.base_url):
        raise UserError("give --model SPEC (a local rewriter) or --base-url URL (an endpoint), "
                        "one of them")
    endpoint_wanted = bool(args.base_url)
    if endpoint_wanted and not args.endpoint_model:
        raise UserError("--base-url needs --endpoint-model (the model name to request)")
    if args.concurrent < 1 or not args.timeout > 0:
        raise UserError(f"--concurrent must be at least 1 and --timeout above 0, got "
                        f"{args.concurrent} and {args.timeout}")
    ids = None if args.split_file is None else Path(args.split_file)
    out = json_destination(args.out, "--out", inputs=[] if ids is None else [ids])
    task = task_from_strings(args.task, parse_pairs("--task-option", args.task_option))
    questions = task.questions(args.split)
    if ids is not None:
        questions = questions_by_ids(ids, questions, args.split, args.task)
    if args.limit is not None:
        if args.limit < 1:
            raise UserError(f"--limit must be at least 1, got {args.limit}")
        questions = questions[: args.limit]
    backend: EndpointBackend | LocalBackend
    if endpoint_wanted:
        endpoint = EndpointBackend(
            args.base_url, args.endpoint_model, api_key_env=args.api_key_env,
            temperature=args.temperature, timeout=args.timeout, workers=args.concurrent)
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
        local = LocalBackend(load_model(args.model, device=args.device),
                             temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                             seed=args.seed)
        if questions:  # the rewriter's chat template renders, or is refused before a write
            local.prompt(questions[0].text)
        backend = local
    with progress_bars(args.quiet) as progress, written_file(out) as path:
        counts = paraphrase(questions, backend, path, attempts=args.attempts,
                            max_overlap=args.max_overlap, progress=progress)
    print(f"{counts['questions']} questions: {counts['rewritten']} rewritten "
          f"({counts['retried']} after a retry), {counts['flagged']} flagged (kept as the "
          f"original) -> {out}", file=report_stream([out]))
    return 0
