"""The registry of job kinds (:mod:`zerogap.study.job`): the built-in ones and those a package
adds through a ``zerogap.job_kinds`` entry point. Low enough that a study's spec checks the
kinds it names before anything runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zerogap.errors import UserError
from zerogap.registry import Registry

JOB_KIND_ENTRY_POINTS = "zerogap.job_kinds"

_JOB_KINDS: Registry[type] = Registry("job kind", group=JOB_KIND_ENTRY_POINTS)
for _name, _module in (("greedy", "zerogap.study.sampling"), ("sample", "zerogap.study.sampling"),
                       ("filter", "zerogap.study.sampling"), ("neurons", "zerogap.study.neurons"),
                       ("design", "zerogap.study.checks"), ("ranks", "zerogap.study.checks"),
                       ("allocate", "zerogap.study.allocation")):
    _JOB_KINDS.register_lazy(_name, _module)


def register_job_kind(name: str) -> Callable[[type], type]:
    """Class decorator: register a job class as kind ``name``.

    A third-party package decorates its class in a module and names that module in a
    ``zerogap.job_kinds`` entry point under the same name; the module is imported when the
    kind is first asked for.
    """
    return _JOB_KINDS.register(name)


job_kind_names = _JOB_KINDS.names
"""The registered job kinds (entry points included, none imported), sorted."""


def added_kind(name: str) -> Any:
    """The class of kind ``name`` a study adds to its settings (its ``jobs`` key:
    a :class:`~zerogap.study.job.JobKind`); an unknown name, or a built-in kind (planned by the
    study itself), is a ``UserError``."""
    kind = _JOB_KINDS.get(name)
    if not hasattr(kind, "plan"):
        raise UserError(f"job kind {name!r} is one the study plans itself; jobs names the "
                        f"kinds it adds ({', '.join(job_kind_names())})")
    return kind
