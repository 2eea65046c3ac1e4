"""Suspects: the engine internals that track the slowdown best.

Every numeric snapshot column of a run directory (and, for any source, the usage figures
of the steps table) is aligned to the decode samples (the last value at or before each
sample) and ranked by the absolute Spearman rank correlation with the residual. A cumulative
counter (rundir.schema.SNAPSHOT_COUNTERS, or a name ending in `_total`) is first turned into
a rate per second within each engine life, or it would track anything that grows with time.

Rank correlation alone cannot tell a figure that steps up at the onset from one that merely
grows with engine age (both rank the same way against a step in the residual), so the score
is |rho| * (1 + |partial rho given engine age|) / 2: a figure that tracks the slowdown beyond
what engine age alone predicts ranks first.

The engine's RSS counts memory its malloc freed and keeps for the next large step (the built-in
engine keeps a step's temporaries: engine/runtime/hostmalloc.py), which rises in a step whenever a
step larger than any before runs, a big prefill often at an onset. Where the snapshots carry that
kept memory (`heap_kept_bytes`), the RSS is judged net of it, as `rss_in_use_bytes`, and the kept
memory itself is not a suspect: a memory suspect then means memory the engine holds.

A per-step figure (STEP_FIGURES) is first replaced by its rolling median over STEP_WINDOW_S:
the time a step spends scheduling or sampling is part of that step's own time, so step by step
it correlates with the residual by construction (a slow step is slow in its parts too, whatever
made it slow). Its level over a window keeps a trend and drops that per-step coupling. Even
so, a part of the step time says where the time went, not why: it ranks after every engine
figure that tracks the slowdown.

Correlation cannot tell a cause from a figure that merely fills up while the slowdown grows
(in a run of minutes the prefix cache fills from empty exactly while a slowdown that started
with the engine grows). Time counters can: a cumulative figure in seconds (a name ending in
`_s_total`: time spent evicting, in garbage collection, copying experts) says how much of the
engine's wall time went to it. One whose share of wall time grew by at least MIN_ADDED_SHARE
(and at least SHARE_GROWTH-fold) from before the onset to after it, or from the restarted engine
(where the run restarted it) to the later half of the life before, accounts for added time
directly; these rank first, by the share they added, ahead of every correlation.

A correlation alone is no suspect: on a healthy run, where nothing slowed, the residual still
moves with the load (the KV cache's fill, the queue, the clients' open sockets) and with parts of
the step time. A figure is listed only where its score is above the highest it reached on runs
known to be healthy (HEALTHY_SCORES, measured by benchmarks/suspect_bar.py: docs/benchmarks.md,
"suspect_bar.py"); a figure those runs never showed is held to the highest its kind
reached (CLASS_BAR). And a figure of the process as a whole (PROCESS_FIGURES: open files, RSS,
threads, CPU) moves with the traffic as much as with the engine's state: it ranks after every
engine figure, and its evidence says so.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from diagnostics.result import Onset, Suspect
from diagnostics.source.source import Source
from rundir.schema import SNAPSHOT_COUNTERS, SNAPSHOT_HOST, SNAPSHOT_META

MIN_POINTS = 8
MIN_SCORE = 0.3  # |rho| a figure needs to be scored at all (its score is then at least MIN_SCORE / 2)
MAX_SUSPECTS = 10
KEPT = "heap_kept_bytes"  # memory the engine's malloc freed and keeps: not held by the engine
TIME_COUNTER_SUFFIX = "_s_total"  # cumulative seconds spent in something
MIN_ADDED_SHARE = 0.05  # of wall time: a time counter that added this much accounts for the slowdown
SHARE_GROWTH = 2.0
MIN_FRESH_SPAN_S = 10.0  # a restarted engine's time counters are read over at least this long
STEP_WINDOW_S = 10.0  # per-step figures are judged by their rolling median over this window
STEP_TIME_PARTS = ("schedule_s", "forward_s", "sample_s")
STEP_FIGURES = (
    "token_usage",
    "mamba_usage",
    "mamba_slots_used",
    "cache_hit_rate",
    "num_queue_reqs",
    "num_preemptions",
    "schedule_s",
    "sample_s",
    "idle_slot_tokens",
)
# Figures of the engine's process as a whole, not of its internals (rundir.schema.SNAPSHOT_COLUMNS).
PROCESS_FIGURES = (
    "rss_bytes",
    "rss_in_use_bytes",
    "heap_in_use_bytes",
    "cpu_percent",
    "num_threads",
    "num_fds",
    "core_rss_bytes",
    "core_cpu_percent",
    "core_num_threads",
    "gpu_mem_bytes",
    "gpu_util",
)
# The engine's own figures that follow the load as much as its state: vLLM's and SGLang's KV usage,
# queue and prefix-cache hit rate, which rise and fall with the batch and its context.
LOAD_FIGURES = ("token_usage", "num_queue_reqs", "cache_hit_rate", "num_preemptions")
# The highest score each figure reached on runs known to be healthy, every candidate scored with
# no bar (benchmarks/suspect_bar.py, 2026-12-05; docs/benchmarks.md, "suspect_bar.py"):
# the built-in engine's healthy soaks (tests/fixtures/healthy-soaks, soak validate's recorded
# controls, two false-alarm soaks of 40 s), the case studies' fixed builds (as run directories and
# as logs alone) and the 44 published logs of benchmarks/real_logs.json. A figure must score
# above it to be listed.
HEALTHY_SCORES: dict[str, float] = {
    "token_usage": 0.673,  # vLLM's KV usage on a healthy arrival-rate sweep: it follows the batch
    "cache_hit_rate": 0.579,
    "schedule_s": 0.522,  # a part of the step time follows the step's own noise
    "sample_s": 0.474,
    "num_fds": 0.463,  # the clients' sockets, llama.cpp 0.3.2 (fixed) in a full cache: they open with the traffic
    "num_queue_reqs": 0.348,
    "eviction_s_total": 0.274,
    "radix_locked_tokens": 0.270,
    "mamba_usage": 0.270,
    "idle_slot_tokens": 0.262,  # llama.cpp 0.3.2 (fixed) in a full cache
    "eviction_nodes_visited_total": 0.261,
    "eviction_calls_total": 0.261,
    "rss_in_use_bytes": 0.259,
    "gc_last_full_pause_s": 0.247,
    "mamba_slots_used": 0.237,
    "radix_evictable_tokens": 0.230,  # a busy-host demo whose run was not kept (../shared/reader-test/before-1.md)
    "heap_in_use_bytes": 0.225,
    "kv_free_runs": 0.225,
    "kv_gather_s_total": 0.223,
    "kv_free_tokens": 0.214,
    "kv_free_list_disorder": 0.203,
    "kv_gather_breaks": 0.200,
    "kv_largest_free_run": 0.192,
    "kv_fragmentation": 0.191,
    "radix_nodes": 0.188,
    "radix_cached_tokens": 0.188,
    "match_truncated_tokens_total": 0.184,
    "cpu_percent": 0.173,
    "gc_pause_s_total": 0.158,
    "gc_pause_s": 0.158,
    "mamba_snapshots": 0.145,
    "kv_no_space": 0.138,  # llama.cpp 0.3.2 (fixed), its batches halving for room as 0.3.1's did
    "num_threads": 0.106,
    "gc_gen2_collections": 0.019,
    "gc_full_pause_s_total": 0.019,
}
# A figure the healthy runs never scored is held to the highest its kind reached there; a figure
# of the whole process, or a part of the step time, to its kind's highest always (they are alike:
# RSS, open files and threads all follow the traffic).
CLASS_BAR = {"engine": 0.274, "load": 0.673, "process": 0.463, "step_part": 0.522}
# Events counted as a figure: how many the last EVENT_WINDOW_S held, at each sample.
EVENT_FIGURES = ("kv_no_space",)
EVENT_WINDOW_S = 60.0
STEP_PART_WORDS = "a part of the step time (it says where the time went, not why): "
PROCESS_WORDS = "a figure of the whole process (it moves with the traffic as much as with the engine's state): "
# What a figure is, where its name does not say it: the mechanism it stands for, in the evidence.
TIME_SHARE = " more of the engine's wall time went into it as "  # a time counter's evidence, between its figures
MEANING = {
    "idle_slot_tokens": "KV cells held by idle slots (their last conversations, kept for prompt caching; "
    "where all slots share one KV buffer, every decode attends over them)",
    "fault_walk_s_total": "time tokdrift's step-cost fault spent walking the entries it keeps (a test instrument "
    "switched on in vLLM through its plugins: docs/faults.md)",
    "fault_entries": "entries tokdrift's step-cost fault keeps, every one walked every engine step (a test "
    "instrument switched on in vLLM through its plugins: docs/faults.md)",
    "kv_no_space": "batches that found no room in the KV cache in the last minute (a full cache, or one "
    "fragmented into holes too small for a batch: llama.cpp without KV defragmentation)",
}


def rank(
    source: Source, samples: pd.DataFrame, onset: Onset | None, symptom: str = "decode slows"
) -> tuple[Suspect, ...]:
    """`samples`: t, residual (> 0 is worse), engine_age_s, excluded; `symptom` names what a
    rising residual means, for the evidence text."""
    samples = samples[samples["excluded"] == ""].sort_values("t")
    if len(samples) < MIN_POINTS:
        return ()
    candidates = []
    snaps = source.snapshots
    if not snaps.empty and "t" in snaps:
        snaps = _net_of_kept(snaps.dropna(subset=["t"]).sort_values("t"))
        for name in snaps.columns:
            if name in SNAPSHOT_META or name in SNAPSHOT_HOST or not pd.api.types.is_numeric_dtype(snaps[name]):
                continue
            counter = name in SNAPSHOT_COUNTERS or name.endswith("_total")
            candidates.append((name, _as_rate(snaps, name) if counter else snaps[["t", name]].dropna()))
    steps = source.steps
    sampled = {name for name, _ in candidates}
    for name in STEP_FIGURES:
        # A URL target's /metrics figures are in both tables (the steps may be its log's): one suspect each.
        if name in steps and name not in sampled and steps[name].notna().sum() >= MIN_POINTS:
            candidates.append((name, _step_level(steps, name)))
    events = source.events
    for name in EVENT_FIGURES:
        if not events.empty and events["kind"].eq(name).any():
            candidates.append((name, _event_rate(events, name, samples)))
    timed = _time_accounts(snaps, samples, onset, symptom)
    timed_names = {s.name for s in timed}
    out = list(timed)
    for name, series in candidates:
        s = _suspect(name, series, samples, onset, symptom)
        if s is not None and s.name not in timed_names and s.score > bar(s.name):
            out.append(s)
    # Time that accounts for the slowdown first; then the engine's own figures; a figure of the
    # whole process after them (it moves with the traffic too); a part of the step time last: it
    # says where the time went, not why (the breakdown check in the analysis says where).
    order = {"engine": 0, "load": 0, "process": 1, "step_part": 2}
    out.sort(key=lambda s: (s.name not in timed_names, order[kind(s.name)], -s.score))
    return tuple(out[:MAX_SUSPECTS])


def kind(name: str) -> str:
    """engine (its internals), load (its figures that follow the load), process (the process as a
    whole) or step_part (a part of the step time)."""
    if name in PROCESS_FIGURES:
        return "process"
    if name in LOAD_FIGURES:
        return "load"
    return "step_part" if name in STEP_TIME_PARTS else "engine"


def bar(name: str) -> float:
    """The score a figure must beat to be listed: the highest it reached on healthy runs, else its
    kind's; a process figure or a part of the step time its kind's always."""
    k = kind(name)
    if k in ("process", "step_part"):
        return CLASS_BAR[k]
    return HEALTHY_SCORES.get(name, CLASS_BAR[k])


def short(s: Suspect) -> str:
    """A suspect in a line: what the figure is, and how it moved (`KV cells held by idle slots:
    rose from a median of 0 before the onset to 12,224 after`)."""
    what = MEANING.get(s.name, "").split(" (")[0]
    move = s.evidence.split(" (Spearman", 1)[0] if "Spearman" in s.evidence else s.evidence
    if what and move.startswith(MEANING[s.name]):
        move = move[len(MEANING[s.name]) + 2 :]
    elif move.startswith(PROCESS_WORDS):
        move = move[len(PROCESS_WORDS) :]
    elif move.startswith(STEP_PART_WORDS):
        move = move[len(STEP_PART_WORDS) :]
    move = move.split("; ", 1)[0]
    return f"{what}: {move}" if what else move


class Moved(NamedTuple):
    """How a suspect's medians moved, as its evidence says: before and after the onset, or in the
    quarter of samples with the least slowdown and the quarter with the most."""

    first: float
    last: float
    at_onset: bool  # before and after the onset; else the quarters of least and most slowdown

    @property
    def factor(self) -> float:
        """How many times over it moved, either way (inf from or to 0)."""
        lo, hi = sorted((abs(self.first), abs(self.last)))
        return hi / lo if lo > 0 else float("inf")


def moved(s: Suspect) -> Moved | None:
    """The medians a correlated suspect's evidence states (`_move` wrote them); None for a time
    counter, which says shares of wall time instead."""
    m = _AT_ONSET.search(s.evidence)
    if m is not None:
        return Moved(_read(m.group(1)), _read(m.group(2)), True)
    m = _QUARTERS.search(s.evidence)
    return Moved(_read(m.group(1)), _read(m.group(2)), False) if m is not None else None


def plainly(s: Suspect, symptom: str = "decode") -> str | None:
    """`output_buffer_bytes` was 1.1 KB where decode slowed least and 71 MB where it slowed most: a
    suspect's move in a clause, for a line that has no room for its correlation; bytes in KB, MB
    and GB, which a reader compares at a glance."""
    m = moved(s)
    if m is None:
        return None
    first, last = _said(s.name, m.first), _said(s.name, m.last)
    if m.at_onset:
        verb = "rose" if m.last > m.first else "fell"
        return f"`{s.name}` {verb} from {first} before the slowdown began to {last} after"
    return f"`{s.name}` was {first} where {symptom} slowed least and {last} where it slowed most"


def _said(name: str, x: float) -> str:
    """A median in a clause: a figure in bytes as `71 MB` (decimal units), else as _num says it."""
    if not name.endswith("_bytes") or abs(x) < 1000:
        return _num(x) + (" bytes" if name.endswith("_bytes") else "")
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.2g} {unit}" if abs(x) < 10 * size else f"{x / size:,.0f} {unit}"
    return _num(x)  # pragma: no cover - every size at or above 1000 has a unit


def in_a_clause(s: Suspect) -> str:
    """`idle_slot_tokens` (KV cells held by idle slots) rose from 0 before the slowdown began to 12,224 after:
    a suspect for a line with no room for its correlation; its evidence's own words where it states
    no medians (a time counter)."""
    said = plainly(s)
    what = MEANING.get(s.name, "").split(" (")[0]
    if said is None and TIME_SHARE in s.evidence:  # a time counter: the shares of wall time it took
        shares = s.evidence.split(TIME_SHARE, 1)[1].split(": ", 1)[-1]
        named = f"`{s.name}` ({what})" if what else f"`{s.name}`"
        return f"{named} took {shares.replace(' after', ' of the wall time after', 1)}"
    if said is None:
        return f"`{s.name}`, {short(s)}"
    return said.replace(f"`{s.name}`", f"`{s.name}` ({what})", 1) if what else said


def order_note(shown: tuple[Suspect, ...] | list[Suspect]) -> str | None:
    """The order a list of suspects is in, where it is not by score alone: time that accounts for
    the slowdown first, the engine's own figures, the whole process's, parts of the step time last."""
    scores = [s.score for s in shown]
    if scores == sorted(scores, reverse=True):
        return None
    kinds = {kind(s.name) for s in shown}
    said = ["the engine's own figures first"]
    if "process" in kinds:
        said.append("then figures of the whole process")
    if "step_part" in kinds:
        said.append("parts of the step time last, which say where the time went, not why")
    return "in this order: " + ", ".join(said) + "; by score within each"


def _net_of_kept(snaps: pd.DataFrame) -> pd.DataFrame:
    """`rss_bytes` less malloc's kept memory, as `rss_in_use_bytes`, where the snapshots say it."""
    if KEPT not in snaps:
        return snaps
    if "rss_bytes" in snaps:
        snaps = snaps.assign(rss_in_use_bytes=snaps["rss_bytes"] - snaps[KEPT].fillna(0))
        snaps = snaps.drop(columns="rss_bytes")
    return snaps.drop(columns=KEPT)


def _time_accounts(
    snaps: pd.DataFrame, samples: pd.DataFrame, onset: Onset | None, symptom: str = "decode slows"
) -> list[Suspect]:
    """Time counters whose share of wall time grew materially from before the split to after it
    (the onset, or the middle of the samples' span), within the samples' first engine life; or
    from the engine's next life (a restart, the fresh side) to the later half of that first one."""
    names = [n for n in snaps.columns if n.endswith(TIME_COUNTER_SUFFIX) and pd.api.types.is_numeric_dtype(snaps[n])]
    if not names or "t" not in samples:
        return []
    life = samples["engine_life"].iloc[0] if "engine_life" in samples else None
    fresh = snaps[snaps["engine_life"] == life + 1] if life is not None and "engine_life" in snaps else snaps.iloc[:0]
    if life is not None and "engine_life" in snaps:
        snaps = snaps[snaps["engine_life"] == life]
        samples = samples[samples["engine_life"] == life]
    t, snap_times = samples["t"].astype("datetime64[ns]"), snaps["t"].astype("datetime64[ns]")
    t0, t1 = max(t.min(), snap_times.min()), min(t.max(), snap_times.max())  # where the counters say
    if not t0 < t1:
        return []
    middle = t0 + (t1 - t0) / 2
    split = onset.t if onset is not None and t0 < pd.Timestamp(onset.t) < t1 else middle
    when = "the slowdown began" if onset is not None and split == onset.t else "the middle of the run"
    at = (np.array([t0, split, t1, middle], dtype="datetime64[ns]").astype("int64")) / 1e9
    snap_t = snap_times.astype("int64").to_numpy() / 1e9
    out = []
    for name in names:
        ok = snaps[name].notna().to_numpy()
        if ok.sum() < 2:
            continue
        c = np.interp(at, snap_t[ok], snaps[name].to_numpy(dtype=float)[ok])
        before, after = _rate(c, at, 0, 1), _rate(c, at, 1, 2)
        found = []
        if _grew(before, after):
            found.append((after - before, f"{after:.1%} after {when}, {before:.1%} before"))
        # A fault that acts from the engine's first minute leaves no clean youth to compare with
        # (its cost is in the samples the healthy model was fitted on, and the onset lands late):
        # the restarted engine, where the run made one, is the fresh side then.
        late, now = _rate(c, at, 3, 2), _share(fresh, name)
        if now is not None and _grew(now, late):
            found.append((late - now, f"{late:.1%} in the later half of the engine's life, {now:.1%} once restarted"))
        if found:
            added, shares = max(found)
            out.append(
                Suspect(
                    name,
                    float(min(1.0, added)),
                    f"{added:.1%}{TIME_SHARE}{symptom}: {shares}",
                )
            )
    out.sort(key=lambda s: -s.score)
    return out


def _rate(counter: np.ndarray, at: np.ndarray, i: int, j: int) -> float:
    """A time counter's share of wall time between the moments at[i] and at[j] (seconds)."""
    return float((counter[j] - counter[i]) / max(at[j] - at[i], 1e-9))


def _grew(early: float, late: float) -> bool:
    """A time counter's share of wall time grew materially: by MIN_ADDED_SHARE, SHARE_GROWTH-fold."""
    return late - early >= MIN_ADDED_SHARE and late >= SHARE_GROWTH * max(early, 0.0)


def _share(snaps: pd.DataFrame, name: str) -> float | None:
    """The share of wall time a time counter took over `snaps` (one engine life), where they span
    at least MIN_FRESH_SPAN_S."""
    if name not in snaps:
        return None
    rows = snaps[["t", name]].dropna()
    if len(rows) < 2:
        return None
    t = rows["t"].astype("datetime64[ns]").astype("int64").to_numpy() / 1e9
    span = t[-1] - t[0]
    if span < MIN_FRESH_SPAN_S:
        return None
    return float((rows[name].iloc[-1] - rows[name].iloc[0]) / span)


def _step_level(steps: pd.DataFrame, name: str) -> pd.DataFrame:
    """A per-step figure as its rolling median over the last STEP_WINDOW_S, within each engine life."""
    df = steps[["t", name] + (["engine_life"] if "engine_life" in steps else [])].dropna(subset=["t", name])
    df = df.astype({"t": "datetime64[ns]"}).sort_values("t", kind="stable")
    lives = df["engine_life"] if "engine_life" in df else pd.Series(0, index=df.index)
    parts = [
        g.rolling(f"{STEP_WINDOW_S}s", on="t")[name].median().to_frame().assign(t=g["t"].to_numpy())
        for _, g in df.groupby(lives, sort=False)
    ]
    out = pd.concat(parts) if parts else df[[name]].assign(t=df["t"])
    return out[["t", name]].dropna()


def _event_rate(events: pd.DataFrame, kind: str, samples: pd.DataFrame) -> pd.DataFrame:
    """At each sample's time, how many `kind` events the EVENT_WINDOW_S before it held (of the
    same engine life where both say it)."""
    ev = events[events["kind"] == kind].astype({"t": "datetime64[ns]"}).sort_values("t", kind="stable")
    t = samples["t"].astype("datetime64[ns]").to_numpy()
    times = ev["t"].to_numpy()
    by_life = "engine_life" in samples and "engine_life" in ev and ev["engine_life"].notna().all()
    sample_lives = samples["engine_life"].to_numpy() if by_life else np.zeros(len(t))
    event_lives = ev["engine_life"].to_numpy() if by_life else np.zeros(len(times))
    window = np.timedelta64(int(EVENT_WINDOW_S * 1e9), "ns")
    counts = np.zeros(len(t))
    for life in np.unique(sample_lives):
        at, mine = sample_lives == life, times[event_lives == life]
        counts[at] = np.searchsorted(mine, t[at], side="right") - np.searchsorted(mine, t[at] - window, side="right")
    return pd.DataFrame({"t": t, kind: counts})


def _as_rate(snaps: pd.DataFrame, name: str) -> pd.DataFrame:
    """A cumulative counter as a rate per second, within each engine life (it restarts at 0)."""
    lives = snaps["engine_life"] if "engine_life" in snaps else pd.Series(0, index=snaps.index)
    df = pd.DataFrame({"t": snaps["t"], "life": lives, "v": snaps[name]}).dropna()
    rate = df.groupby("life")["v"].diff() / df.groupby("life")["t"].diff().dt.total_seconds()
    return pd.DataFrame({"t": df["t"], name: rate}).dropna()


def _suspect(
    name: str, series: pd.DataFrame, samples: pd.DataFrame, onset: Onset | None, symptom: str = "decode slows"
) -> Suspect | None:
    left = samples[["t", "residual", "engine_age_s"]].astype({"t": "datetime64[ns]"})
    right = series.astype({"t": "datetime64[ns]"}).sort_values("t")
    aligned = pd.merge_asof(left, right, on="t", direction="backward")
    aligned = aligned.dropna()
    if len(aligned) < MIN_POINTS or aligned[name].nunique() < 2:
        return None
    rho = spearmanr(aligned[name], aligned["residual"]).statistic
    if not np.isfinite(rho) or abs(rho) < MIN_SCORE:
        return None
    partial = _partial_rank(aligned[name], aligned["residual"], aligned["engine_age_s"])
    score = abs(rho) * (1 + abs(partial)) / 2
    move = _move(aligned, name, rho, onset, symptom)
    if move is None:
        return None
    what = f"{MEANING[name]}: " if name in MEANING else ""
    if name in PROCESS_FIGURES:
        what = PROCESS_WORDS
    elif name in STEP_TIME_PARTS:
        what = STEP_PART_WORDS
    return Suspect(
        name,
        float(score),
        f"{what}{move} (Spearman rho {rho:+.2f} with the residual over {len(aligned)} samples, "
        f"{partial:+.2f} beyond engine age)",
    )


def _move(aligned: pd.DataFrame, name: str, rho: float, onset: Onset | None, symptom: str) -> str | None:
    """How the figure moved, in the direction its medians say: before and after the onset, or,
    without one, in the quarter of samples with the least slowdown and the quarter with the most.
    None where the medians do not move the way the correlation says (equal, or the other way): a
    rank correlation its typical level does not bear out (a few spikes, or a restart's fresh
    engine late in the run) is no suspect."""
    higher = "higher" if rho > 0 else "lower"
    if onset is not None:
        before = aligned.loc[aligned["t"] < onset.t, name]
        after = aligned.loc[aligned["t"] >= onset.t, name]
        if len(before) and len(after):
            first, last = float(before.median()), float(after.median())
            if not _agrees(first, last, rho):
                return None
            verb = "rose" if last > first else "fell"
            return (
                f"{verb} from a median of {_num(first)} before the onset to {_num(last)} after; "
                f"{higher} where {symptom}"
            )
    k = max(1, len(aligned) // 4)
    by_residual = aligned.sort_values("residual", kind="stable")
    least, most = float(by_residual[name].head(k).median()), float(by_residual[name].tail(k).median())
    if not _agrees(least, most, rho):
        return None
    return (
        f"{higher} where {symptom}: a median of {_num(least)} in the quarter of samples with the least "
        f"slowdown, {_num(most)} in the quarter with the most"
    )


def _agrees(first: float, last: float, rho: float) -> bool:
    """The medians moved, and the way the correlation's sign says."""
    return bool(np.isfinite(first) and np.isfinite(last) and last != first and (last > first) == (rho > 0))


_NUMBER = r"(-?[\d,]+(?:\.\d+)?(?:e[+-]?\d+)?)"
_AT_ONSET = re.compile(rf"\b(?:rose|fell) from a median of {_NUMBER} before the onset to {_NUMBER} after")
_QUARTERS = re.compile(rf"a median of {_NUMBER} in the quarter of samples with the least slowdown, {_NUMBER} in the")


def _read(text: str) -> float:
    return float(text.replace(",", ""))


def _num(x: float) -> str:
    """A median as a reader reads it: 12,220 and 1,417,000,000, not 1.222e+04; 0.1116 as it is."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _partial_rank(x: pd.Series, y: pd.Series, z: pd.Series) -> float:
    """Spearman correlation of x and y with the rank-linear effect of z removed."""
    r = np.corrcoef(np.vstack([x.rank(), y.rank(), z.rank()]))
    rxy, rxz, ryz = r[0, 1], r[0, 2], r[1, 2]
    denom = (1 - rxz**2) * (1 - ryz**2)
    if not np.isfinite(denom) or denom < 1e-9:
        return 0.0
    return float((rxy - rxz * ryz) / np.sqrt(denom))
