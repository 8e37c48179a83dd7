"""Query parameters bound as SQL literals: ``con.sql(sql, params=…)`` and DB-API's qmark style.

Placeholders are found with sqlglot's DuckDB tokenizer (never inside strings, quoted
identifiers or comments): ``?`` and ``$1`` take a sequence, ``$name`` a mapping. Each
value becomes a typed literal (:func:`literal`), so a value can never change the query's
structure.

May import: :mod:`squall.errors` (sqlglot lazily).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Mapping, Sequence
from typing import Any

from squall.errors import OptionError


def literal(value: Any) -> str:
    """``value`` as a DuckDB SQL literal; OptionError for types that have none here."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return f"({value})" if value < 0 else str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "CAST('NaN' AS DOUBLE)"
        if math.isinf(value):
            return f"CAST('{'-' if value < 0 else ''}Infinity' AS DOUBLE)"
        text = repr(value)
        text = text if "e" in text else text + "e0"  # an exponent makes DuckDB read a DOUBLE, not a DECIMAL
        return f"({text})" if text.startswith("-") else text
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise OptionError(f"cannot bind a non-finite Decimal: {value}")
        text = format(value, "f")
        return f"({text})" if text.startswith("-") else text
    if isinstance(value, str):
        if "\x00" in value:
            raise OptionError("cannot bind a string containing NUL characters")
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "'" + "".join(f"\\x{b:02X}" for b in bytes(value)) + "'::BLOB"
    if isinstance(value, dt.datetime):
        kind = "TIMESTAMPTZ" if value.tzinfo is not None else "TIMESTAMP"
        return f"{kind} '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, dt.time):
        if value.tzinfo is not None:
            raise OptionError("cannot bind a time with a time zone")
        return f"TIME '{value.isoformat()}'"
    raise OptionError(f"cannot bind a parameter of type {type(value).__name__}")


def placeholders(sql: str) -> list[tuple[int, int, str]]:
    """``(start, end, key)`` of every parameter in ``sql``: key ``"?"``, ``"1"`` for ``$1``, ``"name"``
    for ``$name`` (not inside strings, quoted identifiers or comments)."""
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.errors import TokenError
    from sqlglot.tokens import TokenType

    try:
        tokens = Dialect.get_or_raise("duckdb").tokenize(sql)
    except TokenError as err:
        from squall.errors import SqlSyntaxError

        raise SqlSyntaxError(str(err).splitlines()[0]) from None
    found: list[tuple[int, int, str]] = []
    for i, tok in enumerate(tokens):
        # "?::INT" tokenizes as one "?::" operator
        if tok.token_type in (TokenType.PLACEHOLDER, TokenType.QDCOLON) and tok.text.startswith("?"):
            found.append((tok.start, tok.start + 1, "?"))
        elif tok.token_type == TokenType.PARAMETER and tok.text == "$" and i + 1 < len(tokens):
            nxt = tokens[i + 1]
            if nxt.start == tok.end + 1 and nxt.token_type in (TokenType.NUMBER, TokenType.VAR):
                found.append((tok.start, nxt.end + 1, nxt.text))
    return found


def bind(sql: str, params: Sequence[Any] | Mapping[str, Any] | None) -> str:
    """``sql`` with its parameters replaced by the literals of ``params``.

    A sequence binds ``?`` in order, or ``$1``, ``$2`` … by position; a mapping binds ``$name``.
    """
    if params is None:
        return sql
    marks = placeholders(sql)
    if isinstance(params, Mapping):
        values = {str(k): v for k, v in params.items()}
        for _, _, key in marks:
            if key == "?" or key.isdigit():
                raise OptionError(f"the query uses positional parameters ({'?' if key == '?' else '$' + key}) "
                                  "but params is a mapping: pass a list")  # fmt: skip
            if key not in values:
                raise OptionError(f"no value for parameter ${key}")
        unused = sorted(set(values) - {key for _, _, key in marks})
        if unused:
            raise OptionError(f"parameter {', '.join('$' + k for k in unused)} not in the query")
        chosen = [values[key] for _, _, key in marks]
    elif isinstance(params, (str, bytes)) or not isinstance(params, Sequence):
        raise OptionError("params must be a list or tuple (for ? or $1) or a dict (for $name)")
    else:
        kinds = {"?" if key == "?" else "$n" if key.isdigit() else "$name" for _, _, key in marks}
        if "$name" in kinds:
            raise OptionError("the query uses named parameters ($name): pass params as a dict")
        if kinds == {"?", "$n"}:
            raise OptionError("do not mix ? and $1 parameters in one query")
        if "$n" in kinds:
            numbers = {int(key) for _, _, key in marks}
            if bad := sorted(n for n in numbers if not 1 <= n <= len(params)):
                raise OptionError(f"parameter ${bad[0]} but {len(params)} value(s) were given")
            if len(numbers) != len(params):
                raise OptionError(
                    f"the query uses {len(numbers)} parameter(s) but {len(params)} value(s) were given"
                )
            chosen = [params[int(key) - 1] for _, _, key in marks]
        else:
            if len(marks) != len(params):
                raise OptionError(
                    f"the query has {len(marks)} parameter(s) but {len(params)} value(s) were given"
                )
            chosen = list(params)
    out, last = [], 0
    for (start, end, _), value in zip(marks, chosen):
        out.append(sql[last:start])
        out.append(literal(value))
        last = end
    out.append(sql[last:])
    return "".join(out)
