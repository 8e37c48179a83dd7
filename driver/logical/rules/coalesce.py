"""Subquery coalescing: two EXISTS / NOT EXISTS subqueries of one table on the same key read it once.

TPC-H Q21 asks, for each late line item, that another supplier's line item of the same order exists and
that no other supplier's *late* line item does::

    EXISTS     (SELECT * FROM lineitem l2 WHERE l2.l_orderkey = l1.l_orderkey AND l2.l_suppkey <> l1.l_suppkey)
    NOT EXISTS (SELECT * FROM lineitem l3 WHERE l3.l_orderkey = l1.l_orderkey AND l3.l_suppkey <> l1.l_suppkey
                AND l3.l_receiptdate > l3.l_commitdate)

Translated as they are, they are a semi join and an anti join whose right sides scan ``lineitem`` twice
and hash it twice on the same key. Coalescing (Bellamkonda et al., *Enhanced Subquery Optimizations in
Oracle*, VLDB 2009, §2.1) reads it once: both right sides become the same scan with the filters the two
subqueries share, projecting the columns either reads, plus one boolean column per subquery's own extra
filters (here ``l_receiptdate > l_commitdate``); each join then tests its flag in its residual
(``EXISTS (… WHERE key AND r AND p)`` is the semi join on the key with residual ``r AND p``; NOT EXISTS
likewise). The two right sides are equal up to column names, so the planner cuts one stage for both
(:mod:`squall.driver.planner.reuse`): one scan, one key-set filter, one exchange.

Applies to a semi or anti join directly above another (any order; a projection that only drops columns
may sit between them), neither null-aware (``NOT IN``'s NULL rule sees rows that an extra filter would
drop), whose right sides are plain column projections of scans of one table, equal in their left keys and
in the table columns of their right keys, where one side's filters are among the other's (so the shared
scan keeps no row that neither kept: it sends at most what the two sent). The decision is a plan note.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import and_all
from squall.driver.ir.nodes import sql_of

if TYPE_CHECKING:
    from squall.driver.logical.rules.context import LogicalContext

NAME = "coalesce"


def apply(node: L.Node, ctx: LogicalContext) -> L.Node:
    """The rule: :func:`coalesce_subqueries`; the plan before it is kept in ``ctx.uncoalesced``."""
    coalesced_node, pairs = coalesce_subqueries(node, ctx.fresh)
    if pairs:
        ctx.uncoalesced, ctx.coalesced = node, pairs
    return coalesced_node


@dataclasses.dataclass(frozen=True)
class Coalesced:
    """One coalesced pair: the plan note, and each side's internal scan column names (a plan whose scans
    read both sides' names planned them apart: :meth:`shared_in`)."""

    what: str  # "the semi join and the anti join on l_orderkey over lineitem"
    flag: str  # "; the anti join tests its own filter … on the shared rows", or ""
    sides: tuple[frozenset[str], frozenset[str]]

    @property
    def note(self) -> str:
        return f"subqueries coalesced: {self.what} read one scan{self.flag}"

    def apart_note(self) -> str:
        """The note when the pair was planned as written instead."""
        return (
            f"subqueries not coalesced: {self.what}: the plan reads their sides apart (a join filter on one, or "
            "each joined where it is read)"
        )

    def shared_in(self, scanned: set[str]) -> bool:
        """Whether the planner cut one stage for both sides, given the internal names its scans read."""
        return not all(side & scanned for side in self.sides)


@dataclasses.dataclass(frozen=True)
class _Side:
    """A join's right side read as ``Project(columns) ← Scan``: output name → table column."""

    scan: L.Scan
    out: dict[str, str]  # output name -> internal scan name


def _side(node: L.Node) -> _Side | None:
    if isinstance(node, L.Scan):
        return _Side(node, {n: n for n in node.names})
    if isinstance(node, L.Project) and isinstance(node.input, L.Scan):
        out: dict[str, str] = {}
        for name, e in node.exprs:
            if not isinstance(e, exp.Column):
                return None
            out[name] = e.name
        return _Side(node.input, out)
    return None


def coalesce_subqueries(node: L.Node, fresh: Callable[[str], str]) -> tuple[L.Node, list[Coalesced]]:
    """``node`` with stacked semi/anti joins over one table's scans coalesced (module doc), and what was
    coalesced. ``fresh`` allocates column names unique in the plan.

    Whether the planner then reads one scan depends on its choices for the two joins (a join filter on one
    side only makes the two stages differ): the caller checks :meth:`Coalesced.shared_in` on the plan and
    plans without coalescing when a pair was cut apart (its right sides would then read more columns, and
    the stricter one more rows, for nothing)."""
    notes: list[Coalesced] = []

    def visit(n: L.Node) -> L.Node:
        n = L.with_children(n, visit)
        if not (isinstance(n, L.Join) and n.kind in ("semi", "anti") and not n.null_aware):
            return n
        below, keep = n.left, None
        if isinstance(n.left, L.Project) and all(
            isinstance(e, exp.Column) and e.name == name for name, e in n.left.exprs
        ):  # a projection that only drops columns (column pruning's Narrow)
            below, keep = n.left.input, n.left
        if isinstance(below, L.Join) and below.kind in ("semi", "anti") and not below.null_aware:
            done = _coalesce(below, n, fresh)
            if done is not None:
                inner, outer, note = done
                notes.append(note)
                left: L.Node = inner if keep is None else dataclasses.replace(keep, input=inner)
                return dataclasses.replace(outer, left=left)
        return n

    return visit(node), notes


def _coalesce(j1: L.Join, j2: L.Join, fresh: Callable[[str], str]) -> tuple[L.Join, L.Join, Coalesced] | None:
    """Semi/anti join ``j1`` and ``j2`` above it over one shared scan: both joins rebuilt and what was
    coalesced, or None when the pair does not qualify (module doc)."""
    s1, s2 = _side(j1.right), _side(j2.right)
    if s1 is None or s2 is None or s1.scan.table != s2.scan.table:
        return None
    if [sql_of(k) for k in j1.left_keys] != [sql_of(k) for k in j2.left_keys] or not j1.left_keys:
        return None
    src1 = {i: s for s, i in s1.scan.columns}
    src2 = {i: s for s, i in s2.scan.columns}
    if len(set(src1.values())) != len(src1) or len(set(src2.values())) != len(src2):
        return None  # a table column read twice under two names: leave it

    k1, k2 = _key_sources(j1, s1, src1), _key_sources(j2, s2, src2)
    if k1 is None or k1 != k2:
        return None
    # filters in table column names: shared ones stay on the scan, the rest become flags
    by_source = lambda f, src: sql_of(L.renamed(f, src))  # noqa: E731
    f1 = {by_source(f, src1): f for f in s1.scan.filters}
    f2 = {by_source(f, src2): f for f in s2.scan.filters}
    shared = [k for k in f1 if k in f2]
    extra1 = [f for k, f in f1.items() if k not in f2]
    extra2 = [f for k, f in f2.items() if k not in f1]
    proj1 = [src1[i] for i in s1.out.values()]
    proj2 = [src2[i] for i in s2.out.values()]
    if not extra1 and not extra2 and proj1 == proj2:
        return None  # the same subquery twice: stage reuse already reads it once
    if extra1 and extra2:
        return None  # the shared scan would keep rows neither keeps: it could send more than both
    sources = [s for s, _i in s1.scan.columns] + [s for s, _i in s2.scan.columns if s not in src1.values()]
    projected = [s for s in sources if s in proj1 or s in proj2]
    # per side: table column -> internal name (its own, or a fresh one for the other side's columns)
    name1 = {s: i for i, s in src1.items()}
    name2 = {s: i for i, s in src2.items()}
    for s in sources:
        for names in (name1, name2):
            if s not in names:
                names[s] = fresh(s)
    # the stricter side's own filters as one flag column, computed on both sides (so that they stay equal)
    to1 = {i: name1[s] for i, s in src2.items()}
    to2 = {i: name2[s] for i, s in src1.items()}
    own = extra1 or extra2
    flag_on = (
        (and_all(own), and_all([L.renamed(f, to2) for f in own]))
        if extra1
        else (and_all([L.renamed(f, to1) for f in own]), and_all(own))
    )
    flag_names = (fresh("exists_flag"), fresh("exists_flag")) if own else ("", "")

    shared1, shared2 = [f1[k] for k in shared], [f2[k] for k in shared]
    right1 = _shared_side(s1.scan, s2.scan, sources, projected, name1, shared1, flag_on[0], flag_names[0])
    right2 = _shared_side(s2.scan, s1.scan, sources, projected, name2, shared2, flag_on[1], flag_names[1])
    new1 = _rekeyed(j1, s1, name1, src1, right1, flag_names[0] if extra1 else None)
    new2 = _rekeyed(j2, s2, name2, src2, right2, flag_names[1] if extra2 else None)
    kind = j1.kind if extra1 else j2.kind
    said = " AND ".join(sorted(by_source(f, src1 if extra1 else src2) for f in own))
    what = f"the {j1.kind} join and the {j2.kind} join on {', '.join(k1)} over {s1.scan.table}"
    flag = f"; the {kind} join tests its own filter {said} on the shared rows" if said else ""
    sides = (frozenset(name1[s] for s in sources), frozenset(name2[s] for s in sources))
    return new1, new2, Coalesced(what, flag, sides)


def _key_sources(j: L.Join, side: _Side, src: dict[str, str]) -> list[str] | None:
    """The table columns of ``j``'s right keys (None: a key that is not a plain column of ``side``)."""
    out = []
    for k in j.right_keys:
        if not isinstance(k, exp.Column) or k.name not in side.out:
            return None
        out.append(src[side.out[k.name]])
    return out


def _shared_side(
    scan: L.Scan,
    other: L.Scan,
    sources: list[str],
    projected: list[str],
    names: dict[str, str],
    shared_f: list[exp.Expression],
    flag: exp.Expression | None,
    flag_name: str,
) -> L.Project:
    """One join's new right side: the shared scan (every table column in ``sources``, the ``shared_f``
    filters, under this side's ``names``), projecting the ``projected`` columns and the flag column."""
    new_scan = L.Scan(
        scan.table,
        tuple((s, names[s]) for s in sources),
        tuple(shared_f),
        est_rows=max(scan.est_rows, other.est_rows),
        row_width=max(scan.row_width, other.row_width),
    )
    exprs: list[tuple[str, exp.Expression]] = [(names[s], L.col(names[s])) for s in projected]
    if flag is not None:
        exprs.append((flag_name, flag))
    return L.Project(new_scan, tuple(exprs))


def _rekeyed(
    j: L.Join, side: _Side, names: dict[str, str], src: dict[str, str], right: L.Project, flag: str | None
) -> L.Join:
    """``j`` over its new right side: keys and residual renamed to the side's new names, and the join
    testing ``flag`` (the column of its own filters) in its residual when it has one."""
    out_to_new = {o: names[src[i]] for o, i in side.out.items()}
    keys = tuple(L.renamed(k, out_to_new) for k in j.right_keys)
    residual = L.renamed(j.residual, out_to_new) if j.residual is not None else None
    if flag is not None:
        residual = and_all([p for p in (residual, L.col(flag)) if p is not None])
    return dataclasses.replace(j, right=right, right_keys=keys, residual=residual)
