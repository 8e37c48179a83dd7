"""Unnests in FROM named as DuckDB names them, so that a ``*`` over them expands (in :mod:`.qualify`)::

>>> import sqlglot
>>> apply(sqlglot.parse_one("SELECT * FROM t, unnest(t.tags) AS u", read="duckdb"), None).sql("duckdb")
'SELECT * FROM t JOIN UNNEST(t.tags) AS u(u) ON TRUE'
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

NAME = "unnest_names"
REQUIRED = True  # the translator reads an unnest's column by name


def apply(ast: exp.Expression, context: Any) -> exp.Expression:
    name_unnest_columns(ast)
    return ast


def name_unnest_columns(ast: exp.Expression) -> None:
    """Give each one-list unnest in a FROM clause DuckDB's own column name when the text gives none
    (``unnest(l) AS u`` → ``u(u)``, ``unnest(l)`` → ``unnest(unnest)``), in place. ``LATERAL unnest(…) AS u(x)``
    becomes ``unnest(…) AS u(x)`` (an unnest in FROM is lateral anyway)."""
    for lateral in list(ast.find_all(exp.Lateral)):
        if isinstance(lateral.this, exp.Unnest):
            inner = lateral.this
            if inner.args.get("alias") is None and lateral.args.get("alias") is not None:
                inner.set("alias", lateral.args["alias"])
            lateral.replace(inner)
    for u in list(ast.find_all(exp.Unnest)):
        if not isinstance(u.parent, (exp.From, exp.Join)) or len(u.expressions) != 1:
            continue
        alias = u.args.get("alias")
        if alias is not None and alias.columns:
            continue
        name = alias.name if alias is not None and alias.name else "unnest"
        u.set("alias", exp.TableAlias(this=exp.to_identifier(name), columns=[exp.to_identifier(name)]))
