"""SQL text → distributed plan: bind, translate, prune, plan."""

from __future__ import annotations

import functools

import duckdb

from squall.driver.catalog import Catalog
from squall.driver.frontend import Binder
from squall.driver.planner import Planner, PlannerOptions
from squall.driver.prune import prune
from squall.driver.translate import Planned, Translator
from squall.operators.duck import Sandbox
from squall.plan import Plan


@functools.cache
def aggregate_function_names() -> frozenset[str]:
    """Every aggregate function DuckDB knows (to recognise ones sqlglot does not)."""
    con = duckdb.connect(":memory:")
    try:
        rows = con.sql(
            "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type = 'aggregate'"
        )
        return frozenset(r[0].lower() for r in rows.fetchall())
    finally:
        con.close()


def compile_sql(
    catalog: Catalog,
    sql: str,
    world_size: int,
    options: PlannerOptions | None = None,
    db: Sandbox | None = None,
) -> Plan:
    """Plan ``sql`` for ``world_size`` workers; raises UserError subclasses for bad input.

    ``db`` is a driver-side sandbox to reuse across queries (one is made per call otherwise).
    """
    bound = Binder(catalog, db).bind(sql)
    translator = Translator(catalog, set(aggregate_function_names()))
    planned = translator.translate(bound.ast)
    pruned = Planned(prune(planned.node), planned.outputs)
    return Planner(catalog, world_size, options, db).plan(bound, pruned, translator.names)
