"""TPC-H end to end with tables in S3 *and* the S3 exchange, on moto's S3 server over HTTP.

TPC-H SF0.1 is generated once per session, uploaded once to ``s3://squall-data/sf0.1/``
and queried through ``squall.connect(data="s3://…", exchange="s3://…")`` with W ∈ {1, 4, 9}
workers and one- and two-level exchanges; every result is compared with DuckDB over the
same local files. All 22 queries run on W = 4 with two-level exchanges; W = 4 one-level,
W = 1 and W = 9 (both levels) run a few queries with several hash exchanges each (the
machine has 2 cores: W = 9 is 9 processes).

Request counts asserted per exchange from ``Result.stats["exchanges"]`` (summed over the
ranks; S = senders, R = receivers, g = ⌈√R⌉):

- one level: ``put - put_dup ≤ S`` (one object per sender) and ``get_index ≤ S·R``
  (one index GET per reader/object pair) — i.e. at most W PUTs and W² GETs;
- two levels (hash, S = R = W): ``put - put_dup ≤ 2W`` and ``get_index ≤ 2W·g``;
- both: ``get_data ≤ get_index`` (every range ≤ part_size at this scale; a range
  inside the 64 KiB tail costs no data GET at all).

``get_miss`` (polling 404s while a sender is late) and ``head`` (abort checks) depend
on timing and are *not* data GETs: they are reported, not bounded. After every
query, success or failure, the exchange prefix must be empty.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

import squall
from squall import tpch
from squall.errors import QueryRuntimeError
from squall.testing import assert_same_result
from squall.tpch import dataset_files

from .s3server import moto_available, moto_s3
from .tpch_data import duckdb_over, tpch_dataset

pytestmark = pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))

DATA_BUCKET = "squall-data"
XCHG_BUCKET = "squall-xchg"
DATA_URL = f"s3://{DATA_BUCKET}/sf0.1"
XCHG_URL = f"s3://{XCHG_BUCKET}/exchange"
SUBSET = (3, 13, 21)  # joins + aggregation, outer join, semi/anti joins: several hash exchanges each
CASES = (
    [(4, 2, n) for n in tpch.QUERY_NUMBERS]
    + [(4, 1, n) for n in SUBSET]
    + [(1, 1, n) for n in (1, 3)]
    + [(9, levels, n) for levels in (1, 2) for n in (3, 13)]
)


@pytest.fixture(scope="module")
def s3_tpch(tmp_path_factory):
    """(moto server, local SF0.1 folder, DuckDB reference); the data uploaded once."""
    local = tpch_dataset(0.1, tmp_path_factory=tmp_path_factory)
    with moto_s3(DATA_BUCKET, XCHG_BUCKET) as s3:
        client = s3.client()
        for files in dataset_files(local).values():
            for f in files:
                client.upload_file(str(f), DATA_BUCKET, f"sf0.1/{os.path.basename(f)}")
        reference = duckdb_over(local)
        yield s3, local, reference
        reference.close()


class _Pool:
    """One warm connection at a time (W = 9 is 9 processes on a small machine)."""

    def __init__(self) -> None:
        self.key: tuple[int, int] | None = None
        self.con: squall.Connection | None = None

    def get(self, workers: int, levels: int) -> squall.Connection:
        if self.key != (workers, levels):
            self.close()
            self.con = squall.connect(
                data=DATA_URL, workers=workers, exchange=XCHG_URL, exchange_options={"levels": levels}
            )
            self.key = (workers, levels)
        assert self.con is not None
        return self.con

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
        self.con, self.key = None, None


@pytest.fixture(scope="module")
def pool(s3_tpch):
    p = _Pool()
    yield p
    p.close()


def _exchange_objects(s3) -> list[str]:
    resp = s3.client().list_objects_v2(Bucket=XCHG_BUCKET, Prefix="exchange/")
    return [o["Key"] for o in resp.get("Contents", [])]


def check_request_formulas(stats: dict, levels: int) -> None:
    """The per-exchange request bounds of the module doc."""
    for e in stats["exchanges"]:
        s, r = e["senders"], e["receivers"]
        assert e["levels"] == (levels if e["kind"] == "hash" and s == r else 1), e
        assert e["get"] >= e["get_index"] + e["get_data"] + e["get_miss"], e  # (+ abort-reason reads)
        writes = e["put"] - e["put_dup"]
        if e["levels"] == 1:
            assert writes <= s, e
            assert e["get_index"] <= s * r, e
        else:
            g = math.isqrt(r - 1) + 1
            assert writes <= 2 * r, e
            assert e["get_index"] <= 2 * r * g, e
        assert e["get_data"] <= e["get_index"], e
        assert e["bytes_read"] >= 0 and e["bytes_written"] >= 0


@pytest.mark.parametrize(
    ("workers", "levels", "n"), CASES, ids=lambda v: str(v) if isinstance(v, int) else None
)
def test_tpch_s3_data_and_exchange(s3_tpch, pool, workers, levels, n):
    s3, _local, reference = s3_tpch
    con = pool.get(workers, levels)
    sql = tpch.query(n, sf=0.1)
    result = con.sql(sql)
    assert_same_result(result.to_arrow(), reference.sql(sql).to_arrow_table(), sql)
    stats = result.stats
    check_request_formulas(stats, levels)
    # workers read S3 with ranged GETs only: object sizes come with the footer GET, no HEADs
    assert set(stats["storage_requests"]) <= {"get"}, stats["storage_requests"]
    assert stats["storage_requests"].get("get", 0) >= 1
    assert set(stats["driver_storage_requests"]) <= {"get", "head", "list"}
    if workers > 1:
        assert stats["exchanges"], "a multi-worker plan exchanges data"
    assert _exchange_objects(s3) == [], "exchange objects left after the query"


def test_two_levels_are_used_for_hash_exchanges(s3_tpch, pool):
    _s3, _local, reference = s3_tpch
    con = pool.get(4, 2)
    sql = (
        "SELECT o_custkey, count(*) AS n FROM orders JOIN lineitem ON o_orderkey = l_orderkey "
        "GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5"
    )
    result = con.sql(sql)
    assert_same_result(result.to_arrow(), reference.sql(sql).to_arrow_table(), sql)
    two = [e for e in result.stats["exchanges"] if e["levels"] == 2]
    assert two, result.stats["exchanges"]
    for e in two:  # W = 4, g = 2: 2W = 8 PUTs, 2W·g = 16 index GETs at most
        assert e["put"] - e["put_dup"] <= 8 and e["get_index"] <= 16


def test_failed_query_cleans_up_the_exchange(s3_tpch, pool):
    s3, _local, _reference = s3_tpch
    con = pool.get(4, 1)
    with pytest.raises(QueryRuntimeError):
        con.sql(
            "SELECT CAST(c_name AS INTEGER) AS x, count(*) FROM customer c JOIN orders o "
            "ON c.c_custkey = o.o_custkey GROUP BY 1"
        )
    assert _exchange_objects(s3) == []
    assert con.sql("SELECT count(*) AS n FROM nation").to_arrow().column(0).to_pylist() == [25]


def test_register_prefix_object_and_glob(s3_tpch):
    s3, local, _reference = s3_tpch
    client = s3.client()
    for part in range(2):  # a prefix of two Parquet objects (and one that is not Parquet)
        client.upload_file(str(local / "nation.parquet"), DATA_BUCKET, f"extra/nation2/part-{part}.parquet")
    client.put_object(Bucket=DATA_BUCKET, Key="extra/nation2/_SUCCESS", Body=b"")
    with squall.connect(workers=1) as con:
        con.register("li", f"s3://{DATA_BUCKET}/sf0.1/lineitem.parquet")
        con.register("all_files", f"s3://{DATA_BUCKET}/extra/nation2/")
        con.register("r_glob", f"s3://{DATA_BUCKET}/sf0.1/reg*.parquet")
        info = con.catalog.table("all_files")
        assert len(info.files) == 2 and info.num_rows == 50
        assert con.sql("SELECT count(*) AS n FROM all_files").fetchall() == [(50,)]
        assert con.catalog.table("r_glob").num_rows == 5
        con.plan("SELECT count(*) FROM li")  # loads the table: HEAD + one footer GET
        before = con.catalog.requests()
        con.plan("SELECT sum(l_quantity) FROM li")
        assert con.catalog.requests() == before, "footers are read once per table (catalog cache)"


def test_data_prefix_without_tables_is_a_clear_error(s3_tpch):
    from squall.errors import DataError

    with pytest.raises(DataError, match="no tables"):
        squall.connect(data=f"s3://{DATA_BUCKET}/nothing-here", workers=1)


def test_cli_query_s3_data_and_exchange(s3_tpch, tmp_path):
    s3, _local, _reference = s3_tpch
    stats_file = tmp_path / "stats.json"
    env = dict(os.environ, **s3.env)
    proc = subprocess.run(
        [sys.executable, "-m", "squall.cli", "query", tpch.query(3, sf=0.1), "--data", DATA_URL,
         "--exchange", XCHG_URL, "--exchange-levels", "2", "--workers", "4", "--format", "csv",
         "--stats-json", str(stats_file)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 11  # header + 10 rows
    stats = json.loads(stats_file.read_text())
    assert stats["storage_requests"]["get"] >= 1
    assert stats["exchanges"] and all(
        {"stage", "levels", "senders", "put", "get", "bytes_written", "bytes_read"} <= set(e)
        for e in stats["exchanges"]
    )
    check_request_formulas(stats, 2)
    assert _exchange_objects(s3) == []


def test_cli_bad_exchange_levels_is_one_line(s3_tpch, capsys):
    from squall.cli import main

    assert main(["query", "SELECT 1", "--data", DATA_URL, "--exchange-levels", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --exchange-levels needs --exchange") and err.count("\n") == 1
