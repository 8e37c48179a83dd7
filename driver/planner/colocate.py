"""Joins in place by key range: both sides' scans split so that each rank holds one range of the join key.

Parquet written in key order (TPC-H's ``orders`` and ``lineitem`` by order key, ``part`` and ``partsupp``
by part key) has row groups whose [min, max] of the key barely overlap. When each side of an equi-join
reads such a table directly — under filters, projections and joins that moved nothing (their other sides
replicated scans or broadcasts) — its scan can be split by key range instead of by row count: rank r reads
the row groups that overlap its range [low_r, high_r) and keeps only the rows inside it (a row group that
straddles a bound is read by both ranks). Every key's rows of both sides then lie on one rank, and the join
runs where the rows are read: no exchange and no stage boundary, where hashing both sides would send
nearly all of both over the network (Neo-Join's locality taken to its end: the partition assignment is the
one the files already have).

A side whose scan an earlier join in place split by range keeps its bounds, and the other side is split
to match (TPC-H Q21: lineitem ⋈ orders, then its EXISTS and NOT EXISTS over lineitem, all by order key).

Conditions: one equality key pair of integer columns that come straight from a scan of each side (by
name, through filters, projections, joins, join filters and aggregates grouped by the key); Parquet
statistics for every row group read, with no NULL keys; Parquet scans that do not steal; the ranges balance the rows
read within ``colocate_max_imbalance`` and read at most ``colocate_max_overlap`` more rows than a split
by row count. Bounds are of equal width over the key's domain (the same for every join on it, so that a chain of joins agrees),
else at row-group minima chosen to balance both sides' rows (assumed even within a row group's [min, max]).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from squall.driver.catalog.tables import RowGroup
from squall.driver.ir import nodes as L
from squall.driver.ir.sqlgen import InputRef, Templated
from squall.driver.planner import skew, skipping, splits
from squall.driver.planner.core import Context
from squall.driver.planner.exprs import leaves
from squall.driver.planner.joinfilter import FilterProbe
from squall.plan import ExchangeInput, ScanInput

Bounds = tuple[tuple[int | None, int | None], ...]


@dataclass(frozen=True)
class _Side:
    scan: ScanInput  # the side's scan that the key comes from
    source: str  # the key's column in the file
    groups: tuple[RowGroup, ...]  # the row groups it reads, each once
    fixed: Bounds | None  # bounds an earlier join in place set


def predicted(ctx: Context, node: L.Join, strict: bool = False) -> bool:
    """Whether :func:`in_place` is likely to take ``node``, judged before its sides are built (join filters
    are not worth a round for a join that moves nothing). ``strict``: also every other scan of the sides is
    small enough to be read whole by every rank, so that nothing else below can move: sure enough to
    prefer the join in place to broadcasting a side."""
    if not _enabled(ctx, node):
        return False
    for lk, rk in zip(node.left_keys, node.right_keys):
        left, right = _clustered_scan(ctx, node.left, lk), _clustered_scan(ctx, node.right, rk)
        if left is None or right is None:
            continue
        if not strict or all(
            _others_small(ctx, side, scan) for side, scan in ((node.left, left), (node.right, right))
        ):
            return True
    return False


def _others_small(ctx: Context, node: L.Node, keep: L.Scan) -> bool:
    if isinstance(node, L.Scan):
        return node is keep or splits.replicable(ctx, node)
    return all(_others_small(ctx, c, keep) for c in node.children)


def in_place(ctx: Context, node: L.Join, left: L.Node, right: L.Node) -> bool:
    """Split both built sides' scans by one key range (or the other side's ranges) when they qualify;
    True when ``node`` then joins in place (said in the plan's notes)."""
    if not _enabled(ctx, node):
        return False
    for lk, rk in zip(node.left_keys, node.right_keys):
        a, b = _side(ctx, left, lk), _side(ctx, right, rk)
        if a is None or b is None:
            continue
        if a.fixed is not None and b.fixed is not None and a.fixed != b.fixed:
            continue
        bounds, why = _choose(ctx, (a, b))
        if bounds is None:
            ctx.notes.append(f"{node.kind} join on {L.sql_of(lk)} = {L.sql_of(rk)} not in place: {why}")
            continue
        ctx.notes.append(
            f"{node.kind} join on {L.sql_of(lk)} = {L.sql_of(rk)} in place, no exchange: both sides' scans "
            f"split by key range ({a.scan.table}.{a.source} / {b.scan.table}.{b.source}, Parquet statistics; "
            f"from {_cuts(bounds)})"
        )
        return True
    return False


def aggregate_in_place(ctx: Context, child: L.Node, key: exp.Expression) -> str | None:
    """Split the scan that group key ``key`` of an aggregate over ``child`` comes from by ranges of it (when
    it qualifies as a join side would), so that every group lies on one rank; a note saying so, else None."""
    if not ctx.options.join_in_place or ctx.world == 1 or ctx.replicate:
        return None
    side = _side(ctx, child, key)
    if side is None:
        return None
    bounds, _why = _choose(ctx, (side,), ctx.options.aggregate_in_place_max_overlap)
    if bounds is None:
        return None
    return f"its scan split by key range ({side.scan.table}.{side.source}; from {_cuts(bounds)})"


def _cuts(bounds: Bounds) -> str:
    return ", ".join(f"{lo} → rank {r}" for r, (lo, _hi) in enumerate(bounds) if lo is not None)


def fix_ranges(ctx: Context, child: L.Node, key: exp.Expression, ranges: tuple[tuple[int, int], ...]) -> None:
    """Record the key ranges (lowest key, rank) that the row-count splits of the scan ``key`` comes from
    already hold (an aggregate by it completes in place over them) as that scan's bounds, so that a join
    on the key above takes them instead of splitting the scan anew. The bounds drop no row."""
    if not ctx.options.join_in_place or ctx.world == 1 or ctx.replicate:
        return
    side = _side(ctx, child, key)
    if side is None or side.fixed is not None or len(ranges) != ctx.world:
        return
    ordered = sorted(ranges)
    bounds: list[tuple[int | None, int | None]] = [(None, None)] * ctx.world
    for i, (lo, rank) in enumerate(ordered):
        bounds[rank] = (lo if i else None, ordered[i + 1][0] if i + 1 < len(ordered) else None)
    ctx.inputs[side.scan.name] = dataclasses.replace(
        side.scan, key_column=side.source, key_bounds=tuple(bounds)
    )


def _choose(
    ctx: Context, sides: Sequence[_Side], max_overlap: float | None = None
) -> tuple[Bounds | None, str]:
    """The ranges to split ``sides`` by (a side's fixed ones, else equal width, else balanced at row-group
    minima), the free sides split by them; else (None, why not)."""
    fixed = next((side.fixed for side in sides if side.fixed is not None), None)
    spans = [span for side in sides for span in _spans(side.groups, side.source)]
    options = (fixed,) if fixed is not None else (_even(ctx, sides), _cut(ctx, spans))
    why = "the row groups offer too few cuts"
    for bounds in options:
        if bounds is None:
            continue
        assigned = {side.scan.name: _assign(side.groups, side.source, bounds) for side in sides}
        why = _unfit(ctx, sides, bounds, assigned, max_overlap)
        if not why:
            for side in sides:
                if side.fixed is None:
                    _split(ctx, side, bounds, assigned[side.scan.name])
            return bounds, ""
    return None, why


def _enabled(ctx: Context, node: L.Join) -> bool:
    # a semi or anti join with a residual condition (TPC-H Q21's l_suppkey <> l1.l_suppkey) over a whole
    # right side ran 2-3x slower in the stage's DuckDB than behind the join filter its own plan gets
    return (
        ctx.options.join_in_place
        and ctx.world > 1
        and not ctx.replicate
        and not node.null_aware
        and bool(node.left_keys)
        and not (node.kind in ("semi", "anti") and node.residual is not None)
        and (node.kind in ("semi", "anti") or ctx.options.join_in_place_every_kind)
    )


# --- before building: the logical sides ---------------------------------------------------------------


def _clustered_scan(ctx: Context, node: L.Node, key: exp.Expression) -> L.Scan | None:
    """A scan in ``node`` that ``key`` is a column of (:func:`_trace`, through joins expected to leave its rows
    where they are read; one that would not be read whole by every rank first), whose table's row groups hold
    ranges of it; else None."""
    if not isinstance(key, exp.Column):
        return None
    found = [(scan, i) for scan, i in _trace(node, key.name, _stays(ctx)) if isinstance(scan, L.Scan)]
    for scan, internal in sorted(found, key=lambda f: splits.replicable(ctx, f[0])):
        assert isinstance(scan, L.Scan)
        source = next((s for s, i in scan.columns if i == internal), None)
        try:
            groups = ctx.catalog.table(scan.table).row_groups
        except (KeyError, OSError, ValueError):
            continue
        if (
            source is not None
            and _stats_ok(groups, source)
            and _sorted_share(groups, source) >= 0.9
            and len(groups) >= ctx.world
        ):
            return scan
    return None


def _stays(ctx: Context) -> Callable[[L.Join, L.Node], bool]:
    """Whether a join is expected to leave the rows of its side ``side`` where they are read: every rank reads
    its other side whole (a replicated scan), or it is itself expected in place. A join that hashes both sides
    moves the key's rows (TPC-DS Q95's self-join of web_sales below a semi join on the same key): a join above
    it is not in place, whatever the files' order."""

    def stays(node: L.Join, side: L.Node) -> bool:
        other = node.right if side is node.left else node.left
        return splits.replicable(ctx, other) or predicted(ctx, node)

    return stays


def _trace(
    node: L.Node, name: str, stays: Callable[[L.Join, L.Node], bool] | None = None
) -> list[tuple[L.Node, str]]:
    """The leaves (scans, or stage inputs once built) whose column ``name`` of ``node`` is, unchanged:
    through filters, renames, the sides of joins that keep their columns (an inner join's key also equals
    the other side's key, whose leaf it may come from), join filters (their data input) and aggregates
    that group by it (each group has one value of it: splitting the input by its ranges keeps every group
    on one rank). With ``stays``, only into the sides of joins it says stay where they are read."""
    if isinstance(node, (L.Scan, InputRef)):
        return [(node, name)] if name in node.names else []
    if isinstance(node, L.Filter):
        return _trace(node.input, name, stays)
    if isinstance(node, L.Project):
        expr = dict(node.exprs).get(name)
        return _trace(node.input, expr.name, stays) if isinstance(expr, exp.Column) else []
    if isinstance(node, L.Join):
        if name in node.left.names:
            own, other, side, other_side = node.left_keys, node.right_keys, node.left, node.right
        elif node.kind not in ("semi", "anti"):
            own, other, side, other_side = node.right_keys, node.left_keys, node.right, node.left
        else:
            return []
        found = _trace(side, name, stays) if stays is None or stays(node, side) else []
        if node.kind == "inner" and (stays is None or stays(node, other_side)):
            for mine, theirs in zip(own, other):
                if isinstance(mine, exp.Column) and mine.name == name and isinstance(theirs, exp.Column):
                    found = found + _trace(other_side, theirs.name, stays)
        return found
    if isinstance(node, L.Aggregate) and not node.sets:
        expr = dict(node.keys).get(name)
        return _trace(node.input, expr.name, stays) if isinstance(expr, exp.Column) else []
    if isinstance(node, FilterProbe):
        return _trace(node.inputs[0], name, stays)  # a join filter: its first input's rows, fewer
    return []


# --- after building: the planned sides ---------------------------------------------------------------


def _side(ctx: Context, node: L.Node, key: exp.Expression) -> _Side | None:
    """The scan ``key`` comes from, when ``node`` moved nothing (only filters, projections and joins over
    scans, replicated scans and broadcasts) and that scan is the only one split over the ranks (or the
    others were split by the same key ranges)."""
    if not isinstance(key, exp.Column) or not _in_place_shape(node):
        return None
    traced = {leaf.name: internal for leaf, internal in _trace(node, key.name) if isinstance(leaf, InputRef)}
    split: list[ScanInput] = []
    for leaf in leaves(node):
        inp = ctx.inputs[leaf.name]
        if isinstance(inp, ExchangeInput):
            if not skew.broadcast_input(ctx, inp):
                return None
        elif inp.steal:
            return None
        elif not inp.replicated:
            split.append(inp)
    # the split scan the key comes from (one already split by ranges first: its bounds hold for the side)
    owners = sorted((inp for inp in split if inp.name in traced), key=lambda inp: not inp.key_column)
    if not owners or owners[0].scan != "parquet":  # (other scan kinds read their own way)
        return None
    scan = owners[0]
    source = next(src for src, name in scan.columns if name == traced[scan.name])
    if scan.key_column:
        if scan.key_column != source or any(inp.key_bounds != scan.key_bounds for inp in split):
            return None
        return _Side(scan, source, (), scan.key_bounds)
    if len(split) > 1:
        return None
    groups = _groups_read(ctx, scan)
    if not groups or not _stats_ok(groups, source):
        return None  # (no row group left after pruning: nothing to split)
    return _Side(scan, source, tuple(groups), None)


def _in_place_shape(node: L.Node) -> bool:
    """Only filters, projections, joins, join filters and aggregates over the inputs (the leaves then say
    whether anything moved)."""
    if isinstance(node, InputRef):
        return True
    if isinstance(node, L.Aggregate) and node.sets:
        return False
    if isinstance(node, (L.Filter, L.Project, L.Join, L.Aggregate, Templated)):
        return all(_in_place_shape(c) for c in node.children)
    return False


def _groups_read(ctx: Context, scan: ScanInput) -> list[RowGroup] | None:
    try:
        by_id = {(rg.path, rg.index): rg for rg in ctx.catalog.table(scan.table).row_groups}
    except (KeyError, OSError, ValueError):
        return None
    out = []
    for per_rank in scan.splits:
        for split in per_rank:
            for index in split.row_groups:
                rg = by_id.get((split.path, index))
                if rg is None:
                    return None
                out.append(rg)
    return out


def _stats_ok(groups: Sequence[RowGroup], source: str) -> bool:
    for rg in groups:
        st = rg.columns.get(source)
        if st is None or st.null_count != 0 or not _int(st.min) or not _int(st.max):
            return False
    return True


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _sorted_share(groups: Sequence[RowGroup], source: str) -> float:
    """The share of consecutive row groups (by minimum) whose ranges do not overlap."""
    spans = sorted((rg.columns[source].min, rg.columns[source].max) for rg in groups)
    if len(spans) < 2:
        return 1.0
    apart = sum(1 for (_lo, hi), (nxt, _h) in itertools.pairwise(spans) if hi <= nxt)
    return apart / (len(spans) - 1)


# --- the ranges ----------------------------------------------------------------------------------------


def _below(groups: Sequence[tuple[int, int, int]], cut: int) -> float:
    """Rows with a key under ``cut``, each group's rows taken as even over its [min, max]."""
    total = 0.0
    for lo, hi, rows in groups:
        if cut > hi:
            total += rows
        elif cut > lo:
            total += rows * (cut - lo) / (hi - lo + 1)
    return total


def _spans(groups: Sequence[RowGroup], source: str) -> list[tuple[int, int, int]]:
    return [(rg.columns[source].min, rg.columns[source].max, rg.num_rows) for rg in groups]


def _even(ctx: Context, sides: Sequence[_Side]) -> Bounds | None:
    """W ranges of equal width over both tables' whole key domains (every row group, not only those read):
    the same cuts for every join on one key domain, so that joins taken one after another (and an aggregate
    by the key below one) agree on them."""
    lows, highs = [], []
    for side in sides:
        for rg in ctx.catalog.table(side.scan.table).row_groups:
            st = rg.columns.get(side.source)
            if st is None or not _int(st.min) or not _int(st.max):
                return None
            lows.append(st.min)
            highs.append(st.max)
    lo, hi = min(lows), max(highs) + 1
    if hi - lo < ctx.world:
        return None
    cuts = [lo + (hi - lo) * r // ctx.world for r in range(1, ctx.world)]
    return tuple(zip([None, *cuts], [*cuts, None]))


def _cut(ctx: Context, spans: Sequence[tuple[int, int, int]]) -> Bounds | None:
    """W ranges cut at row-group minima of either side (``spans``: both sides' (min, max, rows)), balancing
    their rows, each cut also weighing the rows of the groups it straddles (read twice); None when the row
    groups offer fewer than W - 1 distinct cuts."""
    if not spans:
        return None
    total = sum(r for _lo, _hi, r in spans)
    lowest = min(lo for lo, _hi, _r in spans)
    candidates = sorted({lo for lo, _hi, _r in spans if lo > lowest})
    if len(candidates) < ctx.world - 1 or total == 0:
        return None
    below = [_below(spans, c) for c in candidates]
    straddle = [sum(r for lo, hi, r in spans if lo < c <= hi) for c in candidates]
    cuts: list[int] = []
    start = 0
    for rank in range(1, ctx.world):
        target = total * rank / ctx.world
        last = len(candidates) - (ctx.world - rank)  # leave a candidate for every later cut
        if start > last:
            return None
        best = min(range(start, last + 1), key=lambda i: abs(below[i] - target) + straddle[i])
        cuts.append(candidates[best])
        start = best + 1
    lows: list[int | None] = [None, *cuts]
    highs: list[int | None] = [*cuts, None]
    return tuple(zip(lows, highs))


def _assign(groups: Sequence[RowGroup], source: str, bounds: Bounds) -> list[list[RowGroup]]:
    """Rank r's row groups: those whose [min, max] meets [low_r, high_r)."""
    out: list[list[RowGroup]] = [[] for _ in bounds]
    for rg in groups:
        st = rg.columns[source]
        for rank, (lo, hi) in enumerate(bounds):
            if (lo is None or st.max >= lo) and (hi is None or st.min < hi):
                out[rank].append(rg)
    return out


def _unfit(
    ctx: Context,
    sides: Sequence[_Side],
    bounds: Bounds,
    assigned: dict[str, list[list[RowGroup]]],
    max_overlap: float | None = None,
) -> str:
    """Why the ranges do not pay ("" when they do): rows read per rank too uneven, or too many read twice (more
    than ``max_overlap``, by default ``colocate_max_overlap``)."""
    per_rank = [0.0] * ctx.world
    read = once = 0
    for side in sides:
        if side.fixed is not None:
            groups = _groups_read(ctx, side.scan) or []
            spans = _spans(_unique(groups), side.source)
        else:
            groups = [rg for chunk in assigned[side.scan.name] for rg in chunk]
            spans = _spans(side.groups, side.source)
        read += sum(rg.num_rows for rg in groups)
        once += sum(r for _lo, _hi, r in spans)
        for rank, (lo, hi) in enumerate(bounds):
            upper = _below(spans, hi) if hi is not None else float(sum(r for _l, _h, r in spans))
            per_rank[rank] += upper - (_below(spans, lo) if lo is not None else 0.0)
    mean = sum(per_rank) / ctx.world
    if mean > 0 and max(per_rank) > ctx.options.colocate_max_imbalance * mean:
        return f"the key ranges would give one rank {max(per_rank) / mean:.2f}x the mean rows"
    overlap = ctx.options.colocate_max_overlap if max_overlap is None else max_overlap
    if once and read > (1.0 + overlap) * once:
        return f"row groups straddling the ranges would be read {read / once - 1:.0%} more"
    return ""


def _unique(groups: Sequence[RowGroup]) -> list[RowGroup]:
    return list({(rg.path, rg.index): rg for rg in groups}.values())


def _split(ctx: Context, side: _Side, bounds: Bounds, chunks: list[list[RowGroup]]) -> None:
    """Re-split ``side``'s scan: rank r reads ``chunks[r]`` and keeps the rows inside ``bounds[r]``."""
    scan = side.scan
    info = ctx.catalog.table(scan.table)
    file_groups = Counter(rg.path for rg in info.row_groups)
    sources = [source for source, _i in scan.columns]
    per_rank = tuple(
        splits.split_row_groups(sorted(chunk, key=_order), sources, file_groups) for chunk in chunks
    )
    ctx.inputs[scan.name] = dataclasses.replace(
        scan,
        splits=per_rank,
        key_column=side.source,
        key_bounds=bounds,
        skipping=skipping.without_probe(scan.skipping, "not probed: its scan is split by key range"),
    )


def _order(rg: RowGroup) -> tuple[str, int]:
    return (rg.path, rg.index)
