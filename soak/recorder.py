"""The requests table and the counters the live view and status lines show.

Everything here stays the same size however long the soak runs: rows go to the store (which
writes them out every flush), the live rate keeps only the last `window_s` seconds.
"""

from __future__ import annotations

import re
from collections import deque

from replay import Call, Prompt
from rundir.writer import RunStore
from soak.client import CallResult


class RateWindow:
    """Tokens over the last `window_s` seconds; trimmed on every add, so it holds one window."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self._items: deque[tuple[float, int]] = deque()

    def add(self, t: float, num_tokens: int) -> None:
        self._items.append((t, num_tokens))
        self._trim(t)

    def rate(self, now: float) -> float:
        self._trim(now)
        return sum(n for _, n in self._items) / self.window_s

    def __len__(self) -> int:
        return len(self._items)

    def _trim(self, now: float) -> None:
        while self._items and self._items[0][0] < now - self.window_s:
            self._items.popleft()


class Recorder:
    """One requests row per finished call (the main engine's traffic and its probes)."""

    def __init__(self, store: RunStore, num_calls: int = 0) -> None:
        self.store = store
        self.num_calls = num_calls  # written rows, across resumes
        self.num_failed = 0  # error or refused, this segment
        self.recent = RateWindow()

    def call(
        self,
        request_id: str,
        sid: str | None,
        call: Call | None,
        prompt: Prompt | None,
        r: CallResult,
        life: int,
        age: float | None,
        kind: str | None = None,
    ) -> None:
        prompt_tokens = r.prompt_tokens
        if prompt_tokens is None and prompt is not None and prompt.token_ids is not None:
            prompt_tokens = len(prompt.token_ids)
        self.store.add(
            "requests",
            {
                "request_id": request_id,
                "session": sid,
                "turn": call.turn if call else None,
                "kind": kind or (call.kind if call else None),
                "t_send": r.t_send,
                "t_first_token": r.t_first_token,
                "t_first_content": r.t_first_content,
                "t_last_token": r.t_last_token,
                "prompt_tokens": prompt_tokens,
                "cached_tokens": r.cached_tokens,
                "output_tokens": r.output_tokens,
                "reasoning_tokens": r.reasoning_tokens,
                "status": r.status,
                "error": r.error,
                "engine_age_s": age,
                "engine_life": life,
            },
        )
        self.num_calls += 1
        if r.status in ("error", "refused"):
            self.num_failed += 1
        if r.status == "refused":
            self.store.event(
                "dropped_request",
                request_id=request_id,
                input_tokens=prompt_tokens,
                limit=limit_in(r.error),
                error=r.error,
            )
        if r.output_tokens and r.t_last_token:
            self.recent.add(r.t_last_token, r.output_tokens)


# Where each engine names its context limit in a refusal (the number right after the phrase); the
# requested length is named too, so "the last number" would often be the wrong one.
_LIMIT_PHRASES = re.compile(
    r"(?:maximum context length is|maximum model length of|max_model_len(?: of| is|=|:)?|"  # vLLM
    r"model's context length \(|context length of|"  # SGLang
    r"available context size \(|context size of|n_ctx(?: of| is|=|:)?|"  # llama.cpp
    r"engine's context of|context window of|limit of|limit is)\s*(\d+)",  # tokdrift, generic
    re.IGNORECASE,
)


def limit_in(error: str | None) -> int | None:
    """The context limit a refusal names (vLLM, SGLang, llama.cpp and tokdrift phrasings), or None
    when its message names none."""
    m = _LIMIT_PHRASES.search(error or "")
    return int(m.group(1)) if m else None
