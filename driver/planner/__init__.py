"""The distributed planner: logical plan → stages separated by exchanges.

The walk goes bottom-up, tracking how each intermediate result lies over the
ranks (a :class:`~squall.driver.planner.core.Dist`), and cuts a stage (an
exchange) only where an operator needs another distribution; the result is
gathered to rank 0. Each decision is one rule module, tried in the order of
:data:`RULES` (the first whose ``NODES`` match a node plans it, like sqlglot's
optimizer ``RULES``):

- :mod:`.scans`: row-group splits per rank, replicated scans of small tables
  (:mod:`.steal` decides which split scans get work stealing);
- :mod:`.filters`: filters and projections, in place;
- :mod:`.join_filters`: join filters (Bloom filter / key set of the build keys at the probe scans), then
  :mod:`.joins`;
- :mod:`.joins`: broadcast, co-located or hash-partitioned joins;
- :mod:`.aggregates`: partial/final split, gather or hash, complete in place;
- :mod:`.sort`: ORDER BY without LIMIT, gathered to rank 0 or range-partitioned over the ranks;
- :mod:`.topk`: LIMIT (with or without ORDER BY) on rank 0 after a local top-k;
- :mod:`.setops`: UNION ALL in place, the others by value;
- :mod:`.windows`: by PARTITION BY, or on rank 0;
- :mod:`.onerank`: the fallback for a part with no distributed plan: its inputs to rank 0,
  DuckDB runs the part there (said in the plan's and the stages' notes).

:mod:`.core` holds the distributions and the context that cuts and type-checks
stages; :mod:`.exprs` the expression helpers. Imports: the logical plan, the
catalog, ``squall.plan`` and the DuckDB sandbox; nothing imports back.
"""

from __future__ import annotations

from squall.driver.catalog.tables import Catalog
from squall.driver.frontend.bind import BoundQuery
from squall.driver.logical.translate import Names, Planned
from squall.driver.options import PlannerOptions
from squall.driver.planner import runtime
from squall.driver.planner.core import Context
from squall.driver.planner.rules import (
    aggregates,
    filters,
    join_filters,
    joins,
    onerank,
    scans,
    setops,
    sort,
    topk,
    windows,
)
from squall.operators.duck import Sandbox
from squall.plan import Plan

RULES = (scans, filters, join_filters, joins, aggregates, sort, topk, setops, windows, onerank)

__all__ = ["RULES", "Planner"]


class Planner(Context):
    """Builds a :class:`Plan` for one bound query and a world size."""

    def __init__(
        self,
        catalog: Catalog,
        world_size: int,
        options: PlannerOptions | None = None,
        db: Sandbox | None = None,
        breakdown: dict[str, float] | None = None,
    ) -> None:
        super().__init__(catalog, world_size, options, db, RULES, breakdown)

    def plan(self, bound: BoundQuery, planned: Planned, names: Names) -> Plan:
        self._names = names
        try:
            self.top_sort = sort.top_sort(planned.node)
            node, dist = self.build(planned.node)
            if dist.kind == "range":  # sorted ranges: one result part per rank, in rank order
                final = self.result_stage(node, bound, tuple(range(self.world)))
            else:
                if dist.kind != "single" and self.world > 1:
                    node = self.gather(node, dist, "result to rank 0")
                final = self.result_stage(node, bound)
        finally:
            if self._own_db:
                self._db.close()
        self.stages.append(final)
        runtime.finish(self)
        self.fix_receivers()
        return Plan(
            sql=bound.sql,
            world_size=self.world,
            stages=tuple(self.stages),
            result_names=bound.names,
            result_types=bound.types,
            notes=tuple(self.notes),
        )
