"""Small synthetic run directories, written through the soak's own writer (rundir.writer.RunStore)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rundir import schema
from rundir.manifest import RunManifest
from rundir.writer import RunStore

T0 = 1_790_000_000.0  # Unix seconds


def make_run_dir(
    root: Path,
    minutes: int = 60,
    fault_at_min: float | None = 30,
    restart_at_min: float | None = 45,
    slowdown: float = 3.0,
    client_bias: float = 1.0,
    drop_life_columns: bool = False,
    schema_version: int = schema.SCHEMA_VERSION,
    seed: int = 0,
    reuse_lost_at_min: float | None = None,
    prefill_slow_at_min: float | None = None,
    host_slows_at_min: float | None = None,
    host_slowdown: float = 1.6,
    twin: bool = False,
    host_columns: bool = False,
) -> Path:
    """A built-in engine run: per-step rows every second, snapshots every 10 s, probes every 3 min.

    With a fault, step time is multiplied by `slowdown` from `fault_at_min` until the restart;
    `kv_fragmentation` jumps at the fault (the true suspect), `radix_nodes` only grows with
    engine age, `rss_bytes` is noise. `client_bias` scales the client's decode rate. From
    `reuse_lost_at_min` on, continuation turns get nothing from the prefix cache, and
    `state_slots_leaked` (its true suspect) is up, while decode stays as it was. From
    `prefill_slow_at_min` on, prefills take 3x as long (decode as it was), and the snapshot
    counter `eviction_s_total` (its true suspect) climbs at a higher rate.
    """
    rng = np.random.default_rng(seed)
    store = RunStore(root)
    t = T0 + np.arange(0, minutes * 60, 1.0)
    restart = T0 + restart_at_min * 60 if restart_at_min is not None else np.inf
    fault = T0 + fault_at_min * 60 if fault_at_min is not None else np.inf
    life = (t >= restart).astype(np.int64)
    age = np.where(life == 1, t - restart, t - T0)
    degraded = (t >= fault) & (t < restart)
    host_at = T0 + host_slows_at_min * 60 if host_slows_at_min is not None else np.inf
    host = lambda tt: np.where(tt >= host_at, host_slowdown, 1.0)  # noqa: E731 - the host's slowdown at each time
    ctx = rng.integers(20_000, 40_000, len(t)).astype(float)
    step = (
        (0.012 + 0.002 + 1.5e-7 * ctx) * np.where(degraded, slowdown, 1.0) * host(t) * (1 + rng.normal(0, 0.02, len(t)))
    )
    steps = pd.DataFrame(
        {
            "t": t,
            "engine_age_s": age,
            "engine_life": life,
            "phase": "decode",
            "num_running_reqs": 2.0,
            "num_queue_reqs": 0.0,
            "num_tokens": ctx,
            "step_time_s": step,
            "num_decode_tokens": 2.0,
            "gen_tps": 2.0 / step,
            "token_usage": ctx / 262_144,
            "forward_s": step * 0.9,
        }
    )
    prefill = np.arange(len(t)) % 30 == 0
    steps.loc[prefill, ["phase", "new_tokens", "cached_tokens", "step_time_s", "gen_tps"]] = [
        "prefill",
        2000.0,
        20_000.0,
        np.nan,
        np.nan,
    ]
    slow = (
        (t >= T0 + prefill_slow_at_min * 60) & (t < restart)
        if prefill_slow_at_min is not None
        else np.zeros(len(t), bool)
    )
    steps["input_tps"] = np.where(
        prefill, 2000.0 / (0.5 * np.where(slow, 3.0, 1.0) * host(t) * (1 + rng.normal(0, 0.03, len(t)))), np.nan
    )
    if drop_life_columns:
        steps = steps.drop(columns=["engine_age_s", "engine_life"])
    _parts(store, "steps", steps, 2)
    (root / "steps" / "part-000009.parquet.tmp").write_bytes(b"half-written")

    ts = T0 + np.arange(0, minutes * 60, 10.0)
    s_life = (ts >= restart).astype(np.int64)
    s_deg = (ts >= fault) & (ts < restart)
    s_age = np.where(s_life == 1, ts - restart, ts - T0)
    snaps = pd.DataFrame(
        {
            "t": ts,
            "engine_age_s": s_age,
            "engine_life": s_life,
            "radix_nodes": 100 + s_age * 2.0,
            "kv_fragmentation": np.where(s_deg, 0.6, 0.1) + rng.normal(0, 0.02, len(ts)),
            "rss_bytes": 4e9 + rng.normal(0, 1e7, len(ts)),
            # A counter of the engine process: starts again at 0 after a restart, steady rate.
            "expert_hits": pd.Series(rng.integers(100, 110, len(ts)).astype(float)).groupby(s_life).cumsum().to_numpy(),
        }
    )
    if prefill_slow_at_min is not None:
        slow_s = (ts >= T0 + prefill_slow_at_min * 60) & (s_life == 0)
        rate = np.where(slow_s, 0.5, 0.01) * (1 + rng.normal(0, 0.1, len(ts)))
        snaps["eviction_s_total"] = pd.Series(rate * 10.0).groupby(s_life).cumsum().to_numpy()
    if host_columns:
        snaps["driver_cpu_percent"] = 8.0 + rng.normal(0, 1, len(ts))
        snaps["host_other_cpu_percent"] = np.where(ts >= host_at, 95.0, 2.0) + rng.normal(0, 2, len(ts))
    if reuse_lost_at_min is not None:
        lost = T0 + reuse_lost_at_min * 60
        snaps["state_slots_leaked"] = np.where((ts >= lost) & (s_life == 0), 12.0, 0.0) + rng.integers(0, 2, len(ts))
    _parts(store, "snapshots", snaps, 1)

    tp = T0 + np.arange(60, minutes * 60, 180.0)
    p_deg = (tp >= fault) & (tp < restart)
    probes = pd.DataFrame(
        {
            "t": tp,
            "engine_life": (tp >= restart).astype(np.int64),
            "engine_age_s": np.where(tp >= restart, tp - restart, tp - T0),
            "probe_id": "probe-1",
            "prompt_tokens": 1024,
            "output_tokens": 128,
            "ttft_s": 0.2,
            "decode_tps": np.where(p_deg, 60.0 / slowdown, 60.0) / host(tp) * (1 + rng.normal(0, 0.01, len(tp))),
            "status": "ok",
        }
    )
    if twin:  # the fresh control, probed 4 s after the main engine in every cycle
        probes = probes.assign(role="main", cycle=np.arange(len(tp)))
        control = probes.assign(
            role="control",
            t=tp + 4.0,
            engine_life=0,
            engine_age_s=(tp + 4.0 - T0) % 600,
            decode_tps=61.0 / host(tp + 4.0) * (1 + rng.normal(0, 0.01, len(tp))),
        )
        probes = pd.concat([probes, control]).sort_values("t", kind="stable").reset_index(drop=True)
    _parts(store, "probes", probes, 1)

    tr = T0 + np.arange(30, minutes * 60 - 30, 120.0)
    r_deg = (tr >= fault) & (tr < restart)
    per_req = 1.0 / ((0.014 + 1.5e-7 * 30_000) * np.where(r_deg, slowdown, 1.0))
    out_tokens = 200
    decode_s = (out_tokens - 1) / (per_req * client_bias)
    requests = pd.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(len(tr))],
            "session": "s0",
            "turn": np.arange(len(tr)),
            "kind": "turn",
            "t_send": tr,
            "t_first_token": tr + 0.5,
            "t_first_content": tr + 1.5,
            "t_last_token": tr + 0.5 + decode_s,
            "prompt_tokens": 30_000,
            "cached_tokens": 28_000,
            "output_tokens": out_tokens,
            "reasoning_tokens": 40,
            "status": "ok",
            "error": None,
        }
    )
    if reuse_lost_at_min is not None:
        requests.loc[(tr >= T0 + reuse_lost_at_min * 60) & (tr < restart), "cached_tokens"] = 0
    _parts(store, "requests", requests, 1)

    events = [{"t": T0 - 5, "kind": "start", "run_id": "test"}, {"t": T0, "kind": "engine_start", "pid": 1}]
    if fault_at_min is not None:
        events.append({"t": fault - 1, "kind": "fault_on", "fault": "kv-scatter"})
    if restart_at_min is not None:
        events += [
            {"t": restart - 1, "kind": "engine_restart", "reason": "scheduled"},
            {"t": restart, "kind": "engine_start", "pid": 2},
        ]
    for event in events:
        store.event(**event)
    manifest = {
        "schema_version": schema_version,
        "run_id": "test",
        "status": "completed",
        "started_at": "2026-09-23T09:00:00Z",
        "ended_at": "2026-09-23T10:00:00Z",
        "target": "builtin",
        "command": ["soak", "run"],
        "configs": {},
        "host": {"cpu": "test"},
    }
    store.write_manifest(RunManifest.from_json(manifest))
    store.close()
    with open(root / schema.EVENTS, "a", encoding="utf-8") as f:
        f.write('{"t": 17900')  # a torn last line, as a crash mid-write leaves
    return root


def _parts(store: RunStore, table: str, df: pd.DataFrame, n: int) -> None:
    """`df` as `n` parts of `table`, each one flush of the writer."""
    for chunk in np.array_split(np.arange(len(df)), n):
        for row in df.iloc[chunk].to_dict("records"):
            store.add(
                table,
                {
                    k: (None if isinstance(v, float) and v != v and k in _NON_FLOAT.get(table, ()) else v)
                    for k, v in row.items()
                },
            )
        store.flush()


_NON_FLOAT = {
    table: {name for name, (kind, _, _) in columns.items() if kind != "float64"}
    for table, columns in schema.TABLES.items()
}
