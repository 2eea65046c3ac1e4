"""The driver gives back memory it freed (soak/heap.py): pages malloc kept after a free leave the RSS."""

import sys

import numpy as np
import psutil
import pytest

from soak.heap import give_back_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_heap_pages_leave_the_rss():
    # 100 KB blocks stay in malloc's heap (below its mmap threshold); freeing every other one leaves
    # holes that no trim of the heap's top can return: only malloc_trim's page-wise release can.
    blocks = [np.ones(100 * 1024 // 8) for _ in range(2000)]  # ~200 MB, touched
    del blocks[::2]
    rss = psutil.Process().memory_info().rss
    give_back_freed_memory()
    after = psutil.Process().memory_info().rss
    assert rss - after > 50 * 2**20, (rss >> 20, after >> 20)
    assert all(b[0] == 1.0 for b in blocks)  # what is still held is untouched


def _arrow_pool_after(code: str, env: dict[str, str] | None = None) -> list[str]:
    """What `code` prints, then the backend of pyarrow's default pool, in a fresh interpreter."""
    import os
    import subprocess

    from soak.heap import ARROW_POOL_VARIABLE

    script = f"{code}\nimport pyarrow as pa\nprint(pa.default_memory_pool().backend_name)"
    base = {k: v for k, v in os.environ.items() if k != ARROW_POOL_VARIABLE}
    done = subprocess.run([sys.executable, "-c", script], env={**base, **(env or {})}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_driver_runs_pyarrow_on_the_system_allocator():
    use = "from soak.heap import use_system_allocator_for_arrow as use\nprint(use())"
    assert _arrow_pool_after(use) == ["True", "system"]
    assert _arrow_pool_after("") != ["system"]  # pyarrow's own default (mimalloc or jemalloc) without it
    # too late once pyarrow is imported, and said so; a user's own choice is kept
    late = _arrow_pool_after("import pyarrow\n" + use)
    assert late[0] == "False" and late[1] != "system"
    assert _arrow_pool_after(use, {"ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}) == ["True", "jemalloc"]


def test_the_soak_command_chooses_it_before_pyarrow_loads():
    entry = "import tokdrift.cli.soak as cli\nimport sys\nassert 'pyarrow' not in sys.modules\n"
    entry += "cli.run_app = lambda app: None\ncli.main()"
    assert _arrow_pool_after(entry) == ["system"]
