"""The CI fuzz budgets: a fixed seed and number of queries, W cycling 1..4, on TPC-H SF0.01 (+ NULL-heavy twins)
and on TPC-DS SF0.01.

Deterministic: the same queries every run. Fails on any wrong answer, and on any error or internal error that
is not an open bug already saved under ``tests/fuzz/cases`` (same kind and message); known open bugs are
reported as warnings. Refusals (``not supported: …``) are counted, never failures. Findings are not saved
from here: run ``benchmarks/fuzz.py`` to minimise and save them.
"""

from __future__ import annotations

import hashlib
import re
import warnings

import duckdb
import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

from squall.testing import compare_results

from .cases import load_cases, save_case
from .dataset import duckdb_reference
from .generator import TPCDS, TPCH, QueryGenerator, Schema
from .minimize import minimize
from .oracle import float_order_ties
from .runner import Stats, bug_key, run

SEED = 20261123
QUERIES = 120
QUERIES_TPCDS = 60
# sha256 of TPC-H queries 0..199 of SEED joined by newlines (test_tpch_queries_are_unchanged). Changed on
# purpose with the LATERAL / unnest / (a, b) IN / NULL-accepting-correlation grammar, windows never ordered by
# a DOUBLE and TPC-H's typed NULL date literal (it was e038fe28…b9598): seeds and query indexes named by cases
# saved before then give other queries now (the saved SQL itself is what is replayed).
TPCH_DIGEST = "48d68c690d4cd1f8179d7cddd42b662d19f2acd056ce6f3d23538a365b50117b"


def _known_bugs() -> set[str]:
    known = set()
    for case in load_cases():
        if "xfail" in case.header and case.header.get("kind") in ("error", "internal"):
            known.add(bug_key(case.header["kind"], case.header.get("differs", "")))
    return known


def _check_budget(stats: Stats, queries: int) -> None:
    print(stats.summary())
    c = stats.counts
    assert stats.generated == queries
    assert c["rejected"] <= queries * 0.05, (
        f"the generator makes too many invalid queries: {stats.rejections}"
    )
    assert c["passed"] >= queries * 0.5, stats.summary()
    known = _known_bugs()
    new = [
        f
        for f in stats.findings
        if f.outcome.kind == "wrong" or bug_key(f.outcome.kind, f.outcome.detail) not in known
    ]
    for f in stats.findings:
        if f not in new:
            warnings.warn(
                f"known open bug at W={f.outcome.workers}: {f.outcome.detail.splitlines()[0]}", stacklevel=1
            )
    assert not new, "\n".join(
        f"{f.outcome.kind} at W={f.outcome.workers}: {f.outcome.detail}\n  {f.sql}" for f in new
    )


def test_fuzz_budget(fuzz_oracle):
    stats = run(fuzz_oracle, SEED, QUERIES, cycle=True, minimize_failures=False, save=False)
    _check_budget(stats, QUERIES)


def test_fuzz_budget_tpcds(fuzz_tpcds_oracle):
    stats = run(fuzz_tpcds_oracle, SEED, QUERIES_TPCDS, cycle=True, minimize_failures=False, save=False)
    _check_budget(stats, QUERIES_TPCDS)


@pytest.mark.parametrize("schema", [TPCH, TPCDS], ids=lambda s: s.name)
def test_generator_is_deterministic(schema: Schema):
    a, b = QueryGenerator(SEED, schema=schema), QueryGenerator(SEED, schema=schema)
    forward = [a.query(i) for i in range(30)]
    backward = [b.query(i) for i in reversed(range(30))][::-1]
    assert forward == backward
    assert len(set(forward)) == 30
    assert QueryGenerator(SEED + 1, schema=schema).query(0) != forward[0]


def test_tpch_queries_are_unchanged():
    """The TPC-H schema is the generator's schema from before schemas were a parameter: the same queries (saved
    cases and long runs name seeds and query indexes). A change of the grammar changes this digest: update it
    then, on purpose."""
    gen = QueryGenerator(SEED)
    text = "\n".join(gen.query(i) for i in range(200))
    assert hashlib.sha256(text.encode()).hexdigest() == TPCH_DIGEST


def _type_class(sql_type: str) -> str:
    if sql_type in ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "HUGEINT"):
        return "int"
    if sql_type.startswith("DECIMAL") or sql_type in ("DOUBLE", "FLOAT"):
        return "num"
    return {"VARCHAR": "str", "DATE": "date"}.get(sql_type, sql_type)


@pytest.mark.parametrize("schema", [TPCH, TPCDS], ids=lambda s: s.name)
def test_schema_matches_the_data(request, schema: Schema):
    """Row counts, columns and type classes, primary and unique keys (unique, no NULLs in primary keys) and the
    string literals (each occurs) of the generator's schema hold on its data."""
    data = request.getfixturevalue("fuzz_tpcds_data" if schema is TPCDS else "fuzz_data")
    con = duckdb_reference(data)
    try:
        for name, table in schema.tables.items():
            assert con.execute(f"SELECT count(*) FROM {name}").fetchone()[0] == table.rows, name
            types = {row[0]: _type_class(row[1]) for row in con.execute(f"DESCRIBE {name}").fetchall()}
            for column, typ, _, _ in table.columns:
                assert types.get(column) == typ, (
                    f"{name}.{column}: {types.get(column)} in the data, {typ} here"
                )
            if table.key:
                key = ", ".join(table.key)
                nulls = " OR ".join(f"{c} IS NULL" for c in table.key)
                dup = f"SELECT count(*) FROM (SELECT {key} FROM {name} GROUP BY ALL HAVING count(*) > 1)"
                assert con.execute(dup).fetchone()[0] == 0, f"{name}: primary key {key} is not unique"
                assert con.execute(f"SELECT count(*) FROM {name} WHERE {nulls}").fetchone()[0] == 0, name
        for name, column in schema.unique:
            dup = f"SELECT count(*) FROM (SELECT {column} FROM {name} GROUP BY ALL HAVING count(*) > 1)"
            assert con.execute(dup).fetchone()[0] == 0, f"{name}.{column} is not unique"
        for column, values in schema.str_lits.items():
            tables = [n for n, t in schema.tables.items() if column in schema.columns(n)]
            union = " UNION ALL ".join(f"SELECT {column} AS v FROM {n}" for n in tables)
            found = {row[0] for row in con.execute(f"SELECT DISTINCT v FROM ({union})").fetchall()}
            assert set(values) <= found, f"{column}: {set(values) - found} do not occur"
    finally:
        con.close()


@pytest.mark.parametrize("schema", [TPCH, TPCDS], ids=lambda s: s.name)
def test_generated_queries_are_valid_for_duckdb(request, schema: Schema):
    con = duckdb_reference(request.getfixturevalue("fuzz_tpcds_data" if schema is TPCDS else "fuzz_data"))
    gen = QueryGenerator(SEED, schema=schema)
    rejected = []
    for i in range(150):
        sql = gen.query(i)
        try:
            con.sql(sql).fetchall()
        except duckdb.Error as exc:
            rejected.append(f"{exc}: {sql}")
    con.close()
    assert len(rejected) <= 150 * 0.05, "\n".join(rejected)


def test_minimize_keeps_the_failure_and_shrinks():
    sql = (
        "SELECT t1.n_name, count(*) FILTER (WHERE t1.n_regionkey > 1) AS c1, max(t2.r_name) AS c2 FROM nation AS t1 "
        "JOIN region AS t2 ON t1.n_regionkey = t2.r_regionkey WHERE t1.n_nationkey < 20 AND t2.r_name <> 'ASIA' "
        "GROUP BY t1.n_name HAVING count(*) > 0 ORDER BY 1 LIMIT 5"
    )
    small = minimize(sql, lambda text: "FILTER" in text.upper())
    assert "FILTER" in small.upper()
    assert len(small) < len(sql) / 2
    assert "JOIN" not in small.upper() and "ORDER BY" not in small.upper()


def _positional_windows(select: exp.Select) -> int:
    """Window functions of this SELECT's own list whose value depends on positions among tied rows."""
    count = 0
    for item in select.expressions:
        for w in item.find_all(exp.Window):
            fn = w.this.sql_name().lower() if isinstance(w.this, exp.Func) else ""
            spec = w.args.get("spec")
            rows = spec is not None and str(spec.args.get("kind") or "").upper() == "ROWS"
            count += fn in ("row_number", "lag", "lead", "first_value", "ntile") or rows
    return count


def test_no_select_pairs_two_positional_windows():
    """Two position-dependent windows in one SELECT pair their values by an order nobody fixed (seed 5001,
    query 975 gave a valid answer that differed from DuckDB's: row_number() and lead() over identical rows)."""
    for seed, schema in ((SEED, TPCH), (5001, TPCH), (SEED, TPCDS)):
        gen = QueryGenerator(seed, schema=schema)
        for i in range(1000):
            tree = sqlglot.parse_one(gen.query(i), dialect="duckdb")
            for select in tree.find_all(exp.Select):
                assert _positional_windows(select) <= 1, gen.query(i)


def _window_order_types(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[list[str], list[str]]]:
    """For each window with an ORDER BY in ``sql``: its ORDER BY keys and their DuckDB types, bound (not run)
    in the SELECT that holds the window (with the query's CTEs). Windows of a correlated SELECT (a LATERAL
    body) cannot be bound alone and are left out."""
    tree = sqlglot.parse_one(sql, dialect="duckdb")
    ctes = tree.args.get("with")
    out = []
    for select in tree.find_all(exp.Select):
        for item in select.expressions:
            for window in item.find_all(exp.Window):
                order = window.args.get("order")
                if not isinstance(order, exp.Order) or not order.expressions:
                    continue
                keys = [o.this if isinstance(o, exp.Ordered) else o for o in order.expressions]
                probe = select.copy()
                probe.set("expressions", [k.copy() for k in keys])
                for arg in ("order", "limit", "offset", "distinct", "qualify", "with"):
                    probe.set(arg, None)
                text = probe.sql(dialect="duckdb")
                if ctes is not None:
                    text = f"{ctes.sql(dialect='duckdb')} {text}"
                try:
                    types = [str(t) for t in con.sql(text).types]
                except duckdb.Error:
                    continue
                out.append(([k.sql(dialect="duckdb") for k in keys], types))
    return out


@pytest.mark.parametrize("schema", [TPCH, TPCDS], ids=lambda s: s.name)
def test_no_window_is_ordered_by_a_double(request, schema: Schema):
    """A window's ORDER BY never starts with a DOUBLE (rank() over stddev_pop() gave a false alarm: two values
    equal but for their last bits, summed in another order, rank the other way round). A total order
    (row_number, lag, …) may end in DOUBLE keys, after the exact ones. Typed by DuckDB itself, 400 queries."""
    con = duckdb_reference(request.getfixturevalue("fuzz_tpcds_data" if schema is TPCDS else "fuzz_data"))
    gen = QueryGenerator(SEED, schema=schema)
    checked = 0
    try:
        for i in range(400):
            sql = gen.query(i)
            for keys, types in _window_order_types(con, sql):
                checked += 1
                assert types[0] not in ("DOUBLE", "FLOAT"), f"window ordered by a DOUBLE {keys[0]}: {sql}"
    finally:
        con.close()
    assert checked >= 30


#: the SQL forms of the LATERAL/unnest grammar, and what shows each in a query's text
_NEW_FORMS = {
    "LATERAL (explicit)": re.compile(r"\bLATERAL \("),
    "implicit lateral": re.compile(
        r"(,|JOIN) \(SELECT [^()]*(\([^()]*\)[^()]*)*WHERE [^()]*\bt\d+\.\w+ = t\d+\.\w+"
    ),
    "unnest in FROM": re.compile(r"unnest\(\[[^\]]*\]\) AS t\d+\(x\)"),
    "(a, b) IN (SELECT x, y …)": re.compile(r"\(t\d+\.\w+, t\d+\.\w+\) (NOT )?IN \(SELECT"),
    "NULL-accepting correlation": re.compile(
        r"= coalesce\(t\d+\.\w+, |IS NOT DISTINCT FROM t\d+|OR t\d+\.\w+ IS NULL\)|[<>]=? coalesce\(t\d+"
    ),
}


@pytest.mark.parametrize("schema", [TPCH, TPCDS], ids=lambda s: s.name)
def test_new_forms_are_generated_rarely_and_valid(request, schema: Schema):
    """LATERAL (explicit and implicit), unnest in FROM, (a, b) IN (subquery) and NULL-accepting correlations
    each occur in some 0.5-12 % of queries (the older mix stays dominant), and DuckDB accepts the queries that
    hold them."""
    gen = QueryGenerator(SEED, schema=schema)
    n = 1000
    found: dict[str, list[str]] = {name: [] for name in _NEW_FORMS}
    for i in range(n):
        sql = gen.query(i)
        for name, pattern in _NEW_FORMS.items():
            if pattern.search(sql):
                found[name].append(sql)
    for name, queries in found.items():
        assert n * 0.005 <= len(queries) <= n * 0.12, f"{name}: {len(queries)} of {n} queries"
    con = duckdb_reference(request.getfixturevalue("fuzz_tpcds_data" if schema is TPCDS else "fuzz_data"))
    rejected = []
    sample = [sql for queries in found.values() for sql in queries[:15]]
    try:
        for sql in sample:
            try:
                con.sql(sql).fetchall()
            except duckdb.Error as exc:
                rejected.append(f"{exc}: {sql}")
    finally:
        con.close()
    assert len(rejected) <= len(sample) * 0.02, "\n".join(rejected)


def test_saved_cases_record_their_schema(tmp_path):
    """A case found on TPC-DS says so in its header (replayed on TPC-DS); cases without the line are TPC-H's."""
    save_case("SELECT 1 AS c0 FROM item AS t1", {"seed": "1 (query 2)", "schema": "tpcds"}, tmp_path)
    (tmp_path / "002.sql").write_text("-- seed: 7 (query 9)\nSELECT 1 AS c0 FROM nation AS t1\n")
    first, second = load_cases(tmp_path)
    assert (first.schema, first.sql) == ("tpcds", "SELECT 1 AS c0 FROM item AS t1")
    assert (second.schema, second.sql) == ("tpch", "SELECT 1 AS c0 FROM nation AS t1")
    assert {case.schema for case in load_cases()} <= {"tpch", "tpcds"}


def test_minimize_never_keeps_a_limit_without_its_order():
    """Dropping the ORDER BY of an ``ORDER BY … OFFSET 5`` left a query any rows answer (a false "wrong")."""
    sql = "SELECT t1.n_name, count(*) AS c1 FROM nation AS t1 GROUP BY 1 ORDER BY 2, 1 OFFSET 5"
    small = minimize(sql, lambda text: "OFFSET" in text.upper())
    assert "ORDER BY" in small.upper() and "OFFSET" in small.upper()


def test_float_order_ties_pass_and_wrong_orders_do_not():
    """Rows tied on the ORDER BY but for the last bits of a float key (``variance()`` summed in another order)
    may come in either order; a result not sorted by its own values, or with other values, stays wrong."""
    sql = "SELECT a, b, c FROM t ORDER BY 1, 2 DESC, 3"
    expected = pa.table({"a": [1, 1, 2], "b": [0.30000000000000004, 0.3, 5.0], "c": ["x", "y", "z"]})
    swapped = pa.table({"a": [1, 1, 2], "b": [0.30000000000000004, 0.3, 5.0], "c": ["y", "x", "z"]})
    assert compare_results(swapped, expected, sql) is not None
    assert float_order_ties(swapped, expected, sql)
    unsorted = pa.table({"a": [2, 1, 1], "b": [5.0, 0.3, 0.30000000000000004], "c": ["z", "y", "x"]})
    assert not float_order_ties(unsorted, expected, sql)
    other = pa.table({"a": [1, 1, 2], "b": [0.31, 0.3, 5.0], "c": ["y", "x", "z"]})
    assert not float_order_ties(other, expected, sql)
