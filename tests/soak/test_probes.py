"""Probes: the same request each time, sent once the target is idle (or marked busy)."""

import asyncio

from replay import MaterializeConfig
from soak.client import CallResult
from soak.probes import Prober, wait_until_idle


class FakeClient:
    api = "completions"

    def __init__(self):
        self.sent = []

    async def call(self, prompt, max_tokens, **kw):
        self.sent.append((tuple(prompt), max_tokens))
        return CallResult(
            t_send=0.0,
            t_first_token=0.2,
            t_first_content=0.2,
            t_last_token=1.2,
            prompt_tokens=len(prompt),
            cached_tokens=0,
            output_tokens=max_tokens,
            reasoning_tokens=None,
            status="ok",
            error=None,
            num_token_chunks=max_tokens,
        )


def _prober():
    return Prober(MaterializeConfig(block_size=16), 24, 11)


def _idle():
    idle = asyncio.Event()
    idle.set()
    return idle


def test_a_probe_sent_alone_is_ok_and_timed_from_its_first_token():
    result = asyncio.run(_prober().send(FakeClient(), "periodic"))
    assert result.status == "ok" and result.decode_tps == 10.0  # 10 tokens after the first in 1 s
    assert result.ttft_s == 0.2 and result.output_tokens == 11 and result.prompt_tokens == 24
    assert result.reason == "periodic"


def test_a_probe_sent_while_others_ran_is_marked_busy():
    assert asyncio.run(_prober().send(FakeClient(), "periodic", alone=False)).status == "busy"


def test_the_idle_wait_lasts_until_the_engine_has_nothing_running():
    answers = iter([2, 1, 0])

    async def busy():
        return next(answers)

    assert asyncio.run(wait_until_idle(_idle(), busy, 2.0)) is True
    assert next(answers, None) is None  # asked until it said 0


def test_the_idle_wait_gives_up_after_its_bound():
    async def busy():
        return 1

    assert asyncio.run(wait_until_idle(_idle(), busy, 0.3)) is False


def test_every_probe_is_the_same_request_with_the_reserved_first_token():
    client = FakeClient()
    first, second = _prober(), _prober()
    asyncio.run(first.send(client, "start"))
    asyncio.run(second.warm_up(client))
    assert client.sent[0] == client.sent[1] and first.probe_id == second.probe_id
    assert client.sent[0][0][0] == MaterializeConfig(block_size=16).probe_id
