"""The run's manifest.json: what ran, where, when, and how it ended (docs/run-directory.md).
Its one owner, ManifestBook, as the soak calls it:

book = ManifestBook.open(store, config, trace, run_dir, command, resuming)
book.pinned(affinity); book.follow_control(control)
await book.engine_up(target, config, model, steps_source); book.save()
book.write(elapsed_s, num_requests)         # at every flush
book.ended(status, reason, materialized, steps_missed); book.write(elapsed_s, num_requests)
"""

from __future__ import annotations

import hashlib
import platform
import time
from pathlib import Path
from typing import Any

import httpx

from engine.server.wire import CacheStatus
from ground import __version__
from replay import Trace
from rundir import schema
from rundir.manifest import Decided, RunManifest
from rundir.reader import read_manifest
from rundir.schema import RunStatus, StopReason
from rundir.writer import RunStore
from soak.affinity import Affinity
from soak.config import SoakConfig
from soak.control import ControlEngine
from soak.targets import Target


class ManifestBook:
    """The one owner of a run's manifest: built, or read back and reopened (`soak resume`); its
    fields set as the run learns them; written through the run store at every flush and at the
    end, the control's state refreshed at each write."""

    def __init__(self, store: RunStore, manifest: RunManifest) -> None:
        self.store = store
        self.manifest = manifest
        self.elapsed_before = float(manifest.elapsed_s or 0.0)  # serving time of the earlier segments
        self._control: ControlEngine | None = None

    @classmethod
    def open(
        cls, store: RunStore, config: SoakConfig, trace: Trace, run_dir: Path, command: list[str], resuming: bool
    ) -> ManifestBook:
        if resuming:
            return cls(store, resumed_manifest(run_dir, command))
        return cls(store, new_manifest(config, trace, run_dir, command))

    def pinned(self, affinity: Affinity) -> None:
        """Where the driver and the engines run (the manifest's `affinity`)."""
        self.manifest.affinity = affinity.to_json()

    def follow_control(self, control: ControlEngine) -> None:
        """The control's state goes in now, and again at every write."""
        self._control = control
        self.manifest.control = control.to_json()

    async def engine_up(self, target: Target, config: SoakConfig, model: str | None, steps_source: str) -> None:
        """What the run learns once its engine is up: the model, where steps come from, the engine
        (and the built-in engine's resolved config)."""
        m = self.manifest
        m.steps_source, m.model = steps_source, model
        m.engine, engine_config = await describe_engine(target, config)
        if target.is_builtin:
            m.configs["engine"] = engine_config

    def decide(self, verdict: str, cycle: int | None, elapsed_s: float, line: str, **details: Any) -> bool:
        """The first decided running verdict: the manifest's `decided` and a `decided` event. False,
        and nothing recorded, once a verdict is (a resumed run's included)."""
        if self.manifest.decided is not None:
            return False
        self.manifest.decided = Decided(verdict, cycle, elapsed_s, line, details)
        self.store.event("decided", verdict=verdict, cycle=cycle, elapsed_s=elapsed_s, line=line)
        return True

    def ended(
        self, status: RunStatus, reason: StopReason, materialized: dict[str, Any] | None, steps_missed: int | None
    ) -> None:
        """How the run ended (written by the next write)."""
        m = self.manifest
        m.status, m.stop_reason, m.ended_at = status, reason, iso(time.time())
        if materialized is not None:
            m.materialized = materialized
        if steps_missed is not None:
            m.steps_missed = steps_missed

    def write(self, elapsed_s: float, num_requests: int) -> None:
        """The running figures, then the file."""
        self.manifest.elapsed_s, self.manifest.num_requests = elapsed_s, num_requests
        self.save()

    def save(self) -> None:
        """The file, as it stands (the control refreshed)."""
        if self._control is not None:
            self.manifest.control = self._control.to_json()
        self.store.write_manifest(self.manifest)


def new_manifest(config: SoakConfig, trace: Trace, run_dir: Path, command: list[str]) -> RunManifest:
    return RunManifest(
        run_id=run_dir.name,
        status=RunStatus.RUNNING,
        started_at=iso(time.time()),
        command=list(command),
        configs={"soak": config.to_json()},
        trace={
            "path": str(Path(config.trace).resolve()),
            "sha256": digest(Path(config.trace)),
            "source": trace.header.source,
            "block_size": trace.header.block_size,
            "num_calls": len(trace.calls),
            "num_sessions": len({c.session for c in trace.calls}),
        },
        target=config.target,
        host=host_info(),
        tokdrift_version=__version__,
    )


def resumed_manifest(run_dir: Path, command: list[str]) -> RunManifest:
    """The manifest of a run being resumed: running again, one more entry in `resumes`."""
    manifest = read_manifest(run_dir)
    manifest.resumes = [
        *manifest.resumes,
        {"at": iso(time.time()), "previous_status": manifest.status, "command": list(command)},
    ]
    manifest.status, manifest.ended_at = RunStatus.RUNNING, None
    manifest.schema_version = schema.SCHEMA_VERSION  # what it writes from now on
    return manifest


async def describe_engine(target: Target, config: SoakConfig) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The manifest's `engine`, and the built-in engine's resolved config (`configs.engine`) when it tells."""
    engine: dict[str, Any] = {"url": target.url, "pid": target.pid}
    engine_config = None
    if target.is_builtin:
        engine.update(
            name="tokdrift", version=__version__, args=list(config.engine_args), options=config.engine_options.to_json()
        )
        try:
            status = CacheStatus.from_json(await target.get_json("/v1/cache/status"))
            engine_config, engine["max_context"] = status.config or None, status.max_context
        except (httpx.HTTPError, ValueError):
            pass
    elif target.identity is not None:
        engine.update(target.identity.to_json())
    else:
        engine["name"] = "unknown"
    return engine, engine_config


def host_info() -> dict[str, Any]:
    import os
    from importlib import metadata

    import psutil

    info: dict[str, Any] = {
        "hostname": platform.node(),
        "os": platform.platform(),
        "machine": platform.machine(),
        "cpu": platform.processor() or None,
        "num_cpus": os.cpu_count(),
        "ram_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
    }
    versions = {}
    for name in ("torch", "triton", "httpx", "pyarrow", "pandas"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    info["versions"] = versions
    try:
        import pynvml

        pynvml.nvmlInit()
        info["gpu"] = [
            pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())
        ]
    except Exception:  # noqa: BLE001 - no GPU is a fact, not an error
        info["gpu"] = None
    return info


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def iso(t: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds")
