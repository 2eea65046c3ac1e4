"""The running verdict a soak prints after every probe cycle: what the probes so far say.

Only the probes (and the paired control, where the run has one) are read, so it costs nothing
however long the run; `diag analyze` on the run directory weighs everything else too.
"""

from __future__ import annotations

import pandas as pd

from diagnostics import controls
from diagnostics.verdict import Evidence, decide


def running_verdict(probes: pd.DataFrame) -> str:
    """One line on the probes so far (columns of the run directory's probes table, with the
    optional `role` and `cycle`)."""
    rows = controls.probe_rows(probes)
    cycles = controls.pairs(rows)
    evidence = Evidence(paired=controls.paired(cycles), probes=controls.probes(rows),
                        control_drift=controls.control_drift(cycles), restart=controls.restart(rows, cycles))
    if evidence.paired is None and evidence.probes is None:
        return f"verdict so far: too few probes ({len(rows)} ok) to compare early with late"
    d = decide(evidence)
    shown = d.decisive or evidence.paired or evidence.probes
    how = f", {d.confidence} confidence" if d.confidence else ""
    cause = "; host or load drift, not age" if d.cause == "host_or_load_drift" else ""
    return f"verdict so far: {d.verdict}{how} ({shown.basis.replace('_', ' ')} {shown.interval.describe()}){cause}"
