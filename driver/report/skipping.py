"""``Result.stats["data_skipping"]``: row groups skipped per scan (min/max, page index, Bloom, predicate cache)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from squall.plan import Plan, ScanInput

_COUNTS = ("planned", "minmax", "page_index", "bloom", "cache")


def skipping_stats(plan: Plan, reports: Iterable[dict[str, Any]], learned: int = 0) -> dict[str, Any]:
    """Per scan: row groups planned (in the table), skipped by each method, read, probed for the
    predicate cache, found empty/matching by the probe (summed over ranks) and the probe's seconds
    (slowest rank); totals over all scans; ``learned``: cache entries this query added or refreshed."""
    reports = list(reports)
    scans = []
    for stage in plan.stages:
        for inp in stage.inputs:
            if not isinstance(inp, ScanInput) or inp.skipping is None:
                continue
            sk = inp.skipping
            outcomes = [r["skipping"][inp.name] for r in reports if inp.name in (r.get("skipping") or {})]
            scans.append(
                {
                    "scan": inp.name,
                    "table": inp.table,
                    "stage": stage.id,
                    **{k: getattr(sk, k) for k in _COUNTS},
                    "read": sk.planned - sk.minmax - sk.page_index - sk.bloom - sk.cache,
                    "probed": len(sk.probe),
                    "probe_empty": sum(len(o["empty"]) for o in outcomes),
                    "probe_matched": sum(len(o["matched"]) for o in outcomes),
                    "probe_s": max((o["probe_s"] for o in outcomes), default=0.0),
                    "probe_note": sk.probe_note,
                }
            )
    total = {
        k: sum(s[k] for s in scans) for k in (*_COUNTS, "read", "probed", "probe_empty", "probe_matched")
    }
    return {"scans": scans, "total": total, "learned": learned}
