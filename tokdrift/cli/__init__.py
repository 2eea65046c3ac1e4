"""The command layer: `soak` (soak.py, soak_run.py, trace.py) and `diag` (diag.py, reports.py), and
the fault matrix that soaks and then judges (fault_matrix.py). It may import every package; no
package imports it (tests/test_imports.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from tokdrift.cli.app import configure_logging


def verbose_callback(
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, help="More log output (-vv for debug).")] = 0,
) -> None:
    """The options every command shares: -v, -vv."""
    configure_logging(verbose)
