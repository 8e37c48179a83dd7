"""Literal extraction: the Python value of a SQL literal, and ``column op literal`` conjuncts.

:func:`column_constraint` reads a conjunct as ``(column, op, value)`` with op one of ``eq``, ``lt``,
``lte``, ``gt``, ``gte``, ``between`` or ``in`` (``5 > x`` is ``x lt 5``), or None when it is not one.
A table source says which filters it prunes with through it (:meth:`.parquet.ParquetSource.supports_filters`),
and everything above reads filters the same way: min/max pruning and predicate keys
(:mod:`squall.driver.skipping`), the selectivity estimates (:mod:`squall.driver.estimate.selectivity`) and the
run-time join choice (:mod:`squall.driver.planner.runtime`).
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from sqlglot import exp

_UNKNOWN = object()


def literal_value(node: exp.Expression) -> Any:
    """The Python value of a literal expression, or ``_UNKNOWN``."""
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        try:
            return int(text)
        except ValueError:
            try:
                return decimal.Decimal(text)
            except decimal.InvalidOperation:
                return _UNKNOWN
    if isinstance(node, exp.Neg):
        inner = literal_value(node.this)
        return -inner if isinstance(inner, (int, decimal.Decimal)) else _UNKNOWN
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        target = node.to.this
        try:
            if target == exp.DataType.Type.DATE:
                return dt.date.fromisoformat(node.this.this)
        except ValueError:
            return _UNKNOWN
    return _UNKNOWN


_FLIP = {exp.LT: exp.GT, exp.LTE: exp.GTE, exp.GT: exp.LT, exp.GTE: exp.LTE, exp.EQ: exp.EQ}


def column_constraint(pred: exp.Expression) -> tuple[str, str, Any] | None:
    """``(column, op, value)`` for ``col op literal`` predicates (op in = < <= > >= in between)."""
    if isinstance(pred, (exp.EQ, exp.LT, exp.LTE, exp.GT, exp.GTE)):
        left, right = pred.this, pred.expression
        kind: type[exp.Binary] = type(pred)
        if not isinstance(left, exp.Column) and isinstance(right, exp.Column):
            left, right, kind = right, left, _FLIP[kind]
        if isinstance(left, exp.Column):
            value = literal_value(right)
            if value is not _UNKNOWN:
                return left.name, kind.__name__.lower(), value
    if isinstance(pred, exp.Between) and isinstance(pred.this, exp.Column):
        lo, hi = literal_value(pred.args["low"]), literal_value(pred.args["high"])
        if lo is not _UNKNOWN and hi is not _UNKNOWN:
            return pred.this.name, "between", (lo, hi)
    if isinstance(pred, exp.In) and isinstance(pred.this, exp.Column) and not pred.args.get("query"):
        values = [literal_value(v) for v in pred.expressions]
        if values and all(v is not _UNKNOWN for v in values):
            return pred.this.name, "in", values
    return None
