"""Work stealing: which scans' splits ranks may steal from each other (I-Store, ``operators/steal.py``).

With ``PlannerOptions.work_stealing`` a scan is marked ``steal`` when it is safe and pays:

- safe: the scan is split over the ranks (not replicated) and read by the ``parquet`` operator.
  A split scan's rows lie on the ranks at random (``Dist("random")``): joins co-locate only on hash
  distributions made by exchanges, and the one rule that relies on which rank holds which split (an
  aggregate completed in place by the splits' key ranges, ``planner/aggregates.py``) skips stealing
  scans — so any assignment that reads every split once is as correct as the planned one;
- pays: there are more row groups than ranks, so some rank has a queue of two or more.

A stealing scan keeps one split per row group (the work elements; contiguous row groups are not
merged) in the same contiguous, balanced chunks per rank as any scan. ``squall explain`` shows
"work stealing" on the scan.
"""

from __future__ import annotations

from squall.driver.catalog.tables import TableInfo
from squall.driver.planner.core import Context


def stealable(ctx: Context, info: TableInfo, row_groups: int, replicated: bool) -> bool:
    """Whether the scan of ``info`` (``row_groups`` after pruning) gets work stealing (module doc)."""
    return (
        bool(ctx.options.work_stealing)
        and ctx.world > 1
        and not replicated
        and info.scan == "parquet"
        and row_groups > ctx.world
    )
