"""From a qualified sqlglot AST to Squall's logical plan.

sqlglot does the SQL work (qualification, star expansion, constant folding,
normalisation); this module turns each SELECT scope into relational nodes:
sources → join tree (conjuncts placed at the lowest node that sees their
columns, inner joins ordered greedily by estimated size) → aggregate → window
→ projection → DISTINCT → ORDER BY → LIMIT.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from sqlglot import exp

from squall.driver.catalog.tables import Catalog
from squall.driver.estimate.selectivity import conjunction_selectivity
from squall.driver.frontend.bind import BoundQuery
from squall.driver.ir import nodes as L
from squall.driver.logical.decorrelate.deep import lift_deep_correlation
from squall.driver.logical.decorrelate.lateral import decorrelate_laterals
from squall.driver.logical.decorrelate.subqueries import INTERNAL, SubqueryMixin, _unwrap
from squall.driver.logical.fallback import one_rank
from squall.driver.logical.scope import Scope, conjuncts, from_items, tables_read
from squall.driver.logical.unnest import FromUnnest, expand, from_unnest, rows_per_row
from squall.errors import BindError, NotSupportedError, UserError

DIALECT = "duckdb"


class Names:
    """Allocates internal column names, unique in the whole plan."""

    def __init__(self) -> None:
        self._used: set[str] = set()

    def fresh(self, base: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", base).strip("_").lower()[:40] or "c"
        if base[0].isdigit():
            base = "c" + base
        name = base
        for i in itertools.count(2):
            if name not in self._used:
                break
            name = f"{base}_{i}"
        self._used.add(name)
        return name


@dataclass
class Source:
    """One FROM item of a SELECT while its join tree is built."""

    alias: str
    node: L.Node
    rows: float
    width: float


@dataclass(frozen=True)
class Planned:
    """A planned (sub)query: its node and (visible name, internal name) outputs."""

    node: L.Node
    outputs: tuple[tuple[str, str], ...]


def disjuncts(e: exp.Expression) -> list[exp.Expression]:
    if isinstance(e, exp.Paren):
        return disjuncts(e.this)
    if isinstance(e, exp.Or):
        return disjuncts(e.this) + disjuncts(e.expression)
    return [e]


def and_all(items: Iterable[exp.Expression]) -> exp.Expression | None:
    items = list(items)
    if not items:
        return None
    return conjunction(items)


def conjunction(items: Iterable[exp.Expression]) -> exp.Expression:
    """AND of one or more predicates (copies)."""
    items = list(items)
    if len(items) == 1:
        return items[0].copy()
    return cast(exp.Expression, exp.and_(*[i.copy() for i in items]))


def tables_of(e: exp.Expression) -> set[str]:
    return {c.table for c in e.find_all(exp.Column) if c.table}


def _is_semi(conj: exp.Expression) -> bool:
    """A conjunct that is a plain ``EXISTS (…)`` or ``x IN (SELECT …)``: a semi join, which only drops
    rows, so it is applied before the other subquery conjuncts (the rows a later decorrelated scalar
    subquery joins with are fewer, and join filters can follow its keys: TPC-H Q20)."""
    c = _unwrap(conj)
    return isinstance(c, exp.Exists) or (isinstance(c, exp.In) and c.args.get("query") is not None)


def _uncorrelated_scalar(conj: exp.Expression, aliases: set[str]) -> bool:
    """A conjunct whose only subqueries are uncorrelated scalar ones (``x > (SELECT avg(…) FROM …)``): each
    is a one-row join and the conjunct a plain filter after it, so it goes first of all subquery conjuncts —
    the semi and anti joins after it see fewer rows and their join filters fewer keys (TPC-H Q22)."""
    for n in conj.walk():
        if isinstance(n, exp.Exists) or (isinstance(n, exp.In) and n.args.get("query") is not None):
            return False
    subs = [s for s in conj.find_all(exp.Subquery) if s.find_ancestor(exp.Subquery) is None]
    return bool(subs) and not any(tables_read(s, aliases) for s in subs)


def _subquery_order(conj: exp.Expression, aliases: set[str]) -> int:
    """Where a WHERE conjunct with a subquery is applied: uncorrelated scalar filters, then semi joins (they
    only drop rows), then the rest."""
    return 0 if _uncorrelated_scalar(conj, aliases) else 1 if _is_semi(conj) else 2


def _subquery_reads(e: exp.Expression, aliases: set[str]) -> set[str]:
    """The FROM items (of ``aliases``) that the subqueries of ``e`` read (with an ``IN``'s left side)."""
    found: set[str] = set()
    for n in e.walk():
        if (isinstance(n, exp.In) and n.args.get("query") is not None) or (
            isinstance(n, (exp.Exists, exp.Subquery)) and not isinstance(n.parent, exp.In)
        ):
            found |= tables_read(n, aliases)
    return found


def _has_subquery(e: exp.Expression) -> bool:
    return any(isinstance(n, (exp.Subquery, exp.Exists, exp.Select)) for n in e.walk())


def factor_or(pred: exp.Expression, sources: set[str]) -> list[exp.Expression]:
    """Conjuncts implied by an OR: terms common to every branch, and per-source
    filters ``OR(branch terms on that source)`` (redundant, but they let scans
    filter early). The original OR is kept by the caller."""
    branches = [conjuncts(b) for b in disjuncts(pred)]
    if len(branches) < 2:
        return []
    texts = [{t.sql(DIALECT): t for t in b} for b in branches]
    common = set(texts[0])
    for t in texts[1:]:
        common &= set(t)
    derived = [texts[0][k] for k in sorted(common)]
    for alias in sorted(sources):
        parts: list[exp.Expression] = []
        for b in branches:
            local = [t for t in b if tables_of(t) == {alias} and t.sql(DIALECT) not in common]
            if not local:
                parts = []
                break
            parts.append(conjunction(local))
        if parts:
            derived.append(cast(exp.Expression, exp.or_(*[exp.paren(p) for p in parts])))
    return derived


#: a join whose estimated output exceeds this many times its larger input is many-to-many (see _expands)
EXPANDING = 4.0
#: join keys whose NDVs cover this share of a table's rows are a key of that table
KEY_SHARE = 0.9


class Translator(SubqueryMixin):
    """Turns one bound query into a logical plan (see module doc)."""

    def __init__(
        self,
        catalog: Catalog,
        aggregate_functions: set[str],
        bind: Callable[[str], BoundQuery] | None = None,
    ) -> None:
        self.catalog = catalog
        self.aggregates = aggregate_functions
        self.names = Names()
        #: binds a part on its own (the one-rank fallback checks it is self-contained)
        self.bind = bind
        self._depth = 0
        #: the queries being translated, innermost last (left as they were when a bug is raised)
        self._working: list[exp.Expression] = []
        #: decorrelation decisions, for the plan's notes (explain, Result.stats["notes"])
        self.notes: list[str] = []

    # --- entry -----------------------------------------------------------------------------

    def translate(self, ast: exp.Expression) -> Planned:
        """The logical plan of a query as the SQL rules leave it (:func:`squall.driver.sql.rewrite`)."""
        return self.query(ast, {})

    # --- queries ----------------------------------------------------------------------------

    def query(self, e: exp.Expression, ctes: dict[str, exp.Expression]) -> Planned:
        if isinstance(e, exp.Subquery):
            return self.query(e.this, ctes)
        self._depth += 1
        self._working.append(e)
        noted = len(self.notes)
        try:
            planned = self._query(e, ctes)
            self._working.pop()
            return planned
        except NotSupportedError as err:
            self._working.pop()
            del self.notes[noted:]  # what this part decided is gone with it
            if self._depth == 1:
                raise  # the whole query: compile_sql runs the user's own text on one rank
            fallback = self._one_rank(e, ctes, str(err).removeprefix("not supported: "))
            if fallback is None:
                raise
            return fallback
        finally:
            self._depth -= 1

    def position(self) -> str | None:
        """The position ("at line L, column C") of the innermost (sub)query being translated, when its text has one."""
        for e in reversed(self._working):
            for ident in e.find_all(exp.Identifier):
                if "line" in ident.meta and "col" in ident.meta:
                    return f"at line {ident.meta['line']}, column {ident.meta['col']}"
        return None

    def _one_rank(self, e: exp.Expression, ctes: dict[str, exp.Expression], reason: str) -> Planned | None:
        """``e`` as a one-rank part, if it is self-contained (DuckDB binds it on its own)."""
        if self.bind is None:
            return None
        needed: dict[str, exp.Expression] = {}
        todo = [e]
        while todo:
            for t in todo.pop().find_all(exp.Table):
                if t.name in ctes and t.name not in needed:
                    needed[t.name] = ctes[t.name]
                    todo.append(ctes[t.name])
        text = e.sql(DIALECT)
        if needed:
            defs = ", ".join(
                f"{name} AS ({body.sql(DIALECT)})" for name, body in ctes.items() if name in needed
            )
            text = f"WITH {defs} SELECT * FROM ({text}) AS q"
        try:
            bound = self.bind(text)
        except UserError:
            return None
        visible = None
        if isinstance(e, exp.Select) and not any(isinstance(p, exp.Star) for p in e.expressions):
            visible = tuple(p.alias_or_name for p in e.expressions)
        node, outputs = one_rank(self.catalog, bound, self.names.fresh, reason, visible)
        return Planned(node, outputs)

    def _query(self, e: exp.Expression, ctes: dict[str, exp.Expression]) -> Planned:
        if isinstance(e, exp.Select):
            return self.select(e, ctes)
        if isinstance(e, (exp.Union, exp.Intersect, exp.Except)):
            return self.setop(e, ctes)
        raise NotSupportedError(f"{e.key.upper()} as a query")

    def _with(self, e: exp.Expression, ctes: dict[str, exp.Expression]) -> dict[str, exp.Expression]:
        w = e.args.get("with_")
        if not w:
            return ctes
        if w.args.get("recursive"):
            raise NotSupportedError("WITH RECURSIVE")
        out = dict(ctes)
        for cte in w.expressions:
            out[cte.alias_or_name] = cte.this
        return out

    def setop(self, e: exp.Expression, ctes: dict[str, exp.Expression]) -> Planned:
        ctes = self._with(e, ctes)
        kinds: dict[type[exp.Expression], str] = {
            exp.Union: "union",
            exp.Intersect: "intersect",
            exp.Except: "except",
        }
        kind = kinds[type(e)]
        left = self.query(e.this, ctes)
        right = self.query(e.expression, ctes)
        if len(left.outputs) != len(right.outputs):
            raise BindError(
                f"{kind.upper()} inputs have {len(left.outputs)} and {len(right.outputs)} columns"
            )
        out = tuple(self.names.fresh(v) for v, _ in left.outputs)
        inputs = tuple(
            L.Project(p.node, tuple((n, L.col(i)) for n, (_v, i) in zip(out, p.outputs)))
            for p in (left, right)
        )
        distinct = bool(e.args.get("distinct"))
        node: L.Node = L.SetOp(kind, not distinct, inputs, out)
        outputs = tuple((v, n) for (v, _), n in zip(left.outputs, out))
        return self._order_limit(e, node, outputs, Scope(), lambda x: x)

    # --- SELECT -----------------------------------------------------------------------------

    def _source(self, item: exp.Expression, ctes: dict[str, exp.Expression], scope: Scope) -> Source:
        alias = item.alias_or_name
        if isinstance(item, exp.Table) and not isinstance(item.this, exp.Identifier):
            raise NotSupportedError(f"table function in FROM: {item.this.sql('duckdb')}")
        if isinstance(item, exp.Table):
            name = item.name
            if name in ctes:
                planned = self.query(ctes[name], {k: v for k, v in ctes.items() if k != name})
                return self._derived(alias, planned, scope)
            info = self.catalog.table(name)
            columns = []
            for f in info.schema:
                internal = self.names.fresh(f.name)
                columns.append((f.name, internal))
                scope.add(alias, f.name.lower(), internal)
            width = info.row_width([f.name for f in info.schema])
            scan = L.Scan(info.name, tuple(columns), (), float(info.num_rows), width)
            return Source(alias, scan, float(info.num_rows), width)
        if isinstance(item, exp.Subquery):
            return self._derived(alias, self.query(item.this, ctes), scope)
        if isinstance(item, exp.Values):
            return self._values(item, alias, scope)
        raise NotSupportedError(f"{item.key.upper()} in FROM")

    def _derived(self, alias: str, planned: Planned, scope: Scope) -> Source:
        exprs = []
        for visible, internal in planned.outputs:
            fresh = self.names.fresh(visible)
            exprs.append((fresh, L.col(internal)))
            scope.add(alias, visible, fresh)
        node = L.Project(planned.node, tuple(exprs))
        rows = estimate_rows(planned.node)
        return Source(alias, node, rows, 8.0 * len(exprs))

    def _values(self, item: exp.Values, alias: str, scope: Scope) -> Source:
        column_names = [c.name for c in item.args["alias"].columns] if item.args.get("alias") else []
        rows = tuple(tuple(self.convert(v, Scope()) for v in row.expressions) for row in item.expressions)
        width = len(rows[0]) if rows else 0
        column_names += [f"col{i}" for i in range(len(column_names), width)]
        out = tuple(self.names.fresh(n) for n in column_names)
        for name, internal in zip(column_names, out):
            scope.add(alias, name, internal)
        return Source(alias, L.Values(rows, out), float(len(rows)), 8.0 * width)

    def convert(self, e: exp.Expression, scope: Scope) -> exp.Expression:
        """Rewrite column references to internal names."""
        if _has_subquery(e):
            raise NotSupportedError(f"subquery in an expression: {e.sql(DIALECT)[:80]}")

        def fix(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column) and node.table == INTERNAL:
                return L.col(node.name)
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                internal = scope.lookup(node.table, node.name)
                if internal is None:
                    raise BindError(f"unknown column {node.sql(DIALECT)}")
                return L.col(internal)
            return node

        return e.copy().transform(fix)

    def select(self, sel: exp.Select, ctes: dict[str, exp.Expression]) -> Planned:
        ctes = self._with(sel, ctes)
        for unsupported in ("laterals", "pivots", "connect", "sample", "windows"):
            if sel.args.get(unsupported):
                raise NotSupportedError(unsupported.upper().rstrip("S"))
        sel, lateral_notes = decorrelate_laterals(sel, lambda e: bool(self._find_aggs(e)))
        self.notes.extend(lateral_notes)
        sel, deep_notes = lift_deep_correlation(sel)
        self.notes.extend(deep_notes)
        scope = Scope()
        sel, unnests = self._from_unnests(sel)
        items = from_items(sel)
        specs = list(sel.args.get("joins") or [])
        sources = [self._source(item, ctes, scope) for i, item in enumerate(items) if i not in unnests]
        where = conjuncts(sel.args.get("where"))
        plain = [c for c in where if not _has_subquery(c)]
        with_subquery = [c for c in where if _has_subquery(c)]
        node: L.Node
        if unnests and not all(_is_inner(j) for j in specs):
            sources, specs = self._unnests_at_home(sources, specs, unnests, scope)
            unnests = {}
        if all(_is_inner(j) for j in specs):  # an inner join's ON is its WHERE: subqueries there too
            on = [c for j in specs for c in conjuncts(j.args.get("on")) if c != exp.true()]
            with_subquery += [c for c in on if _has_subquery(c)]
            on = [c for c in on if not _has_subquery(c)]
        if unnests:
            node = self._unnest_joins(sources, list(unnests.values()), on + plain, scope)
        elif not sources:
            node = L.Values(((),), ())
        elif all(_is_inner(j) for j in specs):
            node = self._inner_join_tree(sources, on + plain, scope)
        else:
            node = self._ordered_joins(sources, specs, plain, scope, ctes)
        aliases = self._scope_aliases(scope)
        for c in sorted(with_subquery, key=lambda c: _subquery_order(c, aliases)):
            node = self.apply_subquery_conjunct(node, c, scope, ctes)
        return self._select_rest(sel, node, scope, ctes)

    # --- unnest in FROM (driver/logical/unnest.py) ---------------------------------------------

    def _from_unnests(self, sel: exp.Select) -> tuple[exp.Select, dict[int, FromUnnest]]:
        """The FROM items that are unnests, by position; a copy of ``sel`` in which each unnest column whose
        list reads one other FROM item is renamed a column of that item (its home, expanded before the joins).
        """
        joins = sel.args.get("joins") or []
        items = from_items(sel)
        found: dict[int, FromUnnest] = {}
        for i, item in enumerate(items):
            try:
                unnest = from_unnest(item)
            except ValueError as err:
                raise NotSupportedError(str(err)) from None
            if unnest is not None:
                found[i] = unnest
        if not found:
            return sel, {}
        local = {item.alias_or_name for i, item in enumerate(items) if i not in found}
        homes: dict[str, tuple[str, str]] = {}  # unnest alias -> (home alias, internal column name)
        for u in found.values():
            refs = tables_of(u.arg)
            if len(refs) == 1 and (home := next(iter(refs))) in local:
                homes[u.alias] = (home, self.names.fresh(u.column))
        if not all(_is_inner(j) for j in joins):
            _check_unnests_beside_outer_joins(items, joins, found, {a: h for a, (h, _i) in homes.items()})
        if homes:
            sel = sel.copy()
            for c in list(sel.find_all(exp.Column)):  # this SELECT's own references (a subquery keeps its)
                if c.table in homes and c.find_ancestor(exp.Select) is sel:
                    home, internal = homes[c.table]
                    c.replace(exp.column(internal, table=home))
            items = from_items(sel)
            for i, u in found.items():
                again = from_unnest(items[i])
                assert again is not None
                entry: tuple[str | None, str] = homes.get(u.alias, (None, u.column))
                found[i] = FromUnnest(u.alias, entry[1], again.arg, entry[0])
        return sel, found

    def _unnests_at_home(
        self,
        sources: list[Source],
        specs: list[exp.Join],
        unnests: dict[int, FromUnnest],
        scope: Scope,
    ) -> tuple[list[Source], list[exp.Join]]:
        """Beside outer joins (``_check_unnests_beside_outer_joins`` said where that holds): each unnest expands its
        home's rows, its own ON conjuncts filter them; its join leaves the list. ``LEFT JOIN unnest(l) ON true``
        keeps a row whose list is empty or NULL, with a NULL element (``unnest([NULL])``)."""
        by_alias = {s.alias: i for i, s in enumerate(sources)}
        sources = list(sources)
        for k, u in unnests.items():
            j = specs[k - 1]
            home = cast(str, u.home)
            src = sources[by_alias[home]]
            scope.add(home, u.column, u.column)
            arg = self.convert(u.arg, scope)
            if (j.side or "").lower() == "left":
                empty = exp.EQ(
                    this=exp.func("coalesce", exp.func("len", arg.copy()), exp.Literal.number(0)),
                    expression=exp.Literal.number(0),
                )
                arg = exp.Case(
                    ifs=[exp.If(this=empty, true=exp.Array(expressions=[exp.null()]))], default=arg
                )
            node = expand(src.node, u.column, arg)
            expanded = Source(src.alias, node, src.rows * rows_per_row(u.arg), src.width + 8.0)
            on = [c for c in conjuncts(j.args.get("on")) if c != exp.true()]
            sources[by_alias[home]] = self._filtered(expanded, on, scope)
        kept = [j for k, j in enumerate(specs, start=1) if k not in unnests]
        return sources, kept

    def _unnest_joins(
        self, sources: list[Source], unnests: list[FromUnnest], preds: list[exp.Expression], scope: Scope
    ) -> L.Node:
        """Inner joins of ``sources`` with each unnest expanded at its home, or over the joined rows."""
        by_alias = {s.alias: s for s in sources}
        homed = [u for u in unnests if u.home]
        later = [u for u in unnests if not u.home]
        later_aliases = {u.alias for u in later}
        for u in homed:
            home = cast(str, u.home)
            src = by_alias[home]
            unnest_cols = {v.column for v in homed if v.home == home}
            own = [
                p
                for p in preds
                if tables_of(p) == {home} and not {c.name for c in p.find_all(exp.Column)} & unnest_cols
            ]
            preds = [p for p in preds if p not in own]
            src = self._filtered(src, own, scope)
            scope.add(home, u.column, u.column)
            node = expand(src.node, u.column, self.convert(u.arg, scope))
            by_alias[home] = Source(src.alias, node, src.rows * rows_per_row(u.arg), src.width + 8.0)
        ordered = [by_alias[s.alias] for s in sources]
        now = [p for p in preds if ordered and not tables_of(p) & later_aliases]  # no FROM table: all after
        after = [p for p in preds if p not in now]
        node = self._inner_join_tree(ordered, now, scope) if ordered else L.Values(((),), ())
        for u in later:
            internal = self.names.fresh(u.column)
            arg = self.convert(u.arg, scope)
            scope.add(u.alias, u.column, internal)
            node = expand(node, internal, arg)
        if after:
            node = L.Filter(node, conjunction([self.convert(p, scope) for p in after]))
        return node

    # --- joins ------------------------------------------------------------------------------

    def _filtered(self, src: Source, preds: list[exp.Expression], scope: Scope) -> Source:
        if not preds:
            return src
        converted = [self.convert(p, scope) for p in preds]
        node = src.node
        if isinstance(node, L.Scan):
            info = self.catalog.table(node.table)
            source_of = {internal: s for s, internal in node.columns}

            def rng(name: str):
                return info.column_range(source_of[name]) if name in source_of else None

            def ndv(name: str) -> float | None:
                return float(self.catalog.ndv(node.table, source_of[name])) if name in source_of else None

            sel = conjunction_selectivity(converted, rng, ndv)
            scan = L.Scan(
                node.table, node.columns, node.filters + tuple(converted), node.est_rows * sel, node.row_width
            )
            return Source(src.alias, scan, src.rows * sel, src.width)
        sel = conjunction_selectivity(converted, lambda _n: None)
        return Source(src.alias, L.Filter(node, conjunction(converted)), src.rows * sel, src.width)

    def _inner_join_tree(self, sources: list[Source], preds: list[exp.Expression], scope: Scope) -> L.Node:
        aliases = {s.alias for s in sources}
        expanded: list[exp.Expression] = []
        for p in preds:
            expanded.append(p)
            if isinstance(p, exp.Or) and len(tables_of(p)) > 1:
                expanded.extend(factor_or(p, aliases))
        seen: set[str] = set()
        local: dict[str, list[exp.Expression]] = {s.alias: [] for s in sources}
        multi: list[exp.Expression] = []
        constant: list[exp.Expression] = []
        for p in expanded:
            key = p.sql(DIALECT)
            if key in seen:
                continue
            seen.add(key)
            refs = tables_of(p)
            if not refs:
                constant.append(p)
            elif len(refs) == 1 and next(iter(refs)) in local:
                local[next(iter(refs))].append(p)
            else:
                multi.append(p)
        by_alias = {s.alias: self._filtered(s, local[s.alias], scope) for s in sources}
        remaining = dict(by_alias)
        start = max(remaining.values(), key=lambda s: s.rows * s.width)
        del remaining[start.alias]
        current = start.node
        have = {start.alias}
        rows = start.rows
        pending = list(multi)
        while remaining:
            connected = [
                s for s in remaining.values() if any(_equi_between(p, have, s.alias) for p in pending)
            ]
            if len(connected) > 1:  # a many-to-many join waits while a key join is possible (TPC-H Q5)
                keyed = [s for s in connected if not self._expands(rows, s, pending, have, by_alias)]
                connected = keyed or connected
            pool = connected or list(remaining.values())
            nxt = min(pool, key=lambda s: (s.rows * s.width, s.alias))
            del remaining[nxt.alias]
            usable = [p for p in pending if tables_of(p) <= have | {nxt.alias}]
            pending = [p for p in pending if p not in usable]
            lkeys, rkeys, residual = [], [], []
            for p in usable:
                pair = _equi_between(p, have, nxt.alias)
                if pair:
                    lkeys.append(self.convert(pair[0], scope))
                    rkeys.append(self.convert(pair[1], scope))
                else:
                    residual.append(self.convert(p, scope))
            kind = "inner" if lkeys else "cross"
            if kind == "cross" and residual:
                kind = "inner"
            if lkeys:
                est = self._join_rows(rows, nxt, usable, have, by_alias)
                rows = max(rows, nxt.rows) if est is None else max(est, 1.0)
            else:
                rows = rows * nxt.rows
            current = L.Join(
                current, nxt.node, kind, tuple(lkeys), tuple(rkeys), and_all(residual), est_rows=rows
            )
            have.add(nxt.alias)
        leftover = [self.convert(p, scope) for p in pending + constant]
        if leftover:
            current = L.Filter(current, conjunction(leftover))
        return current

    def _expands(
        self,
        rows: float,
        nxt: Source,
        preds: list[exp.Expression],
        have: set[str],
        by_alias: dict[str, Source],
    ) -> bool:
        """Whether joining ``nxt`` on its equality keys with what is joined so far (``rows``) is many-to-many:
        :meth:`_join_rows` above ``EXPANDING`` times the larger input. No NDV known: not."""
        est = self._join_rows(rows, nxt, preds, have, by_alias)
        return est is not None and est > EXPANDING * max(rows, nxt.rows)

    def _join_rows(
        self,
        rows: float,
        nxt: Source,
        preds: list[exp.Expression],
        have: set[str],
        by_alias: dict[str, Source],
    ) -> float | None:
        """Estimated rows of joining ``nxt`` on its equality keys with what is joined so far (``rows``);
        None when no NDV is known (NDVs from the catalog's samples). When the keys are a key of one side's
        table (their NDVs cover its rows: ``customer``'s c_custkey, ``partsupp``'s (partkey, suppkey)), each
        row of the other side meets at most one row, and a filtered keyed side keeps its share of them;
        else textbook: the product of the inputs over the larger key NDV of each key pair."""
        sel, known = 1.0, False
        raw_have, raw_nxt = 1.0, 1.0
        for p in preds:
            pair = _equi_between(p, have, nxt.alias)
            if pair is None:
                continue
            ndv_have, ndv_nxt = self._column_ndv(pair[0], by_alias), self._column_ndv(pair[1], by_alias)
            if ndv_have is None and ndv_nxt is None:
                continue
            known = True
            raw_have *= ndv_have or 0.0
            raw_nxt *= ndv_nxt or 0.0
            # an unknown NDV is taken as a key's (one distinct value per row)
            sel /= max(min(ndv_have or rows, rows), min(ndv_nxt or nxt.rows, nxt.rows), 1.0)
        if not known:
            return None
        # (rows of the keyed side's table, the estimate): when both sides look keyed (a composite key's NDVs
        # multiply past any table's rows), the smaller table is the one the key belongs to
        keyed = []
        sides = [(raw_nxt, nxt.rows, rows, nxt.alias)]
        if len(have) == 1:
            sides.append((raw_have, rows, nxt.rows, next(iter(have))))
        for raw, side_rows, other_rows, alias in sides:
            table_rows = self._table_rows(alias, by_alias)
            if table_rows and raw >= KEY_SHARE * table_rows:
                keyed.append((table_rows, other_rows * min(side_rows / table_rows, 1.0)))
        return min(keyed)[1] if keyed else rows * nxt.rows * sel

    def _table_rows(self, alias: str, by_alias: dict[str, Source]) -> float | None:
        """Rows of the table under a table source (None for anything else)."""
        node = by_alias[alias].node
        while isinstance(node, L.Filter):
            node = node.input
        return float(self.catalog.table(node.table).num_rows) if isinstance(node, L.Scan) else None

    def _column_ndv(self, e: exp.Expression, by_alias: dict[str, Source]) -> float | None:
        """NDV of a plain column of a table source (None for anything else)."""
        if not isinstance(e, exp.Column) or e.table not in by_alias:
            return None
        node = by_alias[e.table].node
        while isinstance(node, L.Filter):
            node = node.input
        if not isinstance(node, L.Scan):
            return None
        name = next((src for src, _ in node.columns if src.lower() == e.name.lower()), None)
        return None if name is None else float(self.catalog.ndv(node.table, name))

    def _ordered_joins(
        self,
        sources: list[Source],
        specs: list[exp.Join],
        where: list[exp.Expression],
        scope: Scope,
        ctes: dict[str, exp.Expression],
    ) -> L.Node:
        # Outer joins keep the written order. WHERE conjuncts on one source that is
        # never null-supplied are pushed to it; the rest filter after the joins. An ON conjunct
        # with a subquery that reads only the joined item filters it (a semi/anti/mark join on it);
        # one of an inner join with no right or full join after it filters after the joins.
        null_supplied: set[str] = set()
        for i, j in enumerate(specs):
            side = (j.side or "").lower()
            right = sources[i + 1].alias
            if side in ("left", "full"):
                null_supplied.add(right)
            if side in ("right", "full"):
                null_supplied.update(s.alias for s in sources[: i + 1])
        local: dict[str, list[exp.Expression]] = {s.alias: [] for s in sources}
        post: list[exp.Expression] = []
        for p in where:
            refs = tables_of(p)
            if len(refs) == 1 and next(iter(refs)) in local and not refs & null_supplied:
                local[next(iter(refs))].append(p)
            else:
                post.append(p)
        srcs = [self._filtered(s, local[s.alias], scope) for s in sources]
        current = srcs[0].node
        have = {srcs[0].alias}
        after: list[exp.Expression] = []  # inner joins' ON conjuncts with subqueries, applied after the joins
        aliases = {s.alias for s in sources}
        for i, (j, src) in enumerate(zip(specs, srcs[1:])):
            side = (j.side or "").lower()
            kind = (j.kind or "").lower()
            jk = {"left": "left", "right": "right", "full": "full"}.get(side, "inner")
            if kind in ("semi", "anti"):
                jk = kind
            if kind == "cross":
                jk = "cross"
            right_node = src.node
            on = conjuncts(j.args.get("on"))
            if j.args.get("using"):
                raise NotSupportedError("JOIN … USING after qualification")
            lkeys, rkeys, residual = [], [], []
            for p in on:
                if _has_subquery(p):
                    reads = tables_read(p, aliases)
                    if reads <= {src.alias} and jk in ("left", "inner", "semi", "anti"):
                        right_node = self.apply_subquery_conjunct(right_node, p, scope, ctes)
                        continue
                    if reads <= have and jk == "right":  # filters the null-supplied side
                        current = self.apply_subquery_conjunct(current, p, scope, ctes)
                        continue
                    if jk in ("inner", "cross") and not any(
                        (later.side or "").lower() in ("right", "full") for later in specs[i + 1 :]
                    ):
                        after.append(p)
                        continue
                    # its subqueries read one side: they become columns of that side (mark joins, scalar
                    # joins: one row each, so no row is added or lost), then it is a plain conjunct
                    sub_reads = _subquery_reads(p, aliases)
                    if sub_reads <= have:
                        current, p = self.attach_marks(current, p, scope, ctes)
                        current, p = self.attach_scalars(current, p, scope, ctes)
                    elif sub_reads <= {src.alias}:
                        right_node, p = self.attach_marks(right_node, p, scope, ctes)
                        right_node, p = self.attach_scalars(right_node, p, scope, ctes)
                    else:
                        raise NotSupportedError("subqueries in a JOIN … ON condition that read both sides")
                pair = _equi_between(p, have, src.alias)
                refs = tables_of(p)
                if pair:
                    lkeys.append(self.convert(pair[0], scope))
                    rkeys.append(self.convert(pair[1], scope))
                elif refs == {src.alias} and jk in ("left", "inner", "semi", "anti"):
                    right_node = L.Filter(right_node, self.convert(p, scope))
                else:
                    residual.append(self.convert(p, scope))
            if jk == "cross" and (lkeys or residual):
                jk = "inner"
            if jk == "inner" and not lkeys and not residual:
                jk = "cross"
            current = L.Join(current, right_node, jk, tuple(lkeys), tuple(rkeys), and_all(residual))
            have.add(src.alias)
        if post:
            current = L.Filter(current, conjunction([self.convert(p, scope) for p in post]))
        for p in sorted(after, key=lambda c: not _is_semi(c)):
            current = self.apply_subquery_conjunct(current, p, scope, ctes)
        return current

    # --- aggregation, projection, order -------------------------------------------------------

    def _is_agg(self, node: exp.Expression) -> bool:
        if isinstance(node, (exp.Window, exp.Grouping, exp.GroupingId)):
            return False
        if isinstance(node, exp.AggFunc):
            return True
        return isinstance(node, exp.Anonymous) and node.name.lower() in self.aggregates

    def _find_aggs(self, e: exp.Expression) -> list[exp.Expression]:
        found: list[exp.Expression] = []

        def visit(node: exp.Expression, in_window: bool) -> None:
            if isinstance(node, (exp.Subquery, exp.Exists, exp.Select)):
                return  # a subquery's aggregates are its own
            if isinstance(node, exp.Window):
                # the window's function itself is not a grouping aggregate, its arguments may hold some
                for child in node.this.iter_expressions() if node.this else []:
                    visit(child, True)
                for key in ("partition_by", "order"):
                    val = node.args.get(key)
                    for child in val if isinstance(val, list) else ([val] if val else []):
                        visit(child, True)
                return
            if isinstance(node, exp.Filter) and self._is_agg(node.this):
                # FILTER of an aggregate that does not skip NULLs (filter_to_case did the rest)
                found.append(node)
                return
            if self._is_agg(node):
                found.append(node)
                return
            for child in node.iter_expressions():
                visit(child, in_window)

        visit(e, False)
        return found

    def _select_rest(
        self, sel: exp.Select, node: L.Node, scope: Scope, ctes: dict[str, exp.Expression]
    ) -> Planned:
        projections = _expand_columns(list(sel.expressions), scope)
        having = sel.args.get("having")
        group = sel.args.get("group")
        order = sel.args.get("order")
        qualify = _qualify_condition(sel, projections)
        agg_exprs = [a for p in projections for a in self._find_aggs(p)]
        if qualify is not None:
            agg_exprs += self._find_aggs(qualify)
        if group is not None and group.args.get("all"):
            # GROUP BY ALL: every select-list expression without an aggregate or a window
            keys = [
                (p.this if isinstance(p, exp.Alias) else p).copy()
                for p in projections
                if not self._find_aggs(p) and p.find(exp.Window) is None
            ]
            group = exp.Group(expressions=keys)
        if having is not None:
            agg_exprs += self._find_aggs(having.this)
        if order is not None:
            agg_exprs += [a for o in order.expressions for a in self._find_aggs(o)]
        rewrite: Callable[[exp.Expression], exp.Expression]
        aggregated = group is not None or bool(agg_exprs)
        if aggregated:
            node, rewrite = self._aggregate(node, group, agg_exprs, scope)
            if having is not None:
                having_expr = having.this
                if _has_subquery(having_expr):
                    node, having_expr = self.attach_scalars(node, having_expr, Scope(), ctes)
                node = L.Filter(node, rewrite(having_expr))
        else:
            if having is not None:
                raise NotSupportedError("HAVING without GROUP BY or aggregates")

            def rewrite(e: exp.Expression) -> exp.Expression:
                return self.convert(e, scope)

        if any(_has_subquery(p) for p in projections):
            attached = []
            for p in projections:
                if _has_subquery(p):
                    if not aggregated:  # EXISTS / IN (subquery) as a value: a mark join per input row
                        node, p = self.attach_marks(node, p, scope, ctes)
                    node, p = self.attach_scalars(node, p, Scope() if aggregated else scope, ctes)
                attached.append(p)
            projections = attached

        windows = [w for p in projections for w in p.find_all(exp.Window)]
        if order is not None:
            windows += [w for o in order.expressions for w in o.find_all(exp.Window)]
        if qualify is not None:
            windows += list(qualify.find_all(exp.Window))
        if windows:
            node, rewrite = self._windows(node, windows, rewrite)
        if qualify is not None:
            if _has_subquery(qualify):
                raise NotSupportedError("subquery in QUALIFY")
            node = L.Filter(node, rewrite(qualify))

        exprs: list[tuple[str, exp.Expression]] = []
        outputs = []
        for p in projections:
            visible = p.alias_or_name
            inner = p.this if isinstance(p, exp.Alias) else p
            converted = rewrite(inner)
            name = converted.name if isinstance(converted, exp.Column) else self.names.fresh(visible)
            if any(name == n for n, _ in exprs):
                name = self.names.fresh(visible)
            exprs.append((name, converted))
            outputs.append((visible, name))
        project = L.Project(node, tuple(exprs))
        if sel.args.get("distinct") and not sel.args["distinct"].args.get("on"):
            distinct_keys: tuple[tuple[str, exp.Expression], ...] = tuple((n, L.col(n)) for n, _ in exprs)
            return self._order_limit(
                sel, L.Aggregate(project, distinct_keys, ()), tuple(outputs), scope, rewrite, True
            )
        return self._order_limit(sel, project, tuple(outputs), scope, rewrite)

    def _order_limit(
        self,
        e: exp.Expression,
        node: L.Node,
        outputs: tuple[tuple[str, str], ...],
        scope: Scope,
        rewrite: Callable[[exp.Expression], exp.Expression],
        distinct: bool = False,
    ) -> Planned:
        order = e.args.get("order")
        if order is not None:
            order_items = _order_all(order.expressions, len(outputs))
            by_visible: dict[str, str] = {}
            for v, i in outputs:
                by_visible.setdefault(v, i)
            keys = []
            extra: list[tuple[str, exp.Expression]] = []
            for o in order_items:
                target = o.this
                internal = None
                if isinstance(target, exp.Literal) and not target.is_string:
                    pos = int(target.this)
                    if not 1 <= pos <= len(outputs):
                        raise BindError(f"ORDER BY position {pos} is not in the select list")
                    internal = outputs[pos - 1][1]
                elif isinstance(target, exp.Column) and not target.table and target.name in by_visible:
                    internal = by_visible[target.name]
                if internal is not None:
                    key_expr: exp.Expression = L.col(internal)
                else:
                    converted = rewrite(target)
                    match = next((n for n, ex in _exprs_of(node) if ex == converted), None)
                    if match is None and isinstance(converted, exp.Column) and converted.name in node.names:
                        match = converted.name
                    if match is None:
                        if distinct or not isinstance(node, L.Project):
                            raise NotSupportedError("ORDER BY an expression that is not selected here")
                        name = self.names.fresh("sort")
                        extra.append((name, converted))
                        match = name
                    key_expr = L.col(match)
                nulls_first = bool(o.args.get("nulls_first"))
                keys.append(L.SortKey(key_expr, bool(o.args.get("desc")), nulls_first))
            if extra:
                assert isinstance(node, L.Project)
                node = L.Project(node.input, node.exprs + tuple(extra))
            node = L.Sort(node, tuple(keys))
        limit = e.args.get("limit")
        offset = e.args.get("offset")
        if limit is not None or offset is not None:
            node = L.Limit(node, _int_arg(limit, "LIMIT"), _int_arg(offset, "OFFSET") or 0)
        final = tuple(i for _v, i in outputs)
        if node.names != final:
            node = L.Project(node, tuple((i, L.col(i)) for i in final))
        return Planned(node, outputs)

    def _aggregate(
        self, node: L.Node, group: exp.Group | None, aggs: list[exp.Expression], scope: Scope
    ) -> tuple[L.Node, Callable[[exp.Expression], exp.Expression]]:
        keys: list[tuple[str, exp.Expression]] = []
        key_by_sql: dict[str, str] = {}
        group_sets: list[list[exp.Expression]] | None = None
        if group is not None:
            key_list, group_sets = _grouping_sets(group)
            for g in key_list:
                converted = self.convert(g, scope)
                text = converted.sql(DIALECT)
                if text in key_by_sql:
                    key_by_sql[g.sql(DIALECT)] = key_by_sql[text]
                    continue
                name = converted.name if isinstance(converted, exp.Column) else self.names.fresh("key")
                if any(name == n for n, _e in keys):
                    name = self.names.fresh("key")
                keys.append((name, converted))
                key_by_sql[text] = name
                key_by_sql[g.sql(DIALECT)] = name
        key_index = {n: i for i, (n, _e) in enumerate(keys)}
        sets: tuple[tuple[int, ...], ...] = ()
        if group_sets is not None:
            indexed = [tuple(sorted({key_index[key_by_sql[g.sql(DIALECT)]] for g in s})) for s in group_sets]
            if len(set(indexed)) != len(indexed):
                raise NotSupportedError("GROUPING SETS that repeat a set")
            sets = tuple(indexed)
        gid = self.names.fresh("grouping_id") if sets else ""
        calls: list[tuple[str, L.AggCall]] = []
        call_by_sql: dict[str, str] = {}
        for a in aggs:
            converted = self.convert(a, scope)
            text = converted.sql(DIALECT)
            if text in call_by_sql:
                call_by_sql[a.sql(DIALECT)] = call_by_sql[text]
                continue
            name = self.names.fresh(_agg_name(converted))
            calls.append((name, _agg_call(converted)))
            call_by_sql[text] = name
            call_by_sql[a.sql(DIALECT)] = name
        agg_node = L.Aggregate(node, tuple(keys), tuple(calls), sets, gid)

        def grouping(n: exp.Grouping | exp.GroupingId) -> exp.Expression:
            """``GROUPING(k…)``: bits of the grouping id (0 without grouping sets)."""
            bits: list[exp.Expression] = []
            for arg in n.expressions:
                name = key_by_sql.get(arg.sql(DIALECT)) or key_by_sql.get(
                    self.convert(arg, scope).sql(DIALECT)
                )
                if name is None:
                    raise BindError(f"GROUPING() argument {arg.sql(DIALECT)} is not a GROUP BY key")
                if not sets:
                    continue
                shift = len(keys) - 1 - key_index[name]
                bits.append(
                    exp.BitwiseAnd(
                        this=exp.paren(
                            exp.BitwiseRightShift(this=L.col(gid), expression=exp.Literal.number(shift))
                        ),
                        expression=exp.Literal.number(1),
                    )
                )
            if not bits:
                return exp.cast(exp.Literal.number(0), exp.DataType.build("BIGINT"))
            out: exp.Expression = exp.paren(bits[0])
            for bit in bits[1:]:
                out = exp.BitwiseOr(
                    this=exp.paren(exp.BitwiseLeftShift(this=out, expression=exp.Literal.number(1))),
                    expression=exp.paren(bit),
                )
            return exp.paren(out)

        def rewrite(e: exp.Expression) -> exp.Expression:
            def fix(n: exp.Expression) -> exp.Expression:
                if isinstance(n, exp.Column) and n.table == INTERNAL:
                    return L.col(n.name)
                if isinstance(n, (exp.Grouping, exp.GroupingId)):
                    return grouping(n)
                text = n.sql(DIALECT)
                if text in call_by_sql:
                    return L.col(call_by_sql[text])
                if text in key_by_sql:
                    return L.col(key_by_sql[text])
                if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
                    internal = scope.lookup(n.table, n.name)
                    if internal is not None and internal in agg_node.names:
                        return L.col(internal)
                    raise BindError(f"column {n.sql(DIALECT)} must appear in GROUP BY or in an aggregate")
                return n

            if _has_subquery(e):
                raise NotSupportedError(f"subquery in an expression: {e.sql(DIALECT)[:80]}")
            return e.copy().transform(fix)

        return agg_node, rewrite

    def _windows(
        self,
        node: L.Node,
        windows: list[exp.Window],
        rewrite: Callable[[exp.Expression], exp.Expression],
    ) -> tuple[L.Node, Callable[[exp.Expression], exp.Expression]]:
        exprs: list[tuple[str, exp.Expression]] = []
        by_sql: dict[str, str] = {}
        partitions: set[str] = set()
        for w in windows:
            text = w.sql(DIALECT)
            if text in by_sql:
                continue
            converted = rewrite(w)
            name = self.names.fresh(converted.this.key if converted.this else "win")
            exprs.append((name, converted))
            by_sql[text] = name
            parts = converted.args.get("partition_by") or []
            partitions.add("\x00".join(p.sql(DIALECT) for p in parts))
        shared: tuple[exp.Expression, ...] = ()
        if len(partitions) == 1:
            first = exprs[0][1].args.get("partition_by") or []
            shared = tuple(p.copy() for p in first)
        win_node = L.Window(node, tuple(exprs), shared)

        def rewrite_w(e: exp.Expression) -> exp.Expression:
            # windows become references to their output columns (marked internal, so the
            # rewrite below, which may be an aggregate's, passes them through untouched)
            def pre(n: exp.Expression) -> exp.Expression:
                if isinstance(n, exp.Window) and n.sql(DIALECT) in by_sql:
                    return exp.column(by_sql[n.sql(DIALECT)], table=INTERNAL)
                return n

            return rewrite(e.copy().transform(pre))

        return win_node, rewrite_w


def _expand_columns(projections: list[exp.Expression], scope: Scope) -> list[exp.Expression]:
    """``COLUMNS('regex')`` / ``COLUMNS(*)``: the select item once per matching column, in FROM order."""
    out: list[exp.Expression] = []
    for p in projections:
        found = list(p.find_all(exp.Columns))
        if not found:
            out.append(p)
            continue
        pattern = found[0].this
        if len(found) > 1 or not (
            isinstance(pattern, exp.Star) or (isinstance(pattern, exp.Literal) and pattern.is_string)
        ):
            raise NotSupportedError(
                f"COLUMNS(…) other than one regex or * per select item: {p.sql(DIALECT)[:80]}"
            )
        regex = None if isinstance(pattern, exp.Star) else re.compile(pattern.this)
        for alias, column in list(scope.columns):
            if regex is not None and not regex.search(column):
                continue
            ref = exp.column(column, table=alias)

            def put(n: exp.Expression, ref: exp.Expression = ref) -> exp.Expression:
                return ref.copy() if isinstance(n, exp.Columns) else n

            item = p.copy().transform(put)
            if isinstance(item, (exp.Alias, exp.Column)):
                out.append(item)
            else:
                out.append(cast(exp.Expression, exp.alias_(item, column)))
    return out


def _grouping_sets(group: exp.Group) -> tuple[list[exp.Expression], list[list[exp.Expression]] | None]:
    """GROUP BY items → (every key expression, the grouping sets or None for a plain GROUP BY).

    ``a, ROLLUP(b, c), CUBE(d), GROUPING SETS (…)`` is the cross product of each item's sets,
    as in DuckDB."""

    def unit(e: exp.Expression) -> list[exp.Expression]:
        if isinstance(e, exp.Tuple):
            return list(e.expressions)
        if isinstance(e, exp.Paren):
            return unit(e.this)
        return [e]

    def sets_of(e: exp.Expression) -> list[list[exp.Expression]]:
        if isinstance(e, exp.Rollup):
            parts = [unit(x) for x in e.expressions]
            return [[x for p in parts[:i] for x in p] for i in range(len(parts), -1, -1)]
        if isinstance(e, exp.Cube):
            parts = [unit(x) for x in e.expressions]
            out: list[list[exp.Expression]] = [[]]
            for p in parts:
                out = [s + p for s in out] + out
            return out
        if isinstance(e, exp.GroupingSets):
            return [s for item in e.expressions for s in sets_of(item)]
        return [unit(e)]

    items = list(group.expressions)
    for key in ("grouping_sets", "rollup", "cube"):  # older sqlglot keeps them apart
        items += list(group.args.get(key) or [])
    keys: list[exp.Expression] = []
    seen: set[str] = set()
    for item in items:
        for s in sets_of(item):
            for k in s:
                if k.sql(DIALECT) not in seen:
                    seen.add(k.sql(DIALECT))
                    keys.append(k)
    if not any(isinstance(i, (exp.Rollup, exp.Cube, exp.GroupingSets)) for i in items):
        return keys, None
    combined: list[list[exp.Expression]] = [[]]
    for item in items:
        combined = [a + b for a in combined for b in sets_of(item)]
    return keys, combined


def _qualify_condition(sel: exp.Select, projections: list[exp.Expression]) -> exp.Expression | None:
    """The QUALIFY predicate; ``DISTINCT ON (k…) … ORDER BY o…`` adds ``row_number() OVER
    (PARTITION BY k… ORDER BY o…) = 1`` (the first row of each k by the query's order)."""
    qualify = sel.args.get("qualify")
    cond = qualify.this.copy() if qualify is not None else None
    distinct = sel.args.get("distinct")
    on = distinct.args.get("on") if distinct is not None else None
    if on is None:
        return cond
    if cond is not None:
        raise NotSupportedError("DISTINCT ON together with QUALIFY")
    by_alias = {p.alias: p.this for p in projections if isinstance(p, exp.Alias)}

    def resolve(e: exp.Expression) -> exp.Expression:
        if isinstance(e, exp.Literal) and not e.is_string:
            pos = int(e.this)
            if not 1 <= pos <= len(projections):
                raise BindError(f"position {pos} is not in the select list")
            p = projections[pos - 1]
            return (p.this if isinstance(p, exp.Alias) else p).copy()
        if isinstance(e, exp.Column) and not e.table and e.name in by_alias:
            return by_alias[e.name].copy()
        return e.copy()

    keys = [resolve(k) for k in (on.expressions if isinstance(on, exp.Tuple) else [on])]
    order = sel.args.get("order")
    ordered = []
    for o in order.expressions if order is not None else []:
        item = o.copy()
        item.set("this", resolve(o.this))
        ordered.append(item)
    window = exp.Window(
        this=exp.RowNumber(),
        partition_by=keys,
        order=exp.Order(expressions=ordered) if ordered else None,
    )
    return exp.EQ(this=window, expression=exp.Literal.number(1))


def _order_all(items: list[exp.Ordered], width: int) -> list[exp.Ordered]:
    """``ORDER BY ALL [DESC] [NULLS …]``: every output column, left to right, in that direction."""
    if len(items) == 1 and isinstance(items[0].this, exp.Var) and items[0].this.name.upper() == "ALL":
        first = items[0]
        return [
            exp.Ordered(
                this=exp.Literal.number(i + 1),
                desc=first.args.get("desc"),
                nulls_first=first.args.get("nulls_first"),
            )
            for i in range(width)
        ]
    return items


def _exprs_of(node: L.Node) -> list[tuple[str, exp.Expression]]:
    if isinstance(node, L.Project):
        return list(node.exprs)
    return []


def _check_unnests_beside_outer_joins(
    items: list[exp.Expression], joins: list[exp.Join], unnests: dict[int, FromUnnest], homes: dict[str, str]
) -> None:
    """Unnests in a FROM clause with outer joins expand their home's rows before the joins when that gives
    the same rows: each reads one FROM item before it (its home) that no join before the unnest null-supplies,
    and is itself an inner/cross join (its ON conjuncts reading only the home and itself) or ``LEFT JOIN
    unnest(…) ON true``. Else "not supported" (the one-rank fallback)."""
    position = {item.alias_or_name: i for i, item in enumerate(items)}
    for k, u in unnests.items():
        home = homes.get(u.alias)
        if home is None or position[home] > k:
            raise NotSupportedError("UNNEST in FROM over several FROM items, beside an outer join")
        h = position[home]
        # joins[i] joins items[i + 1]: the home not null-supplied before the unnest (by its own LEFT/FULL join
        # or a RIGHT/FULL join between them)
        own = (joins[h - 1].side or "").lower() if h > 0 else ""
        if own in ("left", "full") or any(
            (x.side or "").lower() in ("right", "full") for x in joins[h : k - 1]
        ):
            raise NotSupportedError("UNNEST in FROM of a null-supplied FROM item")
        j = joins[k - 1]
        on = [c for c in conjuncts(j.args.get("on")) if c != exp.true()]
        if not (_is_inner(j) or ((j.side or "").lower() == "left" and not on and not j.kind)):
            raise NotSupportedError("UNNEST in FROM as the right side of an outer join with a condition")
        if any(not tables_of(c) <= {home, u.alias} for c in on):
            raise NotSupportedError("UNNEST in FROM joined on other FROM items, beside an outer join")


def _is_inner(j: exp.Join) -> bool:
    return not j.side and (j.kind or "").lower() in ("", "inner", "cross")


def _equi_between(
    p: exp.Expression, have: set[str], alias: str
) -> tuple[exp.Expression, exp.Expression] | None:
    """For ``a = b`` with one side only on ``have`` and the other only on ``alias``: (that side, other side)."""
    if not isinstance(p, exp.EQ):
        return None
    lt, rt = tables_of(p.this), tables_of(p.expression)
    if lt and rt and lt <= have and rt == {alias}:
        return p.this, p.expression
    if lt and rt and rt <= have and lt == {alias}:
        return p.expression, p.this
    return None


def _int_arg(node: exp.Expression | None, what: str) -> int | None:
    if node is None:
        return None
    value = node.expression if isinstance(node, (exp.Limit, exp.Offset)) else node
    if isinstance(value, exp.Literal) and not value.is_string:
        try:
            return int(value.this)
        except ValueError:
            pass
    raise NotSupportedError(f"{what} must be a whole number literal")


#: aggregates that skip NULL inputs: ``agg(x) FILTER (WHERE c)`` is ``agg(CASE WHEN c THEN x END)``
def _agg_name(e: exp.Expression) -> str:
    return (e.name if isinstance(e, exp.Anonymous) else e.key) or "agg"


def _agg_call(e: exp.Expression) -> L.AggCall:
    if isinstance(e, exp.Filter):
        return dataclasses.replace(_agg_call(e.this), expression=e.copy(), filtered=True)
    func = (e.name if isinstance(e, exp.Anonymous) else cast(exp.Func, e).sql_name()).lower()
    distinct = False
    args: list[exp.Expression] = []
    inner = e.this if not isinstance(e, exp.Anonymous) else None
    if isinstance(inner, exp.Distinct):
        distinct = True
        args = list(inner.expressions)
    elif isinstance(e, exp.Anonymous):
        args = list(e.expressions)
    else:
        args = [a for a in e.iter_expressions()]
    if isinstance(e, exp.Count) and (inner is None or isinstance(inner, exp.Star)):
        func, args = "count_star", []
    return L.AggCall(func, tuple(args), distinct, e.copy())


def estimate_rows(node: L.Node) -> float:
    """A rough output cardinality of a logical subtree."""
    if isinstance(node, L.Scan):
        return node.est_rows
    if isinstance(node, L.Values):
        return float(len(node.rows))
    if isinstance(node, L.Filter):
        return estimate_rows(node.input) * 0.5
    if isinstance(node, L.Join):
        if node.est_rows is not None:
            return node.est_rows
        left, right = estimate_rows(node.left), estimate_rows(node.right)
        if node.kind in ("semi", "anti"):
            return left * 0.5
        if node.kind == "cross":
            return left * right
        return max(left, right)
    if isinstance(node, L.Aggregate):
        if not node.keys:
            return 1.0
        return max(1.0, estimate_rows(node.input) * 0.1)
    if isinstance(node, L.Limit) and node.limit is not None:
        return min(float(node.limit), estimate_rows(node.input))
    if isinstance(node, L.SetOp):
        return sum(estimate_rows(c) for c in node.inputs)
    if node.children:
        return estimate_rows(node.children[0])
    return 1.0
