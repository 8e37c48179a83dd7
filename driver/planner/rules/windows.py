"""Window functions: by PARTITION BY keys, or on rank 0 when there are none.

A window's frame never crosses a partition, so rows are hash-partitioned on
the PARTITION BY keys (no move when they already are); without PARTITION BY
the whole input is one partition and is gathered to rank 0.
"""

from __future__ import annotations

from squall.driver.ir import nodes as L
from squall.driver.planner.core import SINGLE, Context, Dist

REQUIRED = True  # no other rule plans these nodes
NODES = (L.Window,)


def plan(ctx: Context, node: L.Window) -> tuple[L.Node, Dist]:
    child, dist = ctx.build(node.input)
    if ctx.world == 1:
        return L.Window(child, node.exprs, node.partition_by), dist
    if node.partition_by:
        child, dist = ctx.to_hash(child, dist, node.partition_by, "window: rows by PARTITION BY", exact=False)
        return L.Window(child, node.exprs, node.partition_by), dist
    if dist.kind != "single":
        child = ctx.gather(child, dist, "window without PARTITION BY on rank 0")
    return L.Window(child, node.exprs, node.partition_by), SINGLE
