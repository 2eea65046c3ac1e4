"""The run directory's user-facing error."""

from ground import TokdriftError


class RunDirError(TokdriftError):
    """A run directory that cannot be read: says what was expected, what was found, where."""
