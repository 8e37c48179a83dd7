"""Work stealing of scan splits (I-Store) on every platform backend: local, local + S3, lambda-local
and fabric (tcp, shm).

One rank is made slow (``SQUALL_FAULTS=slow_scan:…``: it sleeps before every row group it scans);
with ``work_stealing`` the others take its unread row groups. Checked: the answer matches DuckDB,
every split is read exactly once (per-rank stats, and the rows scanned equal the table's rows) and
the fast ranks stole from the slow one. Also: W=1 and a run without faults (nothing to do but
claim), and the TPC-H queries of the suite's subset with stealing on.
"""

from __future__ import annotations

import pyarrow.parquet as pq

from squall import tpch
from squall.driver.options import PlannerOptions
from squall.testing import assert_same_result

from .backends import SF, Site

STEAL = PlannerOptions(work_stealing=True)
W = 3  # SF0.1 lineitem has 6 row groups: two per rank
SLOW = "slow_scan:rank=1:seconds=4:stage=1"  # rank 1 spends 4 s on each of its row groups


def _lineitem_rows(sf01) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in sorted(sf01.glob("lineitem*.parquet")))


def _check_once(stats, rows: int) -> dict:
    """Every split of the (only) stealing scan read exactly once; returns its stats entry."""
    (scan,) = stats["steals"]
    ranks = scan["per_rank"]
    assert scan["enabled"] and scan["splits"] == 6 and scan["read"] == 6, scan
    assert sum(r["own"] + r["stolen"] + r["reclaimed"] for r in ranks) == 6
    assert sum(r["lost"] for r in ranks) == scan["stolen"]  # what one lost, another stole
    assert sum(r["rows"] for r in ranks) == rows  # no row group twice, none missed
    assert stats["stages"][0]["rows_scanned"] == rows
    assert scan["claims"] >= 6
    return scan


def test_slow_rank_is_stolen_from(site: Site, sf01, reference, monkeypatch):
    monkeypatch.setenv("SQUALL_FAULTS", SLOW)
    con = site.connect(sf01, W, planner_options=STEAL)
    try:
        sql = tpch.query(6, sf=SF)
        assert "split by row group, work stealing" in con.explain(sql)
        result = con.sql(sql)
    finally:
        con.close()
    assert_same_result(result.to_arrow(), reference.sql(sql).to_arrow_table(), sql)
    scan = _check_once(result.stats, _lineitem_rows(sf01))
    slow = scan["per_rank"][1]
    assert slow["rank"] == 1 and slow["planned"] == 2 and slow["lost"] >= 1 and slow["stolen"] == 0, scan
    thieves = [r for r in scan["per_rank"] if r["rank"] != 1 and r["stolen_from"].get("1")]
    assert thieves, scan
    assert site.leftovers() == []


def test_no_faults_and_tpch_subset(site: Site, sf01, reference):
    con = site.connect(sf01, W, planner_options=STEAL)
    try:
        for n in (1, 6, 3):
            sql = tpch.query(n, sf=SF)
            result = con.sql(sql)
            assert_same_result(result.to_arrow(), reference.sql(sql).to_arrow_table(), sql)
            if n != 3:
                _check_once(result.stats, _lineitem_rows(sf01))
    finally:
        con.close()
    assert site.leftovers() == []


def test_one_worker_does_not_steal(site: Site, sf01, reference):
    con = site.connect(sf01, 1, planner_options=STEAL)
    try:
        sql = tpch.query(6, sf=SF)
        assert "work stealing" not in con.explain(sql)
        result = con.sql(sql)
    finally:
        con.close()
    assert_same_result(result.to_arrow(), reference.sql(sql).to_arrow_table(), sql)
    assert result.stats["steals"] == []
