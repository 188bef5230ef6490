"""``zerogap import``: an lm-evaluation-harness sample log as a per-question counts file.

``zerogap score`` reads such logs directly; this command converts one explicitly (for example
to keep the counts beside a paper's other inputs), with the log's path, digest, repeats and
grading mode as the counts file's provenance header.
"""

from __future__ import annotations

import argparse
import os
import sys

from zerogap.cli.flags import add_grading, add_out

EXAMPLES = """examples (repeats: 50 in the task's YAML; see docs/lm-eval.md):
  lm-eval run --model hf --model_args pretrained=MODEL --tasks gsm8k_cot \\
      --gen_kwargs do_sample=true,temperature=0.7 --log_samples --output_path out/clean
  zerogap import out/clean --out clean.jsonl
  zerogap import out/clean/MODEL/samples_gsm8k_cot_2026-11-30T10-00-00.jsonl --out clean.jsonl
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "import", help="convert an lm-evaluation-harness sample log into per-question counts",
        description=__doc__, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("log", help="samples_<task>_<date>.jsonl written with --log_samples, or the "
                               "--output_path folder holding it")
    add_out(p, "a per-question counts file")
    add_grading(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from zerogap.cli.output import json_destination, written_file
    from zerogap.errors import DataError
    from zerogap.io.counts import write_counts
    from zerogap.io.lmeval import find_samples, read_lmeval
    from zerogap.provenance import file_record
    from zerogap.tasks.extract import target_grader

    grade = target_grader(args.grading)
    out = json_destination(args.out, "--out", inputs=[args.log])
    path = args.log
    if os.path.isdir(path):
        path = find_samples(path)
        if path is None:
            raise DataError(f"{args.log}: no lm-evaluation-harness samples_*.jsonl in this "
                            "folder or its subfolders (run the harness with --log_samples)")
    log = read_lmeval(path, grade=grade)
    c = log.counts
    with written_file(out) as written:
        write_counts(written, c.ids, c.correct, c.samples, c.first, provenance=file_record(
            path, lmeval={"repeats": log.repeats, "grading": args.grading}))
    print(f"wrote {len(c)} documents ({log.repeats} responses each) to {out}", file=sys.stderr)
    return 0
