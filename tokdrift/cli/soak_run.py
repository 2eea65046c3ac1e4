"""`soak run`, `soak resume`, `soak status`: the soak driver's commands (registered in tokdrift/cli/soak.py)."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from soak.config import DECIDING, DECIDING_MAX_HOURS, PLAIN, SoakConfig
from soak.errors import SoakError

if TYPE_CHECKING:
    from replay.materialize import OverLimit
    from rundir.rows import ProbeRow
    from soak.live_view import Progress
    from soak.run import Soak


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("resume")(resume)
    app.command("status")(status)


def run(
    trace: Annotated[Path, typer.Option("--trace", help="Trace to replay (tokdrift trace format v1, JSON Lines).")],
    hours: Annotated[float | None, typer.Option(help="How long to soak, in hours.")] = None,
    minutes: Annotated[float | None, typer.Option(help="How long to soak, in minutes (instead of --hours).")] = None,
    seconds: Annotated[float | None, typer.Option(help="How long to soak, in seconds (instead of --hours).")] = None,
    target: Annotated[
        str, typer.Option(help="'builtin' (start tokdrift's engine) or the base URL of an OpenAI-compatible server.")
    ] = SoakConfig.target,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Run directory to write (default runs/<date>-<trace name>).")
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Sessions in flight at most.")] = SoakConfig.concurrency,
    speed: Annotated[
        float, typer.Option(help="Replay speed: trace start and think times are divided by this.")
    ] = SoakConfig.speed,
    scale: Annotated[
        float, typer.Option(help="Every prompt and output length times this (keeps prefix sharing).")
    ] = SoakConfig.scale,
    max_context: Annotated[
        int | None, typer.Option(help="Prompt + output cap per call; longer calls are handled by --over-limit.")
    ] = None,
    over_limit: Annotated[
        str,
        typer.Option(
            help="Calls above --max-context: drop, trim or keep (send anyway and record the target's refusal)."
        ),
    ] = SoakConfig.over_limit,
    probe_every: Annotated[
        float | None,
        typer.Option(
            help="Seconds between probes (0: only at start and end; "
            f"default {PLAIN.probe_every_s:g}, with --until-decided "
            f"{DECIDING.probe_every_s:g})."
        ),
    ] = None,
    probes: Annotated[
        bool,
        typer.Option(
            "--probes/--no-probes",
            help="--no-probes: a replay only, as users serve: no probe, no control, no restart "
            "control (--restart-every still restarts); the run then holds exactly what a user "
            "has, its requests and the engine's log.",
        ),
    ] = SoakConfig.probes,
    probe_tokens: Annotated[int, typer.Option(help="Probe prompt length in tokens.")] = SoakConfig.probe_input_tokens,
    probe_output: Annotated[
        int | None,
        typer.Option(
            help="Probe output length in tokens (greedy, eos ignored; "
            f"default {PLAIN.probe_output_tokens}, with --until-decided "
            f"{DECIDING.probe_output_tokens})."
        ),
    ] = None,
    probe_wait: Annotated[
        float, typer.Option(help="Seconds a probe waits for the target to go idle.")
    ] = SoakConfig.probe_wait_s,
    baseline: Annotated[
        int | None,
        typer.Option(
            help="Probe cycles on the fresh engine, with no traffic, --probe-every "
            "apart, before the replay starts (not counted in the duration): "
            "the engine's youth every later probe is compared with, for "
            "engines that slow within the first minutes of "
            f"traffic (default {PLAIN.baseline_cycles}, with --until-decided {DECIDING.baseline_cycles}).",
            show_default=False,
        ),
    ] = None,
    restart_every: Annotated[
        float | None,
        typer.Option(help="Restart the engine every this many seconds (builtin, or URL with --restart-cmd)."),
    ] = None,
    no_restart_at_end: Annotated[
        bool, typer.Option("--no-restart-at-end", help="Skip the restart control at the end.")
    ] = False,
    restart_cmd: Annotated[str | None, typer.Option(help="Shell command that restarts a URL target.")] = None,
    engine_log: Annotated[
        Path | None, typer.Option(help="A URL target's log file: tailed, copied into the run and parsed into steps.")
    ] = None,
    flush_every: Annotated[
        float, typer.Option(help="Seconds between writes of the run directory's parts.")
    ] = SoakConfig.flush_every_s,
    sample_every: Annotated[
        float, typer.Option(help="Seconds between samples of engine hooks, process, GPU and /metrics.")
    ] = SoakConfig.sample_every_s,
    profile_drop: Annotated[
        float, typer.Option(help="Profile the engine when probe decode rate falls this fraction below its first value.")
    ] = SoakConfig.profile_drop,
    profile_seconds: Annotated[
        float, typer.Option(help="Seconds each py-spy profile records.")
    ] = SoakConfig.profile_seconds,
    no_profiles: Annotated[bool, typer.Option("--no-profiles", help="Take no py-spy profiles.")] = False,
    api: Annotated[
        str,
        typer.Option(
            help="auto, completions (token-id prompts) or chat (text prompts); auto "
            "is completions for builtin, chat for a URL."
        ),
    ] = SoakConfig.api,
    model: Annotated[
        str | None, typer.Option(help="Model name for a URL target (default: the first of /v1/models).")
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="TOKDRIFT_API_KEY", help="Bearer token for a URL target (env TOKDRIFT_API_KEY)."),
    ] = None,
    request_timeout: Annotated[float, typer.Option(help="Seconds one call may take.")] = SoakConfig.request_timeout_s,
    temperature: Annotated[
        float | None,
        typer.Option(
            help="Sampling temperature of the replayed calls (default: the target's own; probes are always greedy)."
        ),
    ] = None,
    engine_arg: Annotated[
        list[str] | None,
        typer.Option(
            help="An option for the built-in engine's `soak serve`, e.g. --engine-arg=--kv-tokens=4096 (repeatable)."
        ),
    ] = None,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            "--fault",
            help="Switch on a degradation mechanism in the "
            "built-in engine (repeatable; docs/faults.md); "
            "recorded as a fault_on event.",
        ),
    ] = None,
    twin: Annotated[
        bool | None,
        typer.Option(
            "--twin/--no-twin",
            help="Start a young twin of the built-in "
            "engine (same options) and probe it beside "
            "the soaked one every cycle, as the control "
            "for host drift (default: on where memory "
            "allows).",
            show_default=False,
        ),
    ] = None,
    twin_restart_every: Annotated[
        float,
        typer.Option(
            help="Restart the control engine (twin, or --control-target "
            "with --control-restart-cmd) every this many seconds, "
            "between probe cycles, so it stays young."
        ),
    ] = SoakConfig.twin_restart_every_s,
    control_restart_after: Annotated[
        int,
        typer.Option(
            help="Restart the control engine also after it answered this many probes in one life: requests "
            "served are what ages an engine, and a control that ages hides the soaked engine's loss.",
            min=1,
        ),
    ] = SoakConfig.control_restart_after,
    twin_engine_arg: Annotated[
        list[str] | None,
        typer.Option(
            help="A `soak serve` option for the twin alone, on top of --engine-arg (repeatable; e.g. "
            "--twin-engine-arg=--fault-after=4 puts a fault's onset within each of its lives)."
        ),
    ] = None,
    control_target: Annotated[
        str | None,
        typer.Option(
            help="URL of a second instance of the target's server: the control a URL target's probes are paired with."
        ),
    ] = None,
    control_restart_cmd: Annotated[
        str | None,
        typer.Option(help="Shell command that restarts --control-target (without it the control is never restarted)."),
    ] = None,
    affinity: Annotated[
        bool | None,
        typer.Option(
            "--affinity/--no-affinity",
            help="Pin the soak driver to one "
            "CPU and the engines it starts to "
            "the others (default: on where "
            "there are at least 2 CPUs).",
            show_default=False,
        ),
    ] = None,
    until_decided: Annotated[
        bool,
        typer.Option(
            "--until-decided",
            help="Stop as soon as the running verdict is "
            "decided either way (engine age found, or a "
            "loss above --rule-out ruled out), after the "
            "restart control; the "
            "duration (or --max-hours, default "
            f"{DECIDING_MAX_HOURS:g}) is the most it may "
            "take.",
        ),
    ] = False,
    max_hours: Annotated[
        float | None, typer.Option(help="With --until-decided: the longest the soak may run, in hours.")
    ] = None,
    rule_out: Annotated[
        float,
        typer.Option(
            help="The loss a decided 'no degradation' rules out, as a fraction (0.10: a loss of more than 10 %)."
        ),
    ] = SoakConfig.rule_out,
    live: Annotated[
        bool,
        typer.Option(
            help="Show the live view (default when stdout is a terminal); without it, "
            "a status line a minute and the running verdict after every probe "
            "cycle."
        ),
    ] = sys.stdout.isatty(),
) -> None:
    """Replay a trace against an engine for hours, record everything, probe at matched conditions."""
    if max_hours is not None and not until_decided:
        raise SoakError("--max-hours: only with --until-decided (otherwise the duration is --hours)")
    options = (
        ("--hours", hours, 3600),
        ("--minutes", minutes, 60),
        ("--seconds", seconds, 1),
        ("--max-hours", max_hours, 3600),
    )
    for name, value, _ in options:
        if value is not None and not value > 0:
            raise SoakError(f"{name}: expected a duration > 0, found {value:g}")
    durations = {name: value * unit for name, value, unit in options if value is not None}
    given = list(durations.values())
    if until_decided and not given:
        given = [DECIDING_MAX_HOURS * 3600]
    if len(given) != 1:
        raise SoakError(
            f"duration: expected exactly one of --hours, --minutes, --seconds (or --max-hours with "
            f"--until-decided), found {len(given)}"
        )
    config = SoakConfig(
        trace=str(trace.resolve()),
        duration_s=float(given[0]),
        target=target,
        model=model,
        api=api,
        api_key=api_key,
        concurrency=concurrency,
        speed=speed,
        scale=scale,
        max_context=max_context,
        over_limit=cast("OverLimit", over_limit),  # SoakConfig refuses any other value, saying which
        request_timeout_s=request_timeout,
        temperature=temperature,
        probe_input_tokens=probe_tokens,
        probe_every_s=probe_every,  # None: SoakConfig's, by until_decided
        probe_output_tokens=probe_output,
        probe_wait_s=probe_wait,
        probes=probes,
        baseline_cycles=baseline,
        restart_every_s=restart_every,
        restart_at_end=not no_restart_at_end,
        restart_cmd=restart_cmd,
        flush_every_s=flush_every,
        sample_every_s=sample_every,
        profile_drop=profile_drop,
        profile_seconds=profile_seconds,
        profiles=not no_profiles,
        engine_log=str(engine_log) if engine_log else None,
        engine_args=tuple(engine_arg or ()),
        faults=tuple(fault or ()),
        twin=twin,
        twin_restart_every_s=twin_restart_every,
        control_restart_after=control_restart_after,
        twin_engine_args=tuple(twin_engine_arg or ()),
        control_target=control_target,
        control_restart_cmd=control_restart_cmd,
        affinity=affinity,
        until_decided=until_decided,
        rule_out=rule_out,
    )
    run_dir = out or Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{trace.stem}"
    from soak.run import Soak

    _drive(Soak(config, run_dir), live)


def resume(
    run_dir: Annotated[Path, typer.Argument(help="Run directory of an interrupted or killed soak.")],
    api_key: Annotated[
        str | None, typer.Option(envvar="TOKDRIFT_API_KEY", help="Bearer token for a URL target (not kept in the run).")
    ] = None,
    live: Annotated[
        bool,
        typer.Option(
            help="Show the live view (default when stdout is a terminal); without it, "
            "a status line a minute and the running verdict after every probe "
            "cycle."
        ),
    ] = sys.stdout.isatty(),
) -> None:
    """Continue a soak that was interrupted or killed: same run, same directory, trace position restored."""
    from soak.run import Soak

    _drive(Soak.resume(run_dir, api_key=api_key), live)


def status(
    run_dir: Annotated[Path, typer.Argument(help="Run directory to summarise.")],
) -> None:
    """Print a short summary of a run, finished or not."""
    from soak.run_summary import render, summarize

    typer.echo(render(summarize(run_dir)))


def _drive(soak: Soak, live: bool) -> None:
    import logging

    from rich.console import Console
    from rich.live import Live

    from rundir.schema import RunStatus
    from soak.live_view import render as render_view
    from soak.run_summary import render as render_status
    from soak.run_summary import summarize

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per call and per sample otherwise
    view = Live(console=Console(stderr=True), refresh_per_second=2, transient=False) if live else None
    if view is not None:
        soak.on_progress = lambda p: view.update(render_view(p, soak.verdict_line))
        view.start()
    else:  # nohup, systemd, CI: plain lines, flushed as they are written
        lines = _StatusLines()
        soak.on_progress = lines.progress
        soak.on_probe_cycle = lambda rows: lines.cycle(rows, soak.verdict_line, soak.progress())

    async def main() -> RunStatus:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, soak.stop)
        return await soak.run()

    try:
        status = asyncio.run(main())
    finally:
        if view is not None:
            view.stop()
    typer.echo(render_status(summarize(soak.run_dir)))
    if status != RunStatus.COMPLETED:
        raise typer.Exit(130 if status == RunStatus.INTERRUPTED else 1)


STATUS_EVERY_S = 60.0  # a status line this often when there is no live view


class _StatusLines:
    """One plain line a minute (the first once the replay runs), and one per probe cycle."""

    def __init__(self) -> None:
        self._last: float | None = None

    def progress(self, p: Progress) -> None:
        from soak.live_view import SoakPhase, status_line

        if p.phase != SoakPhase.REPLAY and self._last is None:
            return
        if self._last is None or p.elapsed_s - self._last >= STATUS_EVERY_S:
            self._last = p.elapsed_s
            typer.echo(status_line(p), err=True)

    def cycle(self, rows: list[ProbeRow], verdict: str | None, p: Progress) -> None:
        from soak.live_view import cycle_line

        typer.echo(f"{cycle_line(rows, p)}; {verdict}", err=True)
