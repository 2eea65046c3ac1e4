"""A simulated inference engine serving agent sessions: the ground truth a log is printed from.

Continuous batching as SGLang, FreeToken and vLLM do it: a waiting request is prefilled (its
new tokens, attending to its cached prefix) while decoding requests wait; then every running
request gets one token per decode forward. A forward costs

    (base + per_seq * batch + per_token * KV tokens attended) * fault(engine age) * host(t) * (1 + jitter)

where host(t) is a slowly varying noise (a log AR(1) process, `noise` its spread) and fault is
a step (the decode step runs `factor` times slower from the end of one triggering append
onward) or a creep (step time grows by `per_hour` per hour of engine age). A restart loses
every request in flight and the prefix cache, and cures the fault unless it survives restarts.
When the running requests' KV would outgrow the pool, the newest are preempted and prefilled
again later (recomputed), as SGLang retracts and vLLM preempts.

The result (`Trace`) holds every forward, prefill, idle spell, preemption, drop and engine
start with its time in seconds from the start, and every request's life; the writers in this
package print it as each engine prints its log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from logsim.workload import Agents, Turn, Workload


@dataclass(frozen=True, kw_only=True)
class Costs:
    base_s: float = 0.012  # weights read once per decode forward
    per_seq_s: float = 0.001  # per running sequence (sampling, KV writes)
    per_token_s: float = 1.5e-7  # attention over one KV token, per forward
    prefill_token_s: float = 6e-5  # prefill matmuls per new token
    prefill_attn_s: float = 4e-10  # prefill attention per new token per token attended
    jitter: float = 0.005  # per forward, independent
    noise: float = 0.03  # host noise: spread of a slowly varying log factor
    noise_tau_s: float = 20.0  # ...its correlation time

    def __post_init__(self) -> None:
        for name in ("base_s", "per_seq_s", "per_token_s", "prefill_token_s", "prefill_attn_s", "jitter", "noise"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.noise_tau_s <= 0:
            raise ValueError(f"noise_tau_s must be > 0, got {self.noise_tau_s}")


@dataclass(frozen=True, kw_only=True)
class Fault:
    kind: str  # step: a slowdown from one append onward; creep: step time grows with engine age
    at_h: float  # step: when the triggering append arrives; creep: the engine age it starts at
    factor: float = 4.0  # step: decode step time times this after the trigger
    per_hour: float = 0.06  # creep: step time grows by this fraction per hour of engine age
    new_tokens: int = 5_792  # step: the triggering append...
    cached_tokens: int = 121_712  # ...onto a cached branch this long (a session resumed)
    survives_restart: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("step", "creep"):
            raise ValueError(f"kind must be step or creep, got {self.kind!r}")
        if self.at_h < 0:
            raise ValueError(f"at_h must be >= 0, got {self.at_h}")
        if self.kind == "step" and self.factor < 1:
            raise ValueError(f"factor must be >= 1 (a multiplier on step time), got {self.factor}")


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    costs: Costs = field(default_factory=Costs)
    kv_capacity: int = 245_760
    max_context: int = 200_000  # a longer prompt is dropped
    max_running: int = 64  # llama.cpp's slots; batch-line engines admit far more
    max_prefill_tokens: int = 16_384  # a longer prompt is prefilled in chunks of this many
    fault: Fault | None = None
    restarts_h: tuple[float, ...] = ()
    restart_downtime_s: float = 45.0

    def __post_init__(self) -> None:
        if self.kv_capacity <= 0 or self.max_context <= 0 or self.max_running <= 0:
            raise ValueError(
                f"kv_capacity, max_context and max_running must be > 0, got "
                f"{(self.kv_capacity, self.max_context, self.max_running)}"
            )


class Prefill(NamedTuple):
    seq: int  # order of everything recorded
    life: int
    t0: float  # seconds from the start
    t1: float
    rid: int
    new: int
    cached: int
    num_running: int  # decoding requests that waited for it
    num_waiting: int
    kv: int  # KV tokens of the running requests after it
    recompute: bool  # a preempted request prefilled again


class Event(NamedTuple):
    seq: int
    life: int
    t: float
    kind: str  # start, idle, preemption, drop
    count: int  # preemption: requests; drop: prompt tokens
    rid: int  # drop: the request; else -1


class Request:
    """One turn's life in the engine."""

    __slots__ = (
        "rid",
        "agent",
        "life",
        "slot",
        "new",
        "cached",
        "out",
        "arrival",
        "t_prefill",
        "t_first",
        "prefill_s",
        "spans",
        "generated",
        "context",
        "t_done",
        "status",
        "task",
    )

    def __init__(self, rid: int, turn: Turn, life: int, arrival: float) -> None:
        self.rid, self.agent, self.life = rid, turn.agent, life
        self.slot = -1
        self.new, self.cached, self.out = turn.new, turn.cached, turn.out
        self.arrival = arrival
        self.t_prefill = math.nan  # start of its (first) prefill
        self.t_first = math.nan  # end of its prefill: the first token
        self.prefill_s = 0.0
        self.spans: list[list[int]] = []  # [first forward, last forward + 1] while decoding
        self.generated = 0
        self.context = turn.cached + turn.new  # tokens in the KV cache
        self.t_done = math.nan
        self.status = "waiting"  # waiting, running, done, lost, dropped
        self.task = -1  # per-life request number (llama.cpp's task id)


class Trace(NamedTuple):
    workload: Workload
    spec: EngineSpec
    f_seq: np.ndarray  # [F] per decode forward
    f_life: np.ndarray
    f_t: np.ndarray  # end of the forward (s)
    f_dur: np.ndarray
    f_batch: np.ndarray
    f_kv: np.ndarray  # KV tokens attended (context of every running request)
    f_waiting: np.ndarray
    prefills: list[Prefill]
    events: list[Event]
    requests: list[Request]
    life_starts: list[float]
    onset_s: float | None  # step: when the triggering append's prefill began; creep: when it began
    trigger: Prefill | None  # the triggering append
    end_s: float


def simulate(workload: Workload, spec: EngineSpec) -> Trace:
    return _Engine(workload, spec).run()


class _Engine:
    def __init__(self, workload: Workload, spec: EngineSpec) -> None:
        self.w, self.spec, self.c = workload, spec, spec.costs
        self.rng = np.random.default_rng(workload.seed)
        self.end = workload.hours * 3600.0
        self.host = _host_noise(self.rng, self.end + 3600.0, self.c.noise, self.c.noise_tau_s)
        self.jitter = iter(self.rng.normal(0.0, self.c.jitter, 1 << 16).tolist())
        self.agents = Agents(workload, self.rng)
        self.seq = 0
        self.t = 0.0
        self.life = 0
        self.life_starts = [0.0]
        self.tasks = 0
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.requests: list[Request] = []
        self.prefills: list[Prefill] = []
        self.events: list[Event] = [Event(seq=self._next(), life=0, t=0.0, kind="start", count=0, rid=-1)]
        self.forwards: list[tuple] = []
        self.degraded = False
        self.trigger: Prefill | None = None
        self.trigger_rid = -1
        self.onset_s: float | None = None
        fault = spec.fault
        self.trigger_at = fault.at_h * 3600 if fault is not None and fault.kind == "step" else None
        if fault is not None and fault.kind == "creep":
            self.onset_s = fault.at_h * 3600
        self.restarts = sorted(h * 3600 for h in spec.restarts_h)
        self.idle_logged = False

    def run(self) -> Trace:
        while self.t < self.end:
            if self.restarts and self.t >= self.restarts[0]:
                self._restart(self.restarts.pop(0))
                continue
            self._arrivals()
            if self._admit():
                continue
            if self.running:
                self._decode()
                continue
            if not self.idle_logged:
                # An engine reports idle once it has started up, after its startup lines.
                at = max(self.t, self.life_starts[-1] + 1.0)
                self.events.append(Event(seq=self._next(), life=self.life, t=at, kind="idle", count=0, rid=-1))
                self.idle_logged = True
            nxt = min(
                self.agents.next_due(self.t),
                self.end,
                self.restarts[0] if self.restarts else math.inf,
                self.trigger_at if self.trigger_at is not None else math.inf,
            )
            self.t = max(nxt, self.t + 1e-3)
        f = np.array(self.forwards, dtype=float).reshape(-1, 7)
        return Trace(
            workload=self.w,
            spec=self.spec,
            f_seq=f[:, 0].astype(np.int64),
            f_life=f[:, 1].astype(np.int64),
            f_t=f[:, 2],
            f_dur=f[:, 3],
            f_batch=f[:, 4].astype(np.int64),
            f_kv=f[:, 5].astype(np.int64),
            f_waiting=f[:, 6].astype(np.int64),
            prefills=self.prefills,
            events=sorted(self.events, key=lambda e: e.seq),
            requests=self.requests,
            life_starts=self.life_starts,
            onset_s=self.onset_s,
            trigger=self.trigger,
            end_s=self.t,
        )

    # --- the loop's parts ---

    def _arrivals(self) -> None:
        if self.trigger_at is not None and self.t >= self.trigger_at:
            fault = self.spec.fault
            agent = self.agents.add(fault.cached_tokens, self.t)
            self.agents.busy[agent] = True
            self.agents.context[agent] += fault.new_tokens
            turn = Turn(agent, fault.new_tokens, fault.cached_tokens, int(self.rng.integers(150, 400)))
            self.trigger_rid = self._submit(turn).rid
            self.trigger_at = None
        for i in self.agents.due(self.t):
            self._submit(self.agents.turn(i))

    def _submit(self, turn: Turn) -> Request:
        req = Request(len(self.requests), turn, self.life, self.t)
        self.requests.append(req)
        if req.context > self.spec.max_context:
            req.status = "dropped"
            self.events.append(
                Event(seq=self._next(), life=self.life, t=self.t, kind="drop", count=req.context, rid=req.rid)
            )
            self.agents.failed(req.agent, self.t)
            self.agents.context[req.agent] = 0  # the agent starts over with a new session
        else:
            self.waiting.append(req)
        return req

    def _admit(self) -> bool:
        """Prefill the first waiting request when its KV fits; True when one ran."""
        if not self.waiting or len(self.running) >= self.spec.max_running:
            return False
        req = self.waiting[0]
        kv = sum(r.context for r in self.running)
        if kv + req.context > self.spec.kv_capacity and self.running:
            return False
        self.waiting.pop(0)
        self.idle_logged = False
        recompute = req.status == "preempted"
        if req.task < 0:
            req.task = self.tasks
            self.tasks += 1
        t0 = self.t
        new, cached = (req.context, 0) if recompute else (req.new, req.cached)
        dur = 0.0
        done = 0
        while done < new:  # chunked prefill: each chunk attends to everything before it
            chunk = min(self.spec.max_prefill_tokens, new - done)
            dur += chunk * (self.c.prefill_token_s + self.c.prefill_attn_s * (cached + done + chunk / 2))
            done += chunk
        dur *= self._host(t0)
        self.t += dur
        req.prefill_s += dur
        if math.isnan(req.t_prefill):
            req.t_prefill = t0
        req.t_first = self.t if math.isnan(req.t_first) else req.t_first
        if not recompute:
            req.generated = 1  # the prefill samples the first token
            req.context += 1
        req.status = "running"
        req.spans.append([len(self.forwards), len(self.forwards)])
        num_running = len(self.running)
        self.running.append(req)
        p = Prefill(
            seq=self._next(),
            life=self.life,
            t0=t0,
            t1=self.t,
            rid=req.rid,
            new=new,
            cached=cached,
            num_running=num_running,
            num_waiting=len(self.waiting),
            kv=kv + req.context,
            recompute=recompute,
        )
        self.prefills.append(p)
        if req.rid == self.trigger_rid and not recompute:
            self.trigger, self.onset_s, self.degraded = p, t0, True
        self._finish_done()
        return True

    def _decode(self) -> None:
        batch = len(self.running)
        kv = sum(r.context for r in self.running)
        step = self.c.base_s + self.c.per_seq_s * batch + self.c.per_token_s * kv
        step *= self._fault() * self._host(self.t) * (1.0 + self._jitter())
        self.t += step
        for r in self.running:
            r.generated += 1
            r.context += 1
        self.forwards.append((self._next(), self.life, self.t, step, batch, kv, len(self.waiting)))
        for r in self.running:
            r.spans[-1][1] = len(self.forwards)
        self._finish_done()
        self._preempt()

    def _finish_done(self) -> None:
        still = []
        for r in self.running:
            if r.generated >= r.out:
                r.status, r.t_done = "done", self.t
                self.agents.done(r.agent, self.t, r.generated)
            else:
                still.append(r)
        self.running = still

    def _preempt(self) -> None:
        """The newest running requests go back to the queue while the KV pool overflows."""
        count = 0
        while (
            len(self.running) > 1 and sum(r.context for r in self.running) + len(self.running) > self.spec.kv_capacity
        ):
            r = self.running.pop()
            r.status = "preempted"
            self.waiting.insert(0, r)
            count += 1
        if count:
            self.events.append(
                Event(seq=self._next(), life=self.life, t=self.t, kind="preemption", count=count, rid=-1)
            )

    def _restart(self, at: float) -> None:
        for r in self.running + self.waiting:
            r.status, r.t_done = "lost", at
            self.agents.failed(r.agent, at + self.spec.restart_downtime_s)
        self.running, self.waiting = [], []
        self.agents.restart()
        self.t = at + self.spec.restart_downtime_s
        self.life += 1
        self.life_starts.append(self.t)
        self.tasks = 0
        self.events.append(Event(seq=self._next(), life=self.life, t=self.t, kind="start", count=0, rid=-1))
        self.idle_logged = False
        if self.spec.fault is None or not self.spec.fault.survives_restart:
            self.degraded = False

    # --- costs ---

    def _fault(self) -> float:
        fault = self.spec.fault
        if fault is None:
            return 1.0
        if fault.kind == "step":
            return fault.factor if self.degraded else 1.0
        if fault.survives_restart:
            age_h = self.t / 3600
        else:
            age_h = (self.t - self.life_starts[-1]) / 3600
        return 1.0 + fault.per_hour * max(0.0, age_h - fault.at_h)

    def _host(self, t: float) -> float:
        return float(self.host[min(int(t), len(self.host) - 1)])

    def _jitter(self) -> float:
        try:
            return next(self.jitter)
        except StopIteration:
            self.jitter = iter(self.rng.normal(0.0, self.c.jitter, 1 << 16).tolist())
            return next(self.jitter)

    def _next(self) -> int:
        self.seq += 1
        return self.seq


def _host_noise(rng: np.random.Generator, seconds: float, spread: float, tau_s: float) -> np.ndarray:
    """exp(spread * z) per second of wall time, z an AR(1) process of unit variance."""
    n = int(seconds) + 1
    rho = math.exp(-1.0 / tau_s)
    shocks = rng.normal(0.0, math.sqrt(1 - rho * rho), n)
    z = np.empty(n)
    z[0] = rng.normal()
    for k in range(1, n):  # [n] a recursion; n is hours * 3600
        z[k] = rho * z[k - 1] + shocks[k]
    return np.exp(spread * z)
