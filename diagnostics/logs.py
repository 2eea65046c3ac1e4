"""Engine logs: the readers live in diagnostics.logformats; this name stays for its callers."""

from diagnostics.logformats import LogInfo, ParsedLog, detect, looks_like_log, parse_log

__all__ = ["LogInfo", "ParsedLog", "detect", "looks_like_log", "parse_log"]
