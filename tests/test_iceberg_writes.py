"""Writes to Iceberg tables of a named catalog (``squall.driver.write.iceberg``): CREATE TABLE AS (partitioned by
transforms), INSERT INTO, CREATE OR REPLACE and DROP TABLE of Squall's tables — on a SQL catalog (sqlite, a local
warehouse) at W=1 and W=2, and on a Glue catalog on moto's server with its warehouse on S3.

Every table is read back by pyiceberg (``table.scan().to_arrow()``) and by Squall and compared with DuckDB's
answer over the source data; every statement adds exactly one snapshot; every data file's partition record is
checked against its rows with pyiceberg's own transforms (bucket included). Refused statements and failed
queries (a cast error at run time, a rank crashing after it wrote) leave no snapshot and no file behind.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import uuid
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall.driver.write import iceberg as iceberg_writes
from squall.driver.write.iceberg_partitions import bucket_hash, parse_field
from squall.errors import (
    BindError,
    DataError,
    NotSupportedError,
    OptionError,
    QueryRuntimeError,
    UnsafeQueryError,
    WorkerError,
)  # fmt: skip
from squall.testing import assert_same_result
from tests.s3server import moto_available, moto_s3

BUCKET = "squall-iceberg-writes"
ROWS = 3000
EVENTS = """SELECT i::BIGINT AS k, (DATE '2023-11-20' + ((i * 37) % 200)::INTEGER)::DATE AS d,
  TIMESTAMP '2024-01-01 00:00:00' + to_seconds((i * 7919) % (86400 * 9)) AS ts,
  CASE WHEN i % 11 = 0 THEN NULL ELSE ['red', 'green', 'blue', 'a longer colour name'][1 + i % 4] END AS s,
  (i % 1000)::DECIMAL(12, 2) / 7 AS v, (i % 17)::DOUBLE / 3 AS f, (i % 5)::TINYINT AS small, i % 3 = 0 AS b
FROM range(3000) t(i)"""


# --- fixtures --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """``events``: 3000 rows in 6 row groups (so two ranks both write)."""
    folder = tmp_path_factory.mktemp("iceberg-writes-data")
    con = duckdb.connect()
    con.sql(f"COPY ({EVENTS}) TO '{folder}/events.parquet' (FORMAT parquet, ROW_GROUP_SIZE 500)")
    con.close()
    return folder


@pytest.fixture(scope="module")
def reference(data):
    con = duckdb.connect()
    con.sql(f"CREATE VIEW events AS SELECT * FROM '{data}/events.parquet'")
    yield con
    con.close()


def _sql_catalog(root: Path) -> dict[str, str]:
    (root / "warehouse").mkdir(parents=True, exist_ok=True)
    return {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> dict[str, str]:
    return _sql_catalog(tmp_path_factory.mktemp("iceberg-writes-lake"))


@pytest.fixture(scope="module", params=[1, 2], ids=["W1", "W2"])
def con(request, data, lake):
    connection = squall.connect(str(data), workers=request.param, catalogs={"lake": lake})
    yield connection
    connection.close()


def _pyiceberg(props: dict[str, str], name: str = "lake") -> Any:
    from pyiceberg.catalog import load_catalog

    return load_catalog(name, **props)


def _ns() -> str:
    return f"ns{uuid.uuid4().hex[:6]}"


# --- helpers ---------------------------------------------------------------------------------------------


def _data_files(table: Any) -> list[str]:
    return [task.file.file_path for task in table.scan().plan_files()]


def _local_files(location: str) -> set[str]:
    root = location.removeprefix("file://")
    return {os.path.join(r, n) for r, _d, names in os.walk(root) for n in names}


def _check_partitions(table: Any) -> None:
    """Every data file's partition record is what pyiceberg's transforms make of each of its rows."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    spec, schema = table.spec(), table.schema()
    io = PyArrowFileIO(table.io.properties)
    for task in table.scan().plan_files():
        with io.new_input(task.file.file_path).open() as f:
            rows = pq.read_table(f)
        for pos, pf in enumerate(spec.fields):
            source = schema.find_field(pf.source_id)
            transform = pf.transform.transform(source.field_type)
            from pyiceberg.partitioning import partition_record_value

            got = {
                transform(partition_record_value(pf, v, schema)) for v in rows.column(source.name).to_pylist()
            }
            assert got == {task.file.partition[pos]}, (task.file.file_path, pf, got, task.file.partition)


def _same(actual: pa.Table, reference, sql: str) -> None:
    assert_same_result(actual, reference.sql(sql).to_arrow_table(), sql)


def _read_back(table: Any, reference, sql: str, source: str = "events") -> None:
    """pyiceberg's scan of ``table`` answers ``sql`` (over ``t``) as DuckDB does over ``source``."""
    scan = duckdb.connect()
    scan.register("t", table.scan().to_arrow())
    try:
        actual = scan.sql(sql).to_arrow_table()
    finally:
        scan.close()
    _same(actual, reference, sql.replace("FROM t", f"FROM {source} AS t"))


# --- the Murmur3 bucket hash, exactly Iceberg's ----------------------------------------------------------


def test_bucket_hash_is_icebergs_on_many_values():
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import (
        BinaryType,
        DateType,
        IntegerType,
        LongType,
        StringType,
        TimestampType,
        TimestamptzType,
        TimeType,
        UUIDType,
    )  # fmt: skip

    rng = random.Random(33)
    epoch = dt.datetime(1960, 1, 1)
    alphabet = "abcXYZ09 é中😀\u0301'\"\\%/"
    cases = [
        ("int", IntegerType(), "INTEGER", [0, 1, -1, 34, 2**31 - 1, -(2**31)] + [rng.randint(-(2**31), 2**31 - 1) for _ in range(800)]),
        ("long", LongType(), "BIGINT", [0, -1, 2**63 - 1, -(2**63), 2**32] + [rng.randint(-(2**63), 2**63 - 1) for _ in range(800)]),
        ("date", DateType(), "DATE", [dt.date(1970, 1, 1), dt.date(1900, 3, 4)] + [dt.date(1950, 1, 1) + dt.timedelta(days=rng.randint(0, 40000)) for _ in range(500)]),
        ("time", TimeType(), "TIME", [dt.time(22, 31, 8)] + [dt.time(rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59), rng.randint(0, 999999)) for _ in range(300)]),
        ("timestamp", TimestampType(), "TIMESTAMP", [epoch + dt.timedelta(microseconds=rng.randint(0, 3 * 10**15)) for _ in range(500)]),
        ("timestamptz", TimestamptzType(), "TIMESTAMPTZ", [(epoch + dt.timedelta(microseconds=rng.randint(0, 3 * 10**15))).replace(tzinfo=dt.UTC) for _ in range(300)]),
        ("string", StringType(), "VARCHAR", ["", "a", "ab", "abc", "abcd", "iceberg", "中文😀"] + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(800)]),
        ("binary", BinaryType(), "BLOB", [b"", b"\x00", b"\xff" * 7] + [rng.randbytes(rng.randint(0, 33)) for _ in range(500)]),
        ("uuid", UUIDType(), "UUID", [uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7")] + [uuid.UUID(int=rng.getrandbits(128)) for _ in range(300)]),
    ]  # fmt: skip
    con = duckdb.connect()
    n = 1_000_003
    for kind, iceberg_type, duck, values in cases:
        con.execute(f"CREATE OR REPLACE TABLE v (x {duck}, i INTEGER)")
        con.executemany("INSERT INTO v VALUES (?, ?)", [(v, i) for i, v in enumerate(values)])
        got = [
            r[0]
            for r in con.sql(
                f"SELECT ({bucket_hash('x', kind)} & 2147483647) % {n} FROM v ORDER BY i"
            ).fetchall()
        ]
        expected = [BucketTransform(n).transform(iceberg_type)(v) for v in values]
        assert got == expected, kind
    con.close()


def test_exact_keys_are_icebergs_partition_values():
    """The folder keys taken as partition values (year/month/day/hour since 1970, truncate of integers,
    identity of dates, times and timestamps) equal pyiceberg's transforms, before 1970 too."""
    from pyiceberg.transforms import parse_transform
    from pyiceberg.types import DateType, IntegerType, LongType, TimestampType, TimestamptzType, TimeType

    from squall.driver.write.iceberg_partitions import key_sql

    rng = random.Random(7)
    epoch = dt.datetime(1900, 1, 1)
    stamps = [epoch + dt.timedelta(microseconds=rng.randint(0, 6 * 10**15)) for _ in range(400)]
    stamps += [
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
        dt.datetime(1970, 1, 1),
        dt.datetime(1969, 12, 31),
    ]
    cases = [
        ("timestamp", TimestampType(), "TIMESTAMP", stamps, ("year", "month", "day", "hour", "identity")),
        ("timestamptz", TimestamptzType(), "TIMESTAMPTZ", [t.replace(tzinfo=dt.UTC) for t in stamps],
         ("year", "month", "day", "hour", "identity")),
        ("date", DateType(), "DATE", [t.date() for t in stamps], ("year", "month", "day", "identity")),
        ("time", TimeType(), "TIME", [t.time() for t in stamps], ("identity",)),
        ("int", IntegerType(), "INTEGER", [rng.randint(-(2**31), 2**31 - 1) for _ in range(300)] + [-1, 0, 9, -10],
         ("identity", "truncate[10]", "truncate[7]")),
        ("long", LongType(), "BIGINT", [rng.randint(-(2**62), 2**62) for _ in range(300)], ("truncate[1000]",)),
    ]  # fmt: skip
    con = duckdb.connect()
    con.execute("SET TimeZone = 'America/St_Johns'")  # keys must not depend on the session's time zone
    for kind, iceberg_type, duck, values, transforms in cases:
        con.execute(f"CREATE OR REPLACE TABLE v (x {duck}, i INTEGER)")
        con.executemany("INSERT INTO v VALUES (?, ?)", [(v, i) for i, v in enumerate(values)])
        for text in transforms:
            transform = parse_transform(text)
            fn, arg = text.split("[")[0], getattr(transform, "width", None)
            sql, exact = key_sql(fn, "x", kind, arg)
            assert exact, (kind, text)
            got = [r[0] for r in con.sql(f"SELECT {sql} FROM v ORDER BY i").fetchall()]
            from pyiceberg.partitioning import _to_partition_representation

            apply = transform.transform(iceberg_type)
            expected = [apply(_to_partition_representation(iceberg_type, v)) for v in values]
            assert got == expected, (kind, text)
    con.close()


def test_partition_field_spellings():
    assert parse_field("month(d)") == ("month", "d", None)
    assert parse_field("bucket(16, k)") == ("bucket", "k", 16)
    assert parse_field("bucket(k, 16)") == ("bucket", "k", 16)  # Trino's order
    assert parse_field("truncate(3, s)") == ("truncate", "s", 3)
    assert parse_field('"my col"') == ("identity", "my col", None)
    with pytest.raises(OptionError, match="bucket takes a number"):
        parse_field("bucket(k)")


# --- SQL catalog, local warehouse ------------------------------------------------------------------------


def test_ctas_partitioned_then_two_inserts(con, lake, reference):
    """CTAS partitioned by month(d) and an identity column, then INSERT twice (by position, and by name with a
    column list): one snapshot each, pyiceberg and Squall read what DuckDB computes over the source."""
    ns = _ns()
    name = f"lake.{ns}.t"
    ctas = con.sql(f"CREATE TABLE {name} PARTITIONED BY (month(d), s) AS SELECT k, d, s, v, small FROM events "
                   "WHERE k < 1000")  # fmt: skip
    assert ctas.arrow().to_pylist()[0]["rows"] == 1000 and ctas.stats["written"]["rows"] == 1000
    table = _pyiceberg(lake).load_table(f"{ns}.t")
    assert len(table.snapshots()) == 1
    assert [str(f.transform) for f in table.spec().fields] == ["month", "identity"]
    assert str(table.schema().find_field("small").field_type) == "int"  # TINYINT, cast
    assert table.properties[iceberg_writes.CREATED_BY] == "squall"
    assert all(p.startswith(table.location() + "/data/") for p in _data_files(table))
    _check_partitions(table)
    check = "SELECT s, date_trunc('month', d) AS m, count(*) AS n, sum(v) AS v, sum(small) AS sm FROM t GROUP BY ALL"
    _read_back(table, reference, check, "(SELECT * FROM events WHERE k < 1000)")

    count = f"SELECT count(*) AS n FROM {name}"  # the same text before and after: no stale plan, no stale snapshot
    assert con.sql(count).arrow().to_pylist() == [{"n": 1000}]
    con.sql(f"INSERT INTO {name} SELECT k, d, s, v, small FROM events WHERE k >= 1000 AND k < 2000")
    assert con.sql(count).arrow().to_pylist() == [{"n": 2000}]
    con.sql(f"INSERT INTO {name} BY NAME SELECT small, v, d, k FROM events WHERE k >= 2000")  # s: NULL
    table = _pyiceberg(lake).load_table(f"{ns}.t")
    assert len(table.snapshots()) == 3
    assert [s.summary.get(iceberg_writes.QUERY_ID, "")[:1] for s in table.snapshots()] == ["q", "q", "q"]
    _check_partitions(table)
    source = "(SELECT k, d, CASE WHEN k < 2000 THEN s END AS s, v, small FROM events)"
    _read_back(table, reference, check, source)
    # Squall's next query sees the last snapshot
    expected = check.replace("FROM t", f"FROM {source} AS t")
    squall_sql = check.replace("FROM t", f"FROM {name}")
    assert_same_result(con.sql(squall_sql).arrow(), reference.sql(expected).to_arrow_table(), squall_sql)
    assert not any("/r" in p and "-a" in p and not p.endswith(".parquet")
                   for p in _local_files(table.location()))  # fmt: skip


def test_transforms_bucket_truncate_day_hour_year(con, lake, reference):
    """Athena's WITH (partitioning = ARRAY[…]) with bucket, truncate, day, hour, year: every file's partition
    is pyiceberg's transform of its rows; pyiceberg's partition pruning gives DuckDB's answers."""
    ns = _ns()
    made = con.sql(f"CREATE TABLE lake.{ns}.b WITH (partitioning = ARRAY['bucket(4, k)', 'truncate(3, s)', "
                   "'day(ts)']) AS SELECT k, s, ts, f FROM events")  # fmt: skip
    per_rank = made.stats["written"]["per_rank"]
    assert len([r for r in per_rank if r["rows"]]) == con.platform.world_size, per_rank  # every rank wrote
    con.sql(f"CREATE TABLE lake.{ns}.h PARTITIONED BY (hour(ts), year(d), bucket(3, s), truncate(100, k)) "
            "AS SELECT k, d, ts, s FROM events WHERE k % 3 = 0")  # fmt: skip
    catalog = _pyiceberg(lake)
    for t, where in (("b", ""), ("h", "WHERE k % 3 = 0")):
        table = catalog.load_table(f"{ns}.{t}")
        assert len(table.snapshots()) == 1
        _check_partitions(table)
        pruned = table.scan(row_filter="k >= 100 and k < 200").to_arrow()
        sql = f"SELECT count(*) AS n, sum(k) AS sk FROM events {where} {'AND' if where else 'WHERE'} k >= 100 AND k < 200"
        assert pruned.num_rows == reference.sql(sql).fetchall()[0][0]
    got = con.sql(f"SELECT s, count(*) AS n, sum(f) AS f FROM lake.{ns}.b GROUP BY s").arrow()
    _same(got, reference, "SELECT s, count(*) AS n, sum(f) AS f FROM events GROUP BY s")


def test_types_cast_or_refused(con, lake, reference):
    ns = _ns()
    sql = ("SELECT k::UINTEGER AS u, ts::TIMESTAMP_NS AS tns, ts::TIMESTAMPTZ AS tz, [k, k + 1] AS l, "
           "{'a': k, 'b': s} AS st, MAP {'k': v} AS m, uuid() AS id, encode(s) AS bin, ts::TIME AS tm, b "
           "FROM events WHERE k < 50")  # fmt: skip
    con.sql(f"CREATE TABLE lake.{ns}.ty PARTITIONED BY (b) AS {sql}")
    table = _pyiceberg(lake).load_table(f"{ns}.ty")
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert types["u"] == "long" and types["tns"] == "timestamp" and types["tz"] == "timestamptz"
    assert types["id"] == "string" and types["bin"] == "binary" and types["tm"] == "time"
    _check_partitions(table)
    got = table.scan().to_arrow().sort_by("u")
    assert got.column("l").to_pylist()[3] == [3, 4] and got.column("st").to_pylist()[3] == {
        "a": 3,
        "b": "a longer colour name",
    }
    assert got.column("m").to_pylist()[3] == [
        ("k", reference.sql("SELECT v FROM events WHERE k = 3").fetchall()[0][0])
    ]
    read = (
        con.sql(f"SELECT count(*) AS n, sum(u) AS su, count(id) AS ids FROM lake.{ns}.ty").arrow().to_pylist()
    )
    assert read == [{"n": 50, "su": sum(range(50)), "ids": 50}]
    catalog = _pyiceberg(lake)
    for bad, message in (("k::HUGEINT AS h", "HUGEINT"), ("k::UBIGINT AS h", "UBIGINT"),
                         ("INTERVAL 1 DAY AS h", "INTERVAL"), ("NULL AS h", "NULL")):  # fmt: skip
        with pytest.raises(BindError, match=message):
            con.sql(f"CREATE TABLE lake.{ns}x.bad AS SELECT k, {bad} FROM events")
    assert f"{ns}x" not in [n[0] for n in catalog.list_namespaces()]  # nothing made, not even the namespace


def test_identity_partitions_of_many_types_and_long_strings(con, lake):
    """Identity partitions whose value comes from the files' statistics (decimal, string — also
    strings longer than DuckDB's 256-byte bounds, read from the file) or from their folders (timestamptz,
    time, date, boolean), and truncate of long strings."""
    ns = _ns()
    con.sql(f"CREATE TABLE lake.{ns}.p PARTITIONED BY (v, tz, tm, d, b, month(tz)) AS SELECT k, v::DECIMAL(12, 2) AS v, f, "
            "ts::TIMESTAMPTZ AS tz, ts::TIME AS tm, d, b FROM events WHERE k < 12")  # fmt: skip
    con.sql(f"CREATE TABLE lake.{ns}.l PARTITIONED BY (s, truncate(2, t)) AS SELECT k, repeat('é', 150 + k) AS s, "
            "repeat('x', 300) || k::VARCHAR AS t FROM events WHERE k < 6")  # fmt: skip
    catalog = _pyiceberg(lake)
    for name, rows in (("p", 12), ("l", 6)):
        table = catalog.load_table(f"{ns}.{name}")
        _check_partitions(table)
        assert table.scan().to_arrow().num_rows == rows
    assert {len(task.file.partition[0]) for task in catalog.load_table(f"{ns}.l").scan().plan_files()} == set(
        range(150, 156)
    )


def test_inserts_into_tables_pyiceberg_wrote(data, tmp_path):
    """INSERT into tables other engines made: a schema-evolved table partitioned by month (files with field
    ids, deletes), one partitioned by identity and bucket(4, id), one with a required column."""
    from tests.iceberg_data import build_warehouse

    props = build_warehouse(tmp_path)
    catalog = _pyiceberg(props)
    required = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("s", pa.string())])
    catalog.create_table("ns.req", schema=required)
    with squall.connect(str(data), workers=2, catalogs={"lake": props}) as con:
        con.sql("INSERT INTO lake.ns.orders BY NAME SELECT k AS o_orderkey, k % 7 AS o_customer, s AS o_status, "
                "f AS o_totalprice, d AS o_orderdate, 'new' AS o_note FROM events WHERE k < 300")  # fmt: skip
        con.sql("INSERT INTO lake.ns.parts SELECT k AS id, s AS kind, f AS amount FROM events WHERE k < 500")
        con.sql("INSERT INTO lake.ns.req SELECT k, s FROM events WHERE k < 10")
        with pytest.raises(QueryRuntimeError, match="NULL in the required column k"):
            con.sql("INSERT INTO lake.ns.req (s) SELECT s FROM events WHERE k < 10")
        for name in ("orders", "parts", "req"):
            table = catalog.load_table(f"ns.{name}")
            _check_partitions(table)
            sql = "SELECT count(*) AS n, count(DISTINCT {c}) AS d FROM {t}"
            column = table.schema().fields[0].name
            scan = duckdb.connect()
            scan.register("t", table.scan().to_arrow())
            expected = scan.sql(sql.format(c=column, t="t")).to_arrow_table()
            got = con.sql(sql.format(c=column, t=f"lake.ns.{name}")).arrow()
            assert_same_result(got, expected, sql)
        assert len(catalog.load_table("ns.req").snapshots()) == 1
        notes = con.sql("SELECT count(*) AS n FROM lake.ns.orders WHERE o_note = 'new'").arrow().to_pylist()
        assert notes == [{"n": 300}]


def test_refusals_write_nothing(con, lake):
    ns = _ns()
    catalog = _pyiceberg(lake)
    catalog.create_namespace(ns)
    foreign = catalog.create_table(f"{ns}.foreign", schema=pa.schema([("k", pa.int64()), ("s", pa.string())]))
    foreign.append(pa.table({"k": [1, 2], "s": ["a", "b"]}))
    con.sql(f"CREATE TABLE lake.{ns}.mine AS SELECT k, s FROM events WHERE k < 10")
    cases = [
        (f"DROP TABLE lake.{ns}.foreign", UnsafeQueryError, "not created by Squall"),
        (f"CREATE OR REPLACE TABLE lake.{ns}.foreign AS SELECT k FROM events", UnsafeQueryError, "not created by Squall"),
        (f"CREATE TABLE lake.{ns}.mine AS SELECT k FROM events", BindError, "already exists"),
        (f"CREATE TABLE lake.{ns}.x WITH (location = '/tmp/x') AS SELECT k FROM events", OptionError, "places its tables"),
        (f"CREATE TABLE lake.{ns}.x PARTITIONED BY (month(nope)) AS SELECT k FROM events", OptionError, "no column 'nope'"),
        (f"CREATE TABLE lake.{ns}.x PARTITIONED BY (bucket(4, v)) AS SELECT v::DECIMAL(12, 2) AS v FROM events", NotSupportedError, "decimal"),
        (f"CREATE TABLE lake.{ns}.x PARTITIONED BY (hour(d)) AS SELECT d FROM events", NotSupportedError, "hour does not apply"),
        (f"CREATE TABLE lake.{ns}.x PARTITIONED BY (f) AS SELECT f FROM events", NotSupportedError, "32-bit floats"),
        (f"INSERT INTO lake.{ns}.mine SELECT k FROM events", BindError, "1 columns, the table 2"),
        (f"INSERT INTO lake.{ns}.nope SELECT k FROM events", DataError, "no table"),
        (f"INSERT INTO nolake.{ns}.mine SELECT k FROM events", DataError, "unknown catalog"),
    ]  # fmt: skip
    before = {t: len(catalog.load_table(f"{ns}.{t}").snapshots()) for t in ("foreign", "mine")}
    files = _local_files(catalog.load_table(f"{ns}.mine").location())
    for sql, error, message in cases:
        with pytest.raises(error, match=message):
            con.sql(sql)
    assert {t: len(catalog.load_table(f"{ns}.{t}").snapshots()) for t in ("foreign", "mine")} == before
    assert sorted(t[-1] for t in catalog.list_tables(ns)) == ["foreign", "mine"]
    assert _local_files(catalog.load_table(f"{ns}.mine").location()) == files
    assert con.sql(f"CREATE TABLE IF NOT EXISTS lake.{ns}.mine AS SELECT 1 AS x").arrow()["status"][0].as_py() == \
        "CREATE TABLE (exists)"  # fmt: skip
    # INSERT into a table Squall did not create is fine (a catalog's table is writable)
    con.sql(f"INSERT INTO lake.{ns}.foreign (s, k) SELECT s, k FROM events WHERE k < 5")
    assert catalog.load_table(f"{ns}.foreign").scan().to_arrow().num_rows == 7
    assert len(catalog.load_table(f"{ns}.foreign").snapshots()) == 2


def test_failed_queries_leave_no_snapshot_and_no_file(con, lake):
    """A cast that fails at run time, in a rank's part: no snapshot, and the query's data folder is gone."""
    ns = _ns()
    con.sql(f"CREATE TABLE lake.{ns}.t PARTITIONED BY (s) AS SELECT k, s FROM events WHERE k < 100")
    table = _pyiceberg(lake).load_table(f"{ns}.t")
    files = _local_files(table.location())
    with pytest.raises(QueryRuntimeError):
        con.sql(
            f"INSERT INTO lake.{ns}.t SELECT CASE WHEN k = 2900 THEN 'x' ELSE k::VARCHAR END, s FROM events"
        )
    with pytest.raises(QueryRuntimeError):
        con.sql(f"CREATE TABLE lake.{ns}.t2 AS SELECT CAST(CASE WHEN k = 2900 THEN 'x' ELSE '1' END AS INTEGER) AS "
                "k FROM events")  # fmt: skip
    with pytest.raises(QueryRuntimeError):  # in a namespace of its own: the namespace goes too
        con.sql(f"CREATE TABLE lake.{ns}n.t AS SELECT CAST(CASE WHEN k = 2900 THEN 'x' ELSE '1' END AS INTEGER) AS "
                "k FROM events")  # fmt: skip
    assert f"{ns}n" not in [n[0] for n in _pyiceberg(lake).list_namespaces()]
    table = _pyiceberg(lake).load_table(f"{ns}.t")
    assert len(table.snapshots()) == 1 and _local_files(table.location()) == files
    assert [t[-1] for t in _pyiceberg(lake).list_tables(ns)] == ["t"]
    assert not os.path.exists(table.location().removeprefix("file://").rsplit("/", 1)[0] + "/t2")


def test_a_crashed_rank_commits_nothing(data, lake, monkeypatch):
    """Rank 1 exits right after it staged its files (local workers do not re-run it): the statement fails,
    no snapshot, none of its files stays."""
    ns = _ns()
    with squall.connect(str(data), workers=2, catalogs={"lake": lake}) as first:
        first.sql(
            f"CREATE TABLE lake.{ns}.t PARTITIONED BY (month(d)) AS SELECT k, d FROM events WHERE k < 10"
        )
    table = _pyiceberg(lake).load_table(f"{ns}.t")
    files = _local_files(table.location())
    monkeypatch.setenv("SQUALL_FAULTS", "crash_after_write:rank=1")
    crashing = squall.connect(str(data), workers=2, catalogs={"lake": lake})
    try:
        with pytest.raises(WorkerError, match="rank 1"):
            crashing.sql(f"INSERT INTO lake.{ns}.t SELECT k, d FROM events")
    finally:
        crashing.close()
    table = _pyiceberg(lake).load_table(f"{ns}.t")
    assert len(table.snapshots()) == 1 and _local_files(table.location()) == files


def test_replace_and_drop_of_squall_tables(con, lake, reference):
    ns = _ns()
    name = f"lake.{ns}.t"
    con.sql(f"CREATE TABLE {name} PARTITIONED BY (s) AS SELECT k, s FROM events WHERE k < 100")
    con.sql(f"INSERT INTO {name} SELECT k, s FROM events WHERE k >= 100 AND k < 200")
    con.sql(f"CREATE OR REPLACE TABLE {name} PARTITIONED BY (day(d)) AS SELECT d, v, k::VARCHAR AS k FROM events "
            "WHERE k < 300")  # fmt: skip
    table = _pyiceberg(lake).load_table(f"{ns}.t")
    assert len(table.snapshots()) == 3 and table.current_snapshot().parent_snapshot_id is None  # history kept
    assert [f.name for f in table.schema().fields] == ["d", "v", "k"]
    assert str(table.schema().find_field("k").field_type) == "string"
    _check_partitions(table)
    sql = "SELECT d, count(*) AS n, sum(v) AS v, max(k) AS k FROM t GROUP BY d"
    source = "(SELECT d, v, k::VARCHAR AS k FROM events WHERE k < 300)"
    _read_back(table, reference, sql, source)
    expected = sql.replace("FROM t", f"FROM {source} AS t")
    assert_same_result(con.sql(sql.replace("FROM t", f"FROM {name}")).arrow(), reference.sql(expected).to_arrow_table(),
                       expected)  # fmt: skip
    location = table.location()
    assert _local_files(location)
    assert con.sql(f"DROP TABLE {name}").arrow()["status"][0].as_py() == "DROP TABLE"
    assert not _local_files(location)
    assert [t for t in _pyiceberg(lake).list_tables(ns)] == []
    with pytest.raises(BindError, match="no table"):
        con.sql(f"SELECT count(*) FROM {name}")
    assert con.sql(f"DROP TABLE IF EXISTS {name}").arrow()["status"][0].as_py() == "DROP TABLE (absent)"
    con.sql(f"CREATE TABLE {name} AS SELECT 1 AS one")  # the name is free again, and read anew
    assert con.sql(f"SELECT one FROM {name}").arrow().to_pylist() == [{"one": 1}]


def test_empty_results_and_empty_tables(con, lake):
    ns = _ns()
    con.sql(f"CREATE TABLE lake.{ns}.e AS SELECT k, s FROM events WHERE k < 0")
    con.sql(f"INSERT INTO lake.{ns}.e SELECT k, s FROM events WHERE k < 0")
    table = _pyiceberg(lake).load_table(f"{ns}.e")
    assert len(table.snapshots()) == 2 and table.scan().to_arrow().num_rows == 0 and not _data_files(table)
    assert con.sql(f"SELECT count(*) AS n FROM lake.{ns}.e").arrow().to_pylist() == [{"n": 0}]
    con.sql(f"INSERT INTO lake.{ns}.e VALUES (7, 'seven'), (8, NULL)")
    assert con.sql(f"SELECT k, s FROM lake.{ns}.e ORDER BY k").arrow().to_pylist() == [
        {"k": 7, "s": "seven"}, {"k": 8, "s": None}
    ]  # fmt: skip


def test_a_concurrent_commit_is_retried_or_refused(con, lake, monkeypatch):
    """Another writer commits between Squall's load and its commit: an append is retried by pyiceberg on the
    refreshed table (both land); a schema change refuses the statement, whose files go."""
    ns = _ns()
    name = f"lake.{ns}.t"
    con.sql(f"CREATE TABLE {name} AS SELECT k, s FROM events WHERE k < 10")
    other = _pyiceberg(lake)
    made = iceberg_writes.iceberg_job
    meddle: list[Any] = []

    def job_with_a_rival(*args: Any, **kwargs: Any) -> Any:
        job = made(*args, **kwargs)
        begin = job.plan.begin

        def rival_then_begin() -> Any:
            txn = begin()
            for act in meddle:
                act(other.load_table(f"{ns}.t"))
            return txn

        job.plan.begin = rival_then_begin
        return job

    monkeypatch.setattr(iceberg_writes, "iceberg_job", job_with_a_rival)
    meddle.append(lambda t: t.append(pa.table({"k": pa.array([-1], pa.int64()), "s": ["rival"]})))
    con.sql(f"INSERT INTO {name} SELECT k, s FROM events WHERE k >= 10 AND k < 20")
    table = other.load_table(f"{ns}.t")
    assert len(table.snapshots()) == 3 and table.scan().to_arrow().num_rows == 21
    files = _local_files(table.location())
    meddle[:] = [lambda t: t.update_schema().add_column("extra", _long()).commit()]
    with pytest.raises(DataError, match="changed while the statement ran"):
        con.sql(f"INSERT INTO {name} SELECT k, s FROM events WHERE k >= 20 AND k < 30")
    table = other.load_table(f"{ns}.t")
    assert len(table.snapshots()) == 3 and table.scan().to_arrow().num_rows == 21
    assert {p for p in _local_files(table.location()) if p.endswith(".parquet")} == \
        {p for p in files if p.endswith(".parquet")}  # fmt: skip


def _long() -> Any:
    from pyiceberg.types import LongType

    return LongType()


# --- Glue on moto, warehouse on S3 -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3():
    reason = moto_available()
    if reason is not None:
        pytest.skip(reason)
    with moto_s3(BUCKET) as server:
        yield server


def _glue(server) -> dict[str, str]:
    return {
        "type": "glue", "glue.endpoint": server.endpoint_url, "glue.region": "us-east-1",
        "warehouse": f"s3://{BUCKET}/glue-{uuid.uuid4().hex[:8]}/", "s3.endpoint": server.endpoint_url,
        "s3.access-key-id": "testing", "s3.secret-access-key": "testing", "s3.region": "us-east-1",
    }  # fmt: skip


def _objects(server, prefix: str) -> list[str]:
    listed = server.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for o in listed.get("Contents", []))


def test_glue_catalog_on_s3(s3, data, reference):
    props = _glue(s3)
    db = f"db_{uuid.uuid4().hex[:6]}"
    name = f"glue.{db}.t"
    with squall.connect(str(data), workers=2, catalogs={"glue": props}) as con:
        con.sql(f"CREATE TABLE {name} WITH (partitioning = ARRAY['month(d)', 's']) AS SELECT k, d, s, v FROM events "
                "WHERE k < 1500")  # fmt: skip
        con.sql(f"INSERT INTO {name} SELECT k, d, s, v FROM events WHERE k >= 1500")
        table = _pyiceberg(props, "glue").load_table(f"{db}.t")
        assert len(table.snapshots()) == 2 and table.location().startswith(f"s3://{BUCKET}/")
        _check_partitions(table)
        sql = "SELECT s, date_trunc('month', d) AS m, count(*) AS n, sum(v) AS v FROM t GROUP BY ALL"
        _read_back(table, reference, sql)
        got = con.sql(sql.replace("FROM t", f"FROM {name}")).arrow()
        _same(got, reference, sql.replace("FROM t", "FROM events"))
        prefix = table.location().removeprefix(f"s3://{BUCKET}/") + "/"
        parquet = [k for k in _objects(s3, prefix) if k.endswith(".parquet")]
        assert sorted(f"s3://{BUCKET}/{k}" for k in parquet) == sorted(_data_files(table))  # no stray part
        con.sql(f"DROP TABLE {name}")
        assert _objects(s3, prefix) == []
        assert _pyiceberg(props, "glue").list_tables(db) == []


def test_lambda_local_recovers_a_crashed_writer(s3, data, reference, monkeypatch):
    """On the Lambda platform (emulated, S3 on moto) rank 1 dies after staging its part; it is re-invoked and
    the table gets exactly the right rows, the dead attempt's files deleted."""
    props = _glue(s3)
    db = f"db_{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("SQUALL_FAULTS", "crash_after_write:rank=1")
    exchange = f"s3://{BUCKET}/xchg-{uuid.uuid4().hex[:8]}"
    quick = {"settings": {"heartbeat_s": 0.3, "dead_after_s": 2.0}}  # the dead rank is seen sooner
    with squall.connect(str(data), workers=2, catalogs={"glue": props}, platform="lambda-local",
                        exchange=exchange, platform_options=quick) as con:  # fmt: skip
        result = con.sql(f"CREATE TABLE glue.{db}.t PARTITIONED BY (bucket(3, k)) AS SELECT k, s FROM events")
    relaunched = result.stats["lambda"]["relaunched"]
    assert [r["rank"] for r in relaunched] == [1], relaunched
    assert result.stats["written"]["rows"] == ROWS
    table = _pyiceberg(props, "glue").load_table(f"{db}.t")
    assert len(table.snapshots()) == 1
    _check_partitions(table)
    _read_back(table, reference, "SELECT count(*) AS n, sum(k) AS sk, count(s) AS cs FROM t")
    prefix = table.location().removeprefix(f"s3://{BUCKET}/") + "/data/"
    assert sorted(f"s3://{BUCKET}/{k}" for k in _objects(s3, prefix)) == sorted(_data_files(table))
