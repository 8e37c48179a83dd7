"""Rewrites of the logical plan, run in the order of :data:`RULES` by :func:`squall.driver.options.run_rules`.

Each rule module has ``apply(node, context) -> node`` (a :class:`LogicalContext`), a docstring with an example,
and a fixture file ``tests/fixtures/logical/<NAME>.sql`` (SQL → the logical plan after the rule). Why this order:

- :mod:`.shared_filters` and :mod:`.join_constants` first: they move filters down (the second sees the
  constants the first moved into scans);
- :mod:`.prune` next: every node keeps only the columns someone above reads, so the rules after it see
  the narrow plan (and the join sides that only their own filters read are narrowed before they move);
- :mod:`.eager_aggregation` next: it needs pruned aggregates to see which columns the many side carries;
- :mod:`.coalesce` last: it merges two semi/anti joins' scans, after which no rule may move either side; the
  plan before it is kept (:attr:`LogicalContext.uncoalesced`) in case the planner cuts the sides apart.

Imports: the IR, the catalog, estimates; never the planner.
"""

from __future__ import annotations

from squall.driver.logical.rules import coalesce, eager_aggregation, join_constants, prune, shared_filters
from squall.driver.logical.rules.context import LogicalContext, result_columns

RULES = (shared_filters, join_constants, prune, eager_aggregation, coalesce)

__all__ = ["RULES", "LogicalContext", "result_columns"]
