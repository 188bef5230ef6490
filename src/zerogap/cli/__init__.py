"""The ``zerogap`` command.

Each command group lives in its own module of this package that exposes ``register(subparsers)``;
that function adds its parser and sets ``func`` to a callable taking the parsed arguments and
returning an exit code. Adding a command is adding a module and its name to
:data:`COMMAND_MODULES`. Modules are imported only when listed there, and none of them imports
torch at module level, so ``zerogap score`` never loads it.

Errors: zerogap's own (:class:`zerogap.errors.ZerogapError`) are the user's to fix and print as
one line with exit code 2, a config field set on the command line named by the flag the user
typed; anything else is a bug and keeps its traceback. ``--traceback`` shows the traceback of a
user error as well. A mistyped command, option or choice is one line naming the command it
was given to and the nearest known name, exit code 2 (:class:`zerogap.cli.flags.Parser`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import traceback

from zerogap import __version__
from zerogap.errors import UserError, ZerogapError

__all__ = ["COMMAND_MODULES", "UserError", "build_parser", "main"]

# Commands that hand every argument after their name to another program's command line.
PASSTHROUGH = ("lm-eval",)

# Command modules, in the order ``zerogap --help`` lists them.
COMMAND_MODULES = (
    "zerogap.cli.score",
    "zerogap.cli.lmeval",
    "zerogap.cli.harness",
    "zerogap.cli.models",
    "zerogap.cli.task",
    "zerogap.cli.strategy",
    "zerogap.cli.run",
    "zerogap.cli.neurons",
    "zerogap.cli.contaminate",
    "zerogap.cli.paraphrase",
    "zerogap.cli.evaluate",
)

EPILOG = """examples:
  zerogap score --clean clean.jsonl --mitigated railcap=railcap.jsonl --mitigated identity=id.jsonl
  zerogap score --clean runs/clean --mitigated railcap=runs/railcap
"""


def build_parser() -> argparse.ArgumentParser:
    from zerogap.cli.flags import Parser

    parser = Parser(
        prog="zerogap",
        description="Measure and mitigate benchmark contamination (SA-PPG, RailCap).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--traceback", action="store_true",
                        help="show the traceback of user errors too (bugs always show one)")
    parser.add_argument("--version", action="version", version=f"zerogap {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    _plain_help(parser)
    return parser


_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj):`(~?)([^`]+)`")


def plain(text: str | None) -> str | None:
    """``text`` without reStructuredText markup: command descriptions are module docstrings,
    written for the API docs, and a terminal shows the markup as it is.

    >>> plain("``zerogap score`` reads :mod:`zerogap.io.counts` via :func:`~zerogap.io.x.read`")
    'zerogap score reads zerogap.io.counts via read'
    """
    if text is None:
        return None
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    return text.replace("``", "")


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Apply :func:`plain` to ``parser``'s texts and to those of its subcommands, recursively,
    and show every flag's default in its help (:class:`~zerogap.cli.flags.DefaultsShown`)."""
    from zerogap.cli.flags import with_defaults_shown

    parser.description, parser.epilog = plain(parser.description), plain(parser.epilog)
    parser.formatter_class = with_defaults_shown(parser.formatter_class)
    for action in parser._actions:
        action.help = plain(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = plain(choice.help)
            for sub in action.choices.values():
                _plain_help(sub)


def one_line(text: str) -> str:
    r"""``text`` with its control characters escaped, so an error quoting a user's file (a
    field name holding a newline, a terminal escape) still prints as one line.

    >>> print(one_line("field a\nb unknown\x1b[2J"))
    field a\nb unknown\x1b[2J
    """
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _split_passthrough(argv: list[str]) -> tuple[list[str], list[str]]:
    """``argv`` cut after a :data:`PASSTHROUGH` command name (the first word that is not an
    option), so that argparse never reads the other program's options.

    >>> _split_passthrough(["--traceback", "lm-eval", "run", "--model", "zerogap"])
    (['--traceback', 'lm-eval'], ['run', '--model', 'zerogap'])
    >>> _split_passthrough(["score", "--clean", "lm-eval"])
    (['score', '--clean', 'lm-eval'], [])
    """
    command = next((i for i, word in enumerate(argv) if not word.startswith("-")), None)
    if command is None or argv[command] not in PASSTHROUGH:
        return argv, []
    return argv[: command + 1], argv[command + 1:]


def _fix_threads(threads: int) -> None:
    """``--threads``: every phase's torch threads (sampling, fine-tunes, neuron location)
    fixed, as ``ZEROGAP_THREADS`` fixes them, for this process and the ones it starts."""
    from zerogap.engine.base import EngineOptions
    from zerogap.engine.threads import ENV

    EngineOptions(threads=threads)  # its declared bounds, in the flag's words
    os.environ[ENV] = str(threads)


def _check_environment() -> None:
    """zerogap's environment overrides checked with the flags, before any command runs: a bad
    ``ZEROGAP_THREADS`` or ``ZEROGAP_PREFIX_CACHE_MB`` is one line here, not after a model has
    loaded nor behind a missing model path."""
    from zerogap.engine.threads import override

    override()
    if os.environ.get("ZEROGAP_PREFIX_CACHE_MB", "").strip():
        # Only where it is set: the prefix cache's module imports torch, which a command that
        # loads nothing (a finished resume) never needs.
        from zerogap.engine.prefix_cache import limit_bytes

        limit_bytes()


def _fix_memory(size: str | None) -> None:
    """``--max-memory``: the process's memory budget, as ``ZEROGAP_MAX_MEMORY`` sets it, for
    this process and the ones it starts; without the flag a command that runs a model still
    checks the variable here, before any model loads. A bad value is one line, exit 2."""
    from zerogap.engine import memory

    memory.from_flag(size)
    memory.override()
    memory.reset_budget()


def main(argv: list[str] | None = None) -> int:
    own, passed = _split_passthrough(sys.argv[1:] if argv is None else list(argv))
    args = build_parser().parse_args(own)
    if passed:
        args.passthrough = passed
    try:
        if getattr(args, "threads", None) is not None:
            _fix_threads(args.threads)
        _check_environment()
        if hasattr(args, "max_memory"):
            _fix_memory(args.max_memory)
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe surfaces here, not at interpreter exit
        return code
    except ZerogapError as err:
        if args.traceback:
            traceback.print_exc()
        from zerogap.cli.flags import typed_message

        print(f"zerogap {args.command}: error: {one_line(typed_message(err, args))}",
              file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (``zerogap runs show DIR | head``): stop quietly, as Unix tools do,
        # pointing stdout at /dev/null so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print(f"zerogap {args.command}: interrupted", file=sys.stderr)
        return 130
