"""``UNNEST`` in FROM (helpers in :mod:`squall.driver.logical.unnest`): each unnest whose list reads one other
FROM item expands that item's rows before the joins (its home), the others expand the joined rows."""

from __future__ import annotations

from typing import cast

from sqlglot import exp

from squall.driver.estimate.join_order import Source
from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import conjunction, conjuncts, from_items, tables_of
from squall.driver.logical.clauses.joins import Joins, is_inner
from squall.driver.logical.scope import Scope
from squall.driver.logical.unnest import FromUnnest, expand, from_unnest, rows_per_row
from squall.errors import NotSupportedError


class Unnests(Joins):
    """Unnests in FROM (see module doc)."""

    def _from_unnests(self, sel: exp.Select) -> tuple[exp.Select, dict[int, FromUnnest]]:
        """The FROM items that are unnests, by position; a copy of ``sel`` in which each unnest column whose
        list reads one other FROM item is renamed a column of that item (its home, expanded before the joins).
        """
        joins = sel.args.get("joins") or []
        items = from_items(sel)
        found: dict[int, FromUnnest] = {}
        for i, item in enumerate(items):
            try:
                unnest = from_unnest(item)
            except ValueError as err:
                raise NotSupportedError(str(err)) from None
            if unnest is not None:
                found[i] = unnest
        if not found:
            return sel, {}
        local = {item.alias_or_name for i, item in enumerate(items) if i not in found}
        homes: dict[str, tuple[str, str]] = {}  # unnest alias -> (home alias, internal column name)
        for u in found.values():
            refs = tables_of(u.arg)
            if len(refs) == 1 and (home := next(iter(refs))) in local:
                homes[u.alias] = (home, self.names.fresh(u.column))
        if not all(is_inner(j) for j in joins):
            _check_unnests_beside_outer_joins(items, joins, found, {a: h for a, (h, _i) in homes.items()})
        if homes:
            sel = sel.copy()
            for c in list(sel.find_all(exp.Column)):  # this SELECT's own references (a subquery keeps its)
                if c.table in homes and c.find_ancestor(exp.Select) is sel:
                    home, internal = homes[c.table]
                    c.replace(exp.column(internal, table=home))
            items = from_items(sel)
            for i, u in found.items():
                again = from_unnest(items[i])
                assert again is not None
                entry: tuple[str | None, str] = homes.get(u.alias, (None, u.column))
                found[i] = FromUnnest(u.alias, entry[1], again.arg, entry[0])
        return sel, found

    def _unnests_at_home(
        self,
        sources: list[Source],
        specs: list[exp.Join],
        unnests: dict[int, FromUnnest],
        scope: Scope,
    ) -> tuple[list[Source], list[exp.Join]]:
        """Beside outer joins (``_check_unnests_beside_outer_joins`` said where that holds): each unnest expands its
        home's rows, its own ON conjuncts filter them; its join leaves the list. ``LEFT JOIN unnest(l) ON true``
        keeps a row whose list is empty or NULL, with a NULL element (``unnest([NULL])``)."""
        by_alias = {s.alias: i for i, s in enumerate(sources)}
        sources = list(sources)
        for k, u in unnests.items():
            j = specs[k - 1]
            home = cast(str, u.home)
            src = sources[by_alias[home]]
            scope.add(home, u.column, u.column)
            arg = self.convert(u.arg, scope)
            if (j.side or "").lower() == "left":
                empty = exp.EQ(
                    this=exp.func("coalesce", exp.func("len", arg.copy()), exp.Literal.number(0)),
                    expression=exp.Literal.number(0),
                )
                arg = exp.Case(
                    ifs=[exp.If(this=empty, true=exp.Array(expressions=[exp.null()]))], default=arg
                )
            node = expand(src.node, u.column, arg)
            expanded = Source(src.alias, node, src.rows * rows_per_row(u.arg), src.width + 8.0)
            on = [c for c in conjuncts(j.args.get("on")) if c != exp.true()]
            sources[by_alias[home]] = self._filtered(expanded, on, scope)
        kept = [j for k, j in enumerate(specs, start=1) if k not in unnests]
        return sources, kept

    def _unnest_joins(
        self, sources: list[Source], unnests: list[FromUnnest], preds: list[exp.Expression], scope: Scope
    ) -> L.Node:
        """Inner joins of ``sources`` with each unnest expanded at its home, or over the joined rows."""
        by_alias = {s.alias: s for s in sources}
        homed = [u for u in unnests if u.home]
        later = [u for u in unnests if not u.home]
        later_aliases = {u.alias for u in later}
        for u in homed:
            home = cast(str, u.home)
            src = by_alias[home]
            unnest_cols = {v.column for v in homed if v.home == home}
            own = [
                p
                for p in preds
                if tables_of(p) == {home} and not {c.name for c in p.find_all(exp.Column)} & unnest_cols
            ]
            preds = [p for p in preds if p not in own]
            src = self._filtered(src, own, scope)
            scope.add(home, u.column, u.column)
            node = expand(src.node, u.column, self.convert(u.arg, scope))
            by_alias[home] = Source(src.alias, node, src.rows * rows_per_row(u.arg), src.width + 8.0)
        ordered = [by_alias[s.alias] for s in sources]
        now = [p for p in preds if ordered and not tables_of(p) & later_aliases]  # no FROM table: all after
        after = [p for p in preds if p not in now]
        node = self._inner_join_tree(ordered, now, scope) if ordered else L.Values(((),), ())
        for u in later:
            internal = self.names.fresh(u.column)
            arg = self.convert(u.arg, scope)
            scope.add(u.alias, u.column, internal)
            node = expand(node, internal, arg)
        if after:
            node = L.Filter(node, conjunction([self.convert(p, scope) for p in after]))
        return node


def _check_unnests_beside_outer_joins(
    items: list[exp.Expression], joins: list[exp.Join], unnests: dict[int, FromUnnest], homes: dict[str, str]
) -> None:
    """Unnests in a FROM clause with outer joins expand their home's rows before the joins when that gives
    the same rows: each reads one FROM item before it (its home) that no join before the unnest null-supplies,
    and is itself an inner/cross join (its ON conjuncts reading only the home and itself) or ``LEFT JOIN
    unnest(…) ON true``. Else "not supported" (the one-rank fallback)."""
    position = {item.alias_or_name: i for i, item in enumerate(items)}
    for k, u in unnests.items():
        home = homes.get(u.alias)
        if home is None or position[home] > k:
            raise NotSupportedError("UNNEST in FROM over several FROM items, beside an outer join")
        h = position[home]
        # joins[i] joins items[i + 1]: the home not null-supplied before the unnest (by its own LEFT/FULL join
        # or a RIGHT/FULL join between them)
        own = (joins[h - 1].side or "").lower() if h > 0 else ""
        if own in ("left", "full") or any(
            (x.side or "").lower() in ("right", "full") for x in joins[h : k - 1]
        ):
            raise NotSupportedError("UNNEST in FROM of a null-supplied FROM item")
        j = joins[k - 1]
        on = [c for c in conjuncts(j.args.get("on")) if c != exp.true()]
        if not (is_inner(j) or ((j.side or "").lower() == "left" and not on and not j.kind)):
            raise NotSupportedError("UNNEST in FROM as the right side of an outer join with a condition")
        if any(not tables_of(c) <= {home, u.alias} for c in on):
            raise NotSupportedError("UNNEST in FROM joined on other FROM items, beside an outer join")
