"""Join filters (Bloom filter / key set pushdown): the filter SQL never drops a match, its false-positive
rate, and end to end: rows removed and bytes saved show in stats while answers stay DuckDB's."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import squall
import squall.tpch as tpch
from squall.driver.options import PlannerOptions
from squall.driver.planner.joinfilter import JoinFilter, build_sql, probe_sql
from squall.driver.planner.rules.join_filters import _bits
from squall.plan import Plan
from squall.testing import assert_same_result
from tests.fuzz.dataset import duckdb_reference
from tests.test_sql_coverage import NOT_SUPPORTED, _random_tables
from tests.test_sql_coverage import QUERIES as COVERAGE
from tests.test_sql_coverage import REL_TOL as COVERAGE_REL_TOL
from tests.tpch_data import duckdb_over, tpch_dataset

# --- the filter's SQL on its own ------------------------------------------------------------------------------


def _run_filter(
    kind: str, build: pa.Table, probe: pa.Table, ranks: int, bits: int = 1 << 12
) -> tuple[set[tuple[object, ...]], int]:
    """Rows of ``probe`` (as key tuples) the filter keeps, building it in ``ranks`` disjoint partials."""
    con = duckdb.connect()
    keys = [f'"{n}"' for n in build.column_names]
    con.register("b", build)
    types = tuple(str(t) for t in con.sql("SELECT * FROM b").types)
    partials = []
    for r in range(ranks):
        part = build.slice(
            r * build.num_rows // ranks, (r + 1) * build.num_rows // ranks - r * build.num_rows // ranks
        )
        con.register("part", part)
        sql = build_sql(kind, keys, types, bits).format('"part"')
        partials.append(con.sql(sql).to_arrow_table())
        con.unregister("part")
    merged = pa.concat_tables(partials)
    con.register("f", merged)
    con.register("p", probe)
    f = JoinFilter(kind, 1, "f", tuple(probe.column_names), types, bits)
    kept = con.sql(probe_sql(f, tuple(probe.column_names)).format('"p"', '"f"')).fetchall()
    con.close()
    return set(kept), merged.nbytes


keys_1 = st.lists(st.one_of(st.none(), st.integers(-(2**40), 2**40)), max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(build=keys_1, probe=keys_1, ranks=st.integers(1, 3), kind=st.sampled_from(["bloom", "keys"]))
def test_single_key_filter_keeps_every_match_and_no_null(build, probe, ranks, kind) -> None:
    b = pa.table({"k": pa.array(build, pa.int64())})
    p = pa.table(
        {"k": pa.array(probe, pa.int32() if all(v is None or abs(v) < 2**31 for v in probe) else pa.int64())}
    )
    kept, _ = _run_filter(kind, b, p, ranks)
    wanted = {(v,) for v in probe if v is not None and v in set(build)}
    assert wanted <= kept  # never drops a row that matches
    assert all(v is not None for (v,) in kept)  # NULLs never match
    assert kept <= {(v,) for v in probe}
    if kind == "keys":
        assert kept == wanted


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    build=st.lists(st.tuples(st.one_of(st.none(), st.text(max_size=3)), st.integers(0, 5)), max_size=40),
    probe=st.lists(st.tuples(st.one_of(st.none(), st.text(max_size=3)), st.integers(0, 5)), max_size=40),
    ranks=st.integers(1, 3),
    kind=st.sampled_from(["bloom", "keys"]),
)
def test_two_column_keys(build, probe, ranks, kind) -> None:
    b = pa.table({"a": [x for x, _ in build], "n": pa.array([y for _, y in build], pa.int64())})
    p = pa.table({"a": [x for x, _ in probe], "n": pa.array([float(y) for _, y in probe], pa.float64())})
    kept, _ = _run_filter(kind, b, p, ranks)
    have = {(x, float(y)) for x, y in build if x is not None}
    wanted = {(x, float(y)) for x, y in probe if x is not None and (x, float(y)) in have}
    assert wanted <= kept
    assert all(x is not None for x, _ in kept)


def test_bloom_false_positive_rate_and_size() -> None:
    n = 20_000
    bits = _bits(n)
    b = pa.table({"k": pa.array(range(0, 2 * n, 2), pa.int64())})  # even numbers
    p = pa.table({"k": pa.array(range(1, 20 * n, 2), pa.int64())})  # odd numbers: none matches
    kept, nbytes = _run_filter("bloom", b, p, 2, bits)
    assert len(kept) / p.num_rows < 0.03  # ≥10 bits per key, 3 hashes: ~1-2 %
    assert (
        nbytes <= 2 * (bits // 64 * 12) * 1.05
    )  # two partials of (w int32, bits uint64) words (+ Arrow validity)
    assert nbytes < 0.7 * b.nbytes  # smaller than the keys themselves


# --- end to end -----------------------------------------------------------------------------------------------

QUERIES = [
    # hash-partitioned both sides: filtered orders' keys cut lineitem before it is sent
    "SELECT count(*) AS n, sum(l_quantity) AS q FROM lineitem JOIN orders ON l_orderkey = o_orderkey "
    "WHERE o_orderdate < DATE '1992-06-01'",
    # IN subquery (Q18's pattern): the semi join's keys reach orders and lineitem
    "SELECT o_orderkey, sum(l_quantity) AS q FROM orders JOIN lineitem ON o_orderkey = l_orderkey "
    "WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem GROUP BY l_orderkey HAVING sum(l_quantity) > 250) "
    "GROUP BY o_orderkey ORDER BY o_orderkey",
    # NULL keys on the probe side (a nullable expression) and two-column keys
    "SELECT count(*) AS n FROM lineitem JOIN partsupp ON l_partkey = ps_partkey AND l_suppkey = ps_suppkey "
    "WHERE ps_availqty < 300",
]


@pytest.fixture(scope="module")
def sf001(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tpch_dataset(0.01, tmp_path_factory=tmp_path_factory)


@pytest.fixture(scope="module")
def duck(sf001: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb_over(sf001)
    yield con
    con.close()


def _exchanged(stats: dict) -> int:
    return sum(e.get("bytes_sent", 0) for e in stats["exchanges"])


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("i", range(len(QUERIES)))
def test_filters_remove_rows_and_bytes_never_answers(sf001: Path, duck, workers: int, i: int) -> None:
    sql = QUERIES[i]
    # small data: price the extra round at 0 and hash-partition everything so the filters are planned
    force = {
        "broadcast_limit": 0.0,
        "join_filter_round_bytes": 0.0,
        "replicated_scan_rows": 0.0,
        "join_filter_max_keep": 1.0,
        "join_filter_min_key_share": 0.0,
    }
    on = squall.connect(str(sf001), workers=workers, planner_options=PlannerOptions(**force))
    off = squall.connect(
        str(sf001), workers=workers, planner_options=PlannerOptions(disabled_rules=("join_filters",), **force)
    )
    try:
        expected = duck.sql(sql).to_arrow_table()
        with_filters = on.sql(sql)
        without = off.sql(sql)
        assert_same_result(with_filters.arrow(), expected, sql)
        assert_same_result(without.arrow(), expected, sql)
        filters = with_filters.stats["join_filters"]
        assert filters, on.explain(sql)
        text = on.explain(sql)
        assert all(f["filter"] in text for f in filters)  # each filter is a note of the plan
        assert without.stats["join_filters"] == []
        assert sum(f["rows_removed"] for f in filters) > 0
        assert all(f["rows_after"] <= f["rows_before"] for f in filters)
        assert _exchanged(with_filters.stats) < _exchanged(without.stats)
    finally:
        on.close()
        off.close()


def test_plan_with_join_filters_round_trips(sf001: Path) -> None:
    con = squall.connect(
        str(sf001),
        workers=2,
        planner_options=FORCED,
    )
    try:
        plan = con.plan(QUERIES[0])
    finally:
        con.close()
    assert any(s.join_filters for s in plan.stages)
    assert Plan.from_json(plan.to_json()) == plan


# --- the suites with join filters forced on every eligible join ------------------------------------------------

FORCED = PlannerOptions(
    broadcast_limit=0.0,
    join_filter_round_bytes=0.0,
    replicated_scan_rows=0.0,
    join_filter_max_keep=1.0,
    join_filter_min_key_share=0.0,
)


@pytest.fixture(
    scope="module", params=[(2, "keys"), (4, "keys"), (3, "bloom")], ids=lambda p: f"w{p[0]}-{p[1]}"
)
def forced(request, sf001: Path) -> Iterator[squall.Connection]:
    workers, kind = request.param
    options = FORCED if kind == "keys" else dataclasses.replace(FORCED, join_filter_exact_keys=0)
    con = squall.connect(str(sf001), workers=workers, planner_options=options)
    yield con, kind
    con.close()


@pytest.mark.parametrize("n", tpch.QUERY_NUMBERS, ids=lambda n: f"q{n:02d}")
def test_tpch_with_forced_filters(forced, duck, n: int) -> None:
    con, kind = forced
    sql = tpch.query(n)
    result = con.sql(sql)
    assert_same_result(result.to_arrow(), duck.sql(sql).to_arrow_table(), sql)
    for f in result.stats["join_filters"]:
        assert 0 <= f["rows_after"] <= f["rows_before"]
        assert f["filter"].startswith("bloom filter" if kind == "bloom" else "key set"), f["filter"]


@pytest.fixture(scope="module")
def coverage_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sqlcov-filters")
    for name, table in _random_tables().items():
        pq.write_table(table, folder / f"{name}.parquet", row_group_size=500)
    return folder


@pytest.fixture(scope="module")
def coverage_pair(coverage_data: Path) -> Iterator[tuple[squall.Connection, duckdb.DuckDBPyConnection]]:
    con = squall.connect(str(coverage_data), workers=3, planner_options=FORCED)
    ref = duckdb_reference(coverage_data)
    yield con, ref
    con.close()
    ref.close()


@pytest.mark.parametrize("name", sorted(set(COVERAGE) - set(NOT_SUPPORTED)))
def test_sql_coverage_with_forced_filters(coverage_pair, name: str) -> None:
    con, ref = coverage_pair
    sql = COVERAGE[name]
    expected = ref.sql(sql).to_arrow_table()
    rel_tol = COVERAGE_REL_TOL.get(name, 1e-9)  # DuckDB's own answer moves that much (see the coverage suite)
    assert_same_result(con.sql(sql).to_arrow(), expected, sql, rel_tol=rel_tol, reference=ref)


# --- a LEFT/semi/anti join's right side cut by the keys of a replicated scan that holds every left key ----------

#: SF0.01: part (2,000 rows) is read whole by every rank, lineitem (60k) and partsupp (8k) are split; Q17's and
#: Q2's subqueries planned as written (by default sql/subquery_window makes windows of them: no join to cut)
LEFT_OPTIONS = PlannerOptions(
    replicated_scan_rows=5000, join_filter_max_keep=1.0, disabled_rules=("subquery_window",)
)

LEFT_QUERIES = {
    "q17": tpch.query(17, sf=0.01),
    "q20": tpch.query(20, sf=0.01),
    "q02": tpch.query(2, sf=0.01),
    "user_left_join": "SELECT p_partkey, count(l_orderkey) AS n, sum(l_quantity) AS q FROM part "
    "LEFT JOIN lineitem ON l_partkey = p_partkey WHERE p_size < 4 GROUP BY p_partkey ORDER BY p_partkey",
    "grouped_right_side_with_having": "SELECT p_partkey, x.s FROM part LEFT JOIN (SELECT l_partkey, "
    "sum(l_quantity) AS s FROM lineitem GROUP BY l_partkey HAVING sum(l_quantity) > 50) AS x "
    "ON x.l_partkey = p_partkey WHERE p_size = 7 ORDER BY 1",
    "not_exists_anti_join": "SELECT p_partkey FROM part WHERE p_size < 3 AND NOT EXISTS "
    "(SELECT * FROM lineitem WHERE l_partkey = p_partkey AND l_quantity > 45) ORDER BY 1",
    "exists_semi_join_reversed": "SELECT p_partkey, p_size FROM part WHERE p_size < 3 AND EXISTS "
    "(SELECT * FROM lineitem WHERE l_partkey = p_partkey AND l_quantity > 45) ORDER BY 1",
    "correlated_count_is_0_for_no_rows": "SELECT p_partkey, (SELECT count(*) FROM lineitem "
    "WHERE l_partkey = p_partkey AND l_quantity > 45) AS n FROM part WHERE p_size = 3 ORDER BY 1",
}


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("name", sorted(LEFT_QUERIES))
def test_right_side_cut_by_a_replicated_key_source(sf001: Path, duck, workers: int, name: str) -> None:
    sql = LEFT_QUERIES[name]
    on = squall.connect(str(sf001), workers=workers, planner_options=LEFT_OPTIONS)
    off = squall.connect(
        str(sf001),
        workers=workers,
        planner_options=dataclasses.replace(LEFT_OPTIONS, disabled_rules=("join_filters", "subquery_window")),
    )
    try:
        expected = duck.sql(sql).to_arrow_table()
        with_filters, without = on.sql(sql), off.sql(sql)
        assert_same_result(with_filters.arrow(), expected, sql)
        assert_same_result(without.arrow(), expected, sql)
        text = on.explain(sql)
        left = [f for f in with_filters.stats["join_filters"] if "computed on every rank" in f["filter"]]
        table = "partsupp" if name == "q02" else "lineitem"
        assert left and f"scan of {table}" in left[0]["filter"], text
        assert sum(f["rows_removed"] for f in left) > 0
        assert _exchanged(with_filters.stats) < _exchanged(without.stats)
    finally:
        on.close()
        off.close()


# --- a LEFT/semi/anti join's right side cut by its left side's keys, sent in an extra round ----------------------

#: everything hash-partitioned; the right sides' keys (lineitem's l_orderkey) are not unique, so the build side
#: filter of a semi join does not apply and the left side (orders: unique keys) sends its keys instead
ROUND_OPTIONS = PlannerOptions(
    broadcast_limit=0.0, replicated_scan_rows=0.0, join_filter_round_bytes=0.0, join_filter_max_keep=1.0
)

ROUND_QUERIES = {
    "q04_exists": tpch.query(4, sf=0.01),
    "not_exists": "SELECT o_orderpriority, count(*) AS n FROM orders WHERE o_orderdate < DATE '1992-04-01' "
    "AND NOT EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey AND l_quantity > 40) "
    "GROUP BY o_orderpriority ORDER BY 1",
    "left_join": "SELECT o_orderkey, count(l_linenumber) AS n, sum(l_quantity) AS q FROM orders "
    "LEFT JOIN lineitem ON l_orderkey = o_orderkey AND l_quantity > 45 "
    "WHERE o_orderdate < DATE '1992-03-01' GROUP BY o_orderkey ORDER BY o_orderkey",
}


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("name", sorted(ROUND_QUERIES))
def test_right_side_cut_by_the_left_sides_keys(sf001: Path, duck, workers: int, name: str) -> None:
    sql = ROUND_QUERIES[name]
    on = squall.connect(str(sf001), workers=workers, planner_options=ROUND_OPTIONS)
    off = squall.connect(
        str(sf001),
        workers=workers,
        planner_options=dataclasses.replace(ROUND_OPTIONS, disabled_rules=("join_filters",)),
    )
    try:
        expected = duck.sql(sql).to_arrow_table()
        with_filters, without = on.sql(sql), off.sql(sql)
        assert_same_result(with_filters.arrow(), expected, sql)
        assert_same_result(without.arrow(), expected, sql)
        text = on.explain(sql)
        cut = [f for f in with_filters.stats["join_filters"] if "scan of lineitem" in f["filter"]]
        assert cut and "o_orderkey" in text.split("of the build keys", 1)[1].splitlines()[0], text
        assert sum(f["rows_removed"] for f in cut) > 0
        # the rows before: the scan's row groups on every rank, from the footers (no second read of the scan)
        assert all(
            f["rows_before"] == pq.ParquetFile(sf001 / "lineitem.parquet").metadata.num_rows for f in cut
        )
        assert _exchanged(with_filters.stats) < _exchanged(without.stats)
    finally:
        on.close()
        off.close()


# --- an uncorrelated scalar filter is applied before the semi and anti joins of the same WHERE ---------------------

SCALAR_THEN_ANTI = (
    "SELECT count(*) AS n, sum(c_acctbal) AS s FROM customer "
    "WHERE NOT EXISTS (SELECT * FROM orders WHERE o_custkey = c_custkey) "
    "AND c_acctbal > (SELECT avg(c_acctbal) FROM customer WHERE c_acctbal > 0)"
)


def _anti_join_left(sf001: Path, sql: str) -> list:
    """The filters below the anti join of ``sql``'s logical plan (as translated, before planning)."""
    from squall.driver.catalog.tables import Catalog
    from squall.driver.compile import translate_sql
    from squall.driver.ir.nodes import Filter, Join, Node

    def walk(n: Node) -> Iterator[Node]:
        yield n
        for c in n.children:
            yield from walk(c)

    catalog = Catalog()
    catalog.register_folder(str(sf001))
    node = translate_sql(catalog, sql)[0].node
    (anti,) = [n for n in walk(node) if isinstance(n, Join) and n.kind == "anti"]
    return [n for n in walk(anti.left) if isinstance(n, Filter)]


def test_uncorrelated_scalar_filter_goes_below_the_anti_join(sf001: Path, duck) -> None:
    """Written after the NOT EXISTS, the scalar comparison still filters the anti join's left side (TPC-H
    Q22), so the left side's key set that cuts ``orders`` holds only the rows that pass it."""
    filters = _anti_join_left(sf001, SCALAR_THEN_ANTI)
    assert any('"c_acctbal" >' in f.predicate.sql() for f in filters), filters
    con = squall.connect(str(sf001), workers=2, planner_options=ROUND_OPTIONS)
    try:
        got = con.sql(SCALAR_THEN_ANTI)
        assert_same_result(got.arrow(), duck.sql(SCALAR_THEN_ANTI).to_arrow_table(), SCALAR_THEN_ANTI)
        cut = [f for f in got.stats["join_filters"] if "scan of orders" in f["filter"]]
        assert cut and sum(f["rows_removed"] for f in cut) > 0, got.stats["join_filters"]
    finally:
        con.close()
