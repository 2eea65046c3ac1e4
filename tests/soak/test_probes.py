"""Probes: the same request each time, sent only once the target is idle (or marked busy)."""

import asyncio

from replay import MaterializeConfig
from soak.client import CallResult
from soak.probes import Prober


class FakeClient:
    api = "completions"

    def __init__(self):
        self.sent = []

    async def call(self, prompt, max_tokens, **kw):
        self.sent.append((tuple(prompt), max_tokens))
        return CallResult(0.0, 0.2, 0.2, 1.2, len(prompt), 0, max_tokens, None, "ok", None, max_tokens)


def _probe(engine_busy, wait_s=2.0, client=None):
    client = client or FakeClient()
    prober = Prober(client, MaterializeConfig(block_size=16), 24, 11, wait_s, engine_busy)

    async def go():
        gate, idle = asyncio.Event(), asyncio.Event()
        gate.set()
        idle.set()
        result = await prober.probe(gate, idle, "periodic")
        assert gate.is_set()  # the replay may go on afterwards
        return result

    return asyncio.run(go()), client, prober


def test_probe_waits_until_the_engine_has_nothing_running():
    answers = iter([2, 1, 0])

    async def busy():
        return next(answers)

    result, client, _ = _probe(busy)
    assert result.status == "ok" and result.decode_tps == 10.0  # 10 tokens after the first in 1 s
    assert result.ttft_s == 0.2 and result.output_tokens == 11 and result.prompt_tokens == 24


def test_probe_that_cannot_wait_longer_is_sent_and_marked_busy():
    async def busy():
        return 1

    result, _, _ = _probe(busy, wait_s=0.3)
    assert result.status == "busy"


def test_every_probe_is_the_same_request_with_the_reserved_first_token():
    client = FakeClient()
    first, _, prober = _probe(None, client=client)
    second, _, _ = _probe(None, client=client)
    assert client.sent[0] == client.sent[1] and first.probe_id == second.probe_id
    assert client.sent[0][0][0] == MaterializeConfig(block_size=16).probe_id
