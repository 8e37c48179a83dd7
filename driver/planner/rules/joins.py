"""Joins: broadcast the small side, join in place by key range, join co-located, or hash-partition both sides.

By estimated bytes (rows * row width from Parquet metadata), a side that may be
broadcast is put on every rank when it is under ``broadcast_limit`` and its W
copies cost no more than shuffling the other side (see
:func:`~squall.driver.planner.rules.scans.broadcast` for the replicated-scan variant);
the other side stays where it is. Otherwise, when both sides read tables
written in key order, their scans are split by ranges of the key and the join
runs where they are read (:mod:`.colocate`); when one side is already
hash-partitioned on a subset of the join keys, only the other side moves to
match it; else both sides move by key. A semi/anti join's right side is deduped
on its keys before it moves (only its distinct keys matter). ``NOT IN`` always
replicates its right side: its NULLs and its emptiness are global facts. A join
without equality keys that is too big to broadcast runs on rank 0. When the side
that may be broadcast has a guessed estimate near the threshold, both sides are
hashed and the choice is taken at run time from that side's actual size
(:mod:`.runtime`).
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from squall.driver.catalog.tables import Catalog
from squall.driver.estimate.rows import estimate_rows
from squall.driver.ir import nodes as L
from squall.driver.planner import colocate, runtime, skew
from squall.driver.planner.core import RANDOM, REPLICATED, SINGLE, Context, Dist
from squall.driver.planner.rules import aggregates, scans

REQUIRED = True  # no other rule plans these nodes
NODES = (L.Join,)


def plan(ctx: Context, node: L.Join) -> tuple[L.Node, Dist]:
    """``node`` with its sides planned: broadcast one side (:func:`_broadcast`), join in place by key range,
    gather a keyless join to rank 0 (:func:`_gather`), or hash both sides (:func:`_partition`), the choice
    between broadcast and hash left to run time when an uncertain estimate is near the threshold."""
    kind = node.kind
    if ctx.replicate:
        left, _ = ctx.build(node.left, True)
        right, _ = ctx.build(node.right, True)
        return dataclasses.replace(node, left=left, right=right), REPLICATED
    if ctx.world == 1:
        left, _ = ctx.build(node.left)
        right, _ = ctx.build(node.right)
        return dataclasses.replace(node, left=left, right=right), RANDOM
    choice = "right" if node.null_aware else _broadcast_choice(ctx, node)
    # an uncertain estimate near the threshold: broadcast or hash decided at run time (planner/runtime.py)
    # (sides estimated as their planned join filters leave them)
    decide = runtime.candidate(ctx, node, lambda n: cut_bytes(ctx, n)) if choice != "gather" else None
    if decide is not None and choice not in (None, decide[0]):
        decide = None
    built = None
    if decide is not None and choice is not None:
        # the planner would broadcast that side: both sides are built first (in the order the broadcast plan
        # builds them), and only when both come out spread over the ranks, to be hashed by fresh exchanges, is
        # the choice left to run time; otherwise the broadcast as planned
        keeps = (_filter_keep(ctx, node.left), _filter_keep(ctx, node.right))
        big_side = "left" if choice == "right" else "right"
        sides = {big_side: ctx.build(getattr(node, big_side))}
        sides[choice] = ctx.build(getattr(node, choice))
        (left, dl), (right, dr) = sides["left"], sides["right"]
        if dl.kind == dr.kind == "random":
            built, choice = (keeps, left, dl, right, dr), None
        else:
            small_node = scans.broadcast_built(ctx, *sides[choice])
            pair = (left, small_node) if choice == "right" else (small_node, right)
            return dataclasses.replace(node, left=pair[0], right=pair[1]), sides[big_side][1]
    if choice in ("left", "right"):
        return _broadcast(ctx, node, choice)
    if built is not None:
        keeps, left, dl, right, dr = built
    else:
        # read before the sides are built: building a scan takes its planned join filters
        keeps = (_filter_keep(ctx, node.left), _filter_keep(ctx, node.right))
        left, dl = ctx.build(node.left)
        if choice is None and decide is None and dl.kind not in ("single", "replicated"):
            node = _aggregate_by_key(ctx, node, keeps)
        right, dr = ctx.build(node.right)
    if choice is None and dl.kind == dr.kind == "random" and colocate.in_place(ctx, node, left, right):
        return dataclasses.replace(node, left=left, right=right), RANDOM
    if (
        kind in ("semi", "anti")
        and node.residual is None
        and not node.null_aware
        and all(isinstance(k, exp.Column) for k in node.right_keys)
    ):
        right = L.Aggregate(right, tuple((k.name, k) for k in node.right_keys), ())
    if choice == "gather":
        return _gather(ctx, node, left, dl, right, dr)
    if dl.kind == "single" and dr.kind == "single":
        return dataclasses.replace(node, left=left, right=right), SINGLE
    left, right, left_keys, right_keys, group = _partition(ctx, node, left, dl, right, dr, keeps)
    if not group and decide is not None:  # both sides' plain hash exchanges feed the join directly
        group = runtime.mark(ctx, node, *decide, left, right)
    return dataclasses.replace(node, left=left, right=right), _hash_dist(kind, left_keys, right_keys, group)


def _broadcast(ctx: Context, node: L.Join, choice: str) -> tuple[L.Node, Dist]:
    """Broadcast side ``choice`` ("left"/"right") to every rank, the other side staying where it is; or, when
    joining in place beats the broadcast (:func:`_in_place_over_broadcast`) and both sides come out spread
    over the ranks, join them where they are read."""
    small, big = (node.right, node.left) if choice == "right" else (node.left, node.right)
    big_node, big_dist = ctx.build(big)
    if big_dist.kind == "random" and _in_place_over_broadcast(ctx, node, small):
        # joined where both sides are read beats sending one side to every rank
        small_node, small_dist = ctx.build(small)
        pair = (big_node, small_node) if choice == "right" else (small_node, big_node)
        if small_dist.kind == "random" and colocate.in_place(ctx, node, *pair):
            return dataclasses.replace(node, left=pair[0], right=pair[1]), RANDOM
        small_node = scans.broadcast_built(ctx, small_node, small_dist)
    elif big_dist.kind == "single" and not scans.replicable(ctx, small):
        # the big side is on rank 0 alone: a small side there too joins it where it is (no broadcast from rank 0
        # to rank 0: TPC-DS Q47/Q57's third read of v1, which a stage of its own kept apart from the other two)
        small_node, small_dist = ctx.build(small)
        if small_dist.kind not in ("single", "replicated"):
            small_node = scans.broadcast_built(ctx, small_node, small_dist)
    else:
        small_node = scans.broadcast(ctx, small)
    pair = (big_node, small_node) if choice == "right" else (small_node, big_node)
    return dataclasses.replace(node, left=pair[0], right=pair[1]), big_dist


def _gather(
    ctx: Context, node: L.Join, left: L.Node, dl: Dist, right: L.Node, dr: Dist
) -> tuple[L.Node, Dist]:
    """A join without equality keys, too big to broadcast: both built sides gathered to rank 0."""
    if dl.kind != "single":
        left = ctx.gather(left, dl, f"{node.kind} join without equality keys on rank 0")
    if dr.kind != "single":
        right = ctx.gather(right, dr, f"{node.kind} join without equality keys on rank 0")
    return dataclasses.replace(node, left=left, right=right), SINGLE


def _partition(
    ctx: Context, node: L.Join, left: L.Node, dl: Dist, right: L.Node, dr: Dist, keeps: tuple[float, float]
) -> tuple[L.Node, L.Node, tuple[exp.Expression, ...], tuple[exp.Expression, ...], int]:
    """Both built sides hash-partitioned alike: only the other side moves when one is already hashed on a
    subset of the join keys, else both move by key (through skew-aware exchanges when the sides' bytes, as
    ``keeps`` of their join filters leave them, call for them). Returns (left, right, the left and right
    keys they are partitioned on, the skew group: 0 for plain hashing)."""
    kind, lkeys, rkeys = node.kind, node.left_keys, node.right_keys
    group = 0
    if (colocated := _colocated(dl, lkeys, rkeys)) is not None:
        own, other = colocated
        ctx.rely_on(dl)
        right, _ = ctx.to_hash(right, dr, other, f"{kind} join: co-partition with the left side")
        return left, right, own, other, group
    if (colocated := _colocated(dr, rkeys, lkeys)) is not None:
        own, other = colocated
        ctx.rely_on(dr)
        left, _ = ctx.to_hash(left, dl, other, f"{kind} join: co-partition with the right side")
        return left, right, other, own, group
    left, _ = ctx.to_hash(left, dl, lkeys, f"{kind} join: partition left side by key")
    right, _ = ctx.to_hash(right, dr, rkeys, f"{kind} join: partition right side by key")
    # skew-aware exchanges (0: plain hashing), by the sides' bytes once their join filters cut them
    est = _joined_bytes(ctx, node, keeps)
    equi_only = node.residual is None and not node.null_aware
    group = skew.co_partition(ctx, kind, left, right, est, skew.key_range(ctx, node), equi_only)
    return left, right, lkeys, rkeys, group


def _aggregate_by_key(ctx: Context, node: L.Join, keeps: tuple[float, float]) -> L.Join:
    """``node`` with its right side, when that is an aggregate grouped by exactly the join's right keys (under
    projections that pass them on, renamed or not, and filters) with few groups, marked ``by_key``: its groups
    are finished where its partials are hashed by those keys, so the join uses them in place, instead of
    gathered to rank 0, finished there and hashed out again (a round and a one-rank stage fewer: TPC-H Q17's,
    TPC-DS Q32's per-part or per-item average). Only where both sides are hashed anyway and plainly: no
    broadcast, no choice at run time, the left side built spread over the ranks (one on rank 0 keeps the join
    there), the join's bytes under the skew-aware exchanges' threshold (a side already in place forgoes them)."""
    if node.kind not in ("inner", "left", "right", "semi", "anti") or node.null_aware:
        return node
    names = {k.name for k in node.right_keys if isinstance(k, exp.Column) and not k.table}
    if len(names) != len(node.right_keys):
        return node
    marked = _by_key(ctx, node.right, frozenset(names))  # (said by the aggregates rule when it is planned)
    if marked is None or (
        ctx.options.skew_handling and _joined_bytes(ctx, node, keeps) >= ctx.options.skew_threshold
    ):
        return node
    return dataclasses.replace(node, right=marked)


def _by_key(ctx: Context, node: L.Node, keys: frozenset[str]) -> L.Node | None:
    """``node`` with the aggregate it passes on, grouped by exactly ``keys`` and few enough groups to be
    gathered to rank 0, marked ``by_key`` (None if there is none)."""
    if isinstance(node, L.Aggregate):
        if node.sets or {name for name, _e in node.keys} != keys or not aggregates.gathers(ctx, node):
            return None
        return dataclasses.replace(node, by_key=True)
    below_keys = keys
    if isinstance(node, L.Project):  # the keys passed on as they are, or renamed
        source = {name: e.name for name, e in node.exprs if isinstance(e, exp.Column) and not e.table}
        below_keys = frozenset(source[k] for k in keys if k in source)
        if not keys <= source.keys() or len(below_keys) != len(keys):
            return None
    elif not isinstance(node, L.Filter):
        return None
    below = _by_key(ctx, node.input, below_keys)
    return None if below is None else dataclasses.replace(node, input=below)


def _joined_bytes(ctx: Context, node: L.Join, keeps: tuple[float, float]) -> float:
    """The join's estimated input bytes, each side cut by its share in ``keeps`` (what its join filters leave,
    read before the sides were built: building a scan takes its filters; :func:`cut_bytes` reads them now)."""
    return _est_bytes(ctx, node.left) * keeps[0] + _est_bytes(ctx, node.right) * keeps[1]


def _hash_dist(
    kind: str, left_keys: tuple[exp.Expression, ...], right_keys: tuple[exp.Expression, ...], group: int
) -> Dist:
    """How a hash join's output lies: hashed on the keys of the side whose rows it keeps (either side's for an
    inner join, the left side's for left, semi and anti joins), spread at random for a full join."""
    keys = tuple(
        frozenset([L.sql_of(a), L.sql_of(b)]) if kind == "inner" else frozenset([L.sql_of(a)])
        for a, b in zip(left_keys, right_keys)
    )
    if kind == "right":
        keys = tuple(frozenset([L.sql_of(b)]) for b in right_keys)
    return RANDOM if kind == "full" else Dist("hash", keys, group)


def in_place_expected(ctx: Context, node: L.Join) -> bool:
    """Whether :func:`plan` is likely to join ``node`` in place by key range (:mod:`.colocate`), judged before
    its sides are built."""
    choice = "right" if node.null_aware else _broadcast_choice(ctx, node)
    if choice is None:
        return colocate.predicted(ctx, node)
    if choice in ("left", "right"):
        return _in_place_over_broadcast(ctx, node, node.right if choice == "right" else node.left)
    return False


def _in_place_over_broadcast(ctx: Context, node: L.Join, small: L.Node) -> bool:
    """Try the join in place rather than broadcast ``small``: only when the broadcast would cost an exchange
    (``small`` is not a replicated scan, which every rank reads whole at no exchange) and nothing else in the
    sides can move."""
    if not ctx.options.join_in_place_over_broadcast:
        return False
    return not scans.replicable(ctx, small) and colocate.predicted(ctx, node, strict=True)


def _broadcast_choice(ctx: Context, node: L.Join) -> str | None:
    """ "left"/"right" to broadcast that side, "gather" for a keyless join, None to shuffle."""
    lbytes, rbytes = _est_bytes(ctx, node.left), _est_bytes(ctx, node.right)
    candidates = []
    if node.kind in ("inner", "left", "semi", "anti", "cross"):
        candidates.append(("right", rbytes, lbytes, scans.replicable(ctx, node.right)))
    if node.kind in ("inner", "right", "cross"):
        candidates.append(("left", lbytes, rbytes, scans.replicable(ctx, node.left)))
    # a side every rank reads whole (a replicated scan) moves no bytes and leaves the other in place
    free = [c for c in candidates if c[3] and c[1] <= ctx.options.broadcast_limit]
    if free:
        return min(free, key=lambda c: c[1])[0]
    if candidates:
        side, small, big, _ = min(candidates, key=lambda c: c[1])
        if small <= ctx.options.broadcast_limit and (
            not node.left_keys or small * ctx.world <= big * ctx.options.broadcast_factor
        ):
            return side
    return None if node.left_keys else "gather"


def _colocated(
    dist: Dist, own: tuple[exp.Expression, ...], other: tuple[exp.Expression, ...]
) -> tuple[tuple[exp.Expression, ...], tuple[exp.Expression, ...]] | None:
    """If ``dist`` is hash on a subset of ``own`` keys: (own keys, matching other keys) in dist order."""
    if dist.kind != "hash" or not own:
        return None
    own_texts = [L.sql_of(k) for k in own]
    chosen_own, chosen_other = [], []
    for eq in dist.keys:
        idx = next((i for i, t in enumerate(own_texts) if t in eq), None)
        if idx is None:
            return None
        chosen_own.append(own[idx])
        chosen_other.append(other[idx])
    return tuple(chosen_own), tuple(chosen_other)


def _est_bytes(ctx: Context, node: L.Node) -> float:
    return estimate_rows(node) * _width(node, ctx.catalog)


def cut_bytes(ctx: Context, node: L.Node) -> float:
    """``node``'s estimated bytes once the join filters planned onto its scans cut it."""
    return _est_bytes(ctx, node) * _filter_keep(ctx, node)


def _filter_keep(ctx: Context, node: L.Node) -> float:
    """The share of ``node``'s rows left once the join filters planned onto its scans have cut them (the
    smallest estimated keep among them; 1 without any)."""
    return min((f.keep for scan in _scans(node) for f in ctx.join_filters.get(id(scan), ())), default=1.0)


def _scans(node: L.Node) -> list[L.Scan]:
    if isinstance(node, L.Scan):
        return [node]
    return [s for child in node.children for s in _scans(child)]


def _width(node: L.Node, catalog: Catalog) -> float:
    """Bytes per row: column sizes from the footers for scans, 8 per column otherwise."""
    if isinstance(node, L.Scan):
        info = catalog.table(node.table)
        return max(info.row_width([s for s, _i in node.columns]), 1.0)
    if isinstance(node, L.Join):
        if node.kind in ("semi", "anti"):
            return _width(node.left, catalog)
        return _width(node.left, catalog) + _width(node.right, catalog)
    if isinstance(node, (L.Filter, L.Sort, L.Limit, L.Narrow)):
        return _width(node.input, catalog)
    return 8.0 * max(len(node.names), 1)
