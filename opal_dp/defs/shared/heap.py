"""A step's objects collected without re-scanning the process's long-lived ones.

When the publish step's body starts, its process already holds about 400,000 objects tracked by the cycle
collector (the libraries, the definitions, the run's context). The step reads the whole history and builds many
objects of its own (ledger records, kept rows, page summaries); once enough of them survive, CPython runs a full
collection, which traverses all 400,000 again: 0.27 s in the publish step at half a year of history, none at
two weeks (weekly runs at scale 0.005). That cost grows with the history and lands on whichever step crosses
the threshold. Freezing what exists when the step starts (``gc.freeze``) leaves it out of those passes; the
step's own objects are collected as before, and everything is unfrozen when the step ends, so garbage from
before the step is collected afterwards. Performance only: no result depends on it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def earlier_objects_frozen() -> Iterator[None]:
    """Leave the objects that exist now out of the cycle collector's passes until the block ends (module
    docstring). Inside a block already frozen by someone else, it changes nothing."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
