"""Schemas evolving across a table's files: united by name with safe widening, as DuckDB's ``union_by_name``
reads them; an incompatible change is one line naming the column, both types and both files."""

from __future__ import annotations

import decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall.driver.catalog.evolution import wider
from squall.driver.catalog.parquet import ParquetSource
from squall.errors import DataError
from squall.operators.storage import storage_for
from squall.testing import assert_same_result

QUERIES = [
    "SELECT * FROM events",
    "SELECT kind, count(*) AS n, count(amount) AS amounts, sum(id) AS ids, sum(amount) AS total, "
    "sum(price) AS price, max(ratio) AS ratio FROM events GROUP BY kind",
    "SELECT count(*) AS n FROM events",
    "SELECT id, amount FROM events WHERE amount IS NULL AND id % 7 = 0",
    "SELECT kind, count(*) AS n FROM events WHERE id >= 150 GROUP BY kind",
]


def _files(folder: Path) -> None:
    """part-0: (id INT32, kind string, price DECIMAL(10,2), ratio FLOAT, not-null id); part-1: id INT64, an added
    column amount, price DECIMAL(12,4); part-2: reordered, kind string_view, ratio DOUBLE, nullable id."""
    folder.mkdir()
    n0 = 100
    first = pa.table(
        {
            "id": pa.array(range(n0), pa.int32()),
            "kind": [f"k{i % 3}" for i in range(n0)],
            "price": pa.array([decimal.Decimal(i) / 4 for i in range(n0)], pa.decimal128(10, 2)),
            "ratio": pa.array([i / 8 for i in range(n0)], pa.float32()),
        },
        schema=pa.schema(
            [
                pa.field("id", pa.int32(), nullable=False),
                ("kind", pa.string()),
                ("price", pa.decimal128(10, 2)),
                ("ratio", pa.float32()),
            ]
        ),
    )
    second = pa.table(
        {
            "id": pa.array(range(100, 200), pa.int64()),
            "kind": [f"k{i % 4}" for i in range(100)],
            "amount": [i * 0.5 for i in range(100)],
            "price": pa.array([decimal.Decimal(i) / 16 for i in range(100)], pa.decimal128(12, 4)),
            "ratio": pa.array([i / 16 for i in range(100)], pa.float32()),
        }
    )
    third = pa.table(
        {
            "ratio": pa.array([i / 3 for i in range(50)], pa.float64()),
            "amount": [float(i) for i in range(50)],
            "kind": pa.array([f"k{i % 2}" for i in range(50)], pa.string_view()),
            "id": pa.array(range(200, 250), pa.int64()),
            "price": pa.array([decimal.Decimal(i) for i in range(50)], pa.decimal128(10, 2)),
        }
    )
    for i, table in enumerate((first, second, third)):
        pq.write_table(table, folder / f"part-{i}.parquet", row_group_size=40)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("evolving")
    _files(root / "events")
    return root


def _reference(root: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.sql(
        f"CREATE VIEW events AS SELECT * FROM read_parquet('{root}/events/*.parquet', union_by_name = true)"
    )
    return con


def test_the_table_schema_is_the_union_widened(data):
    source = ParquetSource("events", str(data / "events"), storage_for(str(data)))
    schema = source.schema()
    assert schema == pa.schema(
        [
            ("id", pa.int64()),  # INT32 and INT64; nullable: one file has it nullable
            ("kind", pa.large_string()),  # string and string_view
            ("price", pa.decimal128(12, 4)),
            ("ratio", pa.float64()),
            ("amount", pa.float64()),  # added: missing in part-0, so nullable
        ]
    )
    info = source.table_info()
    part0 = str(data / "events/part-0.parquet")
    assert info.file_reads[part0].columns == (("amount", ""),)
    assert ("schema", "united by name from 3 file schemas") in info.source_notes
    group = next(rg for rg in info.row_groups if rg.path == part0)
    assert group.columns["amount"].null_count == group.num_rows  # a missing column: all NULL


@pytest.mark.parametrize(("workers", "native"), [(1, True), (2, True), (2, False)])
def test_answers_match_duckdb_union_by_name(data, workers, native):
    ref = _reference(data)
    with squall.connect(data=str(data), workers=workers, storage_options={"native_scans": native}) as con:
        for sql in QUERIES:
            assert_same_result(con.sql(sql).to_arrow(), ref.sql(sql).to_arrow_table(), sql)


def test_min_max_pruning_sees_a_missing_column_as_null(data):
    ref = _reference(data)
    sql = "SELECT count(*) AS n, sum(id) AS s FROM events WHERE amount > 40"
    with squall.connect(data=str(data), workers=2) as con:
        result = con.sql(sql)
        assert_same_result(result.to_arrow(), ref.sql(sql).to_arrow_table(), sql)


def test_an_incompatible_change_is_one_line_naming_column_types_and_files(tmp_path):
    (tmp_path / "t").mkdir()
    pq.write_table(pa.table({"a": pa.array([1], pa.int64()), "b": [1]}), tmp_path / "t/p0.parquet")
    pq.write_table(pa.table({"b": [2]}), tmp_path / "t/p1.parquet")
    pq.write_table(pa.table({"a": ["x"]}), tmp_path / "t/p2.parquet")
    with squall.connect(data=str(tmp_path), workers=1) as con, pytest.raises(DataError) as err:
        con.sql("SELECT count(*) FROM t").to_arrow()
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("table t: column a is int64 in ") and " but string in " in message
    assert "p0.parquet" in message and "p2.parquet" in message


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (pa.int8(), pa.int32(), pa.int32()),
        (pa.uint32(), pa.int32(), pa.int64()),
        (pa.uint64(), pa.int64(), None),
        (pa.float32(), pa.float64(), pa.float64()),
        (pa.int32(), pa.float32(), pa.float64()),
        (pa.int64(), pa.float64(), None),
        (pa.decimal128(10, 2), pa.decimal128(12, 4), pa.decimal128(12, 4)),
        (pa.decimal128(10, 2), pa.decimal128(6, 5), pa.decimal128(13, 5)),
        (pa.int32(), pa.decimal128(5, 2), pa.decimal128(12, 2)),
        (pa.decimal128(38, 0), pa.decimal128(38, 10), None),
        (pa.string(), pa.string_view(), pa.large_string()),
        (pa.binary(), pa.large_binary(), pa.large_binary()),
        (pa.null(), pa.date32(), pa.date32()),
        (pa.int64(), pa.string(), None),
        (pa.date32(), pa.timestamp("us"), None),
        (pa.list_(pa.int32()), pa.list_(pa.int64()), None),
    ],
)
def test_widening_rules(a, b, expected):
    assert wider(a, b) == expected and wider(b, a) == expected
