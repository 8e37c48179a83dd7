"""From a qualified sqlglot AST to Squall's logical plan.

The SQL rules (:mod:`squall.driver.sql`: qualification, star expansion, constant folding,
normalisation) leave a qualified AST; the translator turns each SELECT scope into relational nodes:
sources → join tree (conjuncts placed at the lowest node that sees their
columns, inner joins ordered greedily by estimated size) → aggregate → window
→ projection → DISTINCT → ORDER BY → LIMIT, one module per clause in
:mod:`squall.driver.logical.clauses`. This module holds the entry (queries, CTEs,
set operations, the one-rank fallback of a part).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from squall.driver.catalog.tables import Catalog
from squall.driver.frontend.bind import BoundQuery
from squall.driver.ir import nodes as L
from squall.driver.logical.clauses.base import Names, Planned
from squall.driver.logical.clauses.select import SelectClause
from squall.driver.logical.fallback import one_rank
from squall.driver.logical.scope import Scope
from squall.errors import BindError, NotSupportedError, UserError

DIALECT = "duckdb"

__all__ = ["Names", "Planned", "Translator"]


class Translator(SelectClause):
    """Turns one bound query into a logical plan (see module doc)."""

    def __init__(
        self,
        catalog: Catalog,
        aggregate_functions: set[str],
        bind: Callable[[str], BoundQuery] | None = None,
    ) -> None:
        self.catalog = catalog
        self.aggregates = aggregate_functions
        self.names = Names()
        #: binds a part on its own (the one-rank fallback checks it is self-contained)
        self.bind = bind
        self._depth = 0
        #: the queries being translated, innermost last (left as they were when a bug is raised)
        self._working: list[exp.Expression] = []
        #: decorrelation decisions, for the plan's notes (explain, Result.stats["notes"])
        self.notes: list[str] = []

    # --- entry -----------------------------------------------------------------------------

    def translate(self, ast: exp.Expression) -> Planned:
        """The logical plan of a query as the SQL rules leave it (:func:`squall.driver.sql.rewrite`)."""
        return self.query(ast, {})

    # --- queries ----------------------------------------------------------------------------

    def query(self, e: exp.Expression, ctes: dict[str, exp.Expression]) -> Planned:
        if isinstance(e, exp.Subquery):
            return self.query(e.this, ctes)
        self._depth += 1
        self._working.append(e)
        noted = len(self.notes)
        try:
            planned = self._query(e, ctes)
            self._working.pop()
            return planned
        except NotSupportedError as err:
            self._working.pop()
            del self.notes[noted:]  # what this part decided is gone with it
            if self._depth == 1:
                raise  # the whole query: compile_sql runs the user's own text on one rank
            fallback = self._one_rank(e, ctes, str(err).removeprefix("not supported: "))
            if fallback is None:
                raise
            return fallback
        finally:
            self._depth -= 1

    def position(self) -> str | None:
        """The position ("at line L, column C") of the innermost (sub)query being translated, when its text has one."""
        for e in reversed(self._working):
            for ident in e.find_all(exp.Identifier):
                if "line" in ident.meta and "col" in ident.meta:
                    return f"at line {ident.meta['line']}, column {ident.meta['col']}"
        return None

    def _one_rank(self, e: exp.Expression, ctes: dict[str, exp.Expression], reason: str) -> Planned | None:
        """``e`` as a one-rank part, if it is self-contained (DuckDB binds it on its own)."""
        if self.bind is None:
            return None
        needed: dict[str, exp.Expression] = {}
        todo = [e]
        while todo:
            for t in todo.pop().find_all(exp.Table):
                if t.name in ctes and t.name not in needed:
                    needed[t.name] = ctes[t.name]
                    todo.append(ctes[t.name])
        text = e.sql(DIALECT)
        if needed:
            defs = ", ".join(
                f"{name} AS ({body.sql(DIALECT)})" for name, body in ctes.items() if name in needed
            )
            text = f"WITH {defs} SELECT * FROM ({text}) AS q"
        try:
            bound = self.bind(text)
        except UserError:
            return None
        visible = None
        if isinstance(e, exp.Select) and not any(isinstance(p, exp.Star) for p in e.expressions):
            visible = tuple(p.alias_or_name for p in e.expressions)
        node, outputs = one_rank(self.catalog, bound, self.names.fresh, reason, visible)
        return Planned(node, outputs)

    def _query(self, e: exp.Expression, ctes: dict[str, exp.Expression]) -> Planned:
        if isinstance(e, exp.Select):
            return self.select(e, ctes)
        if isinstance(e, (exp.Union, exp.Intersect, exp.Except)):
            return self.setop(e, ctes)
        raise NotSupportedError(f"{e.key.upper()} as a query")

    def setop(self, e: exp.Expression, ctes: dict[str, exp.Expression]) -> Planned:
        ctes = self._with(e, ctes)
        kinds: dict[type[exp.Expression], str] = {
            exp.Union: "union",
            exp.Intersect: "intersect",
            exp.Except: "except",
        }
        kind = kinds[type(e)]
        left = self.query(e.this, ctes)
        right = self.query(e.expression, ctes)
        if len(left.outputs) != len(right.outputs):
            raise BindError(
                f"{kind.upper()} inputs have {len(left.outputs)} and {len(right.outputs)} columns"
            )
        out = tuple(self.names.fresh(v) for v, _ in left.outputs)
        inputs = tuple(
            L.Project(p.node, tuple((n, L.col(i)) for n, (_v, i) in zip(out, p.outputs)))
            for p in (left, right)
        )
        distinct = bool(e.args.get("distinct"))
        node: L.Node = L.SetOp(kind, not distinct, inputs, out)
        outputs = tuple((v, n) for (v, _), n in zip(left.outputs, out))
        return self._order_limit(e, node, outputs, Scope(), lambda x: x)
