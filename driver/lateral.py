"""``LATERAL (subquery)`` in FROM, decorrelated into plain SQL the distributed planner knows.

A lateral subquery is run once per row of the FROM items before it. When its outer references sit only in
top-level ``WHERE`` conjuncts of the subquery, the same rows come out of one uncorrelated subquery:

- **no aggregate** (``LATERAL (SELECT s_name FROM supplier WHERE s_nationkey = n_nationkey)``): the
  correlated conjuncts move to the join's ON condition; the inner columns they read become extra (hidden)
  outputs of the subquery. A ``LEFT JOIN LATERAL … ON c`` stays a left join, on ``c`` and those conjuncts.
- **GROUP BY** with equality correlation (``inner = outer``): the inner side joins the GROUP BY and the
  output, and the join matches it to the outer side (one group per outer value, as per row).
- **an aggregate without GROUP BY** (one row per outer row, ``count`` 0 over no rows): each output column is
  the same subquery as a correlated scalar subquery in the places that read it, which the translator
  decorrelates (``driver/subqueries.py``: equality keys or a dependent join).

Other forms (LIMIT, DISTINCT, windows or outer references elsewhere in the subquery, laterals over set
operations) stay as they are: the one-rank fallback answers them, and says so.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from squall.driver.scope import conjuncts

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
        outer = _aliases_before(sel, j) - _inner_aliases(body)  # an inner alias hides an outer one
        corr = _correlated_conjuncts(body, outer)
        if not name or corr is None or not corr:
            continue
        side = (j.side or "").lower()
        on = [c for c in conjuncts(j.args.get("on")) if c != exp.true()]
        aggregating = any(has_aggregate(p) for p in body.expressions)
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
        hidden = _rewrite_as_join(j, body, corr, on, outer, alias, hidden)
        notes.append(
            f"LATERAL {name}: decorrelated into a join on {', '.join(c.sql('duckdb') for c in corr)}"
        )
    return sel, notes


def _lateral_body(item: exp.Expression) -> exp.Select | None:
    if isinstance(item, exp.Lateral) and isinstance(item.this, exp.Subquery):
        body = item.this.this
        if (
            isinstance(body, exp.Select)
            and not any(
                body.args.get(k) for k in ("limit", "offset", "distinct", "qualify", "with_", "windows")
            )
            and body.find(exp.Window) is None
        ):
            return body
    return None


def _aliases_before(sel: exp.Select, join: exp.Join) -> set[str]:
    from_ = sel.args.get("from_")
    items = [from_.this] if from_ is not None else []
    for j in sel.args.get("joins") or []:
        if j is join:
            break
        items.append(j.this)
    return {i.alias_or_name for i in items}


def _inner_aliases(body: exp.Select) -> set[str]:
    return {a.name for a in body.find_all(exp.TableAlias)} | {
        t.alias_or_name for t in body.find_all(exp.Table)
    }


def _correlated_conjuncts(body: exp.Select, outer: set[str]) -> list[exp.Expression] | None:
    """The WHERE conjuncts of ``body`` that read ``outer`` aliases; None if an outer reference is elsewhere."""
    where = conjuncts(body.args.get("where"))
    corr = [c for c in where if any(col.table in outer for col in c.find_all(exp.Column))]
    for c in corr:
        if c.find(exp.Subquery, exp.Exists) is not None:
            return None
    refs = [col for col in body.find_all(exp.Column) if col.table in outer]
    if sum(1 for c in corr for col in c.find_all(exp.Column) if col.table in outer) != len(refs):
        return None  # an outer reference outside a top-level WHERE conjunct (select list, nested subquery)
    return corr


def _equality(c: exp.Expression, outer: set[str]) -> bool:
    if not isinstance(c, exp.EQ):
        return False
    sides = [{col.table in outer for col in side.find_all(exp.Column)} for side in (c.this, c.expression)]
    return sorted(map(tuple, sides)) == [(False,), (True,)]


def _without(body: exp.Select, corr: list[exp.Expression]) -> None:
    keep = [c for c in conjuncts(body.args.get("where")) if not any(c is k for k in corr)]
    body.set("where", exp.Where(this=exp.and_(*keep)) if keep else None)


def _rewrite_as_join(
    j: exp.Join,
    body: exp.Select,
    corr: list[exp.Expression],
    on: list[exp.Expression],
    outer: set[str],
    alias: exp.TableAlias,
    hidden: int,
) -> int:
    name = alias.name
    grouped = body.args.get("group") is not None

    def expose(inner: exp.Expression) -> None:
        nonlocal hidden
        hidden += 1
        out = f"{HIDDEN}{hidden}"
        body.append("expressions", exp.alias_(inner.copy(), out))
        if grouped:
            body.args["group"].append("expressions", inner.copy())
        if alias.columns:
            alias.append("columns", exp.to_identifier(out))
        inner.replace(exp.column(out, table=name))

    conditions = []
    for c in corr:
        c = c.copy()
        if grouped:  # inner = outer: the inner side is grouped by and matched
            expose(c.expression if _outer_on_left(c, outer) else c.this)
        else:
            for col in [x for x in c.find_all(exp.Column) if x.table not in outer]:
                expose(col)
        conditions.append(c)
    _without(body, corr)
    j.set("this", exp.Subquery(this=body, alias=alias))
    j.set("on", exp.and_(*on, *conditions))
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
    names = [c.name for c in alias.columns] if alias.columns else [p.alias_or_name for p in body.expressions]
    zero = {n for n, i in zip(names, items) if isinstance(i, _ZERO_ON_EMPTY)}
    rest = [x for x in sel.args["joins"] if x is not j]
    readers = [
        *sel.expressions,
        *rest,
        *(
            a
            for k, a in sel.args.items()
            if k not in ("expressions", "joins", "from_") and isinstance(a, exp.Expression)
        ),
    ]
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
    alias = j.this.args.get("alias")
    renamed = [c.name for c in alias.columns] if alias is not None and alias.columns else None
    outputs: dict[str, exp.Expression] = {}
    for i, p in enumerate(body.expressions):
        if isinstance(p, exp.Star):
            return False
        out = renamed[i] if renamed is not None and i < len(renamed) else p.alias_or_name
        scalar = body.copy()
        scalar.set("expressions", [p.this.copy() if isinstance(p, exp.Alias) else p.copy()])
        outputs[out] = exp.Subquery(this=scalar)
    rest = [x for x in sel.args["joins"] if x is not j]
    where = sel.args.get("where")
    readers = [
        *sel.expressions,
        *rest,
        *on,
        *(
            a
            for k, a in sel.args.items()
            if k not in ("expressions", "joins", "from_") and isinstance(a, exp.Expression)
        ),
    ]
    refs = [col for r in readers for col in r.find_all(exp.Column) if col.table == name]
    if any(col.name not in outputs for col in refs):
        return False
    for col in refs:
        col.replace(outputs[col.name].copy())
    sel.set("joins", rest)
    if on:
        where = sel.args.get("where")
        sel.set("where", exp.Where(this=exp.and_(*([where.this] if where is not None else []), *on)))
    return True
