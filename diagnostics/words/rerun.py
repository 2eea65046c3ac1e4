"""The soak to run next, as a complete command a reader can paste.

A run directory knows what it soaked: its trace, its target's URL, its control's, the built-in
engine's options. The next soak keeps those and changes only how long it runs (`--until-decided`,
`--hours 8`) or what it adds (`--baseline 8`); the run's length, output folder, restart commands
and live view are the user's to choose again. A log knows none of them: its command names the
example trace and says where the server's address goes.

What only a test of tokdrift itself sets is left out: a fault switched on in the built-in engine
(`--fault`, `--engine-arg=--fault-after=15`) makes the slowdown the test looks for, and a user's
next soak must not make it again; a trace in a temporary folder or among the test fixtures is
gone, or no user's traffic, by the time a reader runs the command (the example trace stands in,
and a shipped example is named as the checkout holds it: `examples/opencode.jsonl`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path, PurePath

from diagnostics.source.source import Source

# Options that say what was soaked: kept in the next command, with their values.
KEPT = ("--trace", "--target", "--control-target", "--engine-arg", "--twin-engine-arg", "--model", "--api")
# A test's instruments, never a user's: soak's own fault switch, and the built-in engine's fault
# options handed through --engine-arg (engine.runtime.config: --fault, --fault-after, ...).
INSTRUMENT = "--fault"
EXAMPLE_TRACE = "examples/opencode.jsonl"  # an agent's sessions, shipped with tokdrift
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"  # the shipped traces, in a checkout
TEMPORARY = ("/tmp/", "/var/tmp/", tempfile.gettempdir().rstrip("/") + "/")
FIXTURES = "tests/fixtures/"
SERVER = "http://HOST:PORT"  # a log does not say where its server listens to a client
LONG_SOAK = "--hours 8"  # a slowdown that builds over hours needs hours: a working day of traffic
SHORT_RUN_S = 3600.0  # a run shorter than this cannot see a slowdown that takes hours to build


def soak_command(source: Source | None, *extra: str) -> str:
    """`soak run --trace examples/opencode.jsonl --target http://127.0.0.1:8491 --until-decided`:
    the run's own trace, target, control and engine options, then `extra`."""
    argv = _recorded(source)
    if argv is None:
        return " ".join(("soak", "run", "--trace", EXAMPLE_TRACE, "--target", SERVER, *extra))
    return " ".join(("soak", "run", *_kept(argv), *extra))


def run_seconds(source: Source | None) -> float | None:
    """How long the run served, where its manifest says."""
    m = source.manifest if source is not None else None
    return m.elapsed_s if m is not None and m.elapsed_s else None


def is_short(source: Source | None) -> bool:
    """A run too short to see a slowdown that takes hours (unknown for a log: not said)."""
    seconds = run_seconds(source)
    return seconds is not None and seconds < SHORT_RUN_S


def _recorded(source: Source | None) -> list[str] | None:
    """The soak command the run was made with, from `run` on; None for a log."""
    m = getattr(source, "manifest", None)
    argv = [str(x) for x in (m.command if m is not None else [])]
    if "run" not in argv:
        return None
    return argv[argv.index("run") + 1 :]


def _kept(args: list[str]) -> list[str]:
    """The options of KEPT with their values (`--x v` or `--x=v`), less a test's instruments
    (`_instrument`); a `--target builtin` is the default; a trace as a reader can use it (`_trace`)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        flag = arg.split("=", 1)[0]
        joined = "=" in arg
        value = arg.split("=", 1)[1] if joined else (args[i + 1] if i + 1 < len(args) else "")
        step = 1 if joined else 2
        if flag in KEPT:
            if flag == "--trace":
                out.append(f"{flag} {_quoted(_trace(value))}")
            elif not (flag == "--target" and value == "builtin") and not _instrument(flag, value):
                out.append(arg if joined else f"{flag} {_quoted(value)}")
            i += step
        elif arg.startswith("-") and not joined and i + 1 < len(args) and not args[i + 1].startswith("-"):
            i += 2  # an option of another kind, with its value
        else:
            i += 1
    return out


def _instrument(flag: str, value: str) -> bool:
    """Whether an option is a test's instrument: an engine option of the built-in engine's faults
    (`--engine-arg=--fault-after=15`, `--twin-engine-arg --fault=gc-pressure`)."""
    return flag.endswith("engine-arg") and value.split("=", 1)[0].startswith(INSTRUMENT)


def _trace(value: str) -> str:
    """A trace as a reader can name it: a shipped example as the checkout holds it, the example
    trace for one in a temporary folder or among the test fixtures, else as the user typed it."""
    path = PurePath(value)
    if path.parent.name == "examples" and (EXAMPLES / path.name).is_file():
        return f"examples/{path.name}"
    if value.startswith(TEMPORARY) or FIXTURES in value:
        return EXAMPLE_TRACE
    return value


def _quoted(value: str) -> str:
    """A value as a shell reads it back: quoted where it holds a space."""
    return f"'{value}'" if " " in value else value
