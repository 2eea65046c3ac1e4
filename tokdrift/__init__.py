"""What every tokdrift package shares: the version and the one user-facing error class.

A plain module with no dependencies, so that `engine`, `replay`, `soak`, `diagnostics` and
`reports` can all raise the same error without importing each other.
"""

__version__ = "0.1.0"


class TokdriftError(Exception):
    """A user-facing error: bad input, a missing file, an impossible option.

    The CLI prints its message on one line and exits non-zero, without a traceback. The
    message says what was expected, what was found, and where.
    """

    exit_code = 2


def run_app(app) -> None:
    """Run a typer app as a console script: a TokdriftError prints one line, no traceback."""
    import sys

    try:
        app()
    except TokdriftError as exc:
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


def configure_logging(verbose: int) -> None:
    """Set up logging once, from a CLI callback; library code only logs."""
    import logging

    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)-8s %(name)s: %(message)s")
