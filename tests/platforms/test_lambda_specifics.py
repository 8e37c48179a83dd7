"""What only the Lambda platform does, beyond the platform suite's ``lambda-local`` backend: on 16
emulated workers (fan-out 4, tree depth 2) a crashed rank is re-invoked, a straggler gets a duplicate,
and S3 errors are retried — with the same answer and all of it visible in the stats. (Tree depth,
invocation counts, start-up times and cost are asserted on every TPC-H query by the suite.)
"""

from __future__ import annotations

import pytest

from squall import tpch
from squall.testing import assert_same_result

from ..tpch_data import duckdb_over
from .backends import SF, backend_named

BACKEND = backend_named("lambda-local")
pytestmark = pytest.mark.skipif(BACKEND.skip() is not None, reason=str(BACKEND.skip()))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    with BACKEND.open(BACKEND, tmp_path_factory.mktemp("lambda")) as s:
        yield s


def test_faults_crash_delay_s3_errors(site, sf01, monkeypatch):
    """A rank crashes, another straggles, S3 fails 15 % of requests: same answers, retries in the stats,
    the straggler's duplicate answers for it."""
    # 15 %: the answered ranks make ~90 exchange requests, so none failing is 0.85**90 ~ 5e-7 (at 5 % it
    # was 1 %, and CI of stop 33 saw it); a request failing all 9 tries is 0.15**9 ~ 4e-8 each
    monkeypatch.setenv(
        "SQUALL_FAULTS", "crash:rank=3:stage=1,delay:rank=2:seconds=150:stage=1,s3_error:rate=0.15"
    )
    con = site.connect(sf01, 16, platform_options={"concurrency": 20})
    reference = duckdb_over(sf01)
    try:
        sql = tpch.query(3, sf=SF)
        result = con.sql(sql)
        assert_same_result(result.to_arrow(), reference.sql(sql).to_arrow_table(), sql)
        lam = result.stats["lambda"]
        assert lam["fanout"] == 4 and lam["tree_depth"] == 2
        assert (
            lam["retries"] >= 1 and {"rank": 3, "attempt": 1, "reason": "heartbeat lost"} in lam["relaunched"]
        ), str(lam)  # a string: pytest prints it whole
        # rank 2 sleeps far longer than the straggler rule's threshold (at most 4x the time half the ranks
        # took to send stage 1): its duplicate answers, and the sleeping copy stops when the query ends
        assert lam["duplicates"] >= 1, str(lam)
        assert {"rank": 2, "attempt": 1, "won": True} in [
            {k: d.get(k) for k in ("rank", "attempt", "won")} for d in lam["relaunched"]
        ], str(lam)
        assert result.stats["exchange_requests"].get("retries", 0) > 0
        assert con.platform.client.stats["crashes"] >= 1  # the emulator saw the process die
        assert site.leftovers() == []
    finally:
        con.close()
        reference.close()
