"""Helpers over sqlglot expressions that every stage shares: predicates split and joined, the tables an
expression reads, the FROM items of a SELECT (no planning decisions here; one copy of each)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import sqlglot
from sqlglot import exp

#: table qualifier of a column that already holds an internal name (a decorrelated subquery's value)
INTERNAL = "__squall_internal"


def parse(text: str) -> exp.Expression:
    """``text`` parsed as DuckDB SQL (its nodes' positions copied shallowly: :func:`light_positions`)."""
    return light_positions(cast(exp.Expression, sqlglot.parse_one(text, read="duckdb")))


class _ScalarMeta(dict[str, object]):
    """A node's ``meta`` that holds only immutable values: a deep copy of it is a shallow one."""

    __slots__ = ()

    def __deepcopy__(self, memo: object) -> _ScalarMeta:
        return _ScalarMeta(self)


_SCALARS = (int, str, float, bool, type(None))


def light_positions(tree: exp.Expression) -> exp.Expression:
    """``tree``, each node whose ``meta`` holds only plain values (the parser's line, column and offsets) made
    to copy it shallowly. sqlglot deep-copies a node's meta dict value by value through :func:`copy.deepcopy`,
    and planning copies trees often (``transform``, ``copy``): per parsed identifier that was most of the
    copy's cost."""
    for node in tree.walk():
        meta = node._meta
        if meta and type(meta) is dict and all(type(v) in _SCALARS for v in meta.values()):
            node._meta = _ScalarMeta(meta)
    return tree


def internal_ref(name: str) -> exp.Column:
    """A reference to internal column ``name`` inside a (not yet converted) query expression."""
    return exp.column(name, table=INTERNAL)


def unwrap(e: exp.Expression) -> exp.Expression:
    """``e`` with its enclosing parentheses looked through."""
    while isinstance(e, exp.Paren):
        e = e.this
    return e


def conjuncts(e: exp.Expression | None) -> list[exp.Expression]:
    """The AND-ed terms of a predicate (or WHERE), parentheses looked through."""
    if e is None:
        return []
    if isinstance(e, exp.Where):
        return conjuncts(e.this)
    if isinstance(e, exp.Paren):
        return conjuncts(e.this)
    if isinstance(e, exp.And):
        return conjuncts(e.this) + conjuncts(e.expression)
    return [e]


def disjuncts(e: exp.Expression) -> list[exp.Expression]:
    """The OR-ed branches of a predicate, parentheses looked through."""
    if isinstance(e, exp.Paren):
        return disjuncts(e.this)
    if isinstance(e, exp.Or):
        return disjuncts(e.this) + disjuncts(e.expression)
    return [e]


def conjunction(items: Iterable[exp.Expression]) -> exp.Expression:
    """AND of one or more predicates (copies)."""
    items = list(items)
    if len(items) == 1:
        return items[0].copy()
    return cast(exp.Expression, exp.and_(*[i.copy() for i in items]))


def and_all(items: Iterable[exp.Expression]) -> exp.Expression | None:
    """AND of the predicates (copies); None for none."""
    items = list(items)
    if not items:
        return None
    return conjunction(items)


def set_where(sel: exp.Select, conds: list[exp.Expression]) -> None:
    """Make ``sel``'s WHERE the AND of ``conds`` (copies), in place; no WHERE for none."""
    sel.set("where", exp.Where(this=conjunction(conds)) if conds else None)


def tables_of(e: exp.Expression, ignore: str = "") -> set[str]:
    """The table qualifiers of ``e``'s columns (``ignore``: one not counted, e.g. :data:`INTERNAL`)."""
    return {c.table for c in e.find_all(exp.Column) if c.table and c.table != ignore}


def from_items(sel: exp.Expression) -> list[exp.Expression]:
    """The FROM items of a SELECT in written order: the FROM clause's, then each join's."""
    from_ = sel.args.get("from_")
    return ([from_.this] if from_ is not None else []) + [j.this for j in sel.args.get("joins") or []]


def from_aliases(sel: exp.Expression) -> set[str]:
    """The names (aliases) of a SELECT's FROM items."""
    return {i.alias_or_name for i in from_items(sel)}


def inner_aliases(q: exp.Select) -> set[str]:
    """The names ``q`` defines anywhere inside it (table, subquery and CTE aliases, table names): an inner
    alias hides an outer one of the same name."""
    return {a.name for a in q.find_all(exp.TableAlias)} | {t.alias_or_name for t in q.find_all(exp.Table)}


def free_in(col: exp.Column, top: exp.Expression) -> bool:
    """``col``'s table is not a FROM item of a SELECT between ``col`` and ``top`` (``top`` excluded): inside
    ``top`` it reads from outside that SELECT."""
    node: exp.Expression | None = col
    while node is not None and node is not top:
        if isinstance(node, exp.Select) and col.table in from_aliases(node):
            return False
        node = cast(exp.Expression | None, node.parent)
    return True


def tables_read(e: exp.Expression, aliases: set[str]) -> set[str]:
    """The FROM items (of ``aliases``) that ``e`` reads, its subqueries' correlated references included (a
    subquery's own FROM item of the same name hides the outer one)."""
    return {c.table for c in e.find_all(exp.Column) if c.table in aliases and free_in(c, e)}


def equi_between(
    p: exp.Expression, have: set[str], alias: str
) -> tuple[exp.Expression, exp.Expression] | None:
    """For ``a = b`` with one side only on ``have`` and the other only on ``alias``: (that side, other side)."""
    if not isinstance(p, exp.EQ):
        return None
    lt, rt = tables_of(p.this), tables_of(p.expression)
    if lt and rt and lt <= have and rt == {alias}:
        return p.this, p.expression
    if lt and rt and rt <= have and lt == {alias}:
        return p.expression, p.this
    return None
