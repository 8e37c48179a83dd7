"""Eager aggregation: aggregate a join's many side by the join key before the join (TPC-H Q13).

``SELECT c_custkey, count(o_orderkey) FROM customer LEFT JOIN orders ON c_custkey = o_custkey GROUP BY
c_custkey`` joins 15 orders per customer only to count them afterwards. Yan and Larson's *eager group-by*
(*Eager Aggregation and Lazy Aggregation*, VLDB 1995, §4) moves the aggregation below the join: the right
side is grouped by its join key first (one row per customer with its partial count), joined, and the
partial results are combined by the query's own GROUP BY — the same split the planner makes for partial
and final aggregates (``COUNT`` → ``SUM`` of counts, ``SUM``/``MIN``/``MAX`` → themselves)::

    Aggregate[keys K; COUNT(o_orderkey)]                Project[K; CAST(COALESCE(s, 0) AS BIGINT)]
      Join left (c_custkey = o_custkey)        →          Aggregate[keys K; s = SUM(n)]
        customer                                            Join left (c_custkey = o_custkey)
        orders                                                customer
                                                              Aggregate[o_custkey; n = COUNT(o_orderkey)]
                                                                orders

Each left row meets at most one pre-aggregated row, whose partial result stands for all the rows it met
before, so every group of K gets the same result (a left row without a match contributes NULL, which SUM,
MIN, MAX and the COALESCE for counts treat as before). Distributed, the right side's partial aggregate
runs where it is scanned, so the exchange carries one row per key and rank instead of every row.

Applies to an aggregate without grouping sets, DISTINCT or FILTER, whose calls are COUNT, SUM, MIN or MAX
of right-side columns (not ``COUNT(*)``: it counts the unmatched left rows too), whose group keys read
left-side columns only, directly over a left equi-join on one column without a residual. Only left joins:
their preserved side is never broadcast, so the right side is hashed by its key anyway and aggregating it
first costs no exchange; an inner join may instead broadcast or replicate its one side and leave the many
side in place, where the partial aggregate above the join already shrinks it. And only when it pays: the
right side holds at least :data:`MIN_ROWS_PER_KEY` rows per distinct key (Parquet sample NDV) and the left
side at least half as many rows as there are keys (a smaller left side is better served by a join filter
on the right side's scan). The decision is a plan note.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlglot import exp

from squall.driver.catalog.tables import Catalog
from squall.driver.estimate.rows import estimate_rows
from squall.driver.ir import nodes as L
from squall.driver.ir.aggregates import split_aggs
from squall.driver.ir.nodes import columns_in, find_scan_column, sql_of

if TYPE_CHECKING:
    from squall.driver.logical.rules.context import LogicalContext

NAME = "eager_aggregation"


def apply(node: L.Node, ctx: LogicalContext) -> L.Node:
    """The rule: :func:`eager_aggregates`, its notes said in the plan."""
    node, notes = eager_aggregates(node, ctx.catalog, ctx.fresh)
    ctx.notes.extend(notes)
    return node


#: aggregate below the join only when the right side has at least this many rows per distinct key
MIN_ROWS_PER_KEY = 4.0
_SPLIT = ("count", "sum", "min", "max")


def eager_aggregates(node: L.Node, catalog: Catalog, fresh: Callable[[str], str]) -> tuple[L.Node, list[str]]:
    """``node`` with aggregates over joins split below them where the module doc's conditions hold, and a
    note for each. ``fresh`` allocates column names unique in the plan."""
    notes: list[str] = []

    def visit(n: L.Node) -> L.Node:
        n = L.with_children(n, visit)
        if isinstance(n, L.Aggregate) and isinstance(n.input, L.Join):
            done = _eager(n, n.input, catalog, fresh)
            if done is not None:
                notes.append(done[1])
                return done[0]
        return n

    return visit(node), notes


def _eager(
    agg: L.Aggregate, join: L.Join, catalog: Catalog, fresh: Callable[[str], str]
) -> tuple[L.Node, str] | None:
    if agg.sets or join.kind != "left" or join.residual is not None:
        return None
    if len(join.right_keys) != 1 or not all(
        isinstance(k, exp.Column) for k in join.left_keys + join.right_keys
    ):
        return None
    left, right = set(join.left.names), set(join.right.names)
    for _n, key in agg.keys:
        if not columns_in(key) <= left:
            return None
    for _n, call in agg.aggs:
        if call.distinct or call.filtered:
            return None
        if call.func not in _SPLIT or len(call.args) != 1 or not columns_in(call.args[0]) <= right:
            return None
    rkey = join.right_keys[0]
    assert isinstance(rkey, exp.Column)
    found = find_scan_column(join.right, rkey.name)
    if found is None:
        return None
    scan, source = found
    keys = max(1.0, float(catalog.ndv(scan.table, source)))
    rows, left_rows = estimate_rows(join.right), estimate_rows(join.left)
    if rows < MIN_ROWS_PER_KEY * keys or left_rows < 0.5 * keys:
        return None
    # the planner's own partial/final split, with the partial below the join (only COUNT/SUM/MIN/MAX here:
    # no AVG or variance, whose argument's type the split would ask for)
    partial, final, post = split_aggs(agg, fresh, lambda _arg: None)
    below = L.Aggregate(join.right, ((rkey.name, L.col(rkey.name)),), partial, by_key=True)
    above = L.Aggregate(dataclasses.replace(join, right=below), agg.keys, final)
    group_cols = tuple((name, L.col(name)) for name, _k in agg.keys)
    note = (
        f"eager aggregation: {', '.join(sql_of(c.expression) for _n, c in agg.aggs)} computed per "
        f"{rkey.name} below the {join.kind} join (est. {rows / keys:.0f} {scan.table} rows per key), "
        "combined after it"
    )
    return L.Project(above, group_cols + post), note
