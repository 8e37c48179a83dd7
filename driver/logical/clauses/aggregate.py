"""GROUP BY (with ROLLUP, CUBE and GROUPING SETS, ``GROUPING()``) and the aggregate calls of one SELECT."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import INTERNAL
from squall.driver.logical.clauses.base import ClauseBase, has_subquery
from squall.driver.logical.scope import Scope
from squall.errors import BindError, NotSupportedError


class Aggregation(ClauseBase):
    """A SELECT's aggregate node and the rewrite of expressions over it (see module doc)."""

    def _aggregate(
        self, node: L.Node, group: exp.Group | None, aggs: list[exp.Expression], scope: Scope
    ) -> tuple[L.Node, Callable[[exp.Expression], exp.Expression]]:
        """The aggregate node of a SELECT, and the rewrite of its later expressions (HAVING, select list,
        ORDER BY) over the node's keys and aggregate calls."""
        keys = self._group_keys(group, scope)
        gid = self.names.fresh("grouping_id") if keys.sets else ""
        calls, call_by_sql = self._agg_calls(aggs, scope)
        agg_node = L.Aggregate(node, tuple(keys.keys), tuple(calls), keys.sets, gid)

        def rewrite(e: exp.Expression) -> exp.Expression:
            def fix(n: exp.Expression) -> exp.Expression:
                if isinstance(n, exp.Column) and n.table == INTERNAL:
                    return L.col(n.name)
                if isinstance(n, (exp.Grouping, exp.GroupingId)):
                    return self._grouping(n, keys, gid, scope)
                text = L.sql_of(n)
                if text in call_by_sql:
                    return L.col(call_by_sql[text])
                if text in keys.by_sql:
                    return L.col(keys.by_sql[text])
                if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
                    internal = scope.lookup(n.table, n.name)
                    if internal is not None and internal in agg_node.names:
                        return L.col(internal)
                    raise BindError(f"column {L.sql_of(n)} must appear in GROUP BY or in an aggregate")
                return n

            if has_subquery(e):
                raise NotSupportedError(f"subquery in an expression: {L.sql_of(e)[:80]}")
            return e.transform(fix)

        return agg_node, rewrite

    def _group_keys(self, group: exp.Group | None, scope: Scope) -> GroupKeys:
        """The GROUP BY keys (each distinct converted expression once) and grouping sets."""
        keys: list[tuple[str, exp.Expression]] = []
        key_by_sql: dict[str, str] = {}
        group_sets: list[list[exp.Expression]] | None = None
        if group is not None:
            key_list, group_sets = _grouping_sets(group)
            for g in key_list:
                converted = self.convert(g, scope)
                text = L.sql_of(converted)
                if text in key_by_sql:
                    key_by_sql[L.sql_of(g)] = key_by_sql[text]
                    continue
                name = converted.name if isinstance(converted, exp.Column) else self.names.fresh("key")
                if any(name == n for n, _e in keys):
                    name = self.names.fresh("key")
                keys.append((name, converted))
                key_by_sql[text] = name
                key_by_sql[L.sql_of(g)] = name
        key_index = {n: i for i, (n, _e) in enumerate(keys)}
        sets: tuple[tuple[int, ...], ...] = ()
        if group_sets is not None:
            indexed = [tuple(sorted({key_index[key_by_sql[L.sql_of(g)]] for g in s})) for s in group_sets]
            if len(set(indexed)) != len(indexed):
                raise NotSupportedError("GROUPING SETS that repeat a set")
            sets = tuple(indexed)
        return GroupKeys(keys, key_by_sql, key_index, sets)

    def _agg_calls(
        self, aggs: list[exp.Expression], scope: Scope
    ) -> tuple[list[tuple[str, L.AggCall]], dict[str, str]]:
        """The aggregate calls (each distinct converted call once), and each one's name by its SQL text (as
        written and as converted)."""
        calls: list[tuple[str, L.AggCall]] = []
        call_by_sql: dict[str, str] = {}
        for a in aggs:
            converted = self.convert(a, scope)
            text = L.sql_of(converted)
            if text in call_by_sql:
                call_by_sql[L.sql_of(a)] = call_by_sql[text]
                continue
            name = self.names.fresh(_agg_name(converted))
            calls.append((name, _agg_call(converted)))
            call_by_sql[text] = name
            call_by_sql[L.sql_of(a)] = name
        return calls, call_by_sql

    def _grouping(
        self, n: exp.Grouping | exp.GroupingId, keys: GroupKeys, gid: str, scope: Scope
    ) -> exp.Expression:
        """``GROUPING(k…)``: bits of the grouping id ``gid`` (0 without grouping sets)."""
        bits: list[exp.Expression] = []
        for arg in n.expressions:
            name = keys.by_sql.get(L.sql_of(arg)) or keys.by_sql.get(L.sql_of(self.convert(arg, scope)))
            if name is None:
                raise BindError(f"GROUPING() argument {L.sql_of(arg)} is not a GROUP BY key")
            if not keys.sets:
                continue
            shift = len(keys.keys) - 1 - keys.index[name]
            bits.append(
                exp.BitwiseAnd(
                    this=exp.paren(
                        exp.BitwiseRightShift(this=L.col(gid), expression=exp.Literal.number(shift))
                    ),
                    expression=exp.Literal.number(1),
                )
            )
        if not bits:
            return exp.cast(exp.Literal.number(0), exp.DataType.build("BIGINT"))
        out: exp.Expression = exp.paren(bits[0])
        for bit in bits[1:]:
            out = exp.BitwiseOr(
                this=exp.paren(exp.BitwiseLeftShift(this=out, expression=exp.Literal.number(1))),
                expression=exp.paren(bit),
            )
        return exp.paren(out)


@dataclass
class GroupKeys:
    """A SELECT's GROUP BY: its keys (internal name, converted expression), each key's name by SQL text (as
    written and as converted), its position by name, and the grouping sets (key positions; none for a plain
    GROUP BY)."""

    keys: list[tuple[str, exp.Expression]]
    by_sql: dict[str, str]
    index: dict[str, int]
    sets: tuple[tuple[int, ...], ...]


def _grouping_sets(group: exp.Group) -> tuple[list[exp.Expression], list[list[exp.Expression]] | None]:
    """GROUP BY items → (every key expression, the grouping sets or None for a plain GROUP BY).

    ``a, ROLLUP(b, c), CUBE(d), GROUPING SETS (…)`` is the cross product of each item's sets,
    as in DuckDB."""

    def unit(e: exp.Expression) -> list[exp.Expression]:
        if isinstance(e, exp.Tuple):
            return list(e.expressions)
        if isinstance(e, exp.Paren):
            return unit(e.this)
        return [e]

    def sets_of(e: exp.Expression) -> list[list[exp.Expression]]:
        if isinstance(e, exp.Rollup):
            parts = [unit(x) for x in e.expressions]
            return [[x for p in parts[:i] for x in p] for i in range(len(parts), -1, -1)]
        if isinstance(e, exp.Cube):
            parts = [unit(x) for x in e.expressions]
            out: list[list[exp.Expression]] = [[]]
            for p in parts:
                out = [s + p for s in out] + out
            return out
        if isinstance(e, exp.GroupingSets):
            return [s for item in e.expressions for s in sets_of(item)]
        return [unit(e)]

    items = list(group.expressions)
    for key in ("grouping_sets", "rollup", "cube"):  # older sqlglot keeps them apart
        items += list(group.args.get(key) or [])
    keys: list[exp.Expression] = []
    seen: set[str] = set()
    for item in items:
        for s in sets_of(item):
            for k in s:
                if L.sql_of(k) not in seen:
                    seen.add(L.sql_of(k))
                    keys.append(k)
    if not any(isinstance(i, (exp.Rollup, exp.Cube, exp.GroupingSets)) for i in items):
        return keys, None
    combined: list[list[exp.Expression]] = [[]]
    for item in items:
        combined = [a + b for a in combined for b in sets_of(item)]
    return keys, combined


def _agg_name(e: exp.Expression) -> str:
    return (e.name if isinstance(e, exp.Anonymous) else e.key) or "agg"


def _agg_call(e: exp.Expression) -> L.AggCall:
    if isinstance(e, exp.Filter):
        return dataclasses.replace(_agg_call(e.this), expression=e.copy(), filtered=True)
    func = (e.name if isinstance(e, exp.Anonymous) else cast(exp.Func, e).sql_name()).lower()
    distinct = False
    args: list[exp.Expression] = []
    inner = e.this if not isinstance(e, exp.Anonymous) else None
    if isinstance(inner, exp.Distinct):
        distinct = True
        args = list(inner.expressions)
    elif isinstance(e, exp.Anonymous):
        args = list(e.expressions)
    else:
        args = [a for a in e.iter_expressions()]
    if isinstance(e, exp.Count) and (inner is None or isinstance(inner, exp.Star)):
        func, args = "count_star", []
    return L.AggCall(func, tuple(args), distinct, e.copy())
