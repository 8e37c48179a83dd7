"""Skew: per-exchange balance in the stats and ``squall explain --analyze``; skew-aware joins (histogram
assignment, selective broadcast) on skewed data match DuckDB at W=1,3,4,8 on local, S3 and fabric-tcp."""

from __future__ import annotations

import dataclasses
import re

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall.cli import main
from squall.driver.options import PlannerOptions
from squall.driver.report.exchanges import UNEVEN, UNEVEN_MIN_BYTES, format_exchanges, skew_factor
from squall.plan import Plan
from squall.testing import assert_same_result

from .skew_data import (
    AGG,
    AGG_SUM,
    DIM_ROWS,
    FACT_ROWS,
    HOT_SHARE,
    JOIN,
    JOIN_ROWS,
    LEFT_JOIN,
    OUTER_HOT,
    OUTER_NULLS,
    OUTER_ROWS,
    WINDOW,
    write_skewed,
)

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


def test_explain_analyze_says_why_an_uneven_exchange_had_no_skew_handling(tmp_path):
    """Under ``skew_min_bytes`` a skewed join keeps plain hashing; ``explain --analyze`` says so on the
    uneven exchange (≥ UNEVEN_MIN_BYTES moved) and on no other."""
    folder = write_skewed(tmp_path / "big", fact_rows=200_000)
    with squall.connect(data=str(folder), workers=4, planner_options=PlannerOptions(**NO_BROADCAST)) as con:
        result = con.sql(JOIN)
    assert_same_result(result.to_arrow(), reference(folder, JOIN), JOIN)
    lines = format_exchanges(result.stats).splitlines()[1:]
    flagged = 0
    for e, line in zip(result.stats["exchanges"], lines, strict=True):
        uneven = e["kind"] == "hash" and e["skew"] > UNEVEN and e["bytes_moved"] >= UNEVEN_MIN_BYTES
        assert ("plain hash % W, no skew handling here" in line) == uneven, line
        flagged += uneven
    assert flagged == 1  # the fact side (30 % of its rows on one key)


def test_explain_analyze_prints_a_line_per_exchange(skewed, capsys):
    assert main(["explain", JOIN, "--data", str(skewed), "--workers", "3", "--analyze"]) == 0
    out = capsys.readouterr().out
    assert "Distributed plan" in out and "Exchanges (rows received per rank" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("  stage ") and " skew " in ln]
    assert lines, out


# --- skew handling on: results match DuckDB, the exchanges are balanced --------------------------------

# joins and aggregates in place by key range (planner/colocate.py) would take the clustered cases' exchanges
ON = PlannerOptions(**NO_BROADCAST, skew_min_bytes=0.0, join_in_place=False)
OFF = PlannerOptions(**NO_BROADCAST, skew_min_bytes=0.0, skew_handling=False, join_in_place=False)
QUERIES = (JOIN, JOIN_ROWS, LEFT_JOIN, OUTER_HOT, OUTER_ROWS, OUTER_NULLS, AGG, AGG_SUM, WINDOW)


def _check_all(con, folder) -> dict[str, dict]:
    stats = {}
    for sql in QUERIES:
        result = con.sql(sql)
        assert_same_result(result.to_arrow(), reference(folder, sql), sql)
        stats[sql] = result.stats
    return stats


def _join_exchanges(stats: dict) -> list[dict]:
    return [e for e in stats["exchanges"] if e["kind"] == "hash"]


def _balanced(stats: dict, heavy_hitters: int | None = None) -> None:
    """The query has a join's hash exchange, and each such exchange is within 1.25x max/mean (and holds
    ``heavy_hitters`` heavy hitters, when given): never vacuous on a plan without one."""
    found = _join_exchanges(stats)
    assert found, stats["exchanges"]
    for e in found:
        assert e["skew"] <= 1.25, e
        assert heavy_hitters is None or e["heavy_hitters"] == heavy_hitters, e


@pytest.mark.parametrize("workers", [1, 3, 4, 8])
def test_skewed_queries_match_duckdb_and_balance(skewed, workers):
    with squall.connect(data=str(skewed), workers=workers, planner_options=ON) as con:
        stats = _check_all(con, skewed)
        plan = con.explain(JOIN)
    if workers == 1:
        return
    assert "skew-aware: partitions=" in plan and "selective broadcast" in plan
    join = _join_exchanges(stats[JOIN])
    assert len(join) == 2
    for e in join:
        assert e["skew"] <= 1.25, e
        assert e["assignment"].startswith("histogram+locality") and e["partitions"] == 32 * workers
        assert sum(e["partitions_per_rank"]) == e["partitions"]
        assert e["heavy_hitters"] == 1 and e["heavy_handling"] == "1 selective broadcast"
    fact = max(join, key=lambda e: sum(e["rows_per_rank"]))
    assert fact["heavy_rows_kept"] == pytest.approx(HOT_SHARE * FACT_ROWS, rel=0.05)
    dim = min(join, key=lambda e: sum(e["rows_per_rank"]))
    assert dim["heavy_rows_broadcast"] == 1  # the one dim row of the hot key, to every rank
    assert sum(dim["rows_per_rank"]) == DIM_ROWS + workers - 1
    _balanced(stats[LEFT_JOIN], heavy_hitters=1)
    # the hot key on an outer join's null-supplied side: kept at the ranks that hold it, the preserved
    # side's one row of it goes to those ranks only
    for sql in (OUTER_HOT, OUTER_ROWS):
        outer = _join_exchanges(stats[sql])
        assert len(outer) == 2 and all(
            e["heavy_handling"].startswith("1 kept at their holders") for e in outer
        )
        fact = max(outer, key=lambda e: sum(e["rows_per_rank"]))
        dim = min(outer, key=lambda e: sum(e["rows_per_rank"]))
        assert fact["skew"] <= 1.25, (sql, fact)  # (OUTER_ROWS' dim side is 99 rows: no balance to see)
        assert fact["heavy_rows_kept"] > 0.9 * HOT_SHARE * FACT_ROWS and fact["heavy_rows_broadcast"] == 0
        assert dim["heavy_rows_broadcast"] == 1 and dim["heavy_rows_kept"] == 0
        assert sum(dim["rows_per_rank"]) <= DIM_ROWS + workers - 1  # one copy per holder (here: every rank)
    # NULL keys never match: the null-supplied side drops them, the preserved side keeps them in place
    dim_side, fact_side = sorted(_join_exchanges(stats[OUTER_NULLS]), key=lambda e: sum(e["rows_per_rank"]))
    assert dim_side["null_key_rows_kept_local"] == DIM_ROWS // 3, dim_side  # k % 3 = 0
    assert fact_side["null_key_rows_dropped"] > FACT_ROWS // 5, fact_side  # v % 4 = 0
    assert sum(fact_side["rows_per_rank"]) == FACT_ROWS - fact_side["null_key_rows_dropped"]
    assert dim_side["skew"] <= 1.25 and fact_side["skew"] <= 1.25, (dim_side, fact_side)


@pytest.mark.parametrize("workers", [4, 8])
def test_skew_handling_off_is_imbalanced(skewed, workers):
    with squall.connect(data=str(skewed), workers=workers, planner_options=OFF) as con:
        result = con.sql(JOIN)
        plan = con.explain(JOIN)
    assert_same_result(result.to_arrow(), reference(skewed, JOIN), JOIN)
    assert "skew-aware" not in plan
    fact = max(_join_exchanges(result.stats), key=lambda e: sum(e["rows_per_rank"]))
    hot = HOT_SHARE + (1 - HOT_SHARE) / workers  # the hot key's rank
    assert fact["skew"] >= 0.9 * hot * workers and "assignment" not in fact


# --- key ranges: data clustered by the join key stays where it is (Neo-Join's locality) ---------------------


@pytest.fixture(scope="module")
def clustered(tmp_path_factory):
    """``fact`` and ``dim`` both written in key order (no hot key): each rank's row groups hold a key range."""
    folder = write_skewed(tmp_path_factory.mktemp("clustered"), hot_share=0.0)
    fact = pq.read_table(folder / "fact.parquet").sort_by("k")
    pq.write_table(fact, folder / "fact.parquet", row_group_size=FACT_ROWS // 16)
    return folder


@pytest.mark.parametrize("workers", [3, 4])
def test_key_ranges_keep_clustered_rows_local(clustered, workers):
    ranges, hashed = {}, {}
    for on in (True, False):
        opts = dataclasses.replace(ON, skew_locality_ranges=on)
        with squall.connect(data=str(clustered), workers=workers, planner_options=opts) as con:
            plan = con.explain(JOIN)
            result = con.sql(JOIN)
        assert_same_result(result.to_arrow(), reference(clustered, JOIN), JOIN)
        assert ("by key range in [1, 20000]" in plan) == on, plan
        (ranges if on else hashed).update({e["stage"]: e for e in _join_exchanges(result.stats)})
    assert len(ranges) == 2 and len(hashed) == 2
    for e in ranges.values():
        assert e["assignment"] == "histogram+locality, key ranges" and e["skew"] <= 1.25, e
        assert e["rows_kept_local"] >= 0.9 * (e["rows_kept_local"] + e["rows_moved"]), e
    for e in hashed.values():
        assert e["assignment"] == "histogram+locality"  # hash partitions: about 1/W stays
        assert e["rows_kept_local"] <= 0.5 * (e["rows_kept_local"] + e["rows_moved"]), e
    moved = {
        name: sum(e["rows_moved"] for e in x.values()) for name, x in (("ranges", ranges), ("hash", hashed))
    }
    assert moved["ranges"] < 0.1 * moved["hash"], moved


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_aggregate_by_the_splits_key_ranges_keeps_partial_groups_local(clustered, workers):
    """A GROUP BY on the clustered key: each rank's row groups hold one key range (Parquet statistics), so the
    partial groups' exchange goes by those ranges, with no histogram round, and barely moves (when the
    aggregate does not complete in place: ``aggregate_in_place`` off)."""
    # 20,000 groups would otherwise gather to rank 0
    by_key = dataclasses.replace(ON, gather_groups=0, aggregate_in_place=False)
    with squall.connect(data=str(clustered), workers=workers, planner_options=by_key) as con:
        plan = con.explain(AGG_SUM)
        result = con.sql(AGG_SUM)
        round_trip = Plan.from_json(con.plan(AGG_SUM).to_json())
    assert_same_result(result.to_arrow(), reference(clustered, AGG_SUM), AGG_SUM)
    assert 'key ranges("k") → ' in plan and "no histogram round" in plan, plan
    assert "skew-aware" not in plan, plan
    (e,) = _join_exchanges(result.stats)
    assert "assignment" not in e and e["skew"] <= 1.25, e  # no histogram round: a plain exchange's stats
    assert e["bytes_moved"] <= 0.1 * sum(e["bytes_per_rank"]), e
    assert any(s.output.split_ranges for s in round_trip.stages)  # survives the plan's JSON


def _key_ordered_fact(folder, rows_per_key: int, row_group_size: int, keys: int = 2000):
    k = pa.array([key for key in range(keys) for _ in range(rows_per_key)], pa.int64())
    pq.write_table(pa.table({"k": k, "v": pa.array(range(len(k)), pa.int64())}), folder / "fact.parquet",
                   row_group_size=row_group_size)  # fmt: skip
    pq.write_table(
        pa.table({"k": pa.array([1], pa.int64())}), folder / "dim.parquet"
    )  # reference() reads both
    return folder


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_aggregate_completes_in_place_when_the_splits_hold_key_ranges(tmp_path, workers):
    """Written in key order, row groups of whole keys (100 keys each): every key's rows lie in one rank's
    splits, so the GROUP BY completes on every rank; no exchange carries its groups, only the result."""
    folder = _key_ordered_fact(tmp_path, rows_per_key=10, row_group_size=1000)
    with squall.connect(data=str(folder), workers=workers, planner_options=ON) as con:
        plan = con.explain(AGG_SUM)
        result = con.sql(AGG_SUM)
    assert_same_result(result.to_arrow(), reference(folder, AGG_SUM), AGG_SUM)
    assert "aggregate by k complete on every rank, no exchange" in plan, plan
    assert [e["kind"] for e in result.stats["exchanges"]] == ["gather"], result.stats["exchanges"]


def test_aggregate_not_in_place_when_a_key_spans_two_ranks(tmp_path):
    """Key order, but row groups that cut keys in two (7 rows a key, 90 rows a group): two ranks' ranges
    share a key, so the partial groups meet by key in an exchange, and every key is counted once."""
    folder = _key_ordered_fact(tmp_path, rows_per_key=7, row_group_size=90, keys=300)
    opts = dataclasses.replace(ON, gather_groups=0)
    with squall.connect(data=str(folder), workers=3, planner_options=opts) as con:
        plan = con.explain(AGG_SUM)
        result = con.sql(AGG_SUM)
    assert_same_result(result.to_arrow(), reference(folder, AGG_SUM), AGG_SUM)
    assert "complete on every rank" not in plan and "partial aggregates by group key" in plan, plan
    assert result.arrow().num_rows == 300


def test_aggregate_not_in_place_with_null_keys(tmp_path):
    """NULL keys lie outside the row groups' [min, max]: a NULL group could be on every rank, so the groups
    meet by key, and the NULL group comes out once."""
    folder = _key_ordered_fact(tmp_path, rows_per_key=10, row_group_size=1000)
    fact = pq.read_table(folder / "fact.parquet")
    k = pa.array([None if i % 997 == 0 else v for i, v in enumerate(fact["k"].to_pylist())], pa.int64())
    pq.write_table(fact.set_column(0, "k", k), folder / "fact.parquet", row_group_size=1000)
    with squall.connect(data=str(folder), workers=3, planner_options=ON) as con:
        plan = con.explain(AGG_SUM)
        result = con.sql(AGG_SUM)
    assert_same_result(result.to_arrow(), reference(folder, AGG_SUM), AGG_SUM)
    assert "complete on every rank" not in plan, plan
    assert result.arrow()["k"].null_count == 1


def test_aggregate_over_unclustered_keys_keeps_the_histogram_round(skewed):
    """Random keys: the ranks' key ranges overlap, so the partial groups go through the histogram round
    (hash or key ranges, whichever keeps more local), as before."""
    by_key = dataclasses.replace(ON, gather_groups=0)
    with squall.connect(data=str(skewed), workers=4, planner_options=by_key) as con:
        plan = con.explain(AGG_SUM)
        result = con.sql(AGG_SUM)
    assert_same_result(result.to_arrow(), reference(skewed, AGG_SUM), AGG_SUM)
    assert "key ranges(" not in plan and "by key range in [" in plan, plan
    (e,) = _join_exchanges(result.stats)
    assert e["assignment"].startswith("histogram+locality") and e["skew"] <= 1.25, e


@pytest.mark.parametrize("workers", [3, 4])
def test_count_distinct_spreads_a_hot_key(skewed, workers):
    """COUNT(DISTINCT v) GROUP BY k over many groups: with skew handling engaged (input at skew_min_bytes or
    more; here 0) the hot key's 18,000 values move by (k, v), not all to one rank. Under skew_min_bytes (the
    default 64 MB; this table is a few hundred kB) the pairs move by k alone and each rank completes its
    groups, as a join of that size skips the histogram round."""
    with squall.connect(data=str(skewed), workers=workers, planner_options=ON) as con:
        plan = con.explain(AGG)
        result = con.sql(AGG)
    assert_same_result(result.to_arrow(), reference(skewed, AGG), AGG)
    assert "distinct aggregate: (group keys, value) pairs by both" in plan, plan
    pairs = result.stats["exchanges"][0]
    assert pairs["kind"] == "hash" and pairs["skew"] <= 1.25, pairs
    assert sum(pairs["rows_per_rank"]) > HOT_SHARE * FACT_ROWS  # the hot key's distinct values moved
    with squall.connect(
        data=str(skewed), workers=workers, planner_options=PlannerOptions(**NO_BROADCAST)
    ) as con:
        plan = con.explain(AGG)
        result = con.sql(AGG)
    assert_same_result(result.to_arrow(), reference(skewed, AGG), AGG)
    assert "pairs by group key, complete where they land" in plan and "< skew_min_bytes" in plan, plan


def test_key_ranges_not_taken_without_locality(skewed):
    """Random keys (``fact``) and a hot key: ranges would keep no more rows local than the hash's locality
    does on ``dim``; whichever is taken, the result is right and the exchanges balance."""
    with squall.connect(data=str(skewed), workers=4, planner_options=ON) as con:
        result = con.sql(JOIN)
    assert_same_result(result.to_arrow(), reference(skewed, JOIN), JOIN)
    _balanced(result.stats)


def test_skew_on_s3_exchange(skewed):
    from .s3server import moto_available, moto_s3

    if reason := moto_available():
        pytest.skip(reason)
    with moto_s3("squall-skew-xchg") as _s3, squall.connect(
        data=str(skewed), workers=4, planner_options=ON,
        exchange="s3://squall-skew-xchg/t", exchange_options={"levels": 2},
    ) as con:  # fmt: skip
        result = con.sql(JOIN)
    assert_same_result(result.to_arrow(), reference(skewed, JOIN), JOIN)
    _balanced(result.stats, heavy_hitters=1)


def test_split_key_ranges_on_s3_exchange(clustered):
    """The partial groups' exchange by the splits' key ranges through the S3 exchange (same worker code)."""
    from .s3server import moto_available, moto_s3

    if reason := moto_available():
        pytest.skip(reason)
    with moto_s3("squall-ranges-xchg") as _s3, squall.connect(
        data=str(clustered), workers=3, exchange="s3://squall-ranges-xchg/t",
        planner_options=dataclasses.replace(ON, gather_groups=0, aggregate_in_place=False),
    ) as con:  # fmt: skip
        result = con.sql(AGG_SUM)
        assert "no histogram round" in con.explain(AGG_SUM)
    assert_same_result(result.to_arrow(), reference(clustered, AGG_SUM), AGG_SUM)
    (e,) = _join_exchanges(result.stats)
    assert e["bytes_moved"] <= 0.1 * sum(e["bytes_per_rank"]), e


def test_skew_on_fabric_tcp(skewed):
    from squall.exchange.fabric import native_available

    if reason := native_available():
        pytest.skip(f"libfabric: {reason}")
    with squall.connect(
        data=str(skewed),
        workers=4,
        planner_options=ON,
        platform="fabric",
        platform_options={"provider": "tcp"},
    ) as con:
        result = con.sql(JOIN)
    assert_same_result(result.to_arrow(), reference(skewed, JOIN), JOIN)
    _balanced(result.stats, heavy_hitters=1)


# --- the run-time broadcast join: the planner hashed both sides, their actual sizes say broadcast -------------

#: the planner never broadcasts (broadcast_factor 0) but the run-time decision may (broadcast_limit default)
RUN_TIME = PlannerOptions(broadcast_factor=0.0, skew_min_bytes=0.0, replicated_scan_rows=0.0)


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_run_time_broadcast_join(skewed, workers):
    with squall.connect(data=str(skewed), workers=workers, planner_options=RUN_TIME) as con:
        plan = con.explain(JOIN)
        results = {sql: con.sql(sql) for sql in (JOIN, JOIN_ROWS, LEFT_JOIN)}
    assert "goes whole to every rank if its bytes are the cheaper move" in plan
    for sql, result in results.items():
        assert_same_result(result.to_arrow(), reference(skewed, sql), sql)
    # JOIN sends dim (k, grp: 320 kB) and fact (k, v: 960 kB): dim to the W - 1 other ranks moves fewer
    # bytes than hashing both at W = 2 and 3, not at W = 4 (3 x 320 kB = 960 kB), where the hot key is
    # handled by selective broadcast instead
    join = _join_exchanges(results[JOIN].stats)
    assert len(join) == 2, join
    fact = max(join, key=lambda e: e["rows_kept_local"])
    dim = min(join, key=lambda e: e["rows_kept_local"])
    if workers < 4:
        assert fact["run_time"] == "kept where it is" and fact["rows_moved"] == 0
        assert fact["rows_kept_local"] == FACT_ROWS
        assert dim["run_time"] == "broadcast to every rank"
        assert dim["rows_per_rank"] == [DIM_ROWS] * workers  # every rank holds the whole dim side
        said = re.fullmatch(
            r"run-time broadcast join: member 1 \((\d+) bytes\) to every rank, the other side \((\d+) bytes\) "
            r"stays in place",
            dim["heavy_handling"],
        )
        assert said and int(said[1]) * (workers - 1) < int(said[2]), dim["heavy_handling"]
    else:
        assert all("run_time" not in e and e["heavy_handling"] == "1 selective broadcast" for e in join)


def test_run_time_broadcast_off_hashes_both_sides(skewed):
    off = dataclasses.replace(RUN_TIME, runtime_broadcast=False)
    with squall.connect(data=str(skewed), workers=3, planner_options=off) as con:
        result = con.sql(JOIN)
        plan = con.explain(JOIN)
    assert_same_result(result.to_arrow(), reference(skewed, JOIN), JOIN)
    assert "goes whole to every rank" not in plan
    assert all(
        "run_time" not in e and e["assignment"].startswith("histogram+locality")
        for e in _join_exchanges(result.stats)
    )


def test_run_time_broadcast_join_on_s3_exchange(skewed):
    from .s3server import moto_available, moto_s3

    if reason := moto_available():
        pytest.skip(reason)
    with moto_s3("squall-rtb-xchg") as _s3, squall.connect(
        data=str(skewed), workers=3, planner_options=RUN_TIME, exchange="s3://squall-rtb-xchg/t",
    ) as con:  # fmt: skip
        result = con.sql(JOIN)
    assert_same_result(result.to_arrow(), reference(skewed, JOIN), JOIN)
    runs = sorted(e["run_time"] for e in _join_exchanges(result.stats))
    assert runs == ["broadcast to every rank", "kept where it is"], result.stats["exchanges"]


@pytest.mark.parametrize("cores", [2, 8])
def test_skew_threshold_grows_with_ranks_per_core(skewed, monkeypatch, cores):
    """Local workers beyond the machine's cores share them: the skew-aware joins' threshold is scaled by
    the ranks per core (their histogram round is a barrier), and the plan says which join kept plain
    hashing for that reason; ``skew_min_bytes=0`` (skew handling forced) stays 0."""
    monkeypatch.setattr("squall.driver.platforms.local.platform.os.cpu_count", lambda: cores)
    # the JOIN's two sides are estimated at ~1.2 MB: over 0.5 MB, under 0.5 MB x 4 ranks per core
    opts = PlannerOptions(**NO_BROADCAST, skew_min_bytes=0.5e6)
    with squall.connect(data=str(skewed), workers=8, planner_options=opts) as con:
        plan = con.explain(JOIN)
        assert con._planner_options_at(cores) is opts  # one rank per core: as given
    skew_aware = "; skew-aware: partitions=" in plan
    if cores == 2:
        assert (
            not skew_aware
            and "keeps plain hashing: ~1.18 MB < skew_min_bytes 0.50 MB x 4 ranks per core" in plan
        )
    else:
        assert skew_aware and "ranks per core" not in plan, plan
    forcing = dataclasses.replace(opts, skew_min_bytes=0.0)
    with squall.connect(data=str(skewed), workers=8, planner_options=forcing) as con:
        plan = con.explain(JOIN)
    assert "; skew-aware: partitions=" in plan and "ranks per core" not in plan, plan
