"""Column pruning: every node keeps only the columns someone above it reads."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from squall.driver.ir import nodes as L
from squall.driver.ir.nodes import columns_in

if TYPE_CHECKING:
    from squall.driver.logical.rules.context import LogicalContext

NAME = "prune"
REQUIRED = True  # the planner relies on every node carrying only what is read above it


def apply(node: L.Node, ctx: LogicalContext) -> L.Node:
    """The rule: :func:`prune` from the root (join sides narrowed with ``PlannerOptions.narrow_join_sides``)."""
    return prune(node, narrow=ctx.options.narrow_join_sides)


def prune(node: L.Node, required: set[str] | None = None, *, narrow: bool = True) -> L.Node:
    """Drop columns nobody reads; ``required`` defaults to all of ``node``'s outputs. ``narrow``: a join
    side also drops the columns only its own filters read (an :class:`~squall.driver.ir.nodes.Narrow`
    above it), so that they do not cross an exchange."""
    if required is None:
        required = set(node.names)
    if isinstance(node, L.Scan):
        needed = set(required)
        for f in node.filters:
            needed |= columns_in(f)
        cols = tuple(c for c in node.columns if c[1] in needed)
        if not cols:  # keep one column so row counts survive (COUNT(*))
            cols = (node.columns[0],)
        return dataclasses.replace(node, columns=cols)
    if isinstance(node, L.Values):
        return node
    if isinstance(node, L.Filter):
        child = prune(node.input, required | columns_in(node.predicate), narrow=narrow)
        return dataclasses.replace(node, input=child)
    if isinstance(node, L.Project):
        exprs = tuple((n, e) for n, e in node.exprs if n in required or L.generates_rows(e)) or node.exprs[:1]
        need: set[str] = set()
        for _n, e in exprs:
            need |= columns_in(e)
        return L.Project(prune(node.input, need, narrow=narrow), exprs)
    if isinstance(node, L.Join):
        need = set(required)
        for k in node.left_keys + node.right_keys:
            need |= columns_in(k)
        if node.residual is not None:
            need |= columns_in(node.residual)
        left = prune(node.left, need & set(node.left.names), narrow=narrow)
        right = prune(node.right, need & set(node.right.names), narrow=narrow)
        if narrow:
            left, right = _narrowed(left, need), _narrowed(right, need)
        return dataclasses.replace(node, left=left, right=right)
    if isinstance(node, L.Aggregate):
        aggs = tuple((n, a) for n, a in node.aggs if n in required)
        if not aggs and not node.keys:
            aggs = node.aggs[:1]
        need = set()
        for _n, e in node.keys:
            need |= columns_in(e)
        for _n, a in aggs:
            need |= columns_in(a.expression)
        return dataclasses.replace(node, input=prune(node.input, need, narrow=narrow), aggs=aggs)
    if isinstance(node, L.Sort):
        need = set(required)
        for sort_key in node.keys:
            need |= columns_in(sort_key.expression)
        return dataclasses.replace(node, input=prune(node.input, need, narrow=narrow))
    if isinstance(node, L.Limit):
        return dataclasses.replace(node, input=prune(node.input, required, narrow=narrow))
    if isinstance(node, L.SetOp):
        return dataclasses.replace(node, inputs=tuple(prune(c, narrow=narrow) for c in node.inputs))
    if isinstance(node, L.Window):
        exprs = tuple((n, e) for n, e in node.exprs if n in required or L.generates_rows(e)) or node.exprs[:1]
        need = (required & set(node.input.names)) | {c for _n, e in exprs for c in columns_in(e)}
        # an unread window over columns read anyway stays: the copies of a subquery read several times (TPC-DS
        # Q47/Q57's v1: its lag and lead reads use the rank, not the average) then stay equal and are computed
        # once, in one pass (planner/repeats.py), instead of once per read, each copy with its own windows
        kept = {n for n, _e in exprs}
        exprs = tuple((n, e) for n, e in node.exprs if n in kept or columns_in(e) <= need)
        return L.Window(prune(node.input, need, narrow=narrow), exprs, node.partition_by)
    if isinstance(node, L.OneRank):
        return dataclasses.replace(node, inputs=tuple(prune(c, narrow=narrow) for c in node.inputs))
    raise TypeError(f"cannot prune {type(node).__name__}")


def _narrowed(side: L.Node, need: set[str]) -> L.Node:
    """A join side without the columns only its own filters read (they would cross an exchange)."""
    keep = tuple(c for c in side.names if c in need)
    if not keep or len(keep) == len(side.names):
        return side
    return L.Narrow(side, tuple((c, L.col(c)) for c in keep))
