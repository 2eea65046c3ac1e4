"""What every tokdrift package shares: the version, the one user-facing error class and the base
of the closed sets of strings readers know (`Label`: verdicts, causes, probe roles, step phases).

The ground every package stands on, a package of its own: a plain module with no dependencies that
imports nothing of the project, so that `engine`, `replay`, `soak`, `diagnostics`, `reports` and
the vLLM plugins can all raise the same error without importing each other. What the command lines
share (running a typer app, setting up logging) is the roof's: `tokdrift.cli.app`.
"""

import enum

__version__ = "0.1.0"


class TokdriftError(Exception):
    """A user-facing error: bad input, a missing file, an impossible option.

    The CLI prints its message on one line and exits non-zero, without a traceback. The
    message says what was expected, what was found, and where.
    """

    exit_code = 2


class Label(str, enum.Enum):
    """A closed set of strings readers know (a verdict, a probe's role): each member is a `str` that
    compares, hashes, formats and serialises as its value, as enum.StrEnum does (Python 3.11+)."""

    __str__ = str.__str__

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
