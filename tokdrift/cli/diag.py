"""`diag`: ingest, analyze and report. The only diagnostics module that reaches `reports`."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Annotated

import typer

from ground import __version__
from tokdrift.cli import verbose_callback
from tokdrift.cli.app import run_app

app = typer.Typer(
    help="Tell engine-age degradation from context growth, with evidence for a bug report.",
    no_args_is_help=True,
    add_completion=False,
)


app.callback()(verbose_callback)


@app.command()
def version() -> None:
    """Print the tokdrift version."""
    typer.echo(__version__)


def _date(text: str | None) -> dt.date | None:
    from diagnostics.errors import DiagnosticsError

    if text is None:
        return None
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise DiagnosticsError(f"--date: expected YYYY-MM-DD, found {text!r}") from None


SourceArg = Annotated[
    Path,
    typer.Argument(
        help="A run directory, an engine log (FreeToken, SGLang, vLLM, "
        "llama.cpp, Ollama, tokdrift) or a saved Prometheus scrape series."
    ),
]
DateOpt = Annotated[
    str | None,
    typer.Option(
        help="Date (YYYY-MM-DD) of a log whose lines carry only a time of "
        "day (a pasted excerpt, SGLang of 2024); the day a llama.cpp "
        "log without dates is placed on."
    ),
]
YearOpt = Annotated[int | None, typer.Option(help="Year of a log whose dates have none (vLLM, journald).")]


@app.command()
def ingest(
    source: SourceArg,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the steps table here (Parquet).")] = None,
    events_out: Annotated[Path | None, typer.Option("--events", help="Write the events table here (Parquet).")] = None,
    date: DateOpt = None,
    year: YearOpt = None,
) -> None:
    """Read a source into one steps table and its events, and say what was found."""
    from rich.console import Console

    from diagnostics.source.source import load_source

    src = load_source(source, date=_date(date), year=year)
    console = Console()
    steps, events = src.steps, src.events
    phases = steps["phase"].value_counts().to_dict()
    console.print(
        f"{src.kind} {src.path} ({src.engine}): {len(steps)} steps "
        f"({', '.join(f'{k} {v}' for k, v in sorted(phases.items()))}), {len(events)} events, "
        f"{int(steps['engine_life'].max()) + 1 if len(steps) else 0} engine lives",
        highlight=False,
    )
    if src.log_info is not None:
        info = src.log_info
        console.print(
            f"{info.num_lines} lines; {info.num_unknown_lines} with no known prefix skipped; "
            f"{info.num_bad_lines} bad lines skipped; {info.num_other_lines} of no interest; "
            f"{info.num_bad_values} malformed numbers; clock: {info.clock}"
            + "".join(f"; {note}" for note in info.notes),
            highlight=False,
        )
    if len(steps):
        console.print(f"from {steps['t'].min()} to {steps['t'].max()}", highlight=False)
    for kind, count in events["kind"].value_counts().items():
        console.print(f"  {kind}: {count}", highlight=False)
    if out is not None:
        steps.to_parquet(out, index=False)
        console.print(f"steps written to {out}", highlight=False)
    if events_out is not None:
        events.astype({"detail": "string"}).to_parquet(events_out, index=False)
        console.print(f"events written to {events_out}", highlight=False)


@app.command()
def analyze(
    source: SourceArg,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the analysis as JSON (schema_version 1) on stdout.")
    ] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the analysis JSON to this file.")] = None,
    date: DateOpt = None,
    year: YearOpt = None,
) -> None:
    """Decide engine age versus context growth, with onset, trigger, suspects and checks."""
    from rich.console import Console

    from diagnostics.analysis import analyze as run_analysis
    from diagnostics.source.source import load_source
    from diagnostics.words.console import render

    loaded = load_source(source, date=_date(date), year=year)
    result = run_analysis(loaded)
    doc = json.dumps(result.to_dict(), indent=2)
    if out is not None:
        out.write_text(doc + "\n", encoding="utf-8")
    if as_json:
        typer.echo(doc)
    else:
        Console().print(render(result, loaded))


# report, summary, bundle and compare live in reports/ (reports -> diagnostics, never back).
from tokdrift.cli.reports import register as _register_reports  # noqa: E402

_register_reports(app)


def main() -> None:
    run_app(app)


if __name__ == "__main__":  # python -m tokdrift.cli.diag
    main()
