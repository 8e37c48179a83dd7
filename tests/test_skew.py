"""Skew: per-exchange balance in the stats and in ``squall explain --analyze``."""

from __future__ import annotations

import duckdb
import pytest

import squall
from squall.cli import main
from squall.driver.exchange_stats import skew_factor
from squall.driver.planner import PlannerOptions
from squall.testing import assert_same_result

from .skew_data import JOIN, write_skewed

#: force partitioned joins on the small test tables (no broadcast)
NO_BROADCAST = dict(broadcast_limit=0.0)


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    return write_skewed(tmp_path_factory.mktemp("skewed"))


def reference(folder, sql: str):
    con = duckdb.connect()
    for t in ("fact", "dim"):
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{folder}/{t}.parquet')")
    return con.sql(sql).to_arrow_table()


def test_skew_factor():
    assert skew_factor([]) == 1.0 and skew_factor([0, 0]) == 1.0
    assert skew_factor([1, 1, 1, 1]) == 1.0
    assert skew_factor([4, 0, 0, 0]) == 4.0


def test_stats_show_rows_per_rank_and_skew(skewed):
    opts = PlannerOptions(**NO_BROADCAST)
    with squall.connect(data=str(skewed), workers=4, planner_options=opts) as con:
        result = con.sql(JOIN)
    assert_same_result(result.to_arrow(), reference(skewed, JOIN), JOIN)
    hashed = [e for e in result.stats["exchanges"] if e["kind"] == "hash"]
    assert len(hashed) >= 2
    for e in result.stats["exchanges"]:
        assert len(e["rows_per_rank"]) == e["receivers"] == len(e["bytes_per_rank"])
        assert e["skew"] == pytest.approx(skew_factor(e["rows_per_rank"]), rel=1e-3)
        assert "assignment" not in e  # skew handling off: plain hash
    # the fact side: 30 % of the rows on one rank of 4 (~0.3 + 0.7/4 = 47.5 % vs 25 %)
    assert max(e["skew"] for e in hashed) > 1.6
    assert sum(sum(e["rows_per_rank"]) for e in hashed) >= 60_000


def test_explain_analyze_prints_a_line_per_exchange(skewed, capsys):
    assert main(["explain", JOIN, "--data", str(skewed), "--workers", "3", "--analyze"]) == 0
    out = capsys.readouterr().out
    assert "Distributed plan" in out and "Exchanges (rows received per rank" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("  stage ") and " skew " in ln]
    assert lines, out
