"""The running verdict a soak prints every probe cycle: what the probes so far say (placeholder
until diagnostics.paired lands; the interface stays)."""

from __future__ import annotations

import pandas as pd


def running_verdict(probes: pd.DataFrame) -> str:
    """One line on the probes so far (columns of the run directory's probes table, with the
    optional `role` and `cycle`)."""
    ok = probes[(probes.get("status", "ok") == "ok") & (probes["decode_tps"] > 0)] if len(probes) else probes
    if len(ok) < 2:
        return "verdict so far: too few probes"
    main = ok[ok["role"] == "main"] if "role" in ok else ok
    first, last = float(main["decode_tps"].iloc[0]), float(main["decode_tps"].iloc[-1])
    return f"verdict so far: probes {first:.1f} -> {last:.1f} tok/s ({last / first:.2f}x)"
