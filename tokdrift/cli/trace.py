"""`soak trace ...`: import, synthesise, record and inspect traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from replay.stats import TraceStats

trace_app = typer.Typer(
    help="Make and inspect replay traces: import, synth, record, stats.",
    no_args_is_help=True,
    add_completion=False,
)

_OUT = Annotated[Path, typer.Option("--output", "-o", help="Trace file to write (JSON Lines, tokdrift-trace v1).")]


@trace_app.command("import")
def import_(
    fmt: Annotated[
        str, typer.Argument(metavar="FORMAT", help="Source format: opencode, mooncake, bailian, agentic or azure.")
    ],
    src: Annotated[
        Path, typer.Argument(help="Source file or folder (opencode: export JSON, storage folder or opencode.db).")
    ],
    output: _OUT,
    block_size: Annotated[
        int | None,
        typer.Option(help="Tokens per hash id; default the format's own (mooncake 512, bailian 16, else 64)."),
    ] = None,
    prefix_tokens: Annotated[
        int | None,
        typer.Option(help="opencode: tokens of the fixed prefix all sessions share; estimated when omitted."),
    ] = None,
) -> None:
    """Convert a public or agent trace into a tokdrift trace."""
    from replay.importers import ImportOptions, import_trace
    from replay.trace import write_trace

    header, calls = import_trace(fmt, src, ImportOptions(block_size=block_size, prefix_tokens=prefix_tokens))
    n = write_trace(output, header, calls)
    sessions = len({c.session for c in calls})
    typer.echo(f"wrote {output}: {n} calls in {sessions} sessions from {fmt} {src}")


@trace_app.command()
def synth(
    output: _OUT,
    profile: Annotated[
        str,
        typer.Option(help="agentic (coding agent), chat (short multi-turn) or rag (shared system prompt, many users)."),
    ] = "agentic",
    seed: Annotated[int, typer.Option(help="Seed; the same seed and options write the same trace.")] = 0,
    sessions: Annotated[int | None, typer.Option(help="Number of sessions.")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Sessions running at once.")] = None,
    duration: Annotated[float | None, typer.Option(help="Seconds; no call is sent after this.")] = None,
    block_size: Annotated[int | None, typer.Option(help="Tokens per hash id.")] = None,
    prefix_tokens: Annotated[
        int | None, typer.Option(help="Fixed prefix (system prompt + tools) every session shares.")
    ] = None,
    context_min: Annotated[int | None, typer.Option(help="A session's first prompt, in tokens (about).")] = None,
    context_max: Annotated[
        int | None, typer.Option(help="The engine's context limit; prompts past it are over-long.")
    ] = None,
    calls_min: Annotated[int | None, typer.Option(help="Fewest turn calls per session.")] = None,
    calls_max: Annotated[int | None, typer.Option(help="Most turn calls per session.")] = None,
    append_median: Annotated[int | None, typer.Option(help="Median tokens a tool result appends (lognormal).")] = None,
    append_sigma: Annotated[float | None, typer.Option(help="Lognormal sigma of appends.")] = None,
    append_max: Annotated[int | None, typer.Option(help="Largest append.")] = None,
    output_median: Annotated[
        int | None, typer.Option(help="Median output tokens, reasoning included (lognormal).")
    ] = None,
    output_sigma: Annotated[float | None, typer.Option(help="Lognormal sigma of outputs.")] = None,
    output_max: Annotated[int | None, typer.Option(help="Largest output.")] = None,
    reasoning_share: Annotated[float | None, typer.Option(help="Share of each output that is reasoning.")] = None,
    think_median: Annotated[float | None, typer.Option(help="Median seconds of tool execution between calls.")] = None,
    user_turn_prob: Annotated[
        float | None, typer.Option(help="Chance that a call follows a user message instead of a tool result.")
    ] = None,
    user_think_median: Annotated[
        float | None, typer.Option(help="Median seconds a user takes before a user message.")
    ] = None,
    user_append_median: Annotated[int | None, typer.Option(help="Median tokens a user message appends.")] = None,
    compaction_at: Annotated[int | None, typer.Option(help="Context (tokens) that triggers a compaction call.")] = None,
    summary_tokens: Annotated[int | None, typer.Option(help="Size of the summary that replaces the history.")] = None,
    overlong_fraction: Annotated[float | None, typer.Option(help="Share of calls pushed past context_max.")] = None,
) -> None:
    """Generate a synthetic trace, deterministic by --seed."""
    from replay.synth import SynthConfig, synthesize
    from replay.trace import write_trace

    config = SynthConfig.for_profile(
        profile,
        seed=seed,
        sessions=sessions,
        concurrency=concurrency,
        duration=duration,
        block_size=block_size,
        prefix_tokens=prefix_tokens,
        context_min=context_min,
        context_max=context_max,
        calls_min=calls_min,
        calls_max=calls_max,
        append_median=append_median,
        append_sigma=append_sigma,
        append_max=append_max,
        output_median=output_median,
        output_sigma=output_sigma,
        output_max=output_max,
        reasoning_share=reasoning_share,
        think_median=think_median,
        user_turn_prob=user_turn_prob,
        user_think_median=user_think_median,
        user_append_median=user_append_median,
        compaction_at=compaction_at,
        summary_tokens=summary_tokens,
        overlong_fraction=overlong_fraction,
    )
    header, calls = synthesize(config)
    n = write_trace(output, header, calls)
    typer.echo(f"wrote {output}: {n} calls in {config.sessions} sessions ({profile}, seed {seed})")


@trace_app.command()
def record(
    upstream: Annotated[str, typer.Option(help="The real OpenAI-compatible server, e.g. http://127.0.0.1:8000.")],
    output: _OUT,
    listen: Annotated[
        str, typer.Option(help="HOST:PORT the proxy listens on; point the agent here.")
    ] = "127.0.0.1:8088",
    block_size: Annotated[int, typer.Option(help="Tokens per hash id.")] = 64,
    chars_per_token: Annotated[
        float, typer.Option(help="Text prompts: characters per token used to cut text blocks.")
    ] = 4.0,
    keep_text: Annotated[
        bool, typer.Option("--keep-text", help="Store the request messages in the trace (off: no text is stored).")
    ] = False,
    no_inject_usage: Annotated[
        bool, typer.Option("--no-inject-usage", help="Do not ask streaming upstreams for usage; count chunks instead.")
    ] = False,
) -> None:
    """Record a live agent session: a transparent proxy that appends every call to a trace."""
    from replay.errors import TraceError
    from replay.proxy import RecordConfig, serve

    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise TraceError(f"--listen: expected HOST:PORT, found {listen!r}")
    config = RecordConfig(
        upstream=upstream,
        output=output,
        block_size=block_size,
        chars_per_token=chars_per_token,
        keep_text=keep_text,
        inject_usage=not no_inject_usage,
    )
    typer.echo(f"recording {upstream} on http://{host}:{port} into {output} (Ctrl-C to stop)")
    serve(config, host, int(port))


@trace_app.command()
def stats(
    file: Annotated[Path, typer.Argument(help="Trace file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Count and skip malformed lines instead of stopping at the first.")
    ] = False,
    max_context: Annotated[
        int | None, typer.Option(help="Context limit to count over-long calls against; default the trace's own.")
    ] = None,
) -> None:
    """Sessions, calls, lengths, prefix reuse, appends, compactions and over-long calls of a trace."""
    from replay.stats import trace_stats
    from replay.trace import read_trace

    result = trace_stats(read_trace(file, skip_bad=skip_bad), max_context=max_context)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    _print_stats(file, result)


def _print_stats(file: Path, s: TraceStats) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(s.calls_by_kind.items()))
    console.print(f"[bold]{file}[/]  source {s.source}, block size {s.block_size}")
    console.print(f"{s.num_sessions} sessions, {s.num_calls} calls ({kinds}) over {s.duration:,.0f} s")
    console.print(
        f"prefix reuse {s.prefix_reuse:.1%} of input blocks; {s.num_appends} appends; {s.num_compactions} compactions"
    )
    if s.max_context is not None:
        console.print(f"{s.num_over_long} over-long calls (input + output > {s.max_context:,})")
    if s.num_skipped_lines:
        console.print(f"[yellow]{s.num_skipped_lines} malformed lines skipped[/]")
    table = Table("tokens", "count", "mean", "p50", "p90", "p99", "max")
    for name, d in (
        ("input", s.input_tokens),
        ("output", s.output_tokens),
        ("session peak input", s.session_peak_input),
        ("append", s.append_tokens),
    ):
        table.add_row(
            name, f"{d.count:,}", f"{d.mean:,.0f}", f"{d.p50:,.0f}", f"{d.p90:,.0f}", f"{d.p99:,.0f}", f"{d.max:,.0f}"
        )
    console.print(table)
