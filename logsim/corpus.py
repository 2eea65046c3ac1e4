"""A labelled corpus: engines serving agents, each case with the truth diag should recover.

Every case draws its figures (when the fault lands, how slow it makes the engine, how many
agents, how noisy the host) from its own seed, so a new seed gives cases no one tuned on. The
truth comes from the simulation itself: the verdict the case was built to have, when the
slowdown began (for a creep, the span from its start to where it reaches the 10 % that counts as
material), the append that triggered a step and whether a restart cured it.
"""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple

import numpy as np

from logsim.engine import Costs, EngineSpec, Fault, Trace
from logsim.workload import Workload

MATERIAL = 0.10  # a creep's onset span ends where the slowdown reaches this
RAW_DROP = 0.9  # diag calls a healthy engine's fall context growth below this raw ratio (diagnostics.decision.verdict)
RAW_BAND = (0.85, 0.95)  # a true raw ratio in here sits on that line: either verdict is right


class Case(NamedTuple):
    name: str
    what: str  # one line: what the case is
    workload: Workload
    spec: EngineSpec
    verdict: str  # the verdict diag should give
    head_steps: int | None = None  # an excerpt: the log's first lines only
    start: dt.datetime = dt.datetime(2026, 9, 23, 9, 0, 0)


class Truth(NamedTuple):
    verdict: str  # the verdict diag should give...
    accepted: tuple[str, ...]  # ...or these: a healthy engine whose raw rate fell by about 10 % either way
    onset: tuple[float, float] | None  # seconds from the start: the span the onset lies in
    onset_age: tuple[float, float] | None  # the same as engine age
    trigger: tuple[str, float, int, int] | None  # kind, seconds from the start, new and cached tokens
    recovered: bool | None  # a restart cured it; None without a restart


NAMES = (
    "step_after_append",
    "gradual_creep",
    "context_growth",
    "batch_walk",
    "restart_recovery",
    "preemption_storm",
    "idle_gaps",
    "prefill_mixed",
    "short_excerpt",
    "noise_2pct",
    "noise_10pct",
    "healthy_noise_10pct",
    "step_after_idle",
)
QUICK = ("step_after_append", "context_growth", "short_excerpt")


def cases(seed: int, names: tuple[str, ...] = NAMES, quick: bool = False) -> list[Case]:
    """The corpus' cases for `seed`; `quick`: shorter runs (a smoke test, not a measurement)."""
    out = []
    for name in names:
        rng = np.random.default_rng([seed, NAMES.index(name)])  # a case is the same whatever else runs
        out.append(_BUILDERS[name](rng, int(rng.integers(1 << 31)), 0.4 if quick else 1.0))
    return out


def truth(case: Case, trace: Trace) -> Truth:
    """What diag should find. A healthy engine's verdict follows the simulation's own decode cost,
    as diag's does: `context_growth_only` when its per-request rate fell by more than 10 % from the
    first quarter of the run to the last (longer contexts, a bigger batch), or when its decode
    forward at the longest contexts it served (90th percentile) costs more than 1/0.9 of one at the
    shortest (10th), at the median batch — context slowed decode even where each new session
    starts short again; else `no_degradation`; within RAW_BAND of that line, either, and either
    where only context (not the raw rate) asks for `context_growth_only`: a log that prints no
    usable context cannot show it."""
    fault = case.spec.fault
    restarted = len(trace.life_starts) > 1
    if case.verdict in ("no_degradation", "context_growth_only"):
        raw, by_context = raw_ratio(trace), context_ratio(trace)
        verdict = "context_growth_only" if min(raw, by_context) < RAW_DROP else "no_degradation"
        both = ("no_degradation", "context_growth_only")
        # Context alone (the raw rate did not fall) is named only where the log prints the context
        # that shows it; where it does not, no_degradation is right too.
        either = RAW_BAND[0] <= min(raw, by_context) <= RAW_BAND[1] or (raw >= RAW_DROP and by_context < RAW_DROP)
        return Truth(
            verdict=verdict,
            accepted=both if either else (verdict,),
            onset=None,
            onset_age=None,
            trigger=None,
            recovered=None,
        )
    if fault is None or case.verdict != "engine_age_degradation":
        return Truth(
            verdict=case.verdict, accepted=(case.verdict,), onset=None, onset_age=None, trigger=None, recovered=None
        )
    if fault.kind == "step":
        if trace.trigger is None:
            raise ValueError(f"case {case.name}: the triggering append never ran (the run ended first)")
        p = trace.trigger
        age = p.t0 - trace.life_starts[p.life]
        return Truth(
            verdict=case.verdict,
            accepted=(case.verdict,),
            onset=(p.t0, p.t0),
            onset_age=(age, age),
            trigger=("prefill_append", p.t0, p.new, p.cached),
            recovered=True if restarted and not fault.survives_restart else None,
        )
    lo = fault.at_h * 3600
    hi = lo + MATERIAL / fault.per_hour * 3600
    return Truth(
        verdict=case.verdict, accepted=(case.verdict,), onset=(lo, hi), onset_age=(lo, hi), trigger=None, recovered=None
    )


def context_ratio(trace: Trace) -> float:
    """The engine's true decode speed at the longest contexts it served (90th percentile of the
    forwards' KV tokens, first life) over the shortest (10th), at the median batch."""
    first = trace.f_life == trace.f_life.min()
    kv, batch = trace.f_kv[first], trace.f_batch[first]
    if len(kv) == 0:
        return 1.0
    c = trace.spec.costs
    b = float(np.median(batch))
    short, long = np.percentile(kv, [10, 90])
    step = lambda tokens: c.base_s + c.per_seq_s * b + c.per_token_s * tokens  # noqa: E731
    return float(step(short) / step(long))


def raw_ratio(trace: Trace) -> float:
    """The engine's true per-request decode rate (one token per forward) in the last quarter of the
    run over the first quarter, medians of its forwards."""
    t, rate = trace.f_t, 1.0 / trace.f_dur
    quarter = (t.max() - t.min()) / 4
    return float(np.median(rate[t >= t.max() - quarter]) / np.median(rate[t <= t.min() + quarter]))


def motivating(seed: int = 0) -> Case:
    """shared/formats' motivating report as a whole FreeToken log: an agent whose sessions grow by
    appends on an engine started at 21:03:12; at 21:18:50 a 5,792-token append lands on a
    121,712-token cached branch and decode falls from ~58 to ~11 tok/s, and stays there."""
    start = dt.datetime(2026, 9, 23, 21, 3, 12)
    onset = dt.datetime(2026, 9, 23, 21, 18, 50)
    costs = Costs(base_s=0.012, per_seq_s=0.001, per_token_s=3e-8, noise=0.03)
    return Case(
        name="motivating",
        what="the motivating report's engine, its whole log",
        workload=Workload(
            hours=1.0,
            agents=((0.0, 1),),
            append_tokens=(300, 3_000),
            think_s=(5.0, 45.0),
            session_tokens=(100_000, 190_000),
            first_context=(60_000, 90_000),
            pauses=((((onset - start).total_seconds() - 40) / 3600, 1.5),),
            seed=seed,
        ),
        spec=EngineSpec(
            costs=costs,
            fault=Fault(
                kind="step",
                at_h=(onset - start).total_seconds() / 3600,
                factor=5.2,
                new_tokens=5_792,
                cached_tokens=121_712,
            ),
        ),
        verdict="engine_age_degradation",
        start=start,
    )


# --- the cases ---


def _costs(rng: np.random.Generator, noise: float = 0.03, per_token_s: float | None = None) -> Costs:
    """An engine a little different each seed: ~17 ms a step at batch 1 and 20K context."""
    return Costs(
        base_s=float(rng.uniform(0.010, 0.014)),
        per_seq_s=float(rng.uniform(0.0007, 0.0015)),
        per_token_s=per_token_s if per_token_s is not None else float(rng.uniform(1.0e-7, 2.0e-7)),
        noise=noise,
        noise_tau_s=float(rng.uniform(10.0, 40.0)),
    )


def _step(rng: np.random.Generator, at_h: float, factor: float | None = None) -> Fault:
    return Fault(
        kind="step",
        at_h=at_h,
        factor=factor if factor is not None else float(rng.uniform(3.0, 6.0)),
        new_tokens=int(rng.integers(2_500, 9_000)),
        cached_tokens=int(rng.integers(60_000, 125_000)),
    )


def _step_after_append(rng, seed, scale):
    hours = float(rng.uniform(2.5, 3.5)) * scale
    return Case(
        name="step_after_append",
        what="a step slowdown right after a long append onto a cached branch",
        workload=Workload(
            hours=hours, agents=((0.0, int(rng.integers(1, 4))),), session_tokens=(60_000, 130_000), seed=seed
        ),
        spec=EngineSpec(costs=_costs(rng), fault=_step(rng, hours * float(rng.uniform(0.35, 0.6)))),
        verdict="engine_age_degradation",
    )


def _gradual_creep(rng, seed, scale):
    hours = 6.0 * scale
    return Case(
        name="gradual_creep",
        what="step time grows ~6%/hour of engine age, batch and context steady",
        workload=Workload(hours=hours, agents=((0.0, 2),), session_tokens=(40_000, 70_000), seed=seed),
        spec=EngineSpec(
            costs=_costs(rng, noise=0.02), fault=Fault(kind="creep", at_h=0.0, per_hour=float(rng.uniform(0.05, 0.08)))
        ),
        verdict="engine_age_degradation",
    )


def _context_growth(rng, seed, scale):
    hours = float(rng.uniform(2.5, 3.5)) * scale
    return Case(
        name="context_growth",
        what="sessions grow from 10K to 150K+ tokens; nothing else changes",
        workload=Workload(
            hours=hours,
            agents=((0.0, int(rng.integers(1, 3))),),
            system_tokens=(8_000, 12_000),
            append_tokens=(100, 600),
            output_tokens=(40, 400),
            think_s=(5.0, 60.0),
            session_tokens=(400_000, 500_000),
            seed=seed,
        ),
        spec=EngineSpec(
            costs=_costs(rng, per_token_s=float(rng.uniform(2.5e-7, 4e-7))), kv_capacity=600_000, max_context=1_000_000
        ),
        verdict="context_growth_only",
    )


def _batch_walk(rng, seed, scale):
    hours = float(rng.uniform(2.5, 3.5)) * scale
    levels = [1, int(rng.integers(3, 5)), 2, int(rng.integers(3, 6)), 2, 1]
    steps = tuple(
        (0.0 if k == 0 else hours * (k + float(rng.uniform(-0.2, 0.2))) / len(levels), n) for k, n in enumerate(levels)
    )
    return Case(
        name="batch_walk",
        what="the number of agents walks 1 -> 4 -> 2 -> 5 -> 1; no fault",
        workload=Workload(hours=hours, agents=steps, session_tokens=(40_000, 80_000), seed=seed),
        spec=EngineSpec(costs=_costs(rng)),
        verdict="no_degradation",
    )


def _restart_recovery(rng, seed, scale):
    hours = float(rng.uniform(2.5, 3.5)) * scale
    return Case(
        name="restart_recovery",
        what="a step slowdown after an append, cured by a restart",
        workload=Workload(hours=hours, agents=((0.0, 2),), session_tokens=(60_000, 120_000), seed=seed),
        spec=EngineSpec(
            costs=_costs(rng),
            fault=_step(rng, hours * float(rng.uniform(0.3, 0.45))),
            restarts_h=(hours * float(rng.uniform(0.65, 0.75)),),
        ),
        verdict="engine_age_degradation",
    )


def _preemption_storm(rng, seed, scale):
    hours = float(rng.uniform(2.5, 3.5)) * scale
    return Case(
        name="preemption_storm",
        what="too many long sessions for the KV pool for a while: preempted and recomputed",
        workload=Workload(
            hours=hours,
            agents=((0.0, 2), (hours * 0.35, 6), (hours * 0.6, 2)),
            session_tokens=(30_000, 45_000),
            seed=seed,
        ),
        spec=EngineSpec(costs=_costs(rng), kv_capacity=int(rng.integers(110_000, 150_000))),
        verdict="no_degradation",
    )


def _idle_gaps(rng, seed, scale):
    hours = float(rng.uniform(2.5, 3.5)) * scale
    pauses = ((hours * 0.3, float(rng.uniform(15, 30)) * scale), (hours * 0.65, float(rng.uniform(20, 40)) * scale))
    return Case(
        name="idle_gaps",
        what="every agent pauses twice for 15-40 minutes; no fault",
        workload=Workload(hours=hours, agents=((0.0, 2),), pauses=pauses, seed=seed),
        spec=EngineSpec(costs=_costs(rng)),
        verdict="no_degradation",
    )


def _prefill_mixed(rng, seed, scale):
    hours = float(rng.uniform(2.0, 3.0)) * scale
    return Case(
        name="prefill_mixed",
        what="short sessions with big prompts: prefills inside most decode windows; no fault",
        workload=Workload(
            hours=hours,
            agents=((0.0, 3),),
            system_tokens=(15_000, 30_000),
            output_tokens=(30, 250),
            think_s=(1.0, 8.0),
            session_tokens=(20_000, 35_000),
            seed=seed,
        ),
        spec=EngineSpec(costs=_costs(rng)),
        verdict="no_degradation",
    )


def _short_excerpt(rng, seed, scale):
    return Case(
        name="short_excerpt",
        what="six lines with a throughput pasted from the start of a log",
        workload=Workload(hours=0.1, agents=((0.0, 2),), seed=seed),
        spec=EngineSpec(costs=_costs(rng)),
        verdict="insufficient_data",
        head_steps=6,
    )


def _noisy_step(name: str, description: str, noise: float, factor: tuple[float, float]):
    """A case: a step slowdown by `factor` after an append, on a host whose speed wanders by `noise`."""

    def build(rng, seed, scale):
        hours = float(rng.uniform(2.5, 3.5)) * scale
        return Case(
            name=name,
            what=description,
            workload=Workload(hours=hours, agents=((0.0, 2),), session_tokens=(60_000, 120_000), seed=seed),
            spec=EngineSpec(
                costs=_costs(rng, noise=noise),
                fault=_step(rng, hours * float(rng.uniform(0.35, 0.6)), float(rng.uniform(*factor))),
            ),
            verdict="engine_age_degradation",
        )

    return build


_noise_2pct = _noisy_step("noise_2pct", "a small step (1.4-1.8x) after an append, host noise 2%", 0.02, (1.4, 1.8))
_noise_10pct = _noisy_step("noise_10pct", "a 2-3x step after an append, host noise 10%", 0.10, (2.0, 3.0))


def _healthy_noise_10pct(rng, seed, scale):
    hours = float(rng.uniform(2.5, 3.5)) * scale
    return Case(
        name="healthy_noise_10pct",
        what="a healthy engine on a host whose speed wanders by 10%",
        workload=Workload(hours=hours, agents=((0.0, 2),), session_tokens=(40_000, 90_000), seed=seed),
        spec=EngineSpec(costs=_costs(rng, noise=0.10)),
        verdict="no_degradation",
    )


def _step_after_idle(rng, seed, scale):
    hours = float(rng.uniform(2.5, 3.5)) * scale
    pause_h = hours * float(rng.uniform(0.4, 0.55))
    minutes = float(rng.uniform(10, 25)) * scale
    return Case(
        name="step_after_idle",
        what="a step slowdown from the first append after a pause (the window spans the idle time)",
        workload=Workload(
            hours=hours, agents=((0.0, 2),), pauses=((pause_h, minutes),), session_tokens=(60_000, 120_000), seed=seed
        ),
        spec=EngineSpec(costs=_costs(rng), fault=_step(rng, pause_h + minutes / 60 + 5 / 3600)),
        verdict="engine_age_degradation",
    )


_BUILDERS = {
    "step_after_append": _step_after_append,
    "gradual_creep": _gradual_creep,
    "context_growth": _context_growth,
    "batch_walk": _batch_walk,
    "restart_recovery": _restart_recovery,
    "preemption_storm": _preemption_storm,
    "idle_gaps": _idle_gaps,
    "prefill_mixed": _prefill_mixed,
    "short_excerpt": _short_excerpt,
    "noise_2pct": _noise_2pct,
    "noise_10pct": _noise_10pct,
    "healthy_noise_10pct": _healthy_noise_10pct,
    "step_after_idle": _step_after_idle,
}
