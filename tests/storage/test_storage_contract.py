"""The one contract every Storage passes (local folder, S3 on moto's server).

Listing (:mod:`squall.driver.catalog.listing` over the Storage's ``file_entry`` and
``list_folder``: a file, a folder, a glob, a missing location, a location without
Parquet files), footers, projected row-group reads with their byte counts,
request counting, and one-line errors for unreadable files. Backend-specific
behaviour (S3 request counts per call, range planning, …) stays in the
backend's own module, e.g. ``tests/test_s3_storage.py``.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from squall.driver.catalog.listing import list_files
from squall.errors import DataError

from .backends import BACKENDS, Backend, Site

ROWS = {"t/part-0.parquet": 3_000, "t/part-1.parquet": 2_000, "t/sub/part-2.parquet": 500}


def _table(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64) + seed * 1_000_000),
            "price": pa.array(rng.random(n)),
            "tag": pa.array([f"tag-{i % 31}" for i in range(n)]),
            "qty": pa.array(rng.integers(0, 50, n, dtype=np.int32)),
        }
    )


def _parquet(table: pa.Table, row_group_size: int = 1_000) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=row_group_size)
    return buf.getvalue()


@pytest.fixture(params=BACKENDS, ids=[b.name for b in BACKENDS])
def site(request, tmp_path):
    b: Backend = request.param
    reason = b.skip()
    if reason:
        pytest.skip(reason)
    with b.open(tmp_path) as s:
        s.tables = {}  # type: ignore[attr-defined]
        for seed, (rel, n) in enumerate(ROWS.items()):
            table = _table(n, seed)
            s.tables[rel] = table  # type: ignore[attr-defined]
            s.put(rel, _parquet(table))
        s.put("t/_SUCCESS", b"")
        s.put("t/.hidden.parquet", b"junk")
        s.put("t/notes.txt", b"not parquet")
        s.put("empty/readme.txt", b"x")
        s.put("bad.parquet", b"this is not a Parquet file at all" * 10)
        yield s


def _total(site: Site) -> int:
    return sum(site.storage.requests().values())


# --- listing -------------------------------------------------------------------------------------


def test_list_a_file(site):
    one = site.url("t/part-1.parquet")
    assert list_files(site.storage, one) == [one]


def test_list_a_folder_recurses_sorted_and_skips_hidden(site):
    expected = [site.url(rel) for rel in sorted(ROWS)]
    assert list_files(site.storage, site.url("t")) == expected


def test_list_a_glob(site):
    assert list_files(site.storage, site.url("t/part-*.parquet")) == [
        site.url("t/part-0.parquet"),
        site.url("t/part-1.parquet"),
    ]


@pytest.mark.parametrize(
    ("rel", "message"),
    [
        ("nothing-here", "table location not found"),
        ("empty/", "no Parquet files"),
        ("t/*.csv", "no Parquet files"),
    ],
)
def test_list_errors_are_one_line_data_errors(site, rel, message):
    with pytest.raises(DataError, match=message) as info:
        list_files(site.storage, site.url(rel.rstrip("/")) + ("/" if rel.endswith("/") else ""))
    assert "\n" not in str(info.value)


# --- footers and row groups ----------------------------------------------------------------------


def test_read_metadata(site):
    for rel, table in site.tables.items():
        md = site.storage.read_metadata(site.url(rel))
        assert md.num_rows == table.num_rows
        assert md.num_row_groups == -(-table.num_rows // 1_000)
        assert md.schema.to_arrow_schema().remove_metadata().equals(table.schema)


@pytest.mark.parametrize("columns", [["id"], ["tag", "price"], ["id", "price", "tag", "qty"]])
@pytest.mark.parametrize("row_groups", [[0], [1, 2], [0, 1, 2]])
def test_read_row_groups_projection(site, columns, row_groups):
    path = site.url("t/part-0.parquet")
    md = site.storage.read_metadata(path)
    got = site.storage.read_row_groups(path, row_groups, columns, md)
    expected = pq.ParquetFile(io.BytesIO(_parquet(site.tables["t/part-0.parquet"]))).read_row_groups(
        row_groups, columns=columns
    )
    assert got.select(columns).equals(expected)


def test_read_row_groups_without_metadata(site):
    path = site.url("t/part-1.parquet")
    got = site.storage.read_row_groups(path, [1], ["qty"])
    assert (
        got.column("qty").to_pylist() == site.tables["t/part-1.parquet"].column("qty")[1000:2000].to_pylist()
    )


def test_bytes_read_follow_the_projection(site):
    path = site.url("t/part-0.parquet")
    md = site.storage.read_metadata(path)
    storage = site.storage
    chunk = {
        md.row_group(0).column(i).path_in_schema: md.row_group(0).column(i).total_compressed_size
        for i in range(md.row_group(0).num_columns)
    }
    before = storage.bytes_read
    storage.read_row_groups(path, [0], ["id"], md)
    one = storage.bytes_read - before
    before = storage.bytes_read
    storage.read_row_groups(path, [0], list(chunk), md)
    every = storage.bytes_read - before
    assert chunk["id"] <= one < every
    assert every >= sum(chunk.values())


# --- request counting ----------------------------------------------------------------------------


def test_every_call_is_counted(site):
    storage = site.storage
    assert _total(site) == 0
    list_files(storage, site.url("t"))
    listed = _total(site)
    assert listed >= 1
    md = storage.read_metadata(site.url("t/part-0.parquet"))
    footers = _total(site)
    assert footers > listed
    storage.read_row_groups(site.url("t/part-0.parquet"), [0, 1], ["id"], md)
    assert storage.requests().get("get", 0) >= 1
    assert _total(site) > footers
    assert all(isinstance(k, str) and n > 0 for k, n in storage.requests().items())


# --- unreadable files ----------------------------------------------------------------------------


@pytest.mark.parametrize("rel", ["bad.parquet", "t/_SUCCESS", "t/notes.txt"])
def test_unreadable_file_is_a_one_line_data_error(site, rel):
    with pytest.raises(DataError) as info:
        site.storage.read_metadata(site.url(rel))
    assert "\n" not in str(info.value) and rel.rpartition("/")[2] in str(info.value)


def test_missing_file_is_a_data_error(site):
    with pytest.raises(DataError) as info:
        site.storage.read_metadata(site.url("t/missing.parquet"))
    assert "missing.parquet" in str(info.value)
