"""Correlation more than one level deep, made one level with a dependent join over the outer values.

``SELECT … FROM t1 WHERE EXISTS (SELECT 1 FROM t2 WHERE t2.k = t1.id AND EXISTS (SELECT 1 FROM t3
WHERE t3.cat = t1.grp AND t3.cat = t2.cat))``: the innermost subquery reads ``t1`` two levels up. As in
Neumann & Kemper's "Unnesting Arbitrary Queries" (the dependent join), the middle subquery is evaluated
for the distinct values ``D`` of the outer columns it reads instead of per outer row: ``D`` joins its FROM,
every outer reference inside it reads ``D``, and one equality per column (``[D.grp] = [t1.grp]``, a
NULL-safe key: lists compare NULLs equal) correlates it with the outer query — one level, which the
translator decorrelates like any other (semi, anti, mark or grouped scalar join).

``D`` is ``SELECT DISTINCT <columns> FROM <the outer FROM item>``: the item's values, a superset of those the
outer rows carry after their filters, so the result is the same. Taken only when the deep references
read one FROM item (a table or an uncorrelated derived table); references two levels up that an equality of
the middle query already gives (``through_equalities``, also used by ``driver/logical/decorrelate/subqueries.py``) or that a hoist
handles (a conjunct reading only the outer query) never get here.

The same rewrite serves ``EXISTS``/``IN (subquery)`` under OR/CASE or in the select list (mark joins) whose
correlation is more than ``inner column = outer column`` equalities: over ``D`` it is correlated by equalities
only, which the mark join takes.
"""

from __future__ import annotations

from typing import cast

from sqlglot import exp

from squall.driver.ir.exprs import conjuncts, free_in, from_aliases, from_items, set_where, tables_of, unwrap

DELIM = "__deep"
DIALECT = "duckdb"


def lift_deep_correlation(sel: exp.Select) -> tuple[exp.Select, list[str]]:
    """``sel`` with each subquery whose nested subqueries read ``sel``'s FROM items rewritten over the
    distinct outer values (a copy when any), and one note per rewrite."""
    if not from_items(sel) or not any(True for _ in sel.find_all(exp.Subquery, exp.Exists)):
        return sel, []
    sel = sel.copy()
    items = {i.alias_or_name: i for i in from_items(sel)}
    notes: list[str] = []
    for n, sub in enumerate(_immediate_subqueries(sel)):
        inside = {i.alias_or_name for q in sub.find_all(exp.Select) for i in from_items(q)}
        direct = from_aliases(sub)
        if through := through_equalities(sub, set(items) - inside, direct):
            notes.append(through_note(through))
        found = _deep_item(sub, items)
        if found is None or _outer_aggregate(sub, found):
            continue
        listed = _lift(sel, sub, found, items[found], f"{DELIM}{n}")
        notes.append(
            f"deep correlation: a subquery nested in a subquery reads {found}; the outer subquery runs "
            f"over the distinct ({listed}) and joins back on them (a dependent join)"
        )
    for n, sub in enumerate(_marked(sel)):
        found = _outer_item(sub, items)
        if found is None or _aggregating(sub) or _outer_aggregate(sub, found) or not _needs_delim(sub, items):
            continue
        listed = _lift(sel, sub, found, items[found], f"{DELIM}m{n}")
        notes.append(
            f"mark join correlated by more than equalities: its subquery runs over the distinct ({listed}) "
            "and joins back on them (a dependent join)"
        )
    return sel, notes


def through_note(through: list[str]) -> str:
    """The plan note for references made one level by ``through_equalities``."""
    return f"two-level correlation: a nested subquery reads {', '.join(through)} (equal by its query's WHERE)"


def _filters_on(sel: exp.Select, name: str) -> list[exp.Expression]:
    """``sel``'s WHERE conjuncts on FROM item ``name`` alone, without subqueries."""
    return [
        c
        for c in conjuncts(sel.args.get("where"))
        if {col.table for col in c.find_all(exp.Column)} == {name}
        and not any(isinstance(x, (exp.Subquery, exp.Exists, exp.Select)) for x in c.walk())
    ]


def _marked(sel: exp.Select) -> list[exp.Select]:
    """The SELECTs of ``EXISTS``/``IN (subquery)`` in ``sel``'s own clauses that are not a WHERE conjunct (or
    its negation) of their own: under OR/CASE or in the select list, where they are mark joins."""
    top = set()
    for c in conjuncts(sel.args.get("where")):
        bare = unwrap(c)
        bare = unwrap(bare.this) if isinstance(bare, exp.Not) else bare
        if isinstance(bare, (exp.Exists, exp.In)):
            top.add(id(bare))
    out = []
    for q in _immediate_subqueries(sel):
        holder = q.parent.parent if isinstance(q.parent, exp.Subquery) else q.parent
        mark = isinstance(holder, exp.Exists) or (
            isinstance(holder, exp.In) and holder.args.get("query") is not None
        )
        if mark and id(holder) not in top:
            out.append(q)
    return out


def _outer_item(sub: exp.Select, items: dict[str, exp.Expression]) -> str | None:
    """The one outer FROM item ``sub`` reads (a table or an uncorrelated derived table), or None."""
    read = {c.table for c in sub.find_all(exp.Column) if c.table in items and _reads(c, sub)}
    return next(iter(read)) if len(read) == 1 and _liftable(items[next(iter(read))]) else None


def _aggregating(sub: exp.Select) -> bool:
    own = [p for p in sub.expressions if any(a.parent_select is sub for a in p.find_all(exp.AggFunc))]
    return bool(own or sub.args.get("group") or sub.args.get("having"))


def _needs_delim(sub: exp.Select, items: dict[str, exp.Expression]) -> bool:
    """``sub`` reads the outer query other than by ``inner column = outer column`` WHERE conjuncts."""
    plain = 0
    for c in conjuncts(sub.args.get("where")):
        outer = [col for col in c.find_all(exp.Column) if col.table in items and _reads(col, sub)]
        if not outer:
            continue
        cu = unwrap(c)
        sides = [_one_of(cu.this), _one_of(cu.expression)] if isinstance(cu, exp.EQ) else []
        columns = [x for x in sides if isinstance(x, exp.Column)]
        if len(columns) != 2 or sum(1 for x in columns if x.table in items and _reads(x, sub)) != 1:
            return True
        plain += 1
    every = sum(1 for col in sub.find_all(exp.Column) if col.table in items and _reads(col, sub))
    return every != plain  # an outer reference outside those equalities


def through_equalities(body: exp.Select, outer: set[str], direct: set[str]) -> list[str]:
    """Correlation two levels deep made one level, in place: where ``body``'s WHERE has a conjunct
    ``inner.c = outer.x``, every row it keeps has inner.c equal to outer.x, so a subquery nested in
    ``body`` (in another conjunct, or the select list of a body without aggregates) that reads outer.x reads
    inner.c instead."""
    same: dict[tuple[str, str], exp.Column] = {}
    for c in conjuncts(body.args.get("where")):
        cu = unwrap(c)
        if (
            isinstance(cu, exp.EQ)
            and isinstance(cu.this, exp.Column)
            and isinstance(cu.expression, exp.Column)
        ):
            for a, b in ((cu.this, cu.expression), (cu.expression, cu.this)):
                if a.table in direct and b.table in outer:
                    same.setdefault((b.table, b.name), a)
    # only where each row already passed WHERE: its other conjuncts, and the select list of a body that does
    # not aggregate (not FROM: a derived table runs before WHERE; not HAVING/GROUP BY: inner.c is not grouped)
    places: list[exp.Expression] = [c for c in conjuncts(body.args.get("where"))]
    if not body.args.get("group") and not any(p.find(exp.AggFunc) for p in body.expressions):
        places += body.expressions
    used: dict[str, None] = {}
    for nested in [n for place in places for n in place.find_all(exp.Subquery, exp.Exists)]:
        for col in list(nested.find_all(exp.Column)):
            if (col.table, col.name) in same:
                inner = same[(col.table, col.name)]
                used[f"{col.sql(DIALECT)} as {inner.sql(DIALECT)}"] = None
                col.replace(inner.copy())
    return list(used)


def _immediate_subqueries(sel: exp.Select) -> list[exp.Select]:
    """The SELECTs of the subqueries in ``sel``'s own clauses (not in its FROM, not nested deeper)."""
    out = []
    for clause in ("expressions", "where", "having", "qualify"):
        value = sel.args.get(clause)
        for part in value if isinstance(value, list) else [value] if value is not None else []:
            for q in part.find_all(exp.Select):
                if q.parent_select is sel and not isinstance(q.parent, (exp.From, exp.Join)):
                    out.append(q)
    return out


def _reads(col: exp.Column, top: exp.Select) -> bool:
    """``col`` reads past ``top`` (no SELECT between them, ``top`` included, defines its table)."""
    return free_in(col, top) and col.table not in from_aliases(top)


def _deep_item(sub: exp.Select, items: dict[str, exp.Expression]) -> str | None:
    """The one outer FROM item read inside a subquery nested in ``sub`` (outside what a hoist takes), or None."""
    hoisted = [c for c in conjuncts(sub.args.get("where")) if _hoistable(c, sub, items)]
    deep = set()
    for nested in sub.find_all(exp.Subquery, exp.Exists):
        if any(_inside(nested, h) for h in hoisted):
            continue
        deep |= {c.table for c in nested.find_all(exp.Column) if c.table in items and _reads(c, sub)}
    if len(deep) != 1:
        return None
    name = next(iter(deep))
    return name if _liftable(items[name]) else None


def _one_of(e: exp.Expression) -> exp.Expression:
    """``[x]`` (a NULL-safe key, as ``_lift`` writes it) as ``x``; anything else as it is."""
    return e.expressions[0] if isinstance(e, exp.Array) and len(e.expressions) == 1 else e


def _outer_aggregate(sub: exp.Select, name: str) -> bool:
    """``sub`` reads ``name`` inside an aggregate (``sum(t1.val)``: the outer query's aggregate, not a value)."""
    return any(
        _reads(c, sub) and c.find_ancestor(exp.AggFunc) is not None
        for c in sub.find_all(exp.Column)
        if c.table == name
    )


def _liftable(item: exp.Expression) -> bool:
    """A FROM item whose distinct values a derived table can read: a table or an uncorrelated subquery."""
    if isinstance(item, exp.Table) and item.args.get("this") is not None:
        return True
    if isinstance(item, exp.Subquery) and isinstance(item.this, (exp.Select, exp.Union)):
        inner = {i.alias_or_name for q in item.this.find_all(exp.Select) for i in from_items(q)}
        return not tables_of(item) - inner
    return False


def _inside(node: exp.Expression, top: exp.Expression) -> bool:
    """``node`` is ``top`` or under it."""
    at: exp.Expression | None = node
    while at is not None and at is not top:
        at = cast(exp.Expression | None, at.parent)
    return at is top


def _hoistable(c: exp.Expression, sub: exp.Select, items: dict[str, exp.Expression]) -> bool:
    """A conjunct the translator's hoist takes: a nested subquery, reads the outer query, none of ``sub``'s own
    FROM items."""
    if not any(isinstance(n, (exp.Subquery, exp.Exists)) for n in c.walk()):
        return False
    own = from_aliases(sub)
    tables = {col.table for col in c.find_all(exp.Column) if col.table and free_in(col, c)}
    return bool(tables & set(items)) and not tables & own


def _lift(sel: exp.Select, sub: exp.Select, name: str, item: exp.Expression, alias: str) -> str:
    """Rewrite ``sub`` over ``D`` (named ``alias``) = the distinct values of the ``name`` columns it reads, in
    the rows that pass ``sel``'s WHERE filters on that item alone (still a superset of the outer rows'
    values); those columns, listed for a note."""
    filters = _filters_on(sel, name)
    refs = [c for c in sub.find_all(exp.Column) if c.table == name and _reads(c, sub)]
    columns = list(dict.fromkeys(c.name for c in refs))
    for c in refs:
        c.replace(exp.column(c.name, table=alias))
    source = item.copy()  # under a name of its own: the outer name must stay the outer query's
    source.set("alias", exp.TableAlias(this=exp.to_identifier(f"{alias}_src")))
    distinct = exp.select(*(exp.column(c, table=f"{alias}_src") for c in columns)).from_(source).distinct()
    if filters:
        renamed = [f.copy() for f in filters]
        for f in renamed:
            for col in list(f.find_all(exp.Column)):
                col.set("table", exp.to_identifier(f"{alias}_src"))
        distinct = distinct.where(exp.and_(*renamed))
    d = exp.Subquery(this=distinct, alias=exp.TableAlias(this=exp.to_identifier(alias)))
    if sub.args.get("from_") is None:
        sub.set("from_", exp.From(this=d))
    else:
        sub.append("joins", exp.Join(this=d))
    keys = [  # one NULL-safe key per column: [d] = [x] (lists compare NULLs equal)
        exp.EQ(
            this=exp.Array(expressions=[exp.column(c, table=alias)]),
            expression=exp.Array(expressions=[exp.column(c, table=name)]),
        )
        for c in columns
    ]
    where = sub.args.get("where")
    set_where(sub, keys + ([where.this] if where is not None else []))
    return ", ".join(f"{name}.{c}" for c in columns)
