"""``Result.stats["join_filters"]``: what each join filter removed, summed over the ranks."""

from __future__ import annotations

from typing import Any

from squall.plan import Plan


def join_filter_stats(plan: Plan, reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per join filter: rows before it (the filtered scan's row groups: before the scan's own
    filters too), after it, removed (by both), and the bytes that did not leave the probe stage (rows removed
    x the stage's average output row size: an estimate)."""
    out = []
    for stage in plan.stages:
        per_rank = [s for r in reports for s in r["stages"] if s["stage"] == stage.id]
        rows_out = sum(s["rows_out"] for s in per_rank)
        bytes_out = sum(s["bytes_out"] for s in per_rank)
        for label, *_sql in stage.join_filters:
            counts = [s.get("join_filters", {}).get(label, [0, 0]) for s in per_rank]
            before = sum(c[0] for c in counts)
            after = sum(c[1] for c in counts)
            removed = before - after
            sent = stage.output.kind not in ("result",)
            out.append(
                {
                    "filter": label,
                    "stage": stage.id,
                    "rows_before": before,
                    "rows_after": after,
                    "rows_removed": removed,
                    "per_rank_removed": [c[0] - c[1] for c in counts],
                    "bytes_not_sent_est": int(removed * bytes_out / rows_out) if sent and rows_out else 0,
                }
            )
    return out
