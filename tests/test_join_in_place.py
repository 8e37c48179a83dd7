"""Joins in place by key range (driver/planner/colocate.py): both sides' scans split by ranges of the join key.

Tables written in key order (small row groups, so that ranges fall inside row groups and the straddling
groups are read by two ranks) are joined every way against DuckDB at W = 2, 3, 4, through DuckDB's own
Parquet reader and through the Arrow read path; the plans must join without an exchange and say so.
Tables not in key order, NULL keys, a key range holding most rows, and the option off keep the hash plan.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall.driver.options import PlannerOptions
from squall.plan import Plan, ScanInput
from squall.testing import assert_same_result

ORDERS = 6_000
#: ``o`` (6,000 rows) would otherwise be read whole by every rank, which moves nothing either
SPREAD = PlannerOptions(replicated_scan_rows=0, join_in_place_every_kind=True)
#: (query, joins taken in place)
QUERIES = {
    "inner": (
        "SELECT o.grp, count(*) AS n, sum(l.v) AS s FROM l JOIN o ON l.k = o.k GROUP BY 1 ORDER BY 1",
        1,
    ),
    "rows": ("SELECT l.k, l.v, o.grp FROM l JOIN o ON l.k = o.k WHERE l.v % 53 = 0", 1),
    "left": (
        "SELECT o.grp, count(*) AS n, count(l.v) AS m FROM o LEFT JOIN l ON o.k = l.k AND l.v % 3 = 0 "
        "GROUP BY 1 ORDER BY 1",
        1,
    ),
    "right": ("SELECT o.k, o.grp, l.v FROM l RIGHT JOIN o ON l.k = o.k WHERE o.k % 97 = 0", 1),
    "full": (
        "SELECT count(*), count(l.k), count(o.k) FROM (SELECT * FROM l WHERE v % 5 = 0) l "
        "FULL JOIN (SELECT * FROM o WHERE grp < 3) o ON l.k = o.k",
        1,
    ),
    "semi": (
        "SELECT grp, count(*) FROM o WHERE EXISTS (SELECT 1 FROM l WHERE l.k = o.k AND l.v < 100) GROUP BY 1 ORDER BY 1",
        1,
    ),
    "anti": ("SELECT count(*) FROM o WHERE NOT EXISTS (SELECT 1 FROM l WHERE l.k = o.k AND l.v < 500)", 1),
    "residual": ("SELECT count(*), sum(l.v) FROM l JOIN o ON l.k = o.k AND l.v > o.grp * 100", 1),
    # a chain: the EXISTS and NOT EXISTS sides take the first join's ranges
    "chain": (
        "SELECT o.grp, count(*) FROM l l1 JOIN o ON l1.k = o.k "
        "WHERE EXISTS (SELECT 1 FROM l l2 WHERE l2.k = l1.k AND l2.v > 900) "
        "AND NOT EXISTS (SELECT 1 FROM l l3 WHERE l3.k = l1.k AND l3.v < 20) GROUP BY 1 ORDER BY 1",
        3,
    ),
    # an aggregate grouped by the key below the join (Q18's IN subquery, Q2's decorrelated minimum); its
    # 6,000 groups would go to rank 0 but for gather_groups=0
    "aggregate": (
        "SELECT o.grp, count(*), sum(t.s) FROM o JOIN (SELECT k, sum(v) AS s FROM l GROUP BY k) t ON o.k = t.k "
        "GROUP BY 1 ORDER BY 1",
        1,
    ),
}


def _write(folder: Path, *, shuffled: bool = False, nulls: bool = False, hot: bool = False) -> Path:
    """``o(k, grp)``: one row per key 1, 4, 7, … (gaps); ``l(k, v)``: 1-7 rows per order, in key order
    (``shuffled``: not), 97-row groups for ``l`` and 61-row groups for ``o`` so that ranges cut groups."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    okeys = np.arange(ORDERS, dtype=np.int64) * 3 + 1
    counts = rng.integers(1, 8, ORDERS)
    if hot:  # one order holds nearly half the line items: whichever rank's range holds it gets them
        counts[ORDERS // 2] = 20_000
    lkeys = np.repeat(okeys, counts)
    values = rng.integers(0, 1000, len(lkeys))
    if shuffled:
        order = rng.permutation(len(lkeys))
        lkeys, values = lkeys[order], values[order]
    lk = pa.array(lkeys, pa.int64())
    if nulls:
        lk = pa.array([None if i % 1000 == 5 else int(x) for i, x in enumerate(lkeys)], pa.int64())
    pq.write_table(
        pa.table({"k": lk, "v": pa.array(values, pa.int64())}), folder / "l.parquet", row_group_size=97
    )
    grp = pa.array(rng.integers(0, 8, ORDERS), pa.int32())
    pq.write_table(pa.table({"k": pa.array(okeys), "grp": grp}), folder / "o.parquet", row_group_size=61)
    return folder


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("in-place"))


@pytest.fixture(scope="module")
def reference(data: Path):
    con = duckdb.connect()
    for t in ("l", "o"):
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{data / t}.parquet')")
    yield con
    con.close()


def _in_place_notes(plan: Plan) -> list[str]:
    return [n for n in plan.notes if " in place, no exchange" in n]


def _hash_stages(plan: Plan) -> int:
    return sum(1 for s in plan.stages if s.output.kind == "hash")


@pytest.mark.parametrize("native", [True, False], ids=["duckdb-reader", "arrow-reader"])
@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_joins_in_place_match_duckdb(data, reference, name, workers, native):
    sql, joins = QUERIES[name]
    opts = {
        "aggregate": PlannerOptions(replicated_scan_rows=0, gather_groups=0, join_in_place_every_kind=True),
        # the subqueries' filtered sides would be broadcast (the first join's side holds o, which may move)
        "chain": PlannerOptions(replicated_scan_rows=0, broadcast_limit=0, join_in_place_every_kind=True),
    }.get(name, SPREAD)
    with squall.connect(
        data=data, workers=workers, planner_options=opts, storage_options={"native_scans": native}
    ) as con:
        plan = con.plan(sql)
        assert len(_in_place_notes(plan)) == joins, plan.notes
        hashed = [s.output.keys for s in plan.stages if s.output.kind == "hash"]
        assert hashed in ([], [('"grp"',)]), con.explain(sql)  # only the aggregate case's final GROUP BY grp
        assert Plan.from_json(plan.to_json()) == plan
        scans = [i for s in plan.stages for i in s.inputs if isinstance(i, ScanInput) and i.key_column]
        assert scans and all(len(s.key_bounds) == workers for s in scans)
        assert_same_result(con.sql(sql).arrow(), reference.sql(sql).to_arrow_table(), sql)


def test_ranges_cover_every_key_once(data):
    """Rank r's bounds start where rank r-1's end; straddling row groups are in both ranks' splits."""
    with squall.connect(data=data, workers=3, planner_options=SPREAD) as con:
        plan = con.plan(QUERIES["inner"][0])
    scans = [i for s in plan.stages for i in s.inputs if isinstance(i, ScanInput) and i.key_column]
    assert {s.table for s in scans} == {"l", "o"}
    for scan in scans:
        lows = [lo for lo, _hi in scan.key_bounds]
        highs = [hi for _lo, hi in scan.key_bounds]
        assert lows[0] is None and highs[-1] is None and lows[1:] == highs[:-1]
        groups = [{(sp.path, g) for sp in per for g in sp.row_groups} for per in scan.splits]
        assert sum(map(len, groups)) >= len(set().union(*groups))  # boundary groups twice, the rest once
        assert all(groups)
    with squall.connect(data=data, workers=3, planner_options=SPREAD) as con:
        assert "split by key range of k" in con.explain(QUERIES["inner"][0])


@pytest.mark.parametrize(
    ("kind", "why"),
    [("shuffled", None), ("nulls", None), ("hot", "not in place: the key ranges would give one rank")],
)
def test_tables_that_do_not_qualify_keep_the_hash_plan(tmp_path, kind, why):
    data = _write(tmp_path / kind, **{kind: True})
    sql = QUERIES["inner"][0]
    with squall.connect(data=data, workers=4, planner_options=SPREAD) as con:
        plan = con.plan(sql)
        assert not _in_place_notes(plan)
        if why:
            assert any(why in n for n in plan.notes), plan.notes
        ref = duckdb.connect()
        for t in ("l", "o"):
            ref.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{data / t}.parquet')")
        assert_same_result(con.sql(sql).arrow(), ref.sql(sql).to_arrow_table(), sql)


def test_option_off_keeps_the_row_count_splits(data, reference):
    sql = QUERIES["inner"][0]
    options = PlannerOptions(replicated_scan_rows=0, join_in_place=False)
    with squall.connect(data=data, workers=2, planner_options=options) as con:
        plan = con.plan(sql)
        assert not _in_place_notes(plan)
        assert not [i for s in plan.stages for i in s.inputs if isinstance(i, ScanInput) and i.key_column]
        assert_same_result(con.sql(sql).arrow(), reference.sql(sql).to_arrow_table(), sql)


@pytest.mark.parametrize("native", [True, False], ids=["duckdb-reader", "arrow-reader"])
def test_aggregate_by_a_key_that_row_groups_cut_in_two(data, reference, native):
    """``l``'s row groups cut orders in two, so no row-count split holds a range of its own; split by key
    range (the straddling groups read by both ranks, each keeping its side), the GROUP BY completes in
    place and every key comes out once."""
    sql = "SELECT k, sum(v) AS s, count(*) AS n FROM l GROUP BY k ORDER BY k"
    opts = PlannerOptions(gather_groups=0)
    with squall.connect(
        data=data, workers=3, planner_options=opts, storage_options={"native_scans": native}
    ) as con:
        plan = con.plan(sql)
        result = con.sql(sql).arrow()
    assert any("complete on every rank, no exchange: its scan split by key range" in n for n in plan.notes), (
        plan.notes
    )
    assert _hash_stages(plan) == 0
    assert result.num_rows == ORDERS
    assert_same_result(result, reference.sql(sql).to_arrow_table(), sql)


def test_by_default_semi_joins_only(data, reference):
    """Without ``join_in_place_every_kind`` an EXISTS joins in place and an inner join moves as before."""
    semi, inner = QUERIES["semi"][0], QUERIES["inner"][0]
    with squall.connect(data=data, workers=3, planner_options=PlannerOptions(replicated_scan_rows=0)) as con:
        assert len(_in_place_notes(con.plan(semi))) == 1
        assert not _in_place_notes(con.plan(inner))
        for sql in (semi, inner):
            assert_same_result(con.sql(sql).arrow(), reference.sql(sql).to_arrow_table(), sql)


def test_bounds_keep_rows_of_any_type():
    """The Arrow read path keeps a range's rows by slicing (S3 reads give ``string_view``, which Arrow cannot
    filter or take), and by Arrow's filter when the kept rows are scattered."""
    from squall.operators.scan import _keep, _within

    keys = pa.array(list(range(100)) + list(range(100)), pa.int64())
    table = pa.table({"k": keys, "s": pa.array([str(k) for k in keys.to_pylist()], pa.string_view())})
    kept = _keep(table, _within(table.column("k"), (40, 60)))
    assert kept.column("k").to_pylist() == list(range(40, 60)) * 2
    assert kept.column("s").to_pylist() == [str(k) for k in list(range(40, 60)) * 2]
    assert _keep(table, _within(table.column("k"), (None, 1000))).num_rows == 200
    assert _keep(table, _within(table.column("k"), (500, None))).num_rows == 0


#: TPC-DS Q95's shape: a semi join on the files' key whose right side is a self-join on that key (hashed on both
#: sides: inner joins are not taken in place by default), read twice, once more joined with a small table
SEMI_OVER_SELF_JOIN = (
    "WITH pairs AS (SELECT l1.k FROM l l1 JOIN l l2 ON l1.k = l2.k AND l1.v <> l2.v) "
    "SELECT count(*) AS n, sum(o.grp) AS g FROM o WHERE o.k < 600 "
    "AND o.k IN (SELECT k FROM pairs) AND o.k IN (SELECT p.k FROM pairs p JOIN o o2 ON p.k = o2.k WHERE o2.grp < 6)"
)


@pytest.mark.parametrize("workers", [2, 3])
def test_semi_join_over_a_hashed_self_join_is_not_expected_in_place(data, reference, workers):
    """The semi join's sides both reach ``l``'s scan on the key, but the self-join between hashes its sides: the
    semi join cannot be in place, so the prediction says so and the join filter rule plans the left side's keys
    (o.k < 600: a tenth of the orders) into every ``l`` scan of both subqueries, one round for both."""
    options = PlannerOptions(replicated_scan_rows=0, broadcast_limit=0, join_filter_round_bytes=0.0)
    with squall.connect(data=data, workers=workers, planner_options=options) as con:
        plan = con.plan(SEMI_OVER_SELF_JOIN)
        assert not _in_place_notes(plan), plan.notes
        cut = [n for n in plan.notes if n.startswith("key set on") and "scan of l" in n]
        assert len(cut) == 4, con.explain(SEMI_OVER_SELF_JOIN)  # both self-joins' two scans
        assert sum("(reused: its keys hold this join's)" in n for n in cut) == 2, plan.notes
        result = con.sql(SEMI_OVER_SELF_JOIN)
        assert_same_result(
            result.arrow(), reference.sql(SEMI_OVER_SELF_JOIN).to_arrow_table(), SEMI_OVER_SELF_JOIN
        )
        assert sum(f["rows_removed"] for f in result.stats["join_filters"]) > 0


#: the second semi join's left side holds only keys of ``o`` (every rank reads it whole: a key source), but all
#: of them (6,000): its own keys, sent in a round, cut the right side's ``l``
SEMI_AFTER_A_WEAK_KEY_SOURCE = (
    "SELECT count(*) AS n, sum(a.v) AS s FROM l a WHERE a.v < 5 "
    "AND a.k IN (SELECT p.k FROM l p JOIN o ON p.k = o.k) AND a.k IN (SELECT q.k FROM l q WHERE q.v > 500)"
)


def test_a_replicated_key_source_that_cuts_little_leaves_the_round_to_the_left_sides_keys(data, reference):
    options = PlannerOptions(replicated_scan_rows=6_000, join_in_place=False, join_filter_round_bytes=0.0)
    sql = SEMI_AFTER_A_WEAK_KEY_SOURCE
    with squall.connect(data=data, workers=2, planner_options=options) as con:
        notes = [n for n in con.plan(sql).notes if n.startswith("key set on")]
        assert len(notes) == 2 and "(reused: its keys hold this join's)" in notes[1], notes
        result = con.sql(sql)
        assert_same_result(result.arrow(), reference.sql(sql).to_arrow_table(), sql)
        assert all(f["rows_removed"] > 0 for f in result.stats["join_filters"])


def test_an_aggregate_reading_many_row_groups_twice_keeps_its_exchange(tmp_path):
    """A third of ``t``'s row groups hold one key from the other half of the key range: split by key range, both
    ranks would read them. A join in place saves both its sides' exchange and accepts that (up to
    ``colocate_max_overlap``); an aggregate saves only its partial groups' and keeps its exchange
    (``aggregate_in_place_max_overlap``)."""
    n, group = 6_000, 100
    keys = np.arange(n, dtype=np.int64)
    for g in range(0, n // group, 3):  # every third row group reaches across the middle
        keys[g * group] = (keys[g * group] + n // 2) % n
    pq.write_table(
        pa.table({"k": keys, "v": np.arange(n, dtype=np.int64) % 7}),
        tmp_path / "t.parquet",
        row_group_size=group,
    )
    sql = "SELECT k, sum(v) AS s, count(*) AS c FROM t GROUP BY k ORDER BY k"
    ref = duckdb.connect()
    ref.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{tmp_path / 't.parquet'}')")
    expected = ref.sql(sql).to_arrow_table()
    in_place = "complete on every rank, no exchange"
    for overlap, taken in ((0.1, False), (1.0, True)):
        opts = PlannerOptions(gather_groups=0, aggregate_in_place_max_overlap=overlap)
        with squall.connect(data=tmp_path, workers=2, planner_options=opts) as con:
            plan = con.plan(sql)
            assert any(in_place in note for note in plan.notes) is taken, plan.notes
            assert_same_result(con.sql(sql).arrow(), expected, sql)
