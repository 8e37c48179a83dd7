"""Table names users write that are not plain catalog names: ``catalog.namespace.table`` (a named Iceberg
catalog, :mod:`squall.driver.catalog.catalogs`) and metadata tables ``"t$snapshots"`` (Trino/Athena).

:func:`resolve_names` rewrites each such reference to the internal name the connection's catalog registers it
under (on first use), keeping what the query calls it as the alias: ``FROM lake.ns.orders`` reads as
``FROM lake__ns__orders AS orders``. Runs before the safety checks (which refuse any other qualified name)
and the binding, so everything after sees plain table names.
"""

from __future__ import annotations

from sqlglot import exp

from squall.driver.catalog.catalogs import resolve
from squall.driver.catalog.tables import Catalog
from squall.driver.frontend.parse import DIALECT, parse
from squall.errors import BindError, DataError, SqlSyntaxError


def _parts(table: exp.Table) -> tuple[str, ...]:
    return tuple(
        p.name for p in (table.args.get("catalog"), table.args.get("db"), table.this) if p is not None
    )


def resolve_names(ast: exp.Expression, catalog: Catalog) -> tuple[exp.Expression, bool]:
    """(the query with catalog tables and metadata tables under their internal names, whether it changed);
    BindError naming an unknown catalog, namespace, table or metadata table."""
    ctes = {cte.alias_or_name.lower() for cte in ast.find_all(exp.CTE)}
    changed = False
    for table in list(ast.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier):
            continue
        parts = _parts(table)
        if len(parts) == 1 and (parts[0].lower() in ctes or "$" not in parts[0] or parts[0] in catalog):
            continue
        if len(parts) == 2:
            if catalog.catalogs is None:
                continue  # refused by the safety checks
            raise BindError(
                f"a catalog's table is named catalog.namespace.table, not {'.'.join(parts)} "
                f"(catalogs: {', '.join(catalog.catalogs.names())})"
            )
        last, _, metadata = parts[-1].partition("$")
        try:
            name = resolve(catalog, (*parts[:-1], last), metadata or None)
        except DataError as err:
            raise BindError(str(err)) from None
        alias = table.alias_or_name if table.alias else parts[-1]
        table.set("catalog", None)
        table.set("db", None)
        table.set("this", exp.to_identifier(name, quoted=True))
        table.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
        changed = True
    return ast, changed


def resolve_catalog_names(sql: str, catalog: Catalog) -> str:
    """``sql`` with named catalogs' tables and metadata tables under their internal names (as
    :func:`resolve_names`); ``sql`` itself when it names none or does not parse (binding says why)."""
    if "$" not in sql and (catalog.catalogs is None or "." not in sql):  # nothing to resolve: no parse
        return sql
    try:
        ast = parse(sql)
    except SqlSyntaxError:
        return sql
    ast, renamed = resolve_names(ast, catalog)
    return ast.sql(DIALECT) if renamed else sql
