"""The one error class of `soak`: impossible options, unreadable run directories, a target that never came up."""

from ground import TokdriftError


class SoakError(TokdriftError):
    """A user-facing soak error; the message says what was expected, what was found, and where."""
