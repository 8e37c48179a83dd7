"""Rewrites of the parsed query, before it becomes a logical plan: one module per rule, run in :data:`RULES` order.

Each rule module has ``NAME``, ``apply(ast, context) -> ast`` (a :class:`~.context.SqlContext`) and a docstring
with an example; its cases are in ``tests/fixtures/sql/<NAME>.sql`` (SQL → the query as the rule leaves it).
:func:`squall.driver.options.run_rules` times each into the planning breakdown (``sql.<NAME>_s``), skips a
disabled one, and checks the query still has as many result columns after it (:func:`.context.result_width`).

Why this order:

- :mod:`.lowercase`: identifiers as DuckDB resolves them (case-insensitively) before anything compares names;
- :mod:`.unnest_names`: unnamed unnests in FROM get DuckDB's column names, so :mod:`.qualify` can expand a ``*``
  over them;
- :mod:`.grouping_positions`: ``ROLLUP(1)`` / ``CUBE`` / ``GROUPING SETS`` positions become the select items
  while the select list is still as written;
- :mod:`.implicit_laterals`: a FROM subquery reading an earlier FROM item becomes ``LATERAL`` (as DuckDB binds
  it) before qualification resolves its columns;
- :mod:`.qualify`: sqlglot qualifies every column and expands stars (required: the translator reads qualified
  columns only);
- :mod:`.simplify`: sqlglot's normalization (no DNF) and constant folding, on qualified columns;
- :mod:`.filter_to_case`: ``agg(x) FILTER (WHERE c)`` as ``agg(CASE WHEN c THEN x END)`` where that is the same;
- :mod:`.union_grouping_sets`: it compares branches' FROM, WHERE and aggregates as text, which needs them
  qualified, simplified and with FILTERs as CASEs as every other branch's;
- :mod:`.subquery_window` last: it compares a subquery's conjuncts with the outer query's as text (qualified and
  simplified alike).

Imports: the frontend (the bound query), the catalog, :mod:`squall.driver.ir` helpers and options; never the
logical plan, the planner or anything above.
"""

from __future__ import annotations

from sqlglot import exp

from squall.driver.catalog.tables import Catalog
from squall.driver.options import PlannerOptions, run_rules
from squall.driver.sql import (
    filter_to_case,
    grouping_positions,
    implicit_laterals,
    lowercase,
    qualify,
    simplify,
    subquery_window,
    union_grouping_sets,
    unnest_names,
)
from squall.driver.sql.context import SqlContext, result_width

RULES = (
    lowercase,
    unnest_names,
    grouping_positions,
    implicit_laterals,
    qualify,
    simplify,
    filter_to_case,
    union_grouping_sets,
    subquery_window,
)

__all__ = ["RULES", "SqlContext", "rewrite"]


def rewrite(
    ast: exp.Expression,
    catalog: Catalog,
    options: PlannerOptions | None = None,
    breakdown: dict[str, float] | None = None,
) -> tuple[exp.Expression, list[str]]:
    """A copy of the bound query's ``ast`` rewritten by every enabled rule, and the notes the rules said."""
    context = SqlContext(catalog)
    out = run_rules(
        "sql",
        RULES,
        ast.copy(),
        context,
        options or PlannerOptions(),
        {} if breakdown is None else breakdown,
        result_width,
    )
    for node in out.walk():  # qualify's placeholder types (every column VARCHAR): read by no later step,
        node._type = None  # and every later copy of the tree would copy them
    return out, context.notes
