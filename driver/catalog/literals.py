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

#: what :func:`literal_value` returns for anything but a literal
UNKNOWN = object()
#: where a long ``IN`` list held as one node keeps its values (:mod:`squall.driver.frontend.value_lists`)
IN_VALUES_META = "squall_in_values"


def literal_value(node: exp.Expression) -> Any:
    """The Python value of a literal expression, or ``UNKNOWN``."""
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
                return UNKNOWN
    if isinstance(node, exp.Neg):
        inner = literal_value(node.this)
        return -inner if isinstance(inner, (int, decimal.Decimal)) else UNKNOWN
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        target = node.to.this
        try:
            if target == exp.DataType.Type.DATE:
                return dt.date.fromisoformat(node.this.this)
        except ValueError:
            return UNKNOWN
    return UNKNOWN


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
            if value is not UNKNOWN:
                return left.name, kind.__name__.lower(), value
    if isinstance(pred, exp.Between) and isinstance(pred.this, exp.Column):
        lo, hi = literal_value(pred.args["low"]), literal_value(pred.args["high"])
        if lo is not UNKNOWN and hi is not UNKNOWN:
            return pred.this.name, "between", (lo, hi)
    if isinstance(pred, exp.In) and isinstance(pred.this, exp.Column) and not pred.args.get("query"):
        values = in_list_values(pred)
        if values is not None:
            return pred.this.name, "in", values
    return None


def in_list_values(pred: exp.In) -> list[Any] | None:
    """The Python values of an ``IN`` list (written out or held as one node); None unless all are literals."""
    items = pred.expressions
    if len(items) == 1 and isinstance(items[0], exp.Var):
        held = items[0].meta.get(IN_VALUES_META)
        return list(held) if held is not None else None
    values = [literal_value(v) for v in items]
    return values if values and all(v is not UNKNOWN for v in values) else None
