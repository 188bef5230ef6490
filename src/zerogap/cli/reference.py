"""The docs' reference tables, generated: ``python -m zerogap.cli.reference flags`` (every flag
of every command, docs/flags.md) and ``python -m zerogap.cli.reference study`` (every key of a
study file, docs/study.md). A test fails when a page drifts from its table."""

from __future__ import annotations

import sys


def table(name: str) -> str:
    """The generated table ``name`` (``flags`` or ``study``)."""
    if name == "flags":
        from zerogap.cli import build_parser
        from zerogap.cli.flags import flag_table

        return flag_table(build_parser())
    if name == "study":
        from zerogap.study.spec import study_key_table

        return study_key_table()
    raise SystemExit(f"usage: python -m zerogap.cli.reference flags|study (got {name!r})")


if __name__ == "__main__":
    sys.stdout.write(table(sys.argv[1] if len(sys.argv) > 1 else ""))
