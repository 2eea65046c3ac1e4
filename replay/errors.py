"""The one error class of `replay`: bad traces, bad sources, impossible options."""

from ground import TokdriftError


class TraceError(TokdriftError):
    """A trace or an importer source is malformed; the message names the file and line."""
