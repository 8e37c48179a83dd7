"""Rough output cardinalities of logical subtrees (they steer plan choices, never results)."""

from __future__ import annotations

from squall.driver.ir import nodes as L


def estimate_rows(node: L.Node) -> float:
    """A rough output cardinality of a logical subtree."""
    if isinstance(node, L.Scan):
        return node.est_rows
    if isinstance(node, L.Values):
        return float(len(node.rows))
    if isinstance(node, L.Filter):
        return estimate_rows(node.input) * 0.5
    if isinstance(node, L.Join):
        if node.est_rows is not None:
            return node.est_rows
        left, right = estimate_rows(node.left), estimate_rows(node.right)
        if node.kind in ("semi", "anti"):
            return left * 0.5
        if node.kind == "cross":
            return left * right
        return max(left, right)
    if isinstance(node, L.Aggregate):
        if not node.keys:
            return 1.0
        return max(1.0, estimate_rows(node.input) * 0.1)
    if isinstance(node, L.Limit) and node.limit is not None:
        return min(float(node.limit), estimate_rows(node.input))
    if isinstance(node, L.SetOp):
        return sum(estimate_rows(c) for c in node.inputs)
    if node.children:
        return estimate_rows(node.children[0])
    return 1.0
