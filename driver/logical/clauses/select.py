"""One SELECT: sources → joins → subquery conjuncts → aggregate → window → projection → DISTINCT → ORDER BY
→ LIMIT, each clause from its module."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import cast

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import conjuncts, from_items
from squall.driver.ir.nodes import DIALECT
from squall.driver.logical.clauses.aggregate import Aggregation
from squall.driver.logical.clauses.base import Planned, has_subquery
from squall.driver.logical.clauses.joins import is_inner, subquery_order
from squall.driver.logical.clauses.order_limit import OrderLimit
from squall.driver.logical.clauses.unnests import Unnests
from squall.driver.logical.clauses.window import Windows, qualify_condition
from squall.driver.logical.decorrelate.deep import lift_deep_correlation
from squall.driver.logical.decorrelate.lateral import decorrelate_laterals
from squall.driver.logical.scope import Scope
from squall.errors import NotSupportedError


class SelectClause(Unnests, Aggregation, Windows, OrderLimit):
    """A SELECT as a logical plan (see module doc)."""

    def _with(self, e: exp.Expression, ctes: dict[str, exp.Expression]) -> dict[str, exp.Expression]:
        """``ctes`` with the common table expressions of ``e``'s WITH added."""
        w = e.args.get("with_")
        if not w:
            return ctes
        if w.args.get("recursive"):
            raise NotSupportedError("WITH RECURSIVE")
        out = dict(ctes)
        for cte in w.expressions:
            out[cte.alias_or_name] = cte.this
        return out

    def select(self, sel: exp.Select, ctes: dict[str, exp.Expression]) -> Planned:
        ctes = self._with(sel, ctes)
        for unsupported in ("laterals", "pivots", "connect", "sample", "windows"):
            if sel.args.get(unsupported):
                raise NotSupportedError(unsupported.upper().rstrip("S"))
        sel, lateral_notes = decorrelate_laterals(sel, lambda e: bool(self._find_aggs(e)))
        self.notes.extend(lateral_notes)
        sel, deep_notes = lift_deep_correlation(sel)
        self.notes.extend(deep_notes)
        scope = Scope()
        sel, unnests = self._from_unnests(sel)
        items = from_items(sel)
        specs = list(sel.args.get("joins") or [])
        sources = [self._source(item, ctes, scope) for i, item in enumerate(items) if i not in unnests]
        where = conjuncts(sel.args.get("where"))
        plain = [c for c in where if not has_subquery(c)]
        with_subquery = [c for c in where if has_subquery(c)]
        node: L.Node
        if unnests and not all(is_inner(j) for j in specs):
            sources, specs = self._unnests_at_home(sources, specs, unnests, scope)
            unnests = {}
        if all(is_inner(j) for j in specs):  # an inner join's ON is its WHERE: subqueries there too
            on = [c for j in specs for c in conjuncts(j.args.get("on")) if c != exp.true()]
            with_subquery += [c for c in on if has_subquery(c)]
            on = [c for c in on if not has_subquery(c)]
        if unnests:
            node = self._unnest_joins(sources, list(unnests.values()), on + plain, scope)
        elif not sources:
            node = L.Values(((),), ())
        elif all(is_inner(j) for j in specs):
            # with subquery conjuncts after the joins, the largest starts: the smaller sides it joins are
            # broadcast, and a broadcast holding the subquery's keys cuts its tables' scans (join filters)
            node = self._inner_join_tree(sources, on + plain, scope, other_starts=not with_subquery)
        else:
            node = self._ordered_joins(sources, specs, plain, scope, ctes)
        aliases = self._scope_aliases(scope)
        for c in sorted(with_subquery, key=lambda c: subquery_order(c, aliases)):
            node = self.apply_subquery_conjunct(node, c, scope, ctes)
        return self._select_rest(sel, node, scope, ctes)

    def _select_rest(
        self, sel: exp.Select, node: L.Node, scope: Scope, ctes: dict[str, exp.Expression]
    ) -> Planned:
        projections = _expand_columns(list(sel.expressions), scope)
        having = sel.args.get("having")
        group = sel.args.get("group")
        order = sel.args.get("order")
        qualify = qualify_condition(sel, projections)
        agg_exprs = [a for p in projections for a in self._find_aggs(p)]
        if qualify is not None:
            agg_exprs += self._find_aggs(qualify)
        if group is not None and group.args.get("all"):
            # GROUP BY ALL: every select-list expression without an aggregate or a window
            keys = [
                (p.this if isinstance(p, exp.Alias) else p).copy()
                for p in projections
                if not self._find_aggs(p) and p.find(exp.Window) is None
            ]
            group = exp.Group(expressions=keys)
        if having is not None:
            agg_exprs += self._find_aggs(having.this)
        if order is not None:
            agg_exprs += [a for o in order.expressions for a in self._find_aggs(o)]
        rewrite: Callable[[exp.Expression], exp.Expression]
        aggregated = group is not None or bool(agg_exprs)
        if aggregated:
            node, rewrite = self._aggregate(node, group, agg_exprs, scope)
            if having is not None:
                having_expr = having.this
                if has_subquery(having_expr):
                    node, having_expr = self.attach_scalars(node, having_expr, Scope(), ctes)
                node = L.Filter(node, rewrite(having_expr))
        else:
            if having is not None:
                raise NotSupportedError("HAVING without GROUP BY or aggregates")

            def rewrite(e: exp.Expression) -> exp.Expression:
                return self.convert(e, scope)

        if any(has_subquery(p) for p in projections):
            attached = []
            for p in projections:
                if has_subquery(p):
                    if not aggregated:  # EXISTS / IN (subquery) as a value: a mark join per input row
                        node, p = self.attach_marks(node, p, scope, ctes)
                    node, p = self.attach_scalars(node, p, Scope() if aggregated else scope, ctes)
                attached.append(p)
            projections = attached

        windows = [w for p in projections for w in p.find_all(exp.Window)]
        if order is not None:
            windows += [w for o in order.expressions for w in o.find_all(exp.Window)]
        if qualify is not None:
            windows += list(qualify.find_all(exp.Window))
        if windows:
            node, rewrite = self._windows(node, windows, rewrite)
        if qualify is not None:
            if has_subquery(qualify):
                raise NotSupportedError("subquery in QUALIFY")
            node = L.Filter(node, rewrite(qualify))

        exprs: list[tuple[str, exp.Expression]] = []
        outputs = []
        for p in projections:
            visible = p.alias_or_name
            inner = p.this if isinstance(p, exp.Alias) else p
            converted = rewrite(inner)
            name = converted.name if isinstance(converted, exp.Column) else self.names.fresh(visible)
            if any(name == n for n, _ in exprs):
                name = self.names.fresh(visible)
            exprs.append((name, converted))
            outputs.append((visible, name))
        project = L.Project(node, tuple(exprs))
        if sel.args.get("distinct") and not sel.args["distinct"].args.get("on"):
            distinct_keys: tuple[tuple[str, exp.Expression], ...] = tuple((n, L.col(n)) for n, _ in exprs)
            return self._order_limit(
                sel, L.Aggregate(project, distinct_keys, ()), tuple(outputs), scope, rewrite, True
            )
        return self._order_limit(sel, project, tuple(outputs), scope, rewrite)


def _expand_columns(projections: list[exp.Expression], scope: Scope) -> list[exp.Expression]:
    """``COLUMNS('regex')`` / ``COLUMNS(*)``: the select item once per matching column, in FROM order."""
    out: list[exp.Expression] = []
    for p in projections:
        found = list(p.find_all(exp.Columns))
        if not found:
            out.append(p)
            continue
        pattern = found[0].this
        if len(found) > 1 or not (
            isinstance(pattern, exp.Star) or (isinstance(pattern, exp.Literal) and pattern.is_string)
        ):
            raise NotSupportedError(
                f"COLUMNS(…) other than one regex or * per select item: {p.sql(DIALECT)[:80]}"
            )
        regex = None if isinstance(pattern, exp.Star) else re.compile(pattern.this)
        for alias, column in list(scope.columns):
            if regex is not None and not regex.search(column):
                continue
            ref = exp.column(column, table=alias)

            def put(n: exp.Expression, ref: exp.Expression = ref) -> exp.Expression:
                return ref.copy() if isinstance(n, exp.Columns) else n

            item = p.transform(put)
            if isinstance(item, (exp.Alias, exp.Column)):
                out.append(item)
            else:
                out.append(cast(exp.Expression, exp.alias_(item, column)))
    return out
