"""time_to_verdict.py's live half (`--live N`): real `soak run --until-decided` soaks, healthy and
with the output-buffer fault, each read back for its stop, its decided verdict and minute, the
fault's onset and its actual cost against the twin in the same run (time_to_verdict.py says why).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
from time_to_verdict import AGE, NO_AGE, ROOT, _unix, controls, reader

TRACE = ROOT / "examples" / "opencode.jsonl"
# make demo's trace settings; the probes are --until-decided's own (every 10 s, 256 tokens out)
LIVE_ARGS = (
    "--scale",
    "0.1",
    "--speed",
    "4",
    "--probe-tokens",
    "32",
    "--engine-arg=--kv-tokens=2048",
    "--no-profiles",
    "--no-live",
)
# 32,768 rows of the default checkpoint's vocabulary: about 1.4 ms a step here, a 9-19 % loss as
# the host's speed went in the live runs of 2026-12-03 (docs/benchmarks.md, q1-q3);
# grown at the 250th finished request, about five minutes into a soak at concurrency 1 (the twin,
# restarted every 10 minutes and serving only probes, never gets there).
FAULT_ROWS = 32768
# The 250th finished request (above) by default. With a baseline (`--baseline 60`: 15 minutes of
# probes alone) the main engine has finished about 62 requests (probes and its warm-up call) when
# the traffic starts, and a quiet host can rule a loss out 2 minutes later: an onset at the 250th
# request (4.4 minutes in) comes too late to be timed. The twin, restarted every 10 minutes,
# finishes at most about 65 in a life (one probe a cycle); so 100 sets the fault in on the main
# engine alone, about 40 seconds into the traffic.
FAULT_AFTER = 250


def fault_args(rows: int = FAULT_ROWS, after: int = FAULT_AFTER) -> tuple[str, ...]:
    """The soak options that switch the output-buffer fault on: `rows` rows of the vocabulary,
    grown at the `after`-th finished request of an engine life."""
    return (
        "--fault",
        "output-buffer",
        f"--engine-arg=--fault-buffer-rows={rows}",
        f"--engine-arg=--fault-after={after}",
    )


class LiveResult(NamedTuple):
    name: str
    stop_reason: str | None
    decided: str | None
    decided_min: float | None
    onset_min: float | None  # the fault's: the first snapshot with the grown buffer
    cost: float | None  # paired ratio after the onset over before it (the fault's actual size)
    final: str  # diag analyze's verdict and confidence


def run_live(
    name: str,
    out: Path,
    fault: bool,
    max_minutes: float,
    baseline: int = 0,
    fault_rows: int = FAULT_ROWS,
    fault_after: int = FAULT_AFTER,
) -> LiveResult:
    import subprocess

    run_dir = out / name
    cmd = [
        sys.executable,
        "-m",
        "tokdrift.cli.soak",
        "run",
        "--trace",
        str(TRACE),
        "--until-decided",
        "--max-hours",
        f"{max_minutes / 60:g}",
        "--concurrency",
        "1",
        *LIVE_ARGS,
        *(fault_args(fault_rows, fault_after) if fault else ()),
        *(("--baseline", str(baseline)) if baseline else ()),
        "-o",
        str(run_dir),
    ]
    with open(out / f"{name}.out", "w") as log:
        code = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise SystemExit(f"{name}: soak exited {code}; see {out / (name + '.out')}")
    return read_live(run_dir, fault)


def read_live(run_dir: Path, fault: bool) -> LiveResult:
    """One live soak's run directory read back: its stop, decision, the fault's onset and cost."""
    from diagnostics.analysis import analyze
    from diagnostics.source.source import load_source

    manifest = reader.read_manifest(run_dir)
    events = reader.read_events(run_dir).events
    # Minutes count from the traffic's first call, as the resampled runs count them: a baseline's
    # cycles come before it and are not part of the time to a verdict.
    calls = reader.read_table(run_dir, "requests")
    calls = calls[calls["kind"] != "probe"]
    start = float(_unix(calls["t_send"]).min()) if len(calls) else min(e.t for e in events if e.kind == "probe")
    decided_t = next((e.t for e in events if e.kind == "decided"), None)
    onset = cost = None
    snaps = reader.read_table(run_dir, "snapshots")
    if fault and "output_buffer_bytes" in snaps:
        grown = snaps[snaps["output_buffer_bytes"] >= snaps["output_buffer_bytes"].max()]
        if len(grown) and snaps["output_buffer_bytes"].max() > snaps["output_buffer_bytes"].min():
            t_on = float(_unix(grown["t"]).min())
            onset = (t_on - start) / 60
            cycles = controls.first_life(controls.pairs(controls.probe_rows(reader.read_table(run_dir, "probes"))))
            t = _unix(cycles["t"])
            before, after = cycles["ratio"][t < t_on], cycles["ratio"][t >= t_on]
            if len(before) and len(after):
                cost = float(np.exp(np.log(after).mean() - np.log(before).mean()))
    doc = analyze(load_source(run_dir)).to_dict()
    return LiveResult(
        name=run_dir.name,
        stop_reason=manifest.stop_reason,
        decided=manifest.decided.verdict if manifest.decided is not None else None,
        decided_min=(decided_t - start) / 60 if decided_t is not None else None,
        onset_min=onset,
        cost=cost,
        final=f"{doc['verdict']} {doc.get('confidence') or ''}".strip(),
    )


def live(
    n: int,
    out: Path,
    max_minutes: float,
    kinds: tuple[str, ...] = ("healthy", "fault"),
    baseline: int = 0,
    fault_rows: int = FAULT_ROWS,
    fault_after: int = FAULT_AFTER,
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"live soaks, --until-decided, at most {max_minutes:g} min each (make demo's trace settings, concurrency 1)"
        + (
            f", a baseline of {baseline} cycles first (minutes from the traffic's first call, after it)"
            if baseline
            else ""
        )
    )
    print(f"{'run':<12} {'stop':<9} {'decided':<24} {'at min':>6} {'onset':>6} {'after onset':>11} {'cost':>5}  final")
    results = []
    for i in range(n):
        for kind in kinds:
            fault = kind == "fault"
            name = f"{kind}-{i}"
            while (out / name).exists():  # a run directory is never reused: the next free name
                name += "+"
            r = run_live(name, out, fault, max_minutes, baseline, fault_rows, fault_after)
            results.append(r)
            fmt = lambda x, f: f"{x:{f}}" if x is not None else "-"  # noqa: E731
            after = r.decided_min - r.onset_min if r.decided_min is not None and r.onset_min is not None else None
            print(
                f"{r.name:<12} {r.stop_reason or '-':<9} {r.decided or '-':<24} {fmt(r.decided_min, '6.1f')} "
                f"{fmt(r.onset_min, '6.1f')} {fmt(after, '11.1f')} {fmt(r.cost, '5.2f')}  {r.final}",
                flush=True,
            )
    healthy = [r for r in results if r.name.startswith("healthy")]
    faulty = [r for r in results if r.name.startswith("fault")]
    print(
        f"live: healthy decided no_degradation {sum(r.decided == NO_AGE for r in healthy)}/{len(healthy)}, "
        f"called aged {sum(r.decided == AGE or r.final.startswith(AGE) for r in healthy)}; output-buffer decided "
        f"age {sum(r.decided == AGE for r in faulty)}/{len(faulty)}"
    )
