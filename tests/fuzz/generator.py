"""A seeded grammar generator of read-only SQL over the fuzz data: TPC-H (+ NULL-heavy twins) or TPC-DS.

``QueryGenerator(seed, schema=TPCH).query(i)`` is a pure function of ``(seed, schema, i)``: the same seed
always gives the same queries, whatever ran before. The tables, keys and literals come from the
:class:`~tests.fuzz.schema.Schema` (``TPCH``, the default, or ``TPCDS``). Coverage: joins of every kind
(inner/left/right/full, cross with a filter, semi via ``EXISTS``/``IN``, anti via ``NOT EXISTS``/``NOT IN``),
derived tables and CTEs, scalar and correlated subqueries, aggregates (``DISTINCT``, ``FILTER``, ``HAVING``,
``COUNT(*)``, ``AVG``/``STDDEV``/``VAR_POP``), windows (ranking, running and partition aggregates, frames,
windows over aggregates), set operations (``UNION``/``INTERSECT``/``EXCEPT`` with and without ``ALL``),
``ORDER BY``/``LIMIT``/``OFFSET``, ``CASE``, NULL-heavy predicates (``IS [NOT] NULL``, ``IS DISTINCT FROM``,
``COALESCE``, ``NULLIF``, comparisons with ``NULL``), casts, string and date functions. Rarer (a few % of
queries each): ``LATERAL`` subqueries correlated by an equality (explicit, ``JOIN LATERAL … ON true``, ``LEFT
JOIN LATERAL … ON …`` and DuckDB's implicit lateral; bodies with rows, an aggregate, GROUP BY, top-N per outer
row, ``DISTINCT``, windows, items reading the outer row), ``unnest([…])`` in FROM, ``(a, b) [NOT] IN
(SELECT x, y …)`` and correlated predicates that may hold for a NULL outer value (``coalesce(t.y, 5)``,
``IS NOT DISTINCT FROM``, ``OR t.y IS NULL``).

Only deterministic queries are generated: a ``LIMIT`` inside a subquery orders by every output column (tied
rows are then identical), ``row_number``/``lag``/``lead``/``first_value``/``ROWS`` frames order by a total
key (the primary keys of every joined table, else every column in scope), a LATERAL's ``LIMIT`` orders by
the inner table's primary key last (else by every output column), no window is ordered by a DOUBLE
(``avg``, ``stddev``: last bits differ with the summation order), top-level ``ORDER BY`` items are output
columns (so the comparison is tie-aware), no order-sensitive aggregates (``string_agg``, ``list``,
``first``).

Queries stay cheap: a join is only added while the estimated rows (the schema's row counts, unique keys and
key-domain sizes) stay under 150,000 (a cross join: 40,000).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from .schema import SCHEMAS, TPCDS, TPCH, Schema

__all__ = ["SCHEMAS", "TPCDS", "TPCH", "QueryGenerator", "Schema"]

#: window functions whose value depends on row positions among tied rows
_POSITIONAL = re.compile(r"^(row_number|lag|lead|first_value|ntile)\(|ROWS BETWEEN")

#: SQL whose value may be a DOUBLE (DuckDB: avg and the variances of anything, a cast to DOUBLE, division,
#: floor of an integer): summed or divided in another order it may differ in its last bits, so it never
#: decides a window's order (conservative: a match may be exact, e.g. floor of a DECIMAL)
_FLOAT_SQL = re.compile(
    r"\b(avg|stddev|stddev_samp|stddev_pop|var_pop|var_samp|variance|percent_rank|cume_dist|floor)\("
    r"|\bAS DOUBLE\b| / ",
    re.IGNORECASE,
)

_BARE = re.compile(r"^t\d+\.\w+$")

#: per join of a FROM clause, the chance of a LATERAL subquery (explicit or implicit) instead, and of unnest
P_LATERAL = 0.06
P_UNNEST = 0.03


@dataclass(frozen=True)
class Col:
    ref: str  # SQL to refer to it, e.g. "t3.o_orderkey"
    type: str
    name: str  # bare column name (literal lookup)
    domain: str | None = None
    groupable: bool = False
    is_float: bool = (
        False  # a DOUBLE (avg, stddev, …): never a window's ORDER BY, GROUP BY or PARTITION BY key
    )


@dataclass
class Scope:
    cols: list[Col] = field(default_factory=list)
    total_key: list[str] | None = field(default_factory=list)  # refs that order rows totally; None: unknown
    rows: float = 1.0
    tables: list[str] = field(default_factory=list)


@dataclass
class Relation:
    """A FROM item: a base table or a derived table (subquery / CTE) with its output columns."""

    sql: str  # e.g. "orders AS t1" or "(SELECT …) AS t2"
    alias: str
    cols: list[Col]
    key: list[str] | None
    rows: float
    table: str | None  # base table name, if any


class QueryGenerator:
    """Deterministic random queries: ``query(i)`` depends only on ``(seed, i)``."""

    def __init__(self, seed: int, *, schema: Schema = TPCH, max_depth: int = 2) -> None:
        self.seed = seed
        self.schema = schema
        self.max_depth = max_depth
        self.r = random.Random(0)
        self._alias = 0
        self._ctes: list[tuple[str, Relation]] = []
        self._select_rows = 1.0  # estimated output rows of the last SELECT built (derived tables, CTEs)
        self._null_ok = False  # the last correlation built may hold for a NULL outer value

    # --- entry points -------------------------------------------------------------------------------------

    def query(self, index: int) -> str:
        self.r = random.Random(f"{self.seed}:{index}")
        self._alias = 0
        self._ctes = []
        roll = self.r.random()
        if roll < 0.12:
            body = self._set_operation(0)
        else:
            kind = self.r.choices(["plain", "agg", "distinct"], [40, 52, 8])[0]
            if self.r.random() < 0.12:
                self._make_cte()
            body, _ = self._select(0, None, kind=kind, top=True)
        if self._ctes:
            ctes = ", ".join(f"{name} AS ({rel.sql})" for name, rel in self._ctes)
            return f"WITH {ctes} {body}"
        return body

    def queries(self, n: int, start: int = 0) -> list[str]:
        return [self.query(i) for i in range(start, start + n)]

    # --- helpers ------------------------------------------------------------------------------------------

    def _new_alias(self) -> str:
        self._alias += 1
        return f"t{self._alias}"

    def _chance(self, p: float) -> bool:
        return self.r.random() < p

    def _pick(self, seq):  # type: ignore[no-untyped-def]
        return seq[self.r.randrange(len(seq))]

    def _table_relation(self, name: str | None = None) -> Relation:
        if name is None:
            weights = self.schema.weights
            names = list(weights)
            name = self.r.choices(names, [weights[n] for n in names])[0]
        rows, pk, cols = self.schema.tables[name]
        alias = self._new_alias()
        out = [Col(f"{alias}.{c}", t, c, d, g) for c, t, d, g in cols]
        key = [f"{alias}.{c}" for c in pk] if pk else None
        return Relation(f"{name} AS {alias}", alias, out, key, float(rows), name)

    # --- literals and expressions -------------------------------------------------------------------------

    def _literal(self, typ: str, col: Col | None = None) -> str:
        r = self.r
        sc = self.schema
        if r.random() < 0.04:
            return sc.date_null if typ == "date" else "NULL"
        span = sc.span(col.name) if col is not None else None
        if typ == "int":
            if span is not None and r.random() < 0.8:
                return str(r.randint(int(span[0]), int(span[1])))
            return str(r.choice(sc.int_lits))
        if typ == "num":
            if span is not None and r.random() < 0.8:
                return str(round(r.uniform(span[0], span[1]), 2))
            return r.choice(sc.num_lits)
        if typ == "date":
            return f"DATE '{r.choice(sc.date_lits)}'"
        values = sc.str_lits.get(col.name, ()) if col is not None else ()
        text = r.choice(values) if values and r.random() < 0.85 else r.choice(sc.generic_str)
        return "'" + text.replace("'", "''") + "'"

    def _cols_of(self, scope: Scope, typ: str) -> list[Col]:
        return [c for c in scope.cols if c.type == typ]

    @staticmethod
    def _is_float(sql: str, scope: Scope) -> bool:
        """``sql`` may be a DOUBLE whose last bits depend on the order of a sum (conservative: an aggregate or
        expression that computes with one, or reads a column of ``scope`` that is one)."""
        if _FLOAT_SQL.search(sql):
            return True
        return any(c.is_float and re.search(re.escape(c.ref) + r"(?!\w)", sql) for c in scope.cols)

    def _expr(self, scope: Scope, typ: str, depth: int = 0) -> str:
        """A scalar expression of type class ``typ`` over ``scope`` (no aggregates)."""
        r = self.r
        cols = self._cols_of(scope, typ)
        if depth >= 2 or r.random() < 0.55:
            if cols and r.random() < 0.85:
                return r.choice(cols).ref
            if not cols and typ != "str" and r.random() < 0.5:
                pass
            else:
                return self._literal(typ)
        d = depth + 1
        e = lambda t: self._expr(scope, t, d)  # noqa: E731
        if typ == "int":
            opts = [
                lambda: f"({e('int')} + {e('int')})",
                lambda: f"({e('int')} - {r.choice(self.schema.int_lits)})",
                lambda: f"({e('int')} * {r.choice([2, 3, -1])})",
                lambda: f"({e('int')} % {r.choice([2, 3, 5, 7, 10])})",
                lambda: f"length({e('str')})",
                lambda: f"year({e('date')})",
                lambda: f"month({e('date')})",
                lambda: f"extract(day FROM {e('date')})",
                lambda: f"CAST({e('num')} AS INTEGER)",
                lambda: f"coalesce({e('int')}, {self._literal('int')})",
                lambda: f"nullif({e('int')}, {self._literal('int')})",
                lambda: f"abs({e('int')})",
                lambda: f"datediff('day', {e('date')}, {e('date')})",
                lambda: f"TRY_CAST({e('str')} AS INTEGER)",
                lambda: f"CASE WHEN {self._pred(scope, d)} THEN {e('int')} ELSE {e('int')} END",
                lambda: f"greatest({e('int')}, {e('int')})",
            ]
        elif typ == "num":
            opts = [
                lambda: f"({e('num')} + {e('num')})",
                lambda: f"({e('num')} - {e('num')})",
                lambda: f"({e('num')} * {r.choice(['2', '0.5', '1.1', '(1 - 0.05)'])})",
                lambda: f"round({e('num')}, {r.choice([0, 1, 2])})",
                lambda: f"CAST({e('int')} AS DOUBLE)",
                lambda: f"CAST({e('int')} AS DECIMAL(12, 2))",
                lambda: f"coalesce({e('num')}, {self._literal('num')})",
                lambda: f"nullif({e('num')}, {self._literal('num')})",
                lambda: f"abs({e('num')})",
                lambda: f"floor({e('num')})",
                lambda: f"CASE WHEN {self._pred(scope, d)} THEN {e('num')} ELSE {e('num')} END",
                lambda: f"CASE WHEN {self._pred(scope, d)} THEN {e('num')} END",
                lambda: f"least({e('num')}, {e('num')})",
            ]
        elif typ == "str":
            opts = [
                lambda: f"upper({e('str')})",
                lambda: f"lower({e('str')})",
                lambda: f"substr({e('str')}, {r.randint(1, 4)}, {r.randint(1, 6)})",
                lambda: f"({e('str')} || {e('str')})",
                lambda: (
                    f"replace({e('str')}, '{r.choice(['a', 'e', '#', ' '])}', '{r.choice(['', 'X', '-'])}')"
                ),
                lambda: f"trim({e('str')})",
                lambda: f"left({e('str')}, {r.randint(0, 5)})",
                lambda: f"CAST({e('int')} AS VARCHAR)",
                lambda: f"CAST({e('date')} AS VARCHAR)",
                lambda: f"strftime({e('date')}, '%Y-%m')",
                lambda: f"coalesce({e('str')}, {self._literal('str')})",
                lambda: f"nullif({e('str')}, {self._literal('str')})",
                lambda: f"lpad({e('str')}, {r.randint(1, 8)}, '*')",
                lambda: f"CASE WHEN {self._pred(scope, d)} THEN {e('str')} ELSE {self._literal('str')} END",
                lambda: f"concat_ws('/', {e('str')}, {e('str')})",
            ]
        else:  # date
            opts = [
                lambda: f"({e('date')} + {r.choice([1, 7, 30, 365, -90])})",
                lambda: f"CAST(date_trunc('{r.choice(['month', 'year', 'quarter'])}', {e('date')}) AS DATE)",
                lambda: f"coalesce({e('date')}, {self._literal('date')})",
                lambda: f"nullif({e('date')}, {self._literal('date')})",
                lambda: f"CASE WHEN {self._pred(scope, d)} THEN {e('date')} END",
                lambda: f"greatest({e('date')}, {e('date')})",
                lambda: f"last_day({e('date')})",
            ]
        return r.choice(opts)()

    def _comparable(self, scope: Scope) -> tuple[str, Col | None]:
        types = [c.type for c in scope.cols] or ["int"]
        typ = self.r.choice(types)
        cols = self._cols_of(scope, typ)
        return typ, (self.r.choice(cols) if cols else None)

    def _pred(self, scope: Scope, depth: int = 0, subqueries: bool = False, sub_depth: int = 0) -> str:
        """A boolean expression over ``scope``; ``subqueries`` allows EXISTS/IN/scalar subqueries."""
        r = self.r
        if depth < 2 and r.random() < 0.3:
            op = r.choice(["AND", "AND", "OR"])
            # subqueries under OR are refused by Squall; keep them rare
            sub_right = subqueries and (op == "AND" or r.random() < 0.15)
            left = self._pred(scope, depth + 1, subqueries, sub_depth)
            right = self._pred(scope, depth + 1, sub_right, sub_depth)
            return f"({left} {op} {right})"
        if subqueries and sub_depth < self.max_depth and r.random() < 0.3:
            return self._subquery_pred(scope, sub_depth)
        typ, col = self._comparable(scope)
        lhs = col.ref if col is not None and r.random() < 0.7 else self._expr(scope, typ, depth + 1)
        kind = r.choices(
            [
                "cmp",
                "cmpcol",
                "null",
                "between",
                "inlist",
                "like",
                "not",
                "distinct",
                "coalesce",
                "nullcmp",
                "case",
            ],
            [30, 10, 12, 6, 8, 6, 5, 5, 6, 2, 3],
        )[0]
        if kind == "like" and typ != "str":
            kind = "cmp"
        if kind == "cmp":
            return f"{lhs} {r.choice(['=', '<>', '<', '<=', '>', '>='])} {self._literal(typ, col)}"
        if kind == "cmpcol":
            return f"{lhs} {r.choice(['=', '<>', '<', '>='])} {self._expr(scope, typ, depth + 1)}"
        if kind == "null":
            return f"{self._expr(scope, typ, depth + 1)} IS {r.choice(['', 'NOT '])}NULL"
        if kind == "between":
            a, b = sorted([self._literal(typ, col) for _ in range(2)])
            return f"{lhs} {r.choice(['', 'NOT '])}BETWEEN {a} AND {b}"
        if kind == "inlist":
            items = ", ".join(self._literal(typ, col) for _ in range(r.randint(1, 4)))
            return f"{lhs} {r.choice(['', 'NOT '])}IN ({items})"
        if kind == "like":
            return (
                f"{lhs} {r.choice(['', 'NOT '])}{r.choice(['LIKE', 'ILIKE'])} '{r.choice(self.schema.like)}'"
            )
        if kind == "not":
            return f"NOT ({self._pred(scope, depth + 1)})"
        if kind == "distinct":
            return f"{lhs} IS {r.choice(['', 'NOT '])}DISTINCT FROM {self._expr(scope, typ, depth + 1)}"
        if kind == "coalesce":
            return f"coalesce({lhs}, {self._literal(typ, col)}) {r.choice(['=', '<>', '>'])} {self._literal(typ, col)}"
        if kind == "nullcmp":
            return f"{lhs} {r.choice(['=', '<>', '<'])} NULL"
        return f"CASE WHEN {lhs} IS NULL THEN {r.choice(['true', 'false', 'NULL'])} ELSE {self._pred(scope, depth + 1)} END"

    # --- subqueries ---------------------------------------------------------------------------------------

    def _correlation(self, outer: Scope, inner: Relation, null_accepting: float = 0.0) -> str | None:
        """An equality between an inner column and an outer one of the same key domain (or type); with the
        chance ``null_accepting`` a predicate that may hold for a NULL outer value instead (then
        ``self._null_ok`` is true until the next call)."""
        self._null_ok = False
        pairs = [(i, o) for i in inner.cols for o in outer.cols if i.domain and i.domain == o.domain]
        if not pairs:
            pairs = [(i, o) for i in inner.cols for o in outer.cols if i.type == o.type and i.type != "str"]
            if not pairs or self._chance(0.6):
                return None
        i, o = self.r.choice(pairs)
        if null_accepting and self._chance(null_accepting):
            self._null_ok = True
            return self._null_accepting(i, o)
        op = "=" if self._chance(0.95) else self.r.choice(["<", "<>", ">="])
        return f"{i.ref} {op} {o.ref}"

    def _null_accepting(self, i: Col, o: Col) -> str:
        """A correlated predicate between inner ``i`` and outer ``o`` that may hold when ``o`` is NULL (the
        decorrelated join must then keep a NULL outer value as a key of its own)."""
        r = self.r
        lit = self._literal(o.type, o)
        form = r.choices(["coalesce", "or_null", "not_distinct", "both_coalesce"], [45, 20, 20, 15])[0]
        if form == "coalesce":
            return f"{i.ref} {r.choice(['=', '<', '>', '<=', '>='])} coalesce({o.ref}, {lit})"
        if form == "or_null":
            return f"({i.ref} = {o.ref} OR {o.ref} IS NULL)"
        if form == "not_distinct":
            return f"{i.ref} IS NOT DISTINCT FROM {o.ref}"
        return f"coalesce({i.ref}, {lit}) = coalesce({o.ref}, {lit})"

    def _subquery_pred(self, outer: Scope, sub_depth: int) -> str:
        r = self.r
        kind = r.choices(["exists", "in", "scalar", "in2"], [35, 35, 30, 8])[0]
        if kind == "in2":  # mostly a table sharing a key domain with the outer query (pairs that may match)
            rel = self._table_relation(self._domain_table(outer) if r.random() < 0.8 else None)
            return self._tuple_in(
                outer, rel, Scope(list(rel.cols), rel.key, rel.rows, [rel.table or ""]), sub_depth
            )
        rel = self._table_relation()
        inner = Scope(list(rel.cols), rel.key, rel.rows, [rel.table or ""])
        corr = self._correlation(outer, rel, 0.25 if kind == "scalar" else 0.06)
        null_ok = self._null_ok
        where = []
        if corr is not None and (r.random() < 0.8):
            where.append(corr)
        if r.random() < 0.5:
            where.append(
                self._pred(inner, 1, subqueries=sub_depth + 1 < self.max_depth, sub_depth=sub_depth + 1)
            )
        # reference to an outer column two levels down is possible through the nested call's outer scope? no:
        # nested subqueries only see their own scope (Squall refuses deeper correlation; keep it rare)
        w = f" WHERE {' AND '.join(where)}" if where else ""
        if kind == "exists":
            return f"{r.choice(['', 'NOT '])}EXISTS (SELECT 1 FROM {rel.sql}{w})"
        if kind == "in":
            pairs = [(i, o) for i in rel.cols for o in outer.cols if i.domain and i.domain == o.domain]
            if not pairs:
                pairs = [(i, o) for i in rel.cols for o in outer.cols if i.type == o.type]
            if not pairs:
                return f"EXISTS (SELECT 1 FROM {rel.sql}{w})"
            i, o = r.choice(pairs)
            return f"{o.ref} {r.choice(['', 'NOT '])}IN (SELECT {i.ref} FROM {rel.sql}{w})"
        # scalar: an aggregate (always one row) compared with an outer expression
        typ = r.choice(["int", "num", "date"])
        cols = self._cols_of(inner, typ) or self._cols_of(inner, "int")
        ocols = [c for c in outer.cols if c.type == (cols[0].type if cols else "int")]
        if not cols or not ocols:
            return f"NOT EXISTS (SELECT 1 FROM {rel.sql}{w})"
        c = r.choice(cols)
        fn = r.choice(["max", "min"] if c.type == "date" else ["max", "min", "avg", "sum", "count"])
        agg = f"{fn}({c.ref})"
        if c.type != "date" and corr is not None and corr in where and r.random() < (0.5 if null_ok else 0.1):
            agg = "count(*)"  # 0, not NULL, over no rows (also for a NULL outer value)
        o = r.choice(ocols)
        return f"{o.ref} {r.choice(['=', '<', '>', '<=', '<>'])} (SELECT {agg} FROM {rel.sql}{w})"

    def _tuple_in(self, outer: Scope, rel: Relation, inner: Scope, sub_depth: int) -> str:
        """``(a, b) [NOT] IN (SELECT x, y FROM …)``, uncorrelated: two outer columns against two inner ones of
        the same key domains (else type classes)."""
        r = self.r
        # pairs that may match: same key domain, then same column (a NULL-heavy twin), then same type class
        domain = [(i, o) for i in rel.cols for o in outer.cols if i.domain and i.domain == o.domain]
        typed = [(i, o) for i in rel.cols for o in outer.cols if i.type == o.type and (i, o) not in domain]
        named = [(i, o) for i, o in typed if i.name == o.name]
        typed = [p for p in typed if p not in named]
        for group in (domain, named, typed):
            r.shuffle(group)
        pairs = domain + named + typed
        first = pairs[0] if pairs else None
        second = next((p for p in pairs if first and p[0] != first[0] and p[1] != first[1]), None)
        w = ""
        if r.random() < 0.5:
            w = f" WHERE {self._pred(inner, 1, subqueries=sub_depth + 1 < self.max_depth, sub_depth=sub_depth + 1)}"
        if first is None or second is None:
            return f"EXISTS (SELECT 1 FROM {rel.sql}{w})"
        (i1, o1), (i2, o2) = first, second
        neg = "NOT " if r.random() < 0.2 else ""
        return f"({o1.ref}, {o2.ref}) {neg}IN (SELECT {i1.ref}, {i2.ref} FROM {rel.sql}{w})"

    def _scalar_select_item(self, outer: Scope) -> str:
        rel = self._table_relation(self.r.choice(self.schema.scalar_tables))
        corr = self._correlation(outer, rel, 0.25)
        w = f" WHERE {corr}" if corr is not None and self._chance(0.7) else ""
        nums = [c for c in rel.cols if c.type in ("int", "num")]
        c = self.r.choice(nums)
        fn = self.r.choice(["max", "min", "sum", "avg", "count"])
        if w and self._chance(0.5 if self._null_ok else 0.1):
            return f"(SELECT count(*) FROM {rel.sql}{w})"  # 0 over no rows, also for a NULL outer value
        return f"(SELECT {fn}({c.ref}) FROM {rel.sql}{w})"

    # --- FROM ---------------------------------------------------------------------------------------------

    def _derived(self, depth: int) -> Relation:
        alias = self._new_alias()
        kind = self.r.choice(["agg", "plain", "agg"])
        sql, outs = self._select(depth + 1, None, kind=kind, top=False, keyed=True)
        cols = [Col(f"{alias}.{name}", t, name, dom, not flt, flt) for name, t, dom, flt in outs]
        return Relation(f"({sql}) AS {alias}", alias, cols, None, self._derived_rows(), None)

    def _make_cte(self) -> None:
        name = f"cte{len(self._ctes) + 1}"
        kind = self.r.choice(["agg", "plain"])
        sql, outs = self._select(1, None, kind=kind, top=False, keyed=True)
        cols = [Col(f"{name}.{n}", t, n, dom, not flt, flt) for n, t, dom, flt in outs]
        self._ctes.append((name, Relation(sql, name, cols, None, self._derived_rows(), None)))

    def _derived_rows(self) -> float:
        """Rows assumed for the derived table or CTE whose SELECT was just built."""
        fixed = self.schema.derived_rows
        return fixed if fixed is not None else self._select_rows

    def _cte_relation(self) -> Relation:
        name, rel = self.r.choice(self._ctes)
        alias = self._new_alias()
        cols = [Col(f"{alias}.{c.name}", c.type, c.name, c.domain, c.groupable, c.is_float) for c in rel.cols]
        return Relation(f"{name} AS {alias}", alias, cols, None, rel.rows, None)

    def _from(self, depth: int, outer: Scope | None) -> tuple[str, Scope, list[str]]:
        """FROM clause text, the scope it produces, and WHERE conjuncts it needs (cross-join filters)."""
        r = self.r
        if self._ctes and r.random() < 0.6:
            first = self._cte_relation()
        elif depth < self.max_depth and r.random() < 0.12:
            first = self._derived(depth)
        else:
            first = self._table_relation()
        scope = Scope(
            list(first.cols),
            list(first.key) if first.key else None,
            max(first.rows, 1.0),
            [first.table or "?"],
        )
        parts = [first.sql]
        extra: list[str] = []
        n_joins = r.choices([0, 1, 2, 3], [30, 40, 22, 8])[0]
        for _ in range(n_joins):
            roll = r.random()
            more = None  # a FROM item that reads the ones before it: True/False as _join, None: none fits
            if roll < P_LATERAL:
                more = self._lateral(scope, parts)
            elif roll < P_LATERAL + P_UNNEST:
                more = self._unnest(scope, parts, extra)
            if more is None:
                more = self._join(scope, depth, parts, extra)
            if not more:
                break
        return " ".join(parts), scope, extra

    # --- FROM items that read the ones before them: LATERAL subqueries, unnest ------------------------------

    def _domain_table(self, scope: Scope) -> str | None:
        """A table (by the schema's weights) with a column of a key domain of ``scope``; None if none has."""
        sc = self.schema
        domains = {c.domain for c in scope.cols if c.domain}
        names = [n for n in sc.weights if any(c[2] in domains for c in sc.tables[n].columns)]
        if not names:
            return None
        return self.r.choices(names, [sc.weights[n] for n in names])[0]

    def _lateral(self, scope: Scope, parts: list[str]) -> bool | None:
        """A subquery correlated to the FROM so far (``inner.k = outer.k``, sometimes also a non-equality),
        as ``, LATERAL (…) AS t``, DuckDB's implicit lateral ``, (…) AS t``, ``[LEFT|CROSS] JOIN LATERAL (…)
        AS t ON …`` or ``[LEFT] JOIN (…) AS t ON true``. Its body: rows, an aggregate without GROUP BY, a
        GROUP BY, ``ORDER BY <total order> LIMIT n [OFFSET m]`` (top-N per outer row), ``SELECT DISTINCT`` or
        windows; sometimes a select item reads the outer row. Returns False when no FROM item may follow
        (after a comma: a later JOIN's ON would see only this item), None when no table correlates."""
        r = self.r
        sc = self.schema
        name = self._domain_table(scope)
        if name is None:
            return None
        rel = self._table_relation(name)
        inner = Scope(list(rel.cols), list(rel.key) if rel.key else None, rel.rows, [rel.table or "?"])
        i, o = r.choice([(i, o) for i in rel.cols for o in scope.cols if i.domain and i.domain == o.domain])
        where = [f"{i.ref} = {o.ref}"]
        same = [
            (x, y)
            for x in rel.cols
            for y in scope.cols
            if x.type == y.type and x.type in ("int", "num", "date") and not y.is_float
        ]
        if same and r.random() < 0.2:
            x, y = r.choice(same)
            where.append(f"{x.ref} {r.choice(['<', '>=', '<>', '>'])} {y.ref}")
        if r.random() < 0.4:
            where.append(self._pred(inner, 1))
        per = 1.0 if (rel.table, i.name) in sc.unique else rel.rows / sc.domain_values.get(i.domain or "", 25)
        kind = r.choices(["rows", "agg", "group", "top", "distinct", "window"], [18, 22, 14, 26, 10, 10])[0]
        if kind != "agg" and kind != "top" and scope.rows * max(per, 1.0) > 150_000:
            kind = r.choice(["agg", "top"])
        if kind == "top" and scope.rows * min(max(per, 1.0), 5) > 150_000:
            kind = "agg"  # one row per outer row
        items: list[tuple[str, str, str | None]] = []  # (expr, type, domain)
        nums_in = [c for c in rel.cols if c.type in ("int", "num")]
        nums_out = [c for c in scope.cols if c.type in ("int", "num") and not c.is_float]  # may order the top

        def plain(n: int) -> None:
            for _ in range(n):
                if r.random() < 0.6:
                    c = r.choice(rel.cols)
                    items.append((c.ref, c.type, c.domain))
                else:
                    typ, _ = self._comparable(inner)
                    items.append((self._expr(inner, typ, 1), typ, None))

        def reads_outer(p: float) -> None:
            if nums_in and nums_out and r.random() < p:
                a, b = r.choice(nums_in), r.choice(nums_out)
                items.append((f"({a.ref} + {b.ref})", "num" if "num" in (a.type, b.type) else "int", None))

        tail = ""
        if kind == "agg":
            items += [(*self._aggregate(inner), None) for _ in range(r.randint(1, 3))]
            if nums_out and r.random() < 0.15:
                b = r.choice(nums_out)
                items.append((f"(count(*) + {b.ref})", b.type, None))
            rows = scope.rows
        elif kind == "group":
            key, ktype = self._group_key(inner)
            doms = {c.ref: c.domain for c in rel.cols}
            items.append((key, ktype, doms.get(key)))
            if r.random() < 0.35:  # the top groups per outer row: count(*) and the key order them totally
                items.append(("count(*)", "int", None))
                items += [(*self._aggregate(inner), None) for _ in range(r.randint(0, 1))]
                n = r.choice([1, 2, 3])
                tail = f" GROUP BY 1 ORDER BY 2{r.choice(['', ' DESC'])}, 1{r.choice(['', ' DESC NULLS LAST'])} LIMIT {n}"
                rows = scope.rows * min(per, n)
            else:
                items += [(*self._aggregate(inner), None) for _ in range(r.randint(1, 2))]
                tail = " GROUP BY 1" if r.random() < 0.3 else f" GROUP BY {key}"
                rows = scope.rows * min(max(per, 1.0), 10)
        elif kind == "distinct":
            plain(r.randint(1, 2))
            if r.random() < 0.3:
                order = ", ".join(
                    f"{k + 1}{r.choice(['', ' DESC', ' DESC NULLS LAST'])}" for k in range(len(items))
                )
                tail = f" ORDER BY {order} LIMIT {r.choice([1, 2, 3])}"
            rows = scope.rows * min(max(per, 1.0), 10)
        elif kind == "window":
            plain(r.randint(1, 2))
            ordered = [c for c in rel.cols if c.type in ("int", "str", "date")]
            v = r.choice(nums_in) if nums_in else None
            for _ in range(r.randint(1, 2)):
                w = r.choice(["rank", "sum", "count", "max_part", "row_number"])
                if w == "rank" and ordered:
                    c = r.choice(ordered)
                    nulls = r.choice(["", " DESC", " NULLS FIRST", " DESC NULLS LAST"])
                    items.append(
                        (f"{r.choice(['rank', 'dense_rank'])}() OVER (ORDER BY {c.ref}{nulls})", "int", None)
                    )
                elif (
                    w == "row_number" and rel.key and not any(e.startswith("row_number") for e, _, _ in items)
                ):
                    items.append((f"row_number() OVER (ORDER BY {', '.join(rel.key)})", "int", None))
                elif w == "max_part" and v is not None:
                    g = r.choice([c for c in rel.cols if c.groupable] or rel.cols)
                    items.append((f"max({v.ref}) OVER (PARTITION BY {g.ref})", v.type, None))
                elif w == "sum" and v is not None:
                    items.append((f"sum({v.ref}) OVER ()", v.type, None))
                else:
                    items.append(("count(*) OVER ()", "int", None))
            reads_outer(0.15)
            rows = scope.rows * max(per, 1.0)
        else:  # rows, top
            plain(r.randint(1, 3))
            reads_outer(0.2)
            rows = scope.rows * max(per, 1.0)
            if kind == "top":
                n = r.choice([1, 2, 3, 5])
                if rel.key:  # some columns, then the primary key: a total order
                    first = [
                        f"{c.ref}{r.choice(['', ' DESC', ' NULLS FIRST', ' DESC NULLS LAST'])}"
                        for c in r.sample(rel.cols, r.randint(0, 2))
                        if c.ref not in rel.key
                    ]
                    order = ", ".join(first + [f"{k}{r.choice(['', ' DESC'])}" for k in rel.key])
                else:  # every output column: rows tied on all of them are identical
                    order = ", ".join(f"{k + 1}{r.choice(['', ' DESC'])}" for k in range(len(items)))
                tail = f" ORDER BY {order} LIMIT {n}"
                if r.random() < 0.25:
                    tail += f" OFFSET {r.choice([1, 2])}"
                rows = scope.rows * min(max(per, 1.0), n)
        # names: the bare column name when unique, else c<k>
        alias = self._new_alias()
        sel: list[str] = []
        cols: list[Col] = []
        for k, (e, t, dom) in enumerate(items):
            bare = e.split(".", 1)[1] if _BARE.match(e) else None
            name = bare if bare is not None and bare not in [c.name for c in cols] else f"c{k}"
            sel.append(e if name == bare else f"{e} AS {name}")
            flt = self._is_float(e, scope)
            cols.append(Col(f"{alias}.{name}", t, name, dom, not flt, flt))
        distinct = "DISTINCT " if kind == "distinct" else ""
        body = f"SELECT {distinct}{', '.join(sel)} FROM {rel.sql} WHERE {' AND '.join(where)}{tail}"
        form = r.choices(
            ["lateral", "implicit", "join", "left", "cross", "join_implicit", "left_implicit"],
            [30, 18, 14, 16, 6, 8, 8],
        )[0]
        more = True
        if form in ("lateral", "implicit"):
            parts[-1] += ","
            parts.append(f"{'LATERAL ' if form == 'lateral' else ''}({body}) AS {alias}")
            more = False
        elif form == "join":
            parts.append(f"JOIN LATERAL ({body}) AS {alias} ON true")
        elif form == "cross":
            parts.append(f"CROSS JOIN LATERAL ({body}) AS {alias}")
        elif form == "left":
            cond = "true"
            pairs = [(a, b) for a in cols for b in scope.cols if a.type == b.type and not a.is_float]
            if pairs and r.random() < 0.3:
                a, b = r.choice(pairs)
                cond = f"{a.ref} {r.choice(['<>', '<', '>='])} {b.ref}"
            elif r.random() < 0.5:
                cond = self._pred(Scope(cols), 1)
            parts.append(f"LEFT JOIN LATERAL ({body}) AS {alias} ON {cond}")
        else:
            parts.append(f"{'LEFT ' if form == 'left_implicit' else ''}JOIN ({body}) AS {alias} ON true")
        scope.cols.extend(cols)
        scope.rows = max(rows, 1.0)
        scope.tables.append("?")
        if kind != "agg":
            scope.total_key = None
        return more

    def _unnest(self, scope: Scope, parts: list[str], extra: list[str]) -> bool | None:
        """``, unnest([t.a, t.b]) AS u(x)`` (a list of one FROM item's int columns, sometimes with a NULL or a
        constant; else a constant list) or ``CROSS JOIN unnest(…) AS u(x)``; ``u.x`` joins on the first
        column's key domain, sometimes filters in WHERE, and may be grouped or selected like any column."""
        r = self.r
        by_item: dict[str, list[Col]] = {}
        for c in scope.cols:
            if c.type == "int" and not c.is_float and _BARE.match(c.ref):
                by_item.setdefault(c.ref.split(".", 1)[0], []).append(c)
        if by_item and r.random() < 0.8:
            ints = r.choice(list(by_item.values()))
            picked = r.sample(ints, min(len(ints), r.randint(1, 3)))
            elems = [c.ref for c in picked]
            if r.random() < 0.25:
                elems.insert(
                    r.randrange(len(elems) + 1), r.choice(["NULL", str(r.choice(self.schema.int_lits))])
                )
            dom, name = picked[0].domain, picked[0].name
        else:
            elems = [str(v) for v in sorted(r.sample(self.schema.int_lits, r.randint(1, 4)))]
            dom, name = None, "x"
        rows = scope.rows * len(elems)
        if rows > 150_000:
            return None
        alias = self._new_alias()
        x = Col(f"{alias}.x", "int", name, dom, True)
        item = f"unnest([{', '.join(elems)}]) AS {alias}(x)"
        more = True
        if r.random() < 0.7:
            parts[-1] += ","
            parts.append(item)
            more = False
        else:
            parts.append(f"CROSS JOIN {item}")
        scope.cols.append(x)
        scope.rows = rows
        scope.tables.append("?")
        scope.total_key = None
        roll = r.random()
        if roll < 0.3:
            extra.append(f"{x.ref} {r.choice(['=', '<>', '<', '>='])} {self._literal('int', x)}")
        elif roll < 0.4:
            extra.append(f"{x.ref} IS {r.choice(['', 'NOT '])}NULL")
        if not more and dom is not None and r.random() < 0.3:
            # a join on the element right after it (its ON sees only the unnest and the joined table)
            sc = self.schema
            names = [n for n in sc.weights if any(c[2] == dom for c in sc.tables[n].columns)]
            rel = self._table_relation(r.choices(names, [sc.weights[n] for n in names])[0])
            b = r.choice([c for c in rel.cols if c.domain == dom])
            unique = (rel.table, b.name) in sc.unique
            new_rows = rows if unique else rows * max(rel.rows, 1) / sc.domain_values.get(dom, 25)
            if new_rows <= 150_000:
                parts.append(f"{r.choice(['JOIN', 'LEFT JOIN'])} {rel.sql} ON {b.ref} = {x.ref}")
                scope.cols.extend(rel.cols)
                scope.rows = max(new_rows, 1.0)
                scope.tables.append(rel.table or "?")
        return more

    def _related_table(self, scope: Scope) -> str | None:
        """With the schema's ``join_affinity`` chance, a table sharing a key domain with ``scope`` (else None:
        any table)."""
        sc = self.schema
        if not sc.join_affinity or self.r.random() >= sc.join_affinity:
            return None
        domains = {c.domain for c in scope.cols if c.domain}
        names = [n for n in sc.weights if any(c[2] in domains for c in sc.tables[n].columns)]
        if not names:
            return None
        return self.r.choices(names, [sc.weights[n] for n in names])[0]

    def _join(self, scope: Scope, depth: int, parts: list[str], extra: list[str]) -> bool:
        r = self.r
        if depth < self.max_depth and r.random() < 0.1:
            rel = self._derived(depth)
        elif self._ctes and r.random() < 0.3:
            rel = self._cte_relation()
        else:
            rel = self._table_relation(self._related_table(scope))
        pairs = [(a, b) for a in scope.cols for b in rel.cols if a.domain and a.domain == b.domain]
        cross_ok = scope.rows * max(rel.rows, 1) <= 40_000
        if not pairs and not cross_ok:
            return False
        kind = r.choices(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "CROSS"], [40, 25, 12, 12, 11])[0]
        if kind == "CROSS" and not cross_ok:
            kind = "JOIN"
        if kind != "CROSS" and not pairs:
            kind = "CROSS"
        if kind == "CROSS":
            parts.append(f"CROSS JOIN {rel.sql}")
            new_rows = scope.rows * max(rel.rows, 1)
            # a filter linking both sides (or a plain one) in WHERE
            both = Scope(scope.cols + rel.cols)
            same = [(a, b) for a in scope.cols for b in rel.cols if a.type == b.type and a.type != "str"]
            if same and r.random() < 0.7:
                a, b = r.choice(same)
                extra.append(f"{a.ref} {r.choice(['=', '<', '<>'])} {b.ref}")
            else:
                extra.append(self._pred(both, 1))
        else:
            a, b = r.choice(pairs)
            unique = self.schema.unique
            unique_b = (rel.table, b.name) in unique
            unique_a = len(scope.tables) == 1 and (scope.tables[0], a.name) in unique
            values = self.schema.domain_values.get(a.domain or "", 25)
            new_rows = (
                scope.rows if unique_b else (rel.rows if unique_a else scope.rows * max(rel.rows, 1) / values)
            )
            if new_rows > 150_000:
                return False
            cond = [f"{a.ref} = {b.ref}"]
            if r.random() < 0.2:
                both = Scope(scope.cols + rel.cols)
                same = [
                    (x, y)
                    for x in scope.cols
                    for y in rel.cols
                    if x.type == y.type and x.type in ("num", "date", "int")
                ]
                if same and r.random() < 0.6:
                    x, y = r.choice(same)
                    cond.append(f"{x.ref} {r.choice(['<', '>=', '<>'])} {y.ref}")
                else:
                    cond.append(self._pred(Scope(list(rel.cols)) if r.random() < 0.5 else both, 1))
            parts.append(f"{kind} {rel.sql} ON {' AND '.join(cond)}")
        scope.cols.extend(rel.cols)
        scope.rows = max(new_rows, 1.0)
        scope.tables.append(rel.table or "?")
        if scope.total_key is not None and rel.key is not None:
            scope.total_key.extend(rel.key)
        else:
            scope.total_key = None
        return True

    # --- SELECT -------------------------------------------------------------------------------------------

    def _group_key(self, scope: Scope) -> tuple[str, str]:
        r = self.r
        groupable = [c for c in scope.cols if c.groupable]
        if groupable and r.random() < 0.7:
            c = r.choice(groupable)
            return c.ref, c.type
        opts: list[tuple[str, str]] = []
        for c in scope.cols:
            if c.type == "date":
                opts.append((f"year({c.ref})", "int"))
                opts.append((f"CAST(date_trunc('month', {c.ref}) AS DATE)", "date"))
            elif c.type == "int":
                opts.append((f"{c.ref} % {r.choice([3, 5, 10])}", "int"))
            elif c.type == "str":
                opts.append((f"substr({c.ref}, 1, 1)", "str"))
            elif c.type == "num":
                opts.append((f"round({c.ref} / 1000)", "num"))
        if not opts:
            c = r.choice(scope.cols)
            return c.ref, c.type
        if r.random() < 0.15:
            return f"CASE WHEN {self._pred(scope, 1)} THEN 1 ELSE 0 END", "int"
        return r.choice(opts)

    def _aggregate(self, scope: Scope) -> tuple[str, str]:
        r = self.r
        kind = r.choices(
            [
                "count_star",
                "count",
                "count_distinct",
                "sum",
                "avg",
                "minmax",
                "stddev",
                "sum_case",
                "filter",
                "sum_distinct",
            ],
            [14, 8, 10, 16, 10, 14, 6, 6, 2, 2],
        )[0]
        nums = [c for c in scope.cols if c.type in ("int", "num")]
        if kind == "count_star":
            return "count(*)", "int"
        if kind == "count":
            typ, _ = self._comparable(scope)
            return f"count({self._expr(scope, typ, 1)})", "int"
        if kind == "count_distinct":
            typ, _ = self._comparable(scope)
            return f"count(DISTINCT {self._expr(scope, typ, 1)})", "int"
        if kind == "minmax":
            typ, _ = self._comparable(scope)
            return f"{r.choice(['min', 'max'])}({self._expr(scope, typ, 1)})", typ
        if not nums:
            return "count(*)", "int"
        typ = r.choice([c.type for c in nums])
        x = self._expr(scope, typ, 1)
        if kind == "sum":
            return f"sum({x})", typ
        if kind == "avg":
            return f"avg({x})", "num"
        if kind == "stddev":
            return f"{r.choice(['stddev', 'stddev_samp', 'stddev_pop', 'var_pop', 'variance'])}({x})", "num"
        if kind == "sum_case":
            return f"sum(CASE WHEN {self._pred(scope, 1)} THEN {x} ELSE 0 END)", typ
        if kind == "filter":
            fn = r.choice(["count(*)", f"sum({x})", f"max({x})"])
            return f"{fn} FILTER (WHERE {self._pred(scope, 1)})", typ if "count" not in fn else "int"
        return f"{r.choice(['sum', 'avg', 'count'])}(DISTINCT {x})", "num"

    def _window(
        self, scope: Scope, agg_items: list[tuple[str, str]] | None, keys: list[str], positional: bool = True
    ) -> tuple[str, str]:
        """A window function; over aggregates when ``agg_items`` is given (aggregate query).

        ``positional``: it may depend on row positions (row_number, lag, lead, first_value, ntile, a ROWS
        frame). Only one such window per SELECT: rows tied on the whole order are identical, so one
        positional window gives the same multiset in any order, but two pair their values up by an order
        nobody fixed (``row_number()`` and ``lead()`` over identical rows).

        Never ordered by a DOUBLE (``avg``, ``stddev_pop``, a column of a derived table holding one): two
        values equal but for their last bits (summed in another order) tie-break differently, so a rank over
        them is no reliable answer (an earlier false alarm: ``rank() OVER (ORDER BY stddev_pop(x))``).
        """
        r = self.r
        if agg_items is not None:  # window over an aggregate query: operands are keys or aggregates
            agg, typ = r.choice(agg_items)
            part = f"PARTITION BY {r.choice(keys)} " if keys and r.random() < 0.6 else ""
            exact_aggs = [a for a, _ in agg_items if not self._is_float(a, scope)]
            if r.random() < 0.5 and exact_aggs:
                order = agg if agg in exact_aggs else r.choice(exact_aggs)
                return f"{r.choice(['rank', 'dense_rank'])}() OVER ({part}ORDER BY {order})", "int"
            fn = "sum" if typ in ("int", "num") else r.choice(["min", "max", "count"])
            return f"{fn}({agg}) OVER ({part.strip()})", typ if fn != "count" else "int"
        groupable = [c for c in scope.cols if c.groupable] or [c for c in scope.cols if not c.is_float]
        part = f"PARTITION BY {r.choice(groupable).ref}" if r.random() < 0.75 and groupable else ""
        typ, _ = self._comparable(scope)
        exact = [c for c in scope.cols if not c.is_float]
        order_col = r.choice(exact or scope.cols)
        x_cols = [c for c in scope.cols if c.type in ("int", "num")] or scope.cols
        x = r.choice(x_cols)
        # a total order: the primary keys of every joined table, else every column of the scope (rows tied
        # on all of them are identical, so any order among them gives the same multiset of output rows),
        # DOUBLEs last (they decide only among rows tied on every exact column)
        total = scope.total_key or [c.ref for c in exact] + [c.ref for c in scope.cols if c.is_float]
        kind = r.choices(["rank", "agg_part", "agg_running", "total"], [25, 25, 20, 30 if positional else 0])[
            0
        ]
        if not exact:
            kind = "agg_part"
        nulls = r.choice(["", " NULLS FIRST", " DESC NULLS LAST", " DESC"])
        if kind == "rank":
            fn = r.choice(["rank()", "dense_rank()", "percent_rank()", "cume_dist()"])
            return f"{fn} OVER ({part} ORDER BY {order_col.ref}{nulls})", "num" if "_" in fn else "int"
        numeric = x.type in ("int", "num")  # else (no numeric column in scope) no sum or avg of it
        if kind == "agg_part":
            fn = r.choice(["sum", "count", "min", "max", "avg"] if numeric else ["count", "min", "max"])
            return f"{fn}({x.ref}) OVER ({part})", "num" if fn == "avg" else (
                x.type if fn != "count" else "int"
            )
        if kind == "agg_running":
            fn = r.choice(["sum", "count", "max"] if numeric else ["count", "max"])
            return (
                f"{fn}({x.ref}) OVER ({part} ORDER BY {order_col.ref}{nulls})",
                x.type if fn != "count" else "int",
            )
        order = ", ".join([order_col.ref + nulls] + total)
        fn, t = r.choice(
            [
                ("row_number()", "int"),
                (f"lag({x.ref})", x.type),
                (f"lead({x.ref}, 2)", x.type),
                (f"first_value({x.ref})", x.type),
                ("ntile(4)", "int"),
                (f"sum({x.ref})", x.type) if numeric else (f"max({x.ref})", x.type),
            ]
        )
        frame = ""
        if fn.startswith("sum") or fn.startswith("first"):
            frame = r.choice(
                [
                    "",
                    " ROWS BETWEEN 1 PRECEDING AND CURRENT ROW",
                    " ROWS BETWEEN UNBOUNDED PRECEDING AND 1 FOLLOWING",
                ]
            )
        return f"{fn} OVER ({part} ORDER BY {order}{frame})", t

    def _select(
        self,
        depth: int,
        outer: Scope | None,
        *,
        kind: str,
        top: bool,
        keyed: bool = False,
        types: list[str] | None = None,
    ) -> tuple[str, list[tuple[str, str, str | None, bool]]]:
        """One SELECT; returns its SQL and output columns (name, type, key domain, is a DOUBLE).

        ``types``: the output must have exactly these type classes (set operations). ``keyed``: a derived
        table or CTE (every output column gets an alias usable outside).
        """
        r = self.r
        from_sql, scope, where = self._from(depth, outer)
        if r.random() < 0.5:
            where.append(self._pred(scope, 0, subqueries=depth < self.max_depth, sub_depth=depth))
        items: list[tuple[str, str, str | None]] = []  # (expr, type, domain)
        group_sql = ""
        having = ""
        if kind == "agg":
            n_keys = r.choices([0, 1, 2, 3], [20, 45, 28, 7])[0] if types is None else min(len(types), 2)
            keys: list[tuple[str, str]] = []
            for _ in range(n_keys):
                k = self._group_key(scope)
                if k[0] not in [x[0] for x in keys]:
                    keys.append(k)
            aggs = [self._aggregate(scope) for _ in range(r.randint(1, 3))]
            if types is not None:
                keys, aggs = self._fit_types(scope, keys, aggs, types)
            doms = {c.ref: c.domain for c in scope.cols}
            items = [(k, t, doms.get(k)) for k, t in keys] + [(a, t, None) for a, t in aggs]
            if keys:
                if r.random() < 0.3:
                    group_sql = " GROUP BY " + ", ".join(str(i + 1) for i in range(len(keys)))
                else:
                    group_sql = " GROUP BY " + ", ".join(k for k, _ in keys)
            if r.random() < 0.2:
                agg, t = self._aggregate(scope)
                lit = self._literal(t) if t in ("int", "num", "date") else "'M'"
                having = f" HAVING {agg} {r.choice(['>', '<', '>=', '<>'])} {lit}"
                if r.random() < 0.15 and t in ("int", "num"):
                    table, column = self.schema.having_subquery
                    having = f" HAVING {agg} > (SELECT {r.choice(['avg', 'min'])}({column}) FROM {table})"
            if types is None and not keyed and r.random() < 0.15:
                items.append((*self._window(scope, aggs, [k for k, _ in keys]), None))
        else:
            if types is not None:
                items = [(self._expr(scope, t, 1 if r.random() < 0.5 else 2), t, None) for t in types]
            else:
                n = r.choices([1, 2, 3, 4, 5], [15, 30, 25, 18, 12])[0]
                positional = True  # no positional window in this SELECT yet
                for _ in range(n):
                    roll = r.random()
                    if roll < 0.5:
                        c = r.choice(scope.cols)
                        items.append((c.ref, c.type, c.domain))
                    elif roll < 0.8 or kind == "distinct":
                        typ, _ = self._comparable(scope)
                        items.append((self._expr(scope, typ, 0), typ, None))
                    elif roll < 0.93 and not keyed:
                        w, t = self._window(scope, None, [], positional)
                        positional = positional and not _POSITIONAL.search(w)
                        items.append((w, t, None))
                    else:
                        items.append((self._scalar_select_item(scope), "num", None))
        # names: bare column names when unique, else aliases
        outs: list[tuple[str, str, str | None, bool]] = []
        sel: list[str] = []
        used: set[str] = set()
        for i, (e, t, dom) in enumerate(items):
            bare = e.split(".", 1)[1] if _BARE.match(e) else None
            if bare is not None and bare not in used and r.random() < 0.6:
                name = bare
                sel.append(e)
            else:
                name = f"c{i}"
                while name in used:
                    name += "_"
                sel.append(f"{e} AS {name}")
            used.add(name)
            outs.append((name, t, dom, self._is_float(e, scope)))
        distinct = "DISTINCT " if kind == "distinct" else ""
        self._select_rows = min(scope.rows, 1000.0) if kind == "agg" else scope.rows
        sql = f"SELECT {distinct}{', '.join(sel)} FROM {from_sql}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += group_sql + having
        if top:
            sql += self._order_limit(len(outs), scope)
        elif not keyed and types is None:
            pass
        elif r.random() < 0.15 and types is None:
            # LIMIT in a derived table: order by every output column, so tied rows are identical
            order = ", ".join(f"{i + 1}{r.choice(['', ' DESC'])}" for i in range(len(outs)))
            sql += f" ORDER BY {order} LIMIT {r.choice([1, 3, 10, 50])}"
        return sql, outs

    def _fit_types(self, scope, keys, aggs, types):  # type: ignore[no-untyped-def]
        """Make an aggregate select produce exactly ``types`` (keys first, then aggregates)."""
        out_keys: list[tuple[str, str]] = []
        out_aggs: list[tuple[str, str]] = []
        for t in types:
            k = next((x for x in keys if x[1] == t and x not in out_keys), None)
            if k is not None and not out_aggs:
                out_keys.append(k)
                continue
            if t in ("int",):
                out_aggs.append(
                    ("count(*)", "int")
                    if self._chance(0.5)
                    else (f"count({self._expr(scope, 'str', 1)})", "int")
                )
            elif t == "num":
                out_aggs.append((f"sum({self._expr(scope, 'num', 1)})", "num"))
            else:
                out_aggs.append((f"{self.r.choice(['min', 'max'])}({self._expr(scope, t, 1)})", t))
        return out_keys, out_aggs

    def _order_limit(self, n_out: int, scope: Scope) -> str:
        r = self.r
        roll = r.random()
        if roll < 0.45:
            return ""
        positions = list(range(1, n_out + 1))
        r.shuffle(positions)
        chosen = positions[: r.randint(1, n_out)]
        order = ", ".join(
            f"{p}{r.choice(['', ' DESC', ' NULLS FIRST', ' DESC NULLS LAST', ' ASC NULLS LAST'])}"
            for p in chosen
        )
        out = f" ORDER BY {order}"
        if roll < 0.9:
            out += f" LIMIT {r.choice([1, 5, 10, 20, 100])}"
            if r.random() < 0.15:
                out += f" OFFSET {r.choice([1, 3, 10])}"
        elif roll < 0.95:
            out += f" OFFSET {r.choice([2, 5])}"
        return out

    def _set_operation(self, depth: int) -> str:
        r = self.r
        n = r.choices([1, 2, 3], [45, 40, 15])[0]
        types = [r.choice(["int", "int", "str", "num", "date"]) for _ in range(n)]
        op = r.choice(
            ["UNION", "UNION ALL", "INTERSECT", "EXCEPT", "INTERSECT ALL", "EXCEPT ALL", "UNION ALL"]
        )
        left, _ = self._select(depth + 1, None, kind=r.choice(["plain", "agg"]), top=False, types=types)
        right, _ = self._select(depth + 1, None, kind=r.choice(["plain", "agg"]), top=False, types=types)
        sql = f"{left} {op} {right}"
        if r.random() < 0.2:
            third, _ = self._select(depth + 1, None, kind="plain", top=False, types=types)
            sql = f"({sql}) {r.choice(['UNION', 'EXCEPT', 'UNION ALL'])} ({third})"
            sql = f"SELECT * FROM ({sql}) AS u"
        roll = r.random()
        if roll < 0.4:
            order = ", ".join(str(i + 1) for i in range(n))
            sql += f" ORDER BY {order}"
            if r.random() < 0.7:
                sql += f" LIMIT {r.choice([3, 10, 50])}"
        return sql
