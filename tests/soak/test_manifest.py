"""The manifest's one owner (soak.manifest.ManifestBook): what a run's manifest.json says as it goes."""

import json

from rundir.manifest import Decided, RunManifest
from rundir.reader import read_manifest
from rundir.writer import RunStore
from soak.manifest import ManifestBook


class Control:
    """A stand-in for soak.control.ControlEngine: only its manifest entry."""

    def __init__(self) -> None:
        self.enabled = True

    def to_json(self):
        return {"kind": "url", "enabled": self.enabled}


def _book(tmp_path, **fields):
    store = RunStore(tmp_path / "run")
    return store, ManifestBook(store, RunManifest(run_id="run", status="running", started_at="t0", **fields))


def test_a_verdict_is_decided_once_in_the_manifest_and_the_events(tmp_path):
    store, book = _book(tmp_path)
    assert book.decide("engine_age_degradation", 7, 61.5, "decided: engine age", level=0.99)
    assert not book.decide("no_degradation", 9, 80.0, "decided: healthy")
    book.save()
    store.close()
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["decided"] == {
        "verdict": "engine_age_degradation",
        "cycle": 7,
        "elapsed_s": 61.5,
        "line": "decided: engine age",
        "level": 0.99,
    }
    assert read_manifest(tmp_path / "run").decided == Decided(
        "engine_age_degradation", 7, 61.5, "decided: engine age", {"level": 0.99}
    )
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["verdict"]) for e in events] == [("decided", "engine_age_degradation")]


def test_a_resumed_run_already_decided_is_not_decided_again(tmp_path):
    _, book = _book(tmp_path, decided=Decided("no_degradation", 4, 100.0, "decided: healthy"), elapsed_s=120.0)
    assert book.elapsed_before == 120.0  # the earlier segments' serving time, as read
    assert not book.decide("engine_age_degradation", 3, 130.0, "decided: engine age")


def test_every_write_has_the_running_figures_and_the_controls_state_now(tmp_path):
    store, book = _book(tmp_path)
    control = Control()
    book.follow_control(control)
    book.write(12.5, 40)
    assert read_manifest(tmp_path / "run").control == {"kind": "url", "enabled": True}
    control.enabled = False
    book.ended("completed", "duration", materialized={"calls": 40}, steps_missed=None)
    book.write(13.0, 41)
    store.close()
    m = read_manifest(tmp_path / "run")
    assert (m.status, m.stop_reason, m.elapsed_s, m.num_requests) == ("completed", "duration", 13.0, 41)
    assert m.control == {"kind": "url", "enabled": False} and m.materialized == {"calls": 40}
    assert m.ended_at is not None and m.steps_missed is None


def test_a_look_before_the_replay_is_not_a_decided_verdict(tmp_path):
    """The start and baseline cycles judge engines that served nothing yet: a decided look there is
    not the soak's (with --until-decided it was recorded, never ended the replay, and kept the run
    going to its full length); the first decided look in the replay is."""
    from soak.config import SoakConfig
    from soak.live_view import SoakPhase
    from soak.run import Soak
    from tests.soak.conftest import write_trace

    trace = write_trace(tmp_path / "trace.jsonl", sessions=1, turns=1)
    soak = Soak(SoakConfig(trace=str(trace), duration_s=60.0, target="http://x", until_decided=True), tmp_path / "x")
    store, soak.book = _book(tmp_path)
    for phase in (SoakPhase.START_PROBE, SoakPhase.BASELINE):
        soak.phase = phase
        soak.decided("no_degradation", 3, "decided: healthy")
        assert soak.manifest.decided is None and not soak._decided.is_set()
    soak.phase = SoakPhase.REPLAY
    soak.decided("no_degradation", 12, "decided: healthy")
    assert soak.manifest.decided is not None and soak.manifest.decided.cycle == 12 and soak._decided.is_set()
    store.close()
