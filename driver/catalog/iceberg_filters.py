"""A scan's filters as a pyiceberg row filter, for Iceberg's partition and manifest/column-stats pruning.

:func:`row_filter` translates the filters a scan pushes (sqlglot expressions over the table's column names,
ANDed) into one pyiceberg ``BooleanExpression``: ``=``, ``<``, ``<=``, ``>``, ``>=``, ``IN``, ``BETWEEN``,
``IS NULL``/``IS NOT NULL`` on a column against a literal, and ``AND``/``OR`` of those. A filter that does not
translate — another form, a column of another type than its literal, an unknown column — is left out (the
query still applies every filter: pruning is only ever *inexact*). Literals are taken only where their Python
type matches the column's Iceberg type, so pyiceberg's own conversions never decide a comparison DuckDB would
make differently.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence
from typing import Any

from sqlglot import exp

from squall.driver.catalog.literals import column_constraint

#: the Python literal types a column of each Iceberg primitive type may be compared with
_ACCEPTS: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "long": (int,),
    "date": (dt.date,),
    "string": (str,),
    "decimal": (int, decimal.Decimal),
}


def _kind(iceberg_type: Any) -> str:
    text = str(iceberg_type)
    return "decimal" if text.startswith("decimal") else text


def _fits(value: Any, iceberg_type: Any) -> bool:
    accepted = _ACCEPTS.get(_kind(iceberg_type), ())
    if isinstance(value, bool) or (isinstance(value, dt.datetime) and dt.datetime not in accepted):
        return False
    return isinstance(value, accepted)


def _expressions() -> Any:
    """pyiceberg's expression classes (typed loosely: their constructors take terms or column names)."""
    from pyiceberg import expressions

    return expressions


def _atom(pred: exp.Expression, types: dict[str, Any]) -> Any | None:
    ie: Any = _expressions()

    if (
        isinstance(pred, exp.Is)
        and isinstance(pred.this, exp.Column)
        and isinstance(pred.expression, exp.Null)
    ):
        return ie.IsNull(pred.this.name) if pred.this.name in types else None
    if (
        isinstance(pred, exp.Not)
        and isinstance(pred.this, exp.Is)
        and isinstance(pred.this.this, exp.Column)
        and isinstance(pred.this.expression, exp.Null)
    ):
        return ie.NotNull(pred.this.this.name) if pred.this.this.name in types else None
    found = column_constraint(pred)
    if found is None or found[0] not in types:
        return None
    column, op, value = found
    values = list(value) if op in ("in", "between") else [value]
    if not all(_fits(v, types[column]) for v in values):
        return None
    make = {"eq": ie.EqualTo, "lt": ie.LessThan, "lte": ie.LessThanOrEqual, "gt": ie.GreaterThan}
    if op in make:
        return make[op](column, value)
    if op == "gte":
        return ie.GreaterThanOrEqual(column, value)
    if op == "between":
        return ie.And(ie.GreaterThanOrEqual(column, value[0]), ie.LessThanOrEqual(column, value[1]))
    return ie.In(column, set(values))


def _translate(pred: exp.Expression, types: dict[str, Any]) -> Any | None:
    ie: Any = _expressions()

    if isinstance(pred, exp.Paren):
        return _translate(pred.this, types)
    if isinstance(pred, (exp.And, exp.Or)):
        left, right = _translate(pred.this, types), _translate(pred.expression, types)
        if isinstance(pred, exp.Or):
            return ie.Or(left, right) if left is not None and right is not None else None
        if left is None or right is None:  # a conjunct that does not translate is left out
            return left if right is None else right
        return ie.And(left, right)
    return _atom(pred, types)


def row_filter(filters: Sequence[exp.Expression], types: dict[str, Any]) -> tuple[Any, list[str]]:
    """(pyiceberg row filter, the SQL of the filters it holds) for ``filters`` over columns of Iceberg types
    ``types`` (column name -> pyiceberg type); ``AlwaysTrue`` and ``[]`` when none translates."""
    ie: Any = _expressions()

    out: Any = ie.AlwaysTrue()
    pushed: list[str] = []
    for f in filters:
        translated = _translate(f, types)
        if translated is None:
            continue
        try:  # binding checks the literal against the column's type; refused ones are not pushed
            from pyiceberg.expressions.visitors import bind
            from pyiceberg.schema import Schema
            from pyiceberg.types import NestedField

            fields = [NestedField(i + 1, n, t, required=False) for i, (n, t) in enumerate(types.items())]
            bind(Schema(*fields), translated, case_sensitive=True)
        except Exception:
            continue
        out = translated if isinstance(out, ie.AlwaysTrue) else ie.And(out, translated)
        pushed.append(f.sql("duckdb"))
    return out, pushed
