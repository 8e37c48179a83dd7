"""Positions in ``GROUP BY ROLLUP`` / ``CUBE`` / ``GROUPING SETS`` replaced by the select items they name (qualify
expands a plain ``GROUP BY 1`` only)::

    >>> import sqlglot
    >>> q = "SELECT a, b, count(*) FROM t GROUP BY ROLLUP (1, 2)"
    >>> apply(sqlglot.parse_one(q, read="duckdb"), None).sql("duckdb")
    'SELECT a, b, COUNT(*) FROM t GROUP BY ROLLUP (a, b)'
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from squall.errors import BindError

NAME = "grouping_positions"
REQUIRED = True  # the translator does not resolve positions inside grouping sets


def apply(ast: exp.Expression, context: Any) -> exp.Expression:
    expand_grouping_positions(ast)
    return ast


def expand_grouping_positions(ast: exp.Expression) -> None:
    """``GROUP BY ROLLUP(1)``/``CUBE``/``GROUPING SETS`` positions → the select items, in place (qualify
    expands a plain ``GROUP BY 1`` only)."""
    for sel in ast.find_all(exp.Select):
        group = sel.args.get("group")
        if group is None:
            continue
        sets = (exp.Rollup, exp.Cube, exp.GroupingSets)
        for lit in list(group.find_all(exp.Literal)):
            up = lit.parent
            if isinstance(up, (exp.Tuple, exp.Paren)):
                up = up.parent
            if not isinstance(up, sets) or not lit.is_int:
                continue  # a plain GROUP BY position, or a number inside a key expression
            pos = int(lit.name)
            if not 1 <= pos <= len(sel.expressions):
                raise BindError(f"GROUP BY position {pos} is not in the select list")
            item = sel.expressions[pos - 1]
            lit.replace((item.this if isinstance(item, exp.Alias) else item).copy())
