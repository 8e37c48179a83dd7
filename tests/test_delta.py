"""Delta tables read through their log (deltalake): active files only, partition values as columns, files
pruned by partition values and log statistics, column mapping, deletion vectors, strings stored as
``string`` and ``string_view``, local and on S3 (moto). Every answer is checked against deltalake's own
reader (:func:`tests.delta_lake.delta_rows`) run through DuckDB, order-insensitive, at W=1 and W=2."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

import squall
from squall.driver.catalog.delta import DeltaSource
from squall.driver.catalog.tables import Catalog
from squall.errors import DataError, NotSupportedError
from squall.operators.storage import storage_for
from tests.delta_lake import answer, delete_with_vector, delta_rows, rename_column
from tests.s3server import moto_available, moto_s3


def _rows(start: int, n: int, string_type: pa.DataType) -> pa.Table:
    ks = list(range(start, start + n))
    return pa.table(
        {
            "k": pa.array(ks, pa.int64()),
            "v": pa.array([f"v{k % 7}" for k in ks], string_type),
            "x": pa.array([None if k % 10 == 0 else k * 0.5 for k in ks], pa.float64()),
            "y": pa.array([2020 + k % 3 for k in ks], pa.int32()),
        }
    )


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    """data/: sales (partitioned by y; string_view then string; an append and a delete), mapped (column
    mapping, a renamed column), dv (a deletion vector), plain.parquet."""
    data = tmp_path_factory.mktemp("delta") / "data"
    data.mkdir()
    sales = str(data / "sales")
    deltalake.write_deltalake(sales, _rows(0, 60, pa.string_view()), partition_by=["y"])
    deltalake.write_deltalake(sales, _rows(60, 60, pa.string()), partition_by=["y"], mode="append")
    deltalake.DeltaTable(sales).delete("k < 30")
    mapped = str(data / "mapped")
    deltalake.DeltaTable.create(
        mapped, _rows(0, 1, pa.string()).schema, configuration={"delta.columnMapping.mode": "name"}
    )
    deltalake.write_deltalake(mapped, _rows(0, 40, pa.string()), mode="append")
    rename_column(data / "mapped", "v", "label")
    deltalake.write_deltalake(
        str(data / "dv"), _rows(0, 50, pa.string()), configuration={"delta.enableDeletionVectors": "true"}
    )
    deltalake.write_deltalake(str(data / "dv"), _rows(50, 50, pa.string()), mode="append")
    delete_with_vector(data / "dv", 0, [0, 3, 4, 17, 49])
    pa.parquet.write_table(_rows(0, 5, pa.string()), data / "plain.parquet")
    return data


def _squall(con: squall.Connection, sql: str) -> list[tuple]:
    table = con.sql(sql).arrow()
    return sorted(zip(*[c.to_pylist() for c in table.columns]), key=repr)


QUERIES = {
    "sales": [
        "SELECT count(*) FROM sales",
        "SELECT * FROM sales",
        "SELECT y, count(*), sum(k), min(v), max(x) FROM sales GROUP BY y",
        "SELECT v, count(*) FROM sales WHERE y = 2021 GROUP BY v",
        "SELECT k, v FROM sales WHERE k BETWEEN 50 AND 70 AND y IN (2020, 2022)",
        "SELECT count(*) FROM sales WHERE x IS NULL",
        "SELECT a.y, count(*) FROM sales a JOIN sales b ON a.k = b.k + 1 GROUP BY a.y",
    ],
    "mapped": [
        "SELECT * FROM mapped",
        "SELECT label, count(*), sum(k) FROM mapped WHERE y = 2020 GROUP BY label",
    ],
    "dv": ["SELECT count(*) FROM dv", "SELECT * FROM dv", "SELECT y, sum(k) FROM dv WHERE k < 20 GROUP BY y"],
}


@pytest.mark.parametrize("workers", [1, 2])
def test_answers_match_deltalake(lake, workers):
    refs = {name: delta_rows(str(lake / name)) for name in QUERIES}
    assert (
        refs["sales"].num_rows == 90 and refs["dv"].num_rows == 95 and "label" in refs["mapped"].column_names
    )
    with squall.connect(str(lake), workers=workers) as con:
        assert sorted(con.tables()) == ["dv", "mapped", "plain", "sales"]
        for queries in QUERIES.values():
            for sql in queries:
                assert _squall(con, sql) == answer(refs, sql), sql


def test_schema_types_and_file_reads(lake):
    source = DeltaSource("sales", str(lake / "sales"), storage_for(str(lake)))
    info = source.table_info()
    assert info.schema == pa.schema(
        [("k", pa.int64()), ("v", pa.string()), ("x", pa.float64()), ("y", pa.int32())]
    )
    assert sorted(info.files) == sorted(deltalake.DeltaTable(str(lake / "sales")).file_uris())
    for path in info.files:  # y comes from the log, typed; the file does not hold it
        assert dict(info.file_reads[path].constants)["y"] in ("2020", "2021", "2022")
    assert source.partition_columns() == ("y",)
    stats = [rg.columns["y"] for rg in info.row_groups]
    assert all(s.min == s.max and isinstance(s.min, int) for s in stats)
    mapped = DeltaSource("mapped", str(lake / "mapped"), storage_for(str(lake))).table_info()
    read = next(iter(mapped.file_reads.values()))
    assert dict(read.columns)["label"].startswith("col-")  # physical name of the renamed column
    dv = DeltaSource("dv", str(lake / "dv"), storage_for(str(lake))).table_info()
    assert sum(1 for r in dv.file_reads.values() if r.deleted_rows) == 1
    assert ("deletion vectors", "1 files") in dv.source_notes


def test_partition_and_stats_filters_prune_files(lake):
    table = deltalake.DeltaTable(str(lake / "sales"))
    total = len(table.file_uris())
    in_2021 = pa.table(table.get_add_actions(flatten=True)).column("partition.y").to_pylist().count(2021)
    with squall.connect(str(lake), workers=2) as con:
        result = con.sql("SELECT count(*) FROM sales WHERE y = 2021")
        assert result.stats["sources"][0]["files"] == f"{in_2021} of {total}"
        result = con.sql("SELECT count(*) FROM sales WHERE k >= 1000")  # log statistics rule every file out
        assert result.arrow().column(0).to_pylist() == [0]
        assert result.stats["sources"][0]["files"] == f"0 of {total}"
        result = con.sql("SELECT count(*) FROM sales WHERE y = 2021 OR x IS NULL")  # OR: x IS NULL keeps some
        assert result.arrow().column(0).to_pylist() == [answer({"sales": delta_rows(str(lake / "sales"))},
                                                               "SELECT count(*) FROM sales WHERE y = 2021 OR x IS NULL")[0][0]]  # fmt: skip


def test_a_new_commit_is_seen_by_the_next_query(tmp_path):
    path = tmp_path / "t"
    deltalake.write_deltalake(str(path), _rows(0, 10, pa.string()))
    with squall.connect(str(tmp_path), workers=2) as con:
        assert _squall(con, "SELECT count(*) FROM t") == [(10,)]
        assert _squall(con, "SELECT count(*) FROM t") == [(10,)]
        deltalake.write_deltalake(str(path), _rows(10, 5, pa.string()), mode="append")
        result = con.sql("SELECT count(*) FROM t")
        assert result.arrow().column(0).to_pylist() == [15] and result.stats["plan_cache"] == "miss"
        deltalake.DeltaTable(str(path)).delete("k < 3")
        assert _squall(con, "SELECT count(*) FROM t") == [(12,)]


def test_explicit_registration_finds_the_log(lake):
    catalog = Catalog()
    catalog.register("s", str(lake / "sales"))  # format parquet asked, a Delta folder given: read as Delta
    assert catalog.table("s").num_rows == 90  # the active files' rows, not every file's in the folder (150)
    with pytest.raises(DataError, match=r"cannot read Delta table .*plain\.parquet"):
        DeltaSource("nope", str(lake / "plain.parquet"), storage_for(str(lake))).table_info()


def test_an_unknown_reader_feature_is_refused(tmp_path):
    path = tmp_path / "t"
    deltalake.write_deltalake(str(path), _rows(0, 5, pa.string()))
    commit = path / "_delta_log" / f"{1:020d}.json"
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["futureFeature"],
        "writerFeatures": ["futureFeature"],
    }
    commit.write_text(
        json.dumps({"commitInfo": {"timestamp": 1}}) + "\n" + json.dumps({"protocol": protocol}) + "\n"
    )
    with (
        squall.connect(str(tmp_path), workers=1) as con,
        pytest.raises((NotSupportedError, DataError)) as err,
    ):
        con.sql("SELECT count(*) FROM t")
    assert "futureFeature" in str(err.value) and len(str(err.value).splitlines()) == 1


BUCKET = "squall-delta"


@pytest.mark.parametrize(("platform", "workers"), [("local", 1), ("local", 2), ("lambda-local", 2)])
def test_on_s3(lake, platform, workers, monkeypatch):
    reason = moto_available()
    if reason is not None:
        pytest.skip(reason)
    with moto_s3(BUCKET) as server:
        client = server.client()
        prefix = f"lake-{uuid.uuid4().hex[:6]}"
        for path in sorted(lake.rglob("*")):
            if path.is_file():
                client.put_object(
                    Bucket=BUCKET, Key=f"{prefix}/{path.relative_to(lake)}", Body=path.read_bytes()
                )
        base = f"s3://{BUCKET}/{prefix}"
        refs = {name: delta_rows(str(lake / name)) for name in QUERIES}
        monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
        where = {"exchange": f"s3://{BUCKET}/exchange"} if platform == "lambda-local" else {}
        with squall.connect(
            f"{base}/",
            workers=workers,
            platform=platform,
            storage_options={"endpoint_url": server.endpoint_url},
            **where,
        ) as con:
            for queries in QUERIES.values():
                for sql in queries[:2]:
                    assert _squall(con, sql) == answer(refs, sql), sql
            result = con.sql("SELECT count(*) FROM sales WHERE y = 2021")
            assert "files" in result.stats["sources"][0]
            assert _squall(con, "SELECT count(*) FROM sales FOR VERSION AS OF 0") == [(60,)]


def test_a_deletion_vector_deltalake_cannot_read_is_refused(tmp_path):
    path = tmp_path / "t"
    rows = _rows(0, 10, pa.string())
    deltalake.write_deltalake(str(path), rows, configuration={"delta.enableDeletionVectors": "true"})
    delete_with_vector(path, 0, [1, 2])
    commit = path / "_delta_log" / f"{1:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    for action in actions:  # the vector now lives in a file that is not there
        if "add" in action:
            action["add"]["deletionVector"] = {
                "storageType": "u",
                "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
                "offset": 1,
                "sizeInBytes": 36,
                "cardinality": 2,
            }
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    with squall.connect(str(tmp_path), workers=1) as con, pytest.raises(NotSupportedError) as err:
        con.sql("SELECT count(*) FROM t")  # never the 10 rows, deleted ones included
    assert "cannot read its deletion vectors" in str(err.value) and len(str(err.value).splitlines()) == 1
