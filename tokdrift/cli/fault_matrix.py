"""`soak validate`: a compressed soak per degradation mechanism plus a no-fault control, each
analysed; a table says whether the analysis found each one, named it, and kept quiet on the control.

Every run uses the same trace and the same engine options (`BASE_ENGINE_ARGS`, plus what a
mechanism needs to act at all, `MECHANISM_ENGINE_ARGS`); only `--fault` differs. With
`--aging-control` each mechanism runs a second time with the fault acting in the twin too
(`AGING_TWIN_ARGS`): what a control instance of the same build sees. The runs go
to `<out>/<mechanism>/` (ordinary run directories, each with its analysis.json), the table to
`<out>/matrix.md` and `<out>/matrix.json`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from diagnostics.labels import CheckStatus, Verdict
from rundir.schema import RunStatus
from soak.errors import SoakError

logger = logging.getLogger(__name__)

CONTROL = "control"
# The control is quiet when it raises no false alarm: an honest insufficient_data (a minute on a
# busy host often cannot rule a loss out) is quiet too.
CONTROL_VERDICTS = (Verdict.NO_DEGRADATION, Verdict.CONTEXT_ONLY, Verdict.INSUFFICIENT)
# The snapshot / step columns that are each mechanism's own signal (docs/faults.md): the top
# suspect must be one of them.
EXPECTED_SUSPECTS: dict[str, tuple[str, ...]] = {
    "eviction-scan": ("eviction_s_total", "eviction_nodes_visited_total", "eviction_calls_total", "schedule_s"),
    "snapshot-leak": (
        "state_slots_leaked",
        "mamba_slots_used",
        "match_truncated_tokens_total",
        "mamba_usage",
        "cache_hit_rate",
    ),
    "kv-scatter": (
        "kv_gather_s_total",
        "kv_free_list_disorder",
        "kv_gather_breaks",
        "kv_free_runs",
        "kv_fragmentation",
        "kv_largest_free_run",
    ),
    "expert-thrash": (
        "expert_copy_s_total",
        "expert_miss_rate",
        "expert_misses",
        "expert_bytes_copied_total",
        "expert_evictions",
    ),
    "gc-pressure": (
        "gc_full_pause_s_total",
        "gc_pause_s_total",
        "gc_last_full_pause_s",
        "gc_gen2_collections",
        "gc_pause_s",
        "retained_objects",
        "retained_requests",
        "rss_bytes",
    ),
    "output-buffer": ("output_buffer_bytes", "forward_s"),
}
MECHANISMS = tuple(EXPECTED_SUSPECTS)
# A pool small enough to fill and evict within minutes on the example trace; fewer state slots
# than the default so snapshots get evicted too.
BASE_ENGINE_ARGS = ("--kv-tokens=16384", "--mamba-slots=16")
MECHANISM_ENGINE_ARGS: dict[str, tuple[str, ...]] = {
    "expert-thrash": ("--moe-backend=offload", "--moe-cache-size=96"),  # of 7 MoE layers x 16 experts
    # Scattered KV costs in the attention gather, which grows with context length and pool size:
    # long contexts, and a pool the longer trace still cycles within minutes.
    "kv-scatter": ("--kv-tokens=32768",),
    # The scan visits every evictable page for each page it frees, so its cost grows with the pool.
    # In the 16K pool it cost admissions 1.5-1.7x (prefill 0.57-0.59 on 2026-12-04), at the material
    # level (0.67), and was not found in three runs; the 32K pool still fills within the run and cost
    # 3.2x (0.31, eviction 46 % of the engine's wall time after the onset), a fault the matrix is
    # meant to find.
    "eviction-scan": ("--kv-tokens=32768",),
    # A 71 MB buffer (65,536 rows of the default checkpoint's 272-token vocabulary): about 3.4 ms a
    # step on one thread of this host; grown at the 60th finished request. Half that (32,768 rows)
    # cost 11-20 % as the host's speed went (2026-12-03), a loss at the material level, where no
    # rule decides either way (docs/benchmarks.md, time_to_verdict): not found in three runs.
    "output-buffer": ("--fault-buffer-rows=65536", "--fault-after=60"),
    # The leak stops at mamba_slots - max_running_requests, so max_running_requests slots stay for
    # running requests and snapshots. On the engine with its C kernels a request ran alone most of the
    # time (1.15 on average, 2 at most: 2026-12-05), the four slots still held the sessions' snapshots,
    # and continuation turns kept 88 % of their reuse: nothing slowed, nothing to find. And from the
    # start, the leak was full 30 s in, before any healthy side. So the leak sets in at the 40th
    # finished request, and one request runs at a time: with two, the median continuation turn lost
    # all its reuse but a session running alone kept its snapshot (late over early 0.00, interval
    # 0.00-0.69: undecided); with one, 88 % -> 0 % (0.00-0.00), found, `state_slots_leaked` first.
    "snapshot-leak": ("--max-running-requests=1", "--fault-leak-after=40"),
}
# The second column (`--aging-control`): each mechanism again, with the fault acting in the twin too,
# as in a control instance of the same build. The twin carries every fault in both columns (it is
# the same engine, only young); what the second column changes is that the twin ages within each
# of its lives: a fault with an onset sets in at the twin's 4th finished request (its warm-up and
# three probes; the soaked engine's is at its 40th or 60th), and the twin is restarted after every
# AGING_RESTART_AFTER probes, so that its youth is checked across its restarts within the run (6 was
# shorter than a life whose restart judges the control: the twin's aging went unseen). The
# other mechanisms age an engine by its cache churn under the traffic, which a twin answering probes
# does not have: in their second column the twin ages only as in the first (a repeat of it).
AGING_TWIN_ARGS: dict[str, tuple[str, ...]] = {
    "output-buffer": ("--fault-after=4",),
    "snapshot-leak": ("--fault-leak-after=4",),
}
AGING_RESTART_AFTER = 8  # a life as long as diagnostics.evidence.youth.MIN_OLD_LIFE, so its restart judges the control
AGING = "aging control"  # the second column's name in the table
# A checkpoint other than the default, written under `<out>/checkpoints/<mechanism>`: the default
# model's experts copy too fast on a CPU for a drained expert cache to cost a material slowdown
# (1.03x); six times wider experts (768) cost 1.2-1.3x while it drains (benchmarks/bench_expert_thrash.py).
MECHANISM_CHECKPOINT: dict[str, dict[str, Any]] = {"expert-thrash": {"moe_intermediate_size": 768}}
# Minutes a mechanism needs to act at all, when the run's --minutes is shorter: the expert cache
# leaks a slot per prefill and drains only after about 60 admissions; the KV pool scatters only
# once it has cycled (about two and a half minutes for kv-scatter's pool), and probes after that
# must outnumber the noise.
MECHANISM_MIN_MINUTES: dict[str, float] = {"expert-thrash": 5.0, "kv-scatter": 6.0, "output-buffer": 4.0}
# Trace length scale per mechanism (replay.MaterializeConfig.scale), when not the run's --scale.
MECHANISM_SCALE: dict[str, float] = {"kv-scatter": 2.0}
# Probe prompt length, when not the run's --probe-tokens. Scattered KV costs in the gather, which
# grows with context: a 4096-token decode on a cycled 32K pool runs 1.21x slower scattered
# (benchmarks/bench_kv_scatter.py), a 256-token one barely moves.
PROBE_TOKENS = 256
MECHANISM_PROBE_TOKENS: dict[str, int] = {"kv-scatter": 4096}
# Probe output length: a 64-token probe lasts about a second here, and identical idle probes of a
# fault-free engine then varied by +-12% on a quiet 2-core machine; a longer probe averages more steps.
PROBE_OUTPUT_TOKENS = 192
DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "examples" / "opencode.jsonl"


class MatrixRow(NamedTuple):
    mechanism: str  # a fault name, or "control"
    verdict: str
    slowdown_ratio: float | None
    onset_age_s: float | None  # engine age at the onset
    top_suspect: str | None
    expected_suspect: str  # "-" for the control
    passed: bool
    run_dir: str
    detail: str  # why it failed, or what it found
    setup: str = ""  # the engine options and trace scale of this run
    aging_control: bool = False  # the second column: the fault acting in the twin too (AGING_TWIN_ARGS)


def validate(
    minutes: float,
    out: Path,
    mechanisms: Sequence[str] = MECHANISMS,
    trace: Path | None = None,
    engine_args: Sequence[str] = (),
    speed: float = 4.0,
    probe_tokens: int | None = None,
    on_row: Callable[[MatrixRow], None] | None = None,
    probe_output_tokens: int = PROBE_OUTPUT_TOKENS,
    scale: float | None = None,
    control: bool = True,
    aging_control: bool = False,
) -> list[MatrixRow]:
    """Run the control (unless `control` is False) and each mechanism for `minutes`, each mechanism
    again with the fault acting in the twin too where `aging_control` (AGING_TWIN_ARGS), analyse
    each, write the table; the rows."""
    unknown = [m for m in mechanisms if m not in EXPECTED_SUSPECTS]
    if unknown:
        raise SoakError(f"--fault: unknown fault {unknown[0]!r}; known: {', '.join(MECHANISMS)}")
    if not minutes > 0:
        raise SoakError(f"--minutes: expected a number > 0, found {minutes!r}")
    trace = Path(trace or DEFAULT_TRACE)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    runs = [(CONTROL, False)] if control else []
    for name in mechanisms:
        runs += [(name, False), (name, True)] if aging_control else [(name, False)]
    for name, aging in runs:
        run_dir = out / (f"{name}-aging-control" if aging else name)
        run_scale = scale if scale is not None else MECHANISM_SCALE.get(name, 1.0)
        run_args = tuple(engine_args)
        if name in MECHANISM_CHECKPOINT:
            run_args = (f"--model={_checkpoint(out / 'checkpoints' / name, MECHANISM_CHECKPOINT[name])}", *run_args)
        run_minutes = max(minutes, MECHANISM_MIN_MINUTES.get(name, 0.0))
        run_probe = probe_tokens if probe_tokens is not None else MECHANISM_PROBE_TOKENS.get(name, PROBE_TOKENS)
        setup = _soak(
            name, run_minutes, trace, run_dir, run_args, speed, run_probe, probe_output_tokens, run_scale, aging
        )
        row = _judge(name, run_dir, aging)._replace(setup=setup, aging_control=aging)
        rows.append(row)
        if on_row is not None:
            on_row(row)
        write_table(rows, out, minutes, trace)
    return rows


def write_table(rows: Sequence[MatrixRow], out: Path, minutes: float, trace: Path) -> None:
    machine = machine_description()
    (out / "matrix.json").write_text(
        json.dumps(
            {"minutes": minutes, "trace": str(trace), "machine": machine, "rows": [r._asdict() for r in rows]}, indent=2
        )
        + "\n",
        encoding="utf-8",
    )
    (out / "matrix.md").write_text(render_markdown(rows, minutes, machine), encoding="utf-8")


def render_markdown(rows: Sequence[MatrixRow], minutes: float, machine: str) -> str:
    lines = [
        f"{minutes:g} minutes per run, on {machine}.",
        "",
        "| mechanism | setup | verdict | slowdown ratio | onset (engine age) | top suspect | expected suspect | result |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r.slowdown_ratio:.2f}" if r.slowdown_ratio is not None else "-"
        onset = f"{r.onset_age_s:.0f} s" if r.onset_age_s is not None else "-"
        name = f"{r.mechanism}, {AGING}" if r.aging_control else r.mechanism
        lines.append(
            f"| {name} | {r.setup or '-'} | {r.verdict} | {ratio} | {onset} | {r.top_suspect or '-'} | "
            f"{r.expected_suspect} | {'pass' if r.passed else 'FAIL'} |"
        )
    aging = {r.mechanism: r for r in rows if r.aging_control}
    if aging:
        lines += [
            "",
            f"Both columns: as run, and with the fault acting in the twin too ({AGING}).",
            "",
            f"| mechanism | verdict | {AGING}: verdict | {AGING}: result |",
            "|---|---|---|---|",
        ]
        for r in rows:
            if not r.aging_control and r.mechanism in aging:
                a = aging[r.mechanism]
                lines.append(
                    f"| {r.mechanism} | {r.verdict} ({'pass' if r.passed else 'FAIL'}) | {a.verdict} | "
                    f"{'pass' if a.passed else 'FAIL'}: {a.detail} |"
                )
    return "\n".join(lines) + "\n"


# --- one run ---------------------------------------------------------------------------------


def _checkpoint(path: Path, overrides: dict[str, Any]) -> Path:
    """The default architecture with `overrides`, written once."""
    from engine.model.checkpoint import write_default_checkpoint

    if not (path / "config.json").exists():
        write_default_checkpoint(path, overrides=overrides)
    return path


def _soak(
    name: str,
    minutes: float,
    trace: Path,
    run_dir: Path,
    engine_args: Sequence[str],
    speed: float,
    probe_tokens: int,
    probe_output_tokens: int = PROBE_OUTPUT_TOKENS,
    scale: float = 1.0,
    aging_control: bool = False,
) -> str:
    """Run one compressed soak into `run_dir` (with the fault acting in the twin too where
    `aging_control`); its setup in a few words."""
    from soak.config import SoakConfig
    from soak.run import Soak

    if run_dir.exists() and (run_dir / "manifest.json").exists():
        raise SoakError(f"{run_dir}: a run is already there; give validate a fresh --out")
    faults = [] if name == CONTROL else [name]
    args = [*BASE_ENGINE_ARGS, *MECHANISM_ENGINE_ARGS.get(name, ()), *engine_args]
    duration = minutes * 60
    config = SoakConfig(
        trace=str(trace),
        duration_s=duration,
        speed=speed,
        scale=scale,
        probe_every_s=max(10.0, duration / 10),
        probe_wait_s=30.0,
        probe_input_tokens=probe_tokens,
        probe_output_tokens=probe_output_tokens,
        profiles=False,
        engine_args=tuple(args),
        faults=tuple(faults),
        twin_engine_args=AGING_TWIN_ARGS.get(name, ()) if aging_control else (),
        control_restart_after=AGING_RESTART_AFTER if aging_control else SoakConfig.control_restart_after,
        extra={"validate": name, "aging_control": aging_control},
    )
    logger.info("validate: %s for %.1f min (engine %s)", name, minutes, " ".join(args))
    soak = Soak(config, run_dir, command=["soak", "validate", name])
    status = asyncio.run(soak.run())
    if status != RunStatus.COMPLETED:
        raise SoakError(f"{run_dir}: the {name} soak ended {status}; see {run_dir}/engine.log")
    shown = [
        f"--model={Path(a.split('=', 1)[1]).name}" if a.startswith("--model=") else a
        for a in (*BASE_ENGINE_ARGS, *MECHANISM_ENGINE_ARGS.get(name, ()), *engine_args)
    ]
    twin = config.twin_engine_args
    return (
        " ".join(shown)
        + (f", twin {' '.join(twin)}" if twin else "")
        + (f", twin restarted every {AGING_RESTART_AFTER} probes" if aging_control else "")
        + (f", scale {scale:g}" if scale != 1.0 else "")
        + (f", {probe_tokens}-token probes" if probe_tokens != PROBE_TOKENS else "")
        + (f", {minutes:g} min" if minutes != 0 else "")
    )


def _judge(name: str, run_dir: Path, aging_control: bool = False) -> MatrixRow:
    """The run's row. With the fault in the twin too (`aging_control`), an honest refusal passes as
    well: insufficient_data whose checks name the aging control (a failed `control_youth`)."""
    from diagnostics.analysis import analyze
    from diagnostics.source.source import load_source

    result = analyze(load_source(run_dir))
    (run_dir / "analysis.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    verdict = result.verdict
    # The figures as analysis.json rounds them.
    ratio = round(result.slowdown.ratio, 3) if result.slowdown is not None else None
    onset_age = round(result.onset.engine_age_s, 1) if result.onset is not None else None
    suspects = [s.name for s in result.suspects]
    top = suspects[0] if suspects else None
    if name == CONTROL:
        passed = verdict in CONTROL_VERDICTS
        detail = "quiet" if passed else "a false alarm: a healthy engine called engine_age_degradation"
        expected = "-"
    else:
        expected_set = EXPECTED_SUSPECTS[name]
        expected = expected_set[0]
        found = verdict == Verdict.AGE
        named = top in expected_set
        passed = found and named
        where = next((i + 1 for i, s in enumerate(suspects) if s in expected_set), None)
        detail = (
            "found and named"
            if passed
            else ("not found as engine age; " if not found else "")
            + (f"its own signal ranks {where}" if where else "its own signal is not among the suspects")
        )
        aged = [c for c in result.checks if c.name == "control_youth" and c.status == CheckStatus.FAIL]
        if aging_control and not passed and verdict == Verdict.INSUFFICIENT and aged:
            passed, detail = True, "refused, naming the aging control"
    return MatrixRow(
        mechanism=name,
        verdict=verdict,
        slowdown_ratio=_num(ratio),
        onset_age_s=_num(onset_age),
        top_suspect=top,
        expected_suspect=expected,
        passed=passed,
        run_dir=str(run_dir),
        detail=detail,
    )


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def machine_description() -> str:
    import os

    import psutil

    cpu = platform.processor() or platform.machine()
    return (
        f"{platform.node() or 'this host'}: {os.cpu_count()} CPUs ({cpu}), "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM, {platform.system()} {platform.release()}, "
        f"load average {os.getloadavg()[0]:.1f} at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
