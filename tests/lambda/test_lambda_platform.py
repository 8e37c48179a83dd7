"""The Lambda platform end to end: moto's S3 server + the local Lambda emulator running the real handler.

TPC-H SF0.1 on 16 workers (fan-out 4: 4 first-level invocations, tree depth 2) must give DuckDB's
answers, also with injected crashes, stragglers and S3 errors (the stats show the retries).
"""

from __future__ import annotations

import pytest

import squall
from squall import tpch
from squall.driver.platforms.lambda_.emulator import LocalLambda
from squall.driver.platforms.lambda_.platform import LocalLambdaPlatform
from squall.testing import assert_same_result

from ..s3server import moto_available, moto_s3
from ..tpch_data import duckdb_over, tpch_dataset

pytestmark = pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))

BUCKET = "squall-lambda-test"
QUERIES = list(tpch.QUERY_NUMBERS)  # the whole TPC-H suite on 16 emulated Lambda workers


@pytest.fixture(scope="module")
def s3():
    with moto_s3(BUCKET) as server:
        yield server


@pytest.fixture(scope="module")
def sf01(tmp_path_factory):
    return tpch_dataset(0.1, tmp_path_factory=tmp_path_factory)


@pytest.fixture(scope="module")
def reference(sf01):
    con = duckdb_over(sf01)
    yield con
    con.close()


@pytest.fixture(scope="module")
def lambda16(s3, sf01):
    con = squall.connect(data=str(sf01), workers=16, platform="lambda-local",
                         exchange=f"s3://{BUCKET}/exchange", platform_options={"fanout": 4})  # fmt: skip
    yield con
    con.close()


def _left_over(s3) -> list[str]:
    listed = s3.client().list_objects_v2(Bucket=BUCKET, Prefix="exchange/")
    return [o["Key"] for o in listed.get("Contents", []) if not o["Key"].endswith("/ABORT")]


@pytest.mark.parametrize("n", QUERIES)
def test_tpch_sf01_w16(lambda16, reference, s3, n):
    sql = tpch.query(n)
    result = lambda16.sql(sql)
    assert_same_result(result.to_arrow(), reference.sql(sql).to_arrow_table(), sql)
    lam = result.stats["lambda"]
    assert lam["tree_depth"] == 2 and lam["fanout"] == 4
    # 4 from the driver, 12 by first-level workers (+ duplicates of stragglers on a busy machine)
    assert lam["invocations"] == 16 + lam["duplicates"] + lam["retries"]
    assert lam["startup_s"]["all"] is not None and lam["startup_s"]["all"] >= lam["startup_s"]["first"]
    assert result.stats["cost_usd"] > 0 and result.stats["cost"]["gb_seconds"] > 0
    assert _left_over(s3) == []


def test_faults_crash_delay_s3_errors(s3, sf01, reference):
    """A rank crashes, another straggles, S3 fails 5 % of requests: same answers, retries in the stats."""
    faults = "crash:rank=3:stage=1,delay:rank=2:seconds=8,s3_error:rate=0.05"
    client = LocalLambda(function_name="squall-worker", concurrency=20, memory_mb=1024, timeout_s=300,
                         env={"SQUALL_FAULTS": faults})  # fmt: skip
    platform = LocalLambdaPlatform(16, fanout=4, client=client,
                                   exchange_options={"bucket_url": f"s3://{BUCKET}/exchange"})  # fmt: skip
    con = squall.connect(data=str(sf01), platform=platform)
    try:
        sql = tpch.query(3)
        result = con.sql(sql)
        assert_same_result(result.to_arrow(), reference.sql(sql).to_arrow_table(), sql)
        lam = result.stats["lambda"]
        assert (
            lam["retries"] >= 1 and {"rank": 3, "attempt": 1, "reason": "heartbeat lost"} in lam["relaunched"]
        )
        assert lam["duplicates"] >= 1 and any(d["rank"] == 2 for d in lam["relaunched"])
        assert result.stats["exchange_requests"].get("retries", 0) > 0
        assert client.stats["crashes"] >= 1
    finally:
        con.close()
        client.close()


def test_worker_error_fails_fast(s3, sf01):
    """A rank's real error comes back as one line, quickly, and the query's objects are cleaned up."""
    con = squall.connect(data=str(sf01), workers=4, platform="lambda-local",
                         exchange=f"s3://{BUCKET}/exchange")  # fmt: skip
    try:
        with pytest.raises(squall.errors.QueryRuntimeError):
            con.sql("SELECT CAST(o_comment AS INTEGER) FROM orders")
        assert _left_over(s3) == []
    finally:
        con.close()
