"""The ``zerogap`` command.

Each subcommand lives in its own module that exposes ``register(subparsers)``; that function adds
its parser and sets ``func`` to a callable taking the parsed arguments and returning an exit code.
Modules are imported only when listed here, so ``zerogap score`` never imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Subcommand modules, in the order ``zerogap --help`` lists them.
COMMAND_MODULES = (
    "zerogap.score_cli",
    "zerogap.task_cli",
    "zerogap.run_cli",
    "zerogap.neurons_cli",
    "zerogap.evaluate_cli",
)

EPILOG = """examples:
  zerogap score --clean clean.jsonl --mitigated railcap=railcap.jsonl --mitigated identity=id.jsonl
"""


class UserError(Exception):
    """A problem with the user's input; printed as one line, without a traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zerogap",
        description="Measure and mitigate benchmark contamination (SA-PPG, RailCap).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe surfaces here, not at interpreter exit
        return code
    except (UserError, FileNotFoundError, ValueError) as err:
        print(f"zerogap {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (``zerogap runs show DIR | head``): stop quietly, as Unix tools do,
        # pointing stdout at /dev/null so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print(f"zerogap {args.command}: interrupted", file=sys.stderr)
        return 130
