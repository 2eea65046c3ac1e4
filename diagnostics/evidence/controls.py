"""Probes and controls: identical probes of the soaked engine, the same probes of a fresh
control beside it, the restart control, and the load on the host.

- **probes**: the soaked engine's identical probes in its first life, the last third against
  the first third (at least two each).
- **paired control**: every probe cycle probes the soaked engine (role `main`) and a fresh
  twin or control instance (role `control`) back to back, each alone. Per cycle the ratio
  main / control is taken at one moment, so whatever slowed the host slowed both and cancels;
  engine age is that ratio late in the main engine's first life against early in it.
- **control drift**: the control's own probes late against early: how much the host itself
  slowed (the control stays young), used to correct host-bound comparisons such as prefill.
- **fresh pairs**: where the control aged (diagnostics.evidence.youth), the soaked engine against it in
  the cycles right after its restarts alone (`paired_fresh`).
- **restart**: the main engine's last probes before a restart over its first ones after it,
  each set with its control probe where there is one (then the paired ratios).
- **host load**: CPU other than the engine's (soak driver, other processes) early and late.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from diagnostics.evidence import changepoint, intervals, sequential
from diagnostics.evidence.comparison import DECODE_MATERIAL, PAIRED_DETECT, Comparison
from diagnostics.evidence.gathered import HostLoad
from diagnostics.evidence.sequential import MIN_SIDE
from diagnostics.evidence.sequential import side as _side
from diagnostics.evidence.youth import JUST_RESTARTED, Youth, fresh
from diagnostics.labels import Basis
from rundir.schema import ProbeRole

# A comparison's two sides in time: the first and the last moment of each (early, late).
Sides = tuple[tuple[pd.Timestamp, pd.Timestamp], tuple[pd.Timestamp, pd.Timestamp]]

THIRD = 1 / 3
# Probes a side needs before a probe comparison may show a loss: two probes (or cycles) seconds
# apart can sit in one burst of a neighbour's load and agree by chance, and two such pairs give
# an interval that looks tight and is not (seen: a healthy 2-minute soak whose first two cycles
# ran while other engines started read 0.70, interval 0.55-0.89).
MIN_FOR_LOSS = sequential.MIN_DECIDING
# The early side of a probe comparison is the engine's youth: the first third of its first life's
# probes, but none later than YOUTH_S into it, unless that leaves fewer than YOUTH_MIN.
YOUTH_S = 300.0
YOUTH_MIN = 8
BASELINE_REASONS = ("start", "baseline")  # probes before the replay: the baseline, when the run took one
HOST_COLUMNS = ("driver_cpu_percent", "host_other_cpu_percent")  # CPU beside the engine (rundir.schema.SNAPSHOT_HOST)


def probe_rows(probes: pd.DataFrame) -> pd.DataFrame:
    """The successful probes of the most frequent probe request, in time order, each with its
    `role` (`main` where the run has no control) and `cycle` (NaN where the run has none)."""
    if probes is None or probes.empty or "decode_tps" not in probes:
        return pd.DataFrame(columns=["t", "engine_life", "engine_age_s", "decode_tps", "role", "cycle"])
    status = probes["status"].fillna("ok") if "status" in probes else pd.Series("ok", index=probes.index)
    ok = probes[(status == "ok") & (probes["decode_tps"] > 0)]
    if "probe_id" in ok and ok["probe_id"].notna().any():
        ok = ok[ok["probe_id"] == ok["probe_id"].mode().iloc[0]]
    role = ok["role"].fillna(ProbeRole.MAIN) if "role" in ok else pd.Series(ProbeRole.MAIN, index=ok.index)
    cycle = ok["cycle"] if "cycle" in ok else pd.Series(np.nan, index=ok.index)
    return ok.assign(role=role, cycle=cycle).sort_values("t", kind="stable")


def main_probes(rows: pd.DataFrame) -> pd.DataFrame:
    """The soaked engine's probes of its first life."""
    main = rows[rows["role"] == ProbeRole.MAIN]
    return main[main["engine_life"] == main["engine_life"].min()] if len(main) else main


def probes(rows: pd.DataFrame, level: float = intervals.LEVEL) -> Comparison | None:
    """The soaked engine's identical probes: the last third of its first life against the first
    (the interval at `level`: a running verdict's, diagnostics.evidence.sequential)."""
    first = main_probes(rows)
    sides = _sides(first)
    if sides is None:
        return None
    e, k = sides
    early, late = first["decode_tps"].head(e), first["decode_tps"].tail(k)
    interval = intervals.log_ratio(early, late, level, serial=True)
    return Comparison(
        basis=Basis.PROBES,
        interval=interval,
        num_early=e,
        num_late=k,
        material=DECODE_MATERIAL,
        detail=f"identical probes of this engine: the last {k} over the first {e} "
        f"{interval.describe()} ({_geo(late):.1f} against {_geo(early):.1f} tok/s)",
        healthy_level=_geo(early),
        min_for_loss=MIN_FOR_LOSS,
        levels=(_geo(early), _geo(late)),
    )


def pairs(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per probe cycle that has both a main and a control probe: t, engine_life (the
    main's), main and control decode rates, ratio = main / control."""
    if rows.empty or not (rows["role"] == ProbeRole.CONTROL).any() or rows["cycle"].isna().all():
        return pd.DataFrame(
            columns=["cycle", "t", "engine_life", "engine_age_s", "main", "control", "control_life", "ratio"]
        )
    main = rows[rows["role"] == ProbeRole.MAIN].dropna(subset=["cycle"]).drop_duplicates("cycle", keep="last")
    control = rows[rows["role"] == ProbeRole.CONTROL].dropna(subset=["cycle"]).drop_duplicates("cycle", keep="last")
    both = main.merge(control[["cycle", "decode_tps", "engine_life"]], on="cycle", suffixes=("", "_control"))
    out = pd.DataFrame(
        {
            "cycle": both["cycle"],
            "t": both["t"],
            "engine_life": both["engine_life"],
            "engine_age_s": both["engine_age_s"],
            "main": both["decode_tps"],
            "control": both["decode_tps_control"],
            "control_life": both["engine_life_control"],
        }
    )
    if "reason" in both:
        out["reason"] = both["reason"]
    out["ratio"] = out["main"] / out["control"]
    return out.sort_values("t", kind="stable").reset_index(drop=True)


def paired(cycles: pd.DataFrame, level: float = intervals.LEVEL, fresh_only: bool = False) -> Comparison | None:
    """Main over control per cycle, the last third of the main engine's first life against the first;
    with `fresh_only`, of the cycles whose control had just been restarted alone (`fresh`)."""
    first = first_life(fresh(cycles) if fresh_only else cycles)
    sides = _sides(first)
    if sides is None:
        return None
    e, k = sides
    early, late = first["ratio"].head(e), first["ratio"].tail(k)
    interval = intervals.log_ratio(early, late, level, serial=True)
    main_early = _geo(first["main"].head(e))
    return Comparison(
        basis=Basis.PAIRED_CONTROL,
        interval=interval,
        num_early=e,
        num_late=k,
        material=DECODE_MATERIAL,
        detail=f"this engine over a {JUST_RESTARTED if fresh_only else 'fresh engine'} probed back to back: "
        f"the last {k} cycles over the first {e} {interval.describe()} (this engine {main_early:.1f} -> "
        f"{_geo(first['main'].tail(k)):.1f} tok/s, the fresh one {_geo(first['control'].head(e)):.1f} -> "
        f"{_geo(first['control'].tail(k)):.1f})",
        healthy_level=main_early,
        min_for_loss=MIN_FOR_LOSS,
        detect=PAIRED_DETECT,
    )


def paired_fresh(cycles: pd.DataFrame, youth: Youth | None, level: float = intervals.LEVEL) -> Comparison | None:
    """The paired control on the cycles right after the control's restarts, where the control aged
    (what stands in for the pairs it spoiled); None where it did not."""
    return paired(cycles, level, fresh_only=True) if youth is not None and youth.aging else None


def probe_series(rows: pd.DataFrame, cycles: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The series the probe comparisons read, with its value column: the paired cycles of the main
    engine's first life where the run has a control, else its own probes."""
    return (first_life(cycles), "ratio") if len(cycles) else (main_probes(rows), "decode_tps")


def first_life(cycles: pd.DataFrame) -> pd.DataFrame:
    """The probe cycles of the main engine's first life."""
    return cycles[cycles["engine_life"] == cycles["engine_life"].min()] if len(cycles) else cycles


def control_drift(cycles: pd.DataFrame, level: float = intervals.LEVEL) -> Comparison | None:
    """The control's own probes over the main engine's first life, late against early: the host's speed."""
    first = first_life(cycles)
    sides = _sides(first)
    if sides is None:
        return None
    e, k = sides
    early, late = first["control"].head(e), first["control"].tail(k)
    interval = intervals.log_ratio(early, late, level, serial=True)
    return _own_speed(
        Basis.CONTROL_DRIFT,
        early,
        late,
        interval,
        f"the fresh engine's own probes, last {k} over first {e}: {interval.describe()} (the host's "
        f"speed: a fresh engine stays young, so only the host moves it)",
    )


def drift_between(cycles: pd.DataFrame, sides: Sides | None, level: float = intervals.LEVEL) -> Comparison | None:
    """The control's own probes taken while the soaked engine's comparison took its two sides
    (`sides`: each side's first and last moment), late against early: the host's speed over
    those very stretches. A step series' latest seconds are a short stretch; the control's drift
    over the whole run says nothing of the host in them, and where the control was probed fewer
    than twice in a side, nothing is known of it (an unbounded interval). None without a control."""
    if sides is None or cycles.empty:
        return None
    t = cycles["t"]
    early, late = (cycles.loc[(t >= a) & (t <= b), "control"] for a, b in sides)
    interval = intervals.log_ratio(early, late, level, serial=True)
    return _own_speed(
        Basis.CONTROL_DRIFT,
        early,
        late,
        interval,
        f"the fresh engine's own probes taken beside the two sides, {len(late)} over {len(early)}: "
        f"{interval.describe()}",
    )


def _own_speed(
    basis: Basis, early: pd.Series, late: pd.Series, interval: intervals.Interval, detail: str
) -> Comparison:
    """The control's own probes, late against early: the host's speed over some stretch (never a
    verdict's basis), with the two speeds it is the ratio of."""
    return Comparison(
        basis=basis,
        interval=interval,
        num_early=len(early),
        num_late=len(late),
        material=DECODE_MATERIAL,
        detail=detail,
        healthy_level=_geo(early),
        levels=(_geo(early), _geo(late)),
    )


def _restart_side(before: int, after: int) -> int:
    """How many cycles a side the restart control compares: a third of the first life, at least three,
    no more than the fresh life has. (Six cycles since 2026-12-05; three before.)"""
    return min(after, max(3, math.ceil(THIRD * before)))


def restart(rows: pd.DataFrame, cycles: pd.DataFrame) -> Comparison | None:
    """The main engine's last probes before its first restart over its first probes after it
    (paired ratios when there is a control): the aged engine against a fresh one, at one moment."""
    main = rows[rows["role"] == ProbeRole.MAIN]
    lives = sorted(main["engine_life"].unique())
    if len(lives) < 2:
        return None
    use_pairs = len(cycles) and cycles["engine_life"].nunique() > 1
    if use_pairs:
        before = cycles[cycles["engine_life"] == lives[0]]["ratio"]
        after = cycles[cycles["engine_life"] == lives[1]]["ratio"]
        what, unit = "this engine over a fresh one per cycle", "cycles"
    else:
        before = main[main["engine_life"] == lives[0]]["decode_tps"]
        after = main[main["engine_life"] == lives[1]]["decode_tps"]
        what, unit = "probes", "probes"
    k = _restart_side(len(before), len(after))
    if len(before) < 1 or len(after) < 1:
        return None
    aged, fresh = before.tail(k), after.head(k)
    interval = intervals.log_ratio(fresh, aged)
    level = _geo(main[main["engine_life"] == lives[1]]["decode_tps"].head(k))
    # On the probes alone the ratio is of the two sides' own speeds, said beside it; on the pairs it
    # is of main-over-control ratios, and no two speeds stand for it.
    speeds = None if use_pairs else (_geo(fresh), _geo(aged))
    return Comparison(
        basis=Basis.RESTART,
        interval=interval,
        num_early=len(fresh),
        num_late=len(aged),
        material=DECODE_MATERIAL,
        detail=f"restart control ({what}): the engine's last {len(aged)} {unit} before the restart over its "
        f"first {len(fresh)} after it {interval.describe()}"
        + (f" ({speeds[1]:.1f} against {speeds[0]:.1f} tok/s)" if speeds is not None else ""),
        healthy_level=level,
        levels=speeds,
    )


def host_at_restart(rows: pd.DataFrame, cycles: pd.DataFrame) -> Comparison | None:
    """The control's own probes in the cycles the restart control compares, after the main engine's
    first restart over before it: the host's change right at the restart. The restart control on the
    pairs cancels a steady change of the host; a spell that starts or ends at the restart can move the
    two engines unevenly over its few cycles (a healthy demo whose host slowed across its restart read
    0.68 there, the control's own speed falling 17% across it). Words only: no verdict rests on it."""
    main = rows[rows["role"] == ProbeRole.MAIN]
    lives = sorted(main["engine_life"].unique())
    if len(lives) < 2 or not len(cycles) or cycles["engine_life"].nunique() < 2:
        return None
    aged, fresh = (cycles[cycles["engine_life"] == life] for life in lives[:2])
    if len(aged) < 2 or len(fresh) < 2:
        return None
    k = _restart_side(len(aged), len(fresh))  # the restart control's sides
    aged, fresh = aged.tail(k), fresh.head(k)
    if "control_life" in cycles and pd.concat([aged, fresh])["control_life"].nunique() > 1:
        return None  # the control restarted inside the window: its own youth, not the host, would move it
    early, late = aged["control"], fresh["control"]
    interval = intervals.log_ratio(early, late)
    return _own_speed(
        Basis.HOST_AT_RESTART,
        early,
        late,
        interval,
        f"the fresh engine's own probes, its first {len(late)} after the restart over its last {len(early)} "
        f"before it: {interval.describe()} (the host's change right at the restart)",
    )


def probe_onset(series: pd.DataFrame, value: str) -> int | None:
    """Row position where a probe series (first life, time order) runs materially below its first
    third (its baseline, where the run took one) and stays below, by change points on
    log(healthy / value); None when it never does. A few slow cycles that came back are a spell
    of the host, not the loss a late-against-early comparison finds (seen live: three cycles of a
    baseline at 0.78 named as the onset of an output-buffer loss that set in 20 cycles later)."""
    if len(series) < 2 * MIN_SIDE + 1:
        return None
    k = baseline(series) or _side(len(series)) or MIN_SIDE
    r = np.log(_geo(series[value].head(k)) / series[value].to_numpy(dtype=float))
    material = math.log(1 / DECODE_MATERIAL)
    seg = changepoint.detect(r).first_lasting_rise(material, material / 2)
    return None if seg is None else seg.start


def host_load(snapshots: pd.DataFrame) -> HostLoad | None:
    """CPU beside the engine (driver + other processes) in the first and last quarter of the
    first engine life; None when the run did not sample it."""
    cols = [c for c in HOST_COLUMNS if c in snapshots]
    if snapshots is None or snapshots.empty or not cols or "engine_life" not in snapshots:
        return None
    first = snapshots[snapshots["engine_life"] == snapshots["engine_life"].min()].sort_values("t")
    load = first[cols].sum(axis=1, min_count=1).dropna()
    if len(load) < 8:
        return None
    k = len(load) // 4
    return HostLoad(float(load.head(k).median()), float(load.tail(k).median()))


def _sides(first: pd.DataFrame) -> tuple[int, int] | None:
    """Samples (probes or cycles, in time order) on the early and the late side of a probe
    comparison: the last third, against the first third but no more of it than the engine's
    first YOUTH_S (at least YOUTH_MIN samples): a step at minute 10 of a two-hour soak is then
    still a step, not a third of it averaged into the healthy side. A run with a baseline
    (`soak run --baseline`) compares the last third of the samples since with the baseline's.
    None when there are too few for two sides."""
    b = baseline(first)
    if b:
        k = sequential.late_side(len(first) - b)
        return None if k is None else (b, k)
    k = _side(len(first))
    if k is None:
        return None
    since = first["t"] - first["t"].iloc[0]  # timedeltas from a run directory, seconds from a live soak's rows
    if pd.api.types.is_timedelta64_dtype(since):
        since = since.dt.total_seconds()
    return min(k, max(YOUTH_MIN, int((since <= YOUTH_S).sum()))), k


def baseline(first: pd.DataFrame) -> int:
    """How many of the leading samples (probes or cycles of the first life, time order) were taken
    before the replay, where the run took a baseline of at least MIN_SIDE; 0 otherwise."""
    if "reason" not in first or not (first["reason"] == "baseline").any():
        return 0
    before = first["reason"].isin(BASELINE_REASONS).to_numpy()
    n = len(before) if before.all() else int(np.argmin(before))
    return n if n >= MIN_SIDE else 0


def _geo(values: pd.Series) -> float:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return float(np.exp(np.log(v).mean())) if len(v) else math.nan
