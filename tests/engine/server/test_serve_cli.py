"""`soak serve` as a user runs it: a process that serves, writes the engine log, and stops on Ctrl-C."""

import os
import signal
import socket
import subprocess
import sys

import httpx

from engine.server.main import bind
from tests.engine.server.conftest import wait_until

SOAK = [sys.executable, "-c", "from tokdrift.cli.soak import main; main()"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_soak_serve_serves_logs_and_stops(tiny_checkpoint, tmp_path):
    port, log = free_port(), tmp_path / "logs" / "engine.log"
    proc = subprocess.Popen(
        SOAK
        + [
            "serve",
            "--model",
            tiny_checkpoint,
            "--port",
            str(port),
            "--kv-tokens",
            "1024",
            "--decode-log-interval",
            "5",
            "--served-model-name",
            "tiny",
            "--log-file",
            str(log),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "TOKDRIFT_API_KEY"},
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def up():
            assert proc.poll() is None, proc.communicate()[1]
            try:
                return httpx.get(base + "/health", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(up, timeout=60, what="soak serve to answer /health")
        assert httpx.get(base + "/v1/models").json()["data"][0]["id"] == "tiny"
        r = httpx.post(
            base + "/v1/completions", json={"prompt": "hi", "max_tokens": 12, "ignore_eos": True}, timeout=30
        )
        assert r.json()["usage"]["completion_tokens"] == 12
        status = httpx.get(base + "/v1/cache/status").json()
        assert status["config"]["kv_tokens"] == 1024 and status["config"]["decode_log_interval"] == 5
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode in (0, 130, -signal.SIGINT), stderr  # uvicorn re-raises the Ctrl-C it caught
    assert "Traceback" not in stderr
    text = log.read_text()
    for line in ("Resolved config:", "Cache rebuilt: KV 1024 pages", "Prefill batch, #new-seq: 1", "Decode batch,"):
        assert line in text
    assert text.splitlines()[0].startswith("[") and "] INFO     " in text.splitlines()[0]
    assert "Decode batch," in stderr  # the log goes to the terminal as well


def test_port_in_use_is_one_line_error():
    sock = bind("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        proc = subprocess.run(SOAK + ["serve", "--port", str(port)], capture_output=True, text=True, timeout=60)
    finally:
        sock.close()
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "--port" in proc.stderr
