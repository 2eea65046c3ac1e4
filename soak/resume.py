"""`soak resume`: the config a run started with, and where its counters go on from.

The trace position comes from the request rows written (replayer.position_from); engine and
control lives from their start events, so a resumed run's new engine is a new life and not a
second life 0; probe cycles from the probes table, so pairs stay numbered in order.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from rundir import schema
from rundir.reader import read_events, read_manifest, read_rows
from rundir.schema import RunStatus
from soak.config import SoakConfig
from soak.errors import SoakError
from soak.manifest import digest
from soak.replayer import Position, position_from


class ResumePoint(NamedTuple):
    position: Position
    num_calls: int  # request rows written
    engine_life: int | None  # the last main engine life started (None: none)
    control_life: int | None  # the last control life started (None: none)
    next_cycle: int  # the next probe cycle's number


START = ResumePoint(position=Position(0, {}), num_calls=0, engine_life=None, control_life=None, next_cycle=0)


def config_to_resume(run_dir: Path, api_key: str | None = None) -> SoakConfig:
    """The run's own config, checked: not completed, and the same trace as it started with."""
    manifest = read_manifest(run_dir)
    if manifest.status == RunStatus.COMPLETED:
        raise SoakError(f"{run_dir}: the run is completed; nothing to resume")
    configs = manifest.configs
    if "soak" not in configs:
        raise SoakError(f"{run_dir}/{schema.MANIFEST}: expected configs.soak to resume from, found none")
    config = SoakConfig.from_json({**configs["soak"], **({"api_key": api_key} if api_key else {})})
    recorded = (manifest.trace or {}).get("sha256")
    if not Path(config.trace).is_file():
        raise SoakError(f"{run_dir}: the run replays {config.trace}, which is no longer there")
    if recorded and digest(Path(config.trace)) != recorded:
        raise SoakError(
            f"{config.trace}: expected the trace the run started with (sha256 {recorded[:12]}…), "
            f"found a different file; resuming would replay other calls"
        )
    return config


def resume_point(run_dir: Path) -> ResumePoint:
    rows = read_rows(run_dir, "requests", ("session", "turn", "status", "kind"))
    engine: int | None = None
    control: int | None = None
    for event in read_events(run_dir).events:
        if event.kind == "engine_start" and isinstance(life := event.fields.get("engine_life"), int):
            engine = max(engine, life) if engine is not None else life
        elif event.kind == "control_start" and isinstance(life := event.fields.get("control_life"), int):
            control = max(control, life) if control is not None else life
    cycles = [cycle for r in read_rows(run_dir, "probes", ("cycle",)) if (cycle := r.get("cycle")) is not None]
    return ResumePoint(
        position=position_from(rows),
        num_calls=len(rows),
        engine_life=engine,
        control_life=control,
        next_cycle=max(cycles) + 1 if cycles else 0,
    )
