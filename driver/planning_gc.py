"""Python's cyclic garbage collector while a query is planned: its youngest generation collected every
:data:`PLANNING_THRESHOLD` allocations, not CPython's default 700.

Planning allocates sqlglot trees by the hundred thousand, and each node points at its parent: cycles that
only the collector frees. At the default threshold the collector runs every few hundred nodes, finds most of
them still in use, and moves the live trees into the older generations, whose full collections then take
30-170 ms each and land on whichever query is planned then. TPC-DS SF1 W=2, the 99 queries each planned
once: 0.8-1.1 s of collection in all, 8 full collections, the longest 90-170 ms; at 10,000 while planning:
0.35-0.46 s, one full collection, the longest pause 0.65x (``benchmarks/planning_gc.py`` measures it).

The threshold is raised only while a plan is made (plannings on several threads share the raise, counted)
and only upwards: after the last one the process's own setting is restored, unless someone changed it
meanwhile. With the collector disabled nothing changes.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: the youngest generation's threshold while planning (allocations less deallocations of tracked objects)
PLANNING_THRESHOLD = 10_000

_lock = threading.Lock()
_planning = 0
_restore: tuple[int, ...] | None = None  # the process's thresholds, while raised


@contextmanager
def planning_gc() -> Iterator[None]:
    """Plan inside this block: the collector's youngest threshold is at least :data:`PLANNING_THRESHOLD`."""
    global _planning, _restore
    with _lock:
        if _planning == 0:
            own = gc.get_threshold()
            if own[0] and own[0] < PLANNING_THRESHOLD:  # 0: the process turned collection off that way
                gc.set_threshold(PLANNING_THRESHOLD, *own[1:])
                _restore = own
        _planning += 1
    try:
        yield
    finally:
        with _lock:
            _planning -= 1
            if _planning == 0 and _restore is not None:
                if gc.get_threshold() == (PLANNING_THRESHOLD, *_restore[1:]):  # not changed meanwhile
                    gc.set_threshold(*_restore)
                _restore = None
