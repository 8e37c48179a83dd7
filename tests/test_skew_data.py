"""Skewed TPC-H (``squall gen-tpch --skew jcch``, squall/tpch/skew.py): deterministic files, the documented
shares (measured with DuckDB), referential integrity, date-correlated keys, the CLI, and the 22 TPC-H queries
on two skew settings against DuckDB at W = 1, 3, 4 and 8 (local platform; SF from ``$SQUALL_SKEW_SF``)."""

from __future__ import annotations

import importlib.util
import io
import itertools
import math
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall import tpch
from squall.cli import main
from squall.driver.ir.nodes import WHOLE_QUERY_AT_W1
from squall.driver.options import PlannerOptions
from squall.errors import OptionError
from squall.testing import assert_same_result
from squall.tpch.skew import MARKER, SkewSpec, generate_skewed, read_marker
from tests.jcch_data import SETTINGS, skew_dataset, skew_sf
from tests.tpch_data import duckdb_over, tpch_dataset

SF = skew_sf()
WORKERS = (1, 4, 8)
SMALL = 0.01  # the generator's own tests


@pytest.fixture(scope="session")
def uniform(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tpch_dataset(SMALL, tmp_path_factory=tmp_path_factory)


def _scalar(con: duckdb.DuckDBPyConnection, sql: str) -> object:
    return con.execute(sql).fetchall()[0][0]


def _top(con: duckdb.DuckDBPyConnection, table: str, column: str, k: int = 3) -> list[tuple[int, float]]:
    """The k most frequent values of ``column`` and their share of the table's rows."""
    sql = f"select {column}, count(*) / (select count(*) from {table}) from {table} group by 1 order by 2 desc, 1 limit {k}"
    return [(int(v), float(s)) for v, s in con.execute(sql).fetchall()]


def _first_ranked(con: duckdb.DuckDBPyConnection, table: str, key: str, tag: str, seed: int = 0) -> int:
    """The key of rank 1 in the generator's hash ranking of a domain (the hot key and the Zipf head)."""
    return int(
        _scalar(con, f"select {key} from {table} order by hash({key}, {seed}, '{tag}'), {key} limit 1")
    )  # type: ignore[arg-type]


def _close(measured: float, expected: float, n: int) -> bool:
    """Within 5 binomial standard deviations (plus a few rows) of the expected share."""
    return abs(measured - expected) <= 5 * math.sqrt(expected * (1 - expected) / n) + 5 / n


# --- the generator ------------------------------------------------------------------------------------------


def test_same_seed_same_files_other_seed_other_keys(uniform: Path, tmp_path: Path) -> None:
    spec = SkewSpec(hot_share=0.1, hot_keys=2, zipf=1.0, seed=7, correlate_dates=True)
    a = generate_skewed(SMALL, tmp_path / "a", spec, source=uniform)
    b = generate_skewed(SMALL, tmp_path / "b", spec, source=uniform)
    assert [p.name for p in a] == [p.name for p in b]
    assert all(x.read_bytes() == y.read_bytes() for x, y in zip(a, b, strict=True))
    c = generate_skewed(
        SMALL, tmp_path / "c", SkewSpec(hot_share=0.1, hot_keys=2, zipf=1.0, seed=8), source=uniform
    )
    assert (tmp_path / "c" / "lineitem.parquet").read_bytes() != (
        tmp_path / "a" / "lineitem.parquet"
    ).read_bytes()
    assert read_marker(tmp_path / "a") == {"sf": SMALL, "parts": None, "spec": {
        "hot_share": 0.1, "hot_keys": 2, "zipf": 1.0, "seed": 7, "correlate_dates": True,
        "hot_orders": None, "order_zipf": None}}  # fmt: skip
    assert len(c) == len(a)


@pytest.mark.parametrize("hot_orders", [1, 1000], ids=["one-hot-order", "hot30"])
def test_hot_share_as_documented(hot_orders: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    spec = SkewSpec(hot_share=0.3, hot_keys=1, hot_orders=None if hot_orders == 1 else hot_orders)
    assert hot_orders == 1 or spec == SETTINGS["hot30"]
    data = skew_dataset(SMALL, spec, tmp_path_factory=tmp_path_factory)
    con = duckdb_over(data)
    try:
        n_l = int(_scalar(con, "select count(*) from lineitem"))  # type: ignore[arg-type]
        n_o = int(_scalar(con, "select count(*) from orders"))  # type: ignore[arg-type]
        hot_part = _first_ranked(con, "part", "p_partkey", "part")
        hot_cust = _first_ranked(con, "customer", "c_custkey", "cust")
        (key, share), (_, second) = _top(con, "lineitem", "l_partkey", 2)
        assert key == hot_part and _close(share, 0.3, n_l) and second < 0.01, (share, second)
        (key, share), (_, second) = _top(con, "orders", "o_custkey", 2)
        assert key == hot_cust and _close(share, 0.3, n_o) and second < 0.01, (share, second)
        con.execute(
            f"create temp table hot_orders as select o_orderkey as k from orders "
            f"order by hash(o_orderkey, 0, 'ord'), o_orderkey limit {hot_orders}"
        )
        # join-crossing correlation: the hot part's lines sit on the hot orders (but for the part's own
        # uniform lines), and the hot orders are the hot customer's
        elsewhere = _scalar(
            con,
            f"select count(*) from lineitem anti join hot_orders on k = l_orderkey where l_partkey = {hot_part}",
        )
        assert elsewhere <= 60  # type: ignore[operator]  # 1 part of 2,000 at SF 0.01 holds ~30 lines
        assert (
            _scalar(
                con,
                f"select count(*) from orders join hot_orders on k = o_orderkey where o_custkey <> {hot_cust}",
            )
            == 0
        )
        top_order, top_share = _top(con, "lineitem", "l_orderkey", 1)[0]
        if hot_orders == 1:
            assert top_order == _first_ranked(con, "orders", "o_orderkey", "ord") and _close(
                top_share, 0.3, n_l
            )
        else:  # spread: each hot order holds about 0.3/1000 of the lines (its own ≤ 7 lines besides)
            assert top_share < 0.3 / hot_orders * 2 + 7 / n_l, top_share
        # the hot part's lines spread over its 4 partsupp suppliers
        supp = con.execute(
            f"select l_suppkey, count(*) from lineitem where l_partkey = {hot_part} group by 1"
        ).fetchall()
        assert len(supp) == 4 and min(c for _, c in supp) > 0.2 * share * n_l
    finally:
        con.close()


def test_zipf_shares_as_documented(tmp_path_factory: pytest.TempPathFactory) -> None:
    spec = SETTINGS["zipf15"]
    assert spec.orders_zipf != spec.zipf  # order keys have their own exponent
    data = skew_dataset(SMALL, "zipf15", tmp_path_factory=tmp_path_factory)
    con = duckdb_over(data)
    try:
        for table, column, domain, key, tag, z in (
            ("lineitem", "l_orderkey", "orders", "o_orderkey", "ord", spec.orders_zipf),
            ("lineitem", "l_partkey", "part", "p_partkey", "part", spec.zipf),
            ("orders", "o_custkey", "customer", "c_custkey", "cust", spec.zipf),
        ):
            n = int(_scalar(con, f"select count(*) from {table}"))  # type: ignore[arg-type]
            size = int(_scalar(con, f"select count(*) from {domain}"))  # type: ignore[arg-type]
            norm = sum(r**-z for r in range(1, size + 1))
            top = _top(con, table, column, 3)
            assert top[0][0] == _first_ranked(con, domain, key, tag), (column, top)
            for rank, (_, share) in enumerate(top, start=1):
                assert _close(share, rank**-z / norm, n), (column, rank, share, rank**-z / norm)
    finally:
        con.close()


@pytest.mark.parametrize("name", [*SETTINGS, "dates"])
def test_referential_integrity_schema_and_layout(
    name: str, uniform: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    spec = SkewSpec(hot_share=0.1, zipf=1.0, correlate_dates=True) if name == "dates" else SETTINGS[name]
    data = skew_dataset(SMALL, spec, tmp_path_factory=tmp_path_factory)
    con = duckdb_over(data)
    try:
        checks = {
            "lineitem without order": "select count(*) from lineitem anti join orders on o_orderkey = l_orderkey",
            "lineitem without partsupp": "select count(*) from lineitem anti join partsupp "
            "on ps_partkey = l_partkey and ps_suppkey = l_suppkey",
            "orders without customer": "select count(*) from orders anti join customer on c_custkey = o_custkey",
            "duplicate (l_orderkey, l_linenumber)": "select count(*) - count(distinct (l_orderkey, l_linenumber)) from lineitem",
            "line numbers not 1..n": "select count(*) from (select l_orderkey, max(l_linenumber) m, count(*) c "
            "from lineitem group by 1) where m <> c",
            "duplicate o_orderkey": "select count(*) - count(distinct o_orderkey) from orders",
        }
        assert {what: _scalar(con, sql) for what, sql in checks.items()} == dict.fromkeys(checks, 0)
    finally:
        con.close()
    skewed, plain = tpch.dataset_files(data), tpch.dataset_files(uniform)
    for table in tpch.TABLES:
        (s,), (u,) = skewed[table], plain[table]
        ms, mu = pq.ParquetFile(s).metadata, pq.ParquetFile(u).metadata
        assert pq.read_schema(s).equals(pq.read_schema(u), check_metadata=True), table
        assert (ms.num_rows, ms.num_row_groups) == (mu.num_rows, mu.num_row_groups), table
        if table not in ("orders", "lineitem"):
            assert s.read_bytes() == u.read_bytes(), table


def test_correlated_dates_co_locate_orders_and_lineitem(tmp_path_factory: pytest.TempPathFactory) -> None:
    spec = SkewSpec(hot_share=0.0, correlate_dates=True)
    data = skew_dataset(SMALL, spec, 3, tmp_path_factory=tmp_path_factory)
    uniform = tpch_dataset(SMALL, 3, tmp_path_factory=tmp_path_factory)

    def corr(folder: Path) -> float:
        con = duckdb_over(folder)
        try:
            return float(_scalar(con, "select corr(o_orderkey, epoch(o_orderdate)) from orders"))  # type: ignore[arg-type]
        finally:
            con.close()

    assert corr(data) > 0.99 and abs(corr(uniform)) < 0.1
    files = tpch.dataset_files(data)
    ranges = []
    for orders_file, lineitem_file in zip(files["orders"], files["lineitem"], strict=True):
        o = pq.read_table(orders_file, columns=["o_orderkey", "o_orderdate"])
        keys = o.column("o_orderkey").to_pylist()
        assert keys == sorted(keys)
        ranges.append((keys[0], keys[-1]))
        l_keys = pq.read_table(lineitem_file, columns=["l_orderkey"]).column("l_orderkey").to_pylist()
        inside = sum(keys[0] <= k <= keys[-1] for k in l_keys)
        assert inside / len(l_keys) > 0.95, (lineitem_file.name, inside / len(l_keys))
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))
    assert (data / MARKER).is_file()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hot_share": 1.0}, "--hot-share"),
        ({"hot_share": -0.1}, "--hot-share"),
        ({"hot_keys": 0}, "--hot-keys"),
        ({"zipf": -1.0}, "--zipf"),
        ({"zipf": float("nan")}, "--zipf"),
        ({"hot_keys": None}, "--hot-keys"),
        ({"zipf": None}, "--zipf"),
        ({"hot_orders": 0}, "--hot-orders"),
        ({"order_zipf": -0.5}, "--order-zipf"),
        ({"seed": -1}, "--seed"),
    ],
)
def test_spec_rejects_bad_options(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(OptionError, match=match) as info:
        SkewSpec(**kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_cli_generates_and_rejects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "jcch"
    argv = ["gen-tpch", "--sf", "0.01", "--out", str(out), "--skew", "jcch", "--hot-share", "0.1", "--zipf", "1",
            "--hot-orders", "50", "--order-zipf", "0.5", "--seed", "3", "--parts", "2"]  # fmt: skip
    assert main(argv) == 0
    assert read_marker(out) == {"sf": 0.01, "parts": 2, "spec": {
        "hot_share": 0.1, "hot_keys": 1, "zipf": 1.0, "seed": 3, "correlate_dates": False,
        "hot_orders": 50, "order_zipf": 0.5}}  # fmt: skip
    assert [len(fs) for t, fs in tpch.dataset_files(out).items() if t == "lineitem"] == [2]
    capsys.readouterr()
    for bad in (
        ["--skew", "jcch", "--hot-share", "2"],
        ["--zipf", "1"],
        ["--skew", "jcch", "--hot-keys", "0"],
    ):
        assert main(["gen-tpch", "--sf", "0.01", "--out", str(tmp_path / "bad"), *bad]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err, err
    assert not (tmp_path / "bad").exists()


# --- the 22 queries on skewed data against DuckDB --------------------------------------------------------------

CASES = [(name, w) for name in SETTINGS for w in WORKERS]


_EXPECTED: dict[tuple[str, int], pa.Table] = {}
"""DuckDB's answer per (setting, query), computed once and checked against at every W."""


@pytest.fixture(scope="module", params=CASES, ids=[f"{name}-w{w}" for name, w in CASES])
def skewed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, squall.Connection, Path]]:
    name, w = request.param
    data = skew_dataset(SF, name, tmp_path_factory=tmp_path_factory)
    # Squall's own stage plan at W=1 too (by default DuckDB plans the whole query there)
    con = squall.connect(data=str(data), workers=w, planner_options=PlannerOptions(whole_query_at_w1=False))
    yield name, con, data
    con.close()


@pytest.mark.parametrize("n", tpch.QUERY_NUMBERS, ids=lambda n: f"q{n:02d}")
def test_tpch_on_skewed_data_matches_duckdb(skewed: tuple[str, squall.Connection, Path], n: int) -> None:
    name, con, data = skewed
    sql = tpch.query(n, sf=SF)
    if (name, n) not in _EXPECTED:
        ref = duckdb_over(data)
        try:
            _EXPECTED[name, n] = ref.sql(sql).to_arrow_table()
        finally:
            ref.close()
    assert_same_result(con.sql(sql).to_arrow(), _EXPECTED[name, n], sql, reference=_reference(data))


def _reference(data: Path) -> Callable[[str], pa.Table]:
    """DuckDB over ``data``, opened only if the comparator needs the rows tied with a group LIMIT cut."""

    def answer(sql: str) -> pa.Table:
        ref = duckdb_over(data)
        try:
            return ref.sql(sql).to_arrow_table()
        finally:
            ref.close()

    return answer


def test_tpch_on_skewed_data_whole_query_at_w1(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The thin-shell path once: at W=1 by default DuckDB plans the whole query over Squall's scans."""
    name, n = list(SETTINGS)[-1], 18
    data = skew_dataset(SF, name, tmp_path_factory=tmp_path_factory)
    sql = tpch.query(n, sf=SF)
    with squall.connect(data=str(data), workers=1) as con:
        assert any(note.startswith(WHOLE_QUERY_AT_W1) for note in con.plan(sql).notes)
        actual = con.sql(sql).to_arrow()
    reference = _reference(data)
    assert_same_result(actual, reference(sql), sql, reference=reference)


# --- benchmarks/skew.py ----------------------------------------------------------------------------------------


def _load_benchmark() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "skew.py"
    spec = importlib.util.spec_from_file_location("squall_benchmark_skew", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_benchmark_reports_skew_and_checks_results(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = _load_benchmark()
    uniform = tpch_dataset(SMALL, tmp_path_factory=tmp_path_factory)
    skew_dataset(SMALL, SkewSpec(hot_share=0.3), tmp_path_factory=tmp_path_factory)  # the folder hot30 uses
    out = io.StringIO()
    # broadcasts off: at SF0.01 orders is small enough for every rank to read whole, and lineitem would not move
    argv = ["--sf", str(SMALL), "--workers", "4", "--queries", "3", "--settings", "uniform,hot30",
            "--cache", str(uniform.parent), "--planner-option", "broadcast_limit=0"]  # fmt: skip
    assert bench.main(argv, out=out) == 0, out.getvalue()
    lines = out.getvalue().splitlines()
    q3 = {line.split()[1]: line for line in lines if " Q03 " in line}
    assert set(q3) == {"uniform", "hot30"} and all(line.endswith("  ok") for line in q3.values())
    # Q3 hash-partitions lineitem by l_orderkey: the hot order's rank gets 0.3 + 0.7/4 of the rows (1.9x the mean)
    skews = [float(x) for x in re.findall(r"x\d+ skew (\d+\.\d+)", q3["hot30"])]
    assert max(skews) > 1.6, q3["hot30"]
    assert any(line.startswith("W4 hot30") and "cpu max x" in line for line in lines)
    assert bench.main(["--settings", "nope"]) == 2
    assert bench.main(["--planner-option", "nope=1"]) == 2
    assert "settings are" in capsys.readouterr().err
