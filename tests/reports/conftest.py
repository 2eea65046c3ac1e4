"""Shared inputs: the seed excerpt, a synthetic log with a known onset, and a soak run directory
holding planted secrets, prompt text, home paths, profiles and a `<script>` from its inputs."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from logsim.synthetic import Scenario, write
from reports.inputs import load
from tests.diagnostics.rundirs import T0, make_run_dir

ROOT = Path(__file__).resolve().parents[2]
SEED_DATE = dt.date(2026, 9, 23)
SCRIPT = "<script>alert('tokdrift')</script>"
# Planted in the run directory; none may survive redaction.
API_KEY = "sk-PLANTEDkey0123456789abcdefXYZ"
BEARER = "PlantedBearer0123456789token"
PROMPT = "PLANTED PROMPT TEXT please refactor the billing module"
HOME = "/home/alice"
ROOT_PATH = "/root/.cache/huggingface"
PLANTED = (API_KEY, BEARER, PROMPT, HOME, ROOT_PATH)


@pytest.fixture(scope="session")
def age_log(tmp_path_factory) -> Path:
    """A FreeToken log: healthy for an hour, 4x slower after a big append, restarted at 1.6 h;
    a line holding a <script> tag sits right after the trigger."""
    path = write(Scenario(hours=2, onset_h=1.0, restart_h=1.6), "freetoken", tmp_path_factory.mktemp("log") / "age.log")
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "#new-token: 5792" in line)
    stamp = lines[at][:21]
    lines.insert(at + 1, f"{stamp} WARNING  odd client header {SCRIPT}\n")
    path.write_text("".join(lines))
    return path


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory) -> Path:
    root = make_run_dir(tmp_path_factory.mktemp("runs") / "run-a", minutes=40, fault_at_min=20, restart_at_min=32)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["command"] = ["soak", "run", "--api-key", API_KEY, "--trace", f"{HOME}/traces/agent.jsonl"]
    manifest["configs"] = {
        "soak": {"probe": {"prompt": PROMPT, "max_tokens": 128}},
        "engine": {"model": f"{ROOT_PATH}/hub/qwen3-next", "headers": {"Authorization": f"Bearer {BEARER}"}},
    }
    manifest["host"] = {
        "cpu": "AMD EPYC 9654",
        "num_cpus": 192,
        "ram_bytes": 1 << 40,
        "gpu": "NVIDIA H200",
        "os": "Linux 6.8",
        "python": "3.12.3",
        "versions": {"tokdrift": "0.1.0", "torch": "2.13.0"},
    }
    manifest["trace"] = {"path": f"{HOME}/traces/agent.jsonl", "sha256": "ab" * 32, "num_calls": 412}
    (root / "manifest.json").write_text(json.dumps(manifest))
    events = [line for line in (root / "events.jsonl").read_text().splitlines() if line.endswith("}")]
    events += [
        json.dumps(e)
        for e in (
            {
                "t": T0 + 25 * 60,
                "kind": "dropped_request",
                "request_id": "r9",
                "input_tokens": 300000,
                "limit": 262144,
                "prompt": PROMPT,
            },
            {"t": T0 + 26 * 60, "kind": "preemption", "count": 2, "note": SCRIPT},
            {"t": T0 + 27 * 60, "kind": "engine_exit", "exit_code": 0, "log_tail": f"Authorization: Bearer {BEARER}"},
        )
    ]
    (root / "events.jsonl").write_text("\n".join(events) + "\n")
    (root / "engine.log").write_text(
        "[2026-09-21|14:13:20] INFO     tokdrift engine 0.1.0 starting\n"
        f"[2026-09-21|14:13:21] INFO     Loading weights from {ROOT_PATH}/hub/qwen3-next\n"
        f"[2026-09-21|14:14:02] INFO     Received request r1: prompt: '{PROMPT}', api_key={API_KEY}\n"
        f"[2026-09-21|14:14:03] INFO     Authorization: Bearer {BEARER}\n"
        "[2026-09-21|14:14:05] INFO     Decode batch, #running-req: 2, #token: 30000, gen throughput (token/s): 101.00\n"
        "[2026-09-21|14:33:10] INFO     Decode batch, #running-req: 2, #token: 31000, gen throughput (token/s): 100.00\n"
        "[2026-09-21|14:33:21] INFO     Decode batch, #running-req: 2, #token: 31100, gen throughput (token/s): 34.00\n"
    )
    profiles = root / "profiles"
    profiles.mkdir(exist_ok=True)
    for label, hot in (("healthy", 1), ("degraded", 2)):
        (profiles / f"20260921T1430{'00' if label == 'healthy' else '59'}-{label}.speedscope.json").write_text(
            json.dumps(speedscope(hot))
        )
    return root


def speedscope(hot: int) -> dict:
    """py-spy's shape: shared frames, one sampled profile per thread. Frame `hot` takes 3/4 of the samples."""
    frames = [
        {"name": "run_loop", "file": f"{HOME}/.venv/lib/python3.12/site-packages/engine/runtime/engine.py", "line": 10},
        {"name": "forward", "file": f"{HOME}/.venv/lib/python3.12/site-packages/engine/model/qwen.py", "line": 88},
        {
            "name": "find_free_run",
            "file": f"{HOME}/.venv/lib/python3.12/site-packages/engine/memory/allocator.py",
            "line": 141,
        },
    ]
    samples = [[0, hot]] * 3 + [[0, 3 - hot]]
    return {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": frames},
        "profiles": [
            {
                "type": "sampled",
                "name": "MainThread",
                "unit": "seconds",
                "startValue": 0,
                "endValue": 4,
                "samples": samples,
                "weights": [0.01] * 4,
            }
        ],
    }


@pytest.fixture(scope="session")
def seed_inputs(excerpt):
    return load(excerpt, date=SEED_DATE)


@pytest.fixture(scope="session")
def log_inputs(age_log):
    return load(age_log)


@pytest.fixture(scope="session")
def run_inputs(run_dir):
    return load(run_dir)
