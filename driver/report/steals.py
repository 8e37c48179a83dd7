"""``Result.stats["steals"]``: what work stealing did, per scan and per rank (``operators/steal.py``)."""

from __future__ import annotations

from typing import Any


def steal_stats(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per stealing scan: totals (``splits`` planned, ``read``, ``stolen``, ``claims``,
    ``lists``) and ``per_rank`` (planned, read, own, stolen, ``stolen_from`` {victim: n}, lost,
    reclaimed, rows, claims, lists), ranks in order. Empty when no scan stole."""
    scans: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for report in sorted(reports, key=lambda r: r["rank"]):
        for entry in report.get("steals", []):
            scans.setdefault((entry["stage"], entry["scan"]), []).append(dict(entry, rank=report["rank"]))
    out = []
    for (stage, scan), ranks in sorted(scans.items()):
        out.append(
            {
                "stage": stage,
                "scan": scan,
                "splits": sum(r["planned"] for r in ranks),
                "read": sum(r["read"] for r in ranks),
                "stolen": sum(r["stolen"] for r in ranks),
                "claims": sum(r["claims"] for r in ranks),
                "lists": sum(r["lists"] for r in ranks),
                "enabled": all(r.get("enabled", True) for r in ranks),
                "per_rank": [
                    {k: v for k, v in r.items() if k not in ("stage", "scan", "nbytes", "enabled")}
                    for r in ranks
                ],
            }
        )
    return out
