"""Binding: DuckDB itself (sandboxed) binds the query on empty tables with the catalog's schemas.

It yields the result's column names and types exactly as DuckDB would, and DuckDB's own message for unknown
columns or type errors. :meth:`Binder.bind` parses (:mod:`.parse`) and checks (:mod:`.safety`) first.
"""

from __future__ import annotations

import difflib
import functools
import threading
from collections.abc import Collection
from dataclasses import dataclass

import duckdb
import pyarrow as pa
from sqlglot import exp

from squall.driver.catalog.tables import Catalog
from squall.driver.frontend import value_lists
from squall.driver.frontend.boundary import too_deep_for_duckdb
from squall.driver.frontend.names import resolve_names
from squall.driver.frontend.parse import DIALECT, parse
from squall.driver.frontend.safety import check_safe, referenced_tables
from squall.driver.frontend.time_travel import pin_versions
from squall.driver.frontend.unsupported import refuse_unsupported
from squall.errors import BindError, QueryRuntimeError, SqlSyntaxError, UnsafeQueryError
from squall.operators.duck import Sandbox, raise_if_interrupted


@dataclass(frozen=True)
class BoundQuery:
    """A validated query: its AST, the tables it reads and its result schema."""

    sql: str
    ast: exp.Expression
    tables: tuple[str, ...]
    names: tuple[str, ...]
    types: tuple[str, ...]


def _one_line(message: str) -> str:
    lines = [ln.strip() for ln in str(message).splitlines() if ln.strip()]
    head = lines[0] if lines else "error"
    extra = [ln for ln in lines[1:] if ln.lower().startswith(("candidate", "did you mean"))]
    location = next((ln for ln in lines[1:] if ln.startswith("LINE ")), None)
    out = head
    if extra:
        out += " " + " ".join(extra)
    if location:
        out += f" ({location.split(':')[0].lower()})"
    return out


@functools.cache
def aggregate_function_names() -> frozenset[str]:
    """Every aggregate function DuckDB knows (the translator recognises those sqlglot does not)."""
    con = duckdb.connect(":memory:")
    try:
        rows = con.sql(
            "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type = 'aggregate'"
        )
        return frozenset(r[0].lower() for r in rows.fetchall())
    finally:
        con.close()


class Binder:
    """Binds queries with a sandboxed DuckDB over empty tables of the catalog's schemas."""

    def __init__(self, catalog: Catalog, db: Sandbox | None = None) -> None:
        self.catalog = catalog
        self.db = db
        self._lock = threading.Lock()

    def bind(self, sql: str) -> BoundQuery:
        """Bind ``sql``: named catalogs' tables resolved (:mod:`.names`: ``lake.ns.t``, ``"t$snapshots"``), time
        travel pinned to the catalog's names of tables at versions (:mod:`.time_travel`; the bound text is the
        pinned one), parsed, checked, bound by DuckDB."""
        ast, renamed = resolve_names(parse(sql), self.catalog)
        if renamed:
            sql = ast.sql(DIALECT)
        pinned = pin_versions(sql, self.catalog)
        if pinned != sql:
            sql, ast = pinned, parse(pinned)
        check_safe(ast)
        refuse_unsupported(ast)
        tables = referenced_tables(ast)
        known = self.catalog.names()
        for name in tables:
            if name not in self.catalog:
                close = difflib.get_close_matches(name.lower(), [k.lower() for k in known], n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                available = "" if close else f" (tables: {', '.join(known) or 'none registered'})"
                raise BindError(f"unknown table {name}{hint}{available}")
        own = self.db is None
        db = Sandbox(threads=1) if own else self.db
        assert db is not None
        with self._lock:
            try:
                rel = _bind_typed(db, sql, {name: self.catalog.table(name).schema for name in tables})
                if rel is None:
                    rel = self._bind_registered(db, sql, tables)
                names, types = tuple(rel.columns), tuple(str(t) for t in rel.types)
            finally:
                if own:
                    db.close()
        return BoundQuery(sql, ast, tuple(tables), names, types)

    def _bind_registered(self, db: Sandbox, sql: str, tables: Collection[str]) -> duckdb.DuckDBPyRelation:
        """``sql`` as the user wrote it bound over empty tables registered under its tables' names: the path
        whose errors (syntax, binder, permission) are reported to the user."""
        try:
            for name in tables:
                db.register(name, self.catalog.table(name).schema.empty_table())
            rel = value_lists.typed_relation(db.relation, sql)
            if rel is None:
                raise UnsafeQueryError("only SELECT queries are allowed")
            return rel
        except duckdb.ParserException as err:
            if "max expression depth" in str(err).lower():
                raise too_deep_for_duckdb() from None
            raise SqlSyntaxError(_one_line(str(err)).removeprefix("Parser Error: ")) from None
        except (duckdb.BinderException, duckdb.CatalogException) as err:
            raise BindError(_one_line(str(err))) from None
        except duckdb.PermissionException as err:
            raise UnsafeQueryError(_one_line(str(err))) from None
        except duckdb.Error as err:
            raise_if_interrupted(err)
            raise QueryRuntimeError(_one_line(str(err))) from None
        finally:
            for name in tables:
                db.unregister(name)


def _bind_typed(db: Sandbox, sql: str, schemas: dict[str, pa.Schema]) -> duckdb.DuckDBPyRelation | None:
    """``sql`` bound behind empty CTEs named like its tables (:meth:`Sandbox.typed_inputs`: over empty tables of
    their columns kept in the sandbox's instance; nothing registered); None when that text cannot be made or does
    not bind as a SELECT (the caller binds the user's own text and reports its error)."""
    typed = db.typed_inputs(
        {name: tuple(zip(s.names, db.arrow_types(s))) for name, s in schemas.items()}, sql
    )
    if typed is None:
        return None
    try:
        return value_lists.typed_relation(db.relation, typed)
    except duckdb.Error as err:
        raise_if_interrupted(err)
        return None
