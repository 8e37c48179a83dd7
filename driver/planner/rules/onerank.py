"""The one-rank fallback (:class:`~squall.driver.ir.nodes.OneRank`): its inputs gathered to rank 0,
where DuckDB runs the part's own SQL. The plan's notes and the gathering stages' notes say
which part runs on one rank and why."""

from __future__ import annotations

from squall.driver.ir import nodes as L
from squall.driver.planner.core import SINGLE, Context, Dist

REQUIRED = True  # no other rule plans these nodes
NODES = (L.OneRank,)


def plan(ctx: Context, node: L.OneRank) -> tuple[L.Node, Dist]:
    what = f"one rank ({node.reason})"
    inputs = []
    for table, child in zip(node.tables, node.inputs):
        built, dist = ctx.build(child)
        if ctx.world > 1 and dist.kind != "single":
            built = ctx.gather(built, dist, f"{what}: {table} to rank 0")
        inputs.append(built)
    if node.reason == L.WHOLE_QUERY_AT_W1:
        reads = f" over Squall's scans of {', '.join(node.tables)}" if node.tables else ""
        ctx.notes.append(f"{node.reason}: one stage{reads} (PlannerOptions.whole_query_at_w1)")
    else:
        reads = f", over {', '.join(node.tables)} gathered there" if node.tables else " (it reads no table)"
        ctx.notes.append(f"{what}: DuckDB runs this part on rank 0 only{reads}")
    return L.OneRank(node.sql, node.tables, node.columns, tuple(inputs), node.out, node.reason), SINGLE
