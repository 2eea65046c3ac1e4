"""`soak status DIR`: a short summary of any run, finished or not, from what is on disk."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rundir import schema
from rundir.manifest import Decided
from rundir.reader import read_events, read_manifest, read_rows
from rundir.schema import ProbeRole


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    run_id: str
    status: str
    started_at: str | None
    ended_at: str | None
    elapsed_s: float | None
    target: str
    requests: dict[str, int]  # status -> count
    num_steps: int
    num_snapshots: int
    # (engine_life, engine_age_s, decode_tps) of the main engine's ok probes; the age is None where the
    # engine's start is not known (a URL target on another machine)
    probes: list[tuple[int, float | None, float]]
    events: dict[str, int]  # kind -> count
    num_engine_starts: int
    num_resumes: int
    control_probes: list[tuple[int, float | None, float]]  # the same, of the control engine's
    stop_reason: str | None = None  # a StopReason (manifest)
    decided: Decided | None = None  # the first decided running verdict (manifest)


def summarize(run_dir: Path) -> RunSummary:
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    requests = Counter(str(r.get("status")) for r in read_rows(run_dir, "requests", ("status",)))
    ok = [
        r
        for r in read_rows(run_dir, "probes", ("engine_life", "engine_age_s", "decode_tps", "status", "role"))
        if r.get("status") == "ok" and r.get("decode_tps")
    ]
    probes, control = (
        [
            (int(life), None if (age := r["engine_age_s"]) is None else float(age), float(tps))
            for r in ok
            if (r.get("role") or ProbeRole.MAIN) == role
            and (life := r["engine_life"]) is not None
            and (tps := r["decode_tps"]) is not None
        ]
        for role in ProbeRole
    )
    events = Counter(event.kind for event in read_events(run_dir).events)
    return RunSummary(
        run_id=manifest.run_id,
        status=manifest.status,
        started_at=manifest.started_at,
        ended_at=manifest.ended_at,
        elapsed_s=manifest.elapsed_s,
        target=str(manifest.target),
        requests=dict(requests),
        num_steps=len(read_rows(run_dir, "steps", ("t",))),
        num_snapshots=len(read_rows(run_dir, "snapshots", ("t",))),
        probes=probes,
        events=dict(events),
        num_engine_starts=events.get("engine_start", 0),
        num_resumes=len(manifest.resumes),
        control_probes=control,
        stop_reason=manifest.stop_reason,
        decided=manifest.decided,
    )


def render(s: RunSummary) -> str:
    elapsed = f"{s.elapsed_s / 60:.1f} min" if s.elapsed_s is not None else "unknown"
    lines = [
        f"run {s.run_id}: {s.status}" + (f" ({_stop_text(s)})" if s.stop_reason else ""),
        f"  target {s.target}; started {s.started_at}; ended {s.ended_at or '-'}; elapsed {elapsed}"
        + (f"; resumed {s.num_resumes}x" if s.num_resumes else ""),
        "  requests: "
        + (", ".join(f"{n} {k}" for k, n in sorted(s.requests.items(), key=lambda kv: str(kv[0]))) or "none"),
        f"  engine: {s.num_engine_starts} start(s), {s.events.get('engine_exit', 0)} crash(es), "
        f"{s.events.get('engine_restart', 0)} deliberate restart(s); {s.num_steps} step rows, "
        f"{s.num_snapshots} snapshots",
    ]
    if s.decided is not None:
        d = s.decided
        at = f", {d.elapsed_s / 60:.1f} min into the soak" if d.elapsed_s is not None else ""
        lines.append(f"  decided at probe cycle {d.cycle}{at}: {d.line if d.line is not None else d.verdict}")
    if s.probes:
        first, last = s.probes[0], s.probes[-1]
        lines.append(
            f"  probes: {len(s.probes)} ok; first {first[2]:.1f} tok/s, last {last[2]:.1f} tok/s "
            f"(life {last[0]}, age {last[1] or 0:.0f} s)"
        )
    else:
        lines.append("  probes: none ok yet")
    if s.control_probes:
        first, last = s.control_probes[0], s.control_probes[-1]
        lines.append(
            f"  control probes: {len(s.control_probes)} ok; first {first[2]:.1f} tok/s, last {last[2]:.1f} "
            f"tok/s ({s.events.get('control_start', 0)} control start(s), "
            f"{s.events.get('control_exit', 0)} crash(es))"
        )
    return "\n".join(lines)


def _stop_text(s: RunSummary) -> str:
    return schema.STOP_TEXT.get(s.stop_reason or "", s.stop_reason or "")
