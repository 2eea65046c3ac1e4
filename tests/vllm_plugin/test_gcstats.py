"""The GC figures entry point: what its `gc.callbacks` hook counts (a stand-in for vLLM's Request
with and without its block-hasher reference cycle), the lines it appends, and its fork handling."""

import gc
import json
import os
import subprocess
import sys
import textwrap
import time
from functools import partial

from vllm_plugin import gcstats


def block_hasher(request):
    return []


class CyclicRequest:
    """vLLM 0.15.1's Request (vllm/v1/request.py:161-164): the hasher bound to the request."""

    def __init__(self):
        self.block_hashes = []
        self.get_hash_new_full_blocks = partial(block_hasher, self)


class PlainRequest:
    """From 0.16.0: the hasher kept unbound, the request handed to it at each call."""

    def __init__(self):
        self.block_hashes = []
        self._block_hasher = block_hasher


def collected_after(make, n):
    """Objects the cycle collector freed once `n` of `make()` were made and dropped."""
    counts = gcstats.GcCounts()
    gc.collect()
    gc.callbacks.append(counts)
    try:
        made = [make() for _ in range(n)]
        del made
        gc.collect()
    finally:
        gc.callbacks.remove(counts)
    return counts


def test_the_collected_count_tells_a_request_cycle_from_none():
    cyclic = collected_after(CyclicRequest, 500)
    plain = collected_after(PlainRequest, 500)
    # Each cyclic request leaves at least itself and its partial to the cycle collector; a plain one
    # is freed by its reference count the moment it is dropped.
    assert cyclic.num_collected >= 1000
    assert plain.num_collected < 50
    assert cyclic.num_collections[2] == plain.num_collections[2] == 1  # the explicit full collection
    assert cyclic.full_pause_s > 0 and cyclic.pause_s >= cyclic.full_pause_s


def test_the_figures_are_the_built_in_engines_names():
    counts = collected_after(CyclicRequest, 10)
    figures = counts.figures()
    assert set(figures) == {
        "gc_pause_s_total",
        "gc_full_pause_s_total",
        "gc_gen2_collections",
        "gc_collections_total",
        "gc_collected_total",
        "gc_frozen_objects",
    }
    assert figures["gc_gen2_collections"] == 1 and figures["gc_collected_total"] >= 20
    assert figures["gc_frozen_objects"] == gc.get_freeze_count()


def test_the_reporter_appends_a_line_a_period(tmp_path, monkeypatch):
    monkeypatch.delenv("TOKDRIFT_VLLM_ROOT", raising=False)
    path = tmp_path / "steps.jsonl"
    counts = gcstats.GcCounts()
    counts.pause_s, counts.num_collected = 0.25, 7
    reporter = gcstats.Reporter(counts, str(path), every_s=0.05)
    reporter.start()
    try:
        while not path.exists() or len(path.read_text().splitlines()) < 2:
            time.sleep(0.01)
    finally:
        reporter.stop()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    first = lines[0]
    assert first["kind"] == "figures" and first["pid"] == first["root"] == os.getpid()
    assert first["process"] == "MainProcess" and first["gc_pause_s_total"] == 0.25
    assert first["gc_collected_total"] == 7


def test_a_record_it_cannot_append_to_is_said_and_does_not_stop_the_engine(tmp_path, caplog):
    reporter = gcstats.Reporter(gcstats.GcCounts(), str(tmp_path / "missing" / "steps.jsonl"))
    with caplog.at_level("WARNING", logger="vllm.tokdrift_gc"):
        reporter.report()
    assert "cannot be appended to" in caplog.text and "missing/steps.jsonl" in caplog.text


# One vLLM in a subprocess: the first process registers (as the API server does while it reads its
# arguments), makes cycles, then forks a child (as vLLM's engine core may be started) that makes fewer.
VLLM = textwrap.dedent(
    """
    import gc, os, sys, time
    from functools import partial
    from vllm_plugin import gcstats
    gcstats.REPORT_S = 0.05
    gcstats.register()
    gcstats.register()  # vLLM loads plugins once a process; a second call must not add a second hook
    assert sum(isinstance(c, gcstats.GcCounts) for c in gc.callbacks) == 1

    class Request:
        def __init__(self):
            self.hasher = partial(len, self)

    def serve(n):
        made = [Request() for _ in range(n)]
        del made
        gc.collect()

    serve(2000)
    time.sleep(0.3)
    child = os.fork()
    if child == 0:
        serve(10)
        time.sleep(0.3)
        os._exit(0)
    os.waitpid(child, 0)
    print(child)
    """
)


def test_each_process_states_its_own_figures_and_its_vllms_root(tmp_path):
    path = tmp_path / "steps.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "TOKDRIFT_VLLM_ROOT"}
    env["TOKDRIFT_VLLM_STEPS"] = str(path)
    done = subprocess.run([sys.executable, "-c", VLLM], env=env, capture_output=True, text=True, check=True)
    child = int(done.stdout.strip())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    parent = {line["pid"] for line in lines} - {child}
    assert len(parent) == 1 and child in {line["pid"] for line in lines}
    (root,) = parent
    assert {line["root"] for line in lines} == {root}  # the child inherited its vLLM's root
    first = max((line for line in lines if line["pid"] == root), key=lambda line: line["t"])
    last = max((line for line in lines if line["pid"] == child), key=lambda line: line["t"])
    # The parent's 2,000 cycles are its own; the child counts from the fork: its 10, not its parent's too.
    assert first["gc_collected_total"] >= 4000
    assert 20 <= last["gc_collected_total"] < 1000


def test_unset_the_entry_point_does_nothing():
    code = (
        "import gc, os, sys, threading; os.environ.pop('TOKDRIFT_VLLM_STEPS', None);"
        "from vllm_plugin import gcstats; before = list(gc.callbacks); gcstats.register();"
        "print(gc.callbacks == before, threading.active_count(), 'TOKDRIFT_VLLM_ROOT' in os.environ,"
        "sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'torch', 'pandas', 'numpy')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "True 1 False []"
