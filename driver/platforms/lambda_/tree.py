"""The Lambda platform's invocation tree, which the driver and the workers both follow.

Two levels, Lambada style: the driver invokes ⌈W/f⌉ first-level workers, one per block of ``f``
consecutive ranks; each first-level worker invokes the other ranks of its block (one invocation each)
before it runs its own rank, the block's first. A worker whose range holds more than ``f`` ranks (a
re-invocation never does) splits the rest into at most ``f`` blocks the same way, so the depth is
⌈log_f W⌉ in general and 2 for the default ``f = ⌈√W⌉``.
"""

from __future__ import annotations

import math


def default_fanout(world_size: int) -> int:
    """⌈√W⌉ (at least 2): about √W first-level invocations of about √W ranks each."""
    return max(2, math.isqrt(max(world_size, 1) - 1) + 1)


def blocks(lo: int, hi: int, fanout: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut into at most ``fanout`` consecutive blocks of near-equal size."""
    n = hi - lo
    if n <= 0:
        return []
    count = min(fanout, n)
    size = math.ceil(n / count)
    return [(a, min(a + size, hi)) for a in range(lo, hi, size)]


def first_level(world_size: int, fanout: int) -> list[tuple[int, int]]:
    """The driver's invocations: blocks of ``fanout`` ranks."""
    return [(a, min(a + fanout, world_size)) for a in range(0, world_size, fanout)]


def children(lo: int, hi: int, fanout: int) -> list[tuple[int, int]]:
    """The invocations a worker with range ``[lo, hi)`` makes before running rank ``lo``."""
    return blocks(lo + 1, hi, fanout)


def tree_depth(world_size: int, fanout: int) -> int:
    """Levels of the invocation tree (the driver's invocations are level 1)."""

    def depth(lo: int, hi: int) -> int:
        kids = children(lo, hi, fanout)
        return 1 + max((depth(a, b) for a, b in kids), default=0)

    return max((depth(a, b) for a, b in first_level(world_size, fanout)), default=0)


def first_ranges(world_size: int, fanout: int) -> dict[int, tuple[int, int]]:
    """Each rank's range in the tree (the event of its first attempt, which runs rank ``lo``)."""
    out: dict[int, tuple[int, int]] = {}

    def visit(lo: int, hi: int) -> None:
        out[lo] = (lo, hi)
        for a, b in children(lo, hi, fanout):
            visit(a, b)

    for a, b in first_level(world_size, fanout):
        visit(a, b)
    return out
