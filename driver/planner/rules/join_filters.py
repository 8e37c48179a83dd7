"""Join filters (Bloom-filter / semi-join pushdown, HRDBMS §"Bloom filters"): decide, then plan the join.

For an inner or semi join on equality keys with more than one rank, the build
side (a semi join's right side; the broadcast side; else the smaller side) is
planned first and cut into a stage as usual (hash-partitioned or broadcast).
A small extra stage reads that exchange on every build rank and sends a partial
filter of its keys (:mod:`.joinfilter`) to every rank; the probe side's scans
whose columns carry the probe keys (followed through filters, projections,
inner joins — also across their key equalities —, semi/anti/left joins' left
sides and GROUP BY keys) keep only rows that may match, before anything above
them is partitioned and sent. Then :mod:`.joins` plans the join itself with the
build side already built.

When the build side is a replicated scan (every rank reads it whole, see :func:`.scans.broadcast`),
there is no filter stage: each rank computes the exact build keys inside the probe side's stage
(``local`` kind), which costs no round and no bytes. A probe side joined where it is scanned saves no bytes, but
a small broadcast build side computed by earlier stages (not a replicated scan: DuckDB joins those as it reads)
still cuts its scans in place when its few keys may leave most of their row groups unread (:func:`_decide_in_place`).

A left, anti or semi join's right rows whose key no left row holds change nothing, so when a replicated
scan holds every left key value (:func:`_key_source`: through filters, renames and inner/semi joins' key
equalities), its keys cut the right side's scans the same way (``local`` kind): the reduction a delim
join gives a decorrelated subquery (TPC-H Q2, Q17, Q20).

It pays when ``(1 - keep) * probe scan bytes`` exceeds the filter's bytes times its receivers plus
``join_filter_round_bytes`` for the extra round; ``keep`` is the build side's estimated distinct keys
over the probe key's distinct values: for a build key (nearly) unique in its table
(``join_filter_min_key_share``) or a GROUP BY key, from the build side's share of its table's rows
(a filtered dimension keeps that share of the fact rows); for a key that repeats (TPC-H Q21's
``l_orderkey`` of one nation's suppliers), at most one key per build row, bet on only for few rows (up to
``REPEATED_KEY_ROWS``, or a ``REPEATED_KEY_MARGIN``-th of the key's distinct values) — where the key also
reaches a table it is unique in (an inner join's key equality: ``l_orderkey = o_orderkey``), the smaller estimate.

A filter stage planned over a subtree's keys is reused by a later join whose build side keeps only keys
of that subtree (through filters, renames and the row-keeping side of a join): Q21's anti join takes the
key set its semi join's left side sent, with no second round. When an inner join lies between (Q21's semi join
left side is lineitem ⋈ supplier ⋈ nation, whose keys cut ``orders``, joined with the status-'F' orders), the
later join's own keys may be far fewer: a new round when the rows it saves at the probe scans outweigh its
bytes (:func:`_fresh_pays`). The decision shows in
the plan's notes and the filter stage's note; the effect (rows removed) in
``Result.stats["join_filters"]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from sqlglot import exp

from squall.driver.estimate.rows import estimate_rows
from squall.driver.ir import nodes as L
from squall.driver.ir.sqlgen import InputRef, render
from squall.driver.planner import runtime
from squall.driver.planner.core import REPLICATED, Context, Dist
from squall.driver.planner.exprs import NUMERIC, leaves
from squall.driver.planner.joinfilter import BuiltFilter, JoinFilter, build_node
from squall.driver.planner.rules import joins, scans
from squall.plan import Output, ScanInput

NODES = (L.Join,)

#: Bloom filter bits per estimated build key (rounded up to a power of two)
BITS_PER_KEY = 10
MIN_BITS, MAX_BITS = 1 << 12, 1 << 24
#: a build side whose key repeats in its table: at most this many estimated rows (its distinct keys are only
#: bounded by its rows, and its rows are an estimate: a small bet)
REPEATED_KEY_ROWS = 1 << 17
#: ... or at most this fraction of the key's distinct values (rows several times the estimate would still not hold
#: every key: TPC-H Q21's lineitem of one nation's suppliers at SF10)
REPEATED_KEY_MARGIN = 4.0
#: a broadcast build side computed by earlier stages cuts a probe scanned in place when estimated at most this
#: many rows (see _decide_in_place)
IN_PLACE_BUILD_ROWS = 1000
#: … and only where its keys may leave the scan at most this share of its row groups to read (_groups_hit)
IN_PLACE_MAX_GROUPS = 0.5


def plan(ctx: Context, node: L.Join) -> tuple[L.Node, Dist]:
    decision = _decide(ctx, node)
    if decision is None:
        return ctx.delegate(joins, node)
    build, bkeys, _pkeys, targets, broadcast = decision
    whole = build is node.right or (build is node.left and node.kind == "inner")
    side = build is node.left or build is node.right
    probe = node.left if build is node.right else node.right
    # _decide_in_place's decisions: a broadcast side joined with a probe scanned where it lies
    in_place = broadcast and side and not _moves(ctx, probe)
    if broadcast and (in_place or _replicated(ctx, build) or not side):
        # the side joins.plan broadcasts; else a key source on a left/semi/anti join's left: a replicated
        # scan, or the side a join below broadcasts
        return _plan_local(ctx, node, build, bkeys, targets, whole)
    if broadcast:
        b_node: L.Node = scans.broadcast(ctx, build)
        b_dist = REPLICATED
    else:
        b_node, b_dist = ctx.build(build)
        reads_scans = any(isinstance(ctx.inputs[leaf.name], ScanInput) for leaf in leaves(b_node))
        if b_dist.kind == "hash" and reads_scans:
            ctx.prebuilt[id(build)] = (b_node, b_dist)  # stays in place and would be read again: no filter
            return ctx.delegate(joins, node)
        # hash-partitioned already: it stays in place and the filter stage reruns its SQL over the
        # received inputs; else it moves by key first (a semi join's right side deduped, as joins does)
        if b_dist.kind != "hash":
            if (
                node.kind == "semi"
                and build is node.right
                and node.residual is None
                and all(isinstance(k, exp.Column) for k in bkeys)
            ):
                b_node = L.Aggregate(b_node, tuple((k.name, k) for k in bkeys), ())
            b_node, b_dist = ctx.to_hash(
                b_node, b_dist, bkeys, f"{node.kind} join: partition build side by key"
            )
    ctx.prebuilt[id(build)] = (b_node, b_dist)
    key_sql = [L.sql_of(k) for k in bkeys]
    names = tuple(k.name for k in bkeys if isinstance(k, exp.Column))
    earlier = _earlier_filter(ctx, build, names) if not broadcast else None
    if earlier is not None and not (earlier[2] and _fresh_pays(ctx, build, bkeys, *earlier[:2], targets)):
        reused = " (reused: its keys hold this join's)"
        return _attach(ctx, node, earlier[1], targets, ", ".join(earlier[1].cols), reused)
    key_types = _key_types(ctx, b_node, key_sql)
    n_build = max(estimate_rows(build), 1.0)
    kind = "keys" if n_build <= ctx.options.join_filter_exact_keys else "bloom"
    bits = 0 if kind == "keys" else _bits(n_build)
    what = f"{len(key_sql)} key(s)" if kind == "keys" else f"{bits} bits"
    label_keys = ", ".join(key_sql)
    first = len(ctx.stages) + 1
    ref = ctx.stage(
        build_node(kind, b_node, key_sql, key_types, bits),
        b_dist,
        Output("broadcast"),
        f"{'key set' if kind == 'keys' else 'bloom filter'} ({what}) of the build keys {label_keys}",
        reuse=False,  # filters are reused by their keys (filter_stages)
    )
    assert isinstance(ref, InputRef)
    stage_id = len(ctx.stages)
    assert stage_id >= first
    built = BuiltFilter(names, kind, stage_id, ref.name, key_types, bits)
    if len(names) == len(bkeys):
        ctx.filter_stages.setdefault(id(build), []).append(built)
    return _attach(ctx, node, built, targets, label_keys)


def _attach(
    ctx: Context,
    node: L.Join,
    built: BuiltFilter,
    targets: list[tuple[L.Scan, tuple[str, ...], float]],
    label_keys: str,
    why: str = "",
) -> tuple[L.Node, Dist]:
    """The filter of stage ``built`` at the probe scans ``targets``, then the join itself."""
    what_kind = "key set" if built.kind == "keys" else "bloom filter"
    for scan, cols, keep, label in _targets(
        ctx,
        targets,
        built.key_types,
        label_keys,
        lambda c: f"{what_kind} on {c} from stage {built.stage}{why}",
    ):
        f = JoinFilter(
            built.kind, built.stage, built.input, cols, built.key_types, built.bits, scan.table, keep, label
        )
        ctx.join_filters.setdefault(id(scan), []).append(f)
    return ctx.delegate(joins, node)


def _earlier_filter(
    ctx: Context, node: L.Node, cols: tuple[str, ...], joined: bool = False
) -> tuple[L.Node, BuiltFilter, bool] | None:
    """A filter stage already planned over a subtree of ``node`` whose ``cols`` hold every value of
    ``node``'s ``cols`` (through filters, renames, and the side of a join that keeps its rows' keys), with
    that subtree and whether an inner join lies between them (one that may drop many of the subtree's keys)."""
    if not cols:
        return None
    for built in ctx.filter_stages.get(id(node), []):
        if built.cols == cols:
            return node, built, joined
    if isinstance(node, L.Filter):
        return _earlier_filter(ctx, node.input, cols, joined)
    if isinstance(node, L.Project):
        src = _renamed(dict(node.exprs), cols)
        return _earlier_filter(ctx, node.input, src, joined) if src is not None else None
    if isinstance(node, L.Join) and node.kind in ("inner", "semi", "anti", "left"):
        joined = joined or node.kind == "inner"
        if all(c in node.left.names for c in cols):
            return _earlier_filter(ctx, node.left, cols, joined)
        if node.kind == "inner" and all(c in node.right.names for c in cols):
            return _earlier_filter(ctx, node.right, cols, joined)
    return None


def _fresh_pays(
    ctx: Context,
    build: L.Node,
    bkeys: tuple[exp.Expression, ...],
    subtree: L.Node,
    earlier: BuiltFilter,
    targets: list[tuple[L.Scan, tuple[str, ...], float]],
) -> bool:
    """Whether a new filter round over ``build``'s own keys pays instead of reusing ``earlier`` (planned over
    ``subtree``, a part of ``build`` below an inner join): the subtree may hold many more keys than ``build``
    keeps (Q21's lineitem ⋈ supplier ⋈ nation before its ``o_orderstatus = 'F'`` orders join), and the rows
    the probe scans then keep for nothing can outweigh the new round's filter bytes. Unknown: reuse. (Below
    only semi/anti joins and filters, whose estimates are flat guesses, the earlier filter is always reused.)"""
    old = _distinct_build(ctx, subtree, tuple(exp.column(c) for c in earlier.cols))
    new = _distinct_build(ctx, build, bkeys)
    if old is None or new is None or new >= old:
        return False
    n_build = max(estimate_rows(build), 1.0)
    cost = (
        _filter_bytes(ctx, n_build, len(bkeys)) * ctx.world * ctx.world + ctx.options.join_filter_round_bytes
    )
    saved = 0.0
    for scan, cols, keep in targets:
        ndv = _ndv(ctx, scan, cols, float(ctx.catalog.table(scan.table).num_rows))
        saved += max(min(1.0, old / ndv) - keep, 0.0) * scan.est_rows * max(scan.row_width, 1.0)
    return saved > cost


def _plan_local(
    ctx: Context,
    node: L.Join,
    build: L.Node,
    bkeys: tuple[exp.Expression, ...],
    targets: list[tuple[L.Scan, tuple[str, ...], float]],
    whole: bool = True,
) -> tuple[L.Node, Dist]:
    """Filters whose build side every rank holds whole (a replicated scan, or a broadcast planned now):
    exact keys computed in the probe's own stage. ``whole``: ``build`` is a join side; else a key source
    inside one (a broadcast is then kept for the join below that broadcasts it)."""
    replicated = _replicated(ctx, build)
    b_node = scans.broadcast(ctx, build)
    if whole or not replicated:
        ctx.prebuilt[id(build)] = (b_node, REPLICATED)
    where = "replicated scan" if replicated else "a broadcast the plan makes anyway"
    key_sql = [L.sql_of(k) for k in bkeys]
    key_types = _key_types(ctx, b_node, key_sql)
    keys = build_node("keys", b_node, key_sql, key_types, 0)
    label_keys = ", ".join(key_sql)
    for scan, cols, keep, label in _targets(
        ctx,
        targets,
        key_types,
        label_keys,
        lambda c: f"key set on {c} from {label_keys} computed on every rank ({where}, no extra round)",
    ):
        f = JoinFilter("local", 0, "", cols, key_types, 0, scan.table, keep, label, source=keys)
        ctx.join_filters.setdefault(id(scan), []).append(f)
    return ctx.delegate(joins, node)


def _key_types(ctx: Context, b_node: L.Node, key_sql: list[str]) -> tuple[str, ...]:
    """DuckDB's types of the build keys over the planned build side."""
    typed = ctx.typecheck(f"SELECT {', '.join(key_sql)} FROM ({render(b_node)}) AS t", leaves(b_node))
    return tuple(t for _n, t in typed)


def _targets(
    ctx: Context,
    targets: list[tuple[L.Scan, tuple[str, ...], float]],
    key_types: tuple[str, ...],
    label_keys: str,
    source: Callable[[str], str],
) -> list[tuple[L.Scan, tuple[str, ...], float, str]]:
    """The probe scans whose key types hash like the build keys, each with its note (also added to the
    plan's notes); a scan whose types differ gets a note saying so instead. ``source(cols)`` names the
    filter for the scan's key columns."""
    out = []
    for scan, cols, keep in targets:
        if not _compatible(key_types, _scan_types(ctx, scan, cols)):
            ctx.notes.append(f"no join filter on {label_keys} → scan of {scan.table}: key types differ")
            continue
        label = f"{source(', '.join(cols))} → scan of {scan.table}, est. keep {keep * 100:.0f} %"
        ctx.notes.append(label)
        out.append((scan, cols, keep, label))
    return out


def _filter_bytes(ctx: Context, n_build: float, keys: int) -> float:
    exact = n_build <= ctx.options.join_filter_exact_keys
    return 8.0 * n_build * keys if exact else _bits(n_build) / 8


def _bits(n: float) -> int:
    want = max(MIN_BITS, min(MAX_BITS, BITS_PER_KEY * n))
    return 1 << math.ceil(math.log2(want))


#: a filter decision: (build side or key source, its keys, probe keys, [(scan, its key columns, est. keep)],
#: broadcast?)
Decision = tuple[
    L.Node,
    tuple[exp.Expression, ...],
    tuple[exp.Expression, ...],
    list[tuple[L.Scan, tuple[str, ...], float]],
    bool,
]


def _decide(ctx: Context, node: L.Join) -> Decision | None:
    """(build side, its keys, probe keys, [(scan, its key columns, est. keep)], broadcast?) or None."""
    if (
        not ctx.options.enabled("join_filters")
        or ctx.world == 1
        or ctx.replicate
        or node.kind not in ("inner", "semi", "left", "anti")
        or node.null_aware
        or not node.left_keys
    ):
        return None
    if joins.in_place_expected(ctx, node):  # joined where both sides are read: nothing crosses an exchange
        return None
    if node.kind in ("left", "anti"):
        return _decide_from_left(ctx, node)
    decision = _decide_build(ctx, node)
    if decision is None and node.kind == "semi":
        return _decide_from_left(ctx, node)
    return decision


def _decide_build(ctx: Context, node: L.Join) -> Decision | None:
    """An inner or semi join's filter from its build side (a semi join's right side; the broadcast side;
    else the smaller side) to the other side's scans."""
    choice = joins._broadcast_choice(ctx, node)
    if choice == "left":
        build_left = True
    elif choice == "right" or node.kind == "semi":
        build_left = False
    else:
        build_left = estimate_rows(node.left) < estimate_rows(node.right)
    build, probe = (node.left, node.right) if build_left else (node.right, node.left)
    bkeys, pkeys = (node.left_keys, node.right_keys) if build_left else (node.right_keys, node.left_keys)
    if not all(isinstance(k, exp.Column) for k in pkeys):
        return None
    broadcast = choice in ("left", "right")
    if broadcast and not _moves(ctx, probe):  # the probe side is joined where it is scanned: nothing to save
        # … unless the broadcast rests on guesses and is left to run time (planner/runtime.py): when both sides
        # come out spread, joins.plan hashes both and the probe side moves whole (TPC-H Q9 at SF100: lineitem
        # by partkey against a LIKE-filtered part estimated at 95 MB); then the filter pays as for a hash join
        deferred = runtime.candidate(ctx, node, lambda n: joins.cut_bytes(ctx, n))
        if deferred is None or deferred[0] != choice:
            return _decide_in_place(ctx, build, probe, bkeys, pkeys)
        broadcast = False
    distinct = _distinct_build(ctx, build, bkeys)
    if distinct is None:
        return None
    n_build = max(estimate_rows(build), 1.0)
    filter_bytes = _filter_bytes(ctx, n_build, len(bkeys))
    senders = 1 if broadcast else ctx.world
    cost = filter_bytes * senders * ctx.world + ctx.options.join_filter_round_bytes
    if broadcast and _replicated(ctx, build):
        cost = 0.0  # computed where the probe is scanned: no round, no bytes
    targets = _probe_targets(ctx, probe, pkeys, distinct, cost, _key_domain(ctx, build, bkeys))
    return (build, bkeys, pkeys, targets, broadcast) if targets else None


def _decide_in_place(
    ctx: Context,
    build: L.Node,
    probe: L.Node,
    bkeys: tuple[exp.Expression, ...],
    pkeys: tuple[exp.Expression, ...],
) -> Decision | None:
    """A broadcast build side computed by earlier stages (not a replicated scan: DuckDB joins those in the
    stage as it reads the probe) and estimated at most ``IN_PLACE_BUILD_ROWS`` rows, joined with a probe side
    scanned where it lies: its few keys cut the probe's scans in the stage itself (no round, no bytes), as a
    semi join DuckDB turns into a filter at the Parquet scan that skips the row groups none of the keys can be
    in — before the probe's other join filters read it whole (TPC-DS Q25: the three ``store_returns`` ⋈
    ``catalog_sales`` rows of one period keep ``store_sales``'s three row groups of their tickets)."""
    if _replicated(ctx, build) or estimate_rows(build) > IN_PLACE_BUILD_ROWS:
        return None
    distinct = _distinct_build(ctx, build, bkeys)
    if distinct is None:
        return None
    targets = [
        (scan, cols, keep)
        for scan, cols, keep in _probe_targets(
            ctx, probe, pkeys, distinct, 0.0, _key_domain(ctx, build, bkeys)
        )
        if _groups_hit(ctx, scan, cols, distinct) <= IN_PLACE_MAX_GROUPS
    ]
    return (build, bkeys, pkeys, targets, True) if targets else None


def _groups_hit(ctx: Context, scan: L.Scan, cols: tuple[str, ...], keys: float) -> float:
    """The expected share of ``scan``'s row groups that hold one of ``keys`` key values drawn evenly from the
    table's range of the best clustered of ``cols`` (a row group spanning ``w`` of a range ``W`` holds one with
    chance ``w / W``; 1.0 where the footers give no numeric min/max): TPC-DS ``store_sales`` is written by
    ticket number, ~4 % of the range a row group, and spread over every customer."""
    try:
        groups = ctx.catalog.table(scan.table).row_groups
    except (KeyError, OSError, ValueError):
        return 1.0
    source = {internal: src for src, internal in scan.columns}
    best = 1.0
    for col in cols:
        found = [_span(g.columns.get(source.get(col, ""))) for g in groups]
        spans = [sp for sp in found if sp is not None]
        if not spans or len(spans) < len(found):
            continue
        lo, hi = min(a for a, _b in spans), max(b for _a, b in spans)
        if hi <= lo:
            continue
        hit = [1.0 - (1.0 - min((b - a) / (hi - lo), 1.0)) ** keys for a, b in spans]
        best = min(best, sum(hit) / len(hit))
    return best


def _span(stats: object) -> tuple[float, float] | None:
    lo, hi = getattr(stats, "min", None), getattr(stats, "max", None)
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and not isinstance(lo, bool):
        return float(lo), float(hi)
    return None


def _key_domain(ctx: Context, build: L.Node, bkeys: tuple[exp.Expression, ...]) -> float:
    """Distinct values of the build keys' columns in their whole tables (the smallest, over the scans the keys
    come from; 0 unknown): the domain a filtered build side picks its keys from."""
    found = [
        _ndv(ctx, scan, cols, max(float(ctx.catalog.table(scan.table).num_rows), 1.0))
        for scan, cols in _trace(build, tuple(k.name for k in bkeys if isinstance(k, exp.Column)))
    ]
    return min(found) if found else 0.0


def _probe_targets(
    ctx: Context,
    probe: L.Node,
    pkeys: tuple[exp.Expression, ...],
    distinct: float,
    cost: float,
    domain: float = 0.0,
) -> list[tuple[L.Scan, tuple[str, ...], float]]:
    """The probe side's scans worth filtering by ``distinct`` build keys, with their estimated keep: the share of
    the probe key's distinct values the build keys hold, both drawn from the larger of the two key domains (the
    probe's distinct values, the build keys' ``domain`` in their table): a fact table's dates are a few of the
    date dimension's, and one year of that dimension holds a year's share of them (TPC-DS Q39's inventory)."""
    targets = []
    for scan, cols in _trace(probe, tuple(k.name for k in pkeys)):
        rows = float(ctx.catalog.table(scan.table).num_rows)
        if rows <= ctx.options.replicated_scan_rows:  # likely read whole by every rank: never sent
            continue
        keep = min(1.0, distinct / max(_ndv(ctx, scan, cols, rows), domain))
        saved = (1.0 - keep) * scan.est_rows * max(scan.row_width, 1.0)
        if saved > cost and keep <= ctx.options.join_filter_max_keep:
            targets.append((scan, cols, keep))
    return targets


def _decide_from_left(ctx: Context, node: L.Join) -> Decision | None:
    """A left, semi or anti join's right rows whose keys no left row holds change nothing: filter the right
    side's scans by the keys of a replicated scan that holds every left key value (through inner joins' key
    equalities), e.g. the filtered ``part`` of TPC-H Q17 and Q20 for a decorrelated aggregate over
    ``lineitem`` — the semi-join reduction DuckDB's delim join gives a correlated subquery —, or Q22's
    filtered ``customer`` for the ``orders`` of its NOT EXISTS. Only with such a key source: no extra round."""
    # (the right side always crosses an exchange: broadcast, or partitioned by key with the left side)
    if not all(isinstance(k, exp.Column) for k in (*node.left_keys, *node.right_keys)):
        return None
    pairs = list(zip(node.left_keys, node.right_keys))
    for keys in (pairs, *([p] for p in pairs if len(pairs) > 1)):  # all keys, else one of them
        found = _key_source(ctx, node.left, tuple(lk.name for lk, _rk in keys))
        if found is not None:
            break
    if found is None:
        return _decide_left_round(ctx, node)
    source, cols = found
    skeys = tuple(exp.column(c) for c in cols)
    pkeys = tuple(rk for _lk, rk in keys)
    distinct = _distinct_build(ctx, source, skeys)
    if distinct is None:
        return None
    targets = _probe_targets(ctx, node.right, pkeys, distinct, 0.0)  # computed in place: costs nothing
    # a broadcast's keys (a superset), or a replicated scan's that cut too little (TPC-DS Q95's web_returns under
    # the left side's first semi join): the left's own keys, sent in a round, may cut more
    if not targets or not _replicated(ctx, source):
        by_round = _decide_left_round(ctx, node)
        if by_round is not None and (not targets or _best_keep(by_round[3]) < _best_keep(targets)):
            return by_round
    return (source, skeys, pkeys, targets, True) if targets else None


def _best_keep(targets: list[tuple[L.Scan, tuple[str, ...], float]]) -> float:
    return min(keep for _s, _c, keep in targets)


def _decide_left_round(ctx: Context, node: L.Join) -> Decision | None:
    """A left, semi or anti join whose sides both move by key (no broadcast) and whose left keys are
    (nearly) unique: the left side, partitioned by key as the join needs anyway, sends a filter of its keys
    in an extra round and the right side's scans keep only rows that may match (TPC-H Q4: one quarter's
    ``orders`` cut ``lineitem`` to the rows of those orders before its GROUP BY and shuffle)."""
    if joins._broadcast_choice(ctx, node) is not None:
        return None  # the left stays where it is scanned: a filter would first move it
    if not all(isinstance(k, exp.Column) for k in node.right_keys):
        return None
    distinct = _distinct_build(ctx, node.left, node.left_keys)
    if distinct is None:
        return None
    n_left = max(estimate_rows(node.left), 1.0)
    filter_bytes = _filter_bytes(ctx, n_left, len(node.left_keys))
    cost = filter_bytes * ctx.world * ctx.world + ctx.options.join_filter_round_bytes
    targets = _probe_targets(ctx, node.right, node.right_keys, distinct, cost)
    return (node.left, node.left_keys, node.right_keys, targets, False) if targets else None


def _key_source(ctx: Context, node: L.Node, cols: tuple[str, ...]) -> tuple[L.Node, tuple[str, ...]] | None:
    """A subtree every rank holds whole (a replicated scan, or the side an inner/semi join broadcasts) whose
    ``cols`` hold every non-NULL value of ``node``'s ``cols``, following filters, plain renames and
    inner/semi joins (across their key equalities); None if there is none."""
    if not all(c in node.names for c in cols):
        return None
    if _replicated(ctx, node):
        return node, cols
    if isinstance(node, (L.Filter, L.Project)):
        src = cols if isinstance(node, L.Filter) else _renamed(dict(node.exprs), cols)
        return _key_source(ctx, node.input, src) if src is not None else None
    if isinstance(node, L.Join) and node.kind in ("inner", "semi"):
        sides = [
            (node.left, node.left_keys, node.right, node.right_keys),
            (node.right, node.right_keys, node.left, node.left_keys),
        ]
        if node.kind == "semi":  # its output has only its left side's columns (their keys ⊆ the right's)
            sides = sides[:1]
        for own, own_keys, other, other_keys in sides:
            if all(c in own.names for c in cols):
                found = _key_source(ctx, own, cols)
                across = _across(cols, own_keys, other_keys)
                if found is None and across is not None:
                    found = _key_source(ctx, other, across)
                    side = "right" if other is node.right else "left"
                    if found is None and joins._broadcast_choice(ctx, node) == side:
                        found = other, across  # broadcast to every rank anyway (TPC-H Q20's part at SF10)
                return found
    return None


def _moves(ctx: Context, node: L.Node) -> bool:
    """Whether a subtree has parts that cross an exchange below its top (joins, aggregates…).

    An inner join with a side that every rank reads whole (a replicated scan, see
    :func:`.scans.broadcast`) stays where its other side is scanned (Q21's lineitem ⋈ supplier ⋈ nation).
    """
    if isinstance(node, L.Scan):
        return False
    if isinstance(node, (L.Filter, L.Project)):
        return _moves(ctx, node.input)
    if isinstance(node, L.Join) and node.kind in ("inner", "cross"):
        if _replicated(ctx, node.right):
            return _moves(ctx, node.left)
        if _replicated(ctx, node.left):
            return _moves(ctx, node.right)
    return True


def _replicated(ctx: Context, node: L.Node) -> bool:
    return scans.replicable(ctx, node)


def _distinct_build(ctx: Context, build: L.Node, bkeys: tuple[exp.Expression, ...]) -> float | None:
    """Estimated distinct build keys: a share ``sel`` of a table's rows holds ``D * (1 - (1 - sel) ** (R / D))``
    of its ``D`` distinct keys (``R`` rows); a GROUP BY's groups are distinct already. When the keys reach
    several scans (across inner joins' key equalities), the smallest estimate: a key that repeats in one
    table may be another's key (Q21's ``l_orderkey`` joined with ``o_orderkey``: at most one key per row)."""
    if not all(isinstance(k, exp.Column) for k in bkeys):
        return None
    found = [
        d
        for scan, cols in _trace(build, tuple(k.name for k in bkeys))
        if (d := _distinct_in(ctx, build, scan, cols)) is not None
    ]
    return min(found) if found else None


def _distinct_in(ctx: Context, build: L.Node, scan: L.Scan, cols: tuple[str, ...]) -> float | None:
    """:func:`_distinct_build` from one scan the build keys come from (None: too unsure)."""
    rows = max(float(ctx.catalog.table(scan.table).num_rows), 1.0)
    ndv = _ndv(ctx, scan, cols, rows)
    sel = min(1.0, estimate_rows(build) / rows)
    if ndv < ctx.options.join_filter_min_key_share * rows and not _grouped(build):
        # many rows per key: at most one key per row, bet on only for few rows (TPC-H Q10's
        # l_returnflag = 'R' lineitem holds 68 % of the orders, not the 20 % its estimated rows allow)
        rows_est = estimate_rows(build)
        few = rows_est <= REPEATED_KEY_ROWS or rows_est * REPEATED_KEY_MARGIN <= ndv
        return min(rows_est, ndv) if few else None
    return min(estimate_rows(build), ndv * (1.0 - (1.0 - sel) ** (rows / ndv)))


def _grouped(node: L.Node) -> bool:
    """A GROUP BY under filters and projections: its rows are distinct keys."""
    while isinstance(node, (L.Filter, L.Project)):
        node = node.input
    return isinstance(node, L.Aggregate)


def _ndv(ctx: Context, scan: L.Scan, cols: tuple[str, ...], rows: float) -> float:
    """Distinct values of a scan's key columns (the largest single column's, at most the table's rows)."""
    source = {internal: src for src, internal in scan.columns}
    try:
        best = max(float(ctx.catalog.ndv(scan.table, source[c])) for c in cols)
    except (KeyError, OSError, ValueError):  # no sample: assume a key
        best = rows
    return min(max(best, 1.0), rows)


def _trace(node: L.Node, cols: tuple[str, ...]) -> list[tuple[L.Scan, tuple[str, ...]]]:
    """Scans below ``node`` where a row may be dropped when its ``cols`` values miss the filter."""
    if isinstance(node, L.Scan):
        return [(node, cols)] if all(c in node.names for c in cols) else []
    if isinstance(node, L.Filter):
        return _trace(node.input, cols)
    if isinstance(node, L.Project):
        src = _renamed(dict(node.exprs), cols)
        return _trace(node.input, src) if src is not None else []
    if isinstance(node, L.Aggregate):
        src = None if node.sets else _renamed(dict(node.keys), cols)
        return _trace(node.input, src) if src is not None else []
    if isinstance(node, L.Join):
        out: list[tuple[L.Scan, tuple[str, ...]]] = []
        left_names = set(node.left.names)
        if all(c in left_names for c in cols) and node.kind in ("inner", "semi", "anti", "left"):
            out += _trace(node.left, cols)
            if node.kind == "inner":
                other = _across(cols, node.left_keys, node.right_keys)
                if other is not None:
                    out += _trace(node.right, other)
        elif node.kind == "inner" and all(c in node.right.names for c in cols):
            out += _trace(node.right, cols)
            other = _across(cols, node.right_keys, node.left_keys)
            if other is not None:
                out += _trace(node.left, other)
        return out
    return []


def _renamed(exprs: dict[str, exp.Expression], cols: tuple[str, ...]) -> tuple[str, ...] | None:
    """The input columns that a projection's or GROUP BY's output ``cols`` are plain copies of, else None."""
    src = []
    for c in cols:
        e = exprs.get(c)
        if not isinstance(e, exp.Column):
            return None
        src.append(e.name)
    return tuple(src)


def _across(
    cols: tuple[str, ...], own: tuple[exp.Expression, ...], other: tuple[exp.Expression, ...]
) -> tuple[str, ...] | None:
    """The other side's columns equal to ``cols`` by the join keys, when every one is a plain column."""
    pairs = {
        a.name: b.name for a, b in zip(own, other) if isinstance(a, exp.Column) and isinstance(b, exp.Column)
    }
    if not all(c in pairs for c in cols):
        return None
    return tuple(pairs[c] for c in cols)


def _scan_types(ctx: Context, scan: L.Scan, cols: tuple[str, ...]) -> tuple[str, ...]:
    info = ctx.catalog.table(scan.table)
    source = {internal: src for src, internal in scan.columns}
    import pyarrow as pa

    tbl = pa.schema([info.schema.field(source[c]).with_name(c) for c in cols]).empty_table()
    ctx._db.con.register("__jf_types", tbl)
    try:
        return tuple(str(t) for t in ctx._db.relation("SELECT * FROM __jf_types").types)
    finally:
        ctx._db.con.unregister("__jf_types")


def _compatible(build: tuple[str, ...], probe: tuple[str, ...]) -> bool:
    """Keys hash alike: both numeric (hashed as DOUBLE) or the same type."""
    return len(build) == len(probe) and all(
        (b.startswith(NUMERIC) and p.startswith(NUMERIC)) or b == p for b, p in zip(build, probe)
    )
