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
    back in (which a test counting lookups would see as a lookup of its own).

    What survives the collection is then frozen (gc.freeze): the next test's collection
    walks only what was allocated since, not the whole heap of imported modules and earlier
    tests (a full collection per test was over half the quick run's time). Frozen objects
    are still freed when their count drops to zero; a test needs only its own garbage found."""
    gc.collect()
    gc.freeze()
    from specializer import world

    world.refresh()
    yield
