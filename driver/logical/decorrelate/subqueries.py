"""Subquery decorrelation: subqueries become joins that distribute like any other.

- ``EXISTS`` / ``NOT EXISTS`` → semi / anti join; correlated equalities are the
  join keys, other correlated predicates the join's residual (TPC-H Q21's
  ``l2.l_suppkey <> l1.l_suppkey``), not per-key arrays;
- ``x IN (SELECT …)`` → semi join on ``x``; ``NOT IN`` → a null-aware anti join
  (no row survives a NULL in the subquery; a NULL ``x`` survives only an empty
  subquery), its right side replicated because both facts are global;
- ``EXISTS`` / ``IN`` under OR or CASE → mark joins: ``LEFT JOIN``s to the
  subquery's distinct (correlation keys, value) and, for ``IN``, its row and
  non-NULL counts per correlation key, from which a CASE gives SQL's
  three-valued answer (NULL for no match with a NULL value or a NULL in the
  subquery, FALSE for an empty one);
- scalar subqueries, uncorrelated → ``LEFT JOIN … ON TRUE`` with their single
  row (one that may return several rows is reduced to its count and value,
  raising DuckDB's error at run time when the count is above one);
  correlated on equalities → grouped by the correlation keys and ``LEFT
  JOIN``ed on them (an absent group yields the value over no rows: NULL, or
  0 for ``COUNT``); correlated by more than equalities → a dependent
  ("delim") join: the subquery joined to the distinct outer values it reads,
  grouped by them, and ``LEFT JOIN``ed back on them (Neumann & Kemper).

Each rewrite works on the sqlglot AST: the correlated conjuncts are taken out
of the subquery, its select list becomes the join keys and values, and the
now uncorrelated subquery is planned like any query. Correlation more than one
level deep, and mark joins correlated by more than equalities, are made one
level first (:mod:`squall.driver.logical.decorrelate.deep`). What cannot be rewritten
this way (correlation below an aggregate, …) raises "not supported", and the
translator runs that part on one rank (:mod:`squall.driver.logical.fallback`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import (
    INTERNAL,
    and_all,
    conjunction,
    conjuncts,
    disjuncts,
    from_aliases,
    internal_ref,
    set_where,
    tables_of,
    unwrap,
)
from squall.driver.logical.decorrelate.deep import through_equalities, through_note
from squall.driver.logical.scope import Scope
from squall.errors import NotSupportedError

DIALECT = "duckdb"


def _query_of(e: exp.Expression) -> exp.Expression:
    e = unwrap(e)
    return e.this if isinstance(e, exp.Subquery) else e


def _tables(e: exp.Expression) -> set[str]:
    return tables_of(e, ignore=INTERNAL)


def _defined_aliases(q: exp.Expression) -> set[str]:
    """Every source alias and CTE name defined anywhere inside ``q``."""
    names = {t.alias_or_name for t in q.find_all(exp.Table)}
    names |= {s.alias for s in q.find_all(exp.Subquery) if s.alias}
    names |= {c.alias_or_name for c in q.find_all(exp.CTE)}
    return names


def _has_agg(e: exp.Expression) -> bool:
    return any(isinstance(n, exp.AggFunc) for n in e.walk())


class Correlation:
    """A subquery split into its uncorrelated body and the conjuncts that referenced the outside."""

    def __init__(self, body: exp.Select, pairs: list[tuple[exp.Expression, exp.Expression]], residual: list):
        self.body = body  # the subquery without its correlated conjuncts
        self.pairs = pairs  # (inner expression, outer expression) equalities
        self.residual = residual  # other correlated conjuncts
        self.through: list[str] = []  # "outer.x as inner.c" for each deeper reference made one level

    @property
    def correlated(self) -> bool:
        return bool(self.pairs or self.residual)


def correlate(sub: exp.Expression, outer_aliases: set[str]) -> Correlation:
    """Take the correlated conjuncts out of a subquery's WHERE (see module doc)."""
    if not isinstance(sub, exp.Select):
        if _tables(sub) - _defined_aliases(sub):
            raise NotSupportedError("correlated set operation in a subquery")
        return Correlation(sub, [], [])  # type: ignore[arg-type]
    inner_all = _defined_aliases(sub)
    direct = from_aliases(sub)
    body = sub.copy()
    through = through_equalities(body, outer_aliases - inner_all, direct)
    keep, pairs, residual = [], [], []
    for c in conjuncts(body.args.get("where")):
        outside = _tables(c) - inner_all
        if not outside:
            keep.append(c)
            continue
        if not outside <= outer_aliases:
            raise NotSupportedError("subquery correlated with a query more than one level up")
        if any(isinstance(n, (exp.Subquery, exp.Exists)) for n in c.walk()):
            raise NotSupportedError("nested subquery in a correlated predicate")
        cu = unwrap(c)
        if isinstance(cu, exp.EQ):
            lt, rt = _tables(cu.this), _tables(cu.expression)
            if lt and lt <= direct and rt and rt <= outer_aliases and not rt & inner_all:
                pairs.append((cu.this, cu.expression))
                continue
            if rt and rt <= direct and lt and lt <= outer_aliases and not lt & inner_all:
                pairs.append((cu.expression, cu.this))
                continue
        residual.append(c)
    set_where(body, keep)
    leftover = _tables(body) - inner_all
    if leftover:
        raise NotSupportedError(f"correlated reference outside WHERE: {', '.join(sorted(leftover))}")
    found = Correlation(body, pairs, residual)
    found.through = through
    return found


def _short(e: exp.Expression, width: int = 80) -> str:
    text = " ".join(e.sql(DIALECT).split())
    return text if len(text) <= width else text[: width - 1] + "…"


class SubqueryMixin:
    """Decorrelation for the Translator (uses its ``query``, ``convert`` and ``names``)."""

    query: Callable
    convert: Callable
    _select_rest: Callable
    names: Any  # the Translator's Names
    notes: list[str]
    aggregates: set[str]

    def _scope_aliases(self, scope) -> set[str]:
        return {alias for alias, _c in scope.columns}

    def _correlate(self, sub: exp.Expression, scope) -> Correlation:
        """``correlate`` against ``scope``, a deeper reference made one level said in the notes."""
        corr = correlate(sub, self._scope_aliases(scope))
        if corr.through:
            self.notes.append(through_note(corr.through))
        return corr

    def apply_subquery_conjunct(self, node: L.Node, conj: exp.Expression, scope, ctes) -> L.Node:
        """Apply one WHERE conjunct that holds a subquery on top of ``node``."""
        c = unwrap(conj)
        negated = isinstance(c, exp.Not)
        target = unwrap(c.this) if negated else c
        if isinstance(target, exp.Exists):
            return self._exists(node, _query_of(target.this), scope, ctes, negated)
        if isinstance(target, exp.In) and target.args.get("query") is not None:
            return self._in(node, target.this, _query_of(target.args["query"]), scope, ctes, negated)
        if any(isinstance(n, (exp.Exists,)) for n in conj.walk()) or any(
            isinstance(n, exp.In) and n.args.get("query") is not None for n in conj.walk()
        ):
            node, conj = self.attach_marks(node, conj, scope, ctes)
        node, rewritten = self.attach_scalars(node, conj, scope, ctes)
        return L.Filter(node, self.convert(rewritten, scope))

    def attach_scalars(self, node: L.Node, e: exp.Expression, scope, ctes) -> tuple[L.Node, exp.Expression]:
        """Join every scalar subquery of ``e`` onto ``node``; return ``e`` with them replaced by columns."""
        e = e.copy()
        if isinstance(e, exp.Subquery):  # a select-list item that is a subquery (aliased by qualify)
            alias = e.alias
            e.set("alias", None)
            e = exp.Alias(this=e, alias=exp.to_identifier(alias)) if alias else exp.Paren(this=e)
        subs = [s for s in e.find_all(exp.Subquery) if not isinstance(s.parent, (exp.Exists, exp.In))]
        for sub in subs:
            if sub.find_ancestor(exp.Subquery) is not None:
                continue  # nested inside another subquery: planned with that one
            node, name = self._scalar(node, sub.this, scope, ctes)
            sub.replace(internal_ref(name))
        return node, e

    def attach_marks(self, node: L.Node, e: exp.Expression, scope, ctes) -> tuple[L.Node, exp.Expression]:
        """Mark joins: every EXISTS / IN (subquery) of ``e`` (under OR/CASE) becomes a boolean
        computed from LEFT JOINs to the subquery's distinct keys (and, for IN, its per-key row and
        non-NULL counts: SQL's three-valued IN); ``e`` is returned with them replaced."""
        e = e.copy()
        found = [
            n
            for n in e.walk()
            if isinstance(n, exp.Exists) or (isinstance(n, exp.In) and n.args.get("query") is not None)
        ]
        for n in found:
            if n.find_ancestor(exp.Subquery) is not None:
                continue
            if isinstance(n, exp.Exists):
                node, mark = self._exists_mark(node, _query_of(n.this), scope, ctes)
            else:
                node, mark = self._in_mark(node, n.this, _query_of(n.args["query"]), scope, ctes)
            n.replace(mark)
        return node, e

    def _mark_input(self, sub: exp.Expression, scope, value: bool) -> tuple[Correlation, exp.Select]:
        """The subquery as a derived table ``__mk`` of ``__v`` (IN's value) and ``__k<i>`` (correlation keys)."""
        unsupported = "EXISTS or IN (subquery) inside OR/CASE; write it as a join"
        if not isinstance(sub, exp.Select):
            raise NotSupportedError(unsupported)
        corr = self._correlate(sub, scope)
        body = corr.body
        if corr.residual:
            raise NotSupportedError(unsupported)
        if corr.pairs and (
            body.args.get("group") or body.args.get("having") or any(_has_agg(p) for p in body.expressions)
        ):
            raise NotSupportedError(unsupported)
        exprs: list[exp.Expr] = []
        if value:
            if len(body.expressions) != 1 or isinstance(body.expressions[0], exp.Star):
                raise NotSupportedError(unsupported)
            v = body.expressions[0]
            exprs.append((v.this if isinstance(v, exp.Alias) else v).copy().as_("__v"))
        exprs += [inner.copy().as_(f"__k{i}") for i, (inner, _o) in enumerate(corr.pairs)]
        if not exprs:
            exprs = [exp.Literal.number(1).as_("__one")]
        inner_sel = body.copy()
        inner_sel.set("expressions", exprs)
        return corr, inner_sel

    def _mark_table(self, inner: exp.Select) -> exp.Subquery:
        return exp.Subquery(this=inner.copy(), alias=exp.TableAlias(this=exp.to_identifier("__mk")))

    def _exists_mark(self, node: L.Node, sub: exp.Expression, scope, ctes) -> tuple[L.Node, exp.Expression]:
        corr, inner = self._mark_input(sub, scope, value=False)
        keys = [exp.column(f"__k{i}", table="__mk") for i in range(len(corr.pairs))]
        sel = exp.Select(
            expressions=[k.copy() for k in keys] + [exp.true().as_("__m")], distinct=exp.Distinct()
        )
        sel = sel.from_(self._mark_table(inner))
        planned = self.query(sel, ctes)
        outputs = dict(planned.outputs)
        left_keys = tuple(self.convert(o, scope) for _i, o in corr.pairs)
        right_keys = tuple(L.col(outputs[f"__k{i}"]) for i in range(len(keys)))
        node = L.Join(node, planned.node, "left", left_keys, right_keys, None)
        return node, exp.Coalesce(this=internal_ref(outputs["__m"]), expressions=[exp.false()])

    def _in_mark(
        self, node: L.Node, lhs: exp.Expression, sub: exp.Expression, scope, ctes
    ) -> tuple[L.Node, exp.Expression]:
        if isinstance(unwrap(lhs), exp.Tuple):
            raise NotSupportedError("EXISTS or IN (subquery) inside OR/CASE; write it as a join")
        corr, inner = self._mark_input(sub, scope, value=True)
        n = len(corr.pairs)
        keys = [exp.column(f"__k{i}", table="__mk") for i in range(n)]
        # the distinct non-NULL values (per correlation key): a match is TRUE
        hit = exp.Select(
            expressions=[exp.column("__v", table="__mk")]
            + [k.copy() for k in keys]
            + [exp.true().as_("__m")],
            distinct=exp.Distinct(),
        ).from_(self._mark_table(inner))
        hit = hit.where(exp.Not(this=exp.Is(this=exp.column("__v", table="__mk"), expression=exp.Null())))
        planned = self.query(hit, ctes)
        out = dict(planned.outputs)
        left_keys = (self.convert(lhs, scope),) + tuple(self.convert(o, scope) for _i, o in corr.pairs)
        right_keys = (L.col(out["__v"]),) + tuple(L.col(out[f"__k{i}"]) for i in range(n))
        node = L.Join(node, planned.node, "left", left_keys, right_keys, None)
        # the subquery's row and non-NULL counts (per correlation key): no match is FALSE when it is
        # empty, else NULL when the value is NULL or the subquery holds a NULL
        facts = exp.Select(
            expressions=[k.copy() for k in keys]
            + [
                exp.Count(this=exp.Star()).as_("__n"),
                exp.Count(this=exp.column("__v", table="__mk")).as_("__nv"),
            ]
        ).from_(self._mark_table(inner))
        if keys:
            facts = facts.group_by(*[k.copy() for k in keys])
        planned_f = self.query(facts, ctes)
        fo = dict(planned_f.outputs)
        fkeys = tuple(self.convert(o, scope) for _i, o in corr.pairs)
        node = L.Join(
            node, planned_f.node, "left", fkeys, tuple(L.col(fo[f"__k{i}"]) for i in range(n)), None
        )
        m, cnt, cnt_v = internal_ref(out["__m"]), internal_ref(fo["__n"]), internal_ref(fo["__nv"])
        mark = exp.Case(
            ifs=[
                exp.If(this=exp.Is(this=m, expression=exp.true()), true=exp.true()),
                exp.If(
                    this=exp.EQ(
                        this=exp.func("coalesce", cnt, exp.Literal.number(0)),
                        expression=exp.Literal.number(0),
                    ),
                    true=exp.false(),
                ),
                exp.If(
                    this=exp.or_(
                        exp.Is(this=lhs.copy(), expression=exp.Null()),
                        exp.GT(this=cnt.copy(), expression=cnt_v),
                    ),
                    true=exp.Null(),
                ),
            ],
            default=exp.false(),
        )
        return node, exp.Paren(this=mark)

    def _plan_with_select(self, body: exp.Select, exprs: list[exp.Expr], ctes) -> dict[str, str]:
        body = body.copy()
        body.set("expressions", exprs)
        planned = self.query(body, ctes)
        self._last_planned = planned
        return dict(planned.outputs)

    def _residual_scope(self, scope: Scope, outputs: dict[str, str], cols: list[exp.Column]) -> Scope:
        merged = Scope(dict(scope.columns))
        for i, c in enumerate(cols):
            merged.add(c.table, c.name, outputs[f"__r{i}"])
        return merged

    def _hoist(self, node: L.Node, sub: exp.Expression, scope, ctes) -> tuple[L.Node, exp.Expression]:
        """Two-level correlation: a conjunct of a (non-negated) EXISTS/IN subquery's WHERE that holds a
        nested subquery and reads the outer query but none of this subquery's own tables does not
        depend on the subquery's rows — ``EXISTS (S WHERE p AND c)`` is ``c AND EXISTS (S WHERE p)``
        in a WHERE — so ``c`` is applied to the outer side first, where its own correlation is one
        level deep."""
        if not isinstance(sub, exp.Select):
            return node, sub
        outer, direct = self._scope_aliases(scope), from_aliases(sub)
        keep, hoisted = [], []
        for c in conjuncts(sub.args.get("where")):
            cols = tables_of(c)
            nested = any(isinstance(n, (exp.Subquery, exp.Exists)) for n in c.walk())
            if nested and cols & outer and not cols & direct and not _defined_aliases(c) & outer:
                hoisted.append(c)
            else:
                keep.append(c)
        if not hoisted:
            return node, sub
        sub = sub.copy()
        set_where(sub, keep)
        for c in hoisted:
            node = self.apply_subquery_conjunct(node, c.copy(), scope, ctes)
            self.notes.append(
                f"two-level correlation: {_short(c)} hoisted out of its subquery to the outer query"
            )
        return node, sub

    def _exists(self, node: L.Node, sub: exp.Expression, scope, ctes, anti: bool) -> L.Node:
        if not anti:
            node, sub = self._hoist(node, sub, scope, ctes)
        corr = self._correlate(sub, scope)
        body = corr.body
        if isinstance(body, exp.Select) and (
            body.args.get("group") or body.args.get("having") or any(_has_agg(p) for p in body.expressions)
        ):
            raise NotSupportedError("EXISTS over an aggregating subquery")
        resid_cols = _unique_columns(corr.residual, _defined_aliases(sub))
        exprs: list[exp.Expr] = [inner.copy().as_(f"__k{i}") for i, (inner, _o) in enumerate(corr.pairs)]
        exprs += [c.copy().as_(f"__r{i}") for i, c in enumerate(resid_cols)]
        if not exprs:
            exprs = [exp.Literal.number(1).as_("__one")]
            if isinstance(body, exp.Select):
                body = body.copy()
                body.set("limit", exp.Limit(expression=exp.Literal.number(1)))
        outputs = self._plan_with_select(body, exprs, ctes)
        right = self._last_planned.node
        left_keys = tuple(self.convert(o, scope) for _i, o in corr.pairs)
        right_keys = tuple(L.col(outputs[f"__k{i}"]) for i in range(len(corr.pairs)))
        residual = None
        if corr.residual:
            merged = self._residual_scope(scope, outputs, resid_cols)
            residual = and_all([self.convert(r, merged) for r in corr.residual])
        return L.Join(node, right, "anti" if anti else "semi", left_keys, right_keys, residual)

    def _in_tuple(self, node: L.Node, lhs: exp.Tuple, sub: exp.Expression, scope, ctes, anti: bool) -> L.Node:
        """``(a, b) IN (SELECT x, y …)`` as a WHERE conjunct: a semi join on ``a = x AND b = y`` (a row whose
        tuple matches none is FALSE or NULL, filtered out either way)."""
        if anti:  # NOT IN over tuples is NULL when no pair differs but one is NULL: no single-key NULL rule
            raise NotSupportedError("multi-column NOT IN (subquery)")
        if isinstance(sub, exp.Select) and correlate(sub, self._scope_aliases(scope)).correlated:
            raise NotSupportedError("correlated multi-column IN (subquery)")
        planned = self.query(sub, ctes)
        if len(planned.outputs) != len(lhs.expressions):  # DuckDB bound it, so this does not happen
            raise NotSupportedError("IN (subquery) with as many columns as the subquery gives")
        left_keys = tuple(self.convert(e, scope) for e in lhs.expressions)
        right_keys = tuple(L.col(internal) for _name, internal in planned.outputs)
        return L.Join(node, planned.node, "semi", left_keys, right_keys, None)

    def _in(self, node: L.Node, lhs: exp.Expression, sub: exp.Expression, scope, ctes, anti: bool) -> L.Node:
        if isinstance(tuple_ := unwrap(lhs), exp.Tuple):
            return self._in_tuple(node, tuple_, sub, scope, ctes, anti)
        if not isinstance(sub, exp.Select):
            # set operation: plan it as is, its single column is the key
            planned = self.query(sub, ctes)
            if len(planned.outputs) != 1:
                raise NotSupportedError("IN (subquery) with more than one column")
            right_key = L.col(planned.outputs[0][1])
            return L.Join(node, planned.node, "anti" if anti else "semi", (self.convert(lhs, scope),),
                          (right_key,), None, null_aware=anti)  # fmt: skip
        if len(sub.expressions) != 1:
            raise NotSupportedError("IN (subquery) with more than one column")
        if not anti:
            node, sub = self._hoist(node, sub, scope, ctes)
        corr = self._correlate(sub, scope)
        if corr.correlated and anti:
            raise NotSupportedError("correlated NOT IN (subquery); use NOT EXISTS")
        body = corr.body
        if corr.correlated and (body.args.get("group") or any(_has_agg(p) for p in body.expressions)):
            raise NotSupportedError("correlated IN over an aggregating subquery")
        value = body.expressions[0]
        value = value.this if isinstance(value, exp.Alias) else value
        resid_cols = _unique_columns(corr.residual, _defined_aliases(sub))
        exprs = [value.copy().as_("__v")]
        exprs += [inner.copy().as_(f"__k{i}") for i, (inner, _o) in enumerate(corr.pairs)]
        exprs += [c.copy().as_(f"__r{i}") for i, c in enumerate(resid_cols)]
        outputs = self._plan_with_select(body, exprs, ctes)
        right = self._last_planned.node
        left_keys = (self.convert(lhs, scope),) + tuple(self.convert(o, scope) for _i, o in corr.pairs)
        right_keys = (L.col(outputs["__v"]),) + tuple(
            L.col(outputs[f"__k{i}"]) for i in range(len(corr.pairs))
        )
        residual = None
        if corr.residual:
            merged = self._residual_scope(scope, outputs, resid_cols)
            residual = and_all([self.convert(r, merged) for r in corr.residual])
        kind = "anti" if anti else "semi"
        return L.Join(node, right, kind, left_keys, right_keys, residual, null_aware=anti)

    def _scalar(self, node: L.Node, sub: exp.Expression, scope, ctes) -> tuple[L.Node, str]:
        if not isinstance(sub, exp.Select) or len(sub.expressions) != 1:
            raise NotSupportedError("scalar subquery that is not a one-column SELECT")
        corr = self._correlate(sub, scope)
        body = corr.body
        value = body.expressions[0]
        value = value.this if isinstance(value, exp.Alias) else value
        if corr.residual:
            return self._delim_scalar(node, sub, corr, value, scope, ctes)
        if not corr.pairs:
            limit = body.args.get("limit")
            one_row = (not body.args.get("group") and _has_agg(value)) or (
                limit is not None and limit.expression.sql() == "1"
            )
            if not one_row:
                return self._checked_scalar(node, body, ctes)
            outputs = self._plan_with_select(body, [value.copy().as_("__v")], ctes)
            join = L.Join(node, self._last_planned.node, "left", (), (), None)
            return join, outputs["__v"]
        empty = _aggregate_over_group(body, value, self.aggregates)
        keys = [inner.copy() for inner, _o in corr.pairs]
        body = body.copy()
        body.set("group", exp.Group(expressions=[k.copy() for k in keys]))
        exprs = [k.as_(f"__k{i}") for i, k in enumerate(keys)] + [value.copy().as_("__v")]
        if empty is not None:
            exprs.append(exp.true().as_("__m"))
        outputs = self._plan_with_select(body, exprs, ctes)
        left_keys = tuple(self.convert(o, scope) for _i, o in corr.pairs)
        right_keys = tuple(L.col(outputs[f"__k{i}"]) for i in range(len(keys)))
        join = L.Join(node, self._last_planned.node, "left", left_keys, right_keys, None)
        if empty is None:
            return join, outputs["__v"]
        return self._or_empty(join, outputs["__v"], outputs["__m"], empty)

    def _or_empty(self, node: L.Node, value: str, matched: str, empty: exp.Expression) -> tuple[L.Node, str]:
        """The subquery's value, or its value over no rows (COUNT → 0) where no group matched."""
        name = self.names.fresh("scalar")
        case = exp.Case(
            ifs=[exp.If(this=exp.Is(this=L.col(matched), expression=exp.Null()), true=empty.copy())],
            default=L.col(value),
        )
        exprs = tuple((n, L.col(n)) for n in node.names) + ((name, case),)
        return L.Project(node, exprs), name

    def _delim_scalar(
        self, node: L.Node, sub: exp.Select, corr: Correlation, value: exp.Expression, scope, ctes
    ) -> tuple[L.Node, str]:
        """A scalar subquery correlated by more than equalities, unnested with a dependent join
        (Neumann & Kemper, "Unnesting Arbitrary Queries", BTW 2015): D = the distinct values of the
        outer columns it reads (a "delim" scan of the outer side); the subquery is joined to D on its
        correlated predicate and aggregated per D row; the outer side LEFT JOINs that on D's columns.
        An outer row whose group is empty gets the value over no rows (COUNT → 0)."""
        body = corr.body
        empty = _aggregate_over_group(body, value, self.aggregates)
        inner_aliases = _defined_aliases(sub)
        outer_aliases = self._scope_aliases(scope)
        preds: list[exp.Expression] = [exp.EQ(this=i.copy(), expression=o.copy()) for i, o in corr.pairs]
        preds += [r.copy() for r in corr.residual]
        outer_cols = _unique_columns(preds, outer_aliases - inner_aliases)
        whole = conjunction(preds)
        # a predicate that may hold for a NULL outer value (coalesce(o.x, 0) < i.y) gives the NULL D row a
        # value of its own: the outer side finds it through a NULL-safe key ([x] = [d]: lists compare NULLs equal)
        null_safe = [not rejects_null(whole, (c.table, c.name)) for c in outer_cols]
        # D: the distinct outer correlation values
        delim = [self.names.fresh(f"delim_{c.name}") for c in outer_cols]
        outer_internal = _outer_internal(outer_cols, scope)
        d_node = L.Aggregate(node, tuple((d, L.col(i)) for d, i in zip(delim, outer_internal)), ())
        # the subquery's rows, with the inner columns the predicate and the value read
        inner_cols = _unique_columns(preds + [value], inner_aliases)
        exprs: list[exp.Expr] = [c.copy().as_(f"__r{i}") for i, c in enumerate(inner_cols)]
        outputs = self._plan_with_select(body, exprs or [exp.Literal.number(1).as_("__one")], ctes)
        joined_scope = Scope()
        for i, c in enumerate(inner_cols):
            joined_scope.add(c.table, c.name, outputs[f"__r{i}"])
        for c, d in zip(outer_cols, delim):
            joined_scope.add(c.table, c.name, d)
        keys = self._dependent_keys(preds, joined_scope, outer_aliases, inner_aliases)
        dependent = L.Join(
            d_node, self._last_planned.node, "inner", tuple(keys.left), tuple(keys.right), and_all(keys.rest)
        )
        # aggregate per D row (GROUP BY D's columns), then LEFT JOIN the outer side on them
        d_refs = [exp.column(d, table=DELIM) for d in delim]
        for d in delim:
            joined_scope.add(DELIM, d, d)
        grouped = exp.Select(
            expressions=[r.copy().as_(f"__k{i}") for i, r in enumerate(d_refs)]
            + [value.copy().as_("__v"), exp.true().as_("__m")]
        ).group_by(*[r.copy() for r in d_refs])
        planned = self._select_rest(grouped, dependent, joined_scope, ctes)
        out = dict(planned.outputs)

        def key(name: str, safe: bool) -> exp.Expression:
            return exp.Array(expressions=[L.col(name)]) if safe else L.col(name)

        join = L.Join(
            node,
            planned.node,
            "left",
            tuple(key(i, safe) for i, safe in zip(outer_internal, null_safe)),
            tuple(key(out[f"__k{i}"], safe) for i, safe in enumerate(null_safe)),
            None,
        )
        self.notes.append(_dependent_note(keys, outer_cols, null_safe, empty))
        if empty is None:
            return join, out["__v"]
        return self._or_empty(join, out["__v"], out["__m"], empty)

    def _dependent_keys(
        self,
        preds: list[exp.Expression],
        joined_scope: Scope,
        outer_aliases: set[str],
        inner_aliases: set[str],
    ) -> DependentKeys:
        """The dependent join's keys (``inner = outer`` equalities, also out of ORs: :func:`_factored`) and
        its other conjuncts, converted over ``joined_scope`` (the subquery's columns and D's)."""
        keys = DependentKeys([], [], [], [], [])
        for p in _factored(preds):
            pu = unwrap(p)
            if isinstance(pu, exp.EQ):
                sides = [_tables(pu.this), _tables(pu.expression)]
                outer_side = [bool(t) and t <= outer_aliases and not t & inner_aliases for t in sides]
                inner_side = [bool(t) and t <= inner_aliases for t in sides]
                if (outer_side[0] and inner_side[1]) or (outer_side[1] and inner_side[0]):
                    o, i = (pu.this, pu.expression) if outer_side[0] else (pu.expression, pu.this)
                    keys.left.append(self.convert(o, joined_scope))
                    keys.right.append(self.convert(i, joined_scope))
                    keys.key_texts.append(_short(pu, 60))
                    continue
            keys.rest.append(self.convert(p, joined_scope))
            keys.rest_texts.append(_short(p, 60))
        return keys

    def _checked_scalar(self, node: L.Node, body: exp.Select, ctes) -> tuple[L.Node, str]:
        """An uncorrelated scalar subquery that may return several rows: planned like any query, then
        reduced to one row (its count and its value) that raises DuckDB's own error when the count
        is above one at run time; 0 rows give NULL, as in DuckDB."""
        item = body.expressions[0]
        name = item.alias if isinstance(item, exp.Alias) and item.alias else "__v"
        value = item.this if isinstance(item, exp.Alias) else item
        if isinstance(value, exp.Star):
            raise NotSupportedError("scalar subquery that may return more than one row, selecting *")
        inner = body.copy()
        inner.set("expressions", [value.copy().as_(name)])
        ref = exp.column(name, table="__sq")
        checked = exp.Case(
            ifs=[
                exp.If(
                    this=exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(1)),
                    true=exp.Anonymous(this="error", expressions=[exp.Literal.string(MORE_THAN_ONE_ROW)]),
                )
            ],
            default=exp.Max(this=ref),
        )
        outer = exp.Select(expressions=[checked.as_("__v")]).from_(
            exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("__sq")))
        )
        planned = self.query(outer, ctes)
        outputs = dict(planned.outputs)
        return L.Join(node, planned.node, "left", (), (), None), outputs["__v"]


#: DuckDB's error (an InvalidInputException) for a scalar subquery that returns more than one row
MORE_THAN_ONE_ROW = (
    "More than one row returned by a subquery used as an expression - "
    "scalar subqueries can only return a single row."
)


@dataclass
class DependentKeys:
    """A dependent join's condition: its key pairs (D's side, the subquery's), its other conjuncts, and
    their texts for the plan note."""

    left: list[exp.Expression]
    right: list[exp.Expression]
    rest: list[exp.Expression]
    key_texts: list[str]
    rest_texts: list[str]


def _aggregate_over_group(
    body: exp.Select, value: exp.Expression, aggregates: set[str]
) -> exp.Expression | None:
    """Check that a correlated scalar subquery (``body`` selecting ``value``) is an aggregate that can be
    computed per correlation group; its value over no rows (:func:`empty_value`)."""
    for unsupported in ("group", "having", "limit", "distinct", "order"):
        if body.args.get(unsupported):
            raise NotSupportedError(f"correlated scalar subquery with {unsupported.upper()}")
    if not _has_agg(value):
        raise NotSupportedError("correlated scalar subquery without an aggregate")
    return empty_value(value, aggregates)


def _outer_internal(outer_cols: list[exp.Column], scope: Scope) -> list[str]:
    """The internal names of the outer columns a dependent join reads."""
    outer_internal = []
    for c in outer_cols:
        internal = scope.lookup(c.table, c.name)
        if internal is None:
            raise NotSupportedError(f"correlated reference {c.sql(DIALECT)}")
        outer_internal.append(internal)
    return outer_internal


def _dependent_note(
    keys: DependentKeys, outer_cols: list[exp.Column], null_safe: list[bool], empty: exp.Expression | None
) -> str:
    """The plan note of a dependent join."""
    key_texts, rest_texts = keys.key_texts, keys.rest_texts
    return (
        f"dependent join: a scalar subquery correlated by {' AND '.join(key_texts + rest_texts[:1])}"
        f"{' AND …' if len(rest_texts) > 1 else ''} is computed once per distinct "
        f"({', '.join(c.sql(DIALECT) for c in outer_cols)}) of the outer side and LEFT JOINed back"
        + ("" if empty is None else f" (no rows: {empty.sql(DIALECT)})")
        + (
            f"; its predicate may hold for NULL ({', '.join(c.sql(DIALECT) for c in nullable)}): joined back NULL-safe"
            if (nullable := [c for c, safe in zip(outer_cols, null_safe) if safe])
            else ""
        )
    )


#: table qualifier of the delim (distinct outer values) columns inside a dependent join
DELIM = "__squall_delim"

#: aggregates that give NULL over no rows (COUNT gives 0; any other keeps the subquery off this path)
NULL_ON_EMPTY: tuple[type[exp.Expression], ...] = (
    exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Stddev, exp.StddevSamp, exp.StddevPop, exp.Variance,
    exp.VariancePop, exp.AnyValue, exp.First, exp.Last, exp.ArgMax, exp.ArgMin, exp.Median,
    exp.GroupConcat, exp.LogicalAnd, exp.LogicalOr,
)  # fmt: skip


def empty_value(value: exp.Expression, aggregates: set[str]) -> exp.Expression | None:
    """``value`` (a scalar subquery's aggregate expression) over no rows: COUNT → 0, the others
    NULL; None when that is NULL anyway (a lone NULL-on-empty aggregate)."""
    v = unwrap(value)
    if isinstance(v, NULL_ON_EMPTY) and not isinstance(v, exp.Count):
        return None
    if any(isinstance(n, exp.Window) for n in v.walk()):
        raise NotSupportedError("window function in a correlated scalar subquery")

    def fix(n: exp.Expression) -> exp.Expression:
        agg = n.this if isinstance(n, exp.Filter) else n
        if isinstance(agg, (exp.Count, exp.CountIf)):
            return exp.Literal.number(0)
        if isinstance(agg, NULL_ON_EMPTY):
            return exp.Null()
        if isinstance(agg, exp.AggFunc) or (
            isinstance(agg, exp.Anonymous) and str(agg.name).lower() in aggregates
        ):
            raise NotSupportedError(f"{agg.sql(DIALECT)[:40]} in a correlated scalar subquery")
        return n

    empty = value.transform(fix)
    return None if _surely_null(empty) else empty


def _surely_null(e: exp.Expression) -> bool:
    """NULL, or arithmetic over a NULL (``avg(x) * 1.2`` over no rows)."""
    e = unwrap(e)
    if isinstance(e, exp.Null):
        return True
    if isinstance(e, _STRICT):
        return _surely_null(e.this) or _surely_null(e.expression)
    if isinstance(e, (exp.Neg, exp.Cast)):
        return _surely_null(e.this)
    return False


_STRICT = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv)
_COMPARE = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike)


def _null_if_null(e: exp.Expression, column: tuple[str, str]) -> bool:
    """True when ``e`` is surely NULL while ``column`` is."""
    e = unwrap(e)
    if isinstance(e, exp.Column):
        return (e.table, e.name) == column
    if isinstance(e, _STRICT):
        return _null_if_null(e.this, column) or _null_if_null(e.expression, column)
    if isinstance(e, (exp.Neg, exp.Cast)):
        return _null_if_null(e.this, column)
    return False


def rejects_null(p: exp.Expression, column: tuple[str, str]) -> bool:
    """True when predicate ``p`` is never TRUE while ``column`` is NULL (then a NULL outer value
    has an empty group, which an equality join on the delim columns gives it)."""
    p = unwrap(p)
    if isinstance(p, exp.And):
        return rejects_null(p.this, column) or rejects_null(p.expression, column)
    if isinstance(p, exp.Or):
        return rejects_null(p.this, column) and rejects_null(p.expression, column)
    if isinstance(p, _COMPARE):
        return _null_if_null(p.this, column) or _null_if_null(p.expression, column)
    if isinstance(p, (exp.Between, exp.In)) and p.args.get("query") is None:
        return _null_if_null(p.this, column)
    return False


def _factored(preds: list[exp.Expression]) -> list[exp.Expression]:
    """Conjuncts with the terms common to every branch of an OR taken out of it:
    ``(a AND b) OR (a AND c)`` → ``a``, ``b OR c`` (the dependent join's keys come out of ORs)."""
    out: list[exp.Expression] = []
    for p in preds:
        for c in conjuncts(p):
            branches = disjuncts(c)
            if len(branches) < 2:
                out.append(c)
                continue
            terms = [{t.sql(DIALECT): t for t in conjuncts(b)} for b in branches]
            common = set(terms[0]).intersection(*terms[1:])
            if not common:
                out.append(c)
                continue
            out += [terms[0][k] for k in sorted(common)]
            rests = [[t for k, t in b.items() if k not in common] for b in terms]
            if all(rests):
                ors = [exp.paren(exp.and_(*r)) if len(r) > 1 else r[0] for r in rests]
                out.append(exp.paren(cast(exp.Expression, exp.or_(*ors))))
    return out


def _unique_columns(exprs: list[exp.Expression], inner: set[str]) -> list[exp.Column]:
    seen: dict[str, exp.Column] = {}
    for e in exprs:
        for c in e.find_all(exp.Column):
            if c.table in inner:
                seen.setdefault(f"{c.table}.{c.name}", c)
    return list(seen.values())
