"""The live terminal view of a soak (rich): time, calls, live tok/s, last probes, engine state."""

from __future__ import annotations

from rich.table import Table

from soak.run import Progress


def render(p: Progress) -> Table:
    table = Table(title=f"soak → {p.run_dir}", show_header=False, expand=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("phase", p.phase)
    table.add_row("elapsed / remaining", f"{_hms(p.elapsed_s)} / {_hms(p.remaining_s)}")
    table.add_row("calls", f"{p.num_calls} done, {p.num_failed} failing, {p.num_in_flight} in flight")
    table.add_row("live decode", f"{p.live_tps:.1f} tok/s (client, last 30 s)")
    probes = ", ".join(f"{r.decode_tps:.1f}" if r.decode_tps else r.status for r in p.probes) or "none yet"
    table.add_row("probes (tok/s)", probes)
    table.add_row("engine", p.engine)
    return table


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}"
