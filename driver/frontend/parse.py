"""Parsing: exactly one statement, in DuckDB's dialect; syntax errors carry line and column."""

from __future__ import annotations

import logging
from typing import cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from squall.driver.frontend import value_lists
from squall.driver.ir.exprs import light_positions
from squall.errors import SqlSyntaxError, UnsafeQueryError

DIALECT = "duckdb"


class _NoFallbackWarning(logging.Filter):
    """Drops sqlglot's "contains unsupported syntax. Falling back to parsing as a 'Command'" warning:
    such statements are refused with one line of our own (EXPLAIN, SHOW, …)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


logging.getLogger("sqlglot").addFilter(_NoFallbackWarning())


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
    """Parse exactly one statement; syntax errors carry line and column; long literal ``IN`` lists are held
    as one node (:mod:`.value_lists`)."""
    if not sql or not sql.strip():
        raise SqlSyntaxError("empty query")
    text, held = value_lists.hold(sql)
    if held:
        try:
            tree = _parse_one(text)
        except (SqlSyntaxError, UnsafeQueryError):
            pass  # parsed as written below: the error then points into the user's text
        else:
            if value_lists.restore(tree, held):
                return light_positions(value_lists.compact(tree))
    return light_positions(value_lists.compact(_parse_one(sql)))


def _parse_one(sql: str) -> exp.Expression:
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
