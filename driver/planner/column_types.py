"""DuckDB types of a stage's columns read off its plan, where DuckDB's rules for them are plain.

A stage that only filters (join filters too), limits, sorts, joins and picks columns of its inputs has its
inputs' types: each output column is one of theirs, unchanged (an outer join's missing side is NULL of the
same type), and so has a set operation whose inputs have one type per column. The planner's partial and final
aggregates are typed here as far as each is a COUNT, or a SUM, MIN or MAX of one column (DuckDB's rules for
these are few and fixed), and so are the values it computes over final aggregates (a COUNT cast to BIGINT, an
AVG as a division of DOUBLEs). The planner used to ask DuckDB to bind every stage for its types (~1-2 ms a
stage in DuckDB 2.0); for such stages it reads them here instead (about two thirds of TPC-DS's stages).
Anything else that computes a value (another expression or aggregate, a window, a set operation's common type
of different types, raw SQL) gives ``None``: DuckDB is asked.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir.nodes import DIALECT
from squall.driver.ir.sqlgen import InputRef, q
from squall.driver.planner.joinfilter import FilterProbe

#: the joins whose output is the left columns then the right ones (semi/anti: the left ones)
_JOIN_KINDS = frozenset({"inner", "left", "right", "full", "cross", "semi", "anti"})

InputTypes = Callable[[str], tuple[tuple[str, str], ...]]


def types_off_the_plan(node: L.Node, input_types: InputTypes) -> tuple[tuple[str, str], ...] | None:
    """(name, DuckDB type) of each column of ``node`` rendered, as DuckDB would bind it, when every one is an
    input's column passed through, a plain aggregate of one or a final value this module types (see the module
    doc; ``input_types(name)``: an input's (column, type) in order), else None."""
    if not node.names:  # no columns: rendered as SQL DuckDB may reject, which its bind tells the planner
        return None
    found = _types(node, input_types)
    return None if found is None or len(found) != len(node.names) else tuple(found.items())


def _types(node: L.Node, input_types: InputTypes) -> dict[str, str] | None:
    """The columns ``node`` gives, in order, with their types; None when one is computed or when the node reads
    a column its input does not give (a planner bug DuckDB's bind would report: it is asked instead)."""
    if isinstance(node, InputRef):
        columns = input_types(node.name)
        # rendered as the whole input (``SELECT * FROM x``): its columns must be the reference's
        return dict(columns) if columns and tuple(c for c, _t in columns) == node.out else None
    if isinstance(node, (L.Filter, L.Limit, L.Sort)):
        below = _types(node.input, input_types)
        if isinstance(node, L.Filter):
            return below if _reads_only((node.predicate,), below) else None
        if isinstance(node, L.Sort):
            return below if _reads_only(tuple(k.expression for k in node.keys), below) else None
        return below
    if isinstance(node, FilterProbe):  # the scan's rows that may match a join filter
        below, keys = (_types(i, input_types) for i in node.inputs)
        return below if keys is not None else None
    if isinstance(node, L.Project):
        below = _types(node.input, input_types)
        return _columns(node.exprs, below, computed=True) if node.exprs else None
    if isinstance(node, L.Aggregate) and not node.sets and (node.keys or node.aggs):
        below = _types(node.input, input_types)
        out = _columns(node.keys, below)
        if out is None or below is None:
            return None
        for name, call in node.aggs:
            if (typ := _aggregate_type(call, below)) is None:
                return None
            out[name] = typ
        return out
    if isinstance(node, L.SetOp):  # inputs of one type per column: that type, named as the first input
        inputs = [types_off_the_plan(i, input_types) for i in node.inputs]
        first = inputs[0]
        if first is None or any(
            i is None or [t for _c, t in i] != [t for _c, t in first] for i in inputs[1:]
        ):
            return None
        return dict(first)
    if isinstance(node, L.Join) and node.kind in _JOIN_KINDS and not node.null_aware:
        left, right = _types(node.left, input_types), _types(node.right, input_types)
        if left is None or right is None or not left.keys().isdisjoint(right):
            return None
        conditions = (
            *node.left_keys,
            *node.right_keys,
            *((node.residual,) if node.residual is not None else ()),
        )
        if not _reads_only(conditions, left | right):
            return None
        return left if node.kind in ("semi", "anti") else left | right
    return None


def _columns(
    exprs: tuple[tuple[str, exp.Expression], ...], below: dict[str, str] | None, computed: bool = False
) -> dict[str, str] | None:
    """(name -> type) of ``exprs`` when each is a column of ``below`` as it is (with ``computed``, or a value
    :func:`_computed_type` types), else None."""
    if below is None:
        return None
    out = {}
    for name, e in exprs:
        column = _plain_column(e)
        typ = below.get(column) if column is not None else _computed_type(e, below) if computed else None
        if typ is None:
            return None
        out[name] = typ
    return out


def _computed_type(e: exp.Expression, below: dict[str, str]) -> str | None:
    """DuckDB's type of the planner's output expressions over final aggregates (``CAST(COALESCE(count, 0) AS
    BIGINT)``; AVG's ``CAST(sum AS DOUBLE) / CAST(count AS DOUBLE)`` and its DECIMAL form), else None: a CAST to
    BIGINT or DOUBLE of numbers only, and DOUBLEs divided or multiplied (by each other or a number)."""
    while type(e) is exp.Paren:
        e = e.this
    column = _plain_column(e)
    if column is not None:
        return below.get(column)
    if type(e) is exp.Cast:
        target = e.to.sql(DIALECT)
        if target not in ("BIGINT", "DOUBLE") or not _reads_only((e.this,), below):
            return None
        read = [below[c.name] for c in e.this.find_all(exp.Column)]
        return target if read and all(_numeric(t) for t in read) else None
    if type(e) in (exp.Div, exp.Mul) and not e.args.get("safe"):
        sides = [_computed_type(x, below) for x in (e.this, e.expression)]
        literal = [x for x in (e.this, e.expression) if type(x) is exp.Literal and x.is_number]
        if sides.count("DOUBLE") == 2 or (sides.count("DOUBLE") == 1 and literal and type(e) is exp.Mul):
            return "DOUBLE"
    return None


def _reads_only(exprs: tuple[exp.Expression, ...], below: dict[str, str] | None) -> bool:
    """Whether ``exprs`` read columns of ``below`` only (unqualified, no subquery)."""
    if below is None:
        return False
    for e in exprs:
        for node in e.walk():
            if isinstance(node, (exp.Query, exp.Subquery)):
                return False
            if isinstance(node, exp.Column) and (_plain_column(node) not in below):
                return False
    return True


def _plain_column(e: exp.Expression) -> str | None:
    """The input column ``e`` reads as it is (an unqualified column reference), else None."""
    if type(e) is not exp.Column or e.args.get("table") or e.args.get("db") or e.args.get("catalog"):
        return None
    name = e.args.get("this")
    return name.this if isinstance(name, exp.Identifier) else None


#: DuckDB's SUM of an integer type (BOOLEAN too) is a HUGEINT, of a DECIMAL(p, s) a DECIMAL(38, s)
_SUM_HUGEINT = frozenset(
    {
        "BOOLEAN",
        "TINYINT",
        "SMALLINT",
        "INTEGER",
        "BIGINT",
        "HUGEINT",
        "UTINYINT",
        "USMALLINT",
        "UINTEGER",
        "UBIGINT",
    }
)
_DECIMAL = re.compile(r"DECIMAL\(\d+,(\d+)\)")


def _aggregate_type(call: L.AggCall, below: dict[str, str]) -> str | None:
    """DuckDB's type of ``call`` when it is a COUNT, or a SUM, MIN or MAX of one input column (as the planner's
    partial and final aggregates are), else None."""
    e = call.expression
    if type(e) is exp.Count:
        return "BIGINT"
    name = _ONE_COLUMN.get(type(e))
    column = _plain_column(e.this) if name else None
    if column is None or column not in below or L.sql_of(e) != f"{name}({q(column)})":
        return None  # an expression, a second argument, DISTINCT, FILTER...
    typ = below[column]
    if name != "SUM":
        return typ
    if typ in _SUM_HUGEINT:
        return "HUGEINT"
    if typ in ("FLOAT", "DOUBLE"):
        return "DOUBLE"
    decimal = _DECIMAL.fullmatch(typ)
    return f"DECIMAL(38,{decimal.group(1)})" if decimal else None


_ONE_COLUMN: dict[type, str] = {exp.Sum: "SUM", exp.Min: "MIN", exp.Max: "MAX"}
_NUMERIC = _SUM_HUGEINT - {"BOOLEAN"} | {"UHUGEINT", "FLOAT", "DOUBLE"}


def _numeric(typ: str) -> bool:
    return typ in _NUMERIC or _DECIMAL.fullmatch(typ) is not None
