"""`diag report`, `diag summary`, `diag bundle`, `diag compare`: registered on the `diag` app by
diagnostics/cli.py through `register(app)`."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from reports.errors import ReportError
from rundir import schema

if TYPE_CHECKING:
    from reports.inputs import Inputs

SourceArg = Annotated[
    Path,
    typer.Argument(
        help="A run directory or an engine log (FreeToken, SGLang, vLLM, "
        "tokdrift), or a saved Prometheus scrape series."
    ),
]
DateOpt = Annotated[
    str | None, typer.Option(help="Date (YYYY-MM-DD) of a pasted excerpt whose lines carry only a time of day.")
]
YearOpt = Annotated[int | None, typer.Option(help="Year of a vLLM log (its lines carry month and day only).")]
RedactOpt = Annotated[
    bool,
    typer.Option(
        "--redact/--no-redact",
        help="Remove prompt and completion text, API keys, bearer tokens and home-directory paths (the default).",
    ),
]


def register(app: typer.Typer) -> None:
    app.command("report")(report)
    app.command("summary")(summary)
    app.command("bundle")(bundle)
    app.command("compare")(compare)


def report(
    source: SourceArg,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Where to write the page (default: report.html in a run directory, else ./report.html)."
        ),
    ] = None,
    date: DateOpt = None,
    year: YearOpt = None,
    redact: RedactOpt = True,
) -> None:
    """Write one self-contained HTML report: verdict, plots, matched comparisons, suspects, checks."""
    from reports.redact import Redactor
    from reports.report import render_report

    inputs = _load(source, date, year)
    if out is None:
        out = source / schema.REPORT if inputs.source.kind == "run_dir" else Path("report.html")
    _write(out, render_report(inputs, Redactor(redact)))
    typer.echo(f"{inputs.analysis.verdict}: report written to {out}")


def summary(
    source: SourceArg,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the Markdown to this file.")] = None,
    date: DateOpt = None,
    year: YearOpt = None,
    redact: RedactOpt = True,
) -> None:
    """Print a Markdown summary (at most ~60 lines) to paste into an issue."""
    from reports.redact import Redactor
    from reports.summary import render_summary

    text = render_summary(_load(source, date, year), Redactor(redact))
    if out is not None:
        _write(out, text)
    typer.echo(text, nl=False)


def bundle(
    source: SourceArg,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="The tar.gz to write (default: <source name>-bundle.tar.gz here)."),
    ] = None,
    date: DateOpt = None,
    year: YearOpt = None,
    redact: RedactOpt = True,
) -> None:
    """Write a tar.gz for a bug report: report, analysis JSON, summary, manifest, trimmed log, profiles."""
    from reports.bundle import write_bundle

    if out is None:  # one bundle per source: a second run's bundle does not overwrite the first's
        out = Path(f"{(source.name if source.is_dir() else source.stem) or 'source'}-bundle.tar.gz")
    inputs = _load(source, date, year)
    try:
        result = write_bundle(inputs, out, redact=redact)
    except OSError as exc:
        raise ReportError(f"{out}: expected a writable path for the bundle, could not write ({exc.strerror})") from None
    typer.echo(f"bundle written to {result.path}: {len(result.members)} files")
    if result.log_lines is not None:
        typer.echo(f"engine log: {result.log_lines[0]} of {result.log_lines[1]} lines kept")
    typer.echo(f"redacted: {result.redaction}")


def compare(
    a: Annotated[Path, typer.Argument(help="The first run directory or log (before a fix).")],
    b: Annotated[Path, typer.Argument(help="The second run directory or log (after a fix).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the comparison page.")] = Path(
        "compare.html"
    ),
    date: DateOpt = None,
    year: YearOpt = None,
    date_b: Annotated[str | None, typer.Option(help="Date of B when it differs from --date.")] = None,
    year_b: Annotated[int | None, typer.Option(help="Year of B when it differs from --year.")] = None,
    redact: RedactOpt = True,
) -> None:
    """Write an HTML page setting two runs or logs side by side: verdicts, matched throughput, probes."""
    from reports.compare import render_compare
    from reports.redact import Redactor

    left = _load(a, date, year)
    right = _load(b, date_b or date, year_b or year)
    _write(out, render_compare(left, right, Redactor(redact)))
    typer.echo(f"{left.analysis.verdict} vs {right.analysis.verdict}: comparison written to {out}")


def _load(path: Path, date: str | None, year: int | None) -> Inputs:
    from reports.inputs import load

    day = None
    if date is not None:
        try:
            day = dt.date.fromisoformat(date)
        except ValueError:
            raise ReportError(f"--date: expected YYYY-MM-DD, found {date!r}") from None
    return load(path, date=day, year=year)


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"{path}: expected a writable path, could not write ({exc.strerror})") from None
