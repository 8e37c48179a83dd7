"""Result comparison for correctness tests: a Squall result against DuckDB's answer to the same SQL.

Rules (:func:`compare_results`):

- Same number of columns, same column names (exactly, in order), same number of rows.
- Values: float and decimal columns (and a column that is integer on one side and float/decimal on the other)
  compare numerically with ``math.isclose(rel_tol, abs_tol)``; NaN equals NaN. Every other type (integers,
  strings, dates, timestamps, booleans, nested values) compares exactly. NULL equals NULL and nothing else.
- Order: the SQL is parsed with sqlglot (dialect duckdb). Without an ORDER BY on the outermost query the rows
  compare as multisets. With one, each ORDER BY item is mapped to an output column (an ordinal ``ORDER BY 2``,
  a select-list alias, an expression equal to a select-list item, or an output column name; DuckDB's
  ``ORDER BY ALL`` is every output column); then the
  sequence of ORDER BY keys must be the same in both tables (float keys within tolerance), and within each
  run of equal keys (a tie group, taken from ``expected``) the rows compare as multisets. When the outermost
  query also has a LIMIT and the result has exactly LIMIT rows, the last tie group may have been cut by the
  limit, so only its keys are checked (with an OFFSET the same holds for the first tie group).
- Fallbacks: if an ORDER BY item cannot be mapped to an output column (ordering by an expression that is not
  in the output), or the SQL does not parse, the order cannot be checked: the rows compare as multisets,
  i.e. both tables must hold the same rows. A LIMIT without ORDER BY may return any rows: if the result has
  exactly LIMIT rows only the row count and the columns are checked.

Multiset comparison groups rows by their exact columns and matches the approximate (float/decimal) parts
within each group: first in sorted order, then greedily, which finds a match in every realistic case.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

__all__ = ["assert_same_result", "compare_results"]

_MAX_EXAMPLES = 3
_UNKNOWN_LIMIT = -1


@dataclass(frozen=True)
class _Ordering:
    """What the outermost query of the SQL says about the order of its rows."""

    keys: tuple[int, ...] | None  # output column indices of ORDER BY; None: no (usable) ORDER BY
    has_order_by: bool
    limit: int | None  # None: no limit; _UNKNOWN_LIMIT: a limit that is not an integer literal
    offset: bool
    note: str | None = None  # why the ORDER BY could not be used


def _is_approx_type(t: pa.DataType) -> bool:
    return pa.types.is_floating(t) or pa.types.is_decimal(t)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float | Decimal) and not isinstance(v, bool)


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, _hashable(x)) for k, x in v.items())
    return v


def _literal_int(node: exp.Expr | None) -> int | None:
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        return int(node.this)
    return None


def _outermost(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Subquery) and not any(node.args.get(k) for k in ("order", "limit", "offset")):
        node = node.this
    return node


def _same_column(a: exp.Expr, b: exp.Expr) -> bool:
    if not (isinstance(a, exp.Column) and isinstance(b, exp.Column)):
        return False
    if a.name.lower() != b.name.lower():
        return False
    return not a.table or not b.table or a.table.lower() == b.table.lower()


def _map_order_item(
    item: exp.Expr, projections: Sequence[exp.Expr] | None, names: Sequence[str]
) -> int | None:
    """Index of the output column an ORDER BY item orders by, or None if it is not an output column."""
    ordinal = _literal_int(item)
    if ordinal is not None:
        return ordinal - 1 if 1 <= ordinal <= len(names) else None
    if projections is not None:
        if isinstance(item, exp.Column) and not item.table:
            for i, proj in enumerate(projections):
                if isinstance(proj, exp.Alias) and proj.alias.lower() == item.name.lower():
                    return i
        for i, proj in enumerate(projections):
            bare = proj.unalias()
            if bare == item or _same_column(bare, item):
                return i
    wanted = item.name if isinstance(item, exp.Column) else item.sql(dialect="duckdb")
    if wanted in names:
        return list(names).index(wanted)
    lowered = [name.lower() for name in names]
    return lowered.index(wanted.lower()) if wanted.lower() in lowered else None


def _ordering(sql: str, names: Sequence[str]) -> _Ordering:
    try:
        node = _outermost(sqlglot.parse_one(sql, dialect="duckdb"))
    except sqlglot.errors.SqlglotError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return _Ordering(None, False, None, False, note=f"the SQL does not parse ({first})")

    limit: int | None = None
    limit_node = node.args.get("limit")
    if isinstance(limit_node, exp.Limit):
        options = limit_node.args.get("limit_options")
        percent = options is not None and options.args.get("percent")
        value = None if percent else _literal_int(limit_node.expression)
        limit = _UNKNOWN_LIMIT if value is None else value
    elif isinstance(limit_node, exp.Fetch):
        value = _literal_int(limit_node.args.get("count"))
        limit = _UNKNOWN_LIMIT if value is None else value
    offset = node.args.get("offset") is not None

    order = node.args.get("order")
    if not isinstance(order, exp.Order) or not order.expressions:
        return _Ordering(None, False, limit, offset)

    projections: list[exp.Expr] | None = None
    if isinstance(node, exp.Query):
        selects = list(node.selects)
        if len(selects) == len(names) and not any(isinstance(p, exp.Star) or p.is_star for p in selects):
            projections = selects
    keys: list[int] = []
    for ordered in order.expressions:
        item = ordered.this if isinstance(ordered, exp.Ordered) else ordered
        if isinstance(item, exp.Var) and item.name.upper() == "ALL":  # DuckDB's ORDER BY ALL
            keys.extend(range(len(names)))
            continue
        index = _map_order_item(item, projections, names)
        if index is None:
            return _Ordering(
                None,
                True,
                limit,
                offset,
                note=f"ORDER BY {item.sql(dialect='duckdb')} is not an output column",
            )
        keys.append(index)
    return _Ordering(tuple(keys), True, limit, offset)


class _Comparer:
    """Row and value comparison for one pair of tables."""

    def __init__(self, approx: Sequence[bool], rel_tol: float, abs_tol: float) -> None:
        self.approx = list(approx)
        self.exact_cols = [i for i, a in enumerate(approx) if not a]
        self.approx_cols = [i for i, a in enumerate(approx) if a]
        self.rel_tol = rel_tol
        self.abs_tol = abs_tol

    def close(self, a: Any, b: Any) -> bool:
        if a is None or b is None:
            return a is None and b is None
        if _is_number(a) and _is_number(b):
            fa, fb = float(a), float(b)
            if math.isnan(fa) or math.isnan(fb):
                return math.isnan(fa) and math.isnan(fb)
            return math.isclose(fa, fb, rel_tol=self.rel_tol, abs_tol=self.abs_tol)
        return a == b

    def values_equal(self, cols: Sequence[int], a: Sequence[Any], b: Sequence[Any]) -> bool:
        """Compare two rows (or key tuples) position by position; ``cols`` gives each position's column."""
        return all(
            self.close(x, y) if self.approx[c] else _hashable(x) == _hashable(y)
            for c, x, y in zip(cols, a, b, strict=True)
        )

    @staticmethod
    def _sort_key(values: Sequence[Any]) -> tuple[tuple[Any, ...], ...]:
        out: list[tuple[Any, ...]] = []
        for v in values:
            if v is None:
                out.append((0,))
            elif _is_number(v):
                f = float(v)
                out.append((2,) if math.isnan(f) else (1, f))
            else:
                out.append((3, repr(v)))
        return tuple(out)

    def multiset_diff(self, actual: list[tuple[Any, ...]], expected: list[tuple[Any, ...]]) -> str | None:
        """Describe how two lists of rows differ as multisets, or None if they are equal."""
        groups_a: dict[Any, list[tuple[Any, ...]]] = defaultdict(list)
        groups_e: dict[Any, list[tuple[Any, ...]]] = defaultdict(list)
        for rows, groups in ((actual, groups_a), (expected, groups_e)):
            for row in rows:
                groups[tuple(_hashable(row[i]) for i in self.exact_cols)].append(row)
        only_a: list[tuple[Any, ...]] = []
        only_e: list[tuple[Any, ...]] = []
        for key in groups_a.keys() | groups_e.keys():
            rows_a, rows_e = groups_a.get(key, []), groups_e.get(key, [])
            if not self.approx_cols:  # the key is the whole row: only the counts can differ
                only_a.extend(rows_a[len(rows_e) :])
                only_e.extend(rows_e[len(rows_a) :])
                continue
            left_a, left_e = self._match_approx(rows_a, rows_e)
            only_a.extend(left_a)
            only_e.extend(left_e)
        if not only_a and not only_e:
            return None
        parts = []
        if only_a:
            parts.append(f"{len(only_a)} row(s) only in actual, e.g. {_fmt_rows(only_a)}")
        if only_e:
            parts.append(f"{len(only_e)} row(s) only in expected, e.g. {_fmt_rows(only_e)}")
        return "; ".join(parts)

    def _match_approx(
        self, rows_a: list[tuple[Any, ...]], rows_e: list[tuple[Any, ...]]
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """Match rows whose exact columns agree by their approximate columns; return the unmatched ones."""
        cols = self.approx_cols

        def approx_part(row: tuple[Any, ...]) -> tuple[Any, ...]:
            return tuple(row[i] for i in cols)

        if len(rows_a) == len(rows_e):
            sorted_a = sorted(rows_a, key=lambda r: self._sort_key(approx_part(r)))
            sorted_e = sorted(rows_e, key=lambda r: self._sort_key(approx_part(r)))
            if all(
                self.values_equal(cols, approx_part(a), approx_part(e))
                for a, e in zip(sorted_a, sorted_e, strict=True)
            ):
                return [], []
        remaining = list(rows_e)
        unmatched_a = []
        for row in rows_a:
            part = approx_part(row)
            for j, other in enumerate(remaining):
                if self.values_equal(cols, part, approx_part(other)):
                    del remaining[j]
                    break
            else:
                unmatched_a.append(row)
        return unmatched_a, remaining


def _fmt_value(v: Any) -> str:
    if isinstance(v, Decimal):
        return str(v)
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _fmt_row(row: Sequence[Any]) -> str:
    return "(" + ", ".join(_fmt_value(v) for v in row) + ")"


def _fmt_rows(rows: Sequence[Sequence[Any]]) -> str:
    shown = ", ".join(_fmt_row(r) for r in rows[:_MAX_EXAMPLES])
    return shown + (", ..." if len(rows) > _MAX_EXAMPLES else "")


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    if table.num_columns == 0:
        return [()] * table.num_rows
    return list(zip(*(column.to_pylist() for column in table.columns), strict=True))


def _one_line(sql: str, width: int = 100) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def compare_results(
    actual: pa.Table,
    expected: pa.Table,
    sql: str,
    *,
    rel_tol: float = 1e-6,
    abs_tol: float = 1e-6,
) -> str | None:
    """Compare a query result with the expected one; return None if they match, else one paragraph saying how
    they differ (see the module docstring for the rules, including ORDER BY/LIMIT handling).

    ``sql`` is the query both results answer (DuckDB dialect); only its outermost ORDER BY/LIMIT/OFFSET are
    used. ``rel_tol``/``abs_tol`` apply to float and decimal values.
    """
    problem = _compare(actual, expected, sql, rel_tol, abs_tol)
    if problem is None:
        return None
    return (
        f"Results differ for `{_one_line(sql)}` (actual {actual.num_rows} rows x {actual.num_columns} columns, "
        f"expected {expected.num_rows} rows x {expected.num_columns} columns): {problem}."
    )


def _compare(actual: pa.Table, expected: pa.Table, sql: str, rel_tol: float, abs_tol: float) -> str | None:
    if actual.num_columns != expected.num_columns:
        return f"column count differs: actual {actual.column_names}, expected {expected.column_names}"
    if actual.column_names != expected.column_names:
        return f"column names differ: actual {actual.column_names}, expected {expected.column_names}"
    if actual.num_rows != expected.num_rows:
        detail = ""
        if actual.num_rows + expected.num_rows <= 200_000:
            approx = [
                _is_approx_type(a.type) or _is_approx_type(e.type)
                for a, e in zip(actual.schema, expected.schema, strict=True)
            ]
            diff = _Comparer(approx, rel_tol, abs_tol).multiset_diff(_rows(actual), _rows(expected))
            detail = f" ({diff})" if diff else ""
        return f"row count differs{detail}"

    approx = [
        _is_approx_type(a.type) or _is_approx_type(e.type)
        for a, e in zip(actual.schema, expected.schema, strict=True)
    ]
    cmp = _Comparer(approx, rel_tol, abs_tol)
    rows_a, rows_e = _rows(actual), _rows(expected)
    ordering = _ordering(sql, expected.column_names)
    n = len(rows_e)

    if ordering.keys is None:
        limited = ordering.limit is not None and (ordering.limit == _UNKNOWN_LIMIT or n >= ordering.limit)
        if limited and not ordering.has_order_by and ordering.note is None:
            return None  # LIMIT without ORDER BY and a full result: any rows are a right answer
        diff = cmp.multiset_diff(rows_a, rows_e)
        if diff is None:
            return None
        why = f" (order not checked: {ordering.note})" if ordering.note else ""
        return f"rows differ as multisets{why}: {diff}"

    keys = ordering.keys
    keys_a = [tuple(r[k] for k in keys) for r in rows_a]
    keys_e = [tuple(r[k] for k in keys) for r in rows_e]
    for i, (ka, ke) in enumerate(zip(keys_a, keys_e, strict=True)):
        if not cmp.values_equal(keys, ka, ke):
            names = ", ".join(expected.column_names[k] for k in keys)
            return (
                f"ORDER BY keys ({names}) differ at row {i}: actual {_fmt_row(ka)}, expected {_fmt_row(ke)} "
                f"(wrong order or wrong values)"
            )

    # Tie groups from expected: a group continues while consecutive keys are equal (within tolerance).
    bounds = [0]
    for i in range(1, n):
        if not cmp.values_equal(keys, keys_e[i - 1], keys_e[i]):
            bounds.append(i)
    bounds.append(n)
    cut_last = ordering.limit is not None and (ordering.limit == _UNKNOWN_LIMIT or n >= ordering.limit)
    groups = list(itertools.pairwise(bounds))
    for g, (start, end) in enumerate(groups):
        if (cut_last and g == len(groups) - 1) or (ordering.offset and g == 0):
            continue  # a tie group cut by LIMIT/OFFSET may hold different rows with the same keys
        if end - start == 1:
            if not cmp.values_equal(range(len(approx)), rows_a[start], rows_e[start]):
                return f"row {start} differs: actual {_fmt_row(rows_a[start])}, expected {_fmt_row(rows_e[start])}"
            continue
        diff = cmp.multiset_diff(rows_a[start:end], rows_e[start:end])
        if diff is not None:
            return f"rows {start}..{end - 1} (one ORDER BY tie group) differ: {diff}"
    return None


def assert_same_result(
    actual: pa.Table,
    expected: pa.Table,
    sql: str,
    *,
    rel_tol: float = 1e-6,
    abs_tol: float = 1e-6,
) -> None:
    """Raise ``AssertionError`` with :func:`compare_results`' description if the results differ."""
    __tracebackhide__ = True
    problem = compare_results(actual, expected, sql, rel_tol=rel_tol, abs_tol=abs_tol)
    if problem is not None:
        raise AssertionError(problem)
