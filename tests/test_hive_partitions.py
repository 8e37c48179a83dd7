"""Hive partitions: ``key=value`` folders written by DuckDB ``COPY … PARTITION_BY`` are typed columns, read as
DuckDB reads them (``read_parquet(…, hive_partitioning = true, union_by_name = true)``), and filters on them
prune partitions (bytes read, explain, stats) — locally, on S3 (moto) and through the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlglot

import squall
from squall.driver.catalog import hive
from squall.driver.catalog.parquet import ParquetSource
from squall.errors import DataError
from squall.operators.storage import storage_for
from squall.testing import assert_same_result

from .s3server import moto_available, moto_s3

ORDERS = (
    "SELECT i AS id, 1992 + i % 7 AS o_year, (i * 37 % 1000) / 10 AS amount, 'note ' || (i % 13) AS note "
    "FROM range(7000) t(i)"
)
EVENTS = (
    "SELECT i AS id, DATE '2024-01-30' + (i % 3)::INT AS day, "
    "CASE WHEN i % 5 = 0 THEN NULL ELSE 'a b/' || (i % 4) END AS kind, i * 0.5 AS v FROM range(600) t(i)"
)
QUERIES = [
    "SELECT o_year, count(*) AS n, sum(amount) AS total FROM orders GROUP BY o_year",
    "SELECT * FROM orders WHERE o_year = 1990 + 5 AND id < 300",
    "SELECT o_year, count(*) AS n FROM orders WHERE o_year IN (1993, 1997) OR o_year > 1997 GROUP BY o_year",
    "SELECT day, kind, count(*) AS n, sum(v) AS v FROM events GROUP BY day, kind",
    "SELECT kind, count(*) AS n FROM events WHERE kind IS NULL OR kind = 'a b/1' GROUP BY kind",
    "SELECT count(*) AS n FROM events WHERE day BETWEEN DATE '2024-01-31' AND DATE '2024-02-01'",
    "SELECT e.day, o.o_year, count(*) AS n FROM events e JOIN orders o ON e.id = o.id GROUP BY e.day, o.o_year",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """orders/ by o_year (7 integer partitions); events/ by day (DATE) and kind (text: URL-encoded, NULL)."""
    root = tmp_path_factory.mktemp("hive")
    con = duckdb.connect()
    con.sql(f"COPY ({ORDERS}) TO '{root}/orders' (FORMAT parquet, PARTITION_BY (o_year))")
    con.sql(f"COPY ({EVENTS}) TO '{root}/events' (FORMAT parquet, PARTITION_BY (day, kind))")
    assert (root / "events/day=2024-01-30/kind=a%20b%2F1").is_dir()
    assert (root / "events/day=2024-01-30/kind=__HIVE_DEFAULT_PARTITION__").is_dir()
    return root


def reference(root: Path | str) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for t in ("orders", "events"):
        con.sql(
            f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{root}/{t}/**/*.parquet', "
            "hive_partitioning = true, union_by_name = true)"
        )
    return con


@pytest.mark.parametrize(("workers", "native"), [(1, True), (2, True), (2, False)])
def test_answers_match_duckdb(data, workers, native):
    """Local workers read the files with DuckDB (partition values as casts in its view) or, with native scans
    off, through Arrow (as on S3)."""
    ref = reference(data)
    with squall.connect(data=str(data), workers=workers, storage_options={"native_scans": native}) as con:
        assert con.sql("SELECT * FROM orders LIMIT 0").to_arrow().schema.names == [
            "id",
            "amount",
            "note",
            "o_year",
        ]
        for sql in QUERIES:
            assert_same_result(con.sql(sql).to_arrow(), ref.sql(sql).to_arrow_table(), sql)


def test_types_follow_duckdb(data):
    with squall.connect(data=str(data), workers=1) as con:
        ours = con.sql("SELECT * FROM events LIMIT 0").to_arrow().schema
    theirs = reference(data).sql("SELECT * FROM events LIMIT 0").to_arrow_table().schema
    assert ours.names == theirs.names == ["id", "v", "day", "kind"]
    assert [ours.field(n).type for n in ("day", "kind")] == [pa.date32(), pa.string()]
    assert [theirs.field(n).type for n in ("day", "kind")] == [pa.date32(), pa.string()]


def test_a_partition_filter_reads_its_share_and_says_so(data):
    with squall.connect(data=str(data), workers=2) as con:
        full = con.sql("SELECT sum(amount) AS s FROM orders")
        one = con.sql("SELECT sum(amount) AS s FROM orders WHERE o_year = 1990 + 5")
        assert one.stats["bytes_scanned"] <= 0.45 * full.stats["bytes_scanned"], (one.stats, full.stats)
        (notes,) = one.stats["sources"]
        assert notes["partitions"] == "1 of 7" and notes["files"] == "1 of 7" and notes["table"] == "orders"
        assert full.stats["sources"][0]["partitions"] == "7 of 7"
        text = con.explain("SELECT sum(amount) AS s FROM orders WHERE o_year = 1995")
        assert "source: partitions 1 of 7, files 1 of 7" in text
        two = con.explain(
            "SELECT count(*) FROM events WHERE day = DATE '2024-01-31' AND kind IN ('a b/1', 'x')"
        )
        assert "partitions 1 of 15" in two


def test_pruning_evaluates_filters_with_duckdb(data):
    source = ParquetSource("orders", str(data / "orders"), storage_for(str(data)))
    where = sqlglot.parse_one("SELECT 1 WHERE (o_year + 1) % 2 = 0 AND o_year BETWEEN 1990 AND 1996").args[
        "where"
    ]
    filters = list(where.this.flatten())
    info = source.scan_info(filters)
    years = sorted({p.split("o_year=")[1].split("/")[0] for p in info.files})
    assert years == ["1993", "1995"] and dict(info.source_notes)["partitions"] == "2 of 7"
    assert {rg.path for rg in info.row_groups} == set(info.files)
    # a filter DuckDB cannot evaluate on the values alone prunes nothing (and is not an error)
    assert source.scan_info([sqlglot.parse_one("amount > 5")]).files == source.table_info().files


RAW_VALUES = [
    ["1", "-5", "20240101"],
    ["01", "2"],
    ["+3"],
    ["1.5", "2"],
    ["2024-01-01", "2024-1-2"],
    ["2024-01-01 10:00:00", "2024-01-02T11:30"],
    ["2024-01-01", "2024-01-01 10:00:00"],
    ["1", "2024-01-01"],
    ["1", "__HIVE_DEFAULT_PARTITION__"],
    ["1", "NULL"],
    ["abc", "NULL", "__HIVE_DEFAULT_PARTITION__"],
    ["a%20b", "a%2Fb", "%31"],
    ["9223372036854775807", "-9223372036854775808"],
    ["9223372036854775808"],
    ["0x10", "0b101"],
    ["1", ""],
]


@pytest.mark.parametrize("values", RAW_VALUES, ids=lambda v: "|".join(v))
def test_partition_values_type_as_duckdb_types_them(tmp_path, values):
    for i, raw in enumerate(values):
        folder = tmp_path / "t" / f"k={raw}"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"x": [i]}), folder / "f.parquet")
    ref = duckdb.sql(
        f"SELECT x, k FROM read_parquet('{tmp_path}/t/**/*.parquet', hive_partitioning = true) ORDER BY x"
    ).to_arrow_table()
    source = ParquetSource("t", str(tmp_path / "t"), storage_for(str(tmp_path)))
    info = source.table_info()
    assert info.schema.field("k").type == ref.schema.field("k").type
    with squall.connect(workers=1) as con:
        con.register("t", str(tmp_path / "t"))
        ours = con.sql("SELECT x, k FROM t ORDER BY x").to_arrow()
    assert ours.column("k").to_pylist() == ref.column("k").to_pylist()


def test_a_file_column_named_like_a_key_takes_the_path_value(tmp_path):
    folder = tmp_path / "t" / "zeta=1"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"Zeta": [5, 6], "q": [1, 2]}), folder / "a.parquet")
    pq.write_table(pa.table({"q": [3]}), folder / "b.parquet")
    sql = "SELECT * FROM t"
    ref = duckdb.sql(
        f"SELECT * FROM read_parquet('{tmp_path}/t/**/*.parquet', hive_partitioning = true, union_by_name = true)"
    ).to_arrow_table()
    with squall.connect(workers=1) as con:
        con.register("t", str(tmp_path / "t"))
        ours = con.sql(sql).to_arrow()
    assert ours.schema.names == ref.schema.names == ["Zeta", "q"]
    assert_same_result(ours, ref, sql)


def test_files_with_different_keys_are_refused(tmp_path):
    for rel in ("t/a=1/f.parquet", "t/a=2/b=3/f.parquet"):
        (tmp_path / rel).parent.mkdir(parents=True)
        pq.write_table(pa.table({"x": [1]}), tmp_path / rel)
    source = ParquetSource("t", str(tmp_path / "t"), storage_for(str(tmp_path)))
    with pytest.raises(
        DataError, match=r"^table t: files with different partition keys: .* has a, .* has a, b$"
    ):
        source.table_info()


def test_partitioning_parses_any_depth_and_ignores_the_file_name():
    assert hive.parse("x/a=1/y/b=c%3Dd/e=f.parquet") == {"a": "1", "b": "c%3Dd"}
    assert hive.parse("a=b=c/f.parquet") == {}


BUCKET = "squall-hive"


def test_on_s3(data):
    reason = moto_available()
    if reason is not None:
        pytest.skip(reason)
    with moto_s3(BUCKET) as server:
        client = server.client()
        prefix = f"hive-{uuid.uuid4().hex[:6]}"
        for path in sorted(p for p in (data / "orders").rglob("*") if p.is_file()):
            client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.relative_to(data)}", Body=path.read_bytes())
        ref = reference(data)
        with squall.connect(data=f"s3://{BUCKET}/{prefix}/", workers=2) as con:
            for sql in QUERIES[:3]:
                assert_same_result(con.sql(sql).to_arrow(), ref.sql(sql).to_arrow_table(), sql)
            one = con.sql("SELECT count(*) AS n FROM orders WHERE o_year = 1995")
            assert one.stats["sources"][0]["files"] == "1 of 7"


def test_cli_query_on_a_hive_folder(data):
    sql = "SELECT o_year, count(*) AS n FROM orders WHERE o_year >= 1997 GROUP BY o_year ORDER BY o_year"
    env = {k: v for k, v in os.environ.items() if k != "SQUALL_FAULTS"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "squall.cli",
            "query",
            sql,
            "--data",
            str(data),
            "--workers",
            "2",
            "--format",
            "csv",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ['"o_year","n"', "1997,1000", "1998,1000"]


def test_a_file_column_named_like_the_key_does_not_steer_page_index_skipping(tmp_path):
    """``k=1/`` holds a file whose own ``k`` column says 2 (with a page index): the path's value wins, so
    ``k = 1`` keeps every row, and the file's page index (k = 2 everywhere) must not rule its pages out."""
    import squall

    folder = tmp_path / "t" / "k=1"
    folder.mkdir(parents=True)
    rows = pa.table({"k": pa.array([2] * 1000, pa.int64()), "v": pa.array(range(1000), pa.int64())})
    pq.write_table(rows, folder / "part-0.parquet", write_page_index=True, data_page_size=512)
    with squall.connect(str(tmp_path), workers=1) as con:
        got = con.sql("SELECT count(*) AS n, sum(v) AS s FROM t WHERE k = 1").arrow().to_pylist()
    ref = duckdb.sql(
        f"SELECT count(*) AS n, sum(v) AS s FROM read_parquet('{tmp_path}/t/**/*.parquet', hive_partitioning = true) "
        "WHERE k = 1"
    ).fetchall()
    assert got == [{"n": ref[0][0], "s": ref[0][1]}] and ref[0][0] == 1000
