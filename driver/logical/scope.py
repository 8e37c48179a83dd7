"""Name scopes: the columns one SELECT sees, shared by the translator and subquery decorrelation (the
expression helpers they share are in :mod:`squall.driver.ir.exprs`)."""

from __future__ import annotations

from dataclasses import dataclass, field


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
