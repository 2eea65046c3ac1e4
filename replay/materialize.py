"""Turn a trace call into a prompt a target can serve: token ids or chat text.

Every hash id becomes the same block of content wherever it appears, so calls that share
ids share a real prefix and the target's prefix cache sees what the original server saw.
Content is derived from SHAKE-256 of the id (no RNG library), so it is the same on every
machine and every version.

The probe namespace: trace content never uses `probe_token_id` (token prompts) and never
contains "[" (text prompts), and probe prompts start with that token / with "[tokdrift-probe".
A probe therefore shares nothing, not even its first token, with replayed traffic.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import numpy as np

from replay.errors import TraceError
from replay.trace import Call

OVER_LIMIT_POLICIES = ("drop", "trim", "keep")
OverLimit = Literal["drop", "trim", "keep"]  # what to do with a call above max_context
MODES = ("tokens", "text")
PROBE_TEXT_MARKER = "[tokdrift-probe"

# Common English words: one BPE token each (with the leading space) in most tokenizers.
_WORDS = tuple(
    """the of and to in is was that for on with as by at from his her they this are be have had not
    but what all were when we there can an your which their said if do will each about how up out them
    then she many some so these would other into has more two like him see time could no make than first
    been its who now people my made over did down only way find use may water long little very after
    words called just where most know get through back much before go good new write our used me man
    too any day same right look think also around another came come work three word must because does
    part even place well such here take why things help put years different away again off went old
    number great tell men say small every found still between name should home big give air line set
    own under read last never us left end along while might next sound below saw something thought both
    few those always looked show large often together asked house world going want school important
    until form food keep children feet land side without boy once animals life enough took sometimes
    four head above kind began almost live page got earth need far hand high year mother light parts
    country father let night following picture being study second eyes soon times story boys since white
    days ever paper hard near sentence better best across during today others however sure means knew
    try told young miles sun ways thing whole hear example heard several change answer room sea against
    top turned learn point city play toward five using himself usually""".split()
)


@dataclass(frozen=True, kw_only=True)
class MaterializeConfig:
    """How calls of one trace become prompts."""

    block_size: int  # the trace's block size (header.block_size)
    scale: float = 1.0  # every length times this; 1/16 replays a 200K-token session as 12.5K
    max_context: int | None = None  # prompt + output tokens the target allows
    over_limit: OverLimit = "trim"  # what to do with a call above max_context
    mode: Literal["tokens", "text"] = "tokens"
    vocab_size: int = 256  # token ids are drawn from [0, vocab_size); 256 = the built-in byte-level model
    reserved_ids: frozenset[int] = field(default_factory=frozenset)  # specials never put in a prompt
    probe_token_id: int | None = None  # kept for probes; None = the highest id not reserved
    min_output_tokens: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.block_size, int) or self.block_size < 1:
            raise TraceError(f"block_size: expected an integer >= 1, found {self.block_size!r}")
        if not (0 < self.scale <= 1e6) or not math.isfinite(self.scale):
            raise TraceError(f"scale: expected a number > 0, found {self.scale!r}")
        if self.max_context is not None and self.max_context < 2:
            raise TraceError(f"max_context: expected an integer >= 2 or None, found {self.max_context!r}")
        if self.over_limit not in OVER_LIMIT_POLICIES:
            raise TraceError(f"over_limit: expected one of {', '.join(OVER_LIMIT_POLICIES)}, found {self.over_limit!r}")
        if self.mode not in MODES:
            raise TraceError(f"mode: expected one of {', '.join(MODES)}, found {self.mode!r}")
        object.__setattr__(self, "reserved_ids", frozenset(self.reserved_ids))
        if len(self.content_ids) < 2:
            raise TraceError(
                f"vocab_size: expected room for at least 3 usable ids after {len(self.reserved_ids)} reserved, "
                f"found vocab_size={self.vocab_size}"
            )
        if self.probe_token_id is not None and not (
            0 <= self.probe_token_id < self.vocab_size and self.probe_token_id not in self.reserved_ids
        ):
            raise TraceError(
                f"probe_token_id: expected an unreserved id below vocab_size, found {self.probe_token_id!r}"
            )
        if self.min_output_tokens < 1:
            raise TraceError(f"min_output_tokens: expected an integer >= 1, found {self.min_output_tokens!r}")

    @property
    def block_tokens(self) -> int:
        """Tokens per hash id after scaling."""
        return max(1, round(self.block_size * self.scale))

    @property
    def effective_scale(self) -> float:
        """The scale actually applied: whole tokens per block keep the prefix structure exact."""
        return self.block_tokens / self.block_size

    @property
    def probe_id(self) -> int:
        if self.probe_token_id is not None:
            return self.probe_token_id
        return max(i for i in range(self.vocab_size) if i not in self.reserved_ids)

    @property
    def content_ids(self) -> np.ndarray:
        return _content_ids(self.vocab_size, self.reserved_ids, self.probe_token_id)


@dataclass(frozen=True, kw_only=True)
class Prompt:
    """What to send for one call: token ids or chat messages, and how much to generate."""

    token_ids: list[int] | None  # mode "tokens"
    messages: list[dict[str, Any]] | None  # mode "text": one user message
    num_input_tokens: int  # exact for token ids; the intended length (about one token a word) for text
    max_output_tokens: int
    num_reasoning_tokens: int | None  # expected share of max_output_tokens, scaled
    num_trimmed_tokens: int = 0  # input cut to fit max_context
    over_limit: bool = False  # kept above max_context on purpose (policy "keep")
    session: str | None = None
    turn: int | None = None
    values: np.ndarray | None = field(default=None, repr=False, compare=False)  # content values behind the prompt


class Materializer:
    """Materialises calls under one config and counts what max_context did to them.

    It also keeps a conversation's prompts consistent: when a call of a session carries every
    block of the session's previous call but the last one, the previous prompt is sent again
    verbatim as its prefix, as a client re-sends its conversation. A trace hashes whole blocks,
    so the previous call's last, partial block gets a new id once the conversation has grown
    past it; without this, the two prompts would differ inside that block, and a hybrid model's
    prefix cache, whose linear-attention state is only kept at the end of a prompt, could not
    reuse the previous turn at all.
    """

    def __init__(self, config: MaterializeConfig, shared_ids: frozenset[int] = frozenset()) -> None:
        self.config = config
        self.shared_ids = shared_ids  # blocks several sessions share: the same in every loop
        self.num_calls = 0
        self.num_dropped = 0
        self.num_trimmed = 0
        self.num_over_limit = 0  # kept above the limit (policy "keep")
        self._last: dict[str, tuple[tuple[int, ...], np.ndarray]] = {}  # session -> hash ids, values

    def __call__(self, call: Call, loop: int = 0, session_key: str | None = None) -> Prompt | None:
        """`loop`: the trace loop a replay is in. From the second loop on, a session's own blocks
        become new content (a new day's sessions write new code), while blocks several sessions
        share (`shared_ids`: a system prompt, tool definitions) stay the same. `session_key`: the
        conversation the call belongs to (default: its trace session)."""
        self.num_calls += 1
        prefix = None
        key = session_key if session_key is not None else call.session
        last = self._last.get(key)
        if last is not None:
            ids, values = last
            if len(ids) > 1 and call.hash_ids[: len(ids) - 1] == ids[:-1]:
                prefix = values
        prompt = materialize(call, self.config, prefix, loop, self.shared_ids)
        if prompt is not None and prompt.values is not None:
            self._last[key] = (call.hash_ids, prompt.values)
        if prompt is None:
            self.num_dropped += 1
        elif prompt.num_trimmed_tokens:
            self.num_trimmed += 1
        elif prompt.over_limit:
            self.num_over_limit += 1
        return prompt

    def counts(self) -> dict[str, int]:
        """What became of the calls so far, as the manifest's `materialized` says it."""
        return {
            "calls": self.num_calls,
            "dropped": self.num_dropped,
            "trimmed": self.num_trimmed,
            "over_limit": self.num_over_limit,
        }

    def forget(self, session_key: str) -> None:
        """The conversation ended: its last prompt is no longer needed (a soak of hours runs
        thousands of them)."""
        self._last.pop(session_key, None)


def materialize(
    call: Call,
    config: MaterializeConfig,
    prefix: np.ndarray | None = None,
    salt: int = 0,
    keep: frozenset[int] = frozenset(),
) -> Prompt | None:
    """The prompt for `call`, or None when it exceeds max_context under policy "drop". `prefix`:
    content values the prompt starts with instead of its own, when no longer than the prompt
    (the session's previous prompt, `Materializer`). `salt` > 0 makes every block but those in
    `keep` (and the call's own tail) different content: the replay's later loops."""
    scale = config.effective_scale
    num_in = max(1, round(call.input_tokens * scale))
    num_out = max(config.min_output_tokens, round(call.output_tokens * scale))
    num_reasoning = None if call.reasoning_tokens is None else min(num_out, round(call.reasoning_tokens * scale))
    trimmed = 0
    over = False
    limit = config.max_context
    if limit is not None and num_in + num_out > limit:
        if config.over_limit == "drop":
            return None
        if config.over_limit == "trim":
            num_out = min(num_out, max(1, limit // 2))
            trimmed = num_in - (limit - num_out)
            num_in = limit - num_out
            if num_reasoning is not None:
                num_reasoning = min(num_reasoning, num_out)
        else:
            over = True
    tail_key = f"tail:{call.session}:{call.turn}:{call.t!r}" + (f":{salt}" if salt else "")
    values = _values(call.hash_ids, num_in, config.block_tokens, tail_key, salt, keep)
    if prefix is not None and len(prefix) <= num_in:
        values = np.concatenate([prefix, values[len(prefix) :]])
    token_ids, messages = None, None
    if config.mode == "tokens":
        ids = config.content_ids
        token_ids = ids[values % len(ids)].tolist()
    else:
        text = " ".join(_WORDS[v % len(_WORDS)] for v in values.tolist())
        messages = [{"role": "user", "content": text}]
    return Prompt(
        token_ids=token_ids,
        messages=messages,
        num_input_tokens=num_in,
        max_output_tokens=num_out,
        num_reasoning_tokens=num_reasoning,
        num_trimmed_tokens=trimmed,
        over_limit=over,
        session=call.session,
        turn=call.turn,
        values=values,
    )


def probe_prompt(config: MaterializeConfig, num_input_tokens: int, max_output_tokens: int, variant: int = 0) -> Prompt:
    """A fixed prompt from the reserved probe namespace: the same every time for the same arguments.

    It shares no prefix with any materialised trace call, so the target's prefix cache
    cannot serve it from replayed traffic; it can only hit an earlier identical probe.
    """
    if num_input_tokens < 1 or max_output_tokens < 1:
        raise TraceError(
            f"probe: expected input and output lengths >= 1, found {num_input_tokens}, {max_output_tokens}"
        )
    values = _stream(f"probe:{variant}", num_input_tokens)
    if config.mode == "tokens":
        ids = config.content_ids
        token_ids = [config.probe_id] + ids[values[1:] % len(ids)].tolist()
        return Prompt(
            token_ids=token_ids,
            messages=None,
            num_input_tokens=num_input_tokens,
            max_output_tokens=max_output_tokens,
            num_reasoning_tokens=None,
        )
    words = [f"{PROBE_TEXT_MARKER}-{variant}]"] + [_WORDS[v % len(_WORDS)] for v in values[1:].tolist()]
    return Prompt(
        token_ids=None,
        messages=[{"role": "user", "content": " ".join(words)}],
        num_input_tokens=num_input_tokens,
        max_output_tokens=max_output_tokens,
        num_reasoning_tokens=None,
    )


def _values(
    hash_ids: tuple[int, ...],
    num_tokens: int,
    block_tokens: int,
    tail_key: str,
    salt: int = 0,
    keep: frozenset[int] = frozenset(),
) -> np.ndarray:
    """`num_tokens` pseudo-random uint32 values: block by block from the ids, then a call-unique tail."""
    num_blocks = min(len(hash_ids), -(-num_tokens // block_tokens))
    parts = [_block(h, block_tokens, 0 if h in keep else salt) for h in hash_ids[:num_blocks]]
    covered = num_blocks * block_tokens
    if covered < num_tokens:
        parts.append(_stream(tail_key, num_tokens - covered))
    if not parts:
        return np.zeros(0, dtype=np.uint32)
    return np.concatenate(parts)[:num_tokens]


# Blocks kept for reuse: consecutive turns of a session reuse their previous prompt's values
# (Materializer), so what the cache saves is mostly the blocks sessions share. Every loop of a
# replay salts new content, so a cache of 65,536 blocks (about 590 bytes each at 64 tokens) kept
# filling for hours: 38 MB, the soak driver's slope of ~5 MB an hour (docs/soak.md, "Memory of a
# long run"). 4,096 hold the example trace's working set (2.4 MB, full within the first loops);
# a block not held costs one shake-256 of 256 bytes to make again.
BLOCK_CACHE_SIZE = 4096


@lru_cache(maxsize=BLOCK_CACHE_SIZE)
def _block(hash_id: int, n: int, salt: int = 0) -> np.ndarray:
    return _stream(f"block:{hash_id}" + (f":{salt}" if salt else ""), n)


def shared_block_ids(calls: Iterable[Call]) -> frozenset[int]:
    """Hash ids that calls of more than one session carry: a trace's common prefix."""
    seen: dict[int, str] = {}
    shared: set[int] = set()
    for call in calls:
        for h in set(call.hash_ids):
            first = seen.setdefault(h, call.session)
            if first != call.session:
                shared.add(h)
    return frozenset(shared)


def _stream(key: str, n: int) -> np.ndarray:
    digest = hashlib.shake_256(key.encode()).digest(4 * n)
    return np.frombuffer(digest, dtype="<u4")


@lru_cache(maxsize=32)
def _content_ids(vocab_size: int, reserved: frozenset[int], probe_token_id: int | None) -> np.ndarray:
    usable = [i for i in range(vocab_size) if i not in reserved]
    probe = probe_token_id if probe_token_id is not None else (usable[-1] if usable else None)
    return np.array([i for i in usable if i != probe], dtype=np.int64)
