"""Constants through join keys: where every row of one join side has ``a = 5`` and the join matches ``a = b``,
only the other side's rows with ``b = 5`` can match, so that side is filtered by ``b = 5`` too (and the
filter moves down it as far as it goes: below its GROUP BY, into its scans).

TPC-DS Q78 joins its store-sales CTE, filtered on ``ss_sold_year = 2000``, to its web- and catalog-sales CTEs
on ``ws_sold_year = ss_sold_year``: those CTEs then aggregate one year of sales, not five. Which sides take
the constant: both of an inner join; the side a left (right) join may leave unmatched gives it to the other
(its rows are kept matched or not, so it cannot take one); a semi join both ways; an anti join from its left
side only, and a ``NOT IN`` (null-aware) or full join not at all. A constant is a ``column = literal`` its
side's filters (scan filters included) hold for every row, followed through renames, GROUP BY keys and
joins. Both key columns must come from table columns of one type (``b = 5`` on a text ``b`` could fail where
``a = 5`` did not); explain says what was derived.

    >>> from sqlglot import exp
    >>> from squall.driver.ir import nodes as L
    >>> year = exp.EQ(this=L.col("y"), expression=exp.Literal.number(2000))
    >>> left = L.Scan("s", (("year", "y"), ("k", "k")), filters=(year,))
    >>> right = L.Scan("s", (("year", "y2"), ("k", "k2")))
    >>> join = L.Join(left, right, "left", (L.col("y"),), (L.col("y2"),))
    >>> [L.sql_of(f) for f in derive(join, lambda scan, column: "INTEGER").right.filters]
    ['"y2" = 2000']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import conjuncts
from squall.driver.logical.pushdown import place

if TYPE_CHECKING:
    from squall.driver.logical.rules.context import LogicalContext

NAME = "join_constants"

#: the type of a scan's column (by source name), None when unknown
ColumnType = Callable[[L.Scan, str], "str | None"]

#: join kind -> (left's constants go right, right's constants go left)
_DIRECTIONS = {
    "inner": (True, True),
    "left": (True, False),
    "right": (False, True),
    "semi": (True, True),
    "anti": (True, False),
}


def apply(node: L.Node, ctx: LogicalContext) -> L.Node:
    """The rule: :func:`derive` with the catalog's column types; explain lists what each join side took."""

    def column_type(scan: L.Scan, column: str) -> str | None:
        try:
            return str(ctx.catalog.table(scan.table).schema.field(column).type)
        except (KeyError, LookupError, AttributeError):
            return None

    return derive(node, column_type, ctx.notes)


def derive(node: L.Node, column_type: ColumnType, notes: list[str] | None = None) -> L.Node:
    """``node`` with each join side filtered by the constants the other side's key columns hold."""
    node = L.with_children(node, lambda child: derive(child, column_type, notes))
    if not isinstance(node, L.Join) or node.null_aware or node.kind not in _DIRECTIONS:
        return node
    to_right, to_left = _DIRECTIONS[node.kind]
    pairs = [
        (lk.name, rk.name)
        for lk, rk in zip(node.left_keys, node.right_keys)
        if type(lk) is exp.Column and type(rk) is exp.Column and not lk.table and not rk.table
    ]
    if not pairs:
        return node
    # each side's constants once (what one side takes, the other already holds: no new constant for it)
    left, right = node.left, node.right
    on_left, on_right = constants(left), constants(right)
    if to_right:
        right = _take(right, _given(left, on_left, right, on_right, pairs, column_type), notes)
    if to_left:
        flipped = [(b, a) for a, b in pairs]
        left = _take(left, _given(node.right, on_right, left, on_left, flipped, column_type), notes)
    if left is node.left and right is node.right:
        return node
    return dataclasses.replace(node, left=left, right=right)


def _given(
    source: L.Node,
    have: dict[str, exp.Literal],
    target: L.Node,
    already: dict[str, exp.Literal],
    pairs: list[tuple[str, str]],
    column_type: ColumnType,
) -> list[exp.Expression]:
    """``target_key = literal`` for each key pair whose source column is a constant (in ``have``) the target's
    is not (in ``already``)."""
    out: list[exp.Expression] = []
    for s, t in pairs:
        if s not in have or t in already:
            continue
        ts, tt = _type(source, s, column_type), _type(target, t, column_type)
        if ts is not None and ts == tt:
            out.append(exp.EQ(this=L.col(t), expression=have[s].copy()))
    return out


def _take(side: L.Node, preds: list[exp.Expression], notes: list[str] | None) -> L.Node:
    if not preds:
        return side
    if notes is not None:
        notes.append(
            "constants through join keys: "
            + ", ".join(L.sql_of(p) for p in preds)
            + " (the other side's key is)"
        )
    return place(side, preds)


def constants(node: L.Node) -> dict[str, exp.Literal]:
    """Columns of ``node``'s output that hold one literal value in every row (``column = literal`` filters)."""
    if isinstance(node, L.Scan):
        return _equalities(node.filters, set(node.names))
    if isinstance(node, L.Filter):
        return {**constants(node.input), **_equalities(conjuncts(node.predicate), set(node.names))}
    if isinstance(node, L.Project):
        have = constants(node.input)
        out: dict[str, exp.Literal] = {}
        for name, e in node.exprs:
            if type(e) is exp.Column and not e.table and e.name in have:
                out[name] = have[e.name]
        return out
    if isinstance(node, (L.Sort, L.Limit, L.Window)):
        return constants(node.input)
    if isinstance(node, L.Aggregate):
        if node.sets:  # a rolled-up key is NULL
            return {}
        have = constants(node.input)
        return {
            name: have[e.name]
            for name, e in node.keys
            if type(e) is exp.Column and not e.table and e.name in have
        }
    if isinstance(node, L.Join):
        if node.kind in ("inner", "cross"):
            return {**constants(node.right), **constants(node.left)}
        if node.kind in ("left", "semi", "anti"):
            return constants(node.left)
        if node.kind == "right":
            return constants(node.right)
    return {}


def _equalities(
    preds: tuple[exp.Expression, ...] | list[exp.Expression], names: set[str]
) -> dict[str, exp.Literal]:
    out: dict[str, exp.Literal] = {}
    for p in preds:
        if not isinstance(p, exp.EQ):
            continue
        for c, v in ((p.this, p.expression), (p.expression, p.this)):
            if type(c) is exp.Column and not c.table and c.name in names and type(v) is exp.Literal:
                out.setdefault(c.name, v)
    return out


def _type(node: L.Node, name: str, column_type: ColumnType) -> str | None:
    """The type of the table column ``name`` carries unchanged to ``node``'s output, or None."""
    if isinstance(node, L.Scan):
        src = next((s for s, internal in node.columns if internal == name), None)
        return None if src is None else column_type(node, src)
    if isinstance(node, L.Project):
        e = dict(node.exprs).get(name)
        if type(e) is exp.Column and not e.table:
            return _type(node.input, e.name, column_type)
        return None
    if isinstance(node, (L.Filter, L.Sort, L.Limit, L.Window)):
        return _type(node.input, name, column_type) if name in node.input.names else None
    if isinstance(node, L.Aggregate):
        e = dict(node.keys).get(name)
        if type(e) is exp.Column and not e.table and not node.sets:
            return _type(node.input, e.name, column_type)
        return None
    if isinstance(node, L.Join):
        for side in (node.left, node.right):
            if name in side.names:
                return _type(side, name, column_type)
    return None
