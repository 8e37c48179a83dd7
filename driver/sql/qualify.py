"""Every column qualified with its source and every ``*`` expanded, by sqlglot's ``qualify`` over the catalog.

::

    >>> import sqlglot
    >>> class Tables:  # what the rule reads of its SqlContext: each table's columns, in order
    ...     def table_columns(self, ast):
    ...         return {"nation": ["n_nationkey", "n_name"]}
    >>> apply(sqlglot.parse_one("SELECT * FROM nation", read="duckdb"), Tables()).sql("duckdb")
    'SELECT nation.n_nationkey AS n_nationkey, nation.n_name AS n_name FROM nation AS nation'

Columns are typed VARCHAR here: only their names matter (DuckDB bound the query already). A reference sqlglot
cannot resolve is a :class:`~squall.errors.BindError`.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.qualify import qualify

from squall.driver.sql.context import SqlContext
from squall.errors import BindError

NAME = "qualify"
REQUIRED = True  # the translator reads qualified columns only
DIALECT = "duckdb"


def apply(ast: exp.Expression, context: SqlContext) -> exp.Expression:
    columns = context.table_columns(ast)
    schema: dict[str, object] = {t: dict.fromkeys(cols, "VARCHAR") for t, cols in columns.items()}
    try:
        return qualify(
            ast, schema=schema, dialect=DIALECT, quote_identifiers=False, validate_qualify_columns=True
        )
    except Exception as err:  # sqlglot raises OptimizeError and friends
        raise BindError(str(err).splitlines()[0]) from None
