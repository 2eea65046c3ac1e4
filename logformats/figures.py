"""What a llama.cpp log must hold for a verdict from the log alone, and the option that prints each figure.

A llama-server log at its default verbosity holds, per request, its slot, its prompt (`new
prompt, n_ctx_slot = …, n_prompt_tokens = …`), its reuse of the slot's cache (`kv cache rm [P,
end)`), its context at the end (`stop processing: n_past = …`, 2025 on `n_tokens = …`) and its
prompt and decode timings (`print_timing`). What it may lack, and what each lack costs:

| figure | printed by | without it |
|---|---|---|
| the time of each line (`0.52.072.487 I …`: the time since the server started) | `--log-timestamps --log-prefix` | engine age is busy time (the requests' own timings added); a restart shows only by its start-up lines; which requests shared their batches is unknown, so no prompt of a server with several slots is compared (its time may hold the others') |
| each request's context and the slots busy beside it (`stop processing: n_past = …` at each release) | the default verbosity (info); missing where the log was cut to warnings | the context a decode ran at and the slots beside it are unknown: a slowdown cannot be told from longer context |

Ollama runs its own runner or a llama-server with its own options: none of these is named for it.
"""

from __future__ import annotations

from typing import NamedTuple


class Missing(NamedTuple):
    """A figure a log lacks for a verdict from the log alone, the option that prints it, and what it gives."""

    figure: str
    option: str
    gives: str

    def describe(self) -> str:
        return f"{self.figure}, which llama-server prints with {self.option} ({self.gives})"


STAMPS = Missing(
    figure="the time each line was printed (the `0.52.072.487 I` stamp: time since the server started)",
    option="`--log-timestamps --log-prefix`",
    gives="engine age in seconds, and which requests shared their batches: without it a prompt's time on a "
    "server with several slots may hold the other slots' work, and is not compared",
)
RELEASES = Missing(
    figure="each request's context at its end (`stop processing: n_past = …`)",
    option="its default verbosity (info; a log cut to warnings drops it)",
    gives="the context each decode ran at and the slots busy beside it: without it longer context cannot be "
    "told from engine age",
)


def llamacpp_missing(clock: str, has_release: bool, num_slots_served: int) -> tuple[Missing, ...]:
    """The figures a llama.cpp log lacks (`clock`: llamacpp.Clock.kind; `num_slots_served`: slots
    that ran a request in it)."""
    missing = []
    if clock == "busy":
        missing.append(STAMPS)
    if not has_release and num_slots_served > 0:
        missing.append(RELEASES)
    return tuple(missing)
