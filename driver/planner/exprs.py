"""Expression and SQL helpers the planner rules share (no planning decisions here)."""

from __future__ import annotations

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir.sqlgen import InputRef

#: DuckDB type names that hash as numbers (cast to DOUBLE before hashing)
NUMERIC = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
           "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL")  # fmt: skip


def hashable(key_sql: str, typ: str) -> str:
    """``key_sql`` as hashed for partitioning and join filters: numbers cast to DOUBLE so that equal values of
    different types meet; a list of numbers (a NULL-safe key ``[x]``) to DOUBLE[]."""
    if not typ.startswith(NUMERIC):
        return key_sql
    return f"CAST({key_sql} AS DOUBLE{'[]' if typ.endswith('[]') else ''})"


def leaves(node: L.Node) -> list[InputRef]:
    """The stage inputs a (partial) plan reads, left to right, each once (a reused stage's input may be
    read twice, see planner/reuse.py)."""
    found: dict[str, InputRef] = {}

    def walk(n: L.Node) -> None:
        if isinstance(n, InputRef):
            found.setdefault(n.name, n)
            return
        for c in n.children:
            walk(c)

    walk(node)
    return list(found.values())


def rewrite_cols(e: exp.Expression, names: dict[str, str]) -> exp.Expression:
    """Replace sub-expressions whose SQL text is in ``names`` by that column (aggregates kept)."""

    def fix(n: exp.Expression) -> exp.Expression:
        text = L.sql_of(n)
        if text in names and not isinstance(n, (exp.AggFunc, exp.Distinct)):
            return L.col(names[text])
        return n

    return e.transform(fix)
