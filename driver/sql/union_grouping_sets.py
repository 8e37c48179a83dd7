"""``UNION ALL`` of aggregates of one source by different keys as one ``GROUP BY GROUPING SETS``: the source is
read, joined and partially aggregated once instead of once per branch (the ROLLUP written out by hand, as
TPC-DS Q27 does: 2.6x DuckDB before, 1.1x after at SF1, W=2)::

    >>> import sqlglot
    >>> q = ("SELECT t.a AS a, t.b AS b, 0 AS lvl, sum(t.x) AS s FROM t AS t GROUP BY t.a, t.b "
    ...      "UNION ALL SELECT t.a AS a, NULL AS b, 1 AS lvl, sum(t.x) AS s FROM t AS t GROUP BY t.a")
    >>> print(apply(sqlglot.parse_one(q, read="duckdb"), None).sql("duckdb"))
    SELECT t.a AS a, t.b AS b, CASE GROUPING(t.a, t.b) WHEN 0 THEN 0 WHEN 1 THEN 1 END AS lvl, SUM(t.x) AS s FROM t AS t GROUP BY GROUPING SETS ((t.a, t.b), (t.a))

The same rows, in the same types, whenever every branch

- is a plain ``SELECT … FROM … [WHERE …] [GROUP BY columns]`` (no join list of its own beyond its FROM, no
  HAVING, DISTINCT, window, ORDER BY or LIMIT), with FROM and WHERE as in every other branch;
- groups by a set of columns no other branch groups by (equal sets would make equal ``GROUPING()`` values);
- selects, at each position, what every branch does there: one aggregate expression (its columns all inside
  aggregates) written alike in all; or one key column, a bare ``NULL`` in exactly the branches that do not group
  by it (a grouping set's NULL for a column it does not group by; a typed NULL could change the type); or a
  constant (numbers, or strings, or NULL), which becomes ``CASE GROUPING(keys…)`` when branches differ.

A branch without GROUP BY (that aggregates) is the empty grouping set ``()``: one row even over no rows, as the
branch gives.
"""

from __future__ import annotations

from sqlglot import exp

from squall.driver.sql.context import SqlContext

NAME = "union_grouping_sets"
#: what a branch may hold besides its select list, FROM, WHERE and GROUP BY (anything else set: not rewritten)
_PLAIN_ARGS = frozenset({"expressions", "from_", "where", "group", "kind", "hint"})


def apply(ast: exp.Expression, context: SqlContext | None) -> exp.Expression:
    if ast.find(exp.Union) is None:
        return ast
    for union in [u for u in ast.find_all(exp.Union) if not isinstance(u.parent, exp.Union)]:
        branches = _branches(union)
        if not branches or len(branches) < 2 or (merged := _merged(branches)) is None:
            continue
        if union is ast:
            ast = merged
        else:
            union.replace(merged)
        if context is not None:
            context.notes.append(
                f"UNION ALL of {len(branches)} aggregates of one source by different keys computed as one "
                "GROUP BY GROUPING SETS (the source is read once)"
            )
    return ast


def _branches(union: exp.Union) -> list[exp.Select] | None:
    """The SELECTs of a chain of plain ``UNION ALL``s, in order; None when anything else is in it."""
    if union.args.get("distinct") or any(
        union.args.get(k) for k in ("by_name", "side", "kind", "on", "with_", "order", "limit", "offset")
    ):
        return None
    out: list[exp.Select] = []
    for side in (union.this, union.expression):
        if isinstance(side, exp.Union):
            inner = _branches(side)
            if inner is None:
                return None
            out.extend(inner)
        elif isinstance(side, exp.Select):
            out.append(side)
        else:
            return None
    return out


def _keys(sel: exp.Select) -> list[exp.Column] | None:
    """The GROUP BY columns of a plain branch, [] for none; None when it is not plain."""
    if any(v not in (None, [], False) for k, v in sel.args.items() if k not in _PLAIN_ARGS):
        return None
    if sel.args.get("kind") or sel.find(exp.Window, exp.Subquery) is not None:
        return None
    group = sel.args.get("group")
    if group is None:
        return []
    if any(v for k, v in group.args.items() if k != "expressions"):
        return None
    columns = group.expressions
    if not all(type(c) is exp.Column for c in columns):
        return None
    return list(columns)


def _constant(e: exp.Expression) -> str | None:
    """ "null", "number" or "string" for a constant item, else None."""
    if isinstance(e, exp.Null):
        return "null"
    if isinstance(e, exp.Neg):
        e = e.this
    if isinstance(e, exp.Literal):
        return "string" if e.is_string else "number"
    return None


def _aggregate(e: exp.Expression) -> bool:
    return e.find(exp.AggFunc) is not None and all(
        c.find_ancestor(exp.AggFunc) is not None for c in e.find_all(exp.Column)
    )


def _merged(branches: list[exp.Select]) -> exp.Select | None:
    grouped = [_keys(b) for b in branches]
    if any(g is None for g in grouped):
        return None
    by_text = {c.sql("duckdb"): c for g in grouped for c in g or ()}
    keys = [[c.sql("duckdb") for c in g or ()] for g in grouped]
    if any(not k and not any(e.find(exp.AggFunc) for e in b.expressions) for k, b in zip(keys, branches)):
        return None  # a branch that neither groups nor aggregates gives a row per source row, not one
    first = branches[0]
    if first.args.get("from_") is None:
        return None
    where = first.args.get("where")
    source = (first.args["from_"].sql("duckdb"), where.sql("duckdb") if where else "")
    sets = [frozenset(k) for k in keys]
    if len(set(sets)) != len(sets):
        return None
    for b in branches[1:]:
        w = b.args.get("where")
        if (
            b.args.get("from_") is None
            or (b.args["from_"].sql("duckdb"), w.sql("duckdb") if w else "") != source
        ):
            return None
    width = len(first.expressions)
    if any(len(b.expressions) != width for b in branches):
        return None
    order = [by_text[k] for k in dict.fromkeys(k for ks in keys for k in ks)]
    masks = [
        sum(1 << (len(order) - 1 - i) for i, k in enumerate(order) if k.sql("duckdb") not in s) for s in sets
    ]
    items: list[exp.Expression] = []
    for p in range(width):
        item = _position([b.expressions[p].unalias() for b in branches], sets, order, masks)
        if item is None:
            return None
        name = first.expressions[p].args.get("alias")
        items.append(exp.Alias(this=item, alias=name.copy()) if name is not None else item)
    grouping = exp.GroupingSets(
        expressions=[exp.Tuple(expressions=[by_text[k].copy() for k in ks]) for ks in keys]
    )
    out = exp.Select(
        expressions=items, from_=first.args["from_"].copy(), group=exp.Group(expressions=[grouping])
    )
    if where is not None:
        out.set("where", where.copy())
    return out


def _position(
    values: list[exp.Expression], sets: list[frozenset[str]], order: list[exp.Column], masks: list[int]
) -> exp.Expression | None:
    """The merged select item at one position, or None when the branches' items there do not merge."""
    kinds = [_constant(v) for v in values]
    if all(kinds):
        if len({k for k in kinds if k != "null"}) > 1:
            return None
        texts = [v.sql("duckdb") for v in values]
        if len(set(texts)) == 1:
            return values[0].copy()
        grouping = exp.Grouping(expressions=[k.copy() for k in order])
        ifs = [exp.If(this=exp.Literal.number(m), true=v.copy()) for m, v in zip(masks, values)]
        return exp.Case(this=grouping, ifs=ifs)
    if all(_aggregate(v) for v in values):
        return values[0].copy() if len({v.sql("duckdb") for v in values}) == 1 else None
    columns = {v.sql("duckdb") for v in values if type(v) is exp.Column}
    if len(columns) != 1:
        return None
    column = next(iter(columns))
    for v, s in zip(values, sets):
        grouped = type(v) is exp.Column
        if not (grouped and column in s) and not (isinstance(v, exp.Null) and column not in s):
            return None
    return next(v for v in values if type(v) is exp.Column).copy()
