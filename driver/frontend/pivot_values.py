"""Dynamic PIVOT: read the ON values with a first query, then plan the PIVOT with them as its IN list.

``PIVOT t ON c USING sum(x) GROUP BY g`` has result columns that depend on the data. DuckDB first
reads the distinct non-NULL values of ``c`` cast to VARCHAR, sorted, and pivots on those (an ``IN
(SELECT …)`` list: the subquery's values in its own order, NULLs and repeats dropped). Squall does the
same with a query of its own — planned and run like any query, distributed, in the same sandbox — and
rewrites the PIVOT with ``IN ('v1', 'v2', …)``, which DuckDB names and types exactly as the dynamic
form. When a column has no value at all, the PIVOT has no value columns: it becomes the grouping
alone (``SELECT <GROUP BY columns> … GROUP BY ALL``, or without GROUP BY every column not named in
ON/USING). Values are never cached: every run (and ``explain``) reads them again, so a data change
shows at once. The cost is said in a plan note: ``PIVOT values read by a first query: N values of c``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import pyarrow as pa
from sqlglot import exp

from squall.driver.catalog.tables import Catalog
from squall.driver.frontend.bind import Binder, parse
from squall.driver.frontend.boundary import Boundary
from squall.errors import BindError, SquallError
from squall.operators.duck import Sandbox

DIALECT = "duckdb"

#: runs a query (SQL text) through the connection and returns its result
Runner = Callable[[str], pa.Table]


@dataclass(frozen=True)
class Resolved:
    """The query with every dynamic PIVOT given its IN lists, and one note per first query."""

    sql: str
    notes: tuple[str, ...] = ()


@functools.cache
def pivot_limit() -> int:
    """DuckDB's ``pivot_limit`` setting (the most value columns one PIVOT may make; users cannot SET it)."""
    con = duckdb.connect(":memory:")
    try:
        rows = con.sql("SELECT current_setting('pivot_limit')").fetchall()
        return int(rows[0][0])
    finally:
        con.close()


def resolve_pivots(sql: str, catalog: Catalog, run: Runner) -> Resolved:
    """``sql`` with the IN lists of its dynamic PIVOTs read by first queries (``run``); unchanged when it
    has none. The original text is bound first, so a bad column gets DuckDB's error on the user's own
    text, not on the first query's."""
    if "pivot" not in sql.lower():
        return Resolved(sql)
    try:
        ast = parse(sql)
    except SquallError:
        return Resolved(sql)  # planning says what is wrong
    if _next_dynamic(ast) is None:
        return Resolved(sql)
    Binder(catalog).bind(sql)
    notes: list[str] = []
    with Boundary(sql, "reading a PIVOT's values"):  # a bug: one InternalError line, traceback logged
        while (pivot := _next_dynamic(ast)) is not None:
            replacement = _resolve(pivot, run, notes)
            if pivot is ast:
                ast = replacement
            else:
                pivot.replace(replacement)
        return Resolved(ast.sql(DIALECT), tuple(notes))


def in_list(item: exp.Expression) -> bool:
    """An ON item with a list of values: ``c IN (…)``. DuckDB's grammar takes the IN as the ON item's
    list only after a column, constant, function call or parenthesised expression (its ``c_expr``):
    ``a % 3 IN (1, 2)`` is one boolean expression to pivot on (sqlglot reads it as a list)."""
    if not isinstance(item, exp.In) or item.args.get("query") is not None:
        return False
    on = item.this
    simple = (exp.Column, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.Func, exp.Cast, exp.Tuple)
    return isinstance(on, exp.Paren) or (
        isinstance(on, simple) and not isinstance(on, (exp.Binary, exp.Unary))
    )


def is_dynamic(pivot: exp.Pivot) -> bool:
    """A PIVOT statement (``PIVOT src ON …``) with an ON item lacking a list of values."""
    if pivot.args.get("unpivot") or pivot.args.get("fields") or pivot.this is None:
        return False
    return not all(in_list(f) for f in pivot.expressions)


def _next_dynamic(ast: exp.Expression) -> exp.Pivot | None:
    """A dynamic PIVOT whose source holds no other dynamic PIVOT (innermost first)."""
    found = [p for p in ast.find_all(exp.Pivot) if is_dynamic(p)]
    for p in found:
        if not any(q is not p and is_dynamic(q) for q in p.this.find_all(exp.Pivot)):
            return p
    return None


def ctes_at(pivot: exp.Pivot) -> exp.With | None:
    """The CTEs visible at ``pivot`` (its own and its ancestors', outermost first; an inner name wins)."""
    chain: list[list[exp.CTE]] = []
    recursive = False
    node: exp.Expr | None = pivot
    while node is not None:
        w = node.args.get("with_") or node.args.get("with")
        if isinstance(w, exp.With):
            ctes = list(w.expressions)
            inside = [i for i, c in enumerate(ctes) if any(p is pivot for p in c.find_all(exp.Pivot))]
            chain.append(ctes[: inside[0]] if inside else ctes)  # a CTE sees only the ones before it
            recursive = recursive or bool(w.args.get("recursive"))
        node = node.parent
    if not any(chain):
        return None
    by_name: dict[str, exp.CTE] = {}
    for ctes in reversed(chain):
        for cte in ctes:
            by_name.pop(cte.alias_or_name.lower(), None)
            by_name[cte.alias_or_name.lower()] = cte.copy()
    return exp.With(expressions=list(by_name.values()), recursive=recursive)


def with_ctes(query: exp.Query, ctes: exp.With | None) -> exp.Query:
    if ctes is None:
        return query
    own = query.args.get("with_")
    if isinstance(own, exp.With):  # the query's own CTEs come after (and shadow) the visible ones
        names = {c.alias_or_name.lower() for c in own.expressions}
        outer = [c for c in ctes.expressions if c.alias_or_name.lower() not in names]
        own.set("expressions", [*outer, *own.expressions])
        own.set("recursive", bool(own.args.get("recursive") or ctes.args.get("recursive")))
        return query
    query.set("with_", ctes)
    return query


def _strings(table: pa.Table) -> list[str | None]:
    """The first column of ``table`` cast to VARCHAR by DuckDB, in row order."""
    if table.num_columns != 1:
        raise BindError("Binder Error: The query must return a single column")
    with Sandbox({"pivot_values": table.rename_columns(["v"])}, threads=1) as db:
        out = db.query("SELECT CAST(v AS VARCHAR) AS v FROM pivot_values")
    return out.column(0).to_pylist()


def _values(pivot: exp.Pivot, item: exp.Expression, run: Runner) -> tuple[exp.Expression, list[str]]:
    """The ON expression of ``item`` and its values, read by a first query."""
    ctes = ctes_at(pivot)
    if isinstance(item, exp.In) and item.args.get("query") is not None:  # the subquery's values, in order
        query = item.args["query"]
        inner = query.this.copy() if isinstance(query, exp.Subquery) else query.copy()
        seen: dict[str, None] = {}
        for v in _strings(run(with_ctes(inner, ctes).sql(DIALECT))):
            if v is not None:
                seen.setdefault(v, None)
        return item.this, list(seen)
    source = pivot.this.copy()
    text = exp.Cast(this=exp.Paren(this=item.copy()), to=exp.DataType.build("VARCHAR"))
    first = (
        exp.select(text.as_("v"))
        .distinct()
        .from_(source)
        .where(exp.Not(this=exp.Is(this=exp.Paren(this=item.copy()), expression=exp.Null())))
        .limit(pivot_limit() + 1)
    )
    table = run(with_ctes(first, ctes).sql(DIALECT))
    return item, sorted(v for v in table.column(0).to_pylist() if v is not None)


def _resolve(pivot: exp.Pivot, run: Runner, notes: list[str]) -> exp.Expression:
    """``pivot`` with IN lists of values (or, when a column has none, its grouping alone)."""
    items: list[exp.Expression] = []
    empty = False
    columns = 1
    for item in pivot.expressions:
        if in_list(item):
            assert isinstance(item, exp.In)
            items.append(item.copy())
            columns *= len(item.expressions)
            continue
        on, values = _values(pivot, item, run)
        notes.append(f"PIVOT values read by a first query: {len(values)} values of {on.sql(DIALECT)}")
        empty = empty or not values
        columns *= len(values)
        this = on.copy() if isinstance(on, exp.Column) else exp.Paren(this=on.copy())
        items.append(exp.In(this=this, expressions=[exp.Literal.string(v) for v in values]))
    limit = pivot_limit()
    if columns > limit:
        raise BindError(
            f"Binder Error: Pivot column limit of {limit} exceeded. Use SET pivot_limit=X to increase the limit."
        )
    if empty:
        return _grouping_only(pivot)
    out = pivot.copy()
    out.set("expressions", items)
    return out


def _grouping_only(pivot: exp.Pivot) -> exp.Expression:
    """What DuckDB returns for a PIVOT with no value columns: the groups (GROUP BY columns, else every
    source column the ON and USING parts do not name), once each."""
    group = pivot.args.get("group")
    select = exp.select(*(g.copy() for g in group.expressions)) if group else None
    if select is None:
        named = {
            c.name
            for part in (*pivot.expressions, *(pivot.args.get("using") or []))
            for c in part.find_all(exp.Column)
        }
        star = exp.Star(**({"except_": [exp.column(n, quoted=True) for n in sorted(named)]} if named else {}))
        select = exp.select(star)
    select = select.from_(pivot.this.copy())
    select.set("group", exp.Group(all=True))
    own = pivot.args.get("with_")
    if own is not None:
        select.set("with_", own.copy())
    return select
