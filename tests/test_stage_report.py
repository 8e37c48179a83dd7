"""A stage's time on a rank counts each of its parts once: reading, computing, splitting the output by receiver,
sending and receiving (a streamed hash output's splitting is taken out of its compute time, so it must be
added back: TPC-DS Q7's first stage once showed 100 ms where the rank spent 245)."""

from __future__ import annotations

import pytest

import squall
from squall import tpch
from squall.driver.options import PlannerOptions
from squall.operators.worker import StageReport

#: every join hashed: no broadcast, no replicated scan, no join in place
HASHED = PlannerOptions(broadcast_limit=0, replicated_scan_rows=0, join_in_place=False)


def test_time_s_adds_every_part() -> None:
    sr = StageReport(1, scan_s=0.5, compute_s=1.0, partition_s=2.0, send_s=4.0, receive_s=8.0)
    assert sr.time_s == pytest.approx(15.5)


def test_a_hash_stage_reports_its_splitting(sf001) -> None:
    with squall.connect(str(sf001), workers=2, planner_options=HASHED) as con:
        result = con.sql(tpch.query(3, sf=0.01))
        result.arrow()
        hashed = [s for s in result.stats["stages"] if s["output"] == "hash"]
    assert hashed, result.stats["stages"]
    for s in hashed:  # (each part is the slowest rank's; the time is the slowest rank's sum)
        assert s["time_s"] >= max(s["partition_s"], s["compute_s"], s["scan_s"], s["receive_s"]), s
    assert any(s["partition_s"] > 0 for s in hashed), hashed
