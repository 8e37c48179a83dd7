"""Query statistics: per-stage, per-worker and total counters from the workers' reports."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from squall.driver.report.exchanges import exchange_balance
from squall.driver.report.join_filters import join_filter_stats
from squall.driver.report.sort import rank_rows, sort_summary
from squall.driver.report.steals import summarize_steals
from squall.plan import Plan


def _sum_dicts(dicts: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def summarize(
    plan: Plan,
    reports: list[dict[str, Any]],
    result: pa.Table,
    *,
    query_id: str,
    platform: str,
    elapsed_s: float,
    planning_s: float,
    execution_s: float,
) -> dict[str, Any]:
    """The ``Result.stats`` dict (documented in the README)."""
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
            }
        )
    workers = [
        {
            "rank": r["rank"],
            "elapsed_s": r["elapsed_s"],
            "rows_scanned": sum(s["rows_scanned"] for s in r["stages"]),
            "bytes_scanned": sum(s["bytes_scanned"] for s in r["stages"]),
            "rows_out": sum(s["rows_out"] for s in r["stages"]),
            "storage_requests": r["storage_requests"],
            "exchange_requests": r["exchange"].get("requests", {}),
            **rank_rows(plan, r),  # peak_rows (+ rows_sorted, sampled for a range sort)
        }
        for r in reports
    ]
    exchanges = []
    for stage in plan.stages:
        if stage.output.kind == "result":
            continue
        entries = [
            e
            for r in reports
            for e in r["exchange"].get("per_exchange", [])
            if e.get("exchange_id") == stage.id
        ]
        merged: dict[str, Any] = {
            "stage": stage.id,
            "kind": stage.output.kind,
            "senders": len(stage.output.senders),
            "receivers": len(stage.output.receivers),
        }
        for e in entries:
            for k, v in e.items():
                if k in ("levels", "schedule_phases"):  # the same on every rank, not counters
                    merged[k] = max(merged.get(k, 0), v)
                elif isinstance(v, (int, float)) and k not in ("exchange_id", "senders", "receivers"):
                    merged[k] = merged.get(k, 0) + v
                elif k not in merged and k not in ("exchange_id",):
                    merged[k] = v
        merged.update(exchange_balance(stage, reports))
        exchanges.append(merged)
    return {
        "query_id": query_id,
        "platform": platform,
        "workers": plan.world_size,
        "notes": list(plan.notes),
        "elapsed_s": elapsed_s,
        "planning_s": planning_s,
        "execution_s": execution_s,
        "rows": result.num_rows,
        "result_bytes": result.nbytes,
        "rows_scanned": sum(s["rows_scanned"] for s in stages),
        "bytes_scanned": sum(s["bytes_scanned"] for s in stages),
        "storage_requests": _sum_dicts([r["storage_requests"] for r in reports]),
        "exchange_requests": _sum_dicts([r["exchange"].get("requests", {}) for r in reports]),
        "exchanges": exchanges,
        "steals": summarize_steals(reports),
        "join_filters": join_filter_stats(plan, reports),
        "stages": stages,
        "per_worker": workers,
        **({"sort": sort} if (sort := sort_summary(plan, reports)) else {}),
    }
