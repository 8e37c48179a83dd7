"""SQL text → distributed plan, the whole pipeline and nothing else:

    bind (:mod:`.frontend`) → SQL rules (:data:`.sql.RULES`) → translate (:mod:`.logical`) →
    logical rules (:data:`.logical.rules.RULES`) → planner rules (:data:`.planner.RULES`)

The whole query runs on one rank (said in the plan's notes) when a part has no distributed plan and the
translator could not isolate it, and for one worker, where DuckDB plans the query as written
(``PlannerOptions.whole_query_at_w1``)."""

from __future__ import annotations

import dataclasses
import time

from squall.driver.catalog.tables import Catalog
from squall.driver.frontend.bind import Binder, BoundQuery, aggregate_function_names
from squall.driver.frontend.boundary import Boundary
from squall.driver.frontend.pivot import plain_pivots
from squall.driver.ir import nodes as L
from squall.driver.logical.fallback import one_rank
from squall.driver.logical.rules import RULES as LOGICAL_RULES
from squall.driver.logical.rules import LogicalContext, result_columns
from squall.driver.logical.translate import Names, Planned, Translator
from squall.driver.options import PlannerOptions, run_rules, unknown_rules
from squall.driver.planner import RULES as PLANNER_RULES
from squall.driver.planner import Planner
from squall.driver.planning_gc import planning_gc
from squall.driver.sql import RULES as SQL_RULES
from squall.driver.sql import rewrite
from squall.errors import BindError, NotSupportedError, OptionError
from squall.operators.duck import Sandbox
from squall.plan import Plan, ScanInput


def compile_sql(
    catalog: Catalog,
    sql: str,
    world_size: int,
    options: PlannerOptions | None = None,
    db: Sandbox | None = None,
    timings: dict[str, float] | None = None,
) -> Plan:
    """Plan ``sql`` for ``world_size`` workers; raises UserError subclasses for bad input.

    ``db`` is a driver-side sandbox to reuse across queries (one is made per call otherwise).
    ``timings``, when given, receives the seconds spent in each step: ``bind_s`` (DuckDB binds the
    query), ``translate_s`` (the SQL rules, translation and the logical rules; a failed attempt included
    when the query falls back to one rank) and ``plan_s`` (the distributed plan, its DuckDB type checks
    included); and each rule's own seconds, ``<stage>.<NAME>_s`` (``sql.qualify_s``, ``planner.joins_s``…).
    """
    if options is not None and (problem := unknown_rules(options, SQL_RULES, LOGICAL_RULES, PLANNER_RULES)):
        raise OptionError(problem)
    try:
        with planning_gc(), Boundary(sql) as boundary:  # a bug: one InternalError line, its traceback logged
            plan = _compile(catalog, sql, world_size, options, db, timings, boundary)
    finally:
        L.forget_generated()
    return plan


def translate_sql(catalog: Catalog, sql: str, db: Sandbox | None = None) -> tuple[Planned, Names]:
    """The logical plan of ``sql`` as the translator makes it, before the logical rules, and the internal names
    it gave out (for tests and tools): bind, the SQL rules, translate."""
    binder = Binder(catalog, db)
    rewritten, _notes = rewrite(binder.bind(sql).ast, catalog)
    translator = Translator(catalog, set(aggregate_function_names()), binder.bind)
    return translator.translate(rewritten), translator.names


def _compile(
    catalog: Catalog,
    sql: str,
    world_size: int,
    options: PlannerOptions | None,
    db: Sandbox | None,
    timings: dict[str, float] | None,
    boundary: Boundary,
) -> Plan:
    spent = timings if timings is not None else {}
    t0 = time.perf_counter()
    binder = Binder(catalog, db)
    pivots = plain_pivots(sql, binder)  # PIVOT/UNPIVOT with IN lists as SQL the planner distributes
    bound = binder.bind(pivots.sql)
    t1 = time.perf_counter()
    spent["bind_s"] = t1 - t0
    if world_size == 1 and (options or PlannerOptions()).whole_query_at_w1:
        boundary.step, boundary.locate = "planning", None
        return _on_one_rank(catalog, bound, L.WHOLE_QUERY_AT_W1, world_size, options, db, spent, pivots.notes)
    translator = Translator(catalog, set(aggregate_function_names()), binder.bind)
    try:
        boundary.step, boundary.locate = "translating", translator.position
        rewritten, said_by_sql = rewrite(bound.ast, catalog, options, spent)
        translator.notes.extend(said_by_sql)
        planned = translator.translate(rewritten)
        if len(planned.outputs) != len(bound.names):
            raise NotSupportedError(f"{len(bound.names)} result columns planned as {len(planned.outputs)}")
        opts = options or PlannerOptions()
        logical = LogicalContext(catalog, opts, translator.names.fresh)
        node = run_rules("logical", LOGICAL_RULES, planned.node, logical, opts, spent, result_columns)
        t2 = time.perf_counter()
        spent["translate_s"] = t2 - t1
        boundary.step, boundary.locate = "planning", None
        plan = Planner(catalog, world_size, options, db, spent).plan(
            bound, Planned(node, planned.outputs), translator.names
        )
        said = [*logical.notes, *(c.note for c in logical.coalesced)]
        if logical.uncoalesced is not None and not all(
            c.shared_in(_scanned_names(plan)) for c in logical.coalesced
        ):
            # the joins' sides were cut apart after all: plan the subqueries as written (see coalesce.py)
            plan = Planner(catalog, world_size, options, db, spent).plan(
                bound, Planned(logical.uncoalesced, planned.outputs), translator.names
            )
            said = [*logical.notes, *(c.apart_note() for c in logical.coalesced)]
        if translator.notes or pivots.notes or said:  # decorrelation, PIVOT and coalescing are said too
            notes = (*pivots.notes, *dict.fromkeys(translator.notes), *said)
            plan = dataclasses.replace(plan, notes=(*notes, *plan.notes))
        spent["plan_s"] = time.perf_counter() - t2
        return plan
    except (NotSupportedError, BindError) as err:
        # DuckDB bound the query, so this is Squall's limit, not the user's error: run it on one rank
        reason = str(err).removeprefix("not supported: ")
    boundary.step, boundary.locate = "planning the one-rank fallback", None
    spent["translate_s"] = time.perf_counter() - t1
    return _on_one_rank(catalog, bound, reason, world_size, options, db, spent, pivots.notes)


def _scanned_names(plan: Plan) -> set[str]:
    """The internal column names the plan's scans read."""
    return {
        name for st in plan.stages for i in st.inputs if isinstance(i, ScanInput) for _src, name in i.columns
    }


def _on_one_rank(
    catalog: Catalog,
    bound: BoundQuery,
    reason: str,
    world_size: int,
    options: PlannerOptions | None,
    db: Sandbox | None,
    spent: dict[str, float],
    notes: tuple[str, ...],
) -> Plan:
    """The whole query as one :class:`~squall.driver.ir.nodes.OneRank` part (its tables scanned by Squall)."""
    t0 = time.perf_counter()
    names = Names()
    node, outputs = one_rank(catalog, bound, names.fresh, reason)
    t1 = time.perf_counter()
    spent["translate_s"] = spent.get("translate_s", 0.0) + t1 - t0
    plan = Planner(catalog, world_size, options, db, spent).plan(bound, Planned(node, outputs), names)
    if notes:
        plan = dataclasses.replace(plan, notes=(*notes, *plan.notes))
    spent["plan_s"] = time.perf_counter() - t1
    return plan
