"""What every clause of the translation shares: internal column names, the planned (sub)query, and the
translator's state and expression conversion (column references to internal names, aggregates found)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from sqlglot import exp

from squall.driver.catalog.tables import Catalog
from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import INTERNAL
from squall.driver.ir.nodes import DIALECT
from squall.driver.logical.decorrelate.subqueries import SubqueryMixin
from squall.driver.logical.scope import Scope
from squall.errors import BindError, NotSupportedError


class Names:
    """Allocates internal column names, unique in the whole plan."""

    def __init__(self) -> None:
        self._used: set[str] = set()

    def fresh(self, base: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", base).strip("_").lower()[:40] or "c"
        if base[0].isdigit():
            base = "c" + base
        name = base
        for i in itertools.count(2):
            if name not in self._used:
                break
            name = f"{base}_{i}"
        self._used.add(name)
        return name


@dataclass(frozen=True)
class Planned:
    """A planned (sub)query: its node and (visible name, internal name) outputs."""

    node: L.Node
    outputs: tuple[tuple[str, str], ...]


def has_subquery(e: exp.Expression) -> bool:
    return any(isinstance(n, (exp.Subquery, exp.Exists, exp.Select)) for n in e.walk())


class ClauseBase(SubqueryMixin):
    """The translator's state and expression conversion, which every clause uses (the Translator sets the
    state: :class:`squall.driver.logical.translate.Translator`)."""

    catalog: Catalog
    aggregates: set[str]
    names: Names
    notes: list[str]

    def convert(self, e: exp.Expression, scope: Scope) -> exp.Expression:
        """Rewrite column references to internal names."""
        if has_subquery(e):
            raise NotSupportedError(f"subquery in an expression: {e.sql(DIALECT)[:80]}")

        def fix(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column) and node.table == INTERNAL:
                return L.col(node.name)
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                internal = scope.lookup(node.table, node.name)
                if internal is None:
                    raise BindError(f"unknown column {node.sql(DIALECT)}")
                return L.col(internal)
            return node

        return e.transform(fix)

    def _is_agg(self, node: exp.Expression) -> bool:
        if isinstance(node, (exp.Window, exp.Grouping, exp.GroupingId)):
            return False
        if isinstance(node, exp.AggFunc):
            return True
        return isinstance(node, exp.Anonymous) and node.name.lower() in self.aggregates

    def _find_aggs(self, e: exp.Expression) -> list[exp.Expression]:
        found: list[exp.Expression] = []

        def visit(node: exp.Expression, in_window: bool) -> None:
            if isinstance(node, (exp.Subquery, exp.Exists, exp.Select)):
                return  # a subquery's aggregates are its own
            if isinstance(node, exp.Window):
                # the window's function itself is not a grouping aggregate, its arguments may hold some
                for child in node.this.iter_expressions() if node.this else []:
                    visit(child, True)
                for key in ("partition_by", "order"):
                    val = node.args.get(key)
                    for child in val if isinstance(val, list) else ([val] if val else []):
                        visit(child, True)
                return
            if isinstance(node, exp.Filter) and self._is_agg(node.this):
                # FILTER of an aggregate that does not skip NULLs (filter_to_case did the rest)
                found.append(node)
                return
            if self._is_agg(node):
                found.append(node)
                return
            for child in node.iter_expressions():
                visit(child, in_window)

        visit(e, False)
        return found
