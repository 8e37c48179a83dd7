"""Result comparison for correctness tests: a Squall result against DuckDB's answer to the same SQL.

The one comparator of every suite, benchmark and the fuzzer (:func:`compare_results`,
:func:`assert_same_result`). Rules:

- **Shape and names**: the same number of columns, the same column names (exactly, in order), the same
  number of rows.
- **Types**: each column's Arrow type must equal DuckDB's, recursively (struct field names included). The
  only equivalences are encodings of one logical type that DuckDB itself emits either way depending on its
  settings, so Squall's choice cannot be wrong: ``string`` = ``large_string`` = ``string_view``; ``binary`` =
  ``large_binary`` = ``binary_view``; ``list`` = ``large_list`` = ``list_view`` = ``large_list_view`` (their
  item types compared by the same rules). Field nullability is not a type. Everything else is exact: INTEGER
  is not BIGINT or DOUBLE, DECIMAL(38,2) is not DECIMAL(18,2) nor DOUBLE, a date is not a timestamp, a
  timestamp's unit and time zone count.
- **Values**: DECIMAL, integers, strings, dates, timestamps, booleans compare exactly. Floating point (also
  inside nested values) compares within a tolerance scaled to the magnitude of the two values:
  ``|a - b| <= rel_tol * max(|a|, |b|) + abs_tol`` (defaults ``rel_tol=1e-9``, ``abs_tol=1e-12``): a float
  sum or average computed in another order differs by a few ulps of the values summed, far below 1e-9 of the
  result unless the sum cancels. NULL equals only NULL; NaN equals only NaN (a NULL is not a NaN); -0.0
  equals 0.0; +inf equals only +inf.
- **Order**: the SQL is parsed with sqlglot (dialect duckdb). Without an ORDER BY on the outermost query the
  rows compare as multisets. With one, each ORDER BY item is mapped to an output column (an ordinal
  ``ORDER BY 2``, a select-list alias, an expression equal to a select-list item, or an output column name;
  DuckDB's ``ORDER BY ALL`` is every output column); the sequence of ORDER BY keys must then be the same in
  both tables (float keys within tolerance), and within each run of equal keys (a tie group, taken from
  ``expected``) the rows compare as multisets — every row and column is checked.
- **LIMIT/OFFSET and ties**: with ``ORDER BY … LIMIT n`` and exactly n rows, the last tie group may have been
  cut by the limit, so another engine may legitimately return other rows with the same keys. Where the
  rows of that group differ from DuckDB's, they are accepted only if they are among the rows DuckDB could
  have returned: ``reference`` (a callable or a DuckDB connection that answers SQL) runs the query again
  with the limit raised by ``_CANDIDATE_ROWS`` and without the offset; the actual rows of the cut group must
  be a sub-multiset of all rows with the group's keys (the same for the first group when an OFFSET may cut
  it). Without ``reference`` a differing cut group fails (the ties are not proven). A LIMIT without ORDER BY
  may return any rows: with ``reference`` the actual rows must be a sub-multiset of the unlimited answer
  (when it has at most ``_CANDIDATE_ROWS`` more rows), without it only the row count and columns are checked.
- **Fallbacks**: if an ORDER BY item cannot be mapped to an output column (ordering by an expression that is
  not in the output), or the SQL does not parse, the order cannot be checked: the rows compare as
  multisets, i.e. both tables must hold the same rows.

Multiset comparison groups rows by their exact columns and matches the floating-point parts within each
group: first in sorted order, then greedily, which finds a match in every realistic case.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

__all__ = ["assert_same_result", "compare_results", "type_problem"]

_MAX_EXAMPLES = 3
_UNKNOWN_LIMIT = -1
_CANDIDATE_ROWS = 10_000  # how far past the limit ``reference`` looks for rows tied with a cut group
REL_TOL = 1e-9
ABS_TOL = 1e-12

Reference = Callable[[str], pa.Table] | Any  # a callable, or anything with .sql(sql).to_arrow_table()


@dataclass(frozen=True)
class _Ordering:
    """What the outermost query of the SQL says about the order of its rows."""

    keys: tuple[int, ...] | None  # output column indices of ORDER BY; None: no (usable) ORDER BY
    has_order_by: bool
    limit: int | None  # None: no limit; _UNKNOWN_LIMIT: a limit that is not an integer literal
    offset: int | None  # None: no offset; _UNKNOWN_LIMIT: not an integer literal
    note: str | None = None  # why the ORDER BY could not be used


# --- types ------------------------------------------------------------------------------------------------


def _type_family(t: pa.DataType) -> str:
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        return "list"
    return ""


def type_problem(actual: pa.DataType, expected: pa.DataType) -> str | None:
    """None if ``actual`` equals ``expected`` up to the documented equivalences, else how they differ."""
    family = _type_family(expected)
    if family and family == _type_family(actual):
        if family != "list":
            return None
        return type_problem(actual.value_type, expected.value_type)
    if actual.id != expected.id or actual.num_fields != expected.num_fields:
        return f"{actual} vs {expected}"
    if pa.types.is_struct(expected):
        for i in range(expected.num_fields):
            fa, fe = actual.field(i), expected.field(i)
            if fa.name != fe.name or type_problem(fa.type, fe.type) is not None:
                return f"{actual} vs {expected}"
        return None
    if pa.types.is_map(expected):
        if type_problem(actual.key_type, expected.key_type) or type_problem(
            actual.item_type, expected.item_type
        ):
            return f"{actual} vs {expected}"
        return None
    if pa.types.is_fixed_size_list(expected):
        if actual.list_size != expected.list_size or type_problem(actual.value_type, expected.value_type):
            return f"{actual} vs {expected}"
        return None
    return None if actual.equals(expected) else f"{actual} vs {expected}"


def _has_float(t: pa.DataType) -> bool:
    if pa.types.is_floating(t):
        return True
    if pa.types.is_dictionary(t):
        return _has_float(t.value_type)
    return any(_has_float(t.field(i).type) for i in range(t.num_fields))


# --- the ORDER BY / LIMIT of the SQL ------------------------------------------------------------------


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, _hashable(x)) for k, x in v.items())
    if isinstance(v, float) and math.isnan(v):
        return ("NaN",)  # NaN != NaN would split equal rows
    if isinstance(v, Decimal) and v.is_nan():
        return ("NaN",)
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


def _limit_and_offset(node: exp.Expr) -> tuple[int | None, int | None]:
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
    offset_node = node.args.get("offset")
    offset: int | None = None
    if offset_node is not None:
        value = _literal_int(offset_node.expression if isinstance(offset_node, exp.Offset) else offset_node)
        offset = _UNKNOWN_LIMIT if value is None else value
    return limit, offset


def _ordering(sql: str, names: Sequence[str]) -> _Ordering:
    try:
        node = _outermost(sqlglot.parse_one(sql, dialect="duckdb"))
    except sqlglot.errors.SqlglotError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return _Ordering(None, False, None, None, note=f"the SQL does not parse ({first})")

    limit, offset = _limit_and_offset(node)
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
            note = f"ORDER BY {item.sql(dialect='duckdb')} is not an output column"
            return _Ordering(None, True, limit, offset, note=note)
        keys.append(index)
    return _Ordering(tuple(keys), True, limit, offset)


def _widened_sql(sql: str, limit: int, offset: int) -> str | None:
    """``sql`` without its outermost OFFSET and with LIMIT ``offset + limit + _CANDIDATE_ROWS``."""
    try:
        root = sqlglot.parse_one(sql, dialect="duckdb")
    except sqlglot.errors.SqlglotError:
        return None
    node = _outermost(root)
    node.set("offset", None)
    node.set("limit", exp.Limit(expression=exp.Literal.number(offset + limit + _CANDIDATE_ROWS)))
    return root.sql(dialect="duckdb")


def _run_reference(reference: Reference, sql: str) -> pa.Table:
    out = reference.sql(sql) if hasattr(reference, "sql") else reference(sql)
    for method in ("to_arrow_table", "to_arrow", "arrow"):  # a DuckDB relation, a Squall result
        if not isinstance(out, pa.Table) and hasattr(out, method):
            out = getattr(out, method)()
    return out


# --- values -----------------------------------------------------------------------------------------------


class _Comparer:
    """Row and value comparison for one pair of tables."""

    def __init__(self, approx: Sequence[bool], rel_tol: float, abs_tol: float) -> None:
        self.approx = list(approx)
        self.exact_cols = [i for i, a in enumerate(approx) if not a]
        self.approx_cols = [i for i, a in enumerate(approx) if a]
        self.rel_tol = rel_tol
        self.abs_tol = abs_tol

    def close(self, a: Any, b: Any) -> bool:
        """Equal, floats within tolerance (also inside lists and structs)."""
        if a is None or b is None:
            return a is None and b is None
        if isinstance(a, float) and isinstance(b, float):
            if math.isnan(a) or math.isnan(b):
                return math.isnan(a) and math.isnan(b)
            if math.isinf(a) or math.isinf(b):
                return a == b
            return abs(a - b) <= self.rel_tol * max(abs(a), abs(b)) + self.abs_tol
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(self.close(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, dict) and isinstance(b, dict):
            return list(a) == list(b) and all(self.close(a[k], b[k]) for k in a)
        if isinstance(a, tuple) and isinstance(b, tuple):  # maps as lists of (key, value)
            return len(a) == len(b) and all(self.close(x, y) for x, y in zip(a, b, strict=True))
        return type(a) is type(b) and _hashable(a) == _hashable(b)

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
            elif isinstance(v, float):
                out.append((2,) if math.isnan(v) else (1, v))
            else:
                out.append((3, repr(v)))
        return tuple(out)

    def _groups(self, rows: list[tuple[Any, ...]]) -> dict[Any, list[tuple[Any, ...]]]:
        groups: dict[Any, list[tuple[Any, ...]]] = defaultdict(list)
        for row in rows:
            groups[tuple(_hashable(row[i]) for i in self.exact_cols)].append(row)
        return groups

    def unmatched(
        self, actual: list[tuple[Any, ...]], expected: list[tuple[Any, ...]]
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The rows of each list that have no partner in the other (multisets)."""
        groups_a, groups_e = self._groups(actual), self._groups(expected)
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
        return only_a, only_e

    def multiset_diff(self, actual: list[tuple[Any, ...]], expected: list[tuple[Any, ...]]) -> str | None:
        """Describe how two lists of rows differ as multisets, or None if they are equal."""
        only_a, only_e = self.unmatched(actual, expected)
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


# --- the comparison -----------------------------------------------------------------------------------


def compare_results(
    actual: pa.Table,
    expected: pa.Table,
    sql: str,
    *,
    rel_tol: float = REL_TOL,
    abs_tol: float = ABS_TOL,
    reference: Reference | None = None,
) -> str | None:
    """Compare a query result with DuckDB's; return None if they match, else one paragraph saying how they
    differ (see the module docstring for the rules, including types, tolerances and ORDER BY/LIMIT).

    ``sql`` is the query both results answer (DuckDB dialect); only its outermost ORDER BY/LIMIT/OFFSET are
    used. ``rel_tol``/``abs_tol`` apply to floating-point values only. ``reference`` (a callable returning
    an Arrow table, or a DuckDB connection) lets a result cut by LIMIT inside a tie group be checked against
    the rows DuckDB could have returned.
    """
    problem = _compare(actual, expected, sql, _Tolerance(rel_tol, abs_tol), reference)
    if problem is None:
        return None
    return (
        f"Results differ for `{_one_line(sql)}` (actual {actual.num_rows} rows x {actual.num_columns} columns, "
        f"expected {expected.num_rows} rows x {expected.num_columns} columns): {problem}."
    )


@dataclass(frozen=True)
class _Tolerance:
    rel: float
    abs: float


def _schema_problem(actual: pa.Table, expected: pa.Table) -> str | None:
    if actual.num_columns != expected.num_columns:
        return f"column count differs: actual {actual.column_names}, expected {expected.column_names}"
    if actual.column_names != expected.column_names:
        return f"column names differ: actual {actual.column_names}, expected {expected.column_names}"
    for fa, fe in zip(actual.schema, expected.schema, strict=True):
        why = type_problem(fa.type, fe.type)
        if why is not None:
            return f"column {fe.name!r} has type {fa.type} in actual, {fe.type} in expected"
    return None


def _compare(
    actual: pa.Table, expected: pa.Table, sql: str, tol: _Tolerance, reference: Reference | None
) -> str | None:
    problem = _schema_problem(actual, expected)
    if problem is not None:
        return problem
    cmp = _Comparer([_has_float(f.type) for f in expected.schema], tol.rel, tol.abs)
    if actual.num_rows != expected.num_rows:
        detail = ""
        if actual.num_rows + expected.num_rows <= 200_000:
            diff = cmp.multiset_diff(_rows(actual), _rows(expected))
            detail = f" ({diff})" if diff else ""
        return f"row count differs{detail}"

    rows_a, rows_e = _rows(actual), _rows(expected)
    ordering = _ordering(sql, expected.column_names)
    n = len(rows_e)
    limited = ordering.limit is not None and (ordering.limit == _UNKNOWN_LIMIT or n >= ordering.limit)
    if ordering.keys is None:
        if limited and not ordering.has_order_by and ordering.note is None:
            return _limit_without_order(cmp, rows_a, rows_e, sql, ordering, reference)
        diff = cmp.multiset_diff(rows_a, rows_e)
        if diff is None:
            return None
        why = f" (order not checked: {ordering.note})" if ordering.note else ""
        return f"rows differ as multisets{why}: {diff}"
    return _compare_ordered(cmp, rows_a, rows_e, expected.column_names, sql, ordering, reference)


def _limit_without_order(
    cmp: _Comparer,
    rows_a: list[tuple[Any, ...]],
    rows_e: list[tuple[Any, ...]],
    sql: str,
    ordering: _Ordering,
    reference: Reference | None,
) -> str | None:
    """LIMIT without ORDER BY and a full result: any rows of the unlimited answer are right."""
    if cmp.multiset_diff(rows_a, rows_e) is None:
        return None
    if reference is None or ordering.limit == _UNKNOWN_LIMIT or ordering.offset == _UNKNOWN_LIMIT:
        return None  # without the unlimited answer nothing more can be checked
    widened = _widened_sql(sql, len(rows_e), ordering.offset or 0)
    if widened is None:
        return None
    candidates = _rows(_run_reference(reference, widened))
    if len(candidates) >= (ordering.offset or 0) + len(rows_e) + _CANDIDATE_ROWS:
        return None  # too many candidates to know them all
    extra, _ = cmp.unmatched(rows_a, candidates)
    if extra:
        return f"{len(extra)} row(s) are not rows of the query without LIMIT, e.g. {_fmt_rows(extra)}"
    return None


def _tie_bounds(cmp: _Comparer, keys: Sequence[int], keys_e: list[tuple[Any, ...]]) -> list[tuple[int, int]]:
    """Tie groups of ``expected``: a group continues while consecutive keys are equal (within tolerance)."""
    n = len(keys_e)
    bounds = [0]
    for i in range(1, n):
        if not cmp.values_equal(keys, keys_e[i - 1], keys_e[i]):
            bounds.append(i)
    bounds.append(n)
    return list(itertools.pairwise(bounds))


def _compare_ordered(
    cmp: _Comparer,
    rows_a: list[tuple[Any, ...]],
    rows_e: list[tuple[Any, ...]],
    names: Sequence[str],
    sql: str,
    ordering: _Ordering,
    reference: Reference | None,
) -> str | None:
    keys = ordering.keys
    assert keys is not None
    keys_a = [tuple(r[k] for k in keys) for r in rows_a]
    keys_e = [tuple(r[k] for k in keys) for r in rows_e]
    for i, (ka, ke) in enumerate(zip(keys_a, keys_e, strict=True)):
        if not cmp.values_equal(keys, ka, ke):
            key_names = ", ".join(names[k] for k in keys)
            return (
                f"ORDER BY keys ({key_names}) differ at row {i}: actual {_fmt_row(ka)}, expected {_fmt_row(ke)} "
                f"(wrong order or wrong values)"
            )
    n = len(rows_e)
    cut_last = ordering.limit is not None and (ordering.limit == _UNKNOWN_LIMIT or n >= ordering.limit)
    groups = _tie_bounds(cmp, keys, keys_e)
    cut: list[tuple[int, int]] = []
    for g, (start, end) in enumerate(groups):
        diff = cmp.multiset_diff(rows_a[start:end], rows_e[start:end])
        if diff is None:
            continue
        if (cut_last and g == len(groups) - 1) or (ordering.offset is not None and g == 0):
            cut.append((start, end))  # a group LIMIT/OFFSET may have cut: check against the candidates
            continue
        if end - start == 1:
            return (
                f"row {start} differs: actual {_fmt_row(rows_a[start])}, expected {_fmt_row(rows_e[start])}"
            )
        return f"rows {start}..{end - 1} (one ORDER BY tie group) differ: {diff}"
    for start, end in cut:
        problem = _check_cut_group(
            cmp, keys, (rows_a[start:end], rows_e[start:end]), n, sql, ordering, reference
        )
        if problem is not None:
            return f"rows {start}..{end - 1} (the tie group LIMIT/OFFSET cut) differ: {problem}"
    return None


def _check_cut_group(
    cmp: _Comparer,
    keys: Sequence[int],
    groups: tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]],
    n: int,
    sql: str,
    ordering: _Ordering,
    reference: Reference | None,
) -> str | None:
    """The rows of a tie group LIMIT/OFFSET cut must be among the rows DuckDB could have returned (``n``: the
    result's row count)."""
    group_a, group_e = groups
    diff = cmp.multiset_diff(group_a, group_e)
    if reference is None:
        return f"{diff} (ties beyond the limit not proven: no reference given)"
    if ordering.limit == _UNKNOWN_LIMIT or ordering.offset == _UNKNOWN_LIMIT:
        return None  # a limit that is not a literal: the keys are all that can be checked
    offset = ordering.offset or 0
    limit = n
    widened = _widened_sql(sql, limit, offset)
    if widened is None:
        return diff
    wide = _rows(_run_reference(reference, widened))
    group_keys = tuple(group_e[0][k] for k in keys)
    candidates = [r for r in wide if cmp.values_equal(keys, tuple(r[k] for k in keys), group_keys)]
    if len(candidates) <= len(group_e):
        return f"{diff} (DuckDB has no other row with these ORDER BY keys)"
    if wide and candidates and candidates[-1] is wide[-1] and len(wide) >= offset + limit + _CANDIDATE_ROWS:
        return None  # the ties run past the widened limit: the candidates are not all known
    extra, _ = cmp.unmatched(group_a, candidates)
    if extra:
        return f"{len(extra)} row(s) are not among DuckDB's tied rows, e.g. {_fmt_rows(extra)}"
    return None


def assert_same_result(
    actual: pa.Table,
    expected: pa.Table,
    sql: str,
    *,
    rel_tol: float = REL_TOL,
    abs_tol: float = ABS_TOL,
    reference: Reference | None = None,
) -> None:
    """Raise ``AssertionError`` with :func:`compare_results`' description if the results differ."""
    __tracebackhide__ = True
    problem = compare_results(actual, expected, sql, rel_tol=rel_tol, abs_tol=abs_tol, reference=reference)
    if problem is not None:
        raise AssertionError(problem)
