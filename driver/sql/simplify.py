"""sqlglot's normalization (conjunctive form kept, no DNF) and simplification (constant folding, ``NOT``
pushed down, duplicate conjuncts removed)::

    >>> import sqlglot
    >>> apply(sqlglot.parse_one("SELECT a FROM t WHERE 1 = 1 AND a > 2 + 3", read="duckdb"), None).sql("duckdb")
    'SELECT a FROM t WHERE a > 5'
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp
from sqlglot.optimizer.normalize import normalize
from sqlglot.optimizer.simplify import simplify

NAME = "simplify"


def apply(ast: exp.Expression, context: Any) -> exp.Expression:
    return simplify(normalize(ast, dnf=False))
