"""Table sources and the one file listing: local folders, globs in any path component, S3 on moto."""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlglot

from squall.driver.catalog.listing import list_entries, list_files, list_tables
from squall.driver.catalog.parquet import ParquetSource
from squall.driver.catalog.snapshot import from_snapshot, snapshot
from squall.driver.catalog.source import (
    FilterSupport,
    SourceFile,
    TableSource,
    open_source,
    source_kinds,
)
from squall.driver.catalog.tables import Catalog
from squall.errors import DataError, OptionError
from squall.operators.storage import storage_for

from .s3server import moto_available, moto_s3

#: a table of yearly partitions plus what a folder listing must skip
LAYOUT = {
    "events/year=2024/part-0.parquet": [1, 2],
    "events/year=2024/part-1.parquet": [3],
    "events/year=2025/part-0.parquet": [4, 5, 6],
    "events/year=2025/sub/part-9.parquet": [7],
    "nation.parquet": [10, 11],
    "region/part-0.parquet": [20],
}
JUNK = {"events/_SUCCESS": b"", "events/year=2024/.part-0.parquet.crc": b"x", "events/notes.txt": b"x"}


def _parquet(values: list[int], row_group_size: int = 2) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"a": pa.array(values, pa.int64())}), buf, row_group_size=row_group_size)
    return buf.getvalue()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for rel, values in LAYOUT.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(_parquet(values))
    for rel, body in JUNK.items():
        (tmp_path / rel).write_bytes(body)
    return tmp_path


def _local(root: Path, *rels: str) -> list[str]:
    return [str(root / rel) for rel in rels]


# --- listing, local ------------------------------------------------------------------------------


def test_folder_lists_visible_parquet_at_every_depth(root):
    storage = storage_for(str(root))
    assert list_files(storage, str(root / "events")) == _local(
        root,
        "events/year=2024/part-0.parquet",
        "events/year=2024/part-1.parquet",
        "events/year=2025/part-0.parquet",
        "events/year=2025/sub/part-9.parquet",
    )
    with_slash = list_files(storage, str(root / "events") + "/")
    assert with_slash == list_files(storage_for(str(root)), str(root / "events"))
    assert storage.requests() == {"list": 2}  # one walk each


def test_glob_in_a_middle_component(root):
    storage = storage_for(str(root))
    got = list_files(storage, str(root / "events/year=*/part-0.parquet"))
    assert got == _local(root, "events/year=2024/part-0.parquet", "events/year=2025/part-0.parquet")
    assert list_files(storage, str(root / "events/*5/*.parquet")) == _local(
        root, "events/year=2025/part-0.parquet"
    )
    assert storage.requests() == {"list": 2}  # one listing of events/ each


def test_double_star_matches_any_depth_but_not_hidden_folders(root):
    (root / "events/.staging").mkdir()
    (root / "events/.staging/part-0.parquet").write_bytes(_parquet([100]))
    storage = storage_for(str(root))
    got = list_files(storage, str(root / "events/**/part-*.parquet"))
    assert got == _local(
        root,
        "events/year=2024/part-0.parquet",
        "events/year=2024/part-1.parquet",
        "events/year=2025/part-0.parquet",
        "events/year=2025/sub/part-9.parquet",
    )
    assert list_files(storage, str(root / "events/.staging/*.parquet")) == _local(
        root, "events/.staging/part-0.parquet"
    )


def test_glob_matches_like_glob_module(root):
    import glob

    storage = storage_for(str(root))
    for pattern in (
        "events/*/*",
        "events/year=202[4]/*.parquet",
        "*.parquet",
        "*/part-?.parquet",
        "**/*.parquet",
    ):
        expected = sorted(p for p in glob.glob(str(root / pattern), recursive=True) if os.path.isfile(p))
        assert list_files(storage, str(root / pattern)) == expected, pattern


def test_relative_glob(root, monkeypatch):
    monkeypatch.chdir(root)
    assert list_files(storage_for("x"), "events/year=2024/*.parquet") == [
        "events/year=2024/part-0.parquet",
        "events/year=2024/part-1.parquet",
    ]
    assert list_files(storage_for("x"), "*.parquet") == ["nation.parquet"]


def test_entries_carry_sizes_and_stamps(root):
    (entry,) = list_entries(storage_for(str(root)), str(root / "nation.parquet"))
    st = os.stat(root / "nation.parquet")
    assert (entry.size, entry.stamp) == (st.st_size, f"{st.st_size}:{st.st_mtime_ns}")


@pytest.mark.parametrize(
    ("rel", "message"),
    [
        ("nothing", "table location not found"),
        ("events/*.csv", "no Parquet files"),
        ("nothing/*/x", "no Parquet"),
    ],
)
def test_listing_errors(root, rel, message):
    with pytest.raises(DataError, match=message):
        list_files(storage_for(str(root)), str(root / rel))


# --- the Parquet source --------------------------------------------------------------------------


def test_parquet_source_files_schema_statistics(root):
    source = ParquetSource("events", str(root / "events/year=2025"), storage_for(str(root)))
    assert source.kind == "parquet" and isinstance(source, TableSource)
    files = source.files()
    assert [f.path for f in files] == _local(
        root, "events/year=2025/part-0.parquet", "events/year=2025/sub/part-9.parquet"
    )
    assert files[0] == SourceFile(files[0].path, os.path.getsize(files[0].path), {})
    assert source.partition_columns() == ()
    assert source.schema() == pa.schema([("a", pa.int64())])
    groups = source.statistics()
    assert [(g.index, g.num_rows, g.first_row) for g in groups] == [(0, 2, 0), (1, 1, 2), (0, 1, 0)]
    assert (groups[0].columns["a"].min, groups[1].columns["a"].max) == (4, 6)
    info = source.table_info()
    assert info.files == tuple(f.path for f in files) and info.num_rows == 4 and info.file_reads == {}
    assert source.table_info() is info  # footers read once per source


def test_incompatible_schemas_are_one_line_naming_column_types_and_files(tmp_path):
    (tmp_path / "t").mkdir()
    pq.write_table(pa.table({"a": [1]}), tmp_path / "t/p0.parquet")
    pq.write_table(pa.table({"a": ["x"]}), tmp_path / "t/p1.parquet")
    source = ParquetSource("t", str(tmp_path / "t"), storage_for(str(tmp_path)))
    with pytest.raises(
        DataError, match=r"^table t: column a is int64 in .*p0.parquet but string in .*p1.parquet"
    ) as e:
        source.schema()
    assert "\n" not in str(e.value)
    assert source.file_schema(str(tmp_path / "t/p1.parquet")) == pa.schema([("a", pa.string())])
    assert source.storage.requests() == {"list": 1, "head": 2}  # each footer read once


def test_supports_filters_min_max_is_inexact(root):
    source = ParquetSource("nation", str(root / "nation.parquet"), storage_for(str(root)))
    filters = [
        sqlglot.parse_one(sql)
        for sql in ("a > 3", "5 >= a", "a BETWEEN 1 AND 2", "a IN (1, 2)", "a + 1 > 3", "b = 1", "a = a")
    ]
    inexact, unsupported = FilterSupport.INEXACT, FilterSupport.UNSUPPORTED
    assert source.supports_filters(filters) == [inexact] * 4 + [unsupported] * 3


PREDICATES = [
    "a > 3", "3 < a", "-3 <= a", "a = 'x'", "a <> 3", "a BETWEEN 1 AND 2.5", "a BETWEEN 1 AND b",
    "a IN (1, 2)", "a IN (1, b)", "a IN (SELECT 1)", "a = CAST('2024-01-31' AS DATE)",
    "a = CAST('2024-13-01' AS DATE)", "a = CAST('1' AS INT)", "a > 1 + 2", "a = b", "a IS NULL",
    "a LIKE 'x%'", "lower(a) = 'x'", "a = -'x'",
]  # fmt: skip


#: the predicates above that min/max statistics can prune with (the planner's skipping.minmax reads the same)
PRUNABLE = {
    "a > 3",
    "3 < a",
    "-3 <= a",
    "a = 'x'",
    "a BETWEEN 1 AND 2.5",
    "a IN (1, 2)",
    "a = CAST('2024-01-31' AS DATE)",
}


def test_supports_filters_says_what_min_max_pruning_reads(tmp_path):
    pq.write_table(pa.table({"a": [1, 2], "b": [3, 4]}), tmp_path / "t.parquet")
    source = ParquetSource("t", str(tmp_path / "t.parquet"), storage_for(str(tmp_path)))
    got = source.supports_filters([sqlglot.parse_one(sql) for sql in PREDICATES])
    assert [sql for sql, s in zip(PREDICATES, got, strict=True) if s is FilterSupport.INEXACT] == [
        sql for sql in PREDICATES if sql in PRUNABLE
    ]


def test_stamp_follows_the_files_and_counts_no_request(root):
    storage = storage_for(str(root))
    source = ParquetSource("region", str(root / "region"), storage)
    first = source.stamp()
    assert first is not None and [p for p, _s in first] == _local(root, "region/part-0.parquet")
    assert source.stamp() == first
    (root / "region/part-1.parquet").write_bytes(_parquet([21]))
    assert source.stamp() != first
    (root / "region/_SUCCESS").write_bytes(b"")  # not a file of the table
    assert len(source.stamp()) == 2
    assert storage.requests() == {}
    assert ParquetSource("gone", str(root / "gone"), storage).stamp() == ()
    assert ParquetSource("s3", "s3://bucket/t/", storage).stamp() is None


def test_registry_and_catalog(root):
    assert {"parquet", "csv", "json", "iceberg", "delta"} <= set(source_kinds())
    with pytest.raises(OptionError, match=r"unknown table source 'orc' \(choose one of: .*parquet"):
        open_source("orc", "t", "x", storage_for("x"))
    catalog = Catalog()
    catalog.register("region", str(root / "region"))
    source = catalog.source("region")
    assert isinstance(source, ParquetSource) and source.location == str(root / "region")
    assert catalog.table("region") == source.table_info()
    with pytest.raises(DataError, match="unknown table nope"):
        catalog.source("nope")
    with pytest.raises(DataError, match="a catalog snapshot has no table sources"):
        from_snapshot(snapshot(catalog)).source("region")


def test_catalog_version_follows_the_source_stamp(root):
    catalog = Catalog()
    catalog.register("region", str(root / "region"))
    version = catalog.version()
    assert catalog.table("region").num_rows == 1
    assert catalog.version() == version
    (root / "region/part-1.parquet").write_bytes(_parquet([21, 22]))
    assert catalog.version() > version
    assert catalog.table("region").num_rows == 3  # the new file's footer read; the other's is cached
    assert catalog.requests() == {"list": 2, "head": 2}


# --- discovering tables --------------------------------------------------------------------------


def test_list_tables_local(root):
    storage = storage_for(str(root))
    assert list_tables(storage, str(root)) == [
        ("events", str(root / "events"), "parquet"),
        ("nation", str(root / "nation.parquet"), "parquet"),
        ("region", str(root / "region"), "parquet"),
    ]
    # only partitions: the folder is one table
    assert list_tables(storage, str(root / "events")) == [("events", str(root / "events"), "parquet")]
    assert list_tables(storage, f"file://{root}/events/") == [("events", f"{root}/events/", "parquet")]
    sub = str(root / "events/year=2025/sub")  # part-9 is no table name: the folder is the table
    assert list_tables(storage, sub) == [("sub", sub, "parquet")]


def test_register_folder(root):
    (root / "_tmp").mkdir()
    (root / "_tmp/x.parquet").write_bytes(_parquet([1]))
    (root / "nation").mkdir()  # a folder beside nation.parquet: the file wins
    (root / "nation/part-0.parquet").write_bytes(_parquet([1]))
    catalog = Catalog()
    assert catalog.register_folder(str(root)) == ["events", "nation", "region"]
    assert catalog.requests() == {}  # local discovery is no driver request
    assert catalog.location("nation") == str(root / "nation.parquet")
    assert catalog.table("events").num_rows == 7
    partitioned = Catalog()
    assert partitioned.register_folder(str(root / "events")) == ["events"]
    assert partitioned.table("events").num_rows == 7
    assert Catalog().register_folder(str(root / "events/year=2025/sub")) == ["sub"]


# --- S3 ------------------------------------------------------------------------------------------

BUCKET = "squall-table-source"


@pytest.fixture(scope="module")
def s3():
    reason = moto_available()
    if reason is not None:
        pytest.skip(reason)
    with moto_s3(BUCKET) as server:
        client = server.client()
        prefix = f"ts-{uuid.uuid4().hex[:6]}"
        for rel, values in LAYOUT.items():
            client.put_object(Bucket=BUCKET, Key=f"{prefix}/{rel}", Body=_parquet(values))
        for rel, body in JUNK.items():
            client.put_object(Bucket=BUCKET, Key=f"{prefix}/{rel}", Body=body)
        yield server.endpoint_url, f"s3://{BUCKET}/{prefix}"


def _s3_storage(endpoint: str):
    return storage_for(f"s3://{BUCKET}/", {"endpoint_url": endpoint})


def test_s3_listing_matches_local(s3, root):
    endpoint, base = s3
    for rel in (
        "events",
        "events/",
        "events/year=*/part-0.parquet",
        "events/**/part-*.parquet",
        "*/part-0.parquet",
    ):
        local = [p.removeprefix(str(root)) for p in list_files(storage_for(str(root)), str(root / rel))]
        remote = [p.removeprefix(base) for p in list_files(_s3_storage(endpoint), f"{base}/{rel}")]
        assert remote == local, rel


def test_s3_glob_requests(s3):
    endpoint, base = s3
    storage = _s3_storage(endpoint)
    list_files(storage, f"{base}/events/year=2024/*.parquet")  # the last component: one delimited LIST
    assert storage.requests() == {"list": 1}
    list_files(storage, f"{base}/events/year=*/part-0.parquet")  # a middle component: one LIST below events/
    assert storage.requests() == {"list": 2}
    list_files(storage, f"{base}/nation.parquet")
    assert storage.requests() == {"list": 2, "head": 1}


def test_s3_parquet_source(s3):
    endpoint, base = s3
    source = ParquetSource("events", f"{base}/events/year=*/*.parquet", _s3_storage(endpoint))
    assert [f.path.removeprefix(base) for f in source.files()] == [
        "/events/year=2024/part-0.parquet",
        "/events/year=2024/part-1.parquet",
        "/events/year=2025/part-0.parquet",
    ]
    assert source.table_info().num_rows == 6 and source.stamp() is None


def test_s3_list_tables_and_register_folder(s3):
    endpoint, base = s3
    assert list_tables(_s3_storage(endpoint), base) == [
        ("events", f"{base}/events/", "parquet"),
        ("nation", f"{base}/nation.parquet", "parquet"),
        ("region", f"{base}/region/", "parquet"),
    ]
    assert list_tables(_s3_storage(endpoint), f"{base}/events") == [("events", f"{base}/events/", "parquet")]
    catalog = Catalog({"endpoint_url": endpoint})
    assert catalog.register_folder(base) == ["events", "nation", "region"]
    assert catalog.table("events").num_rows == 7
    with pytest.raises(DataError, match="no tables"):
        Catalog({"endpoint_url": endpoint}).register_folder(f"{base}/nothing-here")


def test_footers_are_cached_by_path_size_and_stamp(root):
    from squall.driver.catalog import footers

    location = str(root / "events")
    storage = storage_for(location)
    entries = list_entries(storage, location)
    first = footers.read_footers(storage, entries)  # in parallel
    assert [md.num_rows for md in first] == [2, 1, 3, 1] and storage.requests()["head"] == 4
    again = footers.read_footers(storage, list_entries(storage, location))
    assert [a is b for a, b in zip(first, again)] == [True] * 4 and storage.requests()["head"] == 4
    (root / "events/year=2024/part-1.parquet").write_bytes(
        _parquet([3, 30, 300])
    )  # another size: a new stamp
    changed = footers.read_footers(storage, list_entries(storage, location))
    assert [md.num_rows for md in changed] == [2, 3, 3, 1] and storage.requests()["head"] == 5


def test_hive_partitions_of_a_glob_and_pruning_reads_no_other_file(root):
    source = ParquetSource("events", str(root / "events/year=*/*.parquet"), storage_for(str(root)))
    assert source.partition_columns() == ("year",)
    assert source.schema() == pa.schema([("a", pa.int64()), ("year", pa.int64())])
    where = sqlglot.parse_one("year = 2025")
    assert source.supports_filters([where]) == [FilterSupport.INEXACT]
    info = source.scan_info([where])
    assert info.files == tuple(_local(root, "events/year=2025/part-0.parquet"))
    assert dict(info.source_notes)["partitions"] == "1 of 2" and dict(info.source_notes)["files"] == "1 of 3"
    assert [rg.columns["year"].min for rg in info.row_groups] == [2025, 2025]
