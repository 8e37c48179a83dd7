"""File pruning: whether a data file may hold a row passing a filter, from per-file statistics.

A lake table's log keeps, per data file, partition values and column statistics (min, max, null count,
row count). :func:`may_match` reads a filter (over the table's column names) against one file's
:class:`FileStats`: ``col op literal`` (``=``, ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``, ``IN``, see
:func:`~squall.driver.catalog.literals.column_constraint`), ``IS NULL``, ``IS NOT NULL``, ``AND``, ``OR``
and ``NOT`` of ``IS NULL``. Conservative: anything else, a column without statistics, or values that do not
compare keep the file. A partition column's statistics are exact (min = max = its value).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from squall.driver.catalog.literals import column_constraint


@dataclass(frozen=True)
class ColumnBounds:
    """What a file's statistics say of one column (None: unknown)."""

    min: Any = None
    max: Any = None
    null_count: int | None = None


@dataclass(frozen=True)
class FileStats:
    """One data file's row count (None: unknown) and column bounds, keyed by table column."""

    rows: int | None
    columns: Mapping[str, ColumnBounds]


def _all_null(bounds: ColumnBounds, rows: int | None) -> bool:
    return rows is not None and bounds.null_count is not None and bounds.null_count >= rows


def _compare(op: str, value: Any, bounds: ColumnBounds) -> bool:
    lo, hi = bounds.min, bounds.max
    if value is None:  # col = NULL matches nothing, but keep it simple and safe
        return True
    try:
        if op == "eq":
            return (lo is None or lo <= value) and (hi is None or value <= hi)
        if op in ("lt", "lte"):
            return lo is None or (lo < value if op == "lt" else lo <= value)
        if op in ("gt", "gte"):
            return hi is None or (hi > value if op == "gt" else hi >= value)
        if op == "between":
            return not ((hi is not None and hi < value[0]) or (lo is not None and lo > value[1]))
        if op == "in":
            return any(_compare("eq", v, bounds) for v in value)
    except TypeError:  # a literal of another type than the statistics: no pruning
        return True
    return True


def may_match(pred: exp.Expression, stats: FileStats) -> bool:
    """False only when ``stats`` prove no row of the file passes ``pred``."""
    if isinstance(pred, exp.Paren):
        return may_match(pred.this, stats)
    if isinstance(pred, exp.And):
        return may_match(pred.this, stats) and may_match(pred.expression, stats)
    if isinstance(pred, exp.Or):
        return may_match(pred.this, stats) or may_match(pred.expression, stats)
    negated = isinstance(pred, exp.Not)
    inner = pred.this if negated else pred
    if (
        isinstance(inner, exp.Is)
        and isinstance(inner.this, exp.Column)
        and isinstance(inner.expression, exp.Null)
    ):
        bounds = stats.columns.get(inner.this.name)
        if bounds is None or bounds.null_count is None:
            return True
        return not _all_null(bounds, stats.rows) if negated else bounds.null_count > 0
    if negated:
        return True
    constraint = column_constraint(pred)
    if constraint is None:
        return True
    column, op, value = constraint
    bounds = stats.columns.get(column)
    if bounds is None:
        return True
    if _all_null(bounds, stats.rows):  # a comparison is never true on NULL
        return False
    return _compare(op, value, bounds)
