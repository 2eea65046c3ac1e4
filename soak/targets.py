"""Where the soak sends its calls: the built-in engine as a child process, or any URL.

A target keeps the engine's life counter and start time, so every row can carry
`engine_life` and `engine_age_s`, and says when the engine died. It reports engine starts,
exits and restarts through `on_event(kind, **fields)`.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlparse

import httpx

from engine.server.cli import ServeOptions
from engine.server.wire import CacheStatus
from rundir.schema import ENGINE_CONFIG, ENGINE_LOG
from soak.config import SoakConfig
from soak.errors import SoakError
from soak.identify import EngineIdentity, identify

logger = logging.getLogger(__name__)

EventSink = Callable[..., Any]
LOG_TAIL_LINES = 30


class EngineExit(NamedTuple):
    exit_code: int | None
    log_tail: str


class Target:
    """What every target shares: base URL, engine life and age, pid when known."""

    is_builtin = False

    def __init__(self, http: httpx.AsyncClient, on_event: EventSink, api_key: str | None = None) -> None:
        self.http = http
        self.on_event = on_event
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = ""
        self.life: int | None = None  # the current engine's start counter (0 the first); None before one
        self.started_at: float | None = None
        self.pid: int | None = None
        self.identity: EngineIdentity | None = None  # what a URL target said of itself at its last start

    def age(self, now: float | None = None) -> float | None:
        if self.started_at is None:
            return None
        return max(0.0, (time.time() if now is None else now) - self.started_at)

    @property
    def can_restart(self) -> bool:
        return False

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        pass

    async def restart(self, reason: str) -> bool:
        """A deliberate restart; False when this target cannot be restarted."""
        return False

    def check_exit(self) -> EngineExit | None:
        """The engine's exit when it died unasked since the last call, else None."""
        return None

    async def get_json(self, path: str, timeout: float = 5.0) -> Any:
        response = await self.http.get(self.url + path, headers=self.headers, timeout=timeout)
        response.raise_for_status()
        return response.json()

    def next_life(self) -> int:
        """Count one more engine start; its life."""
        self.life = 0 if self.life is None else self.life + 1
        return self.life

    def announce_start(self, started_at: float | None, **fields: Any) -> None:
        """An engine started (we started it, or learnt it from its metrics or log): one more life,
        its start time (None where unknown: its age is then unknown) and the `engine_start` event.
        The one place a start is counted and said."""
        self.next_life()
        self.started_at = started_at
        self.on_event(
            "engine_start",
            t=started_at if started_at is not None else time.time(),
            engine_life=self.life,
            pid=self.pid,
            url=self.url,
            **fields,
        )


class BuiltinTarget(Target):
    """The built-in server (`python -m engine.server`) in its own process on a free loopback port,
    its options in one JSON document (the run's engine-config.json); its output goes to engine.log."""

    is_builtin = True

    def __init__(
        self,
        http: httpx.AsyncClient,
        on_event: EventSink,
        log_path: Path,
        options: ServeOptions = ServeOptions(),
        start_timeout_s: float = 300.0,
        cpus: tuple[int, ...] | None = None,
    ) -> None:
        super().__init__(http, on_event)
        self.log_path = Path(log_path)
        self.options = options
        self.config_path = self.log_path.with_name(ENGINE_CONFIG)
        self.start_timeout_s = start_timeout_s
        self.cpus = cpus  # CPUs the engine process is pinned to (soak.affinity); None = inherited
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    @property
    def can_restart(self) -> bool:
        return True

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "engine.server", "--config", str(self.config_path), "--host", "127.0.0.1"]

    async def start(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.options.write(self.config_path)
        log = open(self.log_path, "ab")
        spawned = time.time()
        self.proc = subprocess.Popen(
            [*self.command, "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_in_child(self.cpus),
        )
        log.close()
        self.pid = self.proc.pid
        logger.info("engine pid %d starting on %s", self.pid, self.url)
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                self.proc = None
                raise SoakError(
                    f"the built-in engine exited with code {code} before answering /health "
                    f"(command: {shlex.join(self.command)}); last lines of {self.log_path}:\n"
                    f"{self.log_tail()}"
                )
            try:
                response = await self.http.get(self.url + "/health", timeout=2.0)
                if response.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                await self.stop()
                raise SoakError(
                    f"the built-in engine did not answer {self.url}/health within "
                    f"{self.start_timeout_s:g} s; last lines of {self.log_path}:\n{self.log_tail()}"
                )
            await asyncio.sleep(0.2)
        started = spawned
        try:
            started = time.time() - CacheStatus.from_json(await self.get_json("/v1/cache/status")).engine_age_s
        except (httpx.HTTPError, ValueError):
            pass
        self.announce_start(started, port=port)

    async def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        for _ in range(100):
            if proc.poll() is not None:
                return
            await asyncio.sleep(0.1)
        proc.kill()
        proc.wait()

    async def restart(self, reason: str) -> bool:
        self.on_event("engine_restart", reason=reason, engine_life=self.life)
        await self.stop()
        await self.start()
        return True

    async def num_running(self) -> int | None:
        """Requests running or waiting inside the engine; None when it does not answer."""
        try:
            status = CacheStatus.from_json(await self.get_json("/v1/cache/status"))
        except (httpx.HTTPError, ValueError):
            return None
        return status.num_running + status.num_waiting

    def check_exit(self) -> EngineExit | None:
        if self.proc is None:
            return None
        code = self.proc.poll()
        if code is None:
            return None
        self.proc = None
        return EngineExit(code, self.log_tail())

    def log_tail(self, num_lines: int = LOG_TAIL_LINES) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                data = f.read()
        except OSError:
            return ""
        return "\n".join(data.decode("utf-8", "replace").splitlines()[-num_lines:])


class UrlTarget(Target):
    """Any OpenAI-compatible server; restarted only through `restart_cmd`."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        on_event: EventSink,
        url: str,
        api_key: str | None = None,
        restart_cmd: str | None = None,
        start_timeout_s: float = 300.0,
    ) -> None:
        super().__init__(http, on_event, api_key)
        self.url = url.rstrip("/")
        if self.url.endswith("/v1"):
            self.url = self.url[:-3]
        self.restart_cmd = restart_cmd
        self.start_timeout_s = start_timeout_s
        self.pid = pid_listening_on(self.url)
        self._started_once = False  # the first start waits briefly: the server should be up already

    @property
    def can_restart(self) -> bool:
        return self.restart_cmd is not None

    async def start(self) -> None:
        await self._wait_ready(first=not self._started_once)
        self._started_once = True
        self.pid = pid_listening_on(self.url)
        started, source = await self.process_start_time(), "metrics"
        if started is None:  # llama-server's and transformers serve's /metrics say nothing of it
            started, source = process_create_time(self.pid), "process"
        self.identity = await identify(self.http, self.url, self.headers)
        # An external engine's age is known when its /metrics says when its process started, or
        # when it is a local process (found by its port).
        self.announce_start(started, age_known=started is not None, age_from=source if started is not None else None)
        for key, value in self.identity.facts.items():  # each life's, for diag to tell two engines apart
            self.on_event("engine_config", engine_life=self.life, detail=f"{key}={value}")

    async def restart(self, reason: str) -> bool:
        if self.restart_cmd is None:
            return False
        self.on_event("engine_restart", reason=reason, engine_life=self.life, command=self.restart_cmd)
        proc = await asyncio.create_subprocess_shell(self.restart_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise SoakError(
                f"--restart-cmd {self.restart_cmd!r} exited with code {proc.returncode}: "
                f"{out.decode('utf-8', 'replace')[-500:]}"
            )
        await asyncio.sleep(1.0)
        await self.start()
        return True

    async def process_start_time(self) -> float | None:
        try:
            response = await self.http.get(self.url + "/metrics", headers=self.headers, timeout=5.0)
        except httpx.HTTPError:
            return None
        for line in response.text.splitlines():
            if line.startswith("process_start_time_seconds "):
                try:
                    return float(line.split()[1])
                except (IndexError, ValueError):
                    return None
        return None

    async def _wait_ready(self, first: bool) -> None:
        deadline = time.monotonic() + (30.0 if first else self.start_timeout_s)
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                response = await self.http.get(self.url + "/v1/models", headers=self.headers, timeout=5.0)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(0.5)
        raise SoakError(f"{self.url}/v1/models: expected an OpenAI-compatible server answering 200, found {last}")


def make_target(
    config: SoakConfig,
    http: httpx.AsyncClient,
    on_event: EventSink,
    run_dir: Path,
    cpus: tuple[int, ...] | None = None,
    last_life: int | None = None,
) -> Target:
    """The soaked engine's target for a SoakConfig; `last_life`: a resumed run's last engine life."""
    if config.is_builtin:
        target: Target = BuiltinTarget(
            http, on_event, Path(run_dir) / ENGINE_LOG, config.engine_options, config.engine_start_timeout_s, cpus=cpus
        )
    else:
        target = UrlTarget(
            http, on_event, config.target, config.api_key, config.restart_cmd, config.engine_start_timeout_s
        )
    target.life = last_life  # a resumed run's engines go on counting
    return target


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]  # (host, port) for AF_INET
        return port


def pid_listening_on(url: str) -> int | None:
    """The local process listening on the URL's port, when the URL is local and the OS tells us."""
    parsed = urlparse(url)
    if parsed.hostname not in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        import psutil

        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                pid: int = conn.pid
                return pid
    except Exception:  # noqa: BLE001 - permission or platform: the pid is a nicety
        return None
    return None


def process_create_time(pid: int | None) -> float | None:
    """When a local process started (Unix seconds), or None."""
    if pid is None:
        return None
    try:
        import psutil

        created: float = psutil.Process(pid).create_time()
        return created
    except Exception:  # noqa: BLE001 - gone, or not ours to see: the age stays unknown
        return None


def _in_child(cpus: tuple[int, ...] | None) -> Callable[[], None] | None:
    """What the engine process does before exec: die with the soak (Linux), move onto its CPUs."""
    from soak.affinity import in_child

    steps = [step for step in (_die_with_parent if sys.platform == "linux" else None, in_child(cpus)) if step]
    if not steps:
        return None

    def run() -> None:
        for step in steps:
            step()

    return run


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the soak dies, even by SIGKILL (Linux prctl)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
