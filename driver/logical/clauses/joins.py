"""The joins of one SELECT: inner joins in the order :mod:`squall.driver.estimate.join_order` gives, each
conjunct at the lowest join that sees its columns (ORs factored into per-source filters); outer joins in
the written order; WHERE and ON conjuncts with subqueries placed by what they read."""

from __future__ import annotations

from typing import cast

from sqlglot import exp

from squall.driver.estimate.join_order import Source, order_joins
from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import (
    and_all,
    conjunction,
    conjuncts,
    disjuncts,
    equi_between,
    tables_of,
    tables_read,
    unwrap,
)
from squall.driver.logical.clauses.base import has_subquery
from squall.driver.logical.clauses.from_clause import FromClause
from squall.driver.logical.scope import Scope
from squall.errors import NotSupportedError


def is_semi(conj: exp.Expression) -> bool:
    """A conjunct that is a plain ``EXISTS (…)`` or ``x IN (SELECT …)``: a semi join, which only drops
    rows, so it is applied before the other subquery conjuncts (the rows a later decorrelated scalar
    subquery joins with are fewer, and join filters can follow its keys: TPC-H Q20)."""
    c = unwrap(conj)
    return isinstance(c, exp.Exists) or (isinstance(c, exp.In) and c.args.get("query") is not None)


def _uncorrelated_scalar(conj: exp.Expression, aliases: set[str]) -> bool:
    """A conjunct whose only subqueries are uncorrelated scalar ones (``x > (SELECT avg(…) FROM …)``): each
    is a one-row join and the conjunct a plain filter after it, so it goes first of all subquery conjuncts —
    the semi and anti joins after it see fewer rows and their join filters fewer keys (TPC-H Q22)."""
    for n in conj.walk():
        if isinstance(n, exp.Exists) or (isinstance(n, exp.In) and n.args.get("query") is not None):
            return False
    subs = [s for s in conj.find_all(exp.Subquery) if s.find_ancestor(exp.Subquery) is None]
    return bool(subs) and not any(tables_read(s, aliases) for s in subs)


def subquery_order(conj: exp.Expression, aliases: set[str]) -> int:
    """Where a WHERE conjunct with a subquery is applied: uncorrelated scalar filters, then semi joins (they
    only drop rows), then the rest."""
    return 0 if _uncorrelated_scalar(conj, aliases) else 1 if is_semi(conj) else 2


def _subquery_reads(e: exp.Expression, aliases: set[str]) -> set[str]:
    """The FROM items (of ``aliases``) that the subqueries of ``e`` read (with an ``IN``'s left side)."""
    found: set[str] = set()
    for n in e.walk():
        if (isinstance(n, exp.In) and n.args.get("query") is not None) or (
            isinstance(n, (exp.Exists, exp.Subquery)) and not isinstance(n.parent, exp.In)
        ):
            found |= tables_read(n, aliases)
    return found


def factor_or(pred: exp.Expression, sources: set[str]) -> list[exp.Expression]:
    """Conjuncts implied by an OR: terms common to every branch, and per-source
    filters ``OR(branch terms on that source)`` (redundant, but they let scans
    filter early). The original OR is kept by the caller."""
    branches = [conjuncts(b) for b in disjuncts(pred)]
    if len(branches) < 2:
        return []
    texts = [{L.sql_of(t): t for t in b} for b in branches]
    common = set(texts[0])
    for t in texts[1:]:
        common &= set(t)
    derived = [texts[0][k] for k in sorted(common)]
    for alias in sorted(sources):
        parts: list[exp.Expression] = []
        for b in branches:
            local = [t for t in b if tables_of(t) == {alias} and L.sql_of(t) not in common]
            if not local:
                parts = []
                break
            parts.append(conjunction(local))
        if parts:
            derived.append(cast(exp.Expression, exp.or_(*[exp.paren(p) for p in parts])))
    return derived


def is_inner(j: exp.Join) -> bool:
    return not j.side and (j.kind or "").lower() in ("", "inner", "cross")


def _place_conjuncts(
    sources: list[Source], preds: list[exp.Expression]
) -> tuple[dict[str, list[exp.Expression]], list[exp.Expression], list[exp.Expression]]:
    """``preds`` (each once, an OR over several sources with the filters it implies: :func:`factor_or`) as
    (each source's own, those over several sources, those over none)."""
    aliases = {s.alias for s in sources}
    expanded: list[exp.Expression] = []
    for p in preds:
        expanded.append(p)
        if isinstance(p, exp.Or) and len(tables_of(p)) > 1:
            expanded.extend(factor_or(p, aliases))
    seen: set[str] = set()
    local: dict[str, list[exp.Expression]] = {s.alias: [] for s in sources}
    multi: list[exp.Expression] = []
    constant: list[exp.Expression] = []
    for p in expanded:
        key = L.sql_of(p)
        if key in seen:
            continue
        seen.add(key)
        refs = tables_of(p)
        if not refs:
            constant.append(p)
        elif len(refs) == 1 and next(iter(refs)) in local:
            local[next(iter(refs))].append(p)
        else:
            multi.append(p)
    return local, multi, constant


class Joins(FromClause):
    """A SELECT's join tree (see module doc)."""

    def _inner_join_tree(
        self, sources: list[Source], preds: list[exp.Expression], scope: Scope, other_starts: bool = False
    ) -> L.Node:
        """Inner joins of ``sources`` in the order :func:`order_joins` gives, each conjunct of ``preds`` at the
        lowest node that sees its columns (a source's own in its scan or filter). ``other_starts``: the joins
        may start from a source other than the largest (see :func:`order_joins`)."""
        local, multi, constant = _place_conjuncts(sources, preds)
        filtered = [self._filtered(s, local[s.alias], scope) for s in sources]
        order = order_joins(self.catalog, filtered, multi, other_starts=other_starts)
        if order.note:
            self.notes.append(order.note)
        current, pending = order.start.node, order.pending
        for step in order.steps:
            lkeys, rkeys, residual = [], [], []
            for p in step.preds:
                pair = equi_between(p, set(step.have), step.source.alias)
                if pair:
                    lkeys.append(self.convert(pair[0], scope))
                    rkeys.append(self.convert(pair[1], scope))
                else:
                    residual.append(self.convert(p, scope))
            kind = "inner" if lkeys else "cross"
            if kind == "cross" and residual:
                kind = "inner"
            current = L.Join(
                current,
                step.source.node,
                kind,
                tuple(lkeys),
                tuple(rkeys),
                and_all(residual),
                est_rows=step.rows,
            )
        leftover = [self.convert(p, scope) for p in pending + constant]
        if leftover:
            current = L.Filter(current, conjunction(leftover))
        return current

    def _ordered_joins(
        self,
        sources: list[Source],
        specs: list[exp.Join],
        where: list[exp.Expression],
        scope: Scope,
        ctes: dict[str, exp.Expression],
    ) -> L.Node:
        """Joins with outer ones among them, in the written order. WHERE conjuncts on one source that is never
        null-supplied are pushed to it; the rest filter after the joins."""
        null_supplied = _null_supplied(sources, specs)
        local: dict[str, list[exp.Expression]] = {s.alias: [] for s in sources}
        post: list[exp.Expression] = []
        for p in where:
            refs = tables_of(p)
            if len(refs) == 1 and next(iter(refs)) in local and not refs & null_supplied:
                local[next(iter(refs))].append(p)
            else:
                post.append(p)
        srcs = [self._filtered(s, local[s.alias], scope) for s in sources]
        current = srcs[0].node
        have = {srcs[0].alias}
        after: list[exp.Expression] = []  # inner joins' ON conjuncts with subqueries, applied after the joins
        aliases = {s.alias for s in sources}
        for i, (j, src) in enumerate(zip(specs, srcs[1:])):
            right_after = any((later.side or "").lower() in ("right", "full") for later in specs[i + 1 :])
            current = self._written_join(current, have, j, src, right_after, aliases, after, scope, ctes)
            have.add(src.alias)
        if post:
            current = L.Filter(current, conjunction([self.convert(p, scope) for p in post]))
        for p in sorted(after, key=lambda c: not is_semi(c)):
            current = self.apply_subquery_conjunct(current, p, scope, ctes)
        return current

    def _written_join(
        self,
        current: L.Node,
        have: set[str],
        j: exp.Join,
        src: Source,
        right_after: bool,
        aliases: set[str],
        after: list[exp.Expression],
        scope: Scope,
        ctes: dict[str, exp.Expression],
    ) -> L.Node:
        """``src`` joined to ``current`` (the FROM items ``have``) as ``j`` says. An ON conjunct with a subquery
        that reads only the joined item filters it (a semi/anti/mark join on it); one of an inner join with no
        right or full join after it (``right_after``) goes to ``after``, applied after the joins."""
        jk = _join_kind(j)
        right_node = src.node
        on = conjuncts(j.args.get("on"))
        if j.args.get("using"):
            raise NotSupportedError("JOIN … USING after qualification")
        lkeys, rkeys, residual = [], [], []
        for p in on:
            if has_subquery(p):
                reads = tables_read(p, aliases)
                if reads <= {src.alias} and jk in ("left", "inner", "semi", "anti"):
                    right_node = self.apply_subquery_conjunct(right_node, p, scope, ctes)
                    continue
                if reads <= have and jk == "right":  # filters the null-supplied side
                    current = self.apply_subquery_conjunct(current, p, scope, ctes)
                    continue
                if jk in ("inner", "cross") and not right_after:
                    after.append(p)
                    continue
                # its subqueries read one side: they become columns of that side (mark joins, scalar
                # joins: one row each, so no row is added or lost), then it is a plain conjunct
                sub_reads = _subquery_reads(p, aliases)
                if sub_reads <= have:
                    current, p = self.attach_marks(current, p, scope, ctes)
                    current, p = self.attach_scalars(current, p, scope, ctes)
                elif sub_reads <= {src.alias}:
                    right_node, p = self.attach_marks(right_node, p, scope, ctes)
                    right_node, p = self.attach_scalars(right_node, p, scope, ctes)
                else:
                    raise NotSupportedError("subqueries in a JOIN … ON condition that read both sides")
            pair = equi_between(p, have, src.alias)
            refs = tables_of(p)
            if pair:
                lkeys.append(self.convert(pair[0], scope))
                rkeys.append(self.convert(pair[1], scope))
            elif refs == {src.alias} and jk in ("left", "inner", "semi", "anti"):
                right_node = L.Filter(right_node, self.convert(p, scope))
            else:
                residual.append(self.convert(p, scope))
        if jk == "cross" and (lkeys or residual):
            jk = "inner"
        if jk == "inner" and not lkeys and not residual:
            jk = "cross"
        return L.Join(current, right_node, jk, tuple(lkeys), tuple(rkeys), and_all(residual))


def _null_supplied(sources: list[Source], specs: list[exp.Join]) -> set[str]:
    """The FROM items an outer join null-supplies (``specs[i]`` joins ``sources[i + 1]``)."""
    null_supplied: set[str] = set()
    for i, j in enumerate(specs):
        side = (j.side or "").lower()
        right = sources[i + 1].alias
        if side in ("left", "full"):
            null_supplied.add(right)
        if side in ("right", "full"):
            null_supplied.update(s.alias for s in sources[: i + 1])
    return null_supplied


def _join_kind(j: exp.Join) -> str:
    """The logical join kind of a written join (before its ON conjuncts are placed)."""
    side = (j.side or "").lower()
    kind = (j.kind or "").lower()
    jk = {"left": "left", "right": "right", "full": "full"}.get(side, "inner")
    if kind in ("semi", "anti"):
        jk = kind
    if kind == "cross":
        jk = "cross"
    return jk
