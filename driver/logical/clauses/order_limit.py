"""ORDER BY (positions, output names, ``ALL``, expressions not selected), LIMIT and OFFSET of a query."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.logical.clauses.base import ClauseBase, Planned
from squall.driver.logical.scope import Scope
from squall.errors import BindError, NotSupportedError


class OrderLimit(ClauseBase):
    """A query's ORDER BY and LIMIT (see module doc)."""

    def _order_limit(
        self,
        e: exp.Expression,
        node: L.Node,
        outputs: tuple[tuple[str, str], ...],
        scope: Scope,
        rewrite: Callable[[exp.Expression], exp.Expression],
        distinct: bool = False,
    ) -> Planned:
        order = e.args.get("order")
        if order is not None:
            order_items = _order_all(order.expressions, len(outputs))
            by_visible: dict[str, str] = {}
            for v, i in outputs:
                by_visible.setdefault(v, i)
            keys = []
            extra: list[tuple[str, exp.Expression]] = []
            for o in order_items:
                target = o.this
                internal = None
                if isinstance(target, exp.Literal) and not target.is_string:
                    pos = int(target.this)
                    if not 1 <= pos <= len(outputs):
                        raise BindError(f"ORDER BY position {pos} is not in the select list")
                    internal = outputs[pos - 1][1]
                elif isinstance(target, exp.Column) and not target.table and target.name in by_visible:
                    internal = by_visible[target.name]
                if internal is not None:
                    key_expr: exp.Expression = L.col(internal)
                else:
                    converted = rewrite(target)
                    match = next((n for n, ex in _exprs_of(node) if ex == converted), None)
                    if match is None and isinstance(converted, exp.Column) and converted.name in node.names:
                        match = converted.name
                    if match is None:
                        if distinct or not isinstance(node, L.Project):
                            raise NotSupportedError("ORDER BY an expression that is not selected here")
                        name = self.names.fresh("sort")
                        extra.append((name, converted))
                        match = name
                    key_expr = L.col(match)
                nulls_first = bool(o.args.get("nulls_first"))
                keys.append(L.SortKey(key_expr, bool(o.args.get("desc")), nulls_first))
            if extra:
                assert isinstance(node, L.Project)
                node = L.Project(node.input, node.exprs + tuple(extra))
            node = L.Sort(node, tuple(keys))
        limit = e.args.get("limit")
        offset = e.args.get("offset")
        if limit is not None or offset is not None:
            node = L.Limit(node, _int_arg(limit, "LIMIT"), _int_arg(offset, "OFFSET") or 0)
        final = tuple(i for _v, i in outputs)
        if node.names != final:
            node = L.Project(node, tuple((i, L.col(i)) for i in final))
        return Planned(node, outputs)


def _order_all(items: list[exp.Ordered], width: int) -> list[exp.Ordered]:
    """``ORDER BY ALL [DESC] [NULLS …]``: every output column, left to right, in that direction."""
    if len(items) == 1 and isinstance(items[0].this, exp.Var) and items[0].this.name.upper() == "ALL":
        first = items[0]
        return [
            exp.Ordered(
                this=exp.Literal.number(i + 1),
                desc=first.args.get("desc"),
                nulls_first=first.args.get("nulls_first"),
            )
            for i in range(width)
        ]
    return items


def _exprs_of(node: L.Node) -> list[tuple[str, exp.Expression]]:
    if isinstance(node, L.Project):
        return list(node.exprs)
    return []


def _int_arg(node: exp.Expression | None, what: str) -> int | None:
    if node is None:
        return None
    value = node.expression if isinstance(node, (exp.Limit, exp.Offset)) else node
    if isinstance(value, exp.Literal) and not value.is_string:
        try:
            return int(value.this)
        except ValueError:
            pass
    raise NotSupportedError(f"{what} must be a whole number literal")
