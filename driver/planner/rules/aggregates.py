"""Aggregates: partial → exchange → final, or complete where the rows already are.

An aggregate whose input is already hash-partitioned on a subset of its group
keys (or is on one rank, or replicated) completes in place — except decomposable aggregates over a
skew-aware join that may spread hot keys (selective broadcast), which go partial → final so that the join
keeps that freedom. Otherwise decomposable
aggregates run partial on every rank (AVG as SUM and COUNT, VAR/STDDEV of integers and small DECIMALs as
exact count, sum and sum of squares, of other types as count, mean and M2 merged pairwise as DuckDB does) and
final after the exchange: a gather to rank 0 when there are few groups (no keys, or at most
``gather_groups`` by the catalog's NDVs), else hash-partitioned by the group keys. Aggregates that cannot
be split (DISTINCT, holistic ones) move their rows instead — deduped locally on
(keys, arguments) first when that cannot change the result — and complete after
the move. DISTINCT aggregates that all read one argument (``count``/``sum``/``min``/``max``) go in two
steps instead (as Spark plans one distinct aggregate): the (keys, argument) pairs move by both and are
deduped where they land, then the aggregates, no longer DISTINCT, split partial → final as above; a hot
group key's values are spread over the ranks by value, and each rank sends one partial row per group.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from squall.driver.estimate.rows import estimate_rows
from squall.driver.ir import nodes as L
from squall.driver.ir.aggregates import TYPED_ARGS, Aggs, split_aggs
from squall.driver.ir.exprs import parse
from squall.driver.ir.nodes import find_scan_column
from squall.driver.ir.sqlgen import InputRef, q
from squall.driver.planner import colocate, skew
from squall.driver.planner.core import RANDOM, SINGLE, Context, Dist
from squall.driver.planner.exprs import rewrite_cols
from squall.plan import Output

REQUIRED = True  # no other rule plans these nodes
NODES = (L.Aggregate,)

_DECOMPOSABLE = {"sum", "count", "count_star", "min", "max", "avg", "bool_and", "bool_or", "bit_and", "bit_or",
                 "bit_xor", "stddev", "stddev_samp", "stddev_pop", "variance", "var_samp", "var_pop",
                 "product", "fsum", "sumkahan", "kahan_sum"}  # fmt: skip
#: duplicates of an argument do not change the result
_IDEMPOTENT = {"min", "max", "bool_and", "bool_or", "bit_and", "bit_or"}


def plan(ctx: Context, node: L.Aggregate) -> tuple[L.Node, Dist]:
    child, dist = ctx.build(node.input)
    if node.sets:
        return _plan_sets(ctx, node, child, dist)
    key_texts = [L.sql_of(e) for _n, e in node.keys]
    out_dist_keys = tuple(frozenset([q(n)]) for n, _e in node.keys)
    if ctx.world == 1 or dist.kind in ("single", "replicated"):
        return L.Aggregate(child, node.keys, node.aggs), (dist if dist.kind != "random" else RANDOM)
    decomposable = all(a.func in _DECOMPOSABLE and not a.distinct and not a.filtered for _n, a in node.aggs)
    in_place = dist.kind == "hash" and node.keys and all(any(t in eq for t in key_texts) for eq in dist.keys)
    if in_place and not (decomposable and _spreads_hot_keys(ctx, node, dist)):
        mapping = {t: q(n) for t, (n, _e) in zip(key_texts, node.keys)}
        ctx.rely_on(dist, exact=False)
        return L.Aggregate(child, node.keys, node.aggs), dist.rename(mapping)
    gather = gathers(ctx, node)
    if (
        dist.kind == "random"
        and (done := _complete_in_place(ctx, node, child, resplit=not gather)) is not None
    ):
        return done
    if node.by_key and node.keys and _est_groups(ctx, node) <= ctx.options.gather_groups:
        grouped_by = ", ".join(n for n, _e in node.keys)
        ctx.notes.append(
            f"aggregate by {grouped_by} finished where its groups are hashed by them, for the join on them that "
            "follows (not gathered to rank 0)"
        )
    if decomposable:
        return _partial_final(ctx, node, child, dist, gather)
    if (arg := _one_distinct_argument(node)) is not None:
        return _distinct_in_two_steps(ctx, node, child, dist, arg, gather)
    # not decomposable (DISTINCT, holistic aggregates): move rows, then aggregate completely
    pre: L.Node = child
    if all((a.distinct or a.func in _IDEMPOTENT) and not a.filtered for _n, a in node.aggs) and node.aggs:
        cols: dict[str, exp.Expression] = {n: e for n, e in node.keys}
        for _n, a in node.aggs:
            for arg in a.args:
                cols.setdefault(ctx.fresh("arg"), arg)
        # dedupe locally on (keys, arguments) first: shrinks what moves
        names = {L.sql_of(e): n for n, e in cols.items()}
        pre = L.Aggregate(child, tuple((n, e) for n, e in cols.items()), ())
        keys = tuple((n, L.col(n)) for n, _e in node.keys)
        aggs = tuple(
            (n, dataclasses.replace(a, expression=rewrite_cols(a.expression, names))) for n, a in node.aggs
        )
        node = L.Aggregate(node.input, keys, aggs)
    if not node.keys:
        ref = ctx.gather(pre, dist, "aggregate that cannot be split: rows to rank 0")
        return L.Aggregate(ref, node.keys, node.aggs), SINGLE
    key_exprs = tuple(e for _n, e in node.keys)
    if isinstance(pre, L.Aggregate):
        key_exprs = tuple(L.col(n) for n, _e in node.keys)
    ref, _ = ctx.to_hash(pre, dist, key_exprs, "aggregate that cannot be split: rows by group key")
    return L.Aggregate(ref, node.keys, node.aggs), Dist("hash", out_dist_keys)


def _spreads_hot_keys(ctx: Context, node: L.Aggregate, dist: Dist) -> bool:
    """Whether ``dist`` comes from a skew-aware join that may spread a hot key's rows over the ranks
    (selective broadcast) and ``node``'s input is estimated at ``skew_min_bytes`` or more. An aggregate of
    decomposable functions over it then goes partial → final (one partial row per hot group and rank)
    rather than in place, which would give up the spreading; over a small input one rank's hot group costs
    less than the extra exchange."""
    if not dist.group or not any(s.output.group == dist.group and s.output.heavy for s in ctx.stages):
        return False
    return estimate_rows(node.input) * 8.0 * len(node.input.names) >= ctx.options.skew_threshold


def _complete_in_place(
    ctx: Context, node: L.Aggregate, child: L.Node, resplit: bool
) -> tuple[L.Node, Dist] | None:
    """The whole aggregate on every rank, no exchange, when a group key is an integer column whose rows each
    rank's scan splits hold a range of their own (Parquet statistics; data written in key order, e.g.
    lineitem by l_orderkey): every group lies on one rank. Its output is grouped but not hash-partitioned.
    With ``resplit`` (groups too many to gather to rank 0), the scan may also be split anew by ranges of the
    key (:mod:`.colocate`); few groups go to rank 0 instead, where the query goes on with them."""
    if not (ctx.options.aggregate_in_place and ctx.options.skew_locality_ranges) or node.sets:
        return None
    for name, key in node.keys:
        if (ranges := skew.split_ranges_below(ctx, child, key)) is not None:
            colocate.fix_ranges(ctx, child, key, ranges)  # a join above on the key takes the same ranges
            bounds = ", ".join(f"≥{lo} → rank {r}" for lo, r in ranges[:3]) + (
                ", …" if len(ranges) > 3 else ""
            )
            ctx.notes.append(
                f"aggregate by {name} complete on every rank, no exchange: each rank's scan splits hold their own "
                f"range of it (Parquet statistics: {bounds})"
            )
            return L.Aggregate(child, node.keys, node.aggs), RANDOM
    for name, key in node.keys if resplit else ():
        if (how := colocate.aggregate_in_place(ctx, child, key)) is not None:
            ctx.notes.append(f"aggregate by {name} complete on every rank, no exchange: {how}")
            return L.Aggregate(child, node.keys, node.aggs), RANDOM
    return None


def _partial_final(
    ctx: Context, node: L.Aggregate, child: L.Node, dist: Dist, gather: bool
) -> tuple[L.Node, Dist]:
    """Decomposable aggregates of ``node`` over ``child``: partial on every rank, then final after a gather to
    rank 0 (``gather``) or a hash exchange by the group keys."""
    partial, final, post = _split_aggs(ctx, node)
    part_node = L.Aggregate(child, node.keys, partial)
    key_cols = tuple((n, L.col(n)) for n, _e in node.keys)
    if gather:
        ref = ctx.gather(part_node, dist, "partial aggregates to rank 0")
        out_dist = SINGLE
    else:
        by = tuple(q(n) for n, _ in node.keys)
        ref = ctx.stage(part_node, dist, Output("hash", keys=by), "partial aggregates by group key")
        domain = skew.column_domain(ctx, node.input, node.keys[0][1]) if len(node.keys) == 1 else None
        rows = min(_est_groups(ctx, node) * ctx.world, estimate_rows(node.input))
        group = skew.by_key_ranges(ctx, ref, rows * 8.0 * len(part_node.names), domain, node.keys[0][1])
        out_dist = Dist("hash", tuple(frozenset([q(n)]) for n, _e in node.keys), group)
    ref, widened = _sums_read_narrow(ref, final)
    final_node: L.Node = L.Aggregate(ref, key_cols, final)
    if widened:
        final_node = L.Project(
            final_node,
            tuple((n, L.col(n)) for n, _ in node.keys)
            + tuple((n, exp.cast(L.col(n), "HUGEINT") if n in widened else L.col(n)) for n, _a in final),
        )
    final_node = L.Project(final_node, tuple((n, L.col(n)) for n, _ in node.keys) + post)
    return final_node, out_dist


def _sums_read_narrow(ref: L.Node, final: Aggs) -> tuple[L.Node, frozenset[str]]:
    """``ref`` (the exchanged partials) with its HUGEINT partial sums read as DuckDB exchanges them
    (DECIMAL(38,0)) where the final aggregate only sums them, and the final sums to cast to HUGEINT after.

    The same values (a sum of integers under 10^38 either way; past that DECIMAL(38,0) overflows with an error),
    without a cast per row: casting DECIMAL(38,0) to HUGEINT costs ~50 ns a value (TPC-DS Q39's final aggregate
    over 180,000 partial rows of two such sums, in DuckDB alone: 29 ms with the casts, 11 ms without); a cast
    per group after the sum costs little."""
    if not isinstance(ref, InputRef) or not ref.casts:
        return ref, frozenset()
    wide = {c for c, t in ref.casts if t == "HUGEINT"}
    summed = {
        e.this.name: n
        for n, a in final
        if isinstance(e := a.expression, exp.Sum)
        and isinstance(e.this, exp.Column)
        and e.this.name in wide
        and not a.distinct
        and not a.filtered
    }
    used = [c.name for _n, a in final for c in a.expression.find_all(exp.Column)]
    narrow = {c for c in summed if used.count(c) == 1}
    if not narrow:
        return ref, frozenset()
    kept = tuple((c, t) for c, t in ref.casts if c not in narrow)
    return dataclasses.replace(ref, casts=kept), frozenset(summed[c] for c in narrow)


#: DISTINCT aggregates that, over (keys, argument) pairs deduped, are the plain aggregate of the argument
_DISTINCT_SPLIT = {"count", "sum", "min", "max"}


def _one_distinct_argument(node: L.Aggregate) -> exp.Expression | None:
    """The argument every aggregate of ``node`` reads, when all are DISTINCT ``count``/``sum``/``min``/``max``
    of that one argument (no FILTER); else None."""
    if not node.aggs:
        return None
    args = set()
    for _n, a in node.aggs:
        if not a.distinct or a.filtered or a.func not in _DISTINCT_SPLIT or len(a.args) != 1:
            return None
        args.add(L.sql_of(a.args[0]))
    return node.aggs[0][1].args[0] if len(args) == 1 else None


def _distinct_in_two_steps(
    ctx: Context, node: L.Aggregate, child: L.Node, dist: Dist, arg: exp.Expression, gather: bool
) -> tuple[L.Node, Dist]:
    """DISTINCT aggregates of one argument: (keys, argument) pairs deduped locally, moved by both and deduped
    where they land; then the plain aggregates of the argument, partial → final (see module doc)."""
    value = ctx.fresh("distinct_arg")
    cols = (*node.keys, (value, arg))
    pre = L.Aggregate(child, cols, ())
    groups = _est_groups(ctx, node)
    pair_bytes = estimate_rows(node.input) * 8.0 * len(cols)
    guarded = ctx.options.skew_handling and pair_bytes >= ctx.options.skew_threshold
    if node.keys and groups >= ctx.options.distinct_by_keys_groups * ctx.world and not guarded:
        # many groups and an input under skew_min_bytes (where skew handling would spread a hot group's
        # values): by the group keys alone, each rank completes its groups (no partial → final round)
        ref, _ = ctx.to_hash(
            pre,
            dist,
            tuple(L.col(n) for n, _e in node.keys),
            f"distinct aggregate: (group keys, value) pairs by group key, complete where they land "
            f"(~{groups:,.0f} groups est. ≥ distinct_by_keys_groups {ctx.options.distinct_by_keys_groups:,.0f} "
            f"per rank; ~{pair_bytes / 1e6:,.0f} MB of pairs < skew_min_bytes{ctx.options.per_core()})",
        )
        aggs = tuple(
            (
                n,
                dataclasses.replace(
                    a, args=(L.col(value),), expression=parse(f"{a.func.upper()}(DISTINCT {q(value)})")
                ),
            )
            for n, a in node.aggs
        )
        keys = tuple((n, L.col(n)) for n, _e in node.keys)
        return L.Aggregate(ref, keys, aggs), Dist("hash", tuple(frozenset([q(n)]) for n, _e in node.keys))
    ref, pairs_dist = ctx.to_hash(
        pre,
        dist,
        tuple(L.col(n) for n, _e in cols),
        "distinct aggregate: (group keys, value) pairs by both, deduped where they land",
    )
    deduped = L.Aggregate(ref, tuple((n, L.col(n)) for n, _e in cols), ())
    plain = tuple(
        (n, L.AggCall(a.func, (L.col(value),), False, parse(f"{a.func.upper()}({q(value)})")))
        for n, a in node.aggs
    )
    keys = tuple((n, L.col(n)) for n, _e in node.keys)
    return _partial_final(ctx, L.Aggregate(deduped, keys, plain), deduped, pairs_dist, gather)


def _plan_sets(ctx: Context, node: L.Aggregate, child: L.Node, dist: Dist) -> tuple[L.Node, Dist]:
    """GROUPING SETS / ROLLUP / CUBE in one pass: every rank aggregates its rows per grouping set
    (the grouping id an extra output), the final GROUP BY (keys, grouping id) merges the partials
    of one group, which lie on one rank after a gather or a hash exchange on (keys, id)."""
    here = dataclasses.replace(node, input=child)
    if ctx.world == 1 or dist.kind in ("single", "replicated"):
        return here, dist if dist.kind != "hash" else RANDOM
    if not all(a.func in _DECOMPOSABLE and not a.distinct and not a.filtered for _n, a in node.aggs):
        if () not in node.sets:
            return _expand_sets(ctx, node, child, dist)
        # the grand total () must give one row even over no rows: all rows to rank 0
        ref = ctx.gather(
            child, dist, "grouping sets with () and an aggregate that cannot be split: rows to rank 0"
        )
        return dataclasses.replace(node, input=ref), SINGLE
    partial, final, post = _split_aggs(ctx, node)
    part_node = dataclasses.replace(node, input=child, aggs=partial)
    names = tuple(n for n, _e in node.keys) + (node.gid,)
    if _est_groups(ctx, node) * len(node.sets) <= ctx.options.gather_groups:
        ref = ctx.gather(part_node, dist, "partial aggregates per grouping set to rank 0")
        out_dist = SINGLE
    else:
        by = tuple(q(n) for n in names)
        ref = ctx.stage(
            part_node, dist, Output("hash", keys=by), "partial aggregates by (group key, grouping id)"
        )
        out_dist = Dist("hash", tuple(frozenset([k]) for k in by))
    final_node: L.Node = L.Aggregate(ref, tuple((n, L.col(n)) for n in names), final)
    keys = tuple((n, L.col(n)) for n, _ in node.keys)
    return L.Project(final_node, keys + post + ((node.gid, L.col(node.gid)),)), out_dist


def _expand_sets(ctx: Context, node: L.Aggregate, child: L.Node, dist: Dist) -> tuple[L.Node, Dist]:
    """Grouping sets (without ``()``) over aggregates that cannot be split: each row once per set (keys not in
    the set NULL, the set's grouping id a column), hash-partitioned on (keys, id), then one
    plain GROUP BY (keys, id) per rank completes every group where its rows are."""
    n = len(node.keys)
    masked = [ctx.fresh("gs_" + name) for name, _e in node.keys]
    ids = [sum(1 << (n - 1 - i) for i in range(n) if i not in s) for s in node.sets]
    bigint = exp.DataType.build("BIGINT")
    sets = L.Values(tuple((exp.cast(exp.Literal.number(g), bigint),) for g in ids), (node.gid,))
    exprs: list[tuple[str, exp.Expression]] = [(c, L.col(c)) for c in child.names]
    exprs.append((node.gid, L.col(node.gid)))
    for i, (m, (_k, e)) in enumerate(zip(masked, node.keys)):
        bit = parse(f"(({q(node.gid)} >> {n - 1 - i}) & 1) = 0")
        exprs.append((m, exp.Case(ifs=[exp.If(this=bit, true=e.copy())])))
    expanded: L.Node = L.Project(L.Join(child, sets, "cross"), tuple(exprs))
    by = tuple(L.col(m) for m in masked) + (L.col(node.gid),)
    ref, _ = ctx.to_hash(
        expanded, dist, by, "grouping sets that cannot be split: rows once per set by (key, id)"
    )
    keys = tuple((name, L.col(m)) for (name, _e), m in zip(node.keys, masked)) + (
        (node.gid, L.col(node.gid)),
    )
    agg = L.Aggregate(ref, keys, node.aggs)
    out = tuple((c, L.col(c)) for c in node.names)
    return L.Project(agg, out), Dist("hash", tuple(frozenset([q(c)]) for c, _e in keys))


def gathers(ctx: Context, node: L.Aggregate) -> bool:
    """Whether an aggregate over rows spread on the ranks finishes on rank 0: no keys, or few groups
    (``gather_groups``) and not ``by_key``."""
    return not node.keys or (not node.by_key and _est_groups(ctx, node) <= ctx.options.gather_groups)


def _est_groups(ctx: Context, node: L.Aggregate) -> float:
    """Product of the keys' NDVs (√rows for a computed key), at most the input's rows."""
    rows = estimate_rows(node.input)
    groups = 1.0
    for _n, e in node.keys:
        groups *= _ndv(ctx, node.input, e, rows)
    return min(groups, rows)


def _ndv(ctx: Context, below: L.Node, e: exp.Expression, rows: float) -> float:
    if isinstance(e, exp.Column):
        found = find_scan_column(below, e.name)
        if found is not None:
            scan, source = found
            return float(ctx.catalog.ndv(scan.table, source))
    return max(rows**0.5, 1.0)


def _arg_types(ctx: Context, node: L.Aggregate) -> dict[str, str]:
    """DuckDB's type of each argument (by its SQL) of ``node``'s aggregates whose split depends on it (AVG,
    variances), from one bind of ``node``'s input (each is ~1-5 ms); empty when not known."""
    args = {L.sql_of(a.args[0]): a.args[0] for _n, a in node.aggs if a.func in TYPED_ARGS and a.args}
    if not args:
        return {}
    exprs = tuple((f"__agg_arg_{i}", e) for i, e in enumerate(args.values()))
    types = ctx.logical_types(L.Project(node.input, exprs))
    return dict(zip(args, types)) if types else {}


def _split_aggs(ctx: Context, node: L.Aggregate) -> tuple[Aggs, Aggs, tuple[tuple[str, exp.Expression], ...]]:
    """(partial aggregates, final aggregates over them, output expressions over the finals)."""
    types = _arg_types(ctx, node)
    return split_aggs(node, ctx.fresh, lambda arg: types.get(L.sql_of(arg)))
