"""A subtree a stage computes more than once over one exchange, computed once (a ``MATERIALIZED`` CTE).

A query that reads one subquery several times gets one stage for the subquery's distributed part
(:mod:`.reuse`), but what comes after it on the same ranks is planned once per read: TPC-DS Q47/Q57's ``v1``
(a final aggregate and two windows over the gathered partials) three times on rank 0, Q39's ``inv`` twice. Each
read takes the shared stage's exchange under its own column names (an input ``x1``, ``x1_1``…), so the copies
are found from their inputs up: starting at two reads of one stage's exchange, the parents are compared while
their SQL is the same up to column names (quoted identifiers numbered in order, the reads' input names taken as
the stage they read); the highest equal pair that holds an aggregate, a window, a join or a sort, and reads nothing but exchanges,
becomes a :class:`~squall.driver.ir.sqlgen.Shared` subtree, which DuckDB computes once for the stage.

Not shared: a subtree that reads a scan (two scans of one table may differ in what the stage input holds,
which their SQL does not show), one whose SQL calls a volatile function (each copy would draw its own values),
and pairs that nest in another pair (the outer one is shared).
"""

from __future__ import annotations

from collections.abc import Mapping

from squall.driver.ir import nodes as L
from squall.driver.ir.sqlgen import InputRef, Shared, render
from squall.driver.planner.identifiers import number_identifiers
from squall.plan import ExchangeInput, ScanInput

_VOLATILE = ("random(", "uuid(", "gen_random_uuid", "nextval(", "setseed(")
_WORTH = (L.Aggregate, L.Window, L.Join, L.Sort)


def share_repeats(node: L.Node, inputs: Mapping[str, ScanInput | ExchangeInput]) -> L.Node:
    """``node`` with each subtree it computes twice over one exchange computed once (see the module doc)."""
    parents: dict[int, L.Node] = {}
    reads: dict[int, list[InputRef]] = {}

    def walk(n: L.Node) -> None:
        for c in n.children:
            parents.setdefault(id(c), n)
            walk(c)
        if isinstance(n, InputRef) and isinstance(spec := inputs.get(n.name), ExchangeInput):
            reads.setdefault(spec.stage, []).append(n)

    walk(node)
    stage_of = {r.name: f"x{stage}" for stage, refs in reads.items() for r in refs}
    pairs: dict[int, tuple[L.Node, list[L.Node]]] = {}
    for refs in reads.values():
        if len({id(r) for r in refs}) < 2:
            continue
        first = refs[0]
        for other in refs[1:]:
            if other is first:
                continue
            top = _highest_equal(first, other, parents, stage_of)
            if top is not None:
                pairs.setdefault(id(top[0]), (top[0], []))[1].append(top[1])
    if not pairs:
        return node
    inside = {id(d) for a, others in pairs.values() for top in (a, *others) for d in _below(top)[1:]}
    replace: dict[int, L.Node] = {}
    for n, (first_top, others) in enumerate(pairs.values()):
        if id(first_top) in inside:
            continue
        name = f"__once_{n}"
        replace[id(first_top)] = Shared(name, (first_top,), first_top.names, first_top.names)
        for later in others:
            replace[id(later)] = Shared(name, (), later.names, first_top.names)
    if not replace:
        return node

    def swap(n: L.Node) -> L.Node:
        return replace.get(id(n)) or L.with_children(n, swap)

    return swap(node)


def repeats_note(node: L.Node) -> str:
    """The stage note for the subtrees :func:`share_repeats` shares in ``node`` ("" for none)."""
    reads: dict[str, int] = {}

    def walk(n: L.Node) -> None:
        if isinstance(n, Shared):
            reads[n.name] = reads.get(n.name, 0) + 1
        for c in n.children:
            walk(c)

    walk(node)
    if not reads:
        return ""
    return "".join(
        f"; a subplan it reads {k} times computed once (a MATERIALIZED CTE)" for k in reads.values()
    )


def _highest_equal(
    a: L.Node, b: L.Node, parents: Mapping[int, L.Node], stage_of: Mapping[str, str]
) -> tuple[L.Node, L.Node] | None:
    """The highest ancestors of the reads ``a`` and ``b`` (themselves included) whose SQL is the same up to column
    names and that are worth sharing, or None."""
    best = None
    while True:
        pa, pb = parents.get(id(a)), parents.get(id(b))
        if pa is None or pb is None or pa is pb:
            break
        text = _canonical(pa, stage_of)
        if text is None or text != _canonical(pb, stage_of):
            break
        a, b = pa, pb
        below = _below(a)
        if (
            a.names
            and any(isinstance(d, _WORTH) for d in below)
            and all(d.name in stage_of for d in below if isinstance(d, InputRef))
        ):
            best = (a, b)
    return best


def _below(n: L.Node) -> list[L.Node]:
    out = [n]
    for c in n.children:
        out.extend(_below(c))
    return out


def _canonical(n: L.Node, stage_of: Mapping[str, str]) -> str | None:
    """``n``'s SQL with quoted identifiers numbered in order of first appearance (a read of an exchange named as
    the stage it reads); None when it calls a volatile function."""
    sql = render(n)
    if any(v in sql.lower() for v in _VOLATILE):
        return None
    return number_identifiers(sql, lambda name: f'"{stage_of[name]}"' if name in stage_of else None)[0]
