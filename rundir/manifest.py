"""manifest.json as one typed object: what ran, where, when, and how it ended.

The soak builds it, updates its fields as the run goes and writes it through the run store; the
reader gives the same type back (rundir.reader.read_manifest). Field meanings are in
docs/run-directory.md. Keys a reader does not know (written by a later version, or by hand) are
kept in `extra` and written back unchanged, as is a `decided` that is not a decided record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from rundir import schema


@dataclass(frozen=True)
class Decided:
    """The manifest's `decided`: the first probe cycle whose running verdict was decided (soak.judge)."""

    verdict: str
    cycle: int | None
    elapsed_s: float | None  # serving time then, across resumes
    line: str | None  # the running verdict's line, as printed
    # What the judge keeps beside it, written as it gave them (diagnostics': looks_planned, level, onset_cycle).
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "cycle": self.cycle,
            "elapsed_s": self.elapsed_s,
            "line": self.line,
            **self.details,
        }

    @classmethod
    def from_json(cls, raw: object) -> Decided:
        """A decided record as written; ValueError for anything else."""
        if not isinstance(raw, Mapping) or not isinstance(raw.get("verdict"), str):
            raise ValueError(f"expected an object with a verdict, found {raw!r}")
        cycle, elapsed_s, line = raw.get("cycle"), raw.get("elapsed_s"), raw.get("line")
        if not (cycle is None or (isinstance(cycle, int) and not isinstance(cycle, bool))):
            raise ValueError(f"expected a whole cycle number, found {cycle!r}")
        if not (elapsed_s is None or (isinstance(elapsed_s, (int, float)) and not isinstance(elapsed_s, bool))):
            raise ValueError(f"expected elapsed_s in seconds, found {elapsed_s!r}")
        if not (line is None or isinstance(line, str)):
            raise ValueError(f"expected the verdict's line, found {line!r}")
        details = {k: v for k, v in raw.items() if k not in ("verdict", "cycle", "elapsed_s", "line")}
        return cls(raw["verdict"], cycle, elapsed_s, line, details)


@dataclass
class RunManifest:
    run_id: str
    status: str  # a schema.RunStatus (one read back holds what the file says)
    started_at: str | None  # ISO 8601, UTC
    schema_version: int = schema.SCHEMA_VERSION
    ended_at: str | None = None
    command: list[str] = field(default_factory=list)
    configs: dict[str, Any] = field(default_factory=dict)  # "soak": SoakConfig, "engine": the engine's resolved config
    trace: dict[str, Any] | None = None  # path, sha256, source, block_size, num_calls, num_sessions
    target: str | None = None  # "builtin" or the URL
    host: dict[str, Any] | None = None
    tokdrift_version: str | None = None
    engine: dict[str, Any] | None = None  # url, pid, name, version, args, options, max_context
    model: str | None = None
    steps_source: str | None = None  # engine, engine_log or metrics
    elapsed_s: float | None = None  # serving time so far, across resumes
    num_requests: int | None = None
    resumes: list[dict[str, Any]] = field(default_factory=list)
    materialized: dict[str, Any] | None = None  # calls, dropped, trimmed, over_limit
    steps_missed: int | None = None
    control: dict[str, Any] | None = None
    affinity: dict[str, Any] | None = None
    decided: Decided | None = None  # the first decided running verdict; absent while undecided
    stop_reason: str | None = None  # a schema.StopReason
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # keys this version does not know

    def to_json(self) -> dict[str, Any]:
        """The manifest.json object: set fields (required ones always), then the unknown keys as read."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if f.name in schema.MANIFEST_REQUIRED or value not in (None, [], {}):
                out[f.name] = value.to_json() if isinstance(value, Decided) else value
        return {**out, **{k: v for k, v in self.extra.items() if k not in out}}

    @property
    def raw(self) -> dict[str, Any]:
        """Everything, as manifest.json holds it."""
        return self.to_json()

    @classmethod
    def from_json(cls, raw: dict[str, Any], default_run_id: str = "") -> RunManifest:
        known = {f.name for f in fields(cls)} - {"extra"}
        given = {k: v for k, v in raw.items() if k in known}
        given["run_id"] = str(raw.get("run_id", default_run_id))
        given["status"] = str(raw.get("status", "unknown"))
        given.setdefault("started_at", None)
        for name in ("command", "resumes"):
            if not isinstance(given.get(name), list):
                given.pop(name, None)
        if not isinstance(given.get("configs"), dict):
            given.pop("configs", None)
        if given.get("decided") is not None:
            try:
                given["decided"] = Decided.from_json(given["decided"])
            except ValueError:
                known.discard("decided")  # kept as read: written back unchanged, read as undecided
                given.pop("decided")
        return cls(**given, extra={k: v for k, v in raw.items() if k not in known})
