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


def place(node: L.Node, preds: list[exp.Expression]) -> L.Node:
    """``node`` under ``preds``: each predicate as deep as it goes, the rest in one filter on top."""
    stay: list[exp.Expression] = []
    for p in preds:
        moved = below(node, p) if movable(p) else None
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


def below(node: L.Node, p: exp.Expression) -> L.Node | None:
    """``node`` with ``p`` applied below its top, or None when ``p`` cannot pass it."""
    if isinstance(node, L.Scan):
        return (
            dataclasses.replace(node, filters=(*node.filters, p))
            if L.columns_in(p) <= set(node.names)
            else None
        )
    ways = _ways(node, L.columns_in(p))
    if ways is None:
        return None
    placed = {
        id(child): place(child, [p if names is None else substitute(p, names)]) for child, names in ways
    }
    return L.with_children(node, lambda child: placed.get(id(child), child))


def passes(node: L.Node, p: exp.Expression, kinds: tuple[type[L.Node], ...]) -> bool:
    """Whether ``p``, placed under ``node``, moves below a node of one of ``kinds`` (nothing is built)."""
    return movable(p) and _passes(node, L.columns_in(p), kinds)


def _passes(node: L.Node, cols: set[str], kinds: tuple[type[L.Node], ...]) -> bool:
    if not cols:  # the predicate became a constant here (a union branch's literal): it stays, as in place
        return False
    ways = _ways(node, cols)
    if ways is None:
        return False
    if isinstance(node, kinds):
        return True
    return any(
        _passes(child, cols if names is None else {c for n in cols for c in L.columns_in(names[n])}, kinds)
        for child, names in ways
    )


def _ways(node: L.Node, cols: set[str]) -> list[tuple[L.Node, dict[str, exp.Expression] | None]] | None:
    """Where a predicate reading ``cols`` goes below ``node`` (not a scan): each child it enters, with the
    expressions that replace its columns there (None: as written); None when it cannot pass ``node``."""
    if isinstance(node, L.Filter):
        return [(node.input, None)]
    if isinstance(node, L.Project):
        exprs = dict(node.exprs)
        if not cols <= set(exprs) or any(volatile(exprs[c]) or L.generates_rows(exprs[c]) for c in cols):
            return None
        return [(node.input, exprs)]
    if isinstance(node, L.Aggregate):
        keys = dict(node.keys)
        if node.sets or not keys or not cols <= set(keys) or any(volatile(keys[c]) for c in cols):
            return None
        return [(node.input, keys)]
    if isinstance(node, L.SetOp) and node.kind == "union":
        return [(i, {o: L.col(n) for o, n in zip(node.out, i.names)}) for i in node.inputs]
    if isinstance(node, L.Join):
        if cols <= set(node.left.names) and node.kind in ("inner", "cross", "left", "semi", "anti"):
            return [(node.left, None)]
        if cols <= set(node.right.names) and node.kind in ("inner", "cross"):
            return [(node.right, None)]
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
