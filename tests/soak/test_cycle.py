"""Probe cycles: main and control back to back, the order alternating, warm-ups once per engine
life, the replay gate closed and the replay idle for both probes."""

import asyncio
from contextlib import asynccontextmanager

from replay import MaterializeConfig
from soak.client import CallResult
from soak.cycle import ProbeCycles
from soak.probes import Prober
from soak.replayer import Gate
from tests.soak.fakes import FakeTarget


class Engine:
    """The main engine or the control as the cycle sees it: a target, a client, a ready event."""

    def __init__(self, role, log, gate, idle):
        self.role = role
        self.target = FakeTarget(age_s=1.5)
        self.client = _Client(role, log, gate, idle)
        self.ready = asyncio.Event()
        self.ready.set()
        self.enabled = True
        self.num_probes = 0

    def answered_probe(self):
        self.num_probes += 1

    @asynccontextmanager
    async def probing(self):
        yield self.enabled


class _Client:
    api = "completions"

    def __init__(self, role, log, gate, idle):
        self.role, self.log, self.gate, self.idle = role, log, gate, idle
        self.num_calls = 0

    async def call(self, prompt, max_tokens, **kw):
        self.num_calls += 1
        self.log.append((self.role, self.gate.is_open, self.idle.is_set()))
        return CallResult(
            t_send=0.0,
            t_first_token=0.1,
            t_first_content=0.1,
            t_last_token=1.1,
            prompt_tokens=8,
            cached_tokens=0,
            output_tokens=max_tokens,
            reasoning_tokens=None,
            status="ok",
            error=None,
            num_token_chunks=max_tokens,
        )


def _cycles(first_number=0):
    gate, idle, log = Gate(), asyncio.Event(), []
    idle.set()
    main, control = Engine("main", log, gate, idle), Engine("control", log, gate, idle)
    cycles = ProbeCycles(
        Prober(MaterializeConfig(block_size=4), 8, 4), main, control, gate, idle, None, 1.0, first_number
    )
    return cycles, main, control, log


def test_pairs_alternate_their_order_and_each_life_is_warmed_up_once():
    async def go():
        cycles, main, control, log = _cycles()
        done = [await cycles.run("start"), await cycles.run("periodic"), await cycles.run("periodic")]
        control.target.life = 1  # the twin was restarted between cycles
        done.append(await cycles.run("periodic"))
        return done, log, (control.num_probes, main.num_probes)

    done, log, answered = asyncio.run(go())
    assert [c.number for c in done] == [0, 1, 2, 3]
    assert [[t.role for t in c.taken] for c in done] == [
        ["main", "control"],
        ["control", "main"],
        ["main", "control"],
        ["control", "main"],
    ]
    # every call the engines saw, warm-ups included: the gate closed and the replay idle for each
    assert [role for role, _, _ in log] == [
        "main",
        "main",
        "control",
        "control",
        "control",
        "main",
        "main",
        "control",
        "control",
        "control",
        "main",
    ]
    assert all(not gate_open and idle for _, gate_open, idle in log)
    rows = done[3].rows
    assert [(r["role"], r["cycle"], r["engine_life"], r["reason"]) for r in rows] == [
        ("control", 3, 1, "periodic"),
        ("main", 3, 0, "periodic"),
    ]
    assert rows[0]["probe_id"] == rows[1]["probe_id"] and rows[0]["decode_tps"] == 3.0
    assert answered == (len(done), 0)  # the control's restart schedule counts its probes (warm-ups not)


def test_the_gate_opens_after_the_cycle_and_numbering_goes_on_from_where_it_was():
    async def go():
        cycles, main, control, log = _cycles(first_number=7)
        cycle = await cycles.run("periodic")
        return cycle, cycles.gate.is_open

    cycle, gate_open = asyncio.run(go())
    assert cycle.number == 7 and [t.role for t in cycle.taken] == ["control", "main"]  # 7 is odd
    assert gate_open


def test_without_a_control_only_the_main_engine_is_probed():
    async def go():
        cycles, main, control, log = _cycles()
        control.enabled = False
        return [await cycles.run("start"), await cycles.run("periodic")], control.client.num_calls

    done, control_calls = asyncio.run(go())
    assert [[t.role for t in c.taken] for c in done] == [["main"], ["main"]] and control_calls == 0


def test_the_cycles_kept_stay_few_however_many_run():
    async def go():
        cycles, *_ = _cycles()
        for _ in range(50):
            await cycles.run("periodic")
        return cycles

    cycles = asyncio.run(go())
    assert len(cycles.recent) == 5 and cycles.recent[-1].number == 49
    assert cycles.first_main_ok is not None and cycles.first_main_ok.reason == "periodic"
