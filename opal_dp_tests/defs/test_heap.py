"""The publish step's frozen heap: earlier objects are left out of collections during the block, and collectable
again after it (else every weekly run in one process would keep its predecessors' garbage)."""

import gc
import weakref

from opal_dp.defs.shared.heap import earlier_objects_frozen


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cycle collector frees it


def _garbage_cycle() -> weakref.ref:
    node = _Node()
    return weakref.ref(node)


def test_earlier_objects_are_skipped_inside_and_collected_after() -> None:
    """Kills a block that does not freeze (the earlier cycle is collected inside) and one that never unfreezes
    (it is still there after the block)."""
    gc.collect()
    earlier = _garbage_cycle()
    with earlier_objects_frozen():
        assert gc.get_freeze_count() > 0
        gc.collect()
        assert earlier() is not None, "an object from before the step was scanned inside it"
        inside = _garbage_cycle()
        gc.collect()
        assert inside() is None, "the step's own garbage must still be collected"
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert earlier() is None, "garbage from before the step must be collectable once it ends"


def test_a_block_inside_a_frozen_heap_leaves_it_frozen() -> None:
    """Someone else's freeze is theirs to undo: the block neither adds to it nor unfreezes it. (Frozen objects can
    still be freed by their reference counts, e.g. by another thread of the test process, so the count may drop a
    little; it never grows, and it never falls to 0.)"""
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with earlier_objects_frozen():
            _garbage_cycle()
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
