"""PIVOT and UNPIVOT with IN lists as plain SQL the distributed planner knows (instead of one rank).

A PIVOT is what DuckDB itself runs below its ``pivot_filter_threshold``: one filtered aggregate per
value column and aggregate, grouped by the GROUP BY columns (without GROUP BY: every source column
the ON and USING parts do not name)::

    SELECT g, sum(x) FILTER (WHERE CAST(c AS VARCHAR) IS NOT DISTINCT FROM CAST('a' AS VARCHAR)) AS a, …
    FROM src GROUP BY g

An UNPIVOT is DuckDB's own unnest of the ON columns' names and values, rows whose value is NULL
dropped unless ``INCLUDE NULLS``::

    SELECT * FROM (SELECT other, unnest(['a', 'b']) AS name, unnest([a, b]) AS value FROM src)
    WHERE value IS NOT NULL

Result names and types come from DuckDB binding the original PIVOT (over empty tables), so they are
DuckDB's exactly. A form not rewritten here (several value columns or expressions in an UNPIVOT's ON
list, a PIVOT over tuples, aggregates with their own FILTER) stays as it is and runs
on one rank (the fallback says so). Each rewrite is said in a plan note.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sqlglot import exp

from squall.driver.frontend.bind import Binder, parse
from squall.driver.frontend.pivot_values import DIALECT, ctes_at, in_list, with_ctes
from squall.errors import SquallError


@dataclass(frozen=True)
class Rewritten:
    """The query with its PIVOTs/UNPIVOTs as plain SQL, and one note per rewrite."""

    sql: str
    notes: tuple[str, ...] = ()


class _Keep(Exception):
    """This PIVOT keeps its form (it runs on one rank)."""


def plain_pivots(sql: str, binder: Binder) -> Rewritten:
    """``sql`` with every PIVOT/UNPIVOT that has IN lists as a grouped filtered aggregate / an unnest."""
    if "pivot" not in sql.lower():
        return Rewritten(sql)
    try:
        ast: exp.Expr = parse(sql)
    except SquallError:
        return Rewritten(sql)
    pivots = sorted(ast.find_all(exp.Pivot), key=lambda p: -p.depth)  # innermost first
    if not pivots:
        return Rewritten(sql)
    before = binder.bind(sql)  # the user's own errors, on the user's own text
    notes: list[str] = []
    for pivot in pivots:
        try:
            old, new, note = _rewrite(pivot, binder)
        except (_Keep, SquallError):
            continue
        if old is ast:
            ast = new
        else:
            old.replace(new)
        notes.append(note)
    if not notes:
        return Rewritten(sql)
    text = ast.sql(DIALECT)
    try:  # a safety net: the rewritten query binds to exactly DuckDB's names and types, else it is not used
        after = binder.bind(text)
    except SquallError:
        return Rewritten(sql)
    if (after.names, after.types) != (before.names, before.types):
        return Rewritten(sql)
    return Rewritten(text, tuple(notes))


def _bind(query: exp.Expr, ctes: exp.With | None, binder: Binder) -> tuple[str, ...]:
    """DuckDB's result names of ``query`` (with the CTEs visible where it stands)."""
    text = with_ctes(query.copy(), ctes).sql(DIALECT) if isinstance(query, exp.Query) else query.sql(DIALECT)
    return binder.bind(text).names


def _rewrite(pivot: exp.Pivot, binder: Binder) -> tuple[exp.Expr, exp.Expr, str]:
    """(the node to replace, its plain SQL, the note)."""
    statement = pivot.this is not None and not pivot.args.get("fields")
    ctes = ctes_at(pivot)
    if statement:
        holder: exp.Expr = pivot
        source = pivot.this.copy()
        original: exp.Expression = pivot.copy()
        if isinstance(original, exp.Pivot):
            original.set("with_", None)
            original = exp.select("*").from_(exp.Subquery(this=original))
    else:
        if pivot.parent is None:
            raise _Keep
        holder = pivot.parent
        if not isinstance(holder, (exp.Table, exp.Subquery)) or len(holder.args.get("pivots") or []) != 1:
            raise _Keep
        source = holder.copy()
        source.set("pivots", None)
        original = exp.select("*").from_(holder.copy())
    names = _bind(original, ctes, binder)
    if pivot.args.get("unpivot"):
        select, note = _unpivot(pivot, statement, source, names, ctes, binder)
    else:
        select, note = _pivot(pivot, statement, source, names)
    own = pivot.args.get("with_")
    if statement and isinstance(own, exp.With):
        select.set("with_", own.copy())
    if statement:
        return holder, select, note
    alias = pivot.args.get("alias")
    return holder, exp.Subquery(this=select, alias=alias.copy() if alias is not None else None), note


def _quoted(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def _unaliased(e: exp.Expression) -> exp.Expression:
    return e.this if isinstance(e, (exp.Alias, exp.PivotAlias)) else e


def _pivot(
    pivot: exp.Pivot, statement: bool, source: exp.Expression, names: tuple[str, ...]
) -> tuple[exp.Select, str]:
    ons = list(pivot.expressions if statement else pivot.args.get("fields") or [])
    if not ons:
        raise _Keep
    aggs = list(pivot.args.get("using") or [] if statement else pivot.expressions)
    aggs = [_unaliased(a) for a in aggs] or [exp.Count(this=exp.Star(), big_int=True)]
    for a in aggs:
        if not isinstance(a, exp.Func) or a.find(exp.Filter, exp.Window) is not None:
            raise _Keep
    lists: list[list[tuple[exp.Expression, exp.Expression]]] = []
    for on in ons:
        if not in_list(on) or isinstance(on.this, exp.Tuple):
            raise _Keep
        target = exp.Cast(this=exp.Paren(this=on.this.copy()), to=exp.DataType.build("VARCHAR"))
        lists.append(
            [
                (target, exp.Cast(this=_unaliased(v).copy(), to=exp.DataType.build("VARCHAR")))
                for v in on.expressions
            ]
        )
    combos = list(itertools.product(*lists))
    k = len(names) - len(combos) * len(aggs)
    if k < 0:
        raise _Keep
    out: list[exp.Expr] = [_quoted(n) for n in names[:k]]
    i = k
    for combo in combos:
        cond = exp.and_(*(exp.NullSafeEQ(this=t.copy(), expression=v.copy()) for t, v in combo))
        for agg in aggs:
            filtered = exp.Filter(this=agg.copy(), expression=exp.Where(this=cond.copy()))
            out.append(exp.alias_(filtered, exp.to_identifier(names[i], quoted=True)))
            i += 1
    select = exp.select(*out).from_(source)
    if k:
        select = select.group_by(*(_quoted(n) for n in names[:k]))
    note = f"PIVOT as a grouped aggregate: one FILTER per value column ({len(combos) * len(aggs)} columns)"
    return select, note


def _unpivot(
    pivot: exp.Pivot,
    statement: bool,
    source: exp.Expression,
    names: tuple[str, ...],
    ctes: exp.With | None,
    binder: Binder,
) -> tuple[exp.Select, str]:
    if statement:
        columns = list(pivot.expressions)
        into = pivot.args.get("into")
        values = list(into.expressions) if into is not None else [None]
    else:
        fields = pivot.args.get("fields") or []
        if len(fields) != 1 or not isinstance(fields[0], exp.In):
            raise _Keep
        columns = list(fields[0].expressions)
        values = list(pivot.expressions)
    if len(values) != 1 or not columns:
        raise _Keep
    available = _bind(exp.select("*").from_(source.copy()), ctes, binder)
    if len(columns) == 1 and isinstance(columns[0], (exp.Columns, exp.Star)):
        # ON COLUMNS(…) / ON *: the source columns DuckDB did not keep, in the source's order
        kept = set(names[:-2])
        on = [n for n in available if n not in kept]
    elif all(isinstance(c, exp.Column) and not c.table for c in columns):
        by_lower = {n.lower(): n for n in available}
        picked = [by_lower.get(c.name.lower()) for c in columns]
        if None in picked or len(set(picked)) != len(picked):
            raise _Keep
        on = [str(p) for p in picked]
    else:
        raise _Keep
    others = [n for n in available if n not in on]
    if not on:
        raise _Keep
    if tuple(others) != names[:-2] or len(names) != len(others) + 2:
        raise _Keep
    name_col, value_col = names[-2], names[-1]
    select = exp.select(
        *(_quoted(n) for n in others),
        exp.alias_(
            exp.Unnest(expressions=[exp.Array(expressions=[exp.Literal.string(n) for n in on])]),
            exp.to_identifier(name_col, quoted=True),
        ),
        exp.alias_(
            exp.Unnest(expressions=[exp.Array(expressions=[_quoted(n) for n in on])]),
            exp.to_identifier(value_col, quoted=True),
        ),
    ).from_(source)
    if not pivot.args.get("include_nulls"):
        select = (
            exp.select("*")
            .from_(exp.Subquery(this=select))
            .where(exp.Not(this=exp.Is(this=_quoted(value_col), expression=exp.Null())))
        )
    return select, f"UNPIVOT as an unnest of {len(on)} columns"
