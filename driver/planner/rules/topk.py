"""LIMIT (with or without ORDER BY): on rank 0, after a local top-k (or local LIMIT) on every rank.

A sorted or limited result is a global fact, so it is computed on rank 0. With a
LIMIT, every rank first keeps only its ``limit + offset`` best (or first) rows,
so at most W * (limit + offset) rows move instead of the whole input. An ORDER BY without
LIMIT is :mod:`.sort`'s.
"""

from __future__ import annotations

from squall.driver.ir import nodes as L
from squall.driver.planner.core import SINGLE, Context, Dist

REQUIRED = True  # no other rule plans these nodes
NODES = (L.Limit,)


def plan(ctx: Context, node: L.Limit) -> tuple[L.Node, Dist]:
    inner = node.input
    if isinstance(inner, L.Sort):
        child, dist = ctx.build(inner.input)
        if dist.kind != "single" and ctx.world > 1:
            if node.limit is not None:
                local = L.Limit(L.Sort(child, inner.keys), node.limit + node.offset, 0)
                child = ctx.gather(local, dist, "local top-k, merged on rank 0")
            else:
                child = ctx.gather(child, dist, "ORDER BY on rank 0")
            dist = SINGLE
        return L.Limit(L.Sort(child, inner.keys), node.limit, node.offset), dist
    child, dist = ctx.build(inner)
    if dist.kind != "single" and ctx.world > 1:
        if node.limit is not None:
            child = L.Limit(child, node.limit + node.offset, 0)
        child = ctx.gather(child, dist, "LIMIT on rank 0")
        dist = SINGLE
    return L.Limit(child, node.limit, node.offset), dist
