"""``Result.stats["exchanges"]``: one entry per exchange, its counters summed over the ranks and its balance.

``Result.stats["exchanges"][i]`` is, for the exchange fed by stage ``stage``: ``stage``, ``kind``,
``senders``, ``receivers``, the exchange's own counters summed over the ranks (bytes and rows sent and
received; the S3 exchange's requests and bytes; ``levels`` and ``schedule_phases``, the same on every
rank, taken once) and its other facts as the first rank reported them (e.g. ``schedule``); then:

- ``rows_per_rank`` / ``bytes_per_rank``: what each receiver took in (in receiver order; its own rows
  included: they are work it does), from the workers' stage reports;
- ``skew``: max/mean of ``rows_per_rank`` (1.0 = perfectly even; 1.0 too when nothing moved);
- ``bytes_moved``: Arrow bytes the senders addressed to other ranks (what crossed the network; a
  sender's rows to itself stay local);
- for a skew-aware hash exchange (``squall.operators.skew``): ``partitions``, ``assignment``
  (how partitions were assigned), ``partitions_per_rank``, ``rows_kept_local`` (rows whose partition
  was assigned to the rank that produced them: they did not cross the network), ``heavy_hitters``
  (how many hot keys) and ``heavy_handling`` (what happened to their rows); after a run-time broadcast
  join (``assignment`` "run-time broadcast join"), ``run_time`` says what this side did ("broadcast to
  every rank" / "kept where it is") and ``heavy_handling`` the sizes that decided it;
- for a run-time join decision (``squall.operators.runtime_join``): ``run_time_join`` with ``decision``
  ("broadcast" / "hash", the same on every rank), ``role`` ("decides": the side whose size decided;
  "stays": the other), ``this_side`` (what this exchange did: "broadcast to every rank",
  "kept where it is (no exchange)", "hash-partitioned"), ``decided_by_rows``/``decided_by_bytes`` (the
  deciding side's actual rows and data bytes, summed over its senders), ``limit_bytes``, ``why`` and
  ``sizes_s`` (the slowest rank's sizes round).
"""

from __future__ import annotations

from typing import Any

from squall.driver.options import PlannerOptions
from squall.plan import Plan, Stage

#: explain --analyze says why a plain hash exchange above this skew (max/mean rows) moving at least
#: UNEVEN_MIN_BYTES had no skew handling
UNEVEN = 1.25
UNEVEN_MIN_BYTES = 1 << 20


def skew_factor(values: list[int]) -> float:
    """max/mean of ``values`` (1.0 for an empty list or all zeros)."""
    if not values or sum(values) == 0:
        return 1.0
    return max(values) / (sum(values) / len(values))


def exchange_stats(plan: Plan, reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per exchange (every stage whose output is not the result), in stage order."""
    return [_merged(stage, reports) for stage in plan.stages if stage.output.kind != "result"]


def _merged(stage: Stage, reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The exchange fed by ``stage``: its ranks' counters summed, then :func:`exchange_balance`."""
    entries = [
        e for r in reports for e in r["exchange"].get("per_exchange", []) if e.get("exchange_id") == stage.id
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
    return merged


def exchange_balance(stage: Stage, reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-rank receive figures and skew-handling summary of ``stage``'s exchange."""
    by_rank: dict[int, dict[str, Any]] = {}
    for r in reports:
        for s in r["stages"]:
            if s["stage"] == stage.id:
                by_rank[r["rank"]] = s
    receivers = stage.output.receivers
    rows = [int(by_rank.get(r, {}).get("rows_received", 0)) for r in receivers]
    nbytes = [int(by_rank.get(r, {}).get("bytes_received", 0)) for r in receivers]
    out: dict[str, Any] = {
        "rows_per_rank": rows,
        "bytes_per_rank": nbytes,
        "skew": round(skew_factor(rows), 4),
        "bytes_moved": sum(int(s.get("bytes_to_others", 0)) for s in by_rank.values()),
    }
    skews = [by_rank[r]["skew"] for r in sorted(by_rank) if by_rank[r].get("skew")]
    if skews:
        first = skews[0]  # every rank computed the same assignment; counters differ per rank
        out["partitions"] = first["partitions"]
        out["assignment"] = first["assignment"]
        out["partitions_per_rank"] = first["partitions_per_rank"]
        out["rows_kept_local"] = sum(s["rows_kept_local"] for s in skews)
        out["rows_moved"] = sum(s["rows_moved"] for s in skews)
        out["heavy_hitters"] = first["heavy_hitters"]
        out["heavy_handling"] = first["heavy_handling"]
        out["heavy_rows_kept"] = sum(s["heavy_rows_kept"] for s in skews)
        out["heavy_rows_broadcast"] = sum(s["heavy_rows_broadcast"] for s in skews)
        out["histogram_s"] = max(s["histogram_s"] for s in skews)
        for key in ("null_key_rows_dropped", "null_key_rows_kept_local"):  # outer joins' NULL keys
            if any(key in s for s in skews):
                out[key] = sum(s.get(key, 0) for s in skews)
        if "run_time" in first:
            out["run_time"] = first["run_time"]
    decided = [by_rank[r]["runtime"] for r in sorted(by_rank) if by_rank[r].get("runtime")]
    if decided:  # every rank took the same decision from the same sizes
        out["run_time_join"] = {**decided[0], "sizes_s": max(d["sizes_s"] for d in decided)}
    return out


def format_exchanges(stats: dict[str, Any]) -> str:
    """One line per exchange: kind, rows per rank and the skew factor (``squall explain --analyze``)."""
    lines = ["Exchanges (rows received per rank, skew = max/mean):"]
    for e in stats.get("exchanges", []):
        rows = e.get("rows_per_rank", [])
        text = f"  stage {e['stage']} {e['kind']}: rows {rows} skew {e.get('skew', 1.0):.2f}"
        if "run_time_join" in e:
            rt = e["run_time_join"]
            text += f"; run-time join decision: {rt['decision']} ({rt['why']}), this side {rt['this_side']}"
        if "run_time" in e:
            text += f"; run-time broadcast join: {e['run_time']}, rows moved {e['rows_moved']}"
        elif "assignment" in e:
            text += (
                f"; partitions={e['partitions']} assignment={e['assignment']}"
                f" partitions/rank {e['partitions_per_rank']} rows kept local {e['rows_kept_local']}"
                f" moved {e['rows_moved']}"
            )
            if e["heavy_hitters"]:
                text += f"; heavy hitters: {e['heavy_hitters']} ({e['heavy_handling']})"
            if "null_key_rows_dropped" in e:
                text += f"; NULL-key rows dropped {e['null_key_rows_dropped']} (they match nothing)"
            if "null_key_rows_kept_local" in e:
                text += f"; NULL-key rows kept local {e['null_key_rows_kept_local']} (they match nothing)"
        elif (
            e["kind"] == "hash"
            and e.get("skew", 1.0) > UNEVEN
            and e.get("bytes_moved", 0) >= UNEVEN_MIN_BYTES
        ):
            text += (
                "; plain hash % W, no skew handling here (skew-aware joins start at PlannerOptions.skew_min_bytes,"
                f" {PlannerOptions().skew_min_bytes / 1e6:.0f} MB by default, of estimated join input; times the"
                " ranks per core where local workers outnumber cores: see the plan's notes)"
            )
        if e.get("schedule"):  # the fabric exchange's communication schedule (or why there is none)
            text += f"; schedule {e['schedule']}"
        lines.append(text)
    return "\n".join(lines)
