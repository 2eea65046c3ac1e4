"""Matched-condition probes: the same request, sent alone, every `--probe-every`.

The prompt comes from replay's reserved probe namespace (it shares no prefix with replayed
traffic), is greedy and asks for a fixed output length with eos ignored where the target
accepts that. While a probe is due no new trace call goes out; the probe waits (up to a
bound) for the calls in flight to finish, so its decode rate is the engine's alone. A probe
that could not wait that long is still sent and recorded with status `busy`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from typing import Any, Awaitable, Callable, NamedTuple, Optional

from replay import MaterializeConfig, probe_prompt
from soak.client import CallResult, Client

logger = logging.getLogger(__name__)


class ProbeResult(NamedTuple):
    t: float
    probe_id: str
    prompt_tokens: Optional[int]
    output_tokens: Optional[int]
    ttft_s: Optional[float]
    decode_tps: Optional[float]
    status: str  # ok, busy (others were in flight), or the call's error status
    call: CallResult
    reason: str


class Prober:
    def __init__(self, client: Client, config: MaterializeConfig, num_input_tokens: int, num_output_tokens: int,
                 wait_s: float, engine_busy: Optional[Callable[[], Awaitable[Optional[int]]]] = None) -> None:
        self.client = client
        self.engine_busy = engine_busy  # requests the engine itself still runs, when it can tell
        self.prompt = probe_prompt(config, num_input_tokens, num_output_tokens)
        self.num_output_tokens = num_output_tokens
        self.wait_s = wait_s
        payload = self.prompt.token_ids if self.prompt.token_ids is not None else self.prompt.messages
        self.probe_id = hashlib.sha256(json.dumps([payload, num_output_tokens]).encode()).hexdigest()[:12]
        self.results: list[ProbeResult] = []

    @property
    def payload(self) -> Any:
        if self.client.api == "chat":
            if self.prompt.messages is not None:
                return self.prompt.messages
            return [{"role": "user", "content": " ".join(str(t) for t in self.prompt.token_ids)}]
        return self.prompt.token_ids if self.prompt.token_ids is not None else self.prompt.messages[0]["content"]

    async def probe(self, gate: asyncio.Event, idle: asyncio.Event, reason: str) -> ProbeResult:
        """Close the gate, wait for idle (bounded), send the probe, open the gate."""
        gate.clear()
        try:
            try:
                await asyncio.wait_for(self._wait_idle(idle), self.wait_s)
                alone = True
            except asyncio.TimeoutError:
                alone = False
                logger.info("probe: calls still in flight after %.0f s; probing anyway", self.wait_s)
            call = await self.client.call(self.payload, self.num_output_tokens, greedy=True, exact_length=True)
        finally:
            gate.set()
        status = call.status if call.status != "ok" else ("ok" if alone else "busy")
        n_out = call.output_tokens if call.output_tokens is not None else call.num_token_chunks
        n_in = call.prompt_tokens if call.prompt_tokens is not None else self.prompt.num_input_tokens
        result = ProbeResult(call.t_send, self.probe_id, n_in, n_out, call.ttft_s, call.decode_tps, status, call,
                             reason)
        self.results.append(result)
        return result

    async def _wait_idle(self, idle: asyncio.Event) -> None:
        """No call of ours in flight, and (where the engine says) nothing running inside it: a call
        the client gave up on may still be decoding there."""
        await idle.wait()
        while self.engine_busy is not None and (await self.engine_busy() or 0) > 0:
            await asyncio.sleep(0.1)

    async def warm_up(self) -> None:
        """The probe itself, not recorded: a fresh engine's first calls pay one-off costs
        (allocations, lazy initialisation, kernel compilation) that would make the baseline slow."""
        await self.client.call(self.payload, self.num_output_tokens, greedy=True, exact_length=True)

    @property
    def first_ok(self) -> Optional[ProbeResult]:
        return next((r for r in self.results if r.status == "ok" and r.decode_tps), None)
