"""The log readers' user-facing error."""

from ground import TokdriftError


class LogFormatError(TokdriftError):
    """A log or scrape series that cannot be read: says what was expected, what was found, where."""
