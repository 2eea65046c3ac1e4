"""The diagnostics package's user-facing error."""

from ground import TokdriftError


class DiagnosticsError(TokdriftError):
    """A source that cannot be read or analysed: says what was expected, what was found, where."""
