"""What an external engine says of itself beside the calls: its `/metrics` and its log.

Both become steps rows (columns in rundir.schema) computed by the readers diag uses
(logformats), and both can tell that the engine restarted on its own (`target_restarted`).
Like every sampler (soak.samplers), neither raises for a missing source.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np
import pandas as pd

from logformats import parse_log
from logformats.errors import LogFormatError
from logformats.prometheus import PREFIXES, parse_scrapes
from logformats.records import FIGURE_META
from logformats.text import Text
from rundir.schema import StepRow
from soak.samplers import Once
from soak.targets import Target, pid_listening_on

# --- external engines: /metrics and the log -------------------------------------------------------


# The engine's own state, from /metrics, for the snapshots (suspects rank every snapshot column):
# not its rates and latencies (the slowdown itself) nor its batch (the traffic).
SNAPSHOT_FIGURES = ("num_queue_reqs", "token_usage", "cache_hit_rate", "num_preemptions")


class MetricsScraper:
    """Scrapes `/metrics` (vLLM, SGLang, FreeToken, tokdrift names), read by the scrape reader diag uses
    (logformats.prometheus): SNAPSHOT_FIGURES for every snapshot, and one steps row per scrape after the
    first where the steps come from it (no --engine-log). Each scrape is also appended to
    metrics.prom, a scrape series `diag` reads on its own."""

    def __init__(self, target: Target, save_to: Path) -> None:
        self._once = Once()
        self.target = target
        self.save_to = Path(save_to)
        self._prev: str | None = None

    async def sample(self, as_steps: bool) -> tuple[list[StepRow], dict[str, Any]]:
        try:
            response = await self.target.http.get(
                self.target.url + "/metrics", headers=self.target.headers, timeout=5.0
            )
            response.raise_for_status()
        except httpx.HTTPError as exc:
            self._once("metrics", "%s/metrics: %s; not scraped", self.target.url, exc)
            return [], {}
        block = f"# scrape_time: {time.time():.3f}\n{_keep_engine_samples(response.text)}"
        with open(self.save_to, "a", encoding="utf-8") as f:
            f.write(block)
        prev, self._prev = self._prev, block
        rows, restarted = _scrape_rows(block if prev is None else prev + block)
        if not rows:
            return [], {}
        row = rows[-1]
        plain = cast(dict[str, Any], row)
        figures = {name: plain[name] for name in SNAPSHOT_FIGURES if name in plain}
        if prev is None or not as_steps or len(rows) < 2:
            return [], figures
        if restarted:
            target_restarted(self.target, row["t"], "metrics counters went down")
        row["engine_life"] = self.target.life
        row["engine_age_s"] = self.target.age(row["t"])
        return [row], figures


def _keep_engine_samples(text: str) -> str:
    """The samples diag reads: engine-prefixed names and the process start time, without histogram
    buckets or comments. A vLLM /metrics page is ~100 KB, mostly buckets; every 2 s for 12 hours
    that would be 2 GB."""
    keep = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.endswith("_bucket") or name.endswith("_created"):
            continue
        if name.startswith(PREFIXES) or name == "process_start_time_seconds":
            keep.append(line)
    return "".join(line + "\n" for line in keep)


def _scrape_rows(text: str) -> tuple[list[StepRow], bool]:
    """The scrapes in `text` as steps rows (the first has no window: its rates are empty), and
    whether a counter went down in them (the engine restarted)."""
    try:
        steps, events, _ = parse_scrapes(Text(text, "/metrics"))
    except LogFormatError:
        return [], False
    rows = [_frame_row(step) for _, step in steps.iterrows()]
    return rows, not events.empty and bool((events["kind"] == "engine_start").any())


RESTART_SLACK_S = 10.0  # a start read from relative stamps this close to the known one is that one


class LogTailer:
    """Follows an external engine's log: new lines are copied into the run's engine.log and parsed
    (logformats) into steps rows. Starts at the end of the file as it is now.

    A row's time comes from the log's own clock. Where the lines carry a date (`wall`), it is the
    machine's local time. llama-server's `--log-timestamps` stamps are the time since its process
    started (`relative`): a row is then at the engine's start plus its stamp, and a stamp below the
    last one read means a new process. Where nothing is stamped (`busy`), a row is at the time its
    line was read (within one sample interval of when it was printed)."""

    def __init__(self, target: Target, path: Path, copy_to: Path) -> None:
        self._once = Once()
        self.target = target
        self.path = Path(path)
        self.copy_to = Path(copy_to)
        self.offset = self.path.stat().st_size if self.path.exists() else 0
        self._partial = b""
        self._last_stamp: float | None = None  # the last relative stamp read (engine age, s)
        self._held: dict[int, float] | None = None  # llama.cpp: what each slot held at the last chunk's end
        self._figures: dict[str, float] = {}  # the latest of each figure the log stated since the last take

    def sample(self) -> list[StepRow]:
        try:
            size = self.path.stat().st_size
        except OSError as exc:
            self._once("log", "--engine-log %s: %s; not tailed", self.path, exc)
            return []
        if size < self.offset:  # rotated or truncated (llama-server's --log-file on a restart): start over
            self.offset, self._partial = 0, b""
        if size == self.offset:
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = self._partial + f.read()
            self.offset = f.tell()
        cut = data.rfind(b"\n") + 1
        chunk, self._partial = data[:cut], data[cut:]
        if not chunk:
            return []
        with open(self.copy_to, "ab") as f:
            f.write(chunk)
        return self._parse(chunk, read_at=time.time())

    def _parse(self, chunk: bytes, read_at: float) -> list[StepRow]:
        import datetime as dt

        try:
            parsed = parse_log(
                Text(chunk, str(self.path)), date=dt.date.today(), year=dt.date.today().year, held=self._held
            )
        except LogFormatError:
            return []
        self._held = parsed.held
        if parsed.snapshots is not None and not parsed.snapshots.empty:
            stated = parsed.snapshots.drop(columns=list(FIGURE_META)).ffill()
            self._figures.update({k: float(v) for k, v in stated.iloc[-1].items() if v == v})  # NaN: not said
        clock = parsed.info.clock
        if clock == "relative":
            self._follow_relative(parsed.steps)
        else:
            starts = parsed.events[parsed.events["kind"] == "engine_start"] if not parsed.events.empty else None
            if starts is not None and len(starts) and clock == "wall":
                target_restarted(
                    target=self.target, t=_local_unix(starts["t"].iloc[0]), why="a startup line in the log"
                )
        self._forward_events(parsed.events, clock, read_at)
        rows = []
        for _, step in parsed.steps.iterrows():
            row = _frame_row(step, local_clock=True)
            if clock == "relative" and self.target.started_at is not None:
                row["t"] = self.target.started_at + float(step["engine_age_s"])
            elif clock != "wall":
                row["t"] = read_at
            row["engine_life"] = self.target.life
            row["engine_age_s"] = self.target.age(row["t"])
            rows.append(row)
        return rows

    def take_figures(self) -> dict[str, float]:
        """The figures the log stated since the last call, each its latest value (a snapshot's part)."""
        figures, self._figures = self._figures, {}
        return figures

    def _forward_events(self, events: pd.DataFrame, clock: str, read_at: float) -> None:
        """What the log says beside its steps that the analysis reads (rundir.schema.LOG_EVENT_KINDS:
        the KV cache without room for a batch) goes to the run's events, on the rows' clock."""
        from rundir.schema import LOG_EVENT_KINDS

        if events.empty:
            return
        for _, event in events[events["kind"].isin(LOG_EVENT_KINDS)].iterrows():
            if clock == "relative" and self.target.started_at is not None:
                t = self.target.started_at + float(event["engine_age_s"])
            elif clock == "wall":
                t = _local_unix(event["t"])
            else:
                t = read_at
            fields = {
                k: event[k] for k in ("limit", "detail") if k in event and event[k] is not None and event[k] == event[k]
            }  # NaN: not said
            self.target.on_event(str(event["kind"]), t=t, engine_life=self.target.life, **fields)

    def _follow_relative(self, steps: pd.DataFrame) -> None:
        """A chunk's stamps below the last one read: the engine is a new process, started that long
        before now."""
        if steps.empty:
            return
        ages = steps["engine_age_s"].to_numpy(dtype=float)
        lives = steps["engine_life"].to_numpy()
        went_back = self._last_stamp is not None and ages[0] < self._last_stamp - 1.0
        if went_back or lives.max() > lives.min():
            new_life = lives == lives.max() if lives.max() > lives.min() else np.ones(len(ages), dtype=bool)
            started = time.time() - float(ages[new_life].max())  # late by up to the time since it was printed
            known = self.target.started_at
            if known is None or started > known + RESTART_SLACK_S:  # not the start the soak itself saw
                target_restarted(self.target, started, "llama.cpp's stamps went back")
        self._last_stamp = float(ages[-1])


def target_restarted(target: Target, t: float, why: str) -> None:
    """An external engine restarted on its own (we learnt it from its metrics or log). Not when the
    process listening on its port is the one the soak knows already: vLLM's first log line comes
    seconds after its process started (its imports), so the start the soak made or saw would be
    counted twice, one life split in two."""
    if target.started_at is not None and t <= target.started_at + 1.0:
        return
    listening = pid_listening_on(target.url) if target.pid is not None else None
    if listening is not None and listening == target.pid:
        return
    if listening is not None:
        target.pid = listening
    target.announce_start(t, detail=why)


def _frame_row(step: pd.Series, local_clock: bool = False) -> StepRow:
    from rundir.schema import STEP_COLUMNS

    t = step["t"]
    unix = _local_unix(t) if local_clock else t.value / 1e9
    row: dict[str, Any] = {"t": unix}
    for name in STEP_COLUMNS:
        if name in ("t", "engine_life", "engine_age_s") or name not in step.index:
            continue
        value = step[name]
        if value is None or (isinstance(value, float) and value != value):
            continue
        row[name] = value.item() if hasattr(value, "item") else value
    return cast(StepRow, row)  # STEP_COLUMNS' names


def _local_unix(t: pd.Timestamp) -> float:
    """A naive timestamp in this machine's local clock (how engines stamp their logs) as Unix seconds."""
    unix: float = time.mktime(t.to_pydatetime().timetuple()) + t.microsecond / 1e6
    return unix
