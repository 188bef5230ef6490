"""``zerogap lm-eval``: lm-evaluation-harness's own command line, with ``--model zerogap``.

Everything after ``lm-eval`` goes to the harness unchanged (``zerogap lm-eval run --help`` is
its help); the only thing added is the ``zerogap`` model (:mod:`zerogap.harness`), which serves
generation requests with zerogap's engine under any strategy:

  zerogap lm-eval run --model zerogap \\
      --model_args pretrained=embedded,strategy=railcap,n=4 \\
      --tasks gsm8k_sampled --include_path examples/lm-eval --log_samples --output_path out/railcap
  zerogap score --clean out/clean --mitigated railcap=out/railcap

The task needs repeats: m, do_sample: true and a temperature for a solve probability per
question; examples/lm-eval/gsm8k_sampled.yaml is one (docs/lm-eval.md: it and the model
arguments).

lm-evaluation-harness 0.4.13 looks up models in its own registry only (no plugin entry
points), so the plain ``lm-eval`` command does not know ``--model zerogap``; from Python,
``import zerogap.harness`` registers it for ``lm_eval.simple_evaluate``. Needs the ``lmeval``
extra: ``pip install -e '.[lmeval]'`` from a checkout.
"""

from __future__ import annotations

import argparse
import sys

from zerogap.errors import UserError

NAME = "lm-eval"


def register(subparsers) -> None:
    # No arguments of its own: zerogap.cli.main hands everything after the command name on.
    p = subparsers.add_parser(
        NAME, help="run lm-evaluation-harness with zerogap's engine as --model zerogap",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    p.set_defaults(func=run, passthrough=[])


INSTALL = "pip install -e '.[lmeval]' from a checkout"


def run(args) -> int:
    from zerogap.cli import plain

    wants_help = args.passthrough[:1] in ([], ["-h"], ["--help"])
    if wants_help:  # what zerogap adds, then the harness's own help
        print(plain(__doc__))
    try:
        from lm_eval.__main__ import cli_evaluate
    except ImportError:
        if wants_help:
            print(f"lm-evaluation-harness is not installed, so its own flags are not shown: "
                  f"{INSTALL}")
            return 0
        raise UserError(f"needs lm-evaluation-harness: {INSTALL}") from None
    import zerogap.harness  # noqa: F401  (registers --model zerogap)

    saved = sys.argv
    sys.argv = [NAME, *args.passthrough]
    try:
        cli_evaluate()
    finally:
        sys.argv = saved
    return 0
