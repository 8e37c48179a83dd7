"""Window functions of one SELECT, and QUALIFY (``DISTINCT ON`` is a QUALIFY on ``row_number()``)."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import INTERNAL
from squall.driver.logical.clauses.base import ClauseBase
from squall.errors import BindError, NotSupportedError


class Windows(ClauseBase):
    """A SELECT's window node (see module doc)."""

    def _windows(
        self,
        node: L.Node,
        windows: list[exp.Window],
        rewrite: Callable[[exp.Expression], exp.Expression],
    ) -> tuple[L.Node, Callable[[exp.Expression], exp.Expression]]:
        exprs: list[tuple[str, exp.Expression]] = []
        by_sql: dict[str, str] = {}
        partitions: set[str] = set()
        for w in windows:
            text = L.sql_of(w)
            if text in by_sql:
                continue
            converted = rewrite(w)
            name = self.names.fresh(converted.this.key if converted.this else "win")
            exprs.append((name, converted))
            by_sql[text] = name
            parts = converted.args.get("partition_by") or []
            partitions.add("\x00".join(L.sql_of(p) for p in parts))
        shared: tuple[exp.Expression, ...] = ()
        if len(partitions) == 1:
            first = exprs[0][1].args.get("partition_by") or []
            shared = tuple(p.copy() for p in first)
        win_node = L.Window(node, tuple(exprs), shared)

        def rewrite_w(e: exp.Expression) -> exp.Expression:
            # windows become references to their output columns (marked internal, so the
            # rewrite below, which may be an aggregate's, passes them through untouched)
            def pre(n: exp.Expression) -> exp.Expression:
                if isinstance(n, exp.Window) and L.sql_of(n) in by_sql:
                    return exp.column(by_sql[L.sql_of(n)], table=INTERNAL)
                return n

            return rewrite(e.transform(pre))

        return win_node, rewrite_w


def qualify_condition(sel: exp.Select, projections: list[exp.Expression]) -> exp.Expression | None:
    """The QUALIFY predicate; ``DISTINCT ON (k…) … ORDER BY o…`` adds ``row_number() OVER
    (PARTITION BY k… ORDER BY o…) = 1`` (the first row of each k by the query's order)."""
    qualify = sel.args.get("qualify")
    cond = qualify.this.copy() if qualify is not None else None
    distinct = sel.args.get("distinct")
    on = distinct.args.get("on") if distinct is not None else None
    if on is None:
        return cond
    if cond is not None:
        raise NotSupportedError("DISTINCT ON together with QUALIFY")
    by_alias = {p.alias: p.this for p in projections if isinstance(p, exp.Alias)}

    def resolve(e: exp.Expression) -> exp.Expression:
        if isinstance(e, exp.Literal) and not e.is_string:
            pos = int(e.this)
            if not 1 <= pos <= len(projections):
                raise BindError(f"position {pos} is not in the select list")
            p = projections[pos - 1]
            return (p.this if isinstance(p, exp.Alias) else p).copy()
        if isinstance(e, exp.Column) and not e.table and e.name in by_alias:
            return by_alias[e.name].copy()
        return e.copy()

    keys = [resolve(k) for k in (on.expressions if isinstance(on, exp.Tuple) else [on])]
    order = sel.args.get("order")
    ordered = []
    for o in order.expressions if order is not None else []:
        item = o.copy()
        item.set("this", resolve(o.this))
        ordered.append(item)
    window = exp.Window(
        this=exp.RowNumber(),
        partition_by=keys,
        order=exp.Order(expressions=ordered) if ordered else None,
    )
    return exp.EQ(this=window, expression=exp.Literal.number(1))
