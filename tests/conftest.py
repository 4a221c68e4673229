import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import gc

import pytest


@pytest.fixture(autouse=True)
def _no_garbage_from_earlier_tests():
    """Each test starts without an earlier test's garbage: a task pin or a block that an
    earlier test left in a reference cycle would otherwise end whenever the collector runs,
    in the middle of this test, and turn the hot path off until the next lookup lets it
    back in (which a test counting lookups would see as a lookup of its own)."""
    gc.collect()
    from specializer import world

    world.refresh()
    yield
