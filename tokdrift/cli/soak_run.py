"""`soak run`, `soak resume`, `soak status`: the soak driver's commands (registered in tokdrift/cli/soak.py)."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from soak.errors import SoakError

if TYPE_CHECKING:
    from diagnostics.live import Running
    from replay.materialize import OverLimit
    from soak.live_view import Progress
    from soak.run import Soak

DEFAULT_MAX_HOURS = 2.0  # --until-decided without a duration: the longest it may run
DEFAULT_PROBE_EVERY_S = 300.0
DEFAULT_PROBE_OUTPUT = 64
# --until-decided probes more often and longer: certainty comes per cycle, and a 256-token probe's
# cycle was the least noisy per minute measured here (docs/diagnostics.md, "Probe design").
DECIDING_PROBE_EVERY_S = 10.0
DECIDING_PROBE_OUTPUT = 256
# ... and takes a baseline first, so that a loss that sets in with the first calls is compared with an
# engine younger than it: without one, an output-buffer fault from the second cycle held the engine at
# 0.85 of its twin through a 12-minute soak whose first third was as slow, and diag said "no engine
# age, medium" (paired 0.97, 0.92-1.02). Eight is the fewest that let the early side decide as the
# first third does (docs/soak.md, "A baseline before the traffic").
DECIDING_BASELINE = 8


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
    ] = "builtin",
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Run directory to write (default runs/<date>-<trace name>).")
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Sessions in flight at most.")] = 4,
    speed: Annotated[float, typer.Option(help="Replay speed: trace start and think times are divided by this.")] = 1.0,
    scale: Annotated[
        float, typer.Option(help="Every prompt and output length times this (keeps prefix sharing).")
    ] = 1.0,
    max_context: Annotated[
        int | None, typer.Option(help="Prompt + output cap per call; longer calls are handled by --over-limit.")
    ] = None,
    over_limit: Annotated[
        str,
        typer.Option(
            help="Calls above --max-context: drop, trim or keep (send anyway and record the target's refusal)."
        ),
    ] = "trim",
    probe_every: Annotated[
        float | None,
        typer.Option(
            help="Seconds between probes (0: only at start and end; "
            f"default {DEFAULT_PROBE_EVERY_S:g}, with --until-decided "
            f"{DECIDING_PROBE_EVERY_S:g})."
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
    ] = True,
    probe_tokens: Annotated[int, typer.Option(help="Probe prompt length in tokens.")] = 256,
    probe_output: Annotated[
        int | None,
        typer.Option(
            help="Probe output length in tokens (greedy, eos ignored; "
            f"default {DEFAULT_PROBE_OUTPUT}, with --until-decided "
            f"{DECIDING_PROBE_OUTPUT})."
        ),
    ] = None,
    probe_wait: Annotated[float, typer.Option(help="Seconds a probe waits for the target to go idle.")] = 60.0,
    baseline: Annotated[
        int | None,
        typer.Option(
            help="Probe cycles on the fresh engine, with no traffic, --probe-every "
            "apart, before the replay starts (not counted in the duration): "
            "the engine's youth every later probe is compared with, for "
            "engines that slow within the first minutes of "
            f"traffic (default 0, with --until-decided {DECIDING_BASELINE}).",
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
    flush_every: Annotated[float, typer.Option(help="Seconds between writes of the run directory's parts.")] = 10.0,
    sample_every: Annotated[
        float, typer.Option(help="Seconds between samples of engine hooks, process, GPU and /metrics.")
    ] = 2.0,
    profile_drop: Annotated[
        float, typer.Option(help="Profile the engine when probe decode rate falls this fraction below its first value.")
    ] = 0.3,
    profile_seconds: Annotated[float, typer.Option(help="Seconds each py-spy profile records.")] = 5.0,
    no_profiles: Annotated[bool, typer.Option("--no-profiles", help="Take no py-spy profiles.")] = False,
    api: Annotated[
        str,
        typer.Option(
            help="auto, completions (token-id prompts) or chat (text prompts); auto "
            "is completions for builtin, chat for a URL."
        ),
    ] = "auto",
    model: Annotated[
        str | None, typer.Option(help="Model name for a URL target (default: the first of /v1/models).")
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="TOKDRIFT_API_KEY", help="Bearer token for a URL target (env TOKDRIFT_API_KEY)."),
    ] = None,
    request_timeout: Annotated[float, typer.Option(help="Seconds one call may take.")] = 600.0,
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
    ] = 600.0,
    control_restart_after: Annotated[
        int,
        typer.Option(
            help="Restart the control engine also after it answered this many probes in one life: requests "
            "served are what ages an engine, and a control that ages hides the soaked engine's loss.",
            min=1,
        ),
    ] = 16,
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
            f"{DEFAULT_MAX_HOURS:g}) is the most it may "
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
    ] = 0.10,
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
    from soak.config import SoakConfig

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
        given = [DEFAULT_MAX_HOURS * 3600]
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
        probe_every_s=probe_every
        if probe_every is not None
        else DECIDING_PROBE_EVERY_S
        if until_decided
        else DEFAULT_PROBE_EVERY_S,
        probe_output_tokens=probe_output
        if probe_output is not None
        else DECIDING_PROBE_OUTPUT
        if until_decided
        else DEFAULT_PROBE_OUTPUT,
        probe_wait_s=probe_wait,
        probes=probes,
        baseline_cycles=baseline if baseline is not None else DECIDING_BASELINE if until_decided else 0,
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
    verdict = _RunningVerdict(soak)
    view = Live(console=Console(stderr=True), refresh_per_second=2, transient=False) if live else None
    if view is not None:
        soak.on_progress = lambda p: view.update(render_view(p, verdict.line))
        soak.on_probe_cycle = verdict.add
        view.start()
    else:  # nohup, systemd, CI: plain lines, flushed as they are written
        lines = _StatusLines()
        soak.on_progress = lines.progress
        soak.on_probe_cycle = lambda rows: lines.cycle(rows, verdict.add(rows), soak.progress())

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

    def cycle(self, rows: list[dict[str, Any]], verdict: str, p: Progress) -> None:
        from soak.live_view import cycle_line

        typer.echo(f"{cycle_line(rows, p)}; {verdict}", err=True)


class _RunningVerdict:
    """The running verdict on every probe so far (diagnostics.live), a resumed run's included, its
    intervals valid over every look the soak plans; the first decided look is handed to the soak
    (which records it, and with --until-decided ends the replay)."""

    def __init__(self, soak: Soak) -> None:
        from diagnostics import sequential
        from rundir.reader import read_rows
        from rundir.schema import PROBE_COLUMNS

        self.soak = soak
        self.rows: list[dict[str, Any]] = read_rows(soak.run_dir, "probes", PROBE_COLUMNS) if soak.resuming else []
        cfg = soak.config
        self.looks_planned = sequential.looks_planned(cfg.duration_s, cfg.probe_every_s)
        # Simulated once now, before any engine runs (a baseline: the start cycle and its own).
        sequential.level_for(self.looks_planned, baseline=cfg.baseline_cycles + 1 if cfg.baseline_cycles else 0)
        self.line: str | None = None

    def add(self, rows: list[dict[str, Any]]) -> str:
        import pandas as pd

        from diagnostics.live import running_verdict
        from soak.live_view import hms

        self.rows.extend(rows)
        try:
            running = running_verdict(pd.DataFrame(self.rows), self.looks_planned, self.soak.config.rule_out)
        except Exception as exc:  # noqa: BLE001 - the verdict so far must never stop the soak
            self.line = f"verdict so far: unavailable ({type(exc).__name__}: {exc})"
            return self.line
        line = running.line
        d = self.soak.manifest.decided  # the first decided look, a resumed run's included
        held = self._held(running) if running.decided and d is None else None
        if held is not None:
            line += f"; {held}"
        elif running.decided and d is None:
            cycle = rows[0].get("cycle") if rows else None
            self.soak.decided(
                running.decided,
                cycle,
                line,
                looks_planned=self.looks_planned,
                level=round(running.level, 5),
                onset_cycle=running.onset_cycle,
            )
        elif d is not None:
            when = f", {hms(d['elapsed_s'])} into the soak" if d.get("elapsed_s") is not None else ""
            line += f" [first decided at cycle {d.get('cycle')}{when}: {d.get('verdict')}]"
        self.line = line
        return line

    def _held(self, running: Running) -> str | None:
        """Why a decided look is not taken as decided yet, or None. A "no age" rests on a control
        assumed young: it stands once a restart of the control showed the fresh one no faster (its
        youth verified); until then the control is restarted (between cycles) and the soak goes on."""
        from diagnostics.labels import ControlYouth, Verdict

        if running.decided != Verdict.NO_DEGRADATION or running.youth in (None, ControlYouth.VERIFIED):
            return None
        if self.soak.verify_control():
            return "not taken yet: the control is restarted first, to verify that it stayed young"
        return "not taken: the control is off or cannot be restarted, so whether it stayed young cannot be verified"
