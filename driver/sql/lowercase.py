"""Identifiers in lower case: DuckDB resolves them case-insensitively, quoted or not, and so does Squall.

Result names come from DuckDB's own binding, so this changes no visible name::

    >>> import sqlglot
    >>> apply(sqlglot.parse_one('SELECT "L_Tax" FROM LineItem', read="duckdb"), None).sql("duckdb")
    'SELECT "l_tax" FROM lineitem'
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

NAME = "lowercase"
REQUIRED = True  # catalog and column lookups compare lower-case names


def apply(ast: exp.Expression, context: Any) -> exp.Expression:
    for ident in ast.find_all(exp.Identifier):
        ident.set("this", ident.this.lower())
    return ast
