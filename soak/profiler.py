"""py-spy profiles of the engine process, as speedscope JSON under profiles/.

py-spy needs ptrace permission on the engine process (root, or kernel.yama.ptrace_scope 0,
or CAP_SYS_PTRACE). Missing py-spy or missing permission is logged once and the soak goes
on without profiles.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

logger = logging.getLogger(__name__)


class Profile(NamedTuple):
    path: Path
    reason: str
    seconds: float


class Profiler:
    def __init__(self, out_dir: Path, seconds: float, enabled: bool = True) -> None:
        self.out_dir = Path(out_dir)
        self.seconds = seconds
        self.exe = _find_py_spy() if enabled else None
        self.disabled_reason: str | None = (
            None if self.exe else ("profiles off" if not enabled else "py-spy is not installed")
        )
        if enabled and not self.exe:
            logger.warning("no profiles: py-spy is not installed (pip install py-spy)")

    async def record(self, pid: int | None, reason: str, label: str) -> Profile | None:
        """Record `seconds` of the process; None (logged once) when it cannot."""
        if self.disabled_reason or pid is None:
            return None
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / f"{time.strftime('%Y%m%dT%H%M%S')}-{label}.speedscope.json"
        assert self.exe is not None  # disabled_reason says why there is none
        cmd = [
            self.exe,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(max(1, round(self.seconds))),
            "--format",
            "speedscope",
            "--output",
            str(path),
            "--nonblocking",
        ]
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
            )
        except OSError as exc:
            self._give_up(f"py-spy could not run ({exc})")
            return None
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), self.seconds + 30)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            if proc.returncode is None:  # never leave a py-spy attached behind us
                proc.kill()
                await proc.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            logger.warning("py-spy record did not finish within %.0f s; profile skipped", self.seconds + 30)
            return None
        if proc.returncode != 0 or not path.is_file():
            text = out.decode("utf-8", "replace").strip().splitlines()
            message = text[-1] if text else f"exit code {proc.returncode}"
            exe = _executable(pid)  # asked only after a failure: the success path touches nothing
            if "permission" in message.lower() or "ptrace" in message.lower() or "root" in message.lower():
                self._give_up(f"py-spy has no permission to attach ({message})")
            elif exe is not None and "python" not in exe.lower():
                self._give_up(f"the engine (pid {pid}, {exe}) is not a Python process, which is all py-spy reads")
            else:
                logger.warning("py-spy record failed: %s", message)
            return None
        return Profile(path, reason, self.seconds)

    def _give_up(self, why: str) -> None:
        self.disabled_reason = why
        logger.warning("no more profiles this run: %s", why)


def _executable(pid: int) -> str | None:
    """The file name of a process's executable (llama-server, python3.11), None when it cannot be read."""
    try:
        import psutil

        return Path(psutil.Process(pid).exe()).name or None
    except Exception:  # noqa: BLE001 - gone or hidden: let py-spy say
        return None


def _find_py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file():
        return str(beside)
    return shutil.which("py-spy")


class Profiles:
    """The soak's profiles of the engine, each taken in the background and recorded as a `profile`
    event: at the start, before the end, and once per engine life when a probe drops."""

    def __init__(self, profiler: Profiler, run_dir: Path, on_event: Callable[..., Any], drop: float) -> None:
        self.profiler = profiler
        self.run_dir = Path(run_dir)
        self.on_event = on_event
        self.drop = drop  # profile when a probe falls this fraction below the first
        self._tasks: list[asyncio.Task[None]] = []
        self._dropped_life: int | None = None  # the engine life last profiled for a probe drop

    def take(self, reason: str, pid: int | None, life: int | None) -> None:
        if self.profiler.disabled_reason:
            return

        async def take() -> None:
            profile = await self.profiler.record(pid, reason, reason)
            if profile is not None:
                self.on_event(
                    "profile",
                    path=str(profile.path.relative_to(self.run_dir)),
                    reason=reason,
                    seconds=profile.seconds,
                    engine_life=life,
                )

        self._tasks = [t for t in self._tasks if not t.done()]
        self._tasks.append(asyncio.create_task(take()))

    def after_probe(self, tps: float | None, first_tps: float | None, pid: int | None, life: int) -> None:
        """A probe `drop` below the first one: profile the engine, once per life."""
        if (
            first_tps is not None
            and tps is not None
            and tps < (1.0 - self.drop) * first_tps
            and life != self._dropped_life
        ):
            self._dropped_life = life
            self.take("probe_drop", pid, life)

    async def wait(self) -> None:
        """Let the profiles being taken finish (py-spy sampling the engine slows a probe down)."""
        running = [t for t in self._tasks if not t.done()]
        if running:
            await asyncio.wait(running, timeout=self.profiler.seconds + 30)

    async def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
