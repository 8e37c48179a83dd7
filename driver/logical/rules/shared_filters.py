"""Shared filters: a subquery read several times, each read filtered its own way, computes only the rows some
read keeps, and still once.

A ``WITH`` query (or a view) read twice is translated into two copies of one subtree under fresh column names,
and the planner computes it once (:mod:`squall.driver.planner.reuse`) when the copies' stages are equal. Each
read's own filter stays above its copy: pushed into the copies, the filters would make them differ and each
read would compute its own. TPC-DS Q39 reads its ``inv`` CTE as ``inv1`` with ``d_moy = 1`` and ``inv2`` with
``d_moy = 2``, so today the CTE's GROUP BY aggregates every month of the year, once. This rule pushes the OR
of all the reads' filters into every copy (:func:`squall.driver.logical.pushdown.place`: through projections,
GROUP BY keys, unions and joins, into scans), so the copies stay equal and compute only the two months; each
read keeps its own filter on top::

    Filter "d_moy_3" = 1                        Filter "d_moy_3" = 1
      Project … (inv1)                            Project … (inv1)
        Aggregate keys […, d_moy] …       →         Aggregate keys […, d_moy] …
          … Scan date_dim                             … Scan date_dim WHERE "d_moy" = 1 OR "d_moy" = 2
    (the same for inv2 with "d_moy_6" = 2)

Copies are found by shape: the same nodes, tables and expressions up to the internal column names. Of each
read's filter only the conjuncts that move below a GROUP BY in the copy count (``year_total > 0`` on an
aggregate's value only filters what the shared stage sends). A group is left alone when a copy holds no
aggregate, window or set operation (a plain scan's copies are not computed once: each read's own filter serves
it better), when some read keeps every row, or when an unfiltered read of the same subquery exists.

A subquery read once (no copy anywhere in the plan) simply takes the conjuncts of its filter that move below
its GROUP BY (TPC-DS Q78's ``ss_sold_year = 2000`` on its ``ss`` CTE: one year of store sales aggregated, not
five); the rest stays on top.

    >>> from sqlglot import exp
    >>> from squall.driver.ir import nodes as L
    >>> def read(suffix, value):
    ...     scan = L.Scan("t", (("a", "a" + suffix), ("b", "b" + suffix)))
    ...     agg = L.Aggregate(scan, (("k" + suffix, L.col("a" + suffix)),), ())
    ...     return L.Filter(agg, exp.EQ(this=L.col("k" + suffix), expression=exp.Literal.number(value)))
    >>> join = L.Join(read("", 1), read("_2", 2), "cross")
    >>> shared = share(join)
    >>> [L.sql_of(f) for f in shared.left.input.input.filters]
    ['"a" = 1 OR "a" = 2']
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, cast

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import and_all, conjuncts
from squall.driver.ir.shape import shape_of, signatures, walk
from squall.driver.logical.pushdown import passes, place

if TYPE_CHECKING:
    from squall.driver.logical.rules.context import LogicalContext

NAME = "shared_filters"

#: nodes that end a stage the planner computes once for all of a subquery's reads
_COMPUTED_ONCE = (L.Aggregate, L.Window, L.SetOp)


def apply(node: L.Node, ctx: LogicalContext) -> L.Node:
    """The rule: :func:`share` from the root; explain says which disjunction each group of reads got."""
    return share(node, ctx.notes)


def share(node: L.Node, notes: list[str] | None = None) -> L.Node:
    """``node`` with the disjunction of each group of filtered reads of one subquery pushed into every copy,
    and the filter of a subquery read once moved below its GROUP BY."""
    pushed: dict[int, tuple[exp.Expression, exp.Expression | None]] = {}
    groups, alone = _sites(node)
    for group in groups:
        disjunction = _disjunction(group)
        if disjunction is None:
            continue
        first = group[0]
        for site in group:
            renamed = L.renamed(disjunction, dict(zip(first.input.names, site.input.names)))
            pushed[id(site)] = (renamed, site.predicate)
        if notes is not None:
            notes.append(
                f"filters of {len(group)} reads of one subquery shared: {L.sql_of(disjunction)} pushed into it, "
                "each read keeps its own (the subquery is still computed once)"
            )
    moved: list[str] = []
    for site in alone:
        parts = conjuncts(site.predicate)
        down = [c for c in parts if _shrinks(site.input, c)]
        if down:
            pushed[id(site)] = (
                cast(exp.Expression, and_all(down)),
                and_all(c for c in parts if c not in down),
            )
            moved.extend(L.sql_of(c) for c in down)
    if moved and notes is not None:
        notes.append(f"filters moved below the GROUP BY of a subquery read once: {', '.join(moved)}")
    return _rewrite(node, pushed) if pushed else node


def _sites(root: L.Node) -> tuple[list[list[L.Filter]], list[L.Filter]]:
    """Filters over a subquery that computes something once: (groups of two or more over equal copies, the
    filters over a subquery with no copy), in plan order. A group is left out when an unfiltered read of the
    same subquery exists (its copy would differ from theirs)."""
    nodes = list(walk(root))
    sigs = signatures(root)
    by_sig: dict[object, list[L.Node]] = defaultdict(list)
    for n in nodes:
        by_sig[sigs[id(n)]].append(n)
    parents = {id(f.input): f for f in nodes if isinstance(f, L.Filter)}
    shapes: dict[int, tuple[object, ...] | None] = {}

    def memo(n: L.Node) -> tuple[object, ...] | None:
        if id(n) not in shapes:
            shapes[id(n)] = shape_of(n)
        return shapes[id(n)]

    groups: list[list[L.Filter]] = []
    alone: list[L.Filter] = []
    seen: set[int] = set()
    for site in nodes:
        if not isinstance(site, L.Filter) or id(site) in seen or not _computed_once(site.input):
            continue
        twins = [n for n in by_sig[sigs[id(site.input)]] if n is not site.input]
        if not twins:
            alone.append(site)
            continue
        shape = memo(site.input)
        if shape is None:
            continue
        equal = [n for n in twins if memo(n) == shape]
        if not equal:
            alone.append(site)
            continue
        group = [site] + [parents[id(n)] for n in equal if id(n) in parents]
        seen.update(id(f) for f in group)
        if len(group) == len(equal) + 1:  # every read is filtered
            groups.append(group)
    return groups, alone


def _disjunction(group: list[L.Filter]) -> exp.Expression | None:
    """The OR over the group's reads of what each keeps that shrinks the shared work, in the first copy's
    names; None when some read keeps every row or the OR cannot move below a GROUP BY."""
    first = group[0]
    reads: dict[str, exp.Expression] = {}
    for site in group:
        names = dict(zip(site.input.names, first.input.names))
        if not L.columns_in(site.predicate) <= names.keys():
            return None
        own = L.renamed(site.predicate, names)
        shrinking = and_all(c for c in conjuncts(own) if _shrinks(first.input, c))
        if shrinking is None:  # this read needs every row the subquery makes
            return None
        reads.setdefault(L.sql_of(shrinking), shrinking)
    disjunction = (
        cast(exp.Expression, exp.or_(*reads.values())) if len(reads) > 1 else next(iter(reads.values()))
    )
    return disjunction if _shrinks(first.input, disjunction) else None


def _shrinks(copy: L.Node, p: exp.Expression) -> bool:
    """Whether ``p`` placed in ``copy`` moves below a GROUP BY: it cuts the shared work, not only what the
    shared stage sends (passing a union only filters each branch's result)."""
    return passes(copy, p, (L.Aggregate,))


def _rewrite(node: L.Node, pushed: dict[int, tuple[exp.Expression, exp.Expression | None]]) -> L.Node:
    if isinstance(node, L.Filter) and id(node) in pushed:
        down, stays = pushed[id(node)]
        inner = place(_rewrite(node.input, pushed), [down])
        return inner if stays is None else L.Filter(inner, stays)
    return L.with_children(node, lambda child: _rewrite(child, pushed))


def _computed_once(node: L.Node) -> bool:
    return any(isinstance(n, _COMPUTED_ONCE) for n in walk(node))
