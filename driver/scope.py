"""Name scopes and predicate splitting, shared by the translator and subquery decorrelation."""

from __future__ import annotations

from dataclasses import dataclass, field

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
