"""SQL frontend: parse, reject anything unsafe, bind against the catalog.

Only one read-only SELECT/WITH statement is accepted. Table references must
name catalog tables or CTEs; table functions, file paths, DDL/DML, COPY,
ATTACH, INSTALL/LOAD, SET/PRAGMA/CALL and functions that reveal settings or
the environment are rejected here, before anything runs. Binding uses DuckDB
itself (sandboxed) on empty tables with the catalog's schemas: it yields the
result's column names and types exactly as DuckDB would, and DuckDB's own
message for unknown columns or type errors.
"""

from __future__ import annotations

import difflib
import logging
import re
import threading
from dataclasses import dataclass
from typing import cast

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from squall.driver.catalog.tables import Catalog
from squall.errors import BindError, QueryRuntimeError, SqlSyntaxError, UnsafeQueryError
from squall.operators.duck import Sandbox, raise_if_interrupted

DIALECT = "duckdb"


class _NoFallbackWarning(logging.Filter):
    """Drops sqlglot's "contains unsupported syntax. Falling back to parsing as a 'Command'" warning:
    such statements are refused with one line of our own (EXPLAIN, SHOW, …)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


logging.getLogger("sqlglot").addFilter(_NoFallbackWarning())

# Functions user SQL may never call: they read files, settings, the environment
# or the database's own state, or run SQL text.
_FORBIDDEN_FUNCTION = re.compile(
    r"^(read_\w+|duckdb_\w+|pragma_\w+|parquet_\w+|iceberg_\w+|delta_\w+|sniff_csv|glob|getenv|"
    r"current_setting|getvariable|set_variable|query|query_table|which_secret|load_extension|"
    r"sql_auto_complete|test_all_types|test_vector_types|range|generate_series|unnest|"
    r"current_database|current_schema|current_schemas|current_catalog|current_user|user|"
    r"session_user|version|platform|checkpoint|force_checkpoint|summary|"
    r"enable_\w+|disable_\w+|json_execute_serialized_sql|json_serialize_sql|json_deserialize_sql|"
    r"json_serialize_plan|read_blob|read_text|write_\w+|copy_\w+|system|shell|sqlite_\w+|"
    r"postgres_\w+|mysql_\w+|from_substrait\w*|get_substrait\w*|arrow_scan\w*|seq_scan|"
    r"nextval|currval|current_version|current_user|current_role|current_catalog)$",
    re.IGNORECASE,
)

# Functions allowed in expressions even though a table-function namesake exists.
_SCALAR_OK = {"range", "generate_series", "unnest"}
# Table functions allowed in FROM: they make rows from their arguments alone (no file, network,
# setting or database state), so they are as safe as a VALUES list.
_TABLE_OK = {"range", "generate_series", "unnest"}


def _pure_table_function(node: exp.Expression) -> bool:
    func = node.this if isinstance(node, exp.Table) else node
    if isinstance(func, exp.Unnest):
        return True
    if not isinstance(func, exp.Func):
        return False
    name = func.name if isinstance(func, exp.Anonymous) else func.sql_name()
    return name.lower() in _TABLE_OK


# DuckDB's PIVOT / UNPIVOT statements (``PIVOT t ON …``) are read-only queries too
_STATEMENT_KINDS = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Pivot)


@dataclass(frozen=True)
class BoundQuery:
    """A validated query: its AST, the tables it reads and its result schema."""

    sql: str
    ast: exp.Expression
    tables: tuple[str, ...]
    names: tuple[str, ...]
    types: tuple[str, ...]


def _pivot_with_modifiers(sql: str) -> str | None:
    """``PIVOT … ORDER BY … LIMIT …`` (DuckDB takes modifiers after a PIVOT/UNPIVOT statement; sqlglot
    does not) as ``SELECT * FROM (PIVOT …) ORDER BY … LIMIT …``, which DuckDB answers the same; None
    for any other text."""
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    except TokenError:
        return None
    depth, pivot = 0, False
    for tok in tokens:
        if tok.token_type == TokenType.L_PAREN:
            depth += 1
        elif tok.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and tok.token_type in (TokenType.PIVOT, TokenType.UNPIVOT):
            pivot = True
        elif (
            depth == 0 and pivot and tok.token_type in (TokenType.ORDER_BY, TokenType.LIMIT, TokenType.OFFSET)
        ):
            return f"SELECT * FROM ({sql[: tok.start].rstrip()}) {sql[tok.start :]}"
    return None


def parse(sql: str) -> exp.Expression:
    """Parse exactly one statement; syntax errors carry line and column."""
    if not sql or not sql.strip():
        raise SqlSyntaxError("empty query")
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except ParseError as err:
        wrapped = _pivot_with_modifiers(sql)
        if wrapped is not None:
            try:
                return parse(wrapped)
            except SqlSyntaxError:
                pass  # the error of the text as written
        first = err.errors[0] if err.errors else {}
        desc = str(first.get("description") or err).splitlines()[0]
        line, col = first.get("line"), first.get("col")
        token = str(first.get("highlight") or "")
        if col is not None and token and col >= len(token):
            col = col - len(token) + 1  # sqlglot gives the token's last column; DuckDB points at its first
            desc += f" at or near {token!r}"
        raise SqlSyntaxError(desc, line, col) from None
    except TokenError as err:
        raise SqlSyntaxError(str(err).splitlines()[0]) from None
    if len(statements) != 1:
        raise UnsafeQueryError(f"expected one statement, got {len(statements)}: send one SELECT at a time")
    return cast(exp.Expression, statements[0])


def _where(node: exp.Expr) -> str:
    text = node.sql(DIALECT)
    return text if len(text) <= 60 else text[:57] + "..."


_TABLES_HINT = ": `squall tables --data DIR` lists the tables and their columns (con.tables() in Python)"
#: what to use instead of statements users try first
_HINTS = {
    "EXPLAIN": ": `squall explain SQL` prints the distributed plan (con.explain(sql) in Python)",
    "DESCRIBE": _TABLES_HINT,
    "DESC": _TABLES_HINT,
    "SHOW": _TABLES_HINT,
    "SUMMARIZE": _TABLES_HINT,
}


def check_safe(ast: exp.Expression) -> None:
    """Reject everything that is not a plain read-only query over named tables."""
    if isinstance(ast, exp.Command) or not isinstance(ast, _STATEMENT_KINDS):
        kind = ast.key.upper() if not isinstance(ast, exp.Command) else str(ast.this).upper()
        raise UnsafeQueryError(f"only SELECT queries are allowed, not {kind}{_HINTS.get(kind, '')}")
    for node in ast.walk():
        if isinstance(node, exp.Command):
            raise UnsafeQueryError(f"statement not allowed: {_where(node)}")
        if isinstance(node, (exp.Into, exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop)):
            raise UnsafeQueryError(f"only read-only queries are allowed: {_where(node)}")
        if isinstance(node, (exp.Copy, exp.Set, exp.Pragma, exp.Attach, exp.Detach, exp.Use)):
            raise UnsafeQueryError(f"statement not allowed: {_where(node)}")
        if isinstance(node, exp.Table):
            if not isinstance(node.this, exp.Identifier) and not _pure_table_function(node):
                raise UnsafeQueryError(f"table functions and file paths are not allowed: {_where(node)}")
            if node.args.get("db") or node.args.get("catalog"):
                raise UnsafeQueryError(f"qualified table names are not allowed: {_where(node)}")
            if "/" in node.name or "." in node.name or "\\" in node.name:
                raise UnsafeQueryError(f"file paths are not allowed as tables: {node.name!r}")
        if isinstance(node, exp.Func):
            name = node.sql_name() if not isinstance(node, exp.Anonymous) else node.name
            if isinstance(node, (exp.CurrentUser, exp.CurrentSchema)):
                raise UnsafeQueryError(f"function not allowed: {name}")
            lower = name.lower()
            in_from = isinstance(node.parent, exp.Table) or (
                isinstance(node.parent, (exp.From, exp.Join, exp.Lateral)) and node.arg_key == "this"
            )
            if in_from and lower in _TABLE_OK:
                continue
            if _FORBIDDEN_FUNCTION.match(lower) and (in_from or lower not in _SCALAR_OK):
                raise UnsafeQueryError(f"function not allowed: {name}")
            if in_from:
                raise UnsafeQueryError(f"table functions are not allowed: {_where(node)}")
        if isinstance(node, (exp.Parameter, exp.Placeholder)):
            raise UnsafeQueryError("unbound parameters are not allowed; bind values before sending")


def referenced_tables(ast: exp.Expression) -> list[str]:
    """Names of catalog tables the query reads (CTE names excluded)."""
    ctes = {cte.alias_or_name.lower() for cte in ast.find_all(exp.CTE)}
    names: dict[str, None] = {}
    for table in ast.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):  # range(…)/generate_series(…) in FROM
            continue
        if table.name.lower() not in ctes:
            names[table.name] = None
    return list(names)


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


class Binder:
    """Binds queries with a sandboxed DuckDB over empty tables of the catalog's schemas."""

    def __init__(self, catalog: Catalog, db: Sandbox | None = None) -> None:
        self.catalog = catalog
        self.db = db
        self._lock = threading.Lock()

    def bind(self, sql: str) -> BoundQuery:
        ast = parse(sql)
        check_safe(ast)
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
                for name in tables:
                    db.register(name, self.catalog.table(name).schema.empty_table())
                rel = db.relation(sql)
                if rel is None:
                    raise UnsafeQueryError("only SELECT queries are allowed")
                names = tuple(rel.columns)
                types = tuple(str(t) for t in rel.types)
            except duckdb.ParserException as err:
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
                if own:
                    db.close()
        return BoundQuery(sql, ast, tuple(tables), names, types)
