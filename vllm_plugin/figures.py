"""A process's own figures, appended to the step record as one `figures` line (record.py).

Several of a vLLM's processes state figures: the step-cost fault in the one that runs the model, the
garbage collector in each (gcstats.py), the host in the API server's (host.py). Each line says its
process (`pid`) and the vLLM it belongs to (`root`: the pid of the process that loaded tokdrift's
plugins first, the API server, whose pid the record's start line states), so that a reader sums one
figure over a vLLM's processes and sets apart the lines a new life's processes write while it starts,
before its start line (logformats.vllm_steps).

The root is handed down in the environment: the API server loads vLLM's general plugins while it
reads its arguments, before it starts the engine core, and every process vLLM starts inherits the
environment (spawned or forked).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping

from vllm_plugin.record import FIGURES, ROOT_ENV


def mark_root() -> int:
    """This process's vLLM: the root its environment names, else this process, named there for the
    processes it starts."""
    named = root()
    if named == os.getpid():
        os.environ[ROOT_ENV] = str(named)
    return named


def root() -> int:
    """The root the environment names, else this process."""
    named = os.environ.get(ROOT_ENV, "")
    return int(named) if named.isdigit() else os.getpid()


def line(figures: Mapping[str, float | str], t: float | None = None) -> str:
    """A `figures` line of this process's, newline included."""
    head = {"kind": FIGURES, "t": time.time() if t is None else t, "pid": os.getpid(), "root": root()}
    return json.dumps({**head, **figures}, separators=(",", ":")) + "\n"


def append(path: str, figures: Mapping[str, float | str]) -> None:
    """One write, O_APPEND: a whole line beside the step writer's blocks (steps.py says why)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line(figures).encode())
    finally:
        os.close(fd)
