"""Decomposable aggregates split into partial and final steps: shared by the planner's partial → final
aggregates and the logical eager aggregation below a join (only IR and SQL text here)."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import parse
from squall.driver.ir.sqlgen import q
from squall.errors import NotSupportedError

#: partial and final are the same function
_SAME = {"min", "max", "bool_and", "bool_or", "bit_and", "bit_or", "bit_xor", "sum", "product", "fsum"}
_VARIANCE = ("stddev", "stddev_samp", "stddev_pop", "variance", "var_samp", "var_pop")

Aggs = tuple[tuple[str, L.AggCall], ...]


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


def split_aggs(
    node: L.Aggregate, fresh: Callable[[str], str], decimal_scale: Callable[[exp.Expression], int]
) -> tuple[Aggs, Aggs, tuple[tuple[str, exp.Expression], ...]]:
    """``node``'s decomposable aggregates as (partial aggregates, final aggregates over them, output
    expressions over the finals); ``fresh`` names the new columns, ``decimal_scale`` gives an AVG argument's
    DECIMAL scale. Used by the planner's partial/final split (driver/planner/rules/aggregates.py) and below a join
    (driver/logical/rules/eager_aggregation.py)."""
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
            post.append((name, parse(_avg_sql(q(fs), q(fc), decimal_scale(a.args[0])))))
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
            pop = f in ("stddev_pop", "var_pop")
            denom = fn if pop else f"({fn} - 1)"
            guard = f"{fn} > 0" if pop else f"{fn} > 1"
            var = f"CASE WHEN {guard} THEN GREATEST({fm2}, 0) / {denom} END"
            post.append((name, parse(f"SQRT({var})" if f.startswith("stddev") else var)))
        else:
            raise NotSupportedError(f"aggregate {f} split")
    return tuple(partial), tuple(final), tuple(post)
