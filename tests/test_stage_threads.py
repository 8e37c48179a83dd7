"""A stage on fewer ranks than the query's takes the waiting ranks' cores (operators/stage_sandboxes.py).

On the local platform the W ranks share the machine's cores (cores // W DuckDB threads each); a one-rank tail
(the final aggregate, sort and LIMIT on rank 0) runs in a second sandbox of ``cores`` threads. Counted, not
timed: ``stats["stages"][i]["threads"]`` says what each stage ran with, and the answers equal DuckDB's.
"""

from __future__ import annotations

import os
import threading
import time

import duckdb
import pytest

import squall
from squall import tpch
from squall.operators.duck import ParquetView
from squall.operators.stage_sandboxes import StageSandboxes
from squall.testing import assert_same_result

CORES = os.cpu_count() or 1


@pytest.mark.parametrize("n", [1, 13, 18])
def test_one_rank_stages_take_the_machines_cores(sf001, reference_sf001, n):
    sql = tpch.query(n, sf=0.01)
    with squall.connect(str(sf001), workers=2) as con:
        result = con.sql(sql)
        assert_same_result(result.arrow(), reference_sf001.sql(sql).to_arrow_table(), sql)
    stages = result.stats["stages"]
    share = max(1, CORES // 2)
    assert any(s["ranks"] == 1 for s in stages) and any(s["ranks"] == 2 for s in stages)
    for s in stages:
        if s["rows_in"] or s["compute_s"]:  # ran on some rank
            assert s["threads"] == (max(share, CORES) if s["ranks"] == 1 else share), stages


def test_threads_per_worker_given_are_kept_for_every_stage(sf001, reference_sf001):
    sql = tpch.query(3, sf=0.01)
    with squall.connect(str(sf001), workers=2, platform_options={"threads_per_worker": 1}) as con:
        result = con.sql(sql)
        assert_same_result(result.arrow(), reference_sf001.sql(sql).to_arrow_table(), sql)
    assert {s["threads"] for s in result.stats["stages"] if s["rows_in"] or s["compute_s"]} == {1}


def test_stage_sandboxes_share_views_and_settings_and_interrupt_each(sf001):
    """Each thread count's sandbox sees the same Parquet views and memory setting; ``interrupt`` stops a
    statement in any of them; a rank's share is lent only to stages on fewer ranks."""
    path = str(sf001 / "lineitem.parquet")
    views = {"li": ParquetView((("l_orderkey", "k"), ("l_quantity", "q")), ((path, ()),))}
    with StageSandboxes(1, 4, parquet=views, memory_limit="512MiB", reuse=True) as boxes:
        assert boxes.threads_for(2, 2) == 1 and boxes.threads_for(1, 2) == 4 and boxes.threads_for(2, 4) == 2
        narrow, wide = boxes.sandbox(1), boxes.sandbox(4)
        assert narrow is not wide and boxes.sandbox(4) is wide
        counts = [db.query("SELECT count(*) AS n FROM li")["n"][0].as_py() for db in (narrow, wide)]
        assert counts[0] == counts[1] > 0
        settings = "SELECT current_setting('threads') AS t, current_setting('memory_limit') AS m"
        assert [db.query(settings).to_pylist()[0]["t"] for db in (narrow, wide)] == [1, 4]
        assert {db.query(settings).to_pylist()[0]["m"] for db in (narrow, wide)} == {"512.0 MiB"}
        timer = threading.Timer(0.3, boxes.interrupt)
        timer.start()
        start = time.perf_counter()
        with pytest.raises(duckdb.InterruptException):
            wide.query("SELECT count(*) FROM range(10000000000) a, range(10) b WHERE a.range % 7 = b.range")
        assert time.perf_counter() - start < 30
    assert StageSandboxes(2, None).threads_for(1, 4) == 2  # no cores to lend (Lambda, a launcher's cluster)
