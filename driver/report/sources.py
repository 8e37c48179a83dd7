"""``Result.stats["sources"]``: per scan, what the table's source said of it (``ScanInput.source_notes``)."""

from __future__ import annotations

from typing import Any

from squall.plan import Plan, ScanInput


def source_stats(plan: Plan) -> list[dict[str, Any]]:
    """Per scan with notes: ``scan``, ``table``, ``stage`` and each note as a key (``partitions``: ``"1 of 7"``,
    ``files``: ``"3 of 21"``, ``schema``, ``snapshot``, … as the source gives them)."""
    out = []
    for stage in plan.stages:
        for inp in stage.inputs:
            if isinstance(inp, ScanInput) and inp.source_notes:
                out.append(
                    {"scan": inp.name, "table": inp.table, "stage": stage.id, **dict(inp.source_notes)}
                )
    return out
