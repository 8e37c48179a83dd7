"""Decomposable aggregates split into partial and final steps: shared by the planner's partial → final
aggregates and the logical eager aggregation below a join (only IR and SQL text here)."""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import parse
from squall.driver.ir.sqlgen import q
from squall.errors import NotSupportedError

#: partial and final are the same function
_SAME = {"min", "max", "bool_and", "bool_or", "bit_and", "bit_or", "bit_xor", "sum", "product", "fsum"}
_VARIANCE = ("stddev", "stddev_samp", "stddev_pop", "variance", "var_samp", "var_pop")
#: the aggregates whose split asks ``split_aggs``'s ``arg_type`` for their argument's type
TYPED_ARGS = frozenset({"avg", *_VARIANCE})

Aggs = tuple[tuple[str, L.AggCall], ...]

#: DuckDB types whose values (unscaled, for a DECIMAL) square exactly in a (U)BIGINT and sum exactly in HUGEINT
#: (a sum of squares overflows only past ~10^19 rows)
_SMALL_INTEGERS = {"TINYINT", "SMALLINT", "INTEGER", "UTINYINT", "USMALLINT", "UINTEGER"}
_DECIMAL = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")


def decimal_scale(duck_type: str | None) -> int:
    """The scale ``s`` of DuckDB type ``DECIMAL(p, s)``; 0 for any other type."""
    m = _DECIMAL.fullmatch(duck_type or "")
    return int(m.group(2)) if m else 0


def _exact_scale(duck_type: str | None) -> int | None:
    """The decimal scale (0 for an integer) when the variance of ``duck_type`` values may be computed exactly
    from sums of the unscaled values and their squares (:func:`_exact_m2_sql`), else None."""
    if duck_type in _SMALL_INTEGERS:
        return 0
    m = _DECIMAL.fullmatch(duck_type or "")
    return int(m.group(2)) if m and int(m.group(1)) <= 9 else None


def _exact_m2_sql(n: str, s: str, ss: str) -> str:
    """M2 = Σx² - (Σx)²/n of integers from their exact count, sum and sum of squares (HUGEINT), without
    cancellation: with q the integer nearest the mean and r = Σx - q·n (|r| ≤ n/2), (Σx)²/n = q²n + 2qr + r²/n,
    so M2 = (Σx² - q²n - 2qr) - r²/n; the first term is an exact integer and r²/n ≤ M2 (every integer lies at
    least |r|/n from the mean), so the one subtraction in DOUBLE loses at most a few ulps — and a constant
    column gives exactly 0 (r = 0)."""
    mean = f"CAST(ROUND(CAST({s} AS DOUBLE) / CAST({n} AS DOUBLE)) AS HUGEINT)"
    r = f"({s} - {mean} * {n})"
    whole = f"({ss} - {mean} * {mean} * {n} - 2 * {mean} * {r})"
    return f"(CAST({whole} AS DOUBLE) - CAST({r} AS DOUBLE) * CAST({r} AS DOUBLE) / CAST({n} AS DOUBLE))"


def _avg_sql(total: str, count: str, scale: int) -> str:
    """The final AVG from the summed partial sums and counts, rounded as DuckDB's own AVG.

    For a DECIMAL(p, s) argument DuckDB divides the exact unscaled sum by count * 10^s in extended
    precision: the double nearest the true quotient. ``CAST(sum AS DOUBLE) / count`` would round the
    decimal sum first and can land one ulp away, which breaks ties (``RANK() OVER (ORDER BY avg(x))``);
    the unscaled sum is an integer, exact in a double below 2^53, so one IEEE division rounds as DuckDB.
    """
    if scale == 0:
        return f"CAST({total} AS DOUBLE) / CAST({count} AS DOUBLE)"
    unit = 10**scale
    return f"CAST(CAST({total} * {unit} AS HUGEINT) AS DOUBLE) / (CAST({count} AS DOUBLE) * {unit}.0)"


def _variance_sql(func: str, n: str, m2: str, unit: int) -> str:
    """``func`` (a variance or standard deviation) from the count ``n`` and M2 ``m2`` of values in ``unit``s."""
    pop = func in ("stddev_pop", "var_pop")
    denom = n if pop else f"({n} - 1)"
    guard = f"{n} > 0" if pop else f"{n} > 1"
    scaled = f" / {unit}.0" if unit != 1 else ""
    var = f"CASE WHEN {guard} THEN GREATEST({m2}, 0) / {denom}{scaled} END"
    return f"SQRT({var})" if func.startswith("stddev") else var


def split_aggs(
    node: L.Aggregate, fresh: Callable[[str], str], arg_type: Callable[[exp.Expression], str | None]
) -> tuple[Aggs, Aggs, tuple[tuple[str, exp.Expression], ...]]:
    """``node``'s decomposable aggregates as (partial aggregates, final aggregates over them, output
    expressions over the finals); ``fresh`` names the new columns, ``arg_type`` gives an AVG or variance
    argument's DuckDB type (None: not known). Used by the planner's partial/final split
    (driver/planner/rules/aggregates.py) and below a join (driver/logical/rules/eager_aggregation.py)."""
    partial: list[tuple[str, L.AggCall]] = []
    final: list[tuple[str, L.AggCall]] = []
    post: list[tuple[str, exp.Expression]] = []
    seen: dict[str, str] = {}

    def add_partial(func: str, args: tuple[exp.Expression, ...], text: str) -> str:
        call = parse(text)
        key = L.sql_of(call)
        if key not in seen:
            seen[key] = fresh("p_" + func)
            partial.append((seen[key], L.AggCall(func, args, False, call)))
        return seen[key]

    def add_final(func: str, text: str) -> str:
        call = parse(text)
        key = L.sql_of(call)
        if key not in seen:
            seen[key] = fresh("f_" + func)
            final.append((seen[key], L.AggCall(func, (), False, call)))
        return seen[key]

    for name, a in node.aggs:
        f = a.func
        arg = L.sql_of(a.args[0]) if a.args else ""
        if f in ("count_star", "count"):
            p = (
                add_partial("count", (), "COUNT(*)")
                if f == "count_star"
                else add_partial("count", a.args, L.sql_of(a.expression))
            )
            post.append((name, parse(f"CAST(COALESCE({q(add_final('sum', f'SUM({q(p)})'))}, 0) AS BIGINT)")))
        elif f in _SAME:
            p = add_partial(f, a.args, L.sql_of(a.expression))
            post.append((name, L.col(add_final(f, f"{f.upper()}({q(p)})"))))
        elif f == "avg":
            s = add_partial("sum", a.args, f"SUM({arg})")
            c = add_partial("count", a.args, f"COUNT({arg})")
            fs, fc = add_final("sum", f"SUM({q(s)})"), add_final("sum", f"SUM({q(c)})")
            post.append((name, parse(_avg_sql(q(fs), q(fc), decimal_scale(arg_type(a.args[0]))))))
        elif f in _VARIANCE and (scale := _exact_scale(duck_type := arg_type(a.args[0]))) is not None:
            # integers (or the unscaled integers of a small DECIMAL): exact count, sum and sum of squares,
            # merged by plain SUMs (a third of the time of folding (count, mean, M2) structs per group)
            u = arg if not scale else f"CAST({arg} * {10**scale} AS BIGINT)"
            wide = "UBIGINT" if duck_type == "UINTEGER" else "BIGINT"  # holds a square
            n = add_partial("count", a.args, f"COUNT({arg})")
            s1 = add_partial("sum", a.args, f"SUM({u})")  # HUGEINT
            s2 = add_partial("sum", a.args, f"SUM(CAST({u} AS {wide}) * {u})")
            fn, fs1, fs2 = (q(add_final("sum", f"SUM({q(c)})")) for c in (n, s1, s2))
            post.append((name, parse(_variance_sql(f, fn, _exact_m2_sql(fn, fs1, fs2), 10 ** (2 * scale)))))
        elif f in _VARIANCE:
            # per partial (count, mean, M2), merged pairwise as DuckDB does (Chan et al.): stable, and
            # exactly 0 for a constant column (a constant partial's mean is the value itself)
            x = f"CAST({arg} AS DOUBLE)"
            n = add_partial("count", a.args, f"COUNT({arg})")
            mean = add_partial(
                "mean", a.args, f"CASE WHEN MIN({x}) = MAX({x}) THEN MIN({x}) ELSE AVG({x}) END"
            )
            m2 = add_partial("m2", a.args, f"VAR_POP({x}) * COUNT({arg})")
            merged = add_final(
                "merge",
                f"LIST_REDUCE(LIST({{'n': {q(n)}, 'mean': {q(mean)}, 'm2': {q(m2)}}}) FILTER (WHERE {q(n)} > 0), "
                "LAMBDA a, b: {'n': a.n + b.n, 'mean': a.mean + (b.mean - a.mean) * b.n / (a.n + b.n), "
                "'m2': a.m2 + b.m2 + (b.mean - a.mean) * (b.mean - a.mean) * a.n * b.n / (a.n + b.n)})",
            )
            fn, fm2 = f"STRUCT_EXTRACT({q(merged)}, 'n')", f"STRUCT_EXTRACT({q(merged)}, 'm2')"
            post.append((name, parse(_variance_sql(f, fn, fm2, 1))))
        else:
            raise NotSupportedError(f"aggregate {f} split")
    return tuple(partial), tuple(final), tuple(post)
