"""Iceberg tables read through pyiceberg's planning (``squall.driver.catalog.iceberg``), every answer checked against
pyiceberg's own reader (``table.scan().to_arrow()``), order-insensitive, at W=1 and W=2 on local workers.

The tables (``tests/iceberg_data.py``) are written by pyiceberg in a SQL catalog: appends, a copy-on-write delete,
an added and a renamed column, int → long promotion, month / identity / bucket partitions, position deletes.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from sqlglot import parse_one

import squall
from squall.driver.catalog.catalogs import NamedCatalogs, resolve
from squall.driver.catalog.iceberg import IcebergSource
from squall.driver.catalog.iceberg_filters import row_filter
from squall.driver.catalog.tables import Catalog
from squall.errors import BindError, DataError, NotSupportedError
from squall.testing import assert_same_result
from tests.iceberg_data import NAMESPACE, add_delete_file, build_warehouse, orders_rows

QUERIES = {
    "orders": [
        "SELECT count(*) AS n, sum(o_orderkey) AS k, count(o_note) AS notes, sum(o_customer) AS c FROM {t}",
        "SELECT o_status, count(*) AS n, sum(o_totalprice) AS total, min(o_orderdate) AS first FROM {t} "
        "WHERE o_orderdate >= DATE '2023-06-01' AND o_orderdate < DATE '2023-09-01' GROUP BY o_status",
        "SELECT o_note, count(*) AS n FROM {t} WHERE o_orderkey BETWEEN 100 AND 2000 GROUP BY o_note",
        "SELECT o_orderkey, o_customer, o_note FROM {t} WHERE o_customer IN (3, 5) OR o_note IS NULL",
    ],
    "parts": [
        "SELECT kind, count(*) AS n, sum(amount) AS total FROM {t} GROUP BY kind",
        "SELECT id, kind FROM {t} WHERE kind = 'k1' AND id < 100",
        "SELECT count(*) AS n FROM {t} WHERE kind IS NULL",
    ],
    "pd": ["SELECT k, v FROM {t}", "SELECT count(*) AS n, sum(k) AS s FROM {t} WHERE k < 20"],
}


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("iceberg")
    return root, build_warehouse(root)


@pytest.fixture(scope="module")
def pyiceberg_catalog(lake):
    from pyiceberg.catalog import load_catalog

    return load_catalog("lake", **lake[1])


def _reference(pyiceberg_catalog, table: str, sql: str) -> pa.Table:
    data = pyiceberg_catalog.load_table(f"{NAMESPACE}.{table}").scan().to_arrow()
    con = duckdb.connect()
    con.register("ref", data)
    return con.sql(sql.format(t="ref")).to_arrow_table()


@pytest.fixture(scope="module", params=[1, 2])
def con(request, lake):
    with squall.connect(workers=request.param, catalogs={"lake": lake[1]}) as c:
        yield c


@pytest.mark.parametrize("table", sorted(QUERIES))
def test_answers_match_pyiceberg(con, pyiceberg_catalog, table):
    for sql in QUERIES[table]:
        got = con.sql(sql.format(t=f"lake.{NAMESPACE}.{table}")).arrow()
        assert_same_result(got, _reference(pyiceberg_catalog, table, sql), sql)


def test_the_deletes_are_applied(con, pyiceberg_catalog):
    orders = con.sql(f"SELECT count(*) AS n FROM lake.{NAMESPACE}.orders").arrow().column("n")[0].as_py()
    assert orders == len(pyiceberg_catalog.load_table(f"{NAMESPACE}.orders").scan().to_arrow())
    assert orders < orders_rows().num_rows  # the copy-on-write delete dropped rows
    deleted = con.sql("SELECT count(*) AS n FROM lake.ns.pd WHERE k IN (0, 1, 2, 50, 99)").arrow()
    assert (
        deleted.column("n")[0].as_py() == 5
    )  # those 5 positions of the first file are deleted, not the second's
    assert con.sql("SELECT count(*) AS n FROM lake.ns.pd").arrow().column("n")[0].as_py() == 194


def test_a_month_reads_its_share_of_bytes(lake):
    with squall.connect(workers=2, catalogs={"lake": lake[1]}) as c:
        full = c.sql("SELECT sum(o_totalprice) AS s FROM lake.ns.orders")
        month = c.sql(
            "SELECT sum(o_totalprice) AS s FROM lake.ns.orders "
            "WHERE o_orderdate >= DATE '2023-05-01' AND o_orderdate < DATE '2023-06-01'"
        )
        assert 0 < month.stats["bytes_scanned"] <= 0.2 * full.stats["bytes_scanned"], (
            month.stats,
            full.stats,
        )
        info = c.catalog.scan_table(
            "lake__ns__orders", [parse_one("\"o_orderdate\" >= CAST('2023-05-01' AS DATE)", read="duckdb")]
        )
        notes = dict(info.source_notes)
        assert notes["format"] == "iceberg" and notes["pruned by"].startswith('"o_orderdate" >=')
        kept, total = notes["files"].split(" of ")
        assert int(kept) < int(total)
        said = c.explain(
            "SELECT sum(o_totalprice) AS s FROM lake.ns.orders WHERE o_orderdate >= DATE '2023-05-01'"
            " AND o_orderdate < DATE '2023-06-01'"
        )
        match = re.search(r"source: format iceberg, snapshot \d+, files (\d+) of (\d+)", said)
        assert match is not None and int(match.group(1)) <= int(match.group(2)) / 10, said


def test_a_table_folder_is_read_at_its_newest_version(lake, pyiceberg_catalog):
    root, _props = lake
    folder = root / "warehouse" / NAMESPACE / "orders"
    sql = QUERIES["orders"][1]
    for data in (folder, folder.parent):  # the table folder, or a folder of table folders
        with squall.connect(str(data), workers=2) as c:
            assert "orders" in c.tables()
            assert_same_result(
                c.sql(sql.format(t="orders")).arrow(), _reference(pyiceberg_catalog, "orders", sql), sql
            )


def test_version_hint_is_honoured(lake, tmp_path):
    import shutil

    folder = tmp_path / "pd"
    shutil.copytree(lake[0] / "warehouse" / NAMESPACE / "pd", folder)
    metadata = sorted((folder / "metadata").glob("*.metadata.json"))
    (folder / "metadata" / "version-hint.text").write_text(metadata[1].name.removesuffix(".metadata.json"))
    catalog = Catalog()
    catalog.register("pd", str(folder), format="iceberg")
    # metadata 1 is the first append: 100 rows (the data files are read where the metadata says they are)
    assert catalog.table("pd").num_rows == 100


def test_metadata_tables(con, pyiceberg_catalog):
    table = pyiceberg_catalog.load_table(f"{NAMESPACE}.orders")
    snapshots = con.sql('SELECT snapshot_id, operation FROM lake.ns."orders$snapshots"').arrow()
    assert sorted(snapshots.column("snapshot_id").to_pylist()) == sorted(
        s.snapshot_id for s in table.snapshots()
    )
    files = (
        con.sql('SELECT count(*) AS n, sum(record_count) AS r FROM lake.ns."orders$files"')
        .arrow()
        .to_pylist()
    )
    assert files == [{"n": len(table.inspect.files()), "r": len(table.scan().to_arrow())}]
    parts = con.sql('SELECT count(*) AS n FROM lake.ns."orders$partitions"').arrow().column("n")[0].as_py()
    assert parts == 12
    history = con.sql('SELECT count(*) AS n FROM lake.ns."orders$history"').arrow().column("n")[0].as_py()
    assert history == len(table.history())
    with pytest.raises(BindError, match=r"unknown metadata table \$nope"):
        con.sql('SELECT * FROM lake.ns."orders$nope"')


def test_unknown_names_are_one_line(con):
    for sql, message in (
        ("SELECT * FROM other.ns.orders", "unknown catalog other"),
        ("SELECT * FROM lake.nope.orders", "catalog lake has no namespace nope"),
        ("SELECT * FROM lake.ns.nope", r"catalog lake has no table ns.nope \(tables: .*orders"),
        ("SELECT * FROM ns.orders", "catalog.namespace.table"),
    ):
        with pytest.raises(BindError, match=message):
            con.sql(sql)


def test_quoted_and_aliased_names(con, pyiceberg_catalog):
    sql = 'SELECT o.o_status, count(*) AS n FROM "lake"."ns"."orders" AS o GROUP BY o.o_status'
    expected = _reference(
        pyiceberg_catalog, "orders", "SELECT o_status, count(*) AS n FROM {t} GROUP BY o_status"
    )
    assert_same_result(con.sql(sql).arrow(), expected, sql)
    joined = con.sql("SELECT count(*) AS n FROM lake.ns.orders JOIN lake.ns.parts ON o_orderkey = id").arrow()
    assert joined.column("n")[0].as_py() > 0


def test_time_travel_at_the_source(lake, pyiceberg_catalog):
    table = pyiceberg_catalog.load_table(f"{NAMESPACE}.orders")
    first = table.snapshots()[0]
    catalog = Catalog()
    catalog.catalogs = NamedCatalogs({"lake": lake[1]})
    name = resolve(catalog, ("lake", NAMESPACE, "orders"), None)
    source = catalog.source(name)
    assert isinstance(source, IcebergSource)
    old = source.at(version=first.snapshot_id)
    assert old.snapshot_id() == first.snapshot_id
    info = old.table_info()
    assert info.num_rows == orders_rows().num_rows // 2
    assert (
        "o_custkey" in info.schema.names and "o_note" not in info.schema.names
    )  # the schema of that snapshot
    when = dt.datetime.fromtimestamp(first.timestamp_ms / 1000, dt.UTC)
    assert source.at(timestamp=when).snapshot_id() == first.snapshot_id
    assert source.at(timestamp=dt.datetime.now(dt.UTC)).snapshot_id() == table.current_snapshot().snapshot_id
    with pytest.raises(DataError, match="has no snapshot at or before"):
        source.at(timestamp=when - dt.timedelta(days=1))
    with pytest.raises(DataError, match="has no snapshot 42"):
        source.at(version=42)


def test_a_new_commit_is_seen_by_the_next_query(tmp_path):
    from pyiceberg.catalog import load_catalog

    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}"}
    catalog = load_catalog("lake", **props)
    catalog.create_namespace("ns")
    rows = pa.table({"k": pa.array(range(10), pa.int64())})
    table = catalog.create_table("ns.t", schema=rows.schema)
    with squall.connect(workers=1, catalogs={"lake": props}) as c:
        assert c.sql("SELECT count(*) AS n FROM lake.ns.t").arrow().column("n")[0].as_py() == 0
        table.append(rows)
        assert c.sql("SELECT count(*) AS n FROM lake.ns.t").arrow().column("n")[0].as_py() == 10
        table.append(rows)
        assert c.sql("SELECT count(*) AS n FROM lake.ns.t").arrow().column("n")[0].as_py() == 20


def test_equality_deletes_are_refused_not_ignored(tmp_path):
    from pyiceberg.catalog import load_catalog

    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}"}
    catalog = load_catalog("lake", **props)
    catalog.create_namespace("ns")
    rows = pa.table({"k": pa.array(range(10), pa.int64())})
    table = catalog.create_table("ns.eq", schema=rows.schema)
    table.append(rows)
    add_delete_file(table, equality=pa.table({"k": pa.array([3], pa.int64())}))
    with (
        squall.connect(workers=1, catalogs={"lake": props}) as c,
        pytest.raises(
            NotSupportedError, match="Iceberg table lake__ns__eq: equality delete files are not read"
        ),
    ):
        c.sql("SELECT count(*) FROM lake.ns.eq")


def test_filters_translate_only_where_exact_types_meet():
    from pyiceberg.types import DateType, DoubleType, LongType, StringType

    types = {"a": LongType(), "d": DateType(), "s": StringType(), "x": DoubleType()}

    def pushed(sql: str) -> list[str]:
        return row_filter([parse_one(sql, read="duckdb")], types)[1]

    for sql in ("a = 1", "a BETWEEN 1 AND 3", "a IN (1, 2)", "d >= DATE '2020-01-01'", "s = 'x'",
                "a IS NULL", "NOT s IS NULL", "a < 3 OR s = 'y'", "(a > 1 AND x > 2)"):  # fmt: skip
        assert pushed(sql), sql
    for sql in ("a = '1'", "s = 1", "x > 2", "a + 1 = 2", "a < 3 OR x > 1", "zz = 1"):
        assert not pushed(sql), sql


def test_files_without_field_ids_go_by_the_name_mapping(tmp_path):
    """Files added with ``add_files`` (no Parquet field ids) are matched through ``schema.name-mapping.default``,
    also after a rename."""
    import pyarrow.parquet as pq
    from pyiceberg.catalog import load_catalog

    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}"}
    catalog = load_catalog("lake", **props)
    catalog.create_namespace("ns")
    rows = pa.table({"k": pa.array(range(20), pa.int64()), "v": pa.array([f"v{i}" for i in range(20)])})
    pq.write_table(rows, tmp_path / "external.parquet")
    table = catalog.create_table("ns.ext", schema=rows.schema)
    table.add_files([str(tmp_path / "external.parquet")])
    with table.update_schema() as update:
        update.rename_column("v", "w")
    sql = "SELECT k, w FROM {t} WHERE k >= 5"
    expected = duckdb.connect()
    expected.register("ref", catalog.load_table("ns.ext").scan().to_arrow())
    with squall.connect(workers=2, catalogs={"lake": props}) as c:
        got = c.sql(sql.format(t="lake.ns.ext")).arrow()
    assert got.num_rows == 15 and got.column("w").null_count == 0
    assert_same_result(got, expected.sql(sql.format(t="ref")).to_arrow_table(), sql)


def test_deletion_vectors_are_refused_by_name():
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.table import FileScanTask
    from pyiceberg.typedef import Record

    from squall.driver.catalog.iceberg_files import check_deletes

    def data_file(path: str, content: DataFileContent, fmt: FileFormat) -> DataFile:
        return DataFile.from_args(content=content, file_path=path, file_format=fmt, partition=Record(),
                                  record_count=1, file_size_in_bytes=1, _table_format_version=2)  # fmt: skip

    data = data_file("s3://b/t/data/a.parquet", DataFileContent.DATA, FileFormat.PARQUET)
    vectors = data_file("s3://b/t/data/dv.puffin", DataFileContent.POSITION_DELETES, FileFormat.PUFFIN)
    with pytest.raises(NotSupportedError, match=r"Iceberg table t: puffin deletion vectors are not read yet"):
        check_deletes("t", [FileScanTask(data, delete_files={vectors})])
    positions = data_file("s3://b/t/data/pd.parquet", DataFileContent.POSITION_DELETES, FileFormat.PARQUET)
    check_deletes("t", [FileScanTask(data, delete_files={positions})])  # applied by the workers


def test_an_old_snapshot_is_pruned_under_its_own_column_names(lake, pyiceberg_catalog):
    """``o_custkey`` is ``o_customer`` now: a filter on the old name is not pushed to pyiceberg (which binds to
    the current schema), and the old snapshot still answers right."""
    first = pyiceberg_catalog.load_table(f"{NAMESPACE}.orders").snapshots()[0]
    catalog = Catalog()
    catalog.catalogs = NamedCatalogs({"lake": lake[1]})
    old = catalog.source(resolve(catalog, ("lake", NAMESPACE, "orders"), None)).at(version=first.snapshot_id)
    filters = [
        parse_one('"o_custkey" = 3', read="duckdb"),
        parse_one("\"o_orderdate\" < CAST('2023-02-01' AS DATE)", read="duckdb"),
    ]
    info = old.scan_info(filters)
    assert dict(info.source_notes)["pruned by"] == "\"o_orderdate\" < CAST('2023-02-01' AS DATE)"
    expected = orders_rows().slice(0, orders_rows().num_rows // 2)
    in_january = sum(1 for d in expected.column("o_orderdate").to_pylist() if d < dt.date(2023, 2, 1))
    assert info.num_rows > 0 and in_january <= info.num_rows < expected.num_rows
