"""Min/max row-group pruning: the row groups whose footer statistics may hold a row passing the filters.

Conservative: a row group is skipped only when its min/max statistics prove no row can pass (a column
without statistics, or values that do not compare, keep it). Called by the scan rule
(:mod:`squall.driver.planner.rules.scans`) before the page index, Bloom filters and the predicate cache
look at what is left (:mod:`squall.driver.planner.skipping`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlglot import exp

from squall.driver.catalog.literals import column_constraint
from squall.driver.catalog.tables import ColumnChunkStats, RowGroup, TableInfo


def _may_match(op: str, value: Any, stats: ColumnChunkStats) -> bool:
    lo, hi = stats.min, stats.max
    if lo is None or hi is None:
        return True
    try:
        if op == "eq":
            return lo <= value <= hi
        if op == "lt":
            return lo < value
        if op == "lte":
            return lo <= value
        if op == "gt":
            return hi > value
        if op == "gte":
            return hi >= value
        if op == "between":
            return not (hi < value[0] or lo > value[1])
        if op == "in":
            return any(lo <= v <= hi for v in value)
    except TypeError:
        return True
    return True


def prune_row_groups(
    table: TableInfo, source_of: Mapping[str, str], filters: Iterable[exp.Expression]
) -> list[RowGroup]:
    """Row groups of ``table`` that may hold rows passing every filter.

    ``source_of`` maps internal column names used in the filters to the
    table's column names.
    """
    constraints = []
    for f in filters:
        c = column_constraint(f)
        if c and c[0] in source_of:
            constraints.append((source_of[c[0]], c[1], c[2]))
    if not constraints:
        return list(table.row_groups)
    kept = []
    for rg in table.row_groups:
        if all(_may_match(op, v, rg.columns[c]) for c, op, v in constraints if c in rg.columns):
            kept.append(rg)
    return kept
