"""Time travel in SQL: a table read as it was at a version or a timestamp.

Both spellings users bring are taken (sqlglot parses both in DuckDB's dialect):

- Trino/Athena: ``FROM t FOR VERSION AS OF 3``, ``FROM t FOR TIMESTAMP AS OF TIMESTAMP '2026-01-01 00:00:00'``
  (also ``FOR SYSTEM_TIME AS OF``), alias after the clause;
- DuckDB: ``FROM t AT (VERSION => 3)``, ``FROM t AT (TIMESTAMP => '2026-01-01')``, alias before or after.

:func:`pin_versions` replaces each such reference in the text by the name the catalog gives the table
at that version (:meth:`~squall.driver.catalog.tables.Catalog.table_at`, ``t__v3``), aliased as the
table was (``t__v3 AS t``), and leaves every other character as written; the rest of the pipeline sees a
table like any other (the same table at two versions in one query is two tables). A version is an
integer; a timestamp a constant expression (a naive one is UTC). Other forms (``FOR VERSION BETWEEN``,
``AT (OFFSET => …)``, ``BEFORE``) are refused with their line and column; a table without versions
(plain Parquet) by its source, in one line.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from squall.driver.catalog.tables import Catalog
from squall.errors import NotSupportedError, SqlSyntaxError
from squall.operators.duck import Sandbox

DIALECT = "duckdb"
#: a cheap test before tokenizing: every time-travel clause holds one of these
_MAYBE = re.compile(r"\bAS\s+OF\b|\bAT\s*\(|\bBEFORE\s*\(|\bFOR\s+(VERSION|TIMESTAMP|SYSTEM_TIME)\b", re.I)
_KINDS = {"VERSION": "version", "TIMESTAMP": "timestamp", "SYSTEM_TIME": "timestamp"}


def pin_versions(sql: str, catalog: Catalog) -> str:
    """``sql`` with every time-travel table reference replaced by the catalog's name of the table at
    that version (see the module doc); ``sql`` itself when it has none or does not parse (the parser
    says why)."""
    if not _MAYBE.search(sql):
        return sql
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
        ast = sqlglot.parse_one(sql, read=DIALECT)
    except (ParseError, TokenError):
        return sql
    ctes = {c.alias_or_name.lower() for c in ast.find_all(exp.CTE)}
    edits: list[tuple[int, int, str]] = []
    for table in ast.find_all(exp.Table):
        clause = table.args.get("version") or table.args.get("when")
        if clause is not None:
            edits.extend(_rewrite(sql, tokens, table, clause, catalog, ctes))
    for start, end, text in sorted(edits, reverse=True):
        sql = sql[:start] + text + sql[end:]
    return sql


def _index(tokens: list[Token], start: int) -> int:
    for i, tok in enumerate(tokens):
        if tok.start == start:
            return i
    raise SqlSyntaxError("time travel: cannot find the table reference in the text")


def _rewrite(
    sql: str, tokens: list[Token], table: exp.Table, clause: exp.Expression, catalog: Catalog, ctes: set[str]
) -> list[tuple[int, int, str]]:
    """The text edits (start, end, new text) of one time-travel reference."""
    first = _index(tokens, table.parts[0].meta["start"])
    last = _index(tokens, table.this.meta["start"])
    words = ("FOR", "AT", "BEFORE")
    at = next(
        (i for i in range(last + 1, min(last + 4, len(tokens))) if tokens[i].text.upper() in words), None
    )
    if at is None:
        raise SqlSyntaxError("time travel: cannot find the clause of the table reference")
    where = tokens[at]
    kind, value = _spec(clause, where)
    if table.name.lower() in ctes:
        raise SqlSyntaxError(f"time travel on {table.name}, a WITH query, not a table", where.line, where.col)
    end = _clause_end(sql, tokens, at, clause)
    name = ".".join(p.name for p in table.parts)
    travel = catalog.table_at(name, **{kind: value})
    text = exp.to_identifier(travel).sql(DIALECT)
    if not table.alias:
        text += f" AS {table.this.sql(DIALECT)}"
    return [(tokens[first].start, tokens[last].end + 1, text), (where.start, tokens[end].end + 1, "")]


def _spec(clause: exp.Expression, where: Token) -> tuple[str, Any]:
    """("version", int) or ("timestamp", aware datetime) of a time-travel clause; positioned errors."""
    if isinstance(clause, exp.Version):
        form = f"FOR {clause.name} {clause.text('kind')}"
        kind = _KINDS.get(clause.name.upper()) if clause.text("kind").upper() == "AS OF" else None
    else:
        form = f"{clause.name} ({clause.text('kind')} => …)"
        kind = _KINDS.get(clause.text("kind").upper()) if clause.name.upper() == "AT" else None
    if kind is None:
        raise NotSupportedError(
            f"time travel {form} at line {where.line}, column {where.col}: use FOR VERSION AS OF n, "
            "FOR TIMESTAMP AS OF ts, AT (VERSION => n) or AT (TIMESTAMP => ts)"
        )
    value = clause.expression
    if kind == "version":
        number = value.this if isinstance(value, exp.Neg) else value
        if not (isinstance(number, exp.Literal) and number.is_int):
            raise SqlSyntaxError(
                f"time travel: a version is an integer, not {value.sql(DIALECT)}", where.line, where.col
            )
        return kind, int(value.sql(DIALECT))
    return kind, _timestamp(value, where)


def _timestamp(value: exp.Expression, where: Token) -> datetime:
    """The UTC timestamp of a constant expression (literals in Python, anything else by DuckDB)."""
    if any(
        isinstance(n, (exp.Column, exp.Select, exp.Subquery, exp.Table, exp.Placeholder))
        for n in value.walk()
    ):
        raise SqlSyntaxError(
            f"time travel: a timestamp is a constant, not {value.sql(DIALECT)}", where.line, where.col
        )
    found: Any = None
    literal = value.this if isinstance(value, exp.Cast) else value
    if isinstance(literal, exp.Literal) and literal.is_string:
        try:
            found = datetime.fromisoformat(literal.this)
        except ValueError:
            found = None
    if found is None:
        try:
            with Sandbox(threads=1) as db:
                found = db.relation(f"SELECT ({value.sql(DIALECT)}) AS ts").fetchall()[0][0]
        except Exception as exc:
            first = str(exc).strip().splitlines()[0]
            raise SqlSyntaxError(
                f"time travel: bad timestamp {value.sql(DIALECT)}: {first}", where.line, where.col
            ) from None
    if isinstance(found, str):
        try:
            found = datetime.fromisoformat(found)
        except ValueError:
            raise SqlSyntaxError(f"time travel: not a timestamp: {found!r}", where.line, where.col) from None
    if isinstance(found, date) and not isinstance(found, datetime):
        found = datetime.combine(found, time())
    if not isinstance(found, datetime):
        raise SqlSyntaxError(f"time travel: not a timestamp: {value.sql(DIALECT)}", where.line, where.col)
    return found.astimezone(UTC) if found.tzinfo else found.replace(tzinfo=UTC)


def _clause_end(sql: str, tokens: list[Token], at: int, clause: exp.Expression) -> int:
    """The index of the clause's last token: the ``)`` of ``AT (…)``; the end of the expression after
    ``AS OF`` (the shortest run of tokens that parses to the same expression)."""
    if isinstance(clause, exp.HistoricalData):
        depth = 0
        for i in range(at + 1, len(tokens)):
            depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(tokens[i].token_type, 0)
            if depth == 0:
                return i
        raise SqlSyntaxError("time travel: unclosed AT (", tokens[at].line, tokens[at].col)
    of = next(i for i in range(at, len(tokens)) if tokens[i].text.upper() == "OF")
    want = clause.expression.sql(DIALECT)
    for end in range(of + 1, len(tokens)):
        text = sql[tokens[of + 1].start : tokens[end].end + 1]
        try:
            if sqlglot.parse_one(f"SELECT {text}", read=DIALECT).expressions[0].sql(DIALECT) == want:
                return end
        except (ParseError, TokenError, IndexError):
            continue
    raise SqlSyntaxError(
        "time travel: cannot find the end of the AS OF expression", tokens[at].line, tokens[at].col
    )
