"""Safety rules: only a plain read-only query over named tables passes.

Table references must name catalog tables or CTEs; table functions, file paths, DDL/DML, COPY, ATTACH,
INSTALL/LOAD, SET/PRAGMA/CALL and functions that reveal settings or the environment are rejected here, before
anything runs.
"""

from __future__ import annotations

import re

from sqlglot import exp

from squall.driver.frontend.parse import DIALECT
from squall.errors import UnsafeQueryError

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


def where(node: exp.Expr) -> str:
    """``node``'s SQL as an error message quotes it: at most 60 characters."""
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
            raise UnsafeQueryError(f"statement not allowed: {where(node)}")
        if isinstance(node, (exp.Into, exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop)):
            raise UnsafeQueryError(f"only read-only queries are allowed: {where(node)}")
        if isinstance(node, (exp.Copy, exp.Set, exp.Pragma, exp.Attach, exp.Detach, exp.Use)):
            raise UnsafeQueryError(f"statement not allowed: {where(node)}")
        if isinstance(node, exp.Table):
            if not isinstance(node.this, exp.Identifier) and not _pure_table_function(node):
                raise UnsafeQueryError(f"table functions and file paths are not allowed: {where(node)}")
            if node.args.get("db") or node.args.get("catalog"):
                raise UnsafeQueryError(f"qualified table names are not allowed: {where(node)}")
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
                raise UnsafeQueryError(f"table functions are not allowed: {where(node)}")
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
