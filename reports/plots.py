"""The report's figures, drawn with matplotlib's Agg canvas and returned as PNG data URIs.

No pyplot: each figure is a plain `Figure` on its own Agg canvas, so nothing global is
touched and no display is needed. Every function takes tables and returns a data URI, or
None when it has nothing to draw (the page then says so).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure
from matplotlib.ticker import Formatter, Locator

from diagnostics.evidence.changepoint import Segment
from diagnostics.evidence.healthy import HealthyModel
from rundir.schema import ProbeRole, StepPhase

MAX_POINTS = 20_000  # per scatter; longer series are thinned evenly
WIDE = (9.6, 3.4)
SMALL = (9.6, 2.6)
DPI = 100
ONSET, TRIGGER, RESTART, HEALTHY = "#c62828", "#ef6c00", "#37474f", "#2e7d32"

# matplotlib.dates carries no type annotations (its other modules do): what this module uses of it.
# Its stubs type the x of axvline and axvspan as a float, though on a time axis a date goes through
# the date converter (matplotlib/matplotlib#30365): those calls with a date ignore arg-type.
_date_locator: Callable[[], Locator] = AutoDateLocator
_date_formatter: Callable[[Locator], Formatter] = ConciseDateFormatter


def data_uri(fig: Figure) -> str:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(size: tuple[float, float] = WIDE) -> tuple[Figure, Axes]:
    fig = Figure(figsize=size, layout="constrained")
    ax = fig.add_subplot()
    ax.grid(True, alpha=0.3)
    return fig, ax


def _size(n: int, small: float = 9) -> float:
    """Marker area: large for a pasted excerpt of a few lines, small for a long run."""
    return 36 if n < 50 else 16 if n < 500 else small


def _time_axis(ax: Axes) -> None:
    locator = _date_locator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(_date_formatter(locator))


def _thin(df: pd.DataFrame) -> pd.DataFrame:
    return df if len(df) <= MAX_POINTS else df.iloc[:: int(np.ceil(len(df) / MAX_POINTS))]


def _marks(
    ax: Axes, onset_t: np.datetime64 | None, trigger_t: np.datetime64 | None, restarts: Sequence[np.datetime64]
) -> None:
    if trigger_t is not None and (onset_t is None or trigger_t != onset_t):
        ax.axvline(trigger_t, color=TRIGGER, ls="--", lw=1.4, label="trigger")  # type: ignore[arg-type]  # a date (see the top)
    if onset_t is not None:
        ax.axvline(onset_t, color=ONSET, lw=1.6, label="onset" + (" (and trigger)" if trigger_t == onset_t else ""))  # type: ignore[arg-type]  # a date (see the top)
    for i, t in enumerate(restarts):
        ax.axvline(t, color=RESTART, ls=":", lw=1.6, label="restart" if i == 0 else None)  # type: ignore[arg-type]  # a date (see the top)


def throughput_over_time(
    samples: pd.DataFrame,
    onset_t: np.datetime64 | None,
    trigger_t: np.datetime64 | None,
    restarts: Sequence[np.datetime64],
    healthy_end: np.datetime64 | None = None,
) -> str | None:
    if samples.empty:
        return None
    fig, ax = _figure()
    s = _thin(samples)
    kept, out = s[s["excluded"] == ""], s[s["excluded"] != ""]
    ax.scatter(kept["t"], kept["gen_tps"], s=_size(len(s)), color="#1565c0", label="decode throughput", zorder=3)
    if len(out):
        ax.scatter(
            out["t"],
            out["gen_tps"],
            s=_size(len(s), 14),
            facecolors="none",
            edgecolors="#9e9e9e",
            label="after a prefill or idle gap (kept out)",
            zorder=2,
        )
    if healthy_end is not None:
        ax.axvspan(samples["t"].min(), healthy_end, color=HEALTHY, alpha=0.08, label="healthy window")  # type: ignore[arg-type]  # a date (see the top)
    _marks(ax, onset_t, trigger_t, restarts)
    ax.set_ylabel("decode throughput (tok/s)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="best", fontsize=8)
    _time_axis(ax)
    return data_uri(fig)


def throughput_vs_context(samples: pd.DataFrame, model: HealthyModel | None) -> str | None:
    s = samples[(samples["excluded"] == "") & samples["context"].notna()]
    if s.empty:
        return None
    s = _thin(s)
    fig, ax = _figure()
    age_h = s["engine_age_s"].to_numpy(dtype=float) / 3600
    points = ax.scatter(s["context"], s["gen_tps"], c=age_h, cmap="viridis", s=_size(len(s), 10), zorder=3)
    fig.colorbar(points, ax=ax, label="engine age (h)")
    if model is not None:
        lo, hi = float(s["context"].min()), float(s["context"].max())
        ctx = np.linspace(lo * 0.95, hi * 1.05, 100)
        for batch in s["num_running_reqs"].dropna().value_counts().index[:3]:
            pred = model.predict(
                np.full(len(ctx), float(batch)), ctx if model.context_identified else np.zeros(len(ctx))
            )
            ax.plot(ctx, float(batch) / pred, color=HEALTHY, lw=2, zorder=4, label=f"healthy model, batch {batch:g}")
    ax.set_xlabel("context (KV tokens in use)")
    ax.set_ylabel("decode throughput (tok/s)")
    ax.set_ylim(bottom=0)
    if model is not None:
        ax.legend(loc="best", fontsize=8)
    return data_uri(fig)


def probes_over_age(probes: pd.DataFrame | list[pd.DataFrame], labels: Sequence[str] = ()) -> str | None:
    """One probe series, or several (a list of frames via `labels`) for a comparison: the soaked
    engine's probes per engine life, its control's (where the run has one) as their own series."""
    frames = probes if isinstance(probes, list) else [probes]
    frames = [p[p["decode_tps"].notna() & (p["decode_tps"] > 0)] if not p.empty else p for p in frames]
    if all(p.empty for p in frames):
        return None
    fig, ax = _figure()
    markers = "os^D"
    for k, p in enumerate(frames):
        role = p["role"].fillna(ProbeRole.MAIN) if "role" in p else pd.Series(ProbeRole.MAIN, index=p.index)
        prefix = f"{labels[k]}: " if labels else ""
        for life, rows in p[role != ProbeRole.CONTROL].groupby("engine_life", sort=True):
            ax.plot(
                rows["engine_age_s"] / 60,
                rows["decode_tps"],
                marker=markers[k % 4],
                ms=5,
                lw=1,
                label=f"{prefix}engine life {life}",
            )
        for n, (_, rows) in enumerate(p[role == ProbeRole.CONTROL].groupby("engine_life", sort=True)):
            ax.plot(
                rows["engine_age_s"] / 60,
                rows["decode_tps"],
                marker=markers[k % 4],
                ms=4,
                lw=0.8,
                ls="--",
                color="0.55",
                label=None if n else f"{prefix}control (fresh instance, at the same moments)",
            )
    ax.set_xlabel("engine age (min)")
    ax.set_ylabel("probe decode (tok/s)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="best", fontsize=8)
    return data_uri(fig)


def residuals(
    samples: pd.DataFrame, life_rows: pd.DataFrame, segments: Sequence[Segment], material: float
) -> str | None:
    s = samples[(samples["excluded"] == "") & samples["residual"].notna()]
    if s.empty:
        return None
    fig, ax = _figure()
    t = _thin(s)
    ax.scatter(
        t["t"],
        t["residual"],
        s=_size(len(t), 7),
        c=np.where(t["engine_life"] == t["engine_life"].min(), "#1565c0", "#8e24aa"),
        zorder=2,
    )
    base = float(s.loc[s["healthy"].fillna(False).astype(bool), "residual"].median()) if "healthy" in s else 0.0
    ax.axhline(base, color=HEALTHY, lw=1, label="healthy level")
    ax.axhline(base + material, color=HEALTHY, lw=1, ls="--", label="material slowdown (10%)")
    if segments and len(life_rows) == segments[-1].end:
        times = life_rows["t"].to_numpy()
        for i, seg in enumerate(segments):
            end = times[seg.end - 1]
            ax.hlines(
                seg.level,
                times[seg.start],
                end,
                color=ONSET,
                lw=2.5,
                zorder=4,
                label="segment level (PELT)" if i == 0 else "_nolegend_",
            )
            if i:
                ax.axvline(times[seg.start], color=ONSET, ls=":", lw=1, label="change point" if i == 1 else None)
    ax.set_ylabel("log(step time / healthy)")
    ax.legend(loc="best", fontsize=8)
    _time_axis(ax)
    return data_uri(fig)


def prefills(steps: pd.DataFrame, trigger_t: np.datetime64 | None) -> str | None:
    p = steps[(steps["phase"] == StepPhase.PREFILL) & steps["new_tokens"].notna()]
    if p.empty:
        return None
    p = _thin(p)
    fig, ax = _figure(SMALL)
    cached = p["cached_tokens"].fillna(0).to_numpy(dtype=float)
    new = p["new_tokens"].to_numpy(dtype=float)
    ax.vlines(p["t"], 0, cached, color="#90caf9", lw=2, label="cached tokens reused")
    ax.vlines(p["t"], cached, cached + new, color="#0d47a1", lw=2, label="new tokens computed")
    if trigger_t is not None:
        ax.axvline(trigger_t, color=TRIGGER, ls="--", lw=1.4, label="trigger")  # type: ignore[arg-type]  # a date (see the top)
    ax.set_ylabel("prompt tokens")
    ax.set_ylim(bottom=0)
    ax.legend(loc="best", fontsize=8)
    _time_axis(ax)
    return data_uri(fig)


def suspect(
    series: pd.DataFrame,
    name: str,
    samples: pd.DataFrame,
    onset_t: np.datetime64 | None,
    restarts: Sequence[np.datetime64],
) -> str | None:
    if series.empty:
        return None
    fig, ax = _figure(SMALL)
    series = _thin(series)
    ax.plot(series["t"], series[name], color="#6a1b9a", lw=1.2, label=name)
    ax.set_ylabel(name, color="#6a1b9a")
    s = _thin(samples[(samples["excluded"] == "") & samples["residual"].notna()])
    if len(s):
        right = ax.twinx()
        right.scatter(s["t"], s["gen_tps"], s=_size(len(s), 4), color="#90a4ae", label="decode throughput")
        right.set_ylabel("decode (tok/s)", color="#607d8b")
        right.set_ylim(bottom=0)
        ax.set_zorder(right.get_zorder() + 1)
        ax.patch.set_visible(False)
    _marks(ax, onset_t, None, restarts)
    ax.legend(loc="upper left", fontsize=8)
    _time_axis(ax)
    return data_uri(fig)


def age_curves(frames: Sequence[pd.DataFrame], labels: Sequence[str]) -> str | None:
    """Decode throughput over engine age for several runs (the comparison page)."""
    frames = [f[f["excluded"] == ""] for f in frames]
    if all(f.empty for f in frames):
        return None
    fig, ax = _figure()
    for f, label, color in zip(frames, labels, ("#1565c0", "#e65100", "#2e7d32")):
        f = _thin(f)
        ax.scatter(f["engine_age_s"] / 60, f["gen_tps"], s=_size(len(f), 7), color=color, alpha=0.7, label=label)
    ax.set_xlabel("engine age (min)")
    ax.set_ylabel("decode throughput (tok/s)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="best", fontsize=8)
    return data_uri(fig)
