"""Filter placement: a predicate moved down a logical plan as far as it stays the same filter.

A conjunct passes a projection (its columns replaced by the projected expressions, unless one is volatile or
makes rows), a GROUP BY without grouping sets when it reads only keys, a UNION's inputs (renamed by position),
another filter, an inner or cross join's side that holds all its columns (a left, semi or anti join's left
side), and joins a scan's own filters (row-group skipping then sees it). It never moves below an aggregate it
does not key, a window, a sort or limit, or into a join's null-supplying side.

    >>> from sqlglot import exp
    >>> from squall.driver.ir import nodes as L
    >>> scan = L.Scan("t", (("a", "a"), ("b", "b")))
    >>> agg = L.Aggregate(scan, (("a", L.col("a")),), ())
    >>> placed = place(agg, [exp.EQ(this=L.col("a"), expression=exp.Literal.number(1))])
    >>> type(placed).__name__, [L.sql_of(f) for f in placed.input.filters]
    ('Aggregate', ['"a" = 1'])
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import and_all

#: functions whose value differs between calls: a predicate with one stays where it was written
_VOLATILE = frozenset({"random", "rand", "uuid", "gen_random_uuid", "nextval", "setseed", "now"})


def place(node: L.Node, preds: list[exp.Expression], passed: list[L.Node] | None = None) -> L.Node:
    """``node`` under ``preds``: each predicate as deep as it goes, the rest in one filter on top. ``passed``
    collects the nodes a predicate moved below."""
    stay: list[exp.Expression] = []
    for p in preds:
        moved = below(node, p, passed) if movable(p) else None
        if moved is None:
            stay.append(p)
        else:
            node = moved
    kept = and_all(stay)
    return node if kept is None else L.Filter(node, kept)


def movable(p: exp.Expression) -> bool:
    """Whether ``p`` may be evaluated elsewhere than where it was written: it reads a column and calls
    nothing volatile."""
    return bool(L.columns_in(p)) and not volatile(p)


def below(node: L.Node, p: exp.Expression, passed: list[L.Node] | None = None) -> L.Node | None:
    """``node`` with ``p`` applied below its top, or None when ``p`` cannot pass it (``passed``: as
    :func:`place`)."""
    moved = _below(node, p, passed)
    if moved is not None and passed is not None:
        passed.append(node)
    return moved


def _below(node: L.Node, p: exp.Expression, passed: list[L.Node] | None) -> L.Node | None:
    cols = L.columns_in(p)
    if isinstance(node, L.Scan):
        return dataclasses.replace(node, filters=(*node.filters, p)) if cols <= set(node.names) else None
    if isinstance(node, L.Filter):
        return L.Filter(place(node.input, [p], passed), node.predicate)
    if isinstance(node, L.Project):
        exprs = dict(node.exprs)
        if not cols <= set(exprs) or any(volatile(exprs[c]) or L.generates_rows(exprs[c]) for c in cols):
            return None
        return dataclasses.replace(node, input=place(node.input, [substitute(p, exprs)], passed))
    if isinstance(node, L.Aggregate):
        keys = dict(node.keys)
        if node.sets or not keys or not cols <= set(keys) or any(volatile(keys[c]) for c in cols):
            return None
        return dataclasses.replace(node, input=place(node.input, [substitute(p, keys)], passed))
    if isinstance(node, L.SetOp) and node.kind == "union":
        inputs = tuple(
            place(i, [substitute(p, {o: L.col(n) for o, n in zip(node.out, i.names)})], passed)
            for i in node.inputs
        )
        return dataclasses.replace(node, inputs=inputs)
    if isinstance(node, L.Join):
        if cols <= set(node.left.names) and node.kind in ("inner", "cross", "left", "semi", "anti"):
            return dataclasses.replace(node, left=place(node.left, [p], passed))
        if cols <= set(node.right.names) and node.kind in ("inner", "cross"):
            return dataclasses.replace(node, right=place(node.right, [p], passed))
    return None


def substitute(p: exp.Expression, exprs: dict[str, exp.Expression]) -> exp.Expression:
    """``p`` with each column read replaced by its expression in ``exprs`` (a copy)."""

    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not n.table and n.name in exprs:
            return exprs[n.name].copy()
        return n

    return p.transform(swap)


def volatile(e: exp.Expression) -> bool:
    """Whether ``e`` calls a function whose value differs between calls."""
    return any(
        isinstance(n, (exp.Rand, exp.Uuid, exp.CurrentTimestamp))
        or (isinstance(n, exp.Anonymous) and n.name.lower() in _VOLATILE)
        for n in e.walk()
    )
