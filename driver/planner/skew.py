"""Skew-aware hash joins (Neo-Join): mark a join's two hash exchanges as one co-partition group.

Applies to a join both of whose sides move by key (neither is already partitioned to match) when
``PlannerOptions.skew_handling`` is on and the two sides are estimated at ``skew_min_bytes`` or more
(smaller joins keep plain ``hash % W``: the histogram round would cost more than any imbalance). The
two exchanges then partition into ``skew_partitions_per_rank * W`` radix partitions and share one
assignment computed at run time (``squall.operators.skew``), so equal keys still meet on one rank.

Heavy hitters are handled by selective broadcast where the join allows it: the side whose rows are
kept must be one whose unmatched rows need no other rank (inner: either side; left, semi, anti: the
left side; right: the right side), and the other side's rows of a hot key go to every rank. A full
outer join gets the assignment only. The join's output is then no longer partitioned by its key (a
hot key's rows are on every rank): the join's output :class:`Dist` names the group, and a later rule
that relies on the key partitioning calls :meth:`Context.rely_on`: a co-located join (its other side is
hashed by ``hash % W``) turns the group back into plain hashing; an aggregate or window in place needs
only every key on one rank, so the group keeps its assignment (and key ranges) without selective
broadcast or the run-time broadcast (said in the stages' notes). So a skew-aware join never adds an
exchange to a plan.

The same histogram round also decides broadcast vs hash-partitioning from the sides' actual sizes (a
run-time join decision, ``PlannerOptions.runtime_broadcast``): when the side that may go to every rank
(the "broadcast" role above) holds at most ``broadcast_limit`` bytes in all and sending it to W - 1 ranks
moves fewer bytes than hashing both sides, it is broadcast and the other side's rows stay where they are.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
from sqlglot import exp

from squall.driver import logical as L
from squall.driver.planner.core import Context
from squall.driver.planner.exprs import find_scan_column
from squall.plan import ExchangeInput, Output

#: which side may keep its hot-key rows ("keep") / have its rows of them broadcast, by join kind
_ROLES = {
    "inner": ("either", "either"),
    "left": ("keep", "broadcast"),
    "semi": ("keep", "broadcast"),
    "anti": ("keep", "broadcast"),
    "right": ("broadcast", "keep"),
    "full": ("", ""),
}


def co_partition(
    ctx: Context, kind: str, left: L.Node, right: L.Node, est_bytes: float, key_range: tuple[int, int] | None
) -> int:
    """Make the just-cut hash exchanges feeding ``left`` and ``right`` one skew-aware group.

    ``key_range`` (from :func:`key_range`) is the shared domain of a single integer join key: the group may
    then be partitioned by key range (locality). Returns the group's id (for the join's output
    :class:`Dist`), 0 when the join keeps plain hashing.
    """
    opts = ctx.options
    if not opts.skew_handling or ctx.world == 1 or est_bytes < opts.skew_min_bytes or kind not in _ROLES:
        return 0
    ids = []
    for side in (left, right):
        spec = ctx.inputs.get(getattr(side, "name", ""))
        if not isinstance(spec, ExchangeInput):
            return 0
        ids.append(spec.stage)
    everyone = tuple(range(ctx.world))
    index = {s.id: i for i, s in enumerate(ctx.stages)}
    for sid in ids:
        out = ctx.stages[index[sid]].output
        if out.kind != "hash" or out.senders != everyone or out.receivers != everyone:
            return 0
    group = min(ids)
    parts = int(max(1, min(opts.skew_partitions_per_rank * ctx.world, 65536)))
    suffix = f" % {ctx.world}"
    for sid, role in zip(ids, _ROLES[kind]):
        stage = ctx.stages[index[sid]]
        out = stage.output
        full_hash = out.partition_sql.removesuffix(suffix)
        limit = opts.broadcast_limit if opts.runtime_broadcast else 0.0
        lo, hi = key_range or (0, 0)
        range_sql = f"({out.keys[0]})::BIGINT" if key_range and len(out.keys) == 1 else ""
        output = dataclasses.replace(
            out, partition_sql=full_hash, partitions=parts, group=group, heavy=role, broadcast_limit=limit,
            range_sql=range_sql, range_lo=lo if range_sql else 0, range_hi=hi if range_sql else 0,
        )  # fmt: skip
        ctx.stages[index[sid]] = dataclasses.replace(stage, output=output)
    return group


def key_range(ctx: Context, node: L.Join) -> tuple[int, int] | None:
    """The domain [lo, hi] of a join on one integer column per side, from the catalog's row-group
    statistics of the columns the keys read (both sides' ranges joined); None otherwise."""
    if not ctx.options.skew_locality_ranges or len(node.left_keys) != 1:
        return None
    bounds = []
    for side, key in ((node.left, node.left_keys[0]), (node.right, node.right_keys[0])):
        if not isinstance(key, exp.Column):
            return None
        found = find_scan_column(side, key.name)
        if found is None:
            return None
        scan, source = found
        try:
            info = ctx.catalog.table(scan.table)
        except (KeyError, OSError, ValueError):
            return None
        if source not in info.schema.names or not _fits_bigint(info.schema.field(source).type):
            return None
        span = info.column_range(source)
        if span is None or not all(isinstance(v, int) and not isinstance(v, bool) for v in span):
            return None
        bounds.append(span)
    lo, hi = min(b[0] for b in bounds), max(b[1] for b in bounds)
    return (int(lo), int(hi)) if hi > lo else None


def _fits_bigint(t: pa.DataType) -> bool:
    return pa.types.is_signed_integer(t) or (pa.types.is_unsigned_integer(t) and t.bit_width < 64)


def describe(output: Output) -> str:
    """The explain text of a skew-aware exchange ('' for a plain one)."""
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
    elif heavy == "keep":
        text += ", heavy hitters: selective broadcast (hot keys' rows stay local)"
    elif heavy == "broadcast":
        text += ", heavy hitters: selective broadcast (rows of the other side's hot keys to every rank)"
    else:
        text += ", heavy hitters: assignment only (full outer join, or the key partitioning is kept)"
    if output.broadcast_limit > 0 and heavy in ("either", "broadcast"):
        text += "; at run time this side goes whole to every rank if its bytes are the cheaper move"
    return text
