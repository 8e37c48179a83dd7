"""FROM items: tables, CTEs and derived tables, VALUES, each a source with its estimated rows and width;
a source's own conjuncts filter it (pushed into a table's scan), with their estimated selectivity."""

from __future__ import annotations

from sqlglot import exp

from squall.driver.estimate.join_order import Source
from squall.driver.estimate.rows import estimate_rows
from squall.driver.estimate.selectivity import conjunction_selectivity
from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import conjunction
from squall.driver.logical.clauses.base import ClauseBase, Planned
from squall.driver.logical.scope import Scope
from squall.errors import NotSupportedError


class FromClause(ClauseBase):
    """FROM items as sources (see module doc)."""

    def _source(self, item: exp.Expression, ctes: dict[str, exp.Expression], scope: Scope) -> Source:
        alias = item.alias_or_name
        if isinstance(item, exp.Table) and not isinstance(item.this, exp.Identifier):
            raise NotSupportedError(f"table function in FROM: {item.this.sql('duckdb')}")
        if isinstance(item, exp.Table):
            name = item.name
            if name in ctes:
                planned = self.query(ctes[name], {k: v for k, v in ctes.items() if k != name})
                return self._derived(alias, planned, scope)
            info = self.catalog.table(name)
            columns = []
            for f in info.schema:
                internal = self.names.fresh(f.name)
                columns.append((f.name, internal))
                scope.add(alias, f.name.lower(), internal)
            width = info.row_width([f.name for f in info.schema])
            scan = L.Scan(info.name, tuple(columns), (), float(info.num_rows), width)
            return Source(alias, scan, float(info.num_rows), width)
        if isinstance(item, exp.Subquery):
            return self._derived(alias, self.query(item.this, ctes), scope)
        if isinstance(item, exp.Values):
            return self._values(item, alias, scope)
        raise NotSupportedError(f"{item.key.upper()} in FROM")

    def _derived(self, alias: str, planned: Planned, scope: Scope) -> Source:
        exprs = []
        for visible, internal in planned.outputs:
            fresh = self.names.fresh(visible)
            exprs.append((fresh, L.col(internal)))
            scope.add(alias, visible, fresh)
        node = L.Project(planned.node, tuple(exprs))
        rows = estimate_rows(planned.node)
        return Source(alias, node, rows, 8.0 * len(exprs))

    def _values(self, item: exp.Values, alias: str, scope: Scope) -> Source:
        column_names = [c.name for c in item.args["alias"].columns] if item.args.get("alias") else []
        rows = tuple(tuple(self.convert(v, Scope()) for v in row.expressions) for row in item.expressions)
        width = len(rows[0]) if rows else 0
        column_names += [f"col{i}" for i in range(len(column_names), width)]
        out = tuple(self.names.fresh(n) for n in column_names)
        for name, internal in zip(column_names, out):
            scope.add(alias, name, internal)
        return Source(alias, L.Values(rows, out), float(len(rows)), 8.0 * width)

    def _filtered(self, src: Source, preds: list[exp.Expression], scope: Scope) -> Source:
        if not preds:
            return src
        converted = [self.convert(p, scope) for p in preds]
        node = src.node
        if isinstance(node, L.Scan):
            info = self.catalog.table(node.table)
            source_of = {internal: s for s, internal in node.columns}

            def rng(name: str):
                return info.column_range(source_of[name]) if name in source_of else None

            def ndv(name: str) -> float | None:
                return float(self.catalog.ndv(node.table, source_of[name])) if name in source_of else None

            sel = conjunction_selectivity(converted, rng, ndv)
            scan = L.Scan(
                node.table, node.columns, node.filters + tuple(converted), node.est_rows * sel, node.row_width
            )
            return Source(src.alias, scan, src.rows * sel, src.width)
        sel = conjunction_selectivity(converted, lambda _n: None)
        return Source(src.alias, L.Filter(node, conjunction(converted)), src.rows * sel, src.width)
