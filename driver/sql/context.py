"""What the SQL rules share (:class:`SqlContext`) and what they must keep (:func:`result_width`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from squall.driver.catalog.tables import Catalog


@dataclass
class SqlContext:
    """The catalog the query reads, and the notes rules say (plan notes, e.g. an implicit LATERAL)."""

    catalog: Catalog
    notes: list[str] = field(default_factory=list)
    _columns: dict[str, list[str]] | None = None

    def table_columns(self, ast: exp.Expression) -> dict[str, list[str]]:
        """Each catalog table the query reads → its column names in the table's order (lower case; a star
        expands in this order). Computed on first use: no rule adds or renames a table."""
        if self._columns is None:
            self._columns = {
                table: [f.name.lower() for f in self.catalog.table(table).schema]
                for table in {t.name for t in ast.find_all(exp.Table)}
                if table in self.catalog
            }
        return self._columns


def result_width(ast: exp.Expression) -> int | None:
    """How many result columns the query has, or None while a ``*`` (or a form that expands like one) stands
    in its select list (stars expand in :mod:`.qualify`)."""
    query = ast.this if isinstance(ast, exp.Subquery) else ast
    while isinstance(query, exp.SetOperation):
        query = query.this
    if not isinstance(query, exp.Select):
        return None
    for item in query.expressions:
        if item.find(exp.Star, exp.Columns, exp.Unnest) is not None:
            return None
    return len(query.expressions)
