"""Set operations: UNION ALL in place; UNION, INTERSECT, EXCEPT by value.

UNION ALL just concatenates whatever every rank holds. The others compare whole
rows, so each input is hash-partitioned on all its columns (equal rows meet on
one rank). When any input is already on rank 0 alone, the others are gathered
there instead.
"""

from __future__ import annotations

import dataclasses

from squall.driver import logical as L
from squall.driver.planner.core import RANDOM, SINGLE, Context, Dist
from squall.driver.sqlgen import q

NODES = (L.SetOp,)


def plan(ctx: Context, node: L.SetOp) -> tuple[L.Node, Dist]:
    built = [ctx.build(c) for c in node.inputs]
    if ctx.world == 1:
        return dataclasses.replace(node, inputs=tuple(n for n, _d in built)), RANDOM
    if any(d.kind == "single" for _n, d in built):
        children = tuple(
            n if d.kind == "single" else ctx.gather(n, d, "set operation on rank 0") for n, d in built
        )
        return dataclasses.replace(node, inputs=children), SINGLE
    if node.kind == "union" and node.all:
        return dataclasses.replace(node, inputs=tuple(n for n, _d in built)), RANDOM
    refs = []
    for (child, dist), logical in zip(built, node.inputs):
        keys = tuple(L.col(n) for n in logical.names)
        ref, _ = ctx.to_hash(child, dist, keys, f"{node.kind.upper()}: rows by value")
        refs.append(ref)
    return dataclasses.replace(node, inputs=tuple(refs)), Dist(
        "hash", tuple(frozenset([q(n)]) for n in node.out)
    )
