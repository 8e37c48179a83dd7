"""Parquet page indexes (and Bloom filters on S3 through metadata mirrors): row groups skipped where footer min/max
could not, answers checked against DuckDB on the same files.

The data: row groups of 8,192 rows, each holding two sorted runs of ``x`` (``g*100 + 0, 2, 4 …`` and
``50,000 + g*100 + 0, 2, 4 …``), written with page indexes and 1,024-row pages. Every row group's min/max spans
[g*100, 58,000 + …], so min/max rule out nothing in the gap between the runs; the pages (each inside one run)
do. ``y`` counts the rows of each row group (0 … 8,191); ``d``, ``s`` and ``dec`` are ``x`` as a date, a
zero-padded string and a decimal; ``k`` is a shuffled key with a Bloom filter.
"""

from __future__ import annotations

import datetime as dt
import decimal
import glob
import os

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall.driver.options import PlannerOptions
from squall.driver.skipping import page_index as pi
from squall.driver.skipping.metadata_mirror import MirrorStore
from squall.operators.storage import LocalStorage
from squall.plan import DataSkipping
from squall.testing import assert_same_result

from .s3server import moto_available, moto_s3

GROUP = 8192
GROUPS = 8
EPOCH = dt.date(1970, 1, 1)
NO_CACHE = PlannerOptions(predicate_cache=False)


def _table(groups: int = GROUPS, shift: int = 0) -> pa.Table:
    half = GROUP // 2
    x = (
        np.concatenate(
            [
                np.concatenate([np.arange(half) * 2 + g * 100, np.arange(half) * 2 + 50_000 + g * 100])
                for g in range(groups)
            ]
        )
        + shift
    )
    n = len(x)
    return pa.table(
        {
            "x": pa.array(x, pa.int64()),
            "y": pa.array(np.tile(np.arange(GROUP), groups), pa.int32()),
            "d": pa.array(x.astype("int32"), pa.int32()).cast(pa.date32()),
            "s": pa.array([f"{v:06d}" for v in x]),
            "dec": pa.array([decimal.Decimal(int(v)) / 100 for v in x], pa.decimal128(12, 2)),
            "k": pa.array(np.random.default_rng(0).permutation(n), pa.int64()),
            "v": pa.array(np.arange(n), pa.int64()),
        }
    )


def _write(table: pa.Table, path, *, page_index: bool = True, bloom: bool = False) -> None:
    pq.write_table(
        table,
        path,
        row_group_size=GROUP,
        write_page_index=page_index,
        max_rows_per_page=1024,  # pages inside one run
        bloom_filter_options={"k": {"ndv": GROUP}} if bloom else None,
    )


@pytest.fixture()
def data(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    _write(_table(), folder / "t.parquet")
    return folder


def _check(con: squall.Connection, file, sql: str) -> dict:
    """Run ``sql`` on Squall and on DuckDB over ``file``; the answers must match. Returns the scan's skipping."""
    result = con.sql(sql)
    ref = duckdb.connect()
    try:
        ref.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{file}')")
        assert_same_result(result.to_arrow(), ref.sql(sql).to_arrow_table(), sql)
    finally:
        ref.close()
    (scan,) = result.stats["data_skipping"]["scans"]
    return scan


# in the gap between the runs of every row group: min/max keep all 8, the pages none
IN_THE_GAP = [
    "SELECT count(*) AS n, sum(v) AS s FROM t WHERE x = 30000",
    "SELECT count(*) AS n, sum(v) AS s FROM t WHERE x BETWEEN 20000 AND 40000",
    "SELECT count(*) AS n FROM t WHERE x IN (12000, 30002, 45000)",
    "SELECT count(*) AS n FROM t WHERE d >= DATE '2000-01-01' AND d < DATE '2050-01-01'",
    "SELECT count(*) AS n FROM t WHERE s > '020000' AND s < '040000'",
    "SELECT count(*) AS n FROM t WHERE dec BETWEEN 200.00 AND 400.00",
    # each column alone has matching pages, but on other rows: x < 9000 in the first half, y >= 4096 in the second
    "SELECT count(*) AS n FROM t WHERE x < 9000 AND y >= 4096",
    # a long IN list, every value in the gap
    f"SELECT count(*) AS n FROM t WHERE x IN ({', '.join(str(v) for v in range(10_001, 49_000, 97))})",
]


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("sql", IN_THE_GAP)
def test_row_groups_skipped_by_page_index(data, sql, workers):
    with squall.connect(data=str(data), workers=workers, planner_options=NO_CACHE) as con:
        scan = _check(con, data / "t.parquet", sql)
        assert (scan["planned"], scan["minmax"], scan["page_index"], scan["read"]) == (8, 0, 8, 0), scan
        assert "skipped 0 by min/max, 8 by page index, 0 by bloom" in con.explain(sql)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_some_row_groups_skipped_and_the_rest_read(data, workers):
    # 8500 (and 8600) lie in the first run of row groups 4-7 only (its top is g*100 + 8190)
    sql = "SELECT count(*) AS n, sum(v) AS s, min(y) AS y FROM t WHERE x IN (8500, 8600)"
    with squall.connect(data=str(data), workers=workers, planner_options=NO_CACHE) as con:
        scan = _check(con, data / "t.parquet", sql)
        assert (scan["minmax"], scan["page_index"], scan["read"]) == (0, 4, 4), scan
        assert con.sql(sql).to_arrow().column("n")[0].as_py() == 7  # 8500 in groups 4-7, 8600 in 5-7


def test_long_in_list_with_one_value_in_a_run(data):
    values = [*range(10_001, 49_000, 97), 50_002]  # 50,002 is in group 0's second run only
    sql = f"SELECT count(*) AS n, sum(v) AS s FROM t WHERE x IN ({', '.join(map(str, values))})"
    with squall.connect(data=str(data), workers=2, planner_options=NO_CACHE) as con:
        scan = _check(con, data / "t.parquet", sql)
        assert (scan["page_index"], scan["read"]) == (7, 1), scan


def test_string_bounds_with_escapes_are_unknown(tmp_path):
    # DuckDB shows bytes that are not UTF-8 as \xNN: a bound holding a backslash is not trusted
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"s": ["a\\b", "c", "x", "y"]}), path, write_page_index=True, max_rows_per_page=2)
    pages = pi.PageIndexCache().pages(str(path), "1", {"s": pa.string()})["s"][0]
    assert [(p.low, p.high) for p in pages] == [(None, None), ("x", "y")]


def test_min_max_first_then_page_index(data):
    # x < 150 AND x > 50: min/max rule out groups 2-7 (their minima are 200+), the pages nothing of 0-1
    sql = "SELECT count(*) AS n FROM t WHERE x > 50 AND x < 150"
    with squall.connect(data=str(data), workers=2, planner_options=NO_CACHE) as con:
        scan = _check(con, data / "t.parquet", sql)
        assert (scan["minmax"], scan["page_index"], scan["read"]) == (6, 0, 2), scan


def test_off_by_planner_option(data):
    options = PlannerOptions(predicate_cache=False, page_index=False)
    with squall.connect(data=str(data), workers=2, planner_options=options) as con:
        scan = _check(con, data / "t.parquet", IN_THE_GAP[0])
        assert (scan["page_index"], scan["read"]) == (0, 8)
        assert "by page index" not in con.explain(IN_THE_GAP[0])


def test_file_without_page_index_skips_nothing(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    _write(_table(), folder / "t.parquet", page_index=False)
    reads = pi.PAGE_INDEXES.reads
    with squall.connect(data=str(folder), workers=2, planner_options=NO_CACHE) as con:
        scan = _check(con, folder / "t.parquet", IN_THE_GAP[0])
        assert (scan["minmax"], scan["page_index"], scan["bloom"], scan["read"]) == (0, 0, 0, 8)
        # no skipping line at all: only min/max ran, whose count is the scan line's
        assert "row groups:" not in con.explain(IN_THE_GAP[0])
    assert pi.PAGE_INDEXES.reads == reads  # the footer said there is none: DuckDB was not asked


def test_changed_file_reads_its_new_page_index(data):
    path = data / "t.parquet"
    with squall.connect(data=str(data), workers=2, planner_options=NO_CACHE) as con:
        assert _check(con, path, IN_THE_GAP[0])["page_index"] == 8
        _write(
            _table(shift=30000 - 50_000), path
        )  # now the second runs start at 30000: x = 30000 is in group 0
        scan = _check(con, path, IN_THE_GAP[0])
        assert scan["page_index"] == 7 and scan["read"] == 1, scan


def test_matching_rows_intersects_columns():
    def page(first, n, lo, hi, nulls=False):
        return pi.Page(first, n, nulls, lo, hi)

    x = [page(0, 10, 1, 4), page(10, 10, 6, 10)]
    y = [page(0, 5, 0, 0), page(5, 15, 1, 1)]
    assert pi.matching_rows({"x": x}, {"x": (5, True, 5, True)}, {"x": frozenset([5])}) == []
    assert pi.matching_rows({"x": x}, {"x": (4, True, 6, True)}, {}) == [(0, 20)]
    assert pi.matching_rows({"x": x}, {"x": (4, False, 6, False)}, {}) == []  # 4 < x < 6
    assert pi.matching_rows({"x": x, "y": y}, {"x": (6, True, None, True), "y": (0, True, 0, True)}, {}) == []
    assert pi.matching_rows({"x": x, "y": y}, {"x": (None, True, 3, True), "y": (1, True, 1, True)}, {}) == [
        (5, 10)
    ]
    assert not pi.page_may_match(page(0, 5, None, None, nulls=True), (None, True, None, True), None)
    assert pi.page_may_match(page(0, 5, None, None), (7, True, 7, True), None)  # unknown bounds
    assert pi.page_may_match(
        page(0, 5, 1, 4), (dt.date(2000, 1, 1), True, None, True), None
    )  # not comparable


def test_data_skipping_round_trips_json():
    sk = DataSkipping(10, 2, bloom=1, cache=3, predicate="[]", page_index=4)
    import dataclasses

    assert DataSkipping.from_dict(dataclasses.asdict(sk)) == sk
    old = {k: v for k, v in dataclasses.asdict(sk).items() if k != "page_index"}  # a plan from before
    assert DataSkipping.from_dict(old).page_index == 0


# --- metadata mirrors -----------------------------------------------------------------------------------


def test_mirror_holds_footer_and_indexes_and_answers_like_the_file(tmp_path):
    path = tmp_path / "t.parquet"
    _write(_table(), path, bloom=True)
    storage = LocalStorage()  # ranged reads of a local file stand in for an object store's
    store = MirrorStore(str(tmp_path / "mirrors"))
    footer_only = store.mirror(storage, str(path), "s1")
    assert footer_only is not None and footer_only.bloom_columns == frozenset() and not footer_only.page_index
    assert os.path.getsize(footer_only.path) == os.path.getsize(path)
    assert os.stat(footer_only.path).st_blocks * 512 < os.path.getsize(path) / 4  # sparse: holes, not bytes
    full = store.mirror(storage, str(path), "s1", bloom_columns={"k"}, page_index=True)
    assert full is not None and full.bloom_columns == {"k"} and full.page_index
    types = {"x": pa.int64(), "s": pa.string()}
    assert pi.PageIndexCache().pages(full.path, "s1", types) == pi.PageIndexCache().pages(
        str(path), "s1", types
    )
    for value in (4242, 99_999_999):
        assert pi.bloom_excludes(full.path, "s1", "k", value) == pi.bloom_excludes(
            str(path), "s1", "k", value
        )
    # a column without a Bloom filter is never claimed
    assert store.mirror(storage, str(path), "s1", bloom_columns={"x"}).bloom_columns == {"k"}
    # a footer other than the plan's (the object changed since it was listed): no mirror
    other = tmp_path / "other.parquet"
    _write(_table(shift=1), other)
    assert store.mirror(storage, str(path), "s3", footer=pq.read_metadata(other)) is None
    assert store.mirror(storage, str(path), "s3", footer=pq.read_metadata(path)) is not None
    # a new stamp: the old mirror goes
    again = store.mirror(storage, str(path), "s2")
    assert again is not None and again.path != full.path and not os.path.exists(full.path)
    assert store.dropped == 2 and len(glob.glob(str(tmp_path / "mirrors" / "*.parquet"))) == 1


S3 = pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))


@S3
@pytest.mark.parametrize("workers", [1, 2])
def test_s3_page_index_and_bloom_through_mirrors(tmp_path, monkeypatch, workers):
    monkeypatch.setenv("SQUALL_MIRROR_DIR", str(tmp_path / "mirrors"))
    bucket = "squall-pageindex-test"
    local = tmp_path / "t.parquet"
    _write(_table(), local, bloom=True)
    with moto_s3(bucket) as s3:
        client = s3.client()
        client.upload_file(str(local), bucket, "pi/t.parquet")
        with squall.connect(workers=workers, planner_options=NO_CACHE) as con:
            con.register("t", f"s3://{bucket}/pi/t.parquet")
            scan = _check(con, local, IN_THE_GAP[0])
            assert (scan["minmax"], scan["page_index"], scan["read"]) == (0, 8, 0), scan
            scan = _check(con, local, "SELECT count(*) AS n, sum(x) AS s FROM t WHERE k = 4242")
            assert scan["minmax"] == 0 and scan["bloom"] >= 6 and scan["read"] >= 1, scan
            mirrors = glob.glob(str(tmp_path / "mirrors" / "*.parquet"))
            assert len(mirrors) == 1
            # a new object under the same key: a new ETag once listed again; its mirror replaces the old one
            _write(_table(shift=30000 - 50_000), local, bloom=True)
            client.upload_file(str(local), bucket, "pi/t.parquet")
            con.register("t", f"s3://{bucket}/pi/t.parquet")
            scan = _check(con, local, IN_THE_GAP[0])
            assert (scan["page_index"], scan["read"]) == (7, 1), scan
            scan = _check(con, local, "SELECT count(*) AS n, sum(x) AS s FROM t WHERE k = 4242")
            assert scan["bloom"] >= 6, scan
            # (the page-index verdicts of this object at either stamp may come from the process's cache:
            # the Bloom probe asks for the mirror in any case)
            now = glob.glob(str(tmp_path / "mirrors" / "*.parquet"))
            assert len(now) == 1 and now != mirrors


@S3
def test_s3_file_without_indexes_makes_no_mirror(tmp_path, monkeypatch):
    monkeypatch.setenv("SQUALL_MIRROR_DIR", str(tmp_path / "mirrors"))
    bucket = "squall-pageindex-test"
    local = tmp_path / "plain.parquet"
    _write(_table(), local, page_index=False)
    with moto_s3(bucket) as s3:
        s3.client().upload_file(str(local), bucket, "plain/t.parquet")
        with squall.connect(workers=2, planner_options=NO_CACHE) as con:
            con.register("t", f"s3://{bucket}/plain/t.parquet")
            for sql in (IN_THE_GAP[0], "SELECT count(*) AS n FROM t WHERE k = 4242"):
                scan = _check(con, local, sql)
                assert (scan["page_index"], scan["bloom"], scan["read"]) == (0, 0, 8), scan
    assert not glob.glob(str(tmp_path / "mirrors" / "*"))
