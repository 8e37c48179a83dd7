"""Filters and projections: planned in place, never an exchange.

A row-wise operator keeps its input's distribution; a projection renames the
hash keys it passes through (and forgets a partitioning whose keys it drops),
so a later join or aggregate can still see that its input is co-partitioned.
"""

from __future__ import annotations

from squall.driver.ir import nodes as L
from squall.driver.ir.sqlgen import q
from squall.driver.planner.core import Context, Dist

REQUIRED = True  # no other rule plans these nodes
NODES = (L.Filter, L.Project)


def plan(ctx: Context, node: L.Filter | L.Project) -> tuple[L.Node, Dist]:
    child, dist = ctx.build(node.input, ctx.replicate)
    if isinstance(node, L.Filter):
        return L.Filter(child, node.predicate), dist
    mapping = {L.sql_of(e): q(n) for n, e in node.exprs}
    return L.Project(child, node.exprs), dist.rename(mapping)
