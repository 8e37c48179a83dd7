"""What only S3 does, beyond the platform suite's ``local-s3`` backend: exchange shapes (W = 1, 4, 9; one
and two levels) with their request bounds, S3 tables (prefixes, globs, the catalog's footer cache), and
the CLI's S3 options. Tables in S3 *and* the S3 exchange, on moto's S3 server over HTTP; results compared
with DuckDB over the same local files. The bounds are :func:`backends.check_s3_request_formulas`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import squall
from squall import tpch
from squall.testing import assert_same_result

from .backends import SF, backend_named, check_s3_request_formulas, check_s3_scan_requests

BACKEND = backend_named("local-s3")
pytestmark = pytest.mark.skipif(BACKEND.skip() is not None, reason=str(BACKEND.skip()))

#: (workers, levels, query): the suite runs all 22 on W = 4 with two levels; these add one level, a single
#: worker and W = 9 (9 processes on a small machine) on queries with several hash exchanges each
SHAPES = (
    [(4, 1, n) for n in (3, 13, 21)]  # joins + aggregation, outer join, semi/anti joins
    + [(1, 1, n) for n in (1, 3)]
    + [(9, levels, n) for levels in (1, 2) for n in (3, 13)]
)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    with BACKEND.open(BACKEND, tmp_path_factory.mktemp("s3")) as s:
        yield s


class _Pool:
    """One warm connection at a time (W = 9 is 9 processes on a small machine)."""

    def __init__(self, site, data) -> None:
        self.site, self.data = site, data
        self.key: tuple[int, int] | None = None
        self.con: squall.Connection | None = None

    def get(self, workers: int, levels: int) -> squall.Connection:
        if self.key != (workers, levels):
            self.close()
            self.con = self.site.connect(self.data, workers, exchange_options={"levels": levels})
            self.key = (workers, levels)
        assert self.con is not None
        return self.con

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
        self.con, self.key = None, None


@pytest.fixture(scope="module")
def pool(site, sf01):
    p = _Pool(site, sf01)
    yield p
    p.close()


@pytest.mark.parametrize(
    ("workers", "levels", "n"), SHAPES, ids=lambda v: str(v) if isinstance(v, int) else None
)
def test_exchange_shapes(site, pool, reference, workers, levels, n):
    sql = tpch.query(n, sf=SF)
    result = pool.get(workers, levels).sql(sql)
    assert_same_result(result.to_arrow(), reference.sql(sql).to_arrow_table(), sql)
    check_s3_request_formulas(result.stats, levels)
    check_s3_scan_requests(result.stats)
    if workers > 1:
        assert result.stats["exchanges"], "a multi-worker plan exchanges data"
    assert site.leftovers() == [], "exchange objects left after the query"


def test_two_levels_are_used_for_hash_exchanges(pool, reference):
    # both sides too big for every rank to read whole (orders, 150k rows at SF0.1, would be): moved by key
    sql = (
        "SELECT a.l_suppkey, count(*) AS n FROM lineitem a JOIN lineitem b ON a.l_orderkey = b.l_orderkey "
        "AND a.l_linenumber = b.l_linenumber GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5"
    )
    result = pool.get(4, 2).sql(sql)
    assert_same_result(result.to_arrow(), reference.sql(sql).to_arrow_table(), sql)
    two = [e for e in result.stats["exchanges"] if e["levels"] == 2]
    assert two, result.stats["exchanges"]
    for e in two:  # W = 4, g = 2: 2W = 8 PUTs, 2W·g = 16 data GETs at most, no index GETs
        assert e["put"] - e["put_dup"] <= 8 and e["get_data"] <= 16 and e["get_index"] == 0


def test_register_prefix_object_and_glob(site, sf01):
    data = site.upload(sf01)
    bucket = data.removeprefix("s3://").partition("/")[0]
    client = site.s3.client()
    for part in range(2):  # a prefix of two Parquet objects (and one that is not Parquet)
        client.upload_file(str(sf01 / "nation.parquet"), bucket, f"extra/nation2/part-{part}.parquet")
    client.put_object(Bucket=bucket, Key="extra/nation2/_SUCCESS", Body=b"")
    with squall.connect(workers=1) as con:
        con.register("li", f"{data}/lineitem.parquet")
        con.register("all_files", f"s3://{bucket}/extra/nation2/")
        con.register("r_glob", f"{data}/reg*.parquet")
        info = con.catalog.table("all_files")
        assert len(info.files) == 2 and info.num_rows == 50
        assert con.sql("SELECT count(*) AS n FROM all_files").fetchall() == [(50,)]
        assert con.catalog.table("r_glob").num_rows == 5
        con.plan("SELECT count(*) FROM li")  # loads the table: HEAD + one footer GET
        before = con.catalog.requests()
        con.plan("SELECT sum(l_quantity) FROM li")
        assert con.catalog.requests() == before, "footers are read once per table (catalog cache)"


def test_data_prefix_without_tables_is_a_clear_error(site):
    with pytest.raises(squall.DataError, match="no tables"):
        squall.connect(data=f"s3://{site.DATA_BUCKET}/nothing-here", workers=1)


def test_cli_query_s3_data_and_exchange(site, sf01, tmp_path):
    stats_file = tmp_path / "stats.json"
    env = dict(os.environ, **site.s3.env)
    proc = subprocess.run(
        [sys.executable, "-m", "squall.cli", "query", tpch.query(3, sf=SF), "--data", site.upload(sf01),
         "--exchange", site.exchange_url, "--exchange-levels", "2", "--workers", "4", "--format", "csv",
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
    check_s3_request_formulas(stats, 2)
    assert site.leftovers() == []


def test_cli_bad_exchange_levels_is_one_line(site, sf01, capsys):
    from squall.cli import main

    assert main(["query", "SELECT 1", "--data", site.upload(sf01), "--exchange-levels", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --exchange-levels needs --exchange") and err.count("\n") == 1
