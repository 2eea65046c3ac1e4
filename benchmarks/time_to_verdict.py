"""How many minutes a soak needs before its running verdict is decided, and how often watching
every cycle calls a healthy engine aged.

The noise is real: paired probe series (the soaked engine and its fresh twin, one pair a cycle)
recorded by healthy soaks of the built-in engine on this host (benchmarks/data/paired-probes/,
one CSV each, described in recordings.json: concurrency, probe length, cycle period, what ran
beside). Many runs are drawn from each by a block permutation (the recording cut at a random
offset into blocks of BLOCK cycles, so the host's short-range correlation stays in, the blocks
taken in a random order, each once before any is taken again: a 10-minute recording drawn with
replacement repeated one block twice within a run's first 11 cycles, and that duplicated
outlier made a healthy run read 0.78, 0.64-0.94), and a known loss is applied to the soaked engine's
probes from a known minute on. Every cycle is looked at by the product's own running verdict
(diagnostics.decision.live.look, its intervals valid over the looks planned for the horizon), as a user
watching the soak and `soak run --until-decided` do. These are resampled runs, not live ones;
tests/soak/test_until_decided.py and the live soaks in docs/diagnostics.md check the live path.

    .venv/bin/python benchmarks/time_to_verdict.py                     # every recording, 40 trials
    .venv/bin/python benchmarks/time_to_verdict.py --trials 10 --only c1
    .venv/bin/python benchmarks/time_to_verdict.py --record RUN_DIR --name NAME --note "..."
    .venv/bin/python benchmarks/time_to_verdict.py --live 2 --out runs/ttv   # live soaks, --until-decided

Live (`--live N`): N healthy soaks and N with the output-buffer fault (a real slowdown, its
size set by the buffer's rows, from a chosen request on: docs/faults.md), each `soak run
--until-decided` with make demo's trace settings and --until-decided's own probes; per soak the
stop, the decided verdict and minute, the fault's onset (the first snapshot with the grown
buffer) and its actual cost (the paired ratio after the onset over before it, in the same run). These check the resampled figures
against soaks that really ran.

Per recording and scenario one row: runs decided within the horizon, minutes to decide (median
and 90th percentile; from the start for a healthy engine, from the onset for a loss), runs whose
first decision was wrong (a healthy engine called aged; an aged one cleared after its onset), and
for healthy runs the false age verdicts at any look. The headline comes last:

    time to verdict: ...; false age verdicts 0/120 watched at every cycle
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from diagnostics.decision.live import AGE, NO_AGE, look  # noqa: E402
from diagnostics.evidence import controls, sequential  # noqa: E402
from rundir import reader  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "paired-probes"
BLOCK = 6  # cycles per bootstrap block
SEED = 0
LOSSES = (0.0, 0.10, 0.15, 0.20, 0.30)
RULE_OUTS = (0.15, 0.10)  # healthy runs: minutes until a loss of more than each is ruled out
FINAL_LOOK_MIN = (3.0, 15.0)  # `make demo`'s length, and five times it
FINAL_LOOK_TRIALS = 200  # resampled runs per recording for the final look (one look each: cheap)
# The targets (docs/benchmarks.md): a loss decided as engine age within these minutes of setting in;
# a healthy engine's 15 % loss ruled out within HEALTHY_TARGET_MIN of the start.
TARGET_MIN = {0.10: 45.0, 0.15: 15.0}
HEALTHY_TARGET_MIN = 15.0


class Recording(NamedTuple):
    name: str
    period_s: float  # median seconds between cycles
    main: np.ndarray  # decode tok/s per cycle
    control: np.ndarray
    note: str

    @property
    def log_ratio_sd(self) -> float:
        return float(np.std(np.log(self.main / self.control), ddof=1))


class Trial(NamedTuple):
    first: tuple[str, float] | None  # (decided verdict, minutes into the run) of the first decided look
    first_age_min: float | None  # the first look that decided age, watching on after anything else
    no_age_min: dict[float, float | None]  # rule_out -> minutes until a loss above it was ruled out


def load(names: list[str] | None = None) -> list[Recording]:
    catalogue = json.loads((DATA / "recordings.json").read_text())
    out = []
    for name, about in catalogue.items():
        if names and not any(n in name for n in names):
            continue
        frame = pd.read_csv(DATA / f"{name}.csv")
        out.append(
            Recording(
                name=name,
                period_s=float(frame["t_s"].diff().median()),
                main=frame["main_tps"].to_numpy(float),
                control=frame["control_tps"].to_numpy(float),
                note=about.get("note", ""),
            )
        )
    return out


def record(run_dir: Path, name: str, note: str) -> Path:
    """Keep a soak's first-life probe cycles as a recording: t_s, main_tps, control_tps."""
    rows = controls.probe_rows(reader.read_table(run_dir, "probes"))
    cycles = controls.first_life(controls.pairs(rows))
    if len(cycles) < 4 * BLOCK:
        raise SystemExit(f"{run_dir}: {len(cycles)} paired cycles; a recording needs at least {4 * BLOCK}")
    t = _unix(cycles["t"])
    t = t - t.iloc[0]
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"{name}.csv"
    pd.DataFrame(
        {
            "t_s": np.round(t.to_numpy(float), 3),
            "main_tps": cycles["main"].round(3).to_numpy(),
            "control_tps": cycles["control"].round(3).to_numpy(),
        }
    ).to_csv(path, index=False)
    catalogue_path = DATA / "recordings.json"
    catalogue = json.loads(catalogue_path.read_text()) if catalogue_path.exists() else {}
    manifest = reader.read_manifest(run_dir)
    soak = manifest.configs.get("soak", {})
    catalogue[name] = {
        "note": note,
        "run_id": manifest.run_id,
        "started_at": manifest.started_at,
        "cycles": len(cycles),
        **{k: soak.get(k) for k in ("concurrency", "probe_every_s", "probe_input_tokens", "probe_output_tokens")},
    }
    catalogue_path.write_text(json.dumps(catalogue, indent=1) + "\n")
    return path


def synthetic(rec: Recording, num_cycles: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A run of num_cycles cycles drawn from the recording by block permutations: at a random
    offset, its whole blocks in a random order, each once a pass, as many passes as it takes."""
    n = len(rec.main)
    num_blocks = n // BLOCK
    starts: list[int] = []
    while len(starts) * BLOCK < num_cycles:
        offset = int(rng.integers(0, n))
        starts += [(offset + BLOCK * int(b)) % n for b in rng.permutation(num_blocks)]
    idx = np.concatenate([(s + np.arange(BLOCK)) % n for s in starts])[:num_cycles]
    return rec.main[idx].copy(), rec.control[idx].copy()


def frames(
    main: np.ndarray, control: np.ndarray, period_s: float, baseline: int = 0
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The probe rows and paired cycles diagnostics.decision.live reads, for one synthetic run; with a
    `baseline`, its first 1 + baseline cycles are the start and baseline cycles (`soak run
    --baseline`), taken before the traffic."""
    n = len(main)
    t = pd.Timestamp("2026-12-01") + pd.to_timedelta(np.arange(n) * period_s, unit="s")
    reason = np.where(np.arange(n) == 0, "start", np.where(np.arange(n) <= baseline, "baseline", "periodic"))
    base = {"engine_life": 0, "probe_id": "p", "status": "ok", "cycle": np.arange(n, dtype=float), "reason": reason}
    rows = pd.concat(
        [
            pd.DataFrame({"t": t, "engine_age_s": np.arange(n) * period_s, "decode_tps": main, "role": "main", **base}),
            pd.DataFrame(
                {
                    "t": t + pd.Timedelta(seconds=1),
                    "engine_age_s": np.nan,
                    "decode_tps": control,
                    "role": "control",
                    **base,
                }
            ),
        ]
    ).sort_values("t", kind="stable")
    rows = rows.reset_index(drop=True)
    cycles = pd.DataFrame(
        {
            "cycle": np.arange(n, dtype=float),
            "t": t,
            "engine_life": 0,
            "engine_age_s": np.arange(n) * period_s,
            "main": main,
            "control": control,
            "ratio": main / control,
            "reason": reason,
        }
    )
    return rows, cycles


def watch(
    rows: pd.DataFrame,
    cycles: pd.DataFrame,
    period_s: float,
    looks_planned: int,
    stop_at_first: bool,
    baseline: int = 0,
) -> Trial:
    """Look at every cycle; stop at the first decided look when asked (an aged engine's run).
    Minutes count from the end of the baseline (the traffic's start), as the soak's do."""
    first, first_age = None, None
    no_age: dict[float, float | None] = {r: None for r in RULE_OUTS}
    for n in range(sequential.MIN_CYCLES + baseline, len(cycles) + 1):
        minutes = (n - 1 - baseline) * period_s / 60
        loose = look(rows.iloc[: 2 * n], cycles.iloc[:n], looks_planned, RULE_OUTS[0])
        if loose.decided == NO_AGE and no_age[RULE_OUTS[0]] is None:
            no_age[RULE_OUTS[0]] = minutes
        # The stricter rule-out decides "no age" where the looser one did and the same interval also
        # clears its level; anything else it decides alike (age does not depend on the rule-out).
        strict = loose.decided
        if strict == NO_AGE and not loose.interval[0] > 1 - RULE_OUTS[1]:
            strict = None
        if strict == NO_AGE and no_age[RULE_OUTS[1]] is None:
            no_age[RULE_OUTS[1]] = minutes
        if strict and first is None:
            first = (strict, minutes)
        if loose.decided == AGE and first_age is None:
            first_age = minutes
            if stop_at_first:
                break
    return Trial(first, first_age, no_age)


def run_scenario(
    rec: Recording,
    loss: float,
    trials: int,
    horizon_min: float,
    onset_min: float,
    rng: np.random.Generator,
    baseline: int = 0,
) -> list[Trial]:
    """`baseline` cycles before the traffic (not in the horizon, as in the soak): the onset and the
    minutes count from the traffic's start."""
    num_cycles = int(horizon_min * 60 / rec.period_s) + baseline
    looks_planned = sequential.looks_planned(horizon_min * 60, rec.period_s)
    onset = int(onset_min * 60 / rec.period_s) + baseline
    out = []
    for _ in range(trials):
        main, control = synthetic(rec, num_cycles, rng)
        if loss:
            main[onset:] *= 1 - loss
        rows, cycles = frames(main, control, rec.period_s, baseline)
        out.append(watch(rows, cycles, rec.period_s, looks_planned, stop_at_first=bool(loss), baseline=baseline))
    return out


def final_look(rec: Recording, minutes: float, trials: int, rng: np.random.Generator) -> tuple[list[float], int]:
    """What a healthy soak of `minutes` that runs its full length says at its one final look (the
    plain 90 %): per resampled run the loss its paired comparison rules out, and how many runs it
    calls aged."""
    n = max(sequential.MIN_CYCLES, int(minutes * 60 / rec.period_s))
    ruled, aged = [], 0
    for _ in range(trials):
        main, control = synthetic(rec, n, rng)
        rows, cycles = frames(main, control, rec.period_s)
        paired = controls.paired(cycles)
        ruled.append(1 - paired.interval.lo if paired is not None and paired.interval.bounded else 1.0)
        aged += look(rows, cycles, 1).verdict == AGE
    return ruled, aged


def _unix(t: pd.Series) -> pd.Series:
    """Unix seconds of a time column, read back as datetimes or as floats."""
    if pd.api.types.is_datetime64_any_dtype(t):
        return (t - pd.Timestamp(0)).dt.total_seconds()
    return t.astype(float)


def _quantiles(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{np.median(values):.1f} / {np.quantile(values, 0.9):.1f}"


def main() -> None:
    from time_to_verdict_live import FAULT_AFTER, FAULT_ROWS, live  # the benchmarks folder: this script's own live half

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=40, help="resampled healthy runs per recording")
    parser.add_argument("--loss-trials", type=int, default=20, help="resampled runs per recording and loss")
    parser.add_argument("--horizon-min", type=float, default=60.0, help="planned soak length (the looks planned)")
    parser.add_argument("--onset-min", type=float, default=10.0, help="minute the loss sets in")
    parser.add_argument("--losses", default=",".join(f"{x:g}" for x in LOSSES))
    parser.add_argument(
        "--baseline",
        type=int,
        default=0,
        help="probe cycles before the traffic (soak run --baseline N), resampled or live",
    )
    parser.add_argument("--only", action="append", help="recordings whose name contains this (repeatable)")
    parser.add_argument("--seed", type=int, default=SEED, help="the resampling's seed (another draws other runs)")
    parser.add_argument("--record", type=Path, help="a soak run directory to keep as a recording")
    parser.add_argument("--name", help="with --record: the recording's name")
    parser.add_argument("--note", default="", help="with --record: what ran (concurrency, neighbour, ...)")
    parser.add_argument("--live", type=int, default=0, help="run this many live healthy and faulty soaks instead")
    parser.add_argument("--live-max-min", type=float, default=30.0, help="--max-hours of each live soak, in minutes")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "time-to-verdict", help="live run directories")
    parser.add_argument("--live-kinds", default="healthy,fault", help="which live soaks: healthy, fault or both")
    parser.add_argument(
        "--live-fault-rows",
        type=int,
        default=FAULT_ROWS,
        help=f"the live fault's size: rows of the output buffer ({FAULT_ROWS:,}: a 15-20 %% loss here; 16,384: 13 %% "
        "in one run)",
    )
    parser.add_argument(
        "--live-fault-after",
        type=int,
        default=FAULT_AFTER,
        help=f"the live fault's onset: the finished request of the main engine that grows the buffer ({FAULT_AFTER}; "
        "with --baseline 60, 100 sets it in about 40 s into the traffic, before a quiet host can decide)",
    )
    args = parser.parse_args()
    if args.live:
        live(
            args.live,
            args.out,
            args.live_max_min,
            tuple(args.live_kinds.split(",")),
            args.baseline,
            args.live_fault_rows,
            args.live_fault_after,
        )
        return
    if args.record:
        print(record(args.record, args.name or args.record.name, args.note))
        return
    losses = [float(x) for x in args.losses.split(",")]
    rng = np.random.default_rng(args.seed)
    recordings = load(args.only)
    started = time.time()
    print(
        f"horizon {args.horizon_min:g} min, loss from minute {args.onset_min:g}, {args.trials} resampled healthy "
        f"runs and {args.loss_trials} per loss per recording (blocks of {BLOCK} cycles, seed {args.seed}), every "
        "cycle looked at"
        + (f"; a baseline of {args.baseline} cycles before the traffic, minutes from its end" if args.baseline else "")
    )
    print(
        f"{'recording':<18} {'cyc s':>5} {'sd':>5} {'loss':>5} {'decided':>8} {'min med/p90':>12} "
        f"{'wrong 1st':>9} {'15% out':>12} {'10% out':>12} {'false age':>9} {'on target':>9}"
    )
    summary: dict[float, list[float]] = {loss: [] for loss in losses}
    no_age_15, no_age_10, false_age, healthy_runs = [], [], 0, 0
    for rec in recordings:
        for loss in losses:
            trials = run_scenario(
                rec,
                loss,
                args.loss_trials if loss else args.trials,
                args.horizon_min,
                args.onset_min,
                rng,
                args.baseline,
            )
            if loss:
                times = [t.first_age_min - args.onset_min for t in trials if t.first_age_min is not None]
                wrong = sum(
                    t.first is not None and t.first[0] == NO_AGE and t.first[1] > args.onset_min for t in trials
                )
                decided = len(times)
                summary[loss] += times + [math.inf] * (len(trials) - len(times))
                outs = ("", "")
                fa = ""
                on_target = f"{sum(x <= target_min(loss) for x in times)}/{len(trials)}"
            else:
                times = [t.first[1] for t in trials if t.first is not None]
                wrong = sum(t.first is not None and t.first[0] == AGE for t in trials)
                decided = len(times)
                fa_runs = sum(t.first_age_min is not None for t in trials)
                false_age += fa_runs
                healthy_runs += len(trials)
                r15 = [t.no_age_min[0.15] for t in trials if t.no_age_min[0.15] is not None]
                r10 = [t.no_age_min[0.10] for t in trials if t.no_age_min[0.10] is not None]
                no_age_15 += r15 + [math.inf] * (len(trials) - len(r15))
                no_age_10 += r10 + [math.inf] * (len(trials) - len(r10))
                outs = (_quantiles(r15) + f" ({len(r15)})", _quantiles(r10) + f" ({len(r10)})")
                fa = f"{fa_runs}/{len(trials)}"
                on_target = f"{sum(x <= HEALTHY_TARGET_MIN for x in r15)}/{len(trials)}"
            print(
                f"{rec.name:<18} {rec.period_s:>5.1f} {rec.log_ratio_sd:>5.3f} {loss:>5.0%} "
                f"{decided:>4}/{len(trials):<3} {_quantiles(times):>12} {wrong:>9} {outs[0]:>12} {outs[1]:>12} "
                f"{fa:>9} {on_target:>9}",
                flush=True,
            )
    for minutes in FINAL_LOOK_MIN:
        looks = [final_look(rec, minutes, FINAL_LOOK_TRIALS, rng) for rec in recordings]
        ruled, aged = [x for r, _ in looks for x in r], sum(a for _, a in looks)
        print(
            f"a healthy soak of {minutes:g} minutes that runs its length rules out, at its one final look (90 %): "
            f"a loss of more than {np.median(ruled):.0%} (median; 90th percentile {np.quantile(ruled, 0.9):.0%}); "
            f"called aged {aged}/{len(ruled)}"
        )
    print(f"({time.time() - started:.0f} s)")
    parts = [f"healthy: 15% loss ruled out in {_median(no_age_15)} min, 10% in {_median(no_age_10)} min"]
    parts += [f"{loss:.0%} loss decided age in {_median(summary[loss])} min after onset" for loss in losses if loss]
    parts.append(
        "on target: healthy 15% ruled out within "
        f"{HEALTHY_TARGET_MIN:g} min in {sum(x <= HEALTHY_TARGET_MIN for x in no_age_15)}/{len(no_age_15)}"
    )
    parts += [
        f"{loss:.0%} loss decided within {TARGET_MIN[loss]:g} min in "
        f"{sum(x <= TARGET_MIN[loss] for x in summary[loss])}/{len(summary[loss])}"
        for loss in losses
        if loss in TARGET_MIN
    ]
    print(
        f"time to verdict (median over recordings and runs; inf: not within {args.horizon_min:g} min): "
        + "; ".join(parts)
        + f"; false age verdicts {false_age}/{healthy_runs} watched at every cycle"
    )


def target_min(loss: float) -> float:
    """Minutes after its onset within which a loss should be decided: the target of the largest
    targeted loss not above it (a larger loss is held to a smaller one's target)."""
    return min((m for size, m in TARGET_MIN.items() if size <= loss), default=math.inf)


def _median(values: list[float]) -> str:
    return f"{np.median(values):.1f}" if values else "-"


if __name__ == "__main__":
    main()
