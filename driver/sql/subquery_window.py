"""A correlated ``AVG``/``MIN``/``MAX`` subquery over the outer query's own rows as a window over them
(WinMagic, Zuzarte et al., SIGMOD 2003): the tables are read and joined once instead of once for the outer
query and once more for the subquery (TPC-DS Q32, Q92: each row compared with its item's average)::

    >>> import sqlglot
    >>> q = ("SELECT sum(s.x) AS t FROM s AS s, d AS d WHERE d.k = s.k AND d.c = 1 AND s.x > "
    ...      "(SELECT 2 * avg(s.x) FROM s AS s WHERE s.k = d.k)")
    >>> print(apply(sqlglot.parse_one(q, read="duckdb"), None).sql("duckdb"))
    SELECT SUM(__squall_wm.x) AS t FROM (SELECT s.x AS x, AVG(s.x) OVER (PARTITION BY d.k) AS __squall_w FROM s AS s, d AS d WHERE d.k = s.k AND d.c = 1) AS __squall_wm WHERE __squall_wm.x > 2 * __squall_wm.__squall_w

The same rows, whenever

- the outer query is a plain ``SELECT`` over a comma list of tables (no explicit JOIN, no other subquery) whose
  WHERE holds the subquery once, compared with an expression of its columns;
- the subquery is ``SELECT f(AGG(e)) FROM <tables> WHERE <conjuncts>``: one ``AVG``, ``MIN`` or ``MAX`` (not
  DISTINCT, no FILTER), ``f`` reading nothing else; each of its tables is the one outer table of that name
  (*mapped*), the other outer tables are *extra*;
- its conjuncts, the mapped tables renamed as the outer query calls them, are all outer conjuncts; the outer
  conjuncts it lacks read extra tables only; and the subquery reads the outer query only through equalities
  between a mapped column and an extra column (the correlation).

Then the outer rows with one value ``v`` of the correlation's extra columns are the mapped rows the subquery
reads for ``v`` (its conjuncts on mapped tables are the outer ones), each joined with every extra row of ``v``:
the subquery's rows each repeated as often, which changes no average, minimum or maximum. So the aggregate
``OVER (PARTITION BY`` the extra columns``)`` of each outer row is the subquery's value for it. ``SUM`` and
``COUNT`` would count the repeats: not rewritten. The outer query's columns are read from a derived table under
their own names (so a column selected without an alias keeps its name): two outer columns of one name, not
rewritten.
"""

from __future__ import annotations

from typing import cast

from sqlglot import exp

from squall.driver.sql.context import SqlContext

NAME = "subquery_window"
#: aggregates whose value over rows each repeated k times is their value over the rows once
_REPEAT_PROOF = (exp.Avg, exp.Min, exp.Max)
_COMPARISONS = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ, exp.NEQ)
#: what the outer SELECT may hold besides these (anything else set: not rewritten)
_OUTER_ARGS = frozenset(
    {"expressions", "from_", "joins", "where", "group", "having", "order", "limit", "kind", "hint"}
)
_INNER_ARGS = frozenset({"expressions", "from_", "joins", "where", "kind", "hint"})
DERIVED = "__squall_wm"
WINDOW = "__squall_w"


def apply(ast: exp.Expression, context: SqlContext | None) -> exp.Expression:
    if ast.find(exp.Subquery) is None:
        return ast
    for sel in list(ast.find_all(exp.Select)):
        rewritten = _rewritten(sel)
        if rewritten is None:
            continue
        if sel is ast:
            ast = rewritten
        else:
            sel.replace(rewritten)
        if context is not None:
            context.notes.append(
                "a correlated subquery's aggregate over the outer query's own rows computed as a window over "
                "them (the tables are read once)"
            )
    return ast


def _tables(sel: exp.Select) -> dict[str, str] | None:
    """alias → table name of a SELECT's comma list of plain tables; None for anything else."""
    from_ = sel.args.get("from_")
    items = [from_.this] if from_ is not None else []
    for join in sel.args.get("joins") or []:
        if join.args.get("on") or join.args.get("using") or join.args.get("kind") or join.args.get("side"):
            return None
        items.append(join.this)
    out: dict[str, str] = {}
    for item in items:
        if not isinstance(item, exp.Table) or item.args.get("db") or not item.alias_or_name:
            return None
        out[item.alias_or_name] = item.name
    return out if len(out) == len(items) and items else None


def _conjuncts(where: exp.Where | None) -> list[exp.Expression]:
    if where is None:
        return []
    if isinstance(where.this, exp.And):
        return [c for c in where.this.flatten() if isinstance(c, exp.Expression)]
    return [where.this]


def _text(c: exp.Expression) -> str:
    """A conjunct as compared: its SQL, an equality's two sides in sorted order."""
    if isinstance(c, exp.EQ):
        return " = ".join(sorted((c.this.sql("duckdb"), c.expression.sql("duckdb"))))
    return c.sql("duckdb")


def _aliases(e: exp.Expression) -> set[str]:
    return {c.table for c in e.find_all(exp.Column)}


def _rewritten(sel: exp.Select) -> exp.Select | None:
    """``sel`` with its one correlated subquery as a window (see the module doc), or None."""
    if set(k for k, v in sel.args.items() if v) - _OUTER_ARGS or sel.args.get("distinct"):
        return None
    outer = _tables(sel)
    if outer is None:
        return None
    conjuncts = _conjuncts(sel.args.get("where"))
    holding = [c for c in conjuncts if c.find(exp.Subquery) is not None]
    if len(holding) != 1 or not isinstance(holding[0], _COMPARISONS):
        return None
    comparison = holding[0]
    sub = comparison.expression if isinstance(comparison.expression, exp.Subquery) else comparison.this
    if not isinstance(sub, exp.Subquery) or not isinstance(sub.this, exp.Select):
        return None
    if any(
        s is not sub.this and s.find_ancestor(exp.Subquery) is not sub
        for s in sel.find_all(exp.Select)
        if s is not sel
    ):
        return None  # another subquery
    rest = [c for c in conjuncts if c is not comparison]
    if any(not _aliases(c) <= set(outer) for c in rest):
        return None  # a condition on an enclosing query's columns (it would move into a derived table)
    found = _window(sub.this, outer, rest)
    if found is None:
        return None
    window, value = found
    return _wrapped(sel, outer, rest, comparison, sub, value, window)


def _window(
    inner: exp.Select, outer: dict[str, str], outer_conjuncts: list[exp.Expression]
) -> tuple[exp.Expression, exp.Expression] | None:
    """(the aggregate as a window over the outer rows, the subquery's select expression with the window's
    column in place of the aggregate), or None when the subquery is not one this rule rewrites."""
    if set(k for k, v in inner.args.items() if v) - _INNER_ARGS or inner.args.get("distinct"):
        return None
    tables = _tables(inner)
    if tables is None or len(inner.expressions) != 1:
        return None
    by_name: dict[str, list[str]] = {}
    for alias, name in outer.items():
        by_name.setdefault(name, []).append(alias)
    rename: dict[str, str] = {}
    for alias, name in tables.items():
        if len(by_name.get(name, [])) != 1:
            return None
        rename[alias] = by_name[name][0]
    mapped = set(rename.values())
    if len(mapped) != len(rename):
        return None
    extra = set(outer) - mapped
    item = inner.expressions[0]
    item = item.this if isinstance(item, exp.Alias) else item
    if item.find(exp.Filter, exp.Window, exp.Subquery) is not None:
        return None  # a FILTER or OVER around the aggregate, a subquery in it
    aggs = list(item.find_all(exp.AggFunc))
    if len(aggs) != 1 or not isinstance(aggs[0], _REPEAT_PROOF) or aggs[0].find(exp.Distinct, exp.Filter):
        return None
    agg = aggs[0]
    if any(c.find_ancestor(exp.AggFunc) is not agg for c in item.find_all(exp.Column)):
        return None  # f() reads a column outside the aggregate
    if any(a not in tables for a in _aliases(agg)) or agg.find(exp.Subquery, exp.Window):
        return None

    def renamed(e: exp.Expression) -> exp.Expression:
        def swap(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and n.table in rename:
                return exp.column(n.name, rename[n.table])
            return n

        return e.copy().transform(swap)

    inner_conjuncts = _conjuncts(inner.args.get("where"))
    partition: dict[str, exp.Expression] = {}
    for c in inner_conjuncts:
        if c.find(exp.Subquery) is not None:
            return None
        reads = _aliases(c)
        outside = reads - set(tables)
        if outside - extra:
            return None  # it reads an outer table the subquery also ranges over
        if outside:  # the correlation: mapped column = extra column
            sides = (c.this, c.expression) if isinstance(c, exp.EQ) else ()
            cols = [s for s in sides if isinstance(s, exp.Column)]
            if len(cols) != 2 or {cols[0].table in tables, cols[1].table in tables} != {True, False}:
                return None
            extra_col = cols[0] if cols[0].table not in tables else cols[1]
            partition[extra_col.sql("duckdb")] = extra_col.copy()
    if not partition:
        return None
    texts = {_text(c) for c in outer_conjuncts}
    mapped_texts = {_text(renamed(c)) for c in inner_conjuncts}
    if not mapped_texts <= texts:
        return None
    for c in outer_conjuncts:
        if _text(c) not in mapped_texts and _aliases(c) & mapped:
            return None  # an outer condition on the mapped tables the subquery does not have
    window = exp.Window(this=renamed(agg), partition_by=list(partition.values()))
    value = item.copy()
    placeholder = exp.column(WINDOW, DERIVED)
    value = placeholder if value is agg else value.transform(lambda n: placeholder.copy() if n == agg else n)
    return window, value


def _wrapped(
    sel: exp.Select,
    outer: dict[str, str],
    rest: list[exp.Expression],
    comparison: exp.Expression,
    sub: exp.Subquery,
    value: exp.Expression,
    window: exp.Expression,
) -> exp.Select | None:
    """``sel`` reading its rows, with the window, from a derived table of its FROM and its other conjuncts."""
    names: dict[str, tuple[str, str]] = {}
    out = sel.copy()
    out.set("where", None)
    columns = [c for c in out.find_all(exp.Column) if c.table in outer]
    other = (comparison.this if sub is comparison.expression else comparison.expression).copy()
    columns += [c for c in other.find_all(exp.Column) if c.table in outer]
    if any(c.table not in outer for c in out.find_all(exp.Column) if c.table and c.table != DERIVED):
        return None
    for c in columns:
        if names.setdefault(c.name, (c.table, c.name)) != (c.table, c.name) or c.name == WINDOW:
            return None  # two outer columns of one name
    derived = exp.Select(
        expressions=[exp.alias_(exp.column(n, t), n) for t, n in names.values()]
        + [exp.alias_(window, WINDOW)]
    )
    derived.set("from_", sel.args["from_"].copy())
    if sel.args.get("joins"):
        derived.set("joins", [j.copy() for j in sel.args["joins"]])
    if rest:
        derived.set("where", exp.Where(this=exp.and_(*[c.copy() for c in rest])))

    def to_derived(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and n.table in outer:
            return exp.column(n.name, DERIVED)
        return n

    out = cast(exp.Select, out.transform(to_derived))
    other = other.transform(to_derived)
    out.set(
        "from_",
        exp.From(this=exp.Subquery(this=derived, alias=exp.TableAlias(this=exp.to_identifier(DERIVED)))),
    )
    out.set("joins", None)
    left, right = (other, value) if sub is comparison.expression else (value, other)
    out.set("where", exp.Where(this=type(comparison)(this=left, expression=right)))
    return out
