"""What every command line shares: running a typer app so that a user-facing error prints one
line and no traceback, and setting up logging once from the command's -v flags. Library code
only logs and raises `TokdriftError` (the ground, `ground`)."""

from __future__ import annotations

import logging
import sys

import typer
from rich.console import Console
from rich.markup import escape

from ground import TokdriftError


def run_app(app: typer.Typer) -> None:
    """Run a typer app as a console script: a TokdriftError prints one line, no traceback."""
    try:
        app()
    except TokdriftError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


def configure_logging(verbose: int) -> None:
    """Set up logging once, from a CLI callback; library code only logs."""
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)-8s %(name)s: %(message)s")
