"""Skew-aware hash joins (Neo-Join): mark a join's two hash exchanges as one co-partition group.

Applies to a join both of whose sides move by key (neither is already partitioned to match) when
``PlannerOptions.skew_handling`` is on and the two sides are estimated at ``skew_min_bytes`` or more
(smaller joins keep plain ``hash % W``: the histogram round would cost more than any imbalance;
the threshold grows with ``PlannerOptions.ranks_per_core`` where ranks share cores). The
two exchanges then partition into ``skew_partitions_per_rank * W`` radix partitions and share one
assignment computed at run time (``squall.operators.skew``), so equal keys still meet on one rank.

Heavy hitters are handled by selective broadcast where the join allows it: the side whose rows are
kept must be one whose unmatched rows need no other rank (inner: either side; left, semi, anti: the
left side; right: the right side), and the other side's rows of a hot key go to every rank. A left or
right join whose condition is only its equality keys also handles hot keys of its null-supplied side:
they stay at the ranks that hold them, and the preserved side's rows of them go to those ranks only,
where each copy finds its matches (``Output.null_sql`` keeps NULL keys out). A full outer join gets the
assignment only. The join's output is then no longer partitioned by its key (a
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
import itertools
from collections.abc import Sequence

import pyarrow as pa
from sqlglot import exp

from squall.driver.catalog.tables import RowGroup
from squall.driver.ir import nodes as L
from squall.driver.ir.nodes import find_scan_column
from squall.driver.options import megabytes
from squall.driver.planner.core import Context
from squall.driver.planner.exprs import leaves
from squall.plan import ExchangeInput, ScanInput

#: which side may keep its hot-key rows ("keep") / have its rows of them broadcast, by join kind
_ROLES = {
    "inner": ("either", "either"),
    "left": ("keep", "broadcast"),
    "semi": ("keep", "broadcast"),
    "anti": ("keep", "broadcast"),
    "right": ("broadcast", "keep"),
    "full": ("", ""),
}
#: outer joins whose condition is only their equality keys: hot keys of the null-supplied side too
_OUTER_ROLES = {"left": ("preserved", "null_supplied"), "right": ("null_supplied", "preserved")}


def co_partition(
    ctx: Context,
    kind: str,
    left: L.Node,
    right: L.Node,
    est_bytes: float,
    key_range: tuple[int, int] | None,
    equi_only: bool = False,
) -> int:
    """Make the just-cut hash exchanges feeding ``left`` and ``right`` one skew-aware group.

    ``key_range`` (from :func:`key_range`) is the shared domain of a single integer join key: the group may
    then be partitioned by key range (locality). ``equi_only``: the join's condition is only its equality
    keys (an outer join may then keep the null-supplied side's hot keys at their holders). Returns the
    group's id (for the join's output :class:`Dist`), 0 when the join keeps plain hashing.
    """
    opts = ctx.options
    if not opts.skew_handling or ctx.world == 1 or kind not in _ROLES:
        return 0
    ids = [_hash_stage(ctx, side) for side in (left, right)]
    if None in ids:
        return 0
    if est_bytes < opts.skew_threshold:
        if why := opts.below_skew_threshold(est_bytes):
            keys = ", ".join(next(s for s in ctx.stages if s.id == ids[0]).output.keys)
            ctx.notes.append(f"{kind} join on {keys} keeps plain hashing: {why}")
        return 0
    if held := too_big_to_hold(ctx, est_bytes):
        keys = ", ".join(next(s for s in ctx.stages if s.id == ids[0]).output.keys)
        ctx.notes.append(f"{kind} join on {keys} keeps plain hashing: {held}")
        return 0
    group = min(i for i in ids if i is not None)
    limit = opts.broadcast_limit if opts.runtime_broadcast else 0.0
    roles = _OUTER_ROLES[kind] if equi_only and kind in _OUTER_ROLES else _ROLES[kind]
    for sid, role in zip(ids, roles):
        assert sid is not None
        _mark(ctx, sid, group, role, limit, key_range)
    return group


def by_key_ranges(
    ctx: Context, ref: L.Node, est_bytes: float, key_range: tuple[int, int] | None, key: exp.Expression
) -> int:
    """Make the just-cut hash exchange feeding ``ref`` (an aggregate's partial rows by one integer group key
    of domain ``key_range``) a one-member skew-aware group, so that it may go by key range: partial groups
    of data clustered by the key stay on the rank that made them (hot keys need nothing: each rank sends
    one partial row per group). When every rank's scan splits already hold one key range of their own
    (:func:`_split_ranges`), the exchange partitions by those ranges instead, with no histogram round, at
    any size. Returns the group's id, 0 when it keeps plain hashing."""
    opts = ctx.options
    if not opts.skew_handling or ctx.world == 1 or key_range is None:
        return 0
    sid = _hash_stage(ctx, ref)
    if sid is None:
        return 0
    if (ranges := _split_ranges(ctx, sid, key)) is not None:
        _mark_split_ranges(ctx, sid, ranges)
        return sid
    if est_bytes < opts.skew_threshold:
        if why := opts.below_skew_threshold(est_bytes):
            ctx.notes.append(f"aggregate by {L.sql_of(key)} keeps plain hashing: {why}")
        return 0
    if held := too_big_to_hold(ctx, est_bytes):
        ctx.notes.append(f"aggregate by {L.sql_of(key)} keeps plain hashing: {held}")
        return 0
    _mark(ctx, sid, sid, "", 0.0, key_range)
    return sid


def too_big_to_hold(ctx: Context, est_bytes: float) -> str:
    """Why a skew-aware exchange of ``est_bytes`` in all would not fit a rank's memory budget (its rank's share
    is over ``held_limit``: a plain exchange streams its rows out instead of holding them), for the plan's
    notes; "" when it fits."""
    limit = ctx.options.held_limit
    if not limit or est_bytes / ctx.world <= limit:
        return ""
    return (
        f"~{megabytes(est_bytes / ctx.world)} per rank would be held until the histogram round, over "
        f"held_limit {megabytes(limit)}"
    )


def _split_ranges(ctx: Context, sid: int, key: exp.Expression) -> tuple[tuple[int, int], ...] | None:
    """(lowest key, rank) of each rank's scan splits when ``key`` is an integer column that stage ``sid``
    scans split over every rank and the ranks' [min, max] of it (row-group statistics) do not overlap: the
    key ranges the exchange can partition by with no histogram round, every row staying where it is."""
    stage = next(s for s in ctx.stages if s.id == sid)
    return _ranges_of(ctx, stage.inputs, key, shared_bounds=True)


def split_ranges_below(ctx: Context, node: L.Node, key: exp.Expression) -> tuple[tuple[int, int], ...] | None:
    """:func:`_split_ranges` for the inputs a not yet cut subplan reads, when they hold the key's rows where
    they were scanned (no exchange below) and no rank steals splits: every key's rows on one rank."""
    inputs = [ctx.inputs[leaf.name] for leaf in leaves(node)]
    if any(
        (isinstance(i, ExchangeInput) and not broadcast_input(ctx, i))
        or (isinstance(i, ScanInput) and i.steal)
        for i in inputs
    ):
        return None
    return _ranges_of(ctx, inputs, key, shared_bounds=False)


def broadcast_input(ctx: Context, inp: ExchangeInput) -> bool:
    """Every rank holds all of ``inp`` (a broadcast): it does not move the rows a key range follows."""
    return next(s for s in ctx.stages if s.id == inp.stage).output.kind == "broadcast"


def _ranges_of(
    ctx: Context, inputs: Sequence[ScanInput | ExchangeInput], key: exp.Expression, shared_bounds: bool
) -> tuple[tuple[int, int], ...] | None:
    """``shared_bounds``: two ranks' ranges may meet in one key (its rows then go to one of them by the
    exchange, as do NULL keys); else they must be apart and the key never NULL (every key's rows on one
    rank)."""
    if not isinstance(key, exp.Column):
        return None
    scans = [
        (inp, src) for inp in inputs if isinstance(inp, ScanInput) for src, name in inp.columns
        if name == key.name and not inp.replicated
    ]  # fmt: skip
    if len(scans) != 1:
        return None
    inp, source = scans[0]
    try:
        groups = {(rg.path, rg.index): rg for rg in ctx.catalog.table(inp.table).row_groups}
    except (KeyError, OSError, ValueError):
        return None
    if inp.key_column == source:  # split by ranges of this very key (a join in place): exact and disjoint
        return tuple(_bound_lows(inp, groups, source))
    spans = []
    for rank in range(ctx.world):
        lows, highs = [], []
        for split in inp.splits_for(rank):
            for index in split.row_groups:
                rg = groups.get((split.path, index))
                st = rg.columns.get(source) if rg is not None else None
                if st is None or not isinstance(st.min, int) or not isinstance(st.max, int):
                    return None
                if not shared_bounds and st.null_count != 0:
                    return (
                        None  # NULL keys (or unknown) are outside min/max: their group may lie on every rank
                    )
                lows.append(st.min)
                highs.append(st.max)
        if not lows:
            return None  # a rank without rows of the scan would get no range: nothing to balance by
        spans.append((min(lows), max(highs), rank))
    spans.sort()
    for (_lo, hi, _r), (nxt_lo, _h, _n) in itertools.pairwise(spans):
        if hi > nxt_lo or (hi == nxt_lo and not shared_bounds):
            return None
    return tuple((lo, rank) for lo, _hi, rank in spans)


def _bound_lows(
    inp: ScanInput, groups: dict[tuple[str, int], RowGroup], source: str
) -> list[tuple[int, int]]:
    """(lowest key, rank) of a scan split by key ranges (an unbounded first range: its row groups' lowest)."""
    out: list[tuple[int, int]] = []
    for rank, (lo, _hi) in enumerate(inp.key_bounds):
        if lo is None:
            mins = [
                groups[(sp.path, i)].columns[source].min for sp in inp.splits_for(rank) for i in sp.row_groups
            ]
            lo = min(mins, default=0)
        out.append((lo, rank))
    return out


def _mark_split_ranges(ctx: Context, sid: int, ranges: tuple[tuple[int, int], ...]) -> None:
    index = next(i for i, s in enumerate(ctx.stages) if s.id == sid)
    stage = ctx.stages[index]
    ctx.stages[index] = dataclasses.replace(
        stage, output=dataclasses.replace(stage.output, group=sid, split_ranges=ranges)
    )


def _hash_stage(ctx: Context, ref: L.Node) -> int | None:
    """The id of the stage whose hash exchange over all ranks feeds input ``ref``, else None."""
    spec = ctx.inputs.get(getattr(ref, "name", ""))
    if not isinstance(spec, ExchangeInput) or spec.stage in ctx.shared:  # read twice: partitioning fixed
        return None
    everyone = tuple(range(ctx.world))
    out = next(s for s in ctx.stages if s.id == spec.stage).output
    if out.kind != "hash" or out.senders != everyone or out.receivers != everyone:
        return None
    return spec.stage


def _mark(
    ctx: Context, sid: int, group: int, role: str, limit: float, key_range: tuple[int, int] | None
) -> None:
    """Turn stage ``sid``'s ``hash % W`` exchange into a member of skew-aware group ``group``."""
    index = next(i for i, s in enumerate(ctx.stages) if s.id == sid)
    stage = ctx.stages[index]
    out = stage.output
    parts = int(max(1, min(ctx.options.skew_partitions_per_rank * ctx.world, 65536)))
    lo, hi = key_range or (0, 0)
    range_sql = f"({out.keys[0]})::BIGINT" if key_range and len(out.keys) == 1 else ""
    null_sql = " OR ".join(f"({k}) IS NULL" for k in out.keys) if role in _OUTER_ROLES["left"] else ""
    output = dataclasses.replace(
        out, partition_sql=out.partition_sql.removesuffix(f" % {ctx.world}"), partitions=parts, group=group,
        heavy=role, broadcast_limit=limit, range_sql=range_sql, range_lo=lo if range_sql else 0,
        range_hi=hi if range_sql else 0, null_sql=null_sql,
    )  # fmt: skip
    ctx.stages[index] = dataclasses.replace(stage, output=output)


def key_range(ctx: Context, node: L.Join) -> tuple[int, int] | None:
    """The domain [lo, hi] of a join on one integer column per side, from the catalog's row-group
    statistics of the columns the keys read (both sides' ranges joined); None otherwise."""
    if len(node.left_keys) != 1:
        return None
    left = column_domain(ctx, node.left, node.left_keys[0])
    right = column_domain(ctx, node.right, node.right_keys[0])
    if left is None or right is None:
        return None
    lo, hi = min(left[0], right[0]), max(left[1], right[1])
    return (lo, hi) if hi > lo else None


def column_domain(ctx: Context, below: L.Node, key: exp.Expression) -> tuple[int, int] | None:
    """[min, max] of ``key`` when it is an integer column of a scan below ``below`` (row-group statistics)
    and key ranges are on; else None."""
    if not ctx.options.skew_locality_ranges or not isinstance(key, exp.Column):
        return None
    found = find_scan_column(below, key.name)
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
    return (int(span[0]), int(span[1])) if span[1] > span[0] else None


def _fits_bigint(t: pa.DataType) -> bool:
    return pa.types.is_signed_integer(t) or (pa.types.is_unsigned_integer(t) and t.bit_width < 64)
