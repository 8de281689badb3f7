import gc
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@pytest.fixture()
def no_cyclic_gc() -> Iterator[None]:
    """Python's cyclic collector off for the test: what it would free late (a reference
    cycle through an error and the buffer its frames hold) then stays, for the test to
    see; what plain reference counting frees is gone at once."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
