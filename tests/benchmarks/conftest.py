"""The soak tests' fake OpenAI-compatible server, for the benchmarks' live halves."""

from tests.soak.conftest import fake_server  # noqa: F401  (a fixture: pytest finds it here)
