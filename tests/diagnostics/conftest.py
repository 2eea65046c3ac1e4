from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def excerpt() -> Path:
    """The seed excerpt (a real report, time-only prefix), as shipped in examples/."""
    return ROOT / "examples" / "freetoken-excerpt.log"
