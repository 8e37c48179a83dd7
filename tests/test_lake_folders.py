"""Iceberg and Delta table folders are never read as plain Parquet files, locally and on S3, while the plain
tables beside them still answer: each is read through its own metadata or log (the right rows, checked against
pyiceberg and deltalake).

The tables are written by pyiceberg and deltalake themselves (appends and a delete, which leave the replaced
files in the folder: reading every Parquet file there would count deleted rows — the wrong answer this guards
against).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import sql as sql_catalog

from squall.driver.catalog.listing import lake_format, list_tables
from squall.driver.catalog.tables import Catalog
from squall.errors import NotSupportedError
from squall.operators.storage import storage_for
from tests.s3server import moto_available, moto_s3

ROWS = pa.table({"k": pa.array(range(100), pa.int64()), "v": pa.array([f"v{i}" for i in range(100)])})


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    """data/: plain.parquet, sales/ (Delta: 2 appends, a delete); warehouse/ns/events/ (Iceberg: the same)."""
    root = tmp_path_factory.mktemp("lake")
    data = root / "data"
    data.mkdir()
    pq.write_table(ROWS, data / "plain.parquet")
    deltalake.write_deltalake(str(data / "sales"), ROWS)
    deltalake.write_deltalake(str(data / "sales"), ROWS, mode="append")
    deltalake.DeltaTable(str(data / "sales")).delete("k < 90")
    warehouse = root / "warehouse"
    warehouse.mkdir()
    catalog = sql_catalog.SqlCatalog(
        "lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{warehouse}"
    )
    catalog.create_namespace("ns")
    events = catalog.create_table("ns.events", schema=ROWS.schema)
    events.append(ROWS)
    events.append(ROWS)
    events.delete("k < 50")
    # what the formats' own readers say, and what reading every Parquet file in the folder would say
    assert deltalake.DeltaTable(str(data / "sales")).to_pyarrow_table().num_rows == 20
    assert len(events.scan().to_arrow()) == 100
    assert pq.read_table(str(data / "sales")).num_rows > 20
    return root


def test_the_folders_are_recognised(lake):
    local = storage_for(str(lake))
    for folder, fmt in (("data/sales/", "delta"), ("warehouse/ns/events/", "iceberg"), ("data/", None)):
        entries = local.list_folder(str(lake / folder), recursive=True) or []
        rels = [e.path.removeprefix(str(lake / folder)) for e in entries]
        assert lake_format(rels) == fmt, folder


@pytest.mark.parametrize("workers", [1, 2])
def test_a_delta_folder_answers_through_its_log_and_the_rest_too(lake, workers):
    import squall

    want = deltalake.DeltaTable(str(lake / "data" / "sales")).to_pyarrow_table()
    with squall.connect(str(lake / "data"), workers=workers) as con:
        assert sorted(con.tables()) == ["plain", "sales"]
        got = con.sql("SELECT count(*) AS n, sum(k) AS s, min(v) AS v FROM sales").arrow().to_pylist()
        assert got == [
            {"n": 20, "s": sum(want.column("k").to_pylist()), "v": min(want.column("v").to_pylist())}
        ]
        assert con.sql("SELECT count(*) AS n FROM plain").arrow().column("n").to_pylist() == [100]


def test_an_iceberg_table_folder_given_as_data_is_one_table_read_through_its_metadata(lake):
    import squall

    for data in (lake / "warehouse" / "ns" / "events", lake / "warehouse" / "ns"):
        for workers in (1, 2):
            with squall.connect(str(data), workers=workers) as con:
                assert con.tables() == ["events"]  # not its data/ and metadata/ folders
                got = con.sql("SELECT count(*) AS n, sum(k) AS s FROM events").arrow().to_pylist()
                assert got == [{"n": 100, "s": 2 * sum(range(50, 100))}]  # not the deleted or rewritten rows


def test_explicit_registration_reads_the_log_too(lake):
    catalog = Catalog()
    catalog.register("s", str(lake / "data" / "sales"))
    assert catalog.table("s").num_rows == 20
    assert catalog.version() >= 0  # the plan cache's version check does not fail on it
    catalog.register("p", str(lake / "data" / "sales"), format="delta")
    assert catalog.table("p").num_rows == 20


def test_cli_lists_it_and_travels_in_time_and_refuses_in_one_line(lake):
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "squall.cli", *args, "--data", str(lake / "data")]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    listed = cli("tables")
    assert listed.returncode == 0 and "plain (100 rows)" in listed.stdout
    assert "sales (20 rows)  delta, version 2" in listed.stdout
    done = cli("query", "SELECT count(*) AS n FROM sales FOR VERSION AS OF 1")
    assert done.returncode == 0 and "200" in done.stdout
    done = cli("query", "SELECT count(*) FROM plain FOR VERSION AS OF 1")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "no versions" in done.stderr


BUCKET = "squall-lake-folders"


def test_on_s3_too(lake):
    reason = moto_available()
    if reason is not None:
        pytest.skip(reason)
    with moto_s3(BUCKET) as server:
        client = server.client()
        prefix = f"lake-{uuid.uuid4().hex[:6]}"
        for path in sorted(lake.rglob("*")):
            if path.is_file() and "catalog.db" not in path.name:
                client.put_object(
                    Bucket=BUCKET, Key=f"{prefix}/{path.relative_to(lake)}", Body=path.read_bytes()
                )
        base = f"s3://{BUCKET}/{prefix}"
        storage = storage_for(f"{base}/", {"endpoint_url": server.endpoint_url})
        assert [t[::2] for t in list_tables(storage, f"{base}/data/")] == [
            ("plain", "parquet"),
            ("sales", "delta"),
        ]
        assert list_tables(storage, f"{base}/warehouse/ns/events/") == [
            ("events", f"{base}/warehouse/ns/events/", "iceberg")
        ]
        catalog = Catalog({"endpoint_url": server.endpoint_url})
        catalog.register_folder(f"{base}/data/")
        assert catalog.table("plain").num_rows == 100
        assert catalog.table("sales").num_rows == 20
        catalog.register_folder(f"{base}/warehouse/ns/")
        # the newest metadata file, read from S3 (its manifests and data files are where the metadata says)
        assert catalog.table("events").num_rows == 100


def test_a_folder_around_a_lake_table_is_refused_naming_it(lake):
    """``warehouse/`` holds the Iceberg table at ``ns/events/``: as plain Parquet files it would read every version."""
    catalog = Catalog()
    assert catalog.register_folder(str(lake / "warehouse")) == ["ns"]
    with pytest.raises(NotSupportedError, match=r"holds an Iceberg table .* at events/"):
        catalog.table("ns")
    catalog.register("w", str(lake / "warehouse"))
    with pytest.raises(NotSupportedError, match=r"at ns/events/"):
        catalog.table("w")
