"""``LATERAL (subquery)`` in FROM, decorrelated into plain SQL the distributed planner knows.

A lateral subquery runs once per row of the FROM items before it. When its outer references sit in top-level
``WHERE`` conjuncts (and, without aggregates, in select items), one uncorrelated subquery gives the same rows:

- **no aggregate** (``LATERAL (SELECT s_name FROM supplier WHERE s_nationkey = n_nationkey)``): the
  correlated conjuncts become the join's condition; the inner columns they read become extra (hidden)
  outputs of the subquery. A ``LEFT JOIN LATERAL … ON c`` stays a left join, on ``c`` and those conjuncts.
  A select item that reads the outer row is computed after the join from hidden inner columns (NULL for a
  left join's missing match, as the lateral gives).
- **GROUP BY** with equality correlation (``inner = outer``): the inner sides join the GROUP BY and the
  output, and the join matches them to the outer sides (one group per outer value, as per row).
- **an aggregate without GROUP BY** (one row per outer row): with equalities and bare aggregates, a left join
  of its groups by the inner sides, ``COUNT`` read as 0 for an outer row without a group (the others are NULL
  over no rows, as a missing group reads); else each output column is the same subquery as a correlated
  scalar subquery where it is read, which the translator decorrelates (``driver/logical/decorrelate/subqueries.py``).

- **LIMIT/OFFSET, DISTINCT or windows** with equality correlation only (``inner = outer``): the rows of one outer
  row are the inner rows of one key, so the key (the inner side, whole) joins the output — DISTINCT keeps it,
  each window is also partitioned by it, and LIMIT/OFFSET keep the rows numbered per key
  (``row_number() OVER (PARTITION BY key ORDER BY …)``, the lateral's own ORDER BY) in range: top-N per outer row.
- **no outer reference at all**: a plain subquery.

DuckDB's implicit lateral (a FROM subquery that reads an earlier FROM item without the keyword) is marked
``LATERAL`` first (``mark_implicit_laterals``). Other forms (LIMIT/DISTINCT/windows with a non-equality
correlation, outer references in a nested subquery, GROUP BY or ORDER BY, laterals over set operations) stay as
they are: the one-rank fallback answers them, and says so.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from squall.driver.ir.exprs import conjuncts, from_items, inner_aliases, set_where

HIDDEN = "__lat"


def decorrelate_laterals(
    sel: exp.Select, has_aggregate: Callable[[exp.Expression], bool]
) -> tuple[exp.Select, list[str]]:
    """``sel`` with each lateral subquery it can rewrite rewritten (a copy when any), and one note per rewrite."""
    joins = sel.args.get("joins") or []
    if not any(_lateral_body(j.this) is not None for j in joins):
        return sel, []
    sel = sel.copy()
    notes: list[str] = []
    hidden = 0
    for j in list(sel.args.get("joins") or []):
        body = _lateral_body(j.this)
        if body is None:
            continue
        alias = j.this.args.get("alias")
        name = alias.name if alias is not None else ""
        outer = _aliases_before(sel, j) - inner_aliases(body)  # an inner alias hides an outer one
        aggregating = any(has_aggregate(p) for p in body.expressions)
        plain = not aggregating and body.args.get("group") is None
        found = _correlated(body, outer, select_list=plain)
        if not name or found is None:
            continue
        corr, lifted = found
        _names_into_body(body, alias)
        side = (j.side or "").lower()
        on = [c for c in conjuncts(j.args.get("on")) if c != exp.true()]
        if not corr and not lifted:  # reads nothing of the outer row: a plain subquery
            j.set("this", exp.Subquery(this=body, alias=alias))
            notes.append(f"LATERAL {name}: reads no outer column, a plain subquery")
            continue
        ranked = _ranked(body)
        if ranked:
            if side not in ("", "inner", "cross", "left") or not _rankable(
                body, corr, lifted, outer, aggregating
            ):
                continue
            keys = ", ".join(c.sql("duckdb") for c in corr)
            hidden = _rewrite_ranked(j, body, corr, on, outer, alias, hidden)
            notes.append(
                f"LATERAL {name}: {ranked} per outer row, decorrelated into a join on {keys} (per key)"
            )
            continue
        if body.args.get("group") is None and aggregating:
            if side not in ("", "inner", "cross") and not (side == "left" and not on):
                continue
            if all(_equality(c, outer) for c in corr) and _rewrite_as_grouped_join(
                sel, j, body, corr, on, outer
            ):
                notes.append(
                    f"LATERAL {name}: one row per outer row, decorrelated into a left join of its groups by "
                    + ", ".join(c.sql("duckdb") for c in corr)
                )
            elif _rewrite_as_scalars(sel, j, body, name, on):
                notes.append(f"LATERAL {name}: one row per outer row, decorrelated as scalar subqueries")
            continue
        if side not in ("", "inner", "cross", "left"):
            continue
        if body.args.get("group") is not None and not all(_equality(c, outer) for c in corr):
            continue
        if lifted:
            hidden = _lift(sel, j, body, lifted, on, outer, alias, hidden)
        hidden = _rewrite_as_join(j, body, corr, on, outer, alias, hidden)
        how = f"a join on {', '.join(c.sql('duckdb') for c in corr)}" if corr else "a cross join"
        lift = f" ({len(lifted)} output(s) that read the outer row computed after it)" if lifted else ""
        notes.append(f"LATERAL {name}: decorrelated into {how}{lift}")
    return sel, notes


def _names_into_body(body: exp.Select, alias: exp.TableAlias) -> None:
    """``LATERAL (SELECT a, b …) AS s(x, y)``: the names x, y given to the select items themselves."""
    if alias.columns and len(alias.columns) == len(body.expressions):
        for item, name in zip(list(body.expressions), alias.columns):
            item.replace(exp.alias_(item.this if isinstance(item, exp.Alias) else item, name.name))
        alias.set("columns", None)


def _lateral_body(item: exp.Expression) -> exp.Select | None:
    if isinstance(item, exp.Lateral) and isinstance(item.this, exp.Subquery):
        body = item.this.this
        if isinstance(body, exp.Select) and not any(
            body.args.get(k) for k in ("qualify", "with_", "windows")
        ):
            return body
    return None


def _own_windows(body: exp.Select) -> list[exp.Window]:
    return [w for w in body.find_all(exp.Window) if w.find_ancestor(exp.Select) is body]


def _ranked(body: exp.Select) -> str:
    """What makes ``body``'s rows depend on the set of rows per outer row (LIMIT, DISTINCT, windows), or ""."""
    said = [k.upper() for k in ("limit", "offset", "distinct") if body.args.get(k) is not None]
    return ", ".join(said + (["windows"] if _own_windows(body) else []))


def _literal_count(clause: exp.Expression | None) -> int | None:
    """A LIMIT/OFFSET clause's row count when it is an integer literal (0 when there is no clause)."""
    if clause is None:
        return 0
    e = clause.expression if isinstance(clause, (exp.Limit, exp.Offset)) else clause
    return int(e.name) if isinstance(e, exp.Literal) and e.is_int else None


def _rankable(
    body: exp.Select, corr: list[exp.Expression], lifted: list[int], outer: set[str], aggregating: bool
) -> bool:
    """A LIMIT/DISTINCT/window lateral that one join gives: correlated by equalities only (the rows of an outer
    row are one group of the inner sides), no select item reading the outer row, no one-row aggregate, literal
    LIMIT/OFFSET, no DISTINCT ON, and under DISTINCT an ORDER BY on select items only."""
    if not corr or lifted or (aggregating and body.args.get("group") is None):
        return False
    if not all(_equality(c, outer) for c in corr):
        return False
    distinct = body.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        return False
    if _literal_count(body.args.get("limit")) is None or _literal_count(body.args.get("offset")) is None:
        return False
    if distinct is not None and body.args.get("limit") is not None:
        order = body.args.get("order")
        return all(_output_of(body, o.this) is not None for o in (order.expressions if order else []))
    return True


def _output_of(body: exp.Select, e: exp.Expression) -> str | None:
    """The output name of ``body`` that ``e`` (an ORDER BY expression) is: a select alias or a select item."""
    names = [p.alias_or_name for p in body.expressions]
    if isinstance(e, exp.Column) and not e.table and e.name in names:
        return e.name
    for p, n in zip(body.expressions, names):
        if (p.this if isinstance(p, exp.Alias) else p) == e:
            return n
    return None


def _rewrite_ranked(
    j: exp.Join,
    body: exp.Select,
    corr: list[exp.Expression],
    on: list[exp.Expression],
    outer: set[str],
    alias: exp.TableAlias,
    hidden: int,
) -> int:
    """A lateral with LIMIT/OFFSET, DISTINCT or windows, correlated by ``inner = outer`` equalities: the rows of
    one outer row are the inner rows of one key, so the key joins the output (kept by DISTINCT), each window is
    also partitioned by it, and LIMIT/OFFSET keep the rows numbered per key (``row_number() OVER (PARTITION BY
    key ORDER BY …)``) in range."""
    keys = [(c.expression if _outer_on_left(c, outer) else c.this).copy() for c in corr]
    for w in _own_windows(body):
        w.set("partition_by", [*(w.args.get("partition_by") or []), *(k.copy() for k in keys)])
    limit, offset = _literal_count(body.args.get("limit")), _literal_count(body.args.get("offset"))
    has_limit = body.args.get("limit") is not None
    order = body.args.get("order")
    numbered = has_limit or body.args.get("offset") is not None
    for k in ("limit", "offset", "order"):
        body.set(k, None)
    first = hidden
    hidden = _rewrite_as_join(j, body, corr, on, outer, alias, hidden, keyed=True)
    if not numbered:
        return hidden
    inner = f"{HIDDEN}b"
    key_names = [f"{HIDDEN}{i}" for i in range(first + 1, hidden + 1)]
    ordered = []
    for o in order.expressions if order is not None else []:
        out = _output_of(body, o.this)
        if out is None:  # an ORDER BY on what the select list does not give: a hidden output
            ref, hidden = _expose(body, o.this, inner, hidden)
            out = ref.name
        ordered.append(o.copy())
        ordered[-1].set("this", exp.column(out, table=inner))
    hidden += 1
    rn = f"{HIDDEN}{hidden}"
    window = exp.Window(
        this=exp.RowNumber(),
        partition_by=[exp.column(k, table=inner) for k in key_names],
        order=exp.Order(expressions=ordered) if ordered else None,
        over="OVER",
    )
    names = [p.alias_or_name for p in body.expressions]
    numbering = exp.select(*(exp.column(n, table=inner) for n in names), exp.alias_(window, rn)).from_(
        exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(inner)))
    )
    numbered_rows = f"{HIDDEN}r"
    bounds: list[exp.Expression] = []
    if offset:
        bounds.append(exp.column(rn, table=numbered_rows) > exp.Literal.number(offset))
    if has_limit:
        bounds.append(exp.column(rn, table=numbered_rows) <= exp.Literal.number((offset or 0) + (limit or 0)))
    in_range = (
        exp.select(*(exp.column(n, table=numbered_rows) for n in names))
        .from_(exp.Subquery(this=numbering, alias=exp.TableAlias(this=exp.to_identifier(numbered_rows))))
        .where(exp.and_(*bounds))
    )
    j.this.set("this", in_range)
    return hidden


def _aliases_before(sel: exp.Select, join: exp.Join) -> set[str]:
    items = from_items(sel)
    here = next(i for i, item in enumerate(items) if item is join.this)
    return {item.alias_or_name for item in items[:here]}


def _readers(sel: exp.Select, join: exp.Join, *more: exp.Expression) -> list[exp.Expression]:
    """What in ``sel`` may read the lateral ``join``'s columns: the select list, the other joins, WHERE,
    GROUP BY, HAVING, ORDER BY … (not the FROM clause), and ``more``."""
    rest = [x for x in sel.args.get("joins") or [] if x is not join]
    clauses = [
        a
        for k, a in sel.args.items()
        if k not in ("expressions", "joins", "from_") and isinstance(a, exp.Expression)
    ]
    return [*sel.expressions, *rest, *more, *clauses]


def _expose(
    body: exp.Select, inner: exp.Expression, name: str, hidden: int, grouped: bool = False
) -> tuple[exp.Column, int]:
    """``inner`` as the next hidden output of ``body`` (and a GROUP BY key when ``grouped``): the outer
    query's reference to it, and the hidden count."""
    hidden += 1
    out = f"{HIDDEN}{hidden}"
    body.append("expressions", exp.alias_(inner.copy(), out))
    if grouped:
        body.args["group"].append("expressions", inner.copy())
    return exp.column(out, table=name), hidden


def _correlated(
    body: exp.Select, outer: set[str], select_list: bool
) -> tuple[list[exp.Expression], list[int]] | None:
    """The WHERE conjuncts of ``body`` that read ``outer`` aliases and (``select_list``: a body without
    aggregates) the positions of select items that do; None if an outer reference is anywhere else."""
    where = conjuncts(body.args.get("where"))
    corr = [c for c in where if any(col.table in outer for col in c.find_all(exp.Column))]
    lifted = [
        i for i, p in enumerate(body.expressions) if any(col.table in outer for col in p.find_all(exp.Column))
    ]
    if lifted and not select_list:
        return None
    for e in (*corr, *(body.expressions[i] for i in lifted)):
        if e.find(exp.Subquery, exp.Exists, exp.Window) is not None:
            return None
    refs = [col for col in body.find_all(exp.Column) if col.table in outer]
    seen = [col for e in (*corr, *(body.expressions[i] for i in lifted)) for col in e.find_all(exp.Column)]
    if sum(1 for col in seen if col.table in outer) != len(refs):
        return None  # an outer reference elsewhere (a nested subquery, GROUP BY, ORDER BY)
    return corr, lifted


def _lift(
    sel: exp.Select,
    j: exp.Join,
    body: exp.Select,
    lifted: list[int],
    on: list[exp.Expression],
    outer: set[str],
    alias: exp.TableAlias,
    hidden: int,
) -> int:
    """Select items of ``body`` that read the outer row, computed in ``sel`` from hidden inner columns; the
    item itself becomes NULL. Under a left join a missing match reads NULL (a hidden TRUE marks a match)."""
    name = alias.name
    names = [p.alias_or_name for p in body.expressions]
    marker = None
    if (j.side or "").lower() == "left":
        marker, hidden = _expose(body, exp.true(), name, hidden)
    computed: dict[str, exp.Expression] = {}
    for i in lifted:
        item = body.expressions[i]
        e = (item.this if isinstance(item, exp.Alias) else item).copy()
        for col in [c for c in e.find_all(exp.Column) if c.table not in outer]:
            ref, hidden = _expose(body, col, name, hidden)
            col.replace(ref)
        if marker is not None:
            e = exp.Case(ifs=[exp.If(this=marker.copy(), true=e)])
        computed[names[i]] = exp.paren(e, copy=False)
        body.expressions[i].replace(exp.alias_(exp.null(), names[i]))
    readers = _readers(sel, j, *on)
    for col in [c for r in readers for c in r.find_all(exp.Column) if c.table == name and c.name in computed]:
        col.replace(computed[col.name].copy())
    return hidden


def _equality(c: exp.Expression, outer: set[str]) -> bool:
    if not isinstance(c, exp.EQ):
        return False
    sides = [{col.table in outer for col in side.find_all(exp.Column)} for side in (c.this, c.expression)]
    return sorted(map(tuple, sides)) == [(False,), (True,)]


def _without(body: exp.Select, corr: list[exp.Expression]) -> None:
    keep = [c for c in conjuncts(body.args.get("where")) if not any(c is k for k in corr)]
    set_where(body, keep)


def _rewrite_as_join(
    j: exp.Join,
    body: exp.Select,
    corr: list[exp.Expression],
    on: list[exp.Expression],
    outer: set[str],
    alias: exp.TableAlias,
    hidden: int,
    keyed: bool = False,
) -> int:
    """The lateral ``j`` as a join of ``body`` on ``on`` and ``corr``, each inner side of a correlated conjunct
    a hidden output. Grouped or ``keyed`` (``inner = outer`` equalities): the inner side of each, whole (one
    hidden output per conjunct, in order; grouped by when grouped); else each inner column."""
    name = alias.name
    grouped = body.args.get("group") is not None
    conditions = []
    for c in corr:
        c = c.copy()
        inners = (
            [c.expression if _outer_on_left(c, outer) else c.this]
            if grouped or keyed
            else [x for x in c.find_all(exp.Column) if x.table not in outer]
        )
        for inner in inners:
            ref, hidden = _expose(body, inner, name, hidden, grouped)
            inner.replace(ref)
        conditions.append(c)
    _without(body, corr)
    j.set("this", exp.Subquery(this=body, alias=alias))
    j.set("on", exp.and_(*on, *conditions) if on or conditions else None)
    if (j.kind or "").lower() == "cross":
        j.set("kind", None)
    return hidden


def _outer_on_left(c: exp.Expression, outer: set[str]) -> bool:
    return any(col.table in outer for col in c.this.find_all(exp.Column))


#: aggregates whose value over no rows is 0 (the others here give NULL, as a left join's missing group does)
_ZERO_ON_EMPTY = (exp.Count,)
_NULL_ON_EMPTY = (
    exp.Sum,
    exp.Min,
    exp.Max,
    exp.Avg,
    exp.Stddev,
    exp.StddevPop,
    exp.StddevSamp,
    exp.Variance,
    exp.VariancePop,
    exp.AnyValue,
)


def _rewrite_as_grouped_join(
    sel: exp.Select,
    j: exp.Join,
    body: exp.Select,
    corr: list[exp.Expression],
    on: list[exp.Expression],
    outer: set[str],
) -> bool:
    """An aggregate without GROUP BY correlated by equalities: a LEFT JOIN of its groups by the inner sides;
    a missing group reads as the aggregate over no rows (COUNT 0, the others NULL). Only bare aggregates."""
    if on:
        return False
    items = [p.this if isinstance(p, exp.Alias) else p for p in body.expressions]
    if not all(isinstance(i, _ZERO_ON_EMPTY + _NULL_ON_EMPTY) and not i.args.get("filter") for i in items):
        return False
    alias = j.this.args.get("alias")
    name = alias.name
    names = [p.alias_or_name for p in body.expressions]
    zero = {n for n, i in zip(names, items) if isinstance(i, _ZERO_ON_EMPTY)}
    readers = _readers(sel, j)
    for col in [c for r in readers for c in r.find_all(exp.Column) if c.table == name and c.name in zero]:
        col.replace(exp.func("coalesce", col.copy(), exp.Literal.number(0)))
    body.set("group", exp.Group())
    _rewrite_as_join(j, body, corr, [], outer, alias, 0)
    j.set("side", "LEFT")
    j.set("kind", None)
    return True


def _rewrite_as_scalars(
    sel: exp.Select, j: exp.Join, body: exp.Select, name: str, on: list[exp.Expression]
) -> bool:
    outputs: dict[str, exp.Expression] = {}
    for p in body.expressions:
        if isinstance(p, exp.Star):
            return False
        out = p.alias_or_name
        scalar = body.copy()
        scalar.set("expressions", [p.this.copy() if isinstance(p, exp.Alias) else p.copy()])
        outputs[out] = exp.Subquery(this=scalar)
    refs = [col for r in _readers(sel, j, *on) for col in r.find_all(exp.Column) if col.table == name]
    if any(col.name not in outputs for col in refs):
        return False
    for col in refs:
        col.replace(outputs[col.name].copy())
    sel.set("joins", [x for x in sel.args["joins"] if x is not j])
    if on:
        where = sel.args.get("where")
        set_where(sel, ([where.this] if where is not None else []) + on)
    return True
