"""S3Storage against moto's S3 server over HTTP: listing, footers, projected row-group reads, errors."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from squall.aws import describe_error
from squall.driver.catalog.listing import list_files
from squall.errors import DataError
from squall.operators.s3storage import RangeFile, S3Storage, column_chunk_ranges, plan_ranges
from squall.operators.storage import storage_for

from .s3server import moto_available, moto_s3

BUCKET = "squall-storage-test"
pytestmark = pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))


def _table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "price": pa.array(rng.random(n)),
            "tag": pa.array([f"tag-{i % 97}" for i in range(n)]),
            "qty": pa.array(rng.integers(0, 50, n, dtype=np.int32)),
            "items": pa.array([[i, i + 1] if i % 3 else None for i in range(n)], pa.list_(pa.int64())),
        }
    )


def _parquet(table: pa.Table, row_group_size: int, **kwargs) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=row_group_size, **kwargs)
    return buf.getvalue()


@pytest.fixture(scope="module")
def s3():
    with moto_s3(BUCKET) as server:
        client = server.client()
        files = {
            "t/part-0.parquet": _parquet(_table(40_000, 0), 10_000),
            "t/part-1.parquet": _parquet(_table(25_000, 1), 10_000),
            "t/sub/part-2.parquet": _parquet(_table(5_000, 2), 2_000),
            "t/_SUCCESS": b"",
            "t/.hidden.parquet": b"junk",
            "t/notes.txt": b"not parquet",
            "empty/readme.txt": b"x",
            "bigfooter.parquet": _parquet(
                pa.table({f"c{i}": pa.array(np.arange(100)) for i in range(400)}), 20
            ),
        }
        for key, body in files.items():
            client.put_object(Bucket=BUCKET, Key=key, Body=body)
        yield SimpleNamespace(endpoint_url=server.endpoint_url, files=files)


def _storage(s3, **options) -> S3Storage:
    storage = storage_for(f"s3://{BUCKET}/", {"endpoint_url": s3.endpoint_url, **options})
    assert isinstance(storage, S3Storage)
    return storage


def _local(s3, key: str) -> pq.ParquetFile:
    return pq.ParquetFile(io.BytesIO(s3.files[key]))


# --- listing -----------------------------------------------------------------------------------


def test_list_prefix_recurses_and_skips_hidden(s3):
    storage = _storage(s3)
    expected = [
        f"s3://{BUCKET}/t/part-0.parquet",
        f"s3://{BUCKET}/t/part-1.parquet",
        f"s3://{BUCKET}/t/sub/part-2.parquet",
    ]
    assert list_files(storage, f"s3://{BUCKET}/t/") == expected
    assert list_files(storage, f"s3://{BUCKET}/t") == expected  # a folder named without the slash
    assert storage.requests()["list"] >= 2


def test_list_single_key_and_glob(s3):
    storage = _storage(s3)
    one = f"s3://{BUCKET}/t/part-1.parquet"
    assert list_files(storage, one) == [one]
    assert storage.requests() == {"head": 1}
    assert list_files(storage, f"s3://{BUCKET}/t/part-*.parquet") == [f"s3://{BUCKET}/t/part-0.parquet", one]
    assert list_files(storage, f"s3://{BUCKET}/t/part-[1].parquet") == [one]


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("s3://squall-no-such-bucket/t/", "bucket 'squall-no-such-bucket' does not exist"),
        (f"s3://{BUCKET}/empty/", "no Parquet files"),
        (f"s3://{BUCKET}/nothing-here", "table location not found"),
        (f"s3://{BUCKET}/t/*.csv", "no Parquet files"),
    ],
)
def test_list_errors(s3, location, message):
    with pytest.raises(DataError, match=message) as info:
        list_files(_storage(s3), location)
    assert "\n" not in str(info.value)


# --- footers -----------------------------------------------------------------------------------


def test_read_metadata_one_get(s3):
    storage = _storage(s3)
    md = storage.read_metadata(f"s3://{BUCKET}/t/part-0.parquet")
    assert md.equals(_local(s3, "t/part-0.parquet").metadata)
    assert md.num_row_groups == 4
    assert storage.requests() == {"get": 1}
    assert storage.bytes_read == 64 * 1024


def test_read_metadata_long_footer_two_gets(s3):
    storage = _storage(s3, footer_bytes=4096)
    md = storage.read_metadata(f"s3://{BUCKET}/bigfooter.parquet")
    local = _local(s3, "bigfooter.parquet").metadata
    assert md.equals(local)
    assert local.serialized_size > 4096
    assert storage.requests() == {"get": 2}


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("t/missing.parquet", "S3 object not found: s3://squall-storage-test/t/missing.parquet"),
        ("t/notes.txt", "not a Parquet file"),
        ("t/_SUCCESS", "not a Parquet file"),
    ],
)
def test_read_metadata_errors(s3, key, message):
    storage = _storage(s3)
    with pytest.raises(DataError, match=message) as info:
        storage.read_metadata(f"s3://{BUCKET}/{key}")
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)


def test_missing_bucket_on_read(s3):
    with pytest.raises(DataError, match="bucket 'squall-nope-nope' does not exist"):
        _storage(s3).read_metadata("s3://squall-nope-nope/x.parquet")


def test_access_denied_message(monkeypatch):
    from botocore.exceptions import ClientError

    from squall.aws import denied_error
    from squall.errors import AccessDenied

    monkeypatch.delenv("SQUALL_ROLE", raising=False)
    exc = ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "GetObject")
    assert describe_error(exc, "b", "k.parquet") == "access denied: s3://b/k.parquet (s3:GetObject)"
    monkeypatch.setenv("SQUALL_ROLE", "worker")  # a deployed function names its role
    err = denied_error(ClientError({"Error": {"Code": "403", "Message": ""}}, "HeadObject"), "b", "k")
    assert (
        isinstance(err, AccessDenied)
        and str(err) == "access denied: s3://b/k (s3:GetObject) for the worker's role"
    )
    assert (
        denied_error(ClientError({"Error": {"Code": "NoSuchKey", "Message": ""}}, "GetObject"), "b", "k")
        is None
    )


# --- row groups --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row_groups", "columns"),
    [
        ([0], ["id"]),
        ([1, 3], ["tag", "price"]),
        ([0, 1, 2, 3], ["id", "price", "tag", "qty", "items"]),
        ([2], ["items"]),
    ],
)
def test_read_row_groups_matches_local(s3, row_groups, columns):
    storage = _storage(s3)
    path = f"s3://{BUCKET}/t/part-0.parquet"
    md = storage.read_metadata(path)
    got = storage.read_row_groups(path, row_groups, columns, md)
    expected = _local(s3, "t/part-0.parquet").read_row_groups(row_groups, columns=columns)
    assert got.equals(expected)


def test_read_row_groups_without_metadata(s3):
    storage = _storage(s3)
    path = f"s3://{BUCKET}/t/sub/part-2.parquet"
    got = storage.read_row_groups(path, [0, 2], ["qty", "id"])
    assert got.equals(_local(s3, "t/sub/part-2.parquet").read_row_groups([0, 2], columns=["qty", "id"]))


def test_only_needed_column_chunks_are_fetched(s3):
    path = f"s3://{BUCKET}/t/part-0.parquet"
    md = _local(s3, "t/part-0.parquet").metadata
    storage = _storage(s3, coalesce_bytes=0)  # only adjacent chunks merge
    table = storage.read_row_groups(path, [1, 2], ["price", "qty"], md)
    assert table.num_rows == 20_000
    chunks = [
        md.row_group(rg).column(i)
        for rg in (1, 2)
        for i in range(md.num_columns)
        if md.schema.column(i).name in ("price", "qty")
    ]
    planned = plan_ranges(column_chunk_ranges(md, [1, 2], ["price", "qty"]), 0)
    assert len(planned) == len(chunks)  # the tag column lies between price and qty
    assert storage.requests() == {"get": len(planned)}  # the size came with the first GET: no HEAD
    assert storage.bytes_read == sum(c.total_compressed_size for c in chunks)
    assert storage.bytes_read < len(s3.files["t/part-0.parquet"]) / 3


def test_close_ranges_are_coalesced(s3):
    path = f"s3://{BUCKET}/t/part-0.parquet"
    storage = _storage(s3)
    md = storage.read_metadata(path)
    storage.read_row_groups(path, [0, 1, 2, 3], ["id", "qty"], md)
    assert storage.requests() == {"get": 2}  # footer + one coalesced range (chunks < 1 MiB apart)


def test_large_ranges_are_split(s3):
    path = f"s3://{BUCKET}/t/part-0.parquet"
    storage = _storage(s3, max_part_bytes=32 * 1024)
    md = storage.read_metadata(path)
    got = storage.read_row_groups(path, [0, 1, 2, 3], ["price"], md)
    planned = plan_ranges(column_chunk_ranges(md, [0, 1, 2, 3], ["price"]), 1024 * 1024, 32 * 1024)
    assert all(16 * 1024 <= hi - lo <= 32 * 1024 for lo, hi in planned)
    assert storage.requests() == {"get": 1 + len(planned)}
    assert got.equals(_local(s3, "t/part-0.parquet").read_row_groups([0, 1, 2, 3], columns=["price"]))


def test_unknown_column_and_row_group(s3):
    storage = _storage(s3)
    path = f"s3://{BUCKET}/t/part-0.parquet"
    with pytest.raises(DataError, match="column\\(s\\) not in the file: nope"):
        storage.read_row_groups(path, [0], ["id", "nope"])
    with pytest.raises(DataError, match="row group 9 out of range"):
        storage.read_row_groups(path, [9], ["id"])


# --- pieces ------------------------------------------------------------------------------------


def test_plan_ranges():
    assert plan_ranges([(0, 10), (15, 20), (5000, 6000)], coalesce_bytes=100) == [(0, 20), (5000, 6000)]
    assert plan_ranges([(0, 10), (15, 20)], coalesce_bytes=0) == [(0, 10), (15, 20)]
    assert plan_ranges([(10, 20), (0, 10)], coalesce_bytes=0) == [(0, 20)]
    mib = 1024 * 1024
    parts = plan_ranges([(0, 40 * mib)])
    assert len(parts) == 3 and parts[0] == (0, parts[0][1]) and parts[-1][1] == 40 * mib
    assert all(8 * mib <= hi - lo <= 16 * mib for lo, hi in parts)


def test_range_file_serves_fetched_bytes_and_falls_back():
    data = bytes(range(256)) * 4
    calls = []

    def fetch(lo: int, hi: int) -> bytes:
        calls.append((lo, hi))
        return data[lo:hi]

    f = RangeFile(len(data), {100: pa.py_buffer(data[100:300])}, fetch)
    f.seek(150)
    assert f.read(50) == data[150:200] and calls == []
    f.seek(-10, 2)
    assert f.read(100) == data[-10:] and calls == [(len(data) - 10, len(data))]
    f.seek(250)
    assert f.read(100) == data[250:350] and calls[1:] == [(300, 350)]  # only the gap is fetched
    f.seek(90)
    assert f.read(300) == data[90:390] and calls[2:] == [(90, 100), (350, 390)]
    f.seek(120)
    assert f.read(200) == data[120:320] and len(calls) == 4


def test_injected_s3_errors_reach_squall_clients(s3):
    """``s3_error`` faults hook every S3 client squall.aws makes: retried, then a one-line SlowDown error."""
    import subprocess
    import sys

    code = f"""
from squall.errors import DataError
from squall.operators.faults import install_s3_errors
from squall.operators.storage import storage_for
install_s3_errors(1.0, seed=1)
storage = storage_for("s3://{BUCKET}/", {{"endpoint_url": "{s3.endpoint_url}", "max_retries": 2}})
try:
    storage.read_metadata("s3://{BUCKET}/t/part-0.parquet")
except DataError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("S3 error SlowDown on s3://squall-storage-test/t/part-0.parquet"), out.stderr
