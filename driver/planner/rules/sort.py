"""ORDER BY without LIMIT: gathered and sorted on rank 0, or range-partitioned over all ranks.

A small result is gathered to rank 0, which sorts it (one exchange, cheapest). A large one
(estimated rows at least ``PlannerOptions.range_sort_rows``) that orders the whole query result
is **range-partitioned** instead (:mod:`squall.operators.rangepart`): every rank samples its sort
keys, the samples cross the exchange once, every rank computes the same W - 1 splitters and sends
each row to the rank whose key range holds it; each rank sorts only its range, and the result is
the ranks' parts in rank order (the driver concatenates them, no rank holds the whole result).
An ORDER BY under a LIMIT is :mod:`.topk`'s. The stage note says which was chosen and why.
"""

from __future__ import annotations

from squall.driver.estimate.rows import estimate_rows
from squall.driver.ir import nodes as L
from squall.driver.ir.sqlgen import render
from squall.driver.planner.core import SINGLE, Context, Dist
from squall.driver.planner.exprs import leaves
from squall.operators.rangepart import SAMPLE_FACTOR, sort_key_sql
from squall.plan import Output

REQUIRED = True  # no other rule plans these nodes
NODES = (L.Sort,)

#: rows partitioned by key range, each rank's range sorted there: the query result is the
#: ranks' parts in rank order (see :func:`squall.driver.planner.Planner.plan`)
RANGE = Dist("range")


def top_sort(node: L.Node) -> L.Node | None:
    """The Sort that orders the whole query result (under projections and filters only), if any."""
    while isinstance(node, (L.Project, L.Filter)):
        node = node.input
    return node if isinstance(node, L.Sort) else None


def modifier(key: L.SortKey) -> str:
    """``create_sort_key``'s modifier for one key (DuckDB's defaults made explicit)."""
    direction = "DESC" if key.descending else "ASC"
    return f"{direction} NULLS {'FIRST' if key.nulls_first else 'LAST'}"


def plan(ctx: Context, node: L.Sort) -> tuple[L.Node, Dist]:
    child, dist = ctx.build(node.input)
    if dist.kind == "single" or ctx.world == 1:
        return L.Sort(child, node.keys), dist
    rows = estimate_rows(node.input)
    limit = ctx.options.range_sort_rows
    why = ""
    if node is not ctx.top_sort:
        why = "not the ordering of the query result"
    elif rows < limit:
        why = f"~{rows:,.0f} rows est. < range_sort_rows {limit:,.0f}"
    elif any("COLLATE" in L.sql_of(k.expression).upper() for k in node.keys):
        why = "a collated key (splitters use binary order)"
    if why:
        child = ctx.gather(child, dist, f"ORDER BY on rank 0: {why}")
        return L.Sort(child, node.keys), SINGLE
    keys = tuple(L.sql_of(k.expression) for k in node.keys)
    order = tuple(modifier(k) for k in node.keys)
    ctx.typecheck(f"SELECT {sort_key_sql(keys, order)} FROM ({render(child)}) AS t", leaves(child))
    note = (
        f"ORDER BY range-partitioned: ~{rows:,.0f} rows est. >= range_sort_rows {limit:,.0f}; "
        f"splitters from {SAMPLE_FACTOR} x W sampled keys per rank"
    )
    ref = ctx.stage(child, dist, Output("range", keys=keys, order=order), note)
    return L.Sort(ref, node.keys), RANGE
