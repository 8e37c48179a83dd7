"""DuckDB's implicit LATERAL: a FROM subquery that reads an earlier FROM item of its own SELECT is a LATERAL
subquery, as DuckDB binds it (said in the plan's notes)::

    >>> import sqlglot
    >>> class Tables:  # what the rule reads of its SqlContext: each table's columns, and the notes
    ...     notes: list[str] = []
    ...     def table_columns(self, ast):
    ...         return {"nation": ["n_nationkey", "n_name"], "supplier": ["s_suppkey", "s_nationkey"]}
    >>> q = "SELECT n_name, s.c FROM nation, (SELECT count(*) AS c FROM supplier WHERE s_nationkey = n_nationkey) s"
    >>> apply(sqlglot.parse_one(q, read="duckdb"), Tables()).sql("duckdb")
    'SELECT n_name, s.c FROM nation, LATERAL (SELECT COUNT(*) AS c FROM supplier WHERE s_nationkey = n_nationkey) AS s'
"""

from __future__ import annotations

from sqlglot import exp

from squall.driver.ir.exprs import from_items, inner_aliases
from squall.driver.sql.context import SqlContext

NAME = "implicit_laterals"
REQUIRED = True  # without it such a subquery would be planned as uncorrelated: a wrong answer


def apply(ast: exp.Expression, context: SqlContext) -> exp.Expression:
    columns = context.table_columns(ast)
    implicit = mark_implicit_laterals(ast, {t: set(cols) for t, cols in columns.items()})
    context.notes.extend(
        f"subquery {a} reads an earlier FROM item: bound as LATERAL, as DuckDB does" for a in implicit
    )
    return ast


def mark_implicit_laterals(ast: exp.Expression, columns: dict[str, set[str]]) -> list[str]:
    """DuckDB's implicit lateral, in place: a subquery in FROM that reads an earlier FROM item of its own
    SELECT (``FROM nation, (SELECT … WHERE s_nationkey = n_nationkey) s``) is a ``LATERAL`` subquery, as DuckDB
    binds it. ``columns`` gives each base table's column names (for references without a table name).
    Returns the aliases of the subqueries marked."""
    marked: list[str] = []
    for sel in list(ast.find_all(exp.Select)):
        items = from_items(sel)
        for i, item in enumerate(items):
            if not isinstance(item, exp.Subquery) or not _reads_earlier(item, items[:i], columns):
                continue
            alias = item.args.get("alias")
            body = item.this
            item.replace(exp.Lateral(this=exp.Subquery(this=body), alias=alias))
            marked.append(alias.name if alias is not None else "")
    return marked


def _reads_earlier(item: exp.Subquery, earlier: list[exp.Expression], columns: dict[str, set[str]]) -> bool:
    if not earlier:
        return False
    body = item.this
    inner = inner_aliases(body) if isinstance(body, exp.Select) else set()
    names = {e.alias_or_name for e in earlier} - inner
    if any(col.table in names for col in body.find_all(exp.Column)):
        return True
    # a reference without a table name: earlier when no table inside has such a column and one before does
    tables = [t for t in body.find_all(exp.Table)]
    if any(t.name not in columns for t in tables):
        return False  # a CTE or an unknown table inside: its columns are not known here
    inside = set().union(*(columns[t.name] for t in tables)) if tables else set()
    inside |= {a.alias for a in body.find_all(exp.Alias)}
    before: set[str] = set()
    for e in earlier:
        if isinstance(e, exp.Table) and e.name in columns:
            before |= columns[e.name]
        elif isinstance(e, exp.Subquery) and isinstance(e.this, exp.Select):
            before |= {p.alias_or_name for p in e.this.expressions}
    return any(
        not col.table
        and col.name in before
        and col.name not in inside
        and col.find_ancestor(exp.Lambda) is None
        for col in body.find_all(exp.Column)
    )
