"""Per-rank row counts that show where a query's rows were held and sorted.

``peak_rows`` of a rank is the largest table it held in one stage: the most of that stage's rows
in, rows out and rows received (an upper bound of what it held at once, per stage). For a
range-partitioned ORDER BY (an output of kind ``range``) ``rows_sorted`` is what the rank sorted
(its range: the rows in of the stage that reads the range exchange) and ``sampled`` the keys it
contributed to the splitters; :func:`sort_stats` adds the totals and the sample round's bytes.
"""

from __future__ import annotations

from typing import Any

from squall.operators.rangepart import sample_exchange_id
from squall.plan import ExchangeInput, Plan


def _range_stages(plan: Plan) -> tuple[set[int], set[int]]:
    """(ids of range-output stages, ids of the stages reading them)."""
    ranged = {s.id for s in plan.stages if s.output.kind == "range"}
    readers = {
        s.id for s in plan.stages for i in s.inputs if isinstance(i, ExchangeInput) and i.stage in ranged
    }
    return ranged, readers


def rank_rows(plan: Plan, report: dict[str, Any]) -> dict[str, int]:
    """``peak_rows`` (and for a range sort ``rows_sorted``, ``sampled``) of one rank's report."""
    stages = report["stages"]
    out = {
        "peak_rows": max(
            (max(s["rows_in"], s["rows_out"], s.get("rows_received", 0)) for s in stages), default=0
        )
    }
    ranged, readers = _range_stages(plan)
    if ranged:
        out["rows_sorted"] = sum(s["rows_in"] for s in stages if s["stage"] in readers)
        out["sampled"] = sum(s.get("sampled", 0) for s in stages if s["stage"] in ranged)
    return out


def sort_stats(plan: Plan, reports: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The range sort's facts for ``Result.stats["sort"]`` (None when the plan has none)."""
    ranged, _readers = _range_stages(plan)
    if not ranged:
        return None
    per_rank = [rank_rows(plan, r) for r in reports]
    sample_ids = {sample_exchange_id(s) for s in ranged}
    samples = [
        e
        for r in reports
        for e in r["exchange"].get("per_exchange", [])
        if e.get("exchange_id") in sample_ids
    ]
    return {
        "method": "range",
        "rows_sorted_per_rank": [p["rows_sorted"] for p in per_rank],
        "peak_rows_per_rank": [p["peak_rows"] for p in per_rank],
        "sampled_keys": sum(p["sampled"] for p in per_rank),
        "sample_bytes_sent": sum(e.get("bytes_sent", 0) for e in samples),
    }
