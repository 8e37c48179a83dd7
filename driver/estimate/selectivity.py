"""Selectivity estimates: the fraction of rows a filter passes, from column ranges and distinct counts.

Estimates only steer plan choices, never results. Filters are read through the literal extraction of
:mod:`squall.driver.catalog.literals`; min/max row-group pruning is :mod:`squall.driver.skipping.minmax`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any

from sqlglot import exp

from squall.driver.catalog.literals import column_constraint


def _fraction(op: str, value: Any, lo: Any, hi: Any) -> float | None:
    """Fraction of a uniform [lo, hi] range passing ``op value``."""
    try:
        if isinstance(lo, dt.date):
            lo, hi = lo.toordinal(), hi.toordinal()
            value = [v.toordinal() for v in value] if isinstance(value, tuple) else value.toordinal()
        span = float(hi - lo)
        if span <= 0:
            return None
        if op in ("lt", "lte"):
            return min(max((float(value) - float(lo)) / span, 0.0), 1.0)
        if op in ("gt", "gte"):
            return min(max((float(hi) - float(value)) / span, 0.0), 1.0)
        if op == "between":
            a, b = (float(v) for v in value)
            return min(max((min(b, float(hi)) - max(a, float(lo))) / span, 0.0), 1.0)
    except (TypeError, ValueError, AttributeError):
        return None
    return None


ColumnRange = Callable[[str], tuple[Any, Any] | None]
ColumnNdv = Callable[[str], float | None]


def _no_ndv(_name: str) -> float | None:
    return None


def conjunction_selectivity(
    preds: Iterable[exp.Expression], column_range: ColumnRange, column_ndv: ColumnNdv = _no_ndv
) -> float:
    """A rough fraction of rows passing all of ``preds``. Range bounds on one column combine into one
    interval (``d >= '1993-07-01' AND d < '1993-10-01'`` is a quarter of the dates, not the product of
    "after July 1993" and "before October 1993"); everything else multiplies as if independent.
    ``column_ndv`` gives a column's number of distinct values (None: unknown), for equality and IN."""
    conjuncts: list[exp.Expression] = []
    for p in preds:
        conjuncts += (
            [c for c in p.flatten() if isinstance(c, exp.Expression)] if isinstance(p, exp.And) else [p]
        )
    bounds: dict[str, list[Any]] = {}  # column -> [lower, upper] (None: the column's own min/max)
    sel = 1.0
    for pred in conjuncts:
        c = column_constraint(pred)
        rng = column_range(c[0]) if c is not None and c[1] in _RANGE_OPS else None
        if c is None or rng is None or _fraction("between", (rng[0], rng[1]), rng[0], rng[1]) is None:
            sel *= selectivity(pred, column_range, column_ndv)
            continue
        name, op, value = c
        lo, hi = value if op == "between" else (value, None) if op in ("gt", "gte") else (None, value)
        cur = bounds.setdefault(name, [None, None])
        try:
            if lo is not None and (cur[0] is None or lo > cur[0]):
                cur[0] = lo
            if hi is not None and (cur[1] is None or hi < cur[1]):
                cur[1] = hi
        except TypeError:  # bounds of different types: estimate this one on its own
            sel *= selectivity(pred, column_range, column_ndv)
    for name, (lo, hi) in bounds.items():
        rng = column_range(name)
        assert rng is not None
        frac = _fraction("between", (rng[0] if lo is None else lo, rng[1] if hi is None else hi), *rng)
        sel *= 0.3 if frac is None else max(frac, 0.001)
    return sel


_RANGE_OPS = ("lt", "lte", "gt", "gte", "between")


def _equality_selectivity(values: int, ndv: float | None) -> float:
    """Fraction of rows equal to one of ``values`` distinct constants: one NDV-th of the rows each when the
    column's NDV is known (values spread evenly over the distinct values), else 5 % each, up to a half."""
    if ndv is None or ndv < 1.0:
        return min(0.05 * values, 0.5)
    return min(values / ndv, 1.0)


def selectivity(pred: exp.Expression, column_range: ColumnRange, column_ndv: ColumnNdv = _no_ndv) -> float:
    """A rough fraction of rows passing ``pred``; ``column_range`` gives min/max of a column, ``column_ndv``
    its number of distinct values (None: unknown)."""
    if isinstance(pred, exp.And):
        return conjunction_selectivity([pred], column_range, column_ndv)
    if isinstance(pred, exp.Or):
        a = selectivity(pred.this, column_range, column_ndv)
        b = selectivity(pred.expression, column_range, column_ndv)
        return min(a + b - a * b, 1.0)
    if isinstance(pred, exp.Not):
        return max(1.0 - selectivity(pred.this, column_range, column_ndv), 0.05)
    if isinstance(pred, exp.Paren):
        return selectivity(pred.this, column_range, column_ndv)
    c = column_constraint(pred)
    if c is not None:
        name, op, value = c
        if op == "eq":
            return _equality_selectivity(1, column_ndv(name))
        if op == "in":
            return _equality_selectivity(len(set(value)), column_ndv(name))
        rng = column_range(name)
        if rng is not None:
            frac = _fraction(op, value, rng[0], rng[1])
            if frac is not None:
                return max(frac, 0.001)
        return 0.3
    if isinstance(pred, exp.EQ):
        return 0.1
    if isinstance(pred, exp.NEQ):
        return 0.9
    if isinstance(pred, (exp.Like, exp.ILike)):
        return 0.1
    if isinstance(pred, exp.Is):
        return 0.1
    if isinstance(pred, (exp.LT, exp.LTE, exp.GT, exp.GTE, exp.Between)):
        return 0.3
    return 0.5
