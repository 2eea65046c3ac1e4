"""The reports package's user-facing error."""

from ground import TokdriftError


class ReportError(TokdriftError):
    """A report, summary, bundle or comparison that cannot be written: says what, where and why."""
