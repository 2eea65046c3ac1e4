"""The running verdict: after every probe cycle the soak asks its judge what the probes so far
say, as a line, and whether that is decided either way. The first decided look is the soak's,
recorded once (the manifest's `decided`); with `until_decided` it ends the replay (soak.run).

The soak states the question (`Judge`, `Look`) and diagnostics answers it
(diagnostics.decision.live.RunningJudge). A soak handed no judge asks that one, so a `Soak` built in
Python decides as `soak run` does; `default_judge` is the soak's one import of diagnostics, made
when a soak that probes is built (importing the soak loads no analysis).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from rundir.reader import read_rows
from rundir.rows import ProbeRow
from rundir.schema import PROBE_COLUMNS
from soak.live_view import hms

if TYPE_CHECKING:
    from soak.config import SoakConfig
    from soak.run import Soak


class Look(Protocol):
    """What a judge says of the probes so far."""

    @property
    def line(self) -> str: ...  # "verdict so far: ...", as printed after the cycle

    @property
    def decided(self) -> str | None: ...  # the verdict once decided either way, else None

    @property
    def awaits_young_control(self) -> bool: ...  # decided "no age", taken once the control's youth is verified

    @property
    def details(self) -> dict[str, Any]: ...  # kept beside a decided verdict (the manifest's `decided`)


class Judge(Protocol):
    def look(self, probes: list[ProbeRow]) -> Look:
        """The verdict on every probe row so far (the run directory's probes table, as written)."""
        ...


def default_judge(config: SoakConfig) -> Judge:
    """The running verdict `soak run` prints, its intervals valid over every look the soak plans."""
    from diagnostics.decision.live import RunningJudge

    probing = config.probing
    return RunningJudge(config.duration_s, probing.probe_every_s, probing.baseline_cycles, config.rule_out)


class RunningVerdict:
    """The judge's verdict on every probe so far, a resumed run's included; the first decided look
    is handed to the soak (Soak.decided, which records it, and with until_decided ends the replay)."""

    def __init__(self, soak: Soak, judge: Judge) -> None:
        self.soak = soak
        self.judge = judge
        self.rows: list[ProbeRow] = read_rows(soak.run_dir, "probes", PROBE_COLUMNS) if soak.resuming else []
        self.line: str | None = None  # after the last cycle, as printed

    def add(self, rows: list[ProbeRow]) -> str:
        """One more probe cycle's rows: the line to print."""
        self.rows.extend(rows)
        try:
            look = self.judge.look(self.rows)
        except Exception as exc:  # noqa: BLE001 - the verdict so far must never stop the soak
            self.line = f"verdict so far: unavailable ({type(exc).__name__}: {exc})"
            return self.line
        line = look.line
        d = self.soak.manifest.decided  # the first decided look, a resumed run's included
        held = self._held() if look.decided and look.awaits_young_control and d is None else None
        if held is not None:
            line += f"; {held}"
        elif look.decided and d is None:
            cycle = rows[0].get("cycle") if rows else None
            self.soak.decided(look.decided, cycle, line, **look.details)
        elif d is not None:
            when = f", {hms(d.elapsed_s)} into the soak" if d.elapsed_s is not None else ""
            line += f" [first decided at cycle {d.cycle}{when}: {d.verdict}]"
        self.line = line
        return line

    def _held(self) -> str:
        """Why a decided "no age" is not taken yet. It rests on a control assumed young: it stands
        once a restart of the control showed the fresh one no faster (its youth verified); until
        then the control is restarted (between cycles) and the soak goes on."""
        if self.soak.verify_control():
            return "not taken yet: the control is restarted first, to verify that it stayed young"
        return "not taken: the control is off or cannot be restarted, so whether it stayed young cannot be verified"
