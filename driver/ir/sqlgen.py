"""Renders a logical subtree as DuckDB SQL: the "compiled" local sub-plan of a stage.

Leaves are :class:`InputRef` nodes naming the Arrow tables a worker registers
(scan results and received exchange data). Internal column names are unique,
so joins need no qualification; ORDER BY always sits in the outermost SELECT
of the chain that consumes it, so the order survives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir.nodes import sql_of


@dataclass(frozen=True)
class InputRef(L.Node):
    """A named Arrow input of a stage with the given columns."""

    name: str
    out: tuple[str, ...]
    #: (column, DuckDB type) read back as that type: Arrow has no 128-bit integer, so DuckDB exchanges a
    #: HUGEINT as DECIMAL(38,0), which would change what expressions over it give (coalesce(s, 0.1) = 0)
    casts: tuple[tuple[str, str], ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return self.out

    def cast_sql(self) -> str:
        """The input as a subquery with its ``casts`` applied."""
        replaced = ", ".join(f"CAST({q(c)} AS {t}) AS {q(c)}" for c, t in self.casts)
        return f"(SELECT * REPLACE ({replaced}) FROM {q(self.name)})"


@dataclass(frozen=True)
class Templated(L.Node):
    """Raw DuckDB SQL over ``inputs``: ``{0}``, ``{1}``… in ``template`` become their subqueries.

    For planner parts whose SQL has no logical node (join filters); outputs ``out``.
    """

    inputs: tuple[L.Node, ...]
    template: str
    out: tuple[str, ...]

    @property
    def children(self) -> tuple[L.Node, ...]:
        return self.inputs

    @property
    def names(self) -> tuple[str, ...]:
        return self.out


@dataclass(frozen=True)
class Shared(L.Node):
    """A subtree that occurs more than once in one stage, computed once: the stage's SQL defines it as a
    ``MATERIALIZED`` CTE ``name`` (:func:`render`). The first occurrence holds the subtree (``inputs``, one node)
    and every occurrence reads the CTE under its own column names ``out`` (the CTE's are ``columns``, the first
    occurrence's, by position); later occurrences hold nothing (what they read is the first one's)."""

    name: str
    inputs: tuple[L.Node, ...]
    out: tuple[str, ...]
    columns: tuple[str, ...]

    @property
    def children(self) -> tuple[L.Node, ...]:
        return self.inputs

    @property
    def names(self) -> tuple[str, ...]:
        return self.out


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _indent(text: str) -> str:
    """``text`` indented by two spaces; unchanged when a quoted literal or identifier spans lines (indenting
    would change its value)."""
    if _newline_in_quotes(text):
        return text
    return "\n".join("  " + line for line in text.splitlines())


def _newline_in_quotes(text: str) -> bool:
    return any("\n" in m.group(0) for m in _QUOTED.finditer(text))


#: a quoted literal or identifier (a doubled quote inside reads as two adjacent ones), or an unclosed one
_QUOTED = re.compile(r"'[^']*(?:'|$)|\"[^\"]*(?:\"|$)")


def _sub(node: L.Node) -> str:
    if isinstance(node, InputRef):
        return node.cast_sql() if node.casts else q(node.name)
    return "(\n" + _indent(_render(node)) + "\n)"


def _select_list(exprs: tuple[tuple[str, exp.Expression], ...]) -> str:
    parts = []
    for name, e in exprs:
        text = sql_of(e)
        parts.append(text if text == q(name) else f"{text} AS {q(name)}")
    return ", ".join(parts)


def _order_by(keys: tuple[L.SortKey, ...], qualifier: str | None = None) -> str:
    out = []
    for k in keys:
        e = k.expression
        if qualifier and isinstance(e, exp.Column):
            text = f"{qualifier}.{q(e.name)}"
        else:
            text = sql_of(e)
        text += " DESC" if k.descending else " ASC"
        text += " NULLS FIRST" if k.nulls_first else " NULLS LAST"
        out.append(text)
    return ", ".join(out)


def _limit(limit: L.Limit) -> str:
    text = ""
    if limit.limit is not None:
        text += f" LIMIT {limit.limit}"
    if limit.offset:
        text += f" OFFSET {limit.offset}"
    return text


def render(node: L.Node) -> str:
    """DuckDB SQL for ``node`` (a SELECT producing exactly ``node.names``), the subtrees it shares
    (:class:`Shared`) defined first as ``MATERIALIZED`` CTEs."""
    ctes: dict[str, str] = {}

    def collect(n: L.Node) -> None:
        for c in n.children:
            collect(c)
        if isinstance(n, Shared) and n.inputs and n.name not in ctes:
            ctes[n.name] = f"{q(n.name)} AS MATERIALIZED (\n{_indent(_render(n.inputs[0]))}\n)"

    collect(node)
    text = _render(node)
    if not ctes:
        return text
    if text.lstrip()[:4].upper() == "WITH":
        text = f"SELECT *\nFROM (\n{_indent(text)}\n) AS t"
    return "WITH " + ",\n".join(ctes.values()) + "\n" + text


def _render(node: L.Node) -> str:
    # ordered chains: [Project] [Limit] Sort X  -> one SELECT with ORDER BY (and LIMIT)
    project = node if isinstance(node, L.Project) else None
    rest = project.input if project else node
    limit = rest if isinstance(rest, L.Limit) else None
    rest = limit.input if limit else rest
    if isinstance(rest, L.Sort):
        select = _select_list(project.exprs) if project else "*"
        text = f"SELECT {select}\nFROM {_sub(rest.input)} AS t\nORDER BY {_order_by(rest.keys, 't')}"
        return text + (_limit(limit) if limit else "")
    if isinstance(node, InputRef):
        source = node.cast_sql() + " AS t" if node.casts else q(node.name)
        return f"SELECT {', '.join(q(n) for n in node.out)} FROM {source}"
    if isinstance(node, L.Values):
        if not node.out:
            return "SELECT 1 AS __one"
        rows = ", ".join("(" + ", ".join(sql_of(v) for v in row) + ")" for row in node.rows)
        return f"SELECT * FROM (VALUES {rows}) AS t({', '.join(q(n) for n in node.out)})"
    if isinstance(node, L.Filter):
        return f"SELECT *\nFROM {_sub(node.input)} AS t\nWHERE {sql_of(node.predicate)}"
    if isinstance(node, L.Project):
        return f"SELECT {_select_list(node.exprs)}\nFROM {_sub(node.input)} AS t"
    if isinstance(node, L.Limit):
        return f"SELECT *\nFROM {_sub(node.input)} AS t{_limit(node)}"
    if isinstance(node, L.Join):
        return _join(node)
    if isinstance(node, L.Aggregate):
        keys = [(n, e) for n, e in node.keys]
        aggs = [(n, a.expression) for n, a in node.aggs]
        if node.sets:
            key_sql = [sql_of(e) for _n, e in node.keys]
            gid = f"GROUPING({', '.join(key_sql)})" if key_sql else "0"
            items = [x for x in (_select_list(tuple(keys + aggs)), f"{gid} AS {q(node.gid)}") if x]
            text = "SELECT " + ", ".join(items)
            sets = ", ".join("(" + ", ".join(key_sql[i] for i in s) + ")" for s in node.sets)
            return text + f"\nFROM {_sub(node.input)} AS t\nGROUP BY GROUPING SETS ({sets})"
        text = f"SELECT {_select_list(tuple(keys + aggs))}\nFROM {_sub(node.input)} AS t"
        if node.keys:
            text += "\nGROUP BY " + ", ".join(sql_of(e) for _n, e in node.keys)
        return text
    if isinstance(node, L.SetOp):
        op = {"union": "UNION", "intersect": "INTERSECT", "except": "EXCEPT"}[node.kind]
        op += " ALL" if node.all else ""
        return f"\n{op}\n".join(f"SELECT * FROM {_sub(c)} AS t" for c in node.inputs)
    if isinstance(node, L.Window):
        return f"SELECT *, {_select_list(node.exprs)}\nFROM {_sub(node.input)} AS t"
    if isinstance(node, L.OneRank):
        return _one_rank(node)
    if isinstance(node, Templated):
        return node.template.format(*(_sub(i) for i in node.inputs))
    if isinstance(node, Shared):
        return f"SELECT {', '.join(f'{q(c)} AS {q(o)}' for c, o in zip(node.columns, node.out))} FROM {q(node.name)}"
    raise TypeError(f"cannot render {type(node).__name__}")


def _join(node: L.Join) -> str:
    conds = [f"{sql_of(a)} = {sql_of(b)}" for a, b in zip(node.left_keys, node.right_keys)]
    if node.residual is not None:
        conds.append(f"({sql_of(node.residual)})")
    on = " AND ".join(conds) if conds else "TRUE"
    if node.kind == "cross":
        return f"SELECT *\nFROM {_sub(node.left)} AS l\nCROSS JOIN {_sub(node.right)} AS r"
    if node.kind == "anti" and node.null_aware:
        # x NOT IN (subquery): false if the subquery holds a NULL; a NULL x passes only an empty subquery.
        # Both facts are global: the planner replicates the right side.
        right = _sub(node.right)
        right_null = " OR ".join(f"{sql_of(k)} IS NULL" for k in node.right_keys)
        left_null = " OR ".join(f"{sql_of(k)} IS NULL" for k in node.left_keys)
        return (
            f"SELECT *\nFROM {_sub(node.left)} AS l\nANTI JOIN {right} AS r ON {on}\n"
            f"WHERE NOT EXISTS (SELECT 1 FROM {right} AS r2 WHERE {right_null})\n"
            f"  AND (NOT ({left_null}) OR NOT EXISTS (SELECT 1 FROM {right} AS r3))"
        )
    kind = {"inner": "JOIN", "left": "LEFT JOIN", "right": "RIGHT JOIN", "full": "FULL JOIN"}.get(
        node.kind, node.kind.upper() + " JOIN"
    )
    return f"SELECT *\nFROM {_sub(node.left)} AS l\n{kind} {_sub(node.right)} AS r ON {on}"


def _one_rank(node: L.OneRank) -> str:
    """The part's own SQL over CTEs named like the tables it reads (they shadow nothing else: a
    stage's DuckDB sees only its inputs); its result columns renamed by position."""
    ctes = []
    for table, cols, inp in zip(node.tables, node.columns, node.inputs):
        select = ", ".join(f"{q(i)} AS {q(s)}" for s, i in cols)
        ctes.append(f"{q(table)} AS (SELECT {select} FROM {_sub(inp)} AS t)")
    head = "WITH " + ",\n".join(ctes) + "\n" if ctes else ""
    out = ", ".join(q(n) for n in node.out)
    return f"{head}SELECT * FROM (\n{_indent(node.sql)}\n) AS q({out})"
