"""Name scopes and predicate splitting, shared by the translator and subquery decorrelation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from sqlglot import exp


@dataclass
class Scope:
    """Columns visible in one SELECT: (source alias, column) → internal name."""

    columns: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, alias: str, column: str, internal: str) -> None:
        self.columns[(alias, column)] = internal

    def lookup(self, table: str, name: str) -> str | None:
        if (table, name) in self.columns:
            return self.columns[(table, name)]
        if not table:
            hits = [v for (_t, c), v in self.columns.items() if c == name]
            if len(hits) == 1:
                return hits[0]
        return None


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


def from_items(sel: exp.Expression) -> list[exp.Expression]:
    """The FROM items of a SELECT in written order: the FROM clause's, then each join's."""
    from_ = sel.args.get("from_")
    return ([from_.this] if from_ is not None else []) + [j.this for j in sel.args.get("joins") or []]


def free_in(col: exp.Column, top: exp.Expression) -> bool:
    """``col``'s table is not a FROM item of a SELECT between ``col`` and ``top`` (``top`` excluded): inside
    ``top`` it reads from outside that SELECT."""
    node: exp.Expression | None = col
    while node is not None and node is not top:
        if isinstance(node, exp.Select) and col.table in {i.alias_or_name for i in from_items(node)}:
            return False
        node = cast(exp.Expression | None, node.parent)
    return True


def tables_read(e: exp.Expression, aliases: set[str]) -> set[str]:
    """The FROM items (of ``aliases``) that ``e`` reads, its subqueries' correlated references included (a
    subquery's own FROM item of the same name hides the outer one)."""
    return {c.table for c in e.find_all(exp.Column) if c.table in aliases and free_in(c, e)}
