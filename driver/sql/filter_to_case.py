"""Aggregates with a FILTER clause as CASE inside the aggregate, where that is the same (NULL-skipping
aggregates), so they plan like any aggregate::

    >>> import sqlglot
    >>> apply(sqlglot.parse_one("SELECT sum(x) FILTER (WHERE y > 0) FROM t", read="duckdb"), None).sql("duckdb")
    'SELECT SUM(CASE WHEN y > 0 THEN x END) FROM t'
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

NAME = "filter_to_case"


def apply(ast: exp.Expression, context: Any) -> exp.Expression:
    if ast.find(exp.Filter) is None:
        return ast  # nothing to rewrite: no copy
    return ast.transform(filter_to_case)


NULL_SKIPPING = (
    exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Stddev, exp.StddevSamp, exp.StddevPop,
    exp.Variance, exp.VariancePop,
)  # fmt: skip


def filter_to_case(node: exp.Expression) -> exp.Expression:
    """``agg(x) FILTER (WHERE c)`` → ``agg(CASE WHEN c THEN x END)`` (``count(*)``: ``THEN 1``) for
    aggregates that skip NULLs, so it plans like any aggregate; others keep their FILTER."""
    if not isinstance(node, exp.Filter) or type(node.this) not in NULL_SKIPPING:
        return node
    agg, cond = node.this.copy(), node.expression.this.copy()
    target = agg.this
    args = target.expressions if isinstance(target, exp.Distinct) else [target]
    if len(args) != 1:
        return node
    arg = args[0]
    value = exp.Literal.number(1) if arg is None or isinstance(arg, exp.Star) else arg.copy()
    case = exp.Case(ifs=[exp.If(this=cond, true=value)])
    if isinstance(target, exp.Distinct):
        target.set("expressions", [case])
    else:
        agg.set("this", case)
    return agg
