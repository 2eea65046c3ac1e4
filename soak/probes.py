"""Matched-condition probes: the same request, sent alone, every `--probe-every`.

The prompt comes from replay's reserved probe namespace (it shares no prefix with replayed
traffic), is greedy and asks for a fixed output length with eos ignored where the target
accepts that. While a probe cycle runs no new trace call goes out; the cycle waits (up to a
bound) for the calls in flight to finish, so a probe's decode rate is the engine's alone. A
probe that could not wait that long is still sent and recorded with status `busy`. The cycle
itself (the soaked engine and its control, back to back) is soak/cycle.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from replay import MaterializeConfig, probe_prompt
from soak.client import CallResult, Client

logger = logging.getLogger(__name__)

EngineBusy = Callable[[], Awaitable[int | None]]


class ProbeResult(NamedTuple):
    t: float
    probe_id: str
    prompt_tokens: int | None
    output_tokens: int | None
    ttft_s: float | None
    decode_tps: float | None
    status: str  # ok, busy (others were in flight), or the call's error status
    call: CallResult
    reason: str


class Prober:
    """The probe request; sends it to whichever engine's client it is given."""

    def __init__(self, config: MaterializeConfig, num_input_tokens: int, num_output_tokens: int) -> None:
        self.prompt = probe_prompt(config, num_input_tokens, num_output_tokens)
        self.num_output_tokens = num_output_tokens
        payload = self.prompt.token_ids if self.prompt.token_ids is not None else self.prompt.messages
        self.probe_id = hashlib.sha256(json.dumps([payload, num_output_tokens]).encode()).hexdigest()[:12]

    def payload(self, api: str) -> Any:
        if api == "chat":
            if self.prompt.messages is not None:
                return self.prompt.messages
            return [{"role": "user", "content": " ".join(str(t) for t in self.prompt.token_ids or ())}]
        if self.prompt.token_ids is not None:
            return self.prompt.token_ids
        assert self.prompt.messages is not None  # a prompt holds its tokens or its text
        return self.prompt.messages[0]["content"]

    async def send(self, client: Client, reason: str, alone: bool = True) -> ProbeResult:
        """One probe; `alone`: the engine had nothing else to do (else the result is `busy`)."""
        call = await client.call(self.payload(client.api), self.num_output_tokens, greedy=True, exact_length=True)
        status = call.status if call.status != "ok" else ("ok" if alone else "busy")
        n_out = call.output_tokens if call.output_tokens is not None else call.num_token_chunks
        n_in = call.prompt_tokens if call.prompt_tokens is not None else self.prompt.num_input_tokens
        return ProbeResult(
            t=call.t_send,
            probe_id=self.probe_id,
            prompt_tokens=n_in,
            output_tokens=n_out,
            ttft_s=call.ttft_s,
            decode_tps=call.decode_tps,
            status=status,
            call=call,
            reason=reason,
        )

    async def warm_up(self, client: Client) -> None:
        """The probe itself, not recorded: a fresh engine's first calls pay one-off costs
        (allocations, lazy initialisation, kernel compilation) that would make the baseline slow."""
        await client.call(self.payload(client.api), self.num_output_tokens, greedy=True, exact_length=True)


async def wait_until_idle(idle: asyncio.Event, engine_busy: EngineBusy | None, wait_s: float) -> bool:
    """No call of ours in flight, and (where the engine says) nothing running inside it: a call
    the client gave up on may still be decoding there. False when `wait_s` ran out first."""

    async def wait() -> None:
        await idle.wait()
        while engine_busy is not None and (await engine_busy() or 0) > 0:
            await asyncio.sleep(0.1)

    try:
        await asyncio.wait_for(wait(), wait_s)
        return True
    except asyncio.TimeoutError:
        logger.info("probe: calls still in flight after %.0f s; probing anyway", wait_s)
        return False
