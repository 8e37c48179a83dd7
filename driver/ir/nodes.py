"""Squall's logical plan: a small immutable relational IR.

Every node outputs uniquely named columns (internal names, unique in the whole
plan), so expressions refer to inputs by plain quoted names and a join's
output is simply the left columns followed by the right ones. Expressions are
sqlglot trees in DuckDB's dialect; they are never mutated after a node is
built (transformations copy).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

DIALECT = "duckdb"


def col(name: str) -> exp.Column:
    """A reference to an internal column name."""
    return exp.column(name, quoted=True)


#: id(expression) -> (expression, its structural hash then, its SQL); see :func:`sql_of`
_generated: dict[int, tuple[exp.Expression, int, str]] = {}
_GENERATED_LIMIT = 50_000


def sql_of(expression: exp.Expression) -> str:
    """``expression`` as DuckDB SQL.

    sqlglot copies the whole tree before it generates (its generator mutates), ~3/4 of the cost, and
    planning renders the same expressions again and again (each stage, type check and key). So: a reference
    to one quoted column is quoted here directly, and other text is remembered per expression object, used
    again only while the object is unchanged — sqlglot clears a node's cached hash, and its parents', on
    every ``set``/``append``/``replace``, so a tree changed since has no hash or a different one.
    """
    if type(expression) is exp.Column and not expression.comments:
        args = expression.args
        name = args.get("this")
        if (
            type(name) is exp.Identifier
            and name.args.get("quoted")
            and not name.comments
            and not (args.get("table") or args.get("db") or args.get("catalog"))
        ):
            return '"' + name.this.replace('"', '""') + '"'
    known = _generated.get(id(expression))
    if known is not None and known[0] is expression and known[1] == expression._hash:
        return known[2]
    text = expression.sql(DIALECT)
    if len(_generated) >= _GENERATED_LIMIT:
        _generated.clear()
    _generated[id(expression)] = (expression, hash(expression), text)  # the entry keeps the id from reuse
    return text


def forget_generated() -> None:
    """Drop what :func:`sql_of` remembers (a query's expressions: its planning is over). Kept across queries,
    the trees would only grow the heap every full garbage collection walks."""
    _generated.clear()


def term_sql(predicate: exp.Expression) -> str:
    """``predicate`` as SQL that stays one term when ANDed with others as text (an OR in parentheses)."""
    return f"({sql_of(predicate)})" if isinstance(predicate, exp.Or) else sql_of(predicate)


def renamed(expression: exp.Expression, mapping: dict[str, str]) -> exp.Expression:
    """``expression`` (a copy) with each internal column in ``mapping`` read under its new name."""

    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and n.name in mapping:
            return col(mapping[n.name])
        return n

    return expression.transform(swap)


def generates_rows(expression: exp.Expression) -> bool:
    """True when ``expression`` holds an ``unnest``: a projection of it changes the row count (never pruned)."""
    return any(True for _ in expression.find_all(exp.Explode, exp.Unnest))


def columns_in(expression: exp.Expression) -> set[str]:
    """Internal column names an expression reads."""
    return {c.name for c in expression.find_all(exp.Column)}


@dataclass(frozen=True)
class Node:
    """Base of all logical nodes."""

    @property
    def children(self) -> tuple[Node, ...]:
        return ()

    @property
    def names(self) -> tuple[str, ...]:
        """Output column names, in order."""
        raise NotImplementedError


@dataclass(frozen=True)
class Scan(Node):
    """Read ``columns`` (source name, internal name) of a catalog table, keeping rows that pass ``filters``."""

    table: str
    columns: tuple[tuple[str, str], ...]
    filters: tuple[exp.Expression, ...] = ()
    est_rows: float = 0.0
    row_width: float = 8.0

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(internal for _src, internal in self.columns)


@dataclass(frozen=True)
class Values(Node):
    """A constant relation (also ``SELECT`` without ``FROM``: one row, no columns)."""

    rows: tuple[tuple[exp.Expression, ...], ...]
    out: tuple[str, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return self.out


@dataclass(frozen=True)
class Filter(Node):
    input: Node
    predicate: exp.Expression

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    @property
    def names(self) -> tuple[str, ...]:
        return self.input.names


@dataclass(frozen=True)
class Project(Node):
    """Compute ``exprs`` (name, expression) from the input; only these columns remain."""

    input: Node
    exprs: tuple[tuple[str, exp.Expression], ...]

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _e in self.exprs)

    def passthrough(self) -> dict[str, str]:
        """Input column -> output name for outputs that are plain column references."""
        out: dict[str, str] = {}
        for name, e in self.exprs:
            if isinstance(e, exp.Column):
                out.setdefault(e.name, name)
        return out


@dataclass(frozen=True)
class Narrow(Project):
    """A projection that only drops columns its input's own filters read (added by column pruning above a
    join side, so that they do not cross an exchange). Planned and rendered as any projection; the
    planner's size estimates look through it, as they did before pruning added it."""


JOIN_KINDS = ("inner", "left", "right", "full", "semi", "anti", "cross")


@dataclass(frozen=True)
class Join(Node):
    """``left <kind> JOIN right ON left_keys = right_keys AND residual``.

    semi/anti joins output only the left columns. ``null_aware`` anti joins
    implement ``NOT IN``: no row survives if the right side has a NULL key.
    """

    left: Node
    right: Node
    kind: str
    left_keys: tuple[exp.Expression, ...] = ()
    right_keys: tuple[exp.Expression, ...] = ()
    residual: exp.Expression | None = None
    null_aware: bool = False
    #: the translator's estimate of output rows (from key NDVs), None for the generic rule
    est_rows: float | None = None

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    @property
    def names(self) -> tuple[str, ...]:
        if self.kind in ("semi", "anti"):
            return self.left.names
        return self.left.names + self.right.names


@dataclass(frozen=True)
class AggCall:
    """One aggregate call: ``func(args)`` with DISTINCT and FILTER as written."""

    func: str
    args: tuple[exp.Expression, ...]
    distinct: bool = False
    expression: exp.Expression = field(default_factory=lambda: exp.Null())
    #: ``agg(x) FILTER (WHERE c)`` of an aggregate that does not skip NULLs (``expression`` holds the FILTER):
    #: it cannot be split or deduplicated, so its rows move and it completes after the move
    filtered: bool = False

    def sql(self) -> str:
        return sql_of(self.expression)


@dataclass(frozen=True)
class Aggregate(Node):
    """GROUP BY ``keys`` (name, expression) computing ``aggs`` (name, AggCall).

    With ``sets`` (GROUPING SETS / ROLLUP / CUBE) each set is a tuple of key indices and the
    output gains a last column ``gid``: DuckDB's ``GROUPING(all keys)`` (bit set = key rolled
    up), which tells a rolled-up key's NULL from a real one.
    """

    input: Node
    keys: tuple[tuple[str, exp.Expression], ...]
    aggs: tuple[tuple[str, AggCall], ...]
    sets: tuple[tuple[int, ...], ...] = ()
    gid: str = ""
    #: keep the groups hash-partitioned by the keys even when few (no gather to rank 0): a join on the keys
    #: follows (an eager aggregate below its join, driver/logical/rules/eager_aggregation.py)
    by_key: bool = False

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    @property
    def names(self) -> tuple[str, ...]:
        extra = (self.gid,) if self.sets else ()
        return tuple(n for n, _ in self.keys) + tuple(n for n, _ in self.aggs) + extra


@dataclass(frozen=True)
class SortKey:
    expression: exp.Expression
    descending: bool = False
    nulls_first: bool | None = None

    def sql(self) -> str:
        text = sql_of(self.expression) + (" DESC" if self.descending else " ASC")
        if self.nulls_first is not None:
            text += " NULLS FIRST" if self.nulls_first else " NULLS LAST"
        return text


@dataclass(frozen=True)
class Sort(Node):
    input: Node
    keys: tuple[SortKey, ...]

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    @property
    def names(self) -> tuple[str, ...]:
        return self.input.names


@dataclass(frozen=True)
class Limit(Node):
    input: Node
    limit: int | None
    offset: int = 0

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    @property
    def names(self) -> tuple[str, ...]:
        return self.input.names


@dataclass(frozen=True)
class SetOp(Node):
    """UNION / INTERSECT / EXCEPT [ALL]; inputs already project to ``out`` names positionally."""

    kind: str  # union | intersect | except
    all: bool
    inputs: tuple[Node, ...]
    out: tuple[str, ...]

    @property
    def children(self) -> tuple[Node, ...]:
        return self.inputs

    @property
    def names(self) -> tuple[str, ...]:
        return self.out


@dataclass(frozen=True)
class Window(Node):
    """Adds window-function columns ``exprs`` (name, expression) to the input's columns.

    ``partition_by`` is the PARTITION BY shared by every expression (empty when
    they differ or there is none): the planner shuffles by it.
    """

    input: Node
    exprs: tuple[tuple[str, exp.Expression], ...]
    partition_by: tuple[exp.Expression, ...] = ()

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    @property
    def names(self) -> tuple[str, ...]:
        return self.input.names + tuple(n for n, _ in self.exprs)


#: the :class:`OneRank` reason of a query planned whole for one worker: with W=1 there is nothing to
#: distribute, so DuckDB plans the query as written (its own join order, decorrelation, CTEs)
WHOLE_QUERY_AT_W1 = "W=1, so DuckDB plans the whole query as written"


@dataclass(frozen=True)
class OneRank(Node):
    """A part with no distributed plan: DuckDB runs ``sql`` (self-contained SQL text) on one rank.

    ``inputs`` produce the ``columns`` (source name, internal name) of each catalog table in
    ``tables`` that the text reads; ``out`` names the text's result columns by position;
    ``reason`` says why this part is not distributed (for explain and stats).
    """

    sql: str
    tables: tuple[str, ...]
    columns: tuple[tuple[tuple[str, str], ...], ...]
    inputs: tuple[Node, ...]
    out: tuple[str, ...]
    reason: str

    @property
    def children(self) -> tuple[Node, ...]:
        return self.inputs

    @property
    def names(self) -> tuple[str, ...]:
        return self.out


def with_children(node: Node, f: Callable[[Node], Node]) -> Node:
    """``node`` with ``f`` applied to each child (every field holding a node or a tuple of nodes)."""
    changes: dict[str, object] = {}
    for fld in dataclasses.fields(node):
        v = getattr(node, fld.name)
        if isinstance(v, Node):
            changes[fld.name] = f(v)
        elif isinstance(v, tuple) and v and all(isinstance(c, Node) for c in v):
            changes[fld.name] = tuple(f(c) for c in v)
    return dataclasses.replace(node, **changes) if changes else node


def describe(node: Node, indent: int = 0) -> str:
    """A readable one-node-per-line rendering (for debugging and tests)."""
    pad = "  " * indent
    detail: Any
    if isinstance(node, Scan):
        detail = f"{node.table} [{', '.join(i for _s, i in node.columns)}]"
        if node.filters:
            detail += " WHERE " + " AND ".join(term_sql(f) for f in node.filters)
    elif isinstance(node, Filter):
        detail = sql_of(node.predicate)
    elif isinstance(node, Project):
        detail = ", ".join(f"{sql_of(e)} AS {n}" for n, e in node.exprs)
    elif isinstance(node, Join):
        on = " AND ".join(f"{sql_of(a)} = {sql_of(b)}" for a, b in zip(node.left_keys, node.right_keys))
        detail = f"{node.kind} ON {on or 'TRUE'}" + (f" AND {sql_of(node.residual)}" if node.residual else "")
    elif isinstance(node, Aggregate):
        detail = (
            "keys ["
            + ", ".join(n for n, _ in node.keys)
            + "] "
            + ", ".join(f"{a.sql()} AS {n}" for n, a in node.aggs)
        )
        if node.sets:
            sets = ", ".join("(" + ", ".join(node.keys[i][0] for i in s) + ")" for s in node.sets)
            detail += f" GROUPING SETS ({sets}) id {node.gid}"
    elif isinstance(node, Sort):
        detail = ", ".join(k.sql() for k in node.keys)
    elif isinstance(node, Limit):
        detail = f"{node.limit} OFFSET {node.offset}"
    elif isinstance(node, OneRank):
        detail = f"[{', '.join(node.out)}] ({node.reason}): {' '.join(node.sql.split())[:80]}"
    else:
        detail = ", ".join(node.names)
    lines = [f"{pad}{type(node).__name__} {detail}"]
    lines += [describe(c, indent + 1) for c in node.children]
    return "\n".join(lines)


def find_scan_column(node: Node, name: str) -> tuple[Scan, str] | None:
    """The scan below ``node`` that produces internal column ``name``, and its source column."""
    if isinstance(node, Scan):
        for source, internal in node.columns:
            if internal == name:
                return node, source
        return None
    for c in node.children:
        found = find_scan_column(c, name)
        if found is not None:
            return found
    return None
