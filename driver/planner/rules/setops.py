"""Set operations: UNION ALL in place; UNION, INTERSECT, EXCEPT by value.

UNION ALL just concatenates whatever every rank holds. The others compare whole
rows, so each input is hash-partitioned on all its columns (equal rows meet on
one rank). When any input is already on rank 0 alone, the others are gathered
there instead.

The set operation's types are DuckDB's for the whole query (the common supertype
of the inputs' types, bound over the logical plan). A planned input's types can
differ from what DuckDB gives that input (a HUGEINT sum crosses an exchange as
DECIMAL(38,0), and DECIMAL(38,0) with DECIMAL(38,1) makes DECIMAL(38,0), not
DuckDB's DECIMAL(38,1)): then each input is cast to those types where it is
combined, after its exchange.
"""

from __future__ import annotations

import dataclasses

from squall.driver.ir import nodes as L
from squall.driver.ir.sqlgen import q
from squall.driver.planner.core import RANDOM, SINGLE, Context, Dist

REQUIRED = True  # no other rule plans these nodes
NODES = (L.SetOp,)


def plan(ctx: Context, node: L.SetOp) -> tuple[L.Node, Dist]:
    built = [ctx.build(c) for c in node.inputs]
    if ctx.world == 1:
        return dataclasses.replace(node, inputs=tuple(n for n, _d in built)), RANDOM
    want = ctx.logical_types(node)
    if any(d.kind == "single" for _n, d in built):
        children = tuple(
            n if d.kind == "single" else ctx.gather(n, d, "set operation on rank 0") for n, d in built
        )
        return _typed(ctx, node, children, want), SINGLE
    if node.kind == "union" and node.all:
        return _typed(ctx, node, tuple(n for n, _d in built), want), RANDOM
    refs = []
    for (child, dist), logical in zip(built, node.inputs):
        keys = tuple(L.col(n) for n in logical.names)
        ref, _ = ctx.to_hash(child, dist, keys, f"{node.kind.upper()}: rows by value")
        refs.append(ref)
    return _typed(ctx, node, tuple(refs), want), Dist("hash", tuple(frozenset([q(n)]) for n in node.out))


def _typed(ctx: Context, node: L.SetOp, inputs: tuple[L.Node, ...], want: tuple[str, ...] | None) -> L.SetOp:
    """The set operation over the planned ``inputs``, each cast to DuckDB's types ``want`` (where the
    exchanges are behind them) when the inputs as planned would make other types."""
    out = dataclasses.replace(node, inputs=inputs)
    if want is None:
        return out
    types = ctx.node_types(out)
    if tuple(t for _n, t in types) == want:
        return out
    return dataclasses.replace(node, inputs=tuple(ctx.cast_to(n, want) for n in inputs))
