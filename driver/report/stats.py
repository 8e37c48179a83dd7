"""``Result.stats``: the whole dict, assembled in one place by :func:`assemble` (keys in the README).

The plan and the workers' reports give the counters; :class:`QueryFacts` carries what only the connection
knows (ids, wall times, the plan cache, the driver's own requests, what the predicate cache learned, the
platform's extras, the scale model's estimate). Keys, in this order:

- ``query_id``, ``platform``, ``workers``, ``notes``, ``elapsed_s``, ``planning_s``, ``execution_s``,
  ``rows``, ``result_bytes``; ``rows_scanned``, ``bytes_scanned`` (over the stages);
  ``storage_requests``, ``exchange_requests`` (over the ranks);
- ``exchanges`` (:mod:`.exchanges`), ``steals`` (:mod:`.steals`), ``join_filters`` (:mod:`.join_filters`);
- ``stages``, ``per_worker`` (here; a rank's ``peak_rows`` etc. from :mod:`.sort`, its memory budget, peak
  memory and spilled bytes), ``memory`` (here), ``sort`` (:mod:`.sort`, only for a range-partitioned ORDER BY);
- ``driver_storage_requests``, ``data_skipping`` (:mod:`.skipping`), ``sources`` (:mod:`.sources`), ``plan_cache``,
  ``planning_breakdown``, ``ran_on``;
- the platform's extras (the lambda platforms: ``lambda`` and the cost keys), then ``estimate`` when
  the scale model gave one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from squall.driver.report.exchanges import exchange_stats
from squall.driver.report.join_filters import join_filter_stats
from squall.driver.report.skipping import skipping_stats
from squall.driver.report.sort import rank_rows, sort_stats
from squall.driver.report.sources import source_stats
from squall.driver.report.steals import steal_stats
from squall.plan import Plan


@dataclass(frozen=True)
class QueryFacts:
    """What the connection knows of one query beside its plan, its reports and its result."""

    query_id: str
    #: the platform's name (``local``, ``fabric``, ``lambda``, ``lambda-local``)
    platform: str
    elapsed_s: float
    planning_s: float
    execution_s: float
    #: "driver" (a plan that reads no table, answered by the driver's sandbox) or "workers"
    ran_on: str
    #: "hit", "miss" or "n/a" (``workers="auto"`` on a lambda platform)
    plan_cache: str
    #: seconds by planning step (``cache_s``, ``bind_s``, …; ``pivot_values_s`` for a dynamic PIVOT)
    planning_breakdown: dict[str, float]
    #: the driver's own storage requests while planning, by type
    driver_storage_requests: dict[str, int]
    #: predicate-cache entries this query added or refreshed (``data_skipping["learned"]``)
    cache_learned: int = 0
    #: the platform's own keys (``Execution.details``: the lambda platforms' ``lambda`` and cost)
    details: Mapping[str, Any] = field(default_factory=dict)
    #: the scale model's prediction (``stats["estimate"]``), None when it gave none
    estimate: dict[str, Any] | None = None


def assemble(
    plan: Plan, reports: list[dict[str, Any]], result: pa.Table, facts: QueryFacts
) -> dict[str, Any]:
    """The ``Result.stats`` dict of a query that ran ``plan``: the workers' ``reports`` (one per rank),
    its ``result`` table and the connection's ``facts`` (documented in the README)."""
    stages = stage_stats(plan, reports)
    stats: dict[str, Any] = {
        "query_id": facts.query_id,
        "platform": facts.platform,
        "workers": plan.world_size,
        "notes": list(plan.notes),
        "elapsed_s": facts.elapsed_s,
        "planning_s": facts.planning_s,
        "execution_s": facts.execution_s,
        "rows": result.num_rows,
        "result_bytes": result.nbytes,
        "rows_scanned": sum(s["rows_scanned"] for s in stages),
        "bytes_scanned": sum(s["bytes_scanned"] for s in stages),
        "storage_requests": _sum_dicts([r["storage_requests"] for r in reports]),
        "exchange_requests": _sum_dicts([r["exchange"].get("requests", {}) for r in reports]),
        "exchanges": exchange_stats(plan, reports),
        "steals": steal_stats(reports),
        "join_filters": join_filter_stats(plan, reports),
        "stages": stages,
        "per_worker": worker_stats(plan, reports),
        "memory": memory_stats(reports),
    }
    sort = sort_stats(plan, reports)
    if sort:
        stats["sort"] = sort
    stats["driver_storage_requests"] = facts.driver_storage_requests
    stats["data_skipping"] = skipping_stats(plan, reports, facts.cache_learned)
    stats["sources"] = source_stats(plan)
    stats["plan_cache"] = facts.plan_cache
    stats["planning_breakdown"] = facts.planning_breakdown
    stats["ran_on"] = facts.ran_on
    stats.update(facts.details)
    if facts.estimate is not None:
        stats["estimate"] = facts.estimate
    return stats


def stage_stats(plan: Plan, reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``stats["stages"]``: per stage, rows and bytes summed over its ranks and times of the slowest rank
    (scan, compute, send and partition times over the ranks that ran it: had rows in or took time) and the most
    DuckDB threads a rank ran it with (more than its share when it ran on fewer ranks than the others wait on)."""
    stages = []
    for stage in plan.stages:
        per_rank = [s for r in reports for s in r["stages"] if s["stage"] == stage.id]
        ran = [s for s in per_rank if s["rows_in"] or s["compute_s"] or s["scan_s"]]
        stages.append(
            {
                "stage": stage.id,
                "ranks": len(stage.ranks),
                "output": stage.output.kind,
                "note": stage.note,
                "rows_scanned": sum(s["rows_scanned"] for s in per_rank),
                "bytes_scanned": sum(s["bytes_scanned"] for s in per_rank),
                "rows_in": sum(s["rows_in"] for s in per_rank),
                "rows_out": sum(s["rows_out"] for s in per_rank),
                "bytes_out": sum(s["bytes_out"] for s in per_rank),
                "time_s": max((s["time_s"] for s in per_rank), default=0.0),
                "scan_s": max((s["scan_s"] for s in ran), default=0.0),
                "compute_s": max((s["compute_s"] for s in ran), default=0.0),
                "send_s": max((s["send_s"] for s in ran), default=0.0),
                "partition_s": max((s.get("partition_s", 0.0) for s in ran), default=0.0),
                "receive_s": max((s["receive_s"] for s in per_rank), default=0.0),
                "threads": max((s.get("threads", 0) for s in ran), default=0),
            }
        )
    return stages


def worker_stats(plan: Plan, reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``stats["per_worker"]``: per rank (in report order), its elapsed time, rows and bytes scanned, rows
    out, requests and ``peak_rows`` (+ ``rows_sorted``, ``sampled`` for a range sort)."""
    return [
        {
            "rank": r["rank"],
            "elapsed_s": r["elapsed_s"],
            "rows_scanned": sum(s["rows_scanned"] for s in r["stages"]),
            "bytes_scanned": sum(s["bytes_scanned"] for s in r["stages"]),
            "rows_out": sum(s["rows_out"] for s in r["stages"]),
            "storage_requests": r["storage_requests"],
            "exchange_requests": r["exchange"].get("requests", {}),
            **rank_rows(plan, r),
            **_rank_memory(r),
        }
        for r in reports
    ]


def _rank_memory(report: dict[str, Any]) -> dict[str, Any]:
    memory = report.get("memory") or {}
    return {
        "memory_budget_bytes": memory.get("budget_bytes"),
        "peak_memory_bytes": memory.get("peak_bytes", 0),
        "spilled_bytes": memory.get("spilled_bytes", 0),
        "received_to_disk_bytes": memory.get("received_to_disk_bytes", 0),
        "held_to_disk_bytes": memory.get("held_to_disk_bytes", 0),
    }


def memory_stats(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """``stats["memory"]``: each worker's budget (None: none set), the largest peak of any rank (its process's
    resident memory) and which rank had it, the spill folders' most bytes summed over the ranks, the bytes of
    received inputs the ranks wrote to disk rather than hold (operators/received.py), and of stage outputs held
    on disk for a run-time join or skew-aware exchange's decision."""
    ranks = [(r["rank"], _rank_memory(r)) for r in reports]
    top = max(ranks, key=lambda item: item[1]["peak_memory_bytes"], default=(None, _rank_memory({})))
    budgets = {m["memory_budget_bytes"] for _rank, m in ranks}
    return {
        "budget_per_worker_bytes": max((b for b in budgets if b), default=None),
        "peak_bytes": top[1]["peak_memory_bytes"],
        "peak_rank": top[0],
        "spilled_bytes": sum(m["spilled_bytes"] for _rank, m in ranks),
        "received_to_disk_bytes": sum(m["received_to_disk_bytes"] for _rank, m in ranks),
        "held_to_disk_bytes": sum(m["held_to_disk_bytes"] for _rank, m in ranks),
    }


def _sum_dicts(dicts: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out
