"""`diag`: ingest, analyze and report. The only diagnostics module that reaches `reports`."""

from __future__ import annotations

from typing import Annotated

import typer

from tokdrift import __version__, configure_logging, run_app

app = typer.Typer(
    help="Tell engine-age degradation from context growth, with evidence for a bug report.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _callback(
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, help="More log output (-vv for debug).")] = 0,
) -> None:
    configure_logging(verbose)


@app.command()
def version() -> None:
    """Print the tokdrift version."""
    typer.echo(__version__)


def main() -> None:
    run_app(app)
