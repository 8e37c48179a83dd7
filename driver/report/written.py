"""``stats["written"]`` of a write: what the commit made visible, and what each rank wrote."""

from __future__ import annotations

from typing import Any


def written_stats(committed: dict[str, Any], reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The commit's totals (target, files, rows, bytes) with ``per_rank``: each writing rank's files, rows,
    bytes and seconds (skew shows here, not in the totals)."""
    per_rank = [
        {"rank": r["rank"], **{k: w[k] for k in ("files", "rows", "bytes", "write_s") if k in w}}
        for r in reports
        if (w := r.get("written"))
    ]
    return {**committed, "per_rank": per_rank}
