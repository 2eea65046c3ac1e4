"""Synthetic traces shaped like coding-agent, chat and RAG traffic, deterministic by seed.

agentic: every session starts from one large fixed prefix (system prompt + tool
definitions, shared by all sessions), then grows call by call as tool results and the
model's own output are appended onto the cached context, with tool-execution think gaps
and now and then a user turn. Past `compaction_at` the agent asks for a summary (a
compaction call over the whole history) and continues from prefix + summary. A few calls
carry an append that pushes the prompt past `context_max`; the agent then compacts.
chat: short multi-turn conversations on a small shared system prompt.
rag: many users on one shared system prompt, each turn appending retrieved documents.

Call times assume the original engine ran at `prefill_tps`/`decode_tps`; a replayer that
waits for each response and then `think_time` does not depend on them.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from replay.blocks import BlockChain, IdAllocator
from replay.errors import TraceError
from replay.trace import Call, TraceHeader

PROFILES = ("agentic", "chat", "rag")
COMPACTION_PROMPT_TOKENS = 40  # "summarise the conversation so far" appended to the history


@dataclass(frozen=True, kw_only=True)
class SynthConfig:
    """Options of the generator; `for_profile` fills the defaults of a profile."""

    profile: str = "agentic"
    seed: int = 0
    sessions: int = 8
    concurrency: int = 4  # sessions running at once
    duration: float | None = None  # seconds; no call is sent after this
    block_size: int = 64
    prefix_tokens: int = 7_500  # ~9.5K chars of system prompt + ~21K chars of tools, as opencode sends
    context_min: int = 10_000  # a session's first prompt, about (jittered +-20%)
    context_max: int = 230_000  # the engine's limit; a prompt past it is over-long
    calls_min: int = 40  # turn calls per session, drawn uniformly in [calls_min, calls_max]
    calls_max: int = 160
    append_median: int = 1_500  # tokens a tool result adds (lognormal)
    append_sigma: float = 1.0
    append_max: int = 24_000
    user_append_median: int = 150  # tokens a user message adds
    output_median: int = 250  # lognormal, reasoning included
    output_sigma: float = 0.8
    output_max: int = 8_000
    reasoning_share: float = 0.3  # of each output
    think_median: float = 2.0  # seconds of tool execution before the next call (lognormal)
    user_turn_prob: float = 0.08  # chance that the next call follows a user message instead
    user_think_median: float = 30.0
    compaction_at: int = 200_000  # context that triggers a compaction call
    summary_tokens: int = 3_000  # the summary that replaces the history
    overlong_fraction: float = 0.01  # share of calls whose prompt is pushed past context_max
    prefill_tps: float = 2_000.0  # assumed original speed, only to place t
    decode_tps: float = 50.0

    def __post_init__(self) -> None:
        def need(name: str, ok: bool, constraint: str) -> None:
            if not ok:
                raise TraceError(f"{name}: expected {constraint}, found {getattr(self, name)!r}")

        need("profile", self.profile in PROFILES, f"one of {', '.join(PROFILES)}")
        for name in (
            "sessions",
            "concurrency",
            "block_size",
            "context_min",
            "context_max",
            "calls_min",
            "calls_max",
            "append_median",
            "append_max",
            "user_append_median",
            "output_median",
            "output_max",
            "compaction_at",
            "summary_tokens",
        ):
            need(name, isinstance(getattr(self, name), int) and getattr(self, name) >= 1, "an integer >= 1")
        need(
            "prefix_tokens",
            0 <= self.prefix_tokens < self.context_min,
            f"0 <= prefix_tokens < context_min ({self.context_min})",
        )
        need("context_max", self.context_max >= self.context_min, f">= context_min ({self.context_min})")
        need("calls_max", self.calls_max >= self.calls_min, f">= calls_min ({self.calls_min})")
        need("compaction_at", self.compaction_at <= self.context_max, f"<= context_max ({self.context_max})")
        need(
            "summary_tokens",
            self.prefix_tokens + self.summary_tokens < self.compaction_at,
            f"prefix_tokens + summary_tokens < compaction_at ({self.compaction_at})",
        )
        for name in ("reasoning_share", "user_turn_prob", "overlong_fraction"):
            need(name, 0.0 <= getattr(self, name) <= 1.0, "a fraction in [0, 1]")
        for name in ("append_sigma", "output_sigma", "think_median", "user_think_median"):
            need(name, getattr(self, name) >= 0, "a number >= 0")
        for name in ("prefill_tps", "decode_tps"):
            need(name, getattr(self, name) > 0, "a number > 0")
        need("duration", self.duration is None or self.duration > 0, "seconds > 0 or None")

    @classmethod
    def for_profile(cls, profile: str, **overrides: Any) -> SynthConfig:
        """The defaults of `profile`, then `overrides` (None values are ignored)."""
        if profile not in PROFILES:
            raise TraceError(f"profile: expected one of {', '.join(PROFILES)}, found {profile!r}")
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise TraceError(f"unknown synth option(s): {', '.join(sorted(unknown))}")
        values = {**_PROFILE_DEFAULTS[profile], **{k: v for k, v in overrides.items() if v is not None}}
        return cls(profile=profile, **values)


_PROFILE_DEFAULTS: dict[str, dict[str, Any]] = {
    "agentic": {},
    "chat": dict(
        sessions=16,
        concurrency=4,
        block_size=16,
        prefix_tokens=300,
        context_min=400,
        context_max=16_000,
        calls_min=3,
        calls_max=10,
        append_median=80,
        append_sigma=0.8,
        append_max=2_000,
        user_append_median=80,
        output_median=300,
        output_sigma=0.6,
        output_max=2_000,
        reasoning_share=0.0,
        think_median=20.0,
        user_turn_prob=1.0,
        user_think_median=20.0,
        compaction_at=16_000,
        summary_tokens=500,
        overlong_fraction=0.0,
    ),
    "rag": dict(
        sessions=32,
        concurrency=8,
        block_size=16,
        prefix_tokens=1_200,
        context_min=4_000,
        context_max=32_000,
        calls_min=1,
        calls_max=3,
        append_median=3_000,
        append_sigma=0.4,
        append_max=12_000,
        user_append_median=3_000,
        output_median=200,
        output_sigma=0.5,
        output_max=1_500,
        reasoning_share=0.0,
        think_median=15.0,
        user_turn_prob=1.0,
        user_think_median=15.0,
        compaction_at=32_000,
        summary_tokens=500,
        overlong_fraction=0.0,
    ),
}


def synthesize(config: SynthConfig) -> tuple[TraceHeader, list[Call]]:
    """The header and calls (sorted by t) of a synthetic trace."""
    alloc = IdAllocator()
    shared = BlockChain(config.block_size, alloc)
    shared.extend(config.prefix_tokens)
    schedule = np.random.default_rng([config.seed, 0])
    slots = [(float(schedule.uniform(0, 5.0 * i)), i) for i in range(config.concurrency)]
    heapq.heapify(slots)
    calls: list[Call] = []
    for index in range(config.sessions):
        free_at, slot = heapq.heappop(slots)
        start = free_at + (float(schedule.exponential(2.0)) if free_at > 0 else 0.0)
        if config.duration is not None and start > config.duration:
            break
        session_calls, end = _session(config, index, start, shared)
        calls.extend(session_calls)
        heapq.heappush(slots, (end, slot))
    calls.sort(key=lambda c: (c.t, c.session, c.turn))
    meta = {"max_context": config.context_max, "generator": asdict(config)}
    return TraceHeader(block_size=config.block_size, source=f"synth:{config.profile}", meta=meta), calls


class _Session:
    """One session being generated: its context, its clock and its calls."""

    def __init__(self, config: SynthConfig, index: int, start: float, shared: BlockChain) -> None:
        self.config = config
        self.rng = np.random.default_rng([config.seed, 1, index])
        self.name = f"{config.profile}-{index:03d}"
        self.chain = shared.copy()
        self.t = start
        self.calls: list[Call] = []
        self.think: float | None = None
        self.new_tokens = 0  # appended since the last call: the uncached prefill of the next

    def call(self, kind: str, num_out: int, reasoning: int) -> None:
        cfg = self.config
        self.calls.append(
            Call(
                t=round(self.t, 3),
                session=self.name,
                turn=len(self.calls),
                hash_ids=tuple(self.chain.ids),
                input_tokens=self.chain.num_tokens,
                output_tokens=num_out,
                reasoning_tokens=reasoning,
                think_time=None if self.think is None else round(self.think, 3),
                kind=kind,
            )
        )
        self.t += self.new_tokens / cfg.prefill_tps + num_out / cfg.decode_tps
        self.new_tokens = 0

    def append(self, num_tokens: int) -> None:
        self.chain.extend(num_tokens)
        self.new_tokens += num_tokens

    def wait(self, seconds: float) -> None:
        self.think = seconds
        self.t += seconds

    def compact(self) -> None:
        """A compaction call over the whole history, then prefix + summary."""
        cfg = self.config
        self.append(COMPACTION_PROMPT_TOKENS)
        self.wait(0.1)
        self.call("compaction", cfg.summary_tokens, 0)
        self.chain.truncate(cfg.prefix_tokens)
        self.append(cfg.summary_tokens)


def _session(config: SynthConfig, index: int, start: float, shared: BlockChain) -> tuple[list[Call], float]:
    cfg = config
    s = _Session(config, index, start, shared)
    rng = s.rng
    first = int(cfg.context_min * rng.uniform(0.8, 1.2))
    s.append(max(first, cfg.prefix_tokens + 1) - cfg.prefix_tokens)
    num_calls = int(rng.integers(cfg.calls_min, cfg.calls_max + 1))
    for _ in range(num_calls):
        if cfg.duration is not None and s.t > cfg.duration:
            break
        num_out = _lognormal(rng, cfg.output_median, cfg.output_sigma, 1, cfg.output_max)
        s.call("turn", num_out, round(num_out * cfg.reasoning_share))
        s.append(num_out)  # the model's answer is history now
        if rng.random() < cfg.user_turn_prob:
            think = float(rng.lognormal(math.log(max(cfg.user_think_median, 1e-3)), 0.8))
            num_append = _lognormal(rng, cfg.user_append_median, cfg.append_sigma, 1, cfg.append_max)
        else:
            think = float(rng.lognormal(math.log(max(cfg.think_median, 1e-3)), 0.8))
            num_append = _lognormal(rng, cfg.append_median, cfg.append_sigma, 1, cfg.append_max)
        if rng.random() < cfg.overlong_fraction:
            # A huge tool result: the prompt passes the limit, the engine refuses it, the agent compacts.
            over = int(cfg.context_max * rng.uniform(1.02, 1.3)) - s.chain.num_tokens
            before = s.chain.copy()
            s.wait(think)
            s.append(max(over, 1))
            s.call("turn", _lognormal(rng, cfg.output_median, cfg.output_sigma, 1, cfg.output_max), 0)
            s.chain = before
            s.compact()
            s.append(_lognormal(rng, cfg.user_append_median, cfg.append_sigma, 1, cfg.append_max))
            s.wait(float(rng.lognormal(math.log(max(cfg.think_median, 1e-3)), 0.8)))
            continue
        if s.chain.num_tokens + num_append > cfg.compaction_at:
            s.compact()
        s.wait(think)
        s.append(num_append)
    calls = [c for c in s.calls if cfg.duration is None or c.t <= cfg.duration]  # a session's tail only
    return calls, s.t


def _lognormal(rng: np.random.Generator, median: float, sigma: float, low: int, high: int) -> int:
    return int(min(high, max(low, round(float(rng.lognormal(math.log(median), sigma))))))


__all__ = ["PROFILES", "SynthConfig", "synthesize"]
