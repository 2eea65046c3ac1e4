"""The run's manifest.json: what ran, where, when, and how it ended (docs/run-directory.md)."""

from __future__ import annotations

import hashlib
import platform
import time
from pathlib import Path
from typing import Any

import httpx

from engine.server.wire import CacheStatus
from replay import Trace
from rundir import schema
from rundir.manifest import RunManifest
from rundir.reader import read_manifest
from soak.config import SoakConfig
from soak.targets import Target
from tokdrift import __version__


def new_manifest(config: SoakConfig, trace: Trace, run_dir: Path, command: list[str]) -> RunManifest:
    return RunManifest(
        run_id=run_dir.name,
        status="running",
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
    manifest.status, manifest.ended_at = "running", None
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
