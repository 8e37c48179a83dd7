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
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import and_all, conjuncts
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
    nodes = list(_walk(root))
    sigs = _signatures(root)
    by_sig: dict[object, list[L.Node]] = defaultdict(list)
    for n in nodes:
        by_sig[sigs[id(n)]].append(n)
    parents = {id(f.input): f for f in nodes if isinstance(f, L.Filter)}
    shapes: dict[int, tuple[object, ...] | None] = {}

    def shape_of(n: L.Node) -> tuple[object, ...] | None:
        if id(n) not in shapes:
            shapes[id(n)] = _shape_of(n)
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
        shape = shape_of(site.input)
        if shape is None:
            continue
        equal = [n for n in twins if shape_of(n) == shape]
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


def _walk(node: L.Node) -> Iterator[L.Node]:
    yield node
    for child in node.children:
        yield from _walk(child)


def _computed_once(node: L.Node) -> bool:
    return any(isinstance(n, _COMPUTED_ONCE) for n in _walk(node))


def _signatures(root: L.Node) -> dict[int, object]:
    """Every node's cheap first test of equal shape (node kinds, tables and widths), by ``id``."""
    sigs: dict[int, object] = {}

    def sig(node: L.Node) -> object:
        got = (
            type(node).__name__,
            node.table if isinstance(node, L.Scan) else None,
            len(node.names),
            tuple(sig(c) for c in node.children),
        )
        sigs[id(node)] = got
        return got

    sig(root)
    return sigs


class _NoShape(Exception):
    """A node this rule does not compare (a one-rank part)."""


def _shape_of(node: L.Node) -> tuple[object, ...] | None:
    """``node`` up to its internal column names (numbered in order of definition), or None."""
    try:
        return _shape(node, {})
    except _NoShape:
        return None


def _shape(node: L.Node, names: dict[str, int]) -> tuple[object, ...]:
    kids = tuple(_shape(c, names) for c in node.children)
    out = tuple(names.setdefault(n, len(names)) for n in node.names)

    def e(x: exp.Expression | None) -> str | None:
        return None if x is None else _canonical(x, names)

    own: tuple[object, ...]
    if isinstance(node, L.Scan):
        own = (node.table, tuple(src for src, _ in node.columns), tuple(map(e, node.filters)))
    elif isinstance(node, L.Filter):
        own = (e(node.predicate),)
    elif isinstance(node, L.Project):
        own = tuple(e(x) for _, x in node.exprs)
    elif isinstance(node, L.Join):
        keys = (tuple(map(e, node.left_keys)), tuple(map(e, node.right_keys)))
        own = (node.kind, keys, e(node.residual), node.null_aware)
    elif isinstance(node, L.Aggregate):
        calls = tuple(
            (a.func, tuple(map(e, a.args)), a.distinct, e(a.expression), a.filtered) for _, a in node.aggs
        )
        own = (tuple(e(x) for _, x in node.keys), calls, node.sets, node.by_key)
    elif isinstance(node, L.Sort):
        own = tuple((e(k.expression), k.descending, k.nulls_first) for k in node.keys)
    elif isinstance(node, L.Limit):
        own = (node.limit, node.offset)
    elif isinstance(node, L.SetOp):
        own = (node.kind, node.all)
    elif isinstance(node, L.Window):
        own = (tuple(e(x) for _, x in node.exprs), tuple(map(e, node.partition_by)))
    elif isinstance(node, L.Values):
        own = tuple(tuple(map(e, row)) for row in node.rows)
    else:
        raise _NoShape(type(node).__name__)
    return (type(node).__name__, out, own, kids)


def _canonical(x: exp.Expression, names: dict[str, int]) -> str:
    """``x`` as SQL with each internal column written as its number."""

    def number(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not n.table and n.name in names:
            return exp.column(f"#{names[n.name]}", quoted=True)
        return n

    return L.sql_of(x.transform(number))
