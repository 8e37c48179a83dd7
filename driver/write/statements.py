"""The write statements Squall accepts, parsed: COPY, UNLOAD, CREATE TABLE AS, INSERT INTO, DROP TABLE.

:func:`parse_write` answers None for anything else (a query goes on to the read-only checks as before).
What a statement says is kept as written: the query as SQL text, the target as a path or a table name,
options by name. Whether the target may be written, and what the options mean, is decided later
(:mod:`~squall.driver.write.locations`, :mod:`~squall.driver.write.options`).

Spellings:

- ``COPY (query) TO 'target' (FORMAT parquet, PARTITION_BY (a, b), COMPRESSION zstd, …)``, or
  ``COPY table TO …``, as DuckDB spells it;
- ``UNLOAD (query) TO 's3://…' WITH (format = 'PARQUET', partitioned_by = ARRAY['a'], compression = …)``
  as Athena spells it (the same as a COPY);
- ``CREATE [OR REPLACE] TABLE [IF NOT EXISTS] name [PARTITIONED BY (…)] [WITH (…)] AS query``: partitions
  ``PARTITIONED BY (a, month(d))`` or Athena's ``WITH (partitioning = ARRAY['month(d)', …])`` /
  ``partitioned_by = ARRAY['a']``; ``format``, ``location``/``external_location`` for a folder table;
- ``INSERT INTO name [(columns)] query`` (also ``BY NAME``, ``VALUES``);
- ``DROP TABLE [IF EXISTS] name``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from squall.errors import NotSupportedError, OptionError, SqlSyntaxError, UnsafeQueryError

DIALECT = "duckdb"

#: the first word of a statement this module handles
_WRITE_WORDS = re.compile(
    r"^\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*(copy|unload|create|insert|drop)\b", re.I | re.S
)


@dataclass(frozen=True)
class WriteStatement:
    """One parsed write statement (see module doc).

    ``kind``: ``copy`` (COPY and UNLOAD), ``create`` (CTAS), ``insert`` or ``drop``. ``query``: the SQL of
    the rows to write ("" for DROP). ``target``: the path of a COPY, else the table name as written
    (``t`` or ``lake.ns.t``). ``options``: name (upper case) → value (str, bool, int, or a tuple of
    names for PARTITION_BY). ``partitioning``: a new table's partition fields as Iceberg transform text
    (``d``, ``month(d)``, ``bucket(4, k)``). ``columns``: an INSERT's column list.
    """

    kind: str
    query: str = ""
    target: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    partitioning: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    by_name: bool = False
    if_exists: bool = False  # DROP TABLE IF EXISTS, CREATE TABLE IF NOT EXISTS
    replace: bool = False  # CREATE OR REPLACE

    @property
    def table_parts(self) -> tuple[str, ...]:
        return tuple(self.target.split("."))


def is_write(sql: str) -> bool:
    """Whether ``sql`` starts like a write statement (cheap; :func:`parse_write` decides)."""
    return _WRITE_WORDS.match(sql) is not None


def parse_write(sql: str) -> WriteStatement | None:
    """The write statement ``sql`` is, or None when it is not one of them (see module doc)."""
    match = _WRITE_WORDS.match(sql)
    if match is None:
        return None
    if match.group(1).lower() == "unload":
        return _unload(sql)
    try:
        statements = [s for s in sqlglot.parse(sql, dialect=DIALECT) if s is not None]
    except (ParseError, TokenError):
        return None  # the read path reports the syntax error with its position
    if len(statements) != 1:
        return None
    ast = statements[0]
    if isinstance(ast, exp.Copy):
        return _copy(ast)
    if isinstance(ast, exp.Create) and str(ast.args.get("kind") or "").upper() == "TABLE":
        return _create(ast)
    if isinstance(ast, exp.Insert):
        return _insert(ast)
    if isinstance(ast, exp.Drop) and str(ast.args.get("kind") or "").upper() == "TABLE":
        return _drop(ast)
    return None


def _copy(ast: exp.Copy) -> WriteStatement:
    if ast.args.get("kind"):  # COPY t FROM 'file': a read of a file, never allowed
        raise UnsafeQueryError("COPY … FROM reads files: register the files as a table instead")
    files = ast.args.get("files") or []
    if len(files) != 1 or not isinstance(files[0], exp.Literal) or not files[0].is_string:
        raise SqlSyntaxError(
            "COPY … TO needs one target in quotes, e.g. COPY (SELECT …) TO 'out/' (FORMAT parquet)"
        )
    source = ast.this
    if isinstance(source, exp.Subquery):
        query = source.this.sql(DIALECT)
    elif isinstance(source, exp.Table):
        query = f"SELECT * FROM {source.sql(DIALECT)}"
    else:
        raise SqlSyntaxError("COPY needs a table or a (query) before TO")
    options = {}
    for param in ast.args.get("params") or []:
        name = param.this.name.upper()
        if name in options:
            raise OptionError(f"COPY option {name} is given twice")
        options[name] = _value(name, param.args.get("expression"))
    return WriteStatement("copy", query, files[0].this, options)


def _value(name: str, node: exp.Expression | None) -> Any:
    """A COPY option's value: True for a bare flag, names for PARTITION_BY, else str/int/bool."""
    if node is None:
        return True
    if name in ("PARTITION_BY", "PARTITIONED_BY"):
        node = node.this if isinstance(node, exp.Paren) else node
        items = node.expressions if isinstance(node, (exp.Tuple, exp.Array, exp.Schema)) else [node]
        return tuple(_name(i) for i in items)
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else int(node.this) if node.is_int else float(node.this)
    if isinstance(node, (exp.Var, exp.Column, exp.Identifier)):
        return node.name
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        return -int(node.this.this)
    raise OptionError(f"COPY option {name}: cannot read the value {node.sql(DIALECT)!r}")


def _name(node: exp.Expression) -> str:
    if isinstance(node, exp.Literal) and node.is_string:
        return str(node.this)
    if isinstance(node, (exp.Column, exp.Identifier, exp.Var)):
        return node.name
    raise OptionError(f"not a column name: {node.sql(DIALECT)}")


def _table_name(node: exp.Expression) -> str:
    table = node.this if isinstance(node, exp.Schema) else node
    if not isinstance(table, exp.Table):
        raise SqlSyntaxError(f"not a table name: {node.sql(DIALECT) if node is not None else '(none)'}")
    return ".".join(p.name for p in table.parts)


def _create(ast: exp.Create) -> WriteStatement:
    query = ast.expression
    if not isinstance(query, exp.Query):
        raise NotSupportedError(
            "CREATE TABLE without AS: create a table from a query (CREATE TABLE t AS SELECT …)"
        )
    if isinstance(ast.this, exp.Schema):
        raise NotSupportedError("CREATE TABLE t (columns) AS …: name the columns in the query instead")
    options: dict[str, Any] = {}
    partitioning: tuple[str, ...] = ()
    for prop in (ast.args.get("properties") or exp.Properties(expressions=[])).expressions:
        if isinstance(prop, exp.PartitionedByProperty):
            partitioning = _partitioning(prop.this)
        elif isinstance(prop, exp.FileFormatProperty):
            options["FORMAT"] = _name(prop.this) if not isinstance(prop.this, exp.Var) else prop.this.name
        elif isinstance(prop, exp.LocationProperty):
            options["LOCATION"] = _name(prop.this)
        elif isinstance(prop, exp.Property):
            key = prop.name.upper()
            if key in ("PARTITIONING", "PARTITIONED_BY"):
                partitioning = _partitioning(prop.args["value"])
            else:
                options[key] = _value(key, prop.args.get("value"))
        else:
            raise NotSupportedError(f"table property {prop.sql(DIALECT)}")
    return WriteStatement(
        "create", query.sql(DIALECT), _table_name(ast.this), options, partitioning,
        if_exists=bool(ast.args.get("exists")), replace=bool(ast.args.get("replace")),
    )  # fmt: skip


def _partitioning(node: exp.Expression) -> tuple[str, ...]:
    """Partition fields as Iceberg transform text: ``a``, ``month(d)``, ``bucket(4, k)``."""
    node = node.this if isinstance(node, exp.Paren) else node
    items = node.expressions if isinstance(node, (exp.Tuple, exp.Array, exp.Schema)) else [node]
    fields = []
    for item in items:
        if isinstance(item, exp.Literal) and item.is_string:
            fields.append(" ".join(str(item.this).split()))
        elif isinstance(item, (exp.Column, exp.Identifier)):
            fields.append(item.name)
        elif isinstance(item, exp.PartitionedByBucket):
            fields.append(f"bucket({item.expression.sql(DIALECT)}, {_name(item.this)})")
        elif isinstance(item, exp.PartitionByTruncate):
            fields.append(f"truncate({item.expression.sql(DIALECT)}, {_name(item.this)})")
        elif isinstance(item, exp.Func) and len(item.args) >= 1 and isinstance(item.this, exp.Column):
            name = item.sql_name().lower() if not isinstance(item, exp.Anonymous) else item.name.lower()
            fields.append(f"{name}({item.this.name})")
        else:
            raise OptionError(f"cannot partition by {item.sql(DIALECT)}: name a column or a transform")
    return tuple(fields)


def _insert(ast: exp.Insert) -> WriteStatement:
    if ast.args.get("overwrite"):
        raise NotSupportedError("INSERT OVERWRITE: use CREATE OR REPLACE TABLE … AS, or COPY with OVERWRITE")
    for what in ("returning", "conflict", "where"):
        if ast.args.get(what):
            raise NotSupportedError(f"INSERT with {what.upper()}")
    source = ast.expression
    if isinstance(source, exp.Values):
        query = f"SELECT * FROM ({source.sql(DIALECT)})"
    elif isinstance(source, exp.Query):
        query = source.sql(DIALECT)
    else:
        raise SqlSyntaxError("INSERT INTO needs a query or VALUES")
    columns = tuple(c.name for c in ast.this.expressions) if isinstance(ast.this, exp.Schema) else ()
    return WriteStatement(
        "insert", query, _table_name(ast.this), columns=columns, by_name=bool(ast.args.get("by_name"))
    )


def _drop(ast: exp.Drop) -> WriteStatement:
    tables = [t for t in ast.args.get("tables") or [ast.this] if t is not None]
    if len(tables) != 1:
        raise NotSupportedError("DROP TABLE of several tables: drop one at a time")
    return WriteStatement("drop", target=_table_name(tables[0]), if_exists=bool(ast.args.get("exists")))


# --- Athena's UNLOAD ---------------------------------------------------------------------------------

_UNLOAD_TAIL = re.compile(r"\)\s*TO\s*'((?:[^']|'')*)'\s*(?:WITH\s*\((.*)\))?\s*;?\s*$", re.I | re.S)


def _unload(sql: str) -> WriteStatement:
    """``UNLOAD (query) TO 'target' WITH (k = v, …)``: the query in the outermost parentheses."""
    start = sql.index("(", _WRITE_WORDS.match(sql).end())  # type: ignore[union-attr]
    end = _closing(sql, start)
    tail = _UNLOAD_TAIL.match(sql, end)
    if sql[_WRITE_WORDS.match(sql).end() : start].strip() or tail is None:  # type: ignore[union-attr]
        raise SqlSyntaxError("UNLOAD needs (query) TO 's3://…' [WITH (format = 'PARQUET', …)]")
    options: dict[str, Any] = {}
    if tail.group(2):
        try:
            props = sqlglot.parse_one(f"CREATE TABLE x WITH ({tail.group(2)}) AS SELECT 1", dialect="athena")
        except (ParseError, TokenError) as err:
            raise SqlSyntaxError(f"UNLOAD … WITH (…): {str(err).splitlines()[0]}") from None
        for prop in props.args["properties"].expressions:
            key = prop.name.upper() if isinstance(prop, exp.Property) else ""
            if isinstance(prop, exp.FileFormatProperty):
                options["FORMAT"] = str(prop.this.name).lower()
            elif isinstance(prop, exp.PartitionedByProperty):
                options["PARTITION_BY"] = _partitioning(prop.this)
            elif key in ("PARTITIONED_BY",):
                options["PARTITION_BY"] = _partitioning(prop.args["value"])
            elif key == "FORMAT":
                options["FORMAT"] = str(_value(key, prop.args.get("value"))).lower()
            elif key == "COMPRESSION":
                options["COMPRESSION"] = str(_value(key, prop.args.get("value"))).lower()
            elif key == "FIELD_DELIMITER":
                options["DELIMITER"] = _value(key, prop.args.get("value"))
            else:
                raise OptionError(f"UNLOAD option {prop.sql('athena')} is not supported")
    options.setdefault("FORMAT", "parquet")
    if options["FORMAT"] == "textfile":
        options["FORMAT"] = "csv"
        options.setdefault("HEADER", False)
    target = tail.group(1).replace("''", "'")
    if not target.endswith("/"):
        target += "/"  # Athena writes a folder of files
    query = sql[start + 1 : end].strip()
    if "--" in query.rpartition("\n")[2]:
        query += "\n"  # a line comment at the end ends there, whatever the query is later wrapped in
    return WriteStatement("copy", query, target, options)


#: what may hide a parenthesis: a quoted text or name (doubled quotes inside), a comment
_SKIP = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/", re.S)


def _closing(sql: str, start: int) -> int:
    """The index of the parenthesis closing the one at ``start`` (quotes and comments skipped)."""
    depth, i = 0, start
    while i < len(sql):
        skipped = _SKIP.match(sql, i)
        if skipped is not None:
            i = skipped.end()
            continue
        c = sql[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise SqlSyntaxError("UNLOAD: the query's parenthesis is not closed")
