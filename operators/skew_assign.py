"""Neo-Join's partition assignment: radix partitions → ranks from a global histogram, balance first, then locality.

``held[s, p]`` is how many rows sender ``s`` holds of partition ``p`` (every rank is a sender and a
receiver). Assigning ``p`` to rank ``r`` makes ``r`` process all ``total[p]`` rows of it, of which
``held[r, p]`` do not cross the network. :func:`assign` is a deterministic greedy (LPT: partitions by
descending size, each to the least-loaded rank) that trades a little balance for locality: any rank whose
load after taking ``p`` stays within ``max(least load + size, (1 + slack) · mean)`` may take it, and of
those the rank holding most of ``p`` does. Every rank computes the same assignment from the same
histogram (ties break on rank number), so no coordinator is needed.

A join's two sides are exchanged separately, and each exchange lasts as long as its slowest receiver: with
``members`` (each side's own loads), a rank that would push a side past ``(1 + MEMBER_SLACK)`` times that
side's mean is passed over when another rank within the total's limit would not (vector bin packing by
preference, the total's balance first).

:func:`optimal` is the brute-force optimum (smallest maximum load, then fewest rows moved) for the tests
on small cases.
"""

from __future__ import annotations

import itertools

import numpy as np

#: a rank may exceed the mean load by this share to keep a partition where its rows already are
SLACK = 0.05
#: with per-member loads: the share by which one member's load on a rank may exceed that member's mean
MEMBER_SLACK = 0.2


def assign(
    held: np.ndarray,
    base: np.ndarray | None = None,
    slack: float = SLACK,
    *,
    members: np.ndarray | None = None,
    member_base: np.ndarray | None = None,
) -> np.ndarray:
    """Rank of each partition (int32 array of length P) for ``held`` (W * P rows per sender and partition).

    ``base[r]`` is load rank ``r`` has already (e.g. heavy-hitter rows it keeps); it counts toward balance.
    ``members`` (M * W * P, summing to ``held``) and ``member_base`` (M * W): each member's own loads, kept
    within ``MEMBER_SLACK`` of their means where the total's limit leaves a choice (see module doc).
    """
    held = np.asarray(held, dtype=np.int64)
    world, parts = held.shape
    load = np.zeros(world, dtype=np.float64) if base is None else np.asarray(base, dtype=np.float64).copy()
    total = held.sum(axis=0)
    target = (float(total.sum()) + float(load.sum())) / max(world, 1)
    if members is not None and len(members) > 1:
        msize = np.asarray(members, dtype=np.float64).sum(axis=1)  # (M, P)
        mload = (
            np.zeros((len(members), world)) if member_base is None else np.asarray(member_base, np.float64)
        )
        mload = mload.copy()
        mlimit = (msize.sum(axis=1) + mload.sum(axis=1)) / max(world, 1) * (1.0 + MEMBER_SLACK)
    else:
        msize = None
    out = np.empty(parts, dtype=np.int32)
    # by descending size, ties by partition number: deterministic
    order = sorted(range(parts), key=lambda p: (-int(total[p]), p))
    for p in order:
        size = float(total[p])
        if size == 0:
            out[p] = p % world
            continue
        limit = max(float(load.min()) + size, target * (1.0 + slack))
        ranks = [r for r in range(world) if load[r] + size <= limit + 1e-9]
        if msize is not None:  # prefer ranks that keep every member within its own limit
            step = msize[:, p]
            cap = np.maximum(mload.min(axis=1) + step, mlimit)
            fit = [r for r in ranks if bool(np.all(mload[:, r] + step <= cap + 1e-9))]
            ranks = fit or ranks
        best = -1
        for r in ranks:
            if best < 0 or (held[r, p], -load[r]) > (held[best, p], -load[best]):
                best = r
        out[p] = best
        load[best] += size
        if msize is not None:
            mload[:, best] += msize[:, p]
    return out


def loads(held: np.ndarray, assignment: np.ndarray, base: np.ndarray | None = None) -> np.ndarray:
    """Rows each rank processes under ``assignment``."""
    held = np.asarray(held, dtype=np.int64)
    world = held.shape[0]
    out = np.zeros(world, dtype=np.int64) if base is None else np.asarray(base, dtype=np.int64).copy()
    np.add.at(out, assignment, held.sum(axis=0))
    return out


def moved(held: np.ndarray, assignment: np.ndarray) -> int:
    """Rows that cross the network under ``assignment`` (all rows minus those already on their rank)."""
    held = np.asarray(held, dtype=np.int64)
    local = held[assignment, np.arange(held.shape[1])].sum()
    return int(held.sum() - local)


def plain_hash(world: int, parts: int) -> np.ndarray:
    """The assignment plain hashing amounts to: partition p → rank p mod W."""
    return np.arange(parts, dtype=np.int32) % world


def optimal(held: np.ndarray, base: np.ndarray | None = None) -> np.ndarray:
    """Brute force over all W^P assignments: least maximum load, then fewest rows moved (small cases only)."""
    held = np.asarray(held, dtype=np.int64)
    world, parts = held.shape
    best: tuple[int, int] | None = None
    best_a = np.zeros(parts, dtype=np.int32)
    for combo in itertools.product(range(world), repeat=parts):
        a = np.array(combo, dtype=np.int32)
        key = (int(loads(held, a, base).max()), moved(held, a))
        if best is None or key < best:
            best, best_a = key, a
    return best_a
