"""Explain text of an exchange's special handling, read off the plan's :class:`~squall.plan.Output`.

- :func:`describe_skew`: a skew-aware hash exchange (``squall.driver.planner.skew`` marks it: partitions,
  assignment, heavy hitters, NULL keys, the run-time broadcast) or one split by key ranges;
- :func:`describe_runtime`: one side of a run-time join decision (``squall.driver.planner.runtime``).

Both return text appended to the exchange's line in ``squall explain`` ('' for a plain exchange).
"""

from __future__ import annotations

from squall.driver.options import megabytes
from squall.plan import Output


def describe_skew(output: Output) -> str:
    """The explain text of a skew-aware exchange ('' for a plain one)."""
    if output.split_ranges:
        spans = ", ".join(f"≥{lo} → rank {rank}" for lo, rank in output.split_ranges)
        return f"; the ranges each rank's scan splits hold (Parquet statistics: {spans}): rows stay, no histogram round"
    if not output.partitions:
        return ""
    heavy = output.heavy
    text = (
        f"; skew-aware: partitions={output.partitions}, assignment=histogram+locality, group {output.group}"
    )
    if output.range_sql:
        text += f", by hash or by key range in [{output.range_lo}, {output.range_hi}] (whichever keeps more local)"
    if heavy == "either":
        text += ", heavy hitters: selective broadcast (hot side keeps, other side broadcasts)"
    elif heavy == "preserved":
        text += (
            ", heavy hitters: selective broadcast (hot keys' rows stay local; rows of the other side's hot"
            " keys to the ranks holding them)"
        )
    elif heavy == "null_supplied":
        text += (
            ", heavy hitters: selective broadcast (rows of the other side's hot keys to every rank; hot keys'"
            " rows stay at the ranks holding them)"
        )
    elif heavy == "keep":
        text += ", heavy hitters: selective broadcast (hot keys' rows stay local)"
    elif heavy == "broadcast":
        text += ", heavy hitters: selective broadcast (rows of the other side's hot keys to every rank)"
    else:
        text += ", heavy hitters: left to the assignment"
    if output.null_sql:
        text += "; rows with a NULL key " + ("stay where they are" if heavy == "preserved" else "are dropped")
        text += " (they match nothing)"
    if output.broadcast_limit > 0 and heavy in ("either", "broadcast", "null_supplied"):
        text += "; at run time this side goes whole to every rank if its bytes are the cheaper move"
    return text


def describe_runtime(output: Output) -> str:
    """The explain text of a run-time join's exchange ('' for others)."""
    join = output.runtime_join
    if not join:
        return ""
    limit = megabytes(output.runtime_limit)
    if output.runtime_role == "decides":
        return f"; broadcast or hash decided at run time from the actual size of this output, limit {limit}"
    return (
        f"; or stays where it is (no exchange), decided at run time from the actual size of stage {join}'s"
        f" output, limit {limit}"
    )
