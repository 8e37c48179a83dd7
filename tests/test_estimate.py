"""The planner's row estimates: range bounds on one column combine, key joins keep a filtered side's share."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from sqlglot import exp, parse_one

from squall.driver.catalog.snapshot import from_snapshot
from squall.driver.compile import translate_sql
from squall.driver.estimate.rows import estimate_rows
from squall.driver.estimate.selectivity import conjunction_selectivity, selectivity
from squall.driver.ir import nodes as L
from squall.operators.duck import Sandbox

FIXTURES = Path(__file__).parent / "fixtures" / "planner"

RANGES = {"d": (dt.date(1992, 1, 1), dt.date(1998, 8, 2)), "x": (0, 100)}


def _sel(sql: str) -> float:
    return conjunction_selectivity([parse_one(sql)], RANGES.get)


def test_two_bounds_on_one_column_are_one_interval() -> None:
    quarter = "d >= CAST('1993-07-01' AS DATE) AND d < CAST('1993-10-01' AS DATE)"
    assert _sel(quarter) == pytest.approx(92 / 2405, rel=1e-3)  # not P(after July) x P(before October)
    assert selectivity(parse_one(quarter), RANGES.get) == pytest.approx(92 / 2405, rel=1e-3)
    assert _sel("x > 10 AND x < 20") == pytest.approx(0.1)
    assert _sel("x BETWEEN 10 AND 30 AND x > 20") == pytest.approx(0.1)  # the tighter bounds win


def test_other_conjuncts_multiply_and_empty_ranges_keep_a_floor() -> None:
    assert _sel("x > 10 AND x < 20 AND y = 3") == pytest.approx(0.1 * 0.05)
    assert _sel("x > 50 AND x < 20") == pytest.approx(0.001)
    assert _sel("z > 4") == pytest.approx(0.3)  # no min/max known: the default
    assert _sel("x = 4") == pytest.approx(0.05)


NDVS = {"flag": 3.0, "mode": 7.0, "x": 101.0}


def test_equality_is_one_distinct_value_of_the_column() -> None:
    assert conjunction_selectivity([parse_one("flag = 'R'")], RANGES.get, NDVS.get) == pytest.approx(1 / 3)
    assert selectivity(parse_one("'R' = flag"), RANGES.get, NDVS.get) == pytest.approx(1 / 3)
    # IN: one NDV-th per distinct listed value, at most every row
    assert selectivity(parse_one("mode IN ('MAIL', 'SHIP')"), RANGES.get, NDVS.get) == pytest.approx(2 / 7)
    assert selectivity(parse_one("mode IN ('MAIL', 'MAIL')"), RANGES.get, NDVS.get) == pytest.approx(1 / 7)
    assert selectivity(parse_one("flag IN ('A', 'N', 'R', 'X')"), RANGES.get, NDVS.get) == 1.0
    got = conjunction_selectivity([parse_one("flag = 'R' AND x > 10 AND x < 20")], RANGES.get, NDVS.get)
    assert got == pytest.approx(0.1 / 3)
    assert selectivity(parse_one("NOT flag = 'R'"), RANGES.get, NDVS.get) == pytest.approx(2 / 3)


def test_equality_without_a_known_ndv_keeps_the_flat_default() -> None:
    assert _sel("y = 3") == pytest.approx(0.05)  # no NDV source at all
    assert selectivity(parse_one("y = 3"), RANGES.get, NDVS.get) == pytest.approx(0.05)  # column unknown
    assert selectivity(parse_one("y IN (1, 2, 3)"), RANGES.get, NDVS.get) == pytest.approx(0.15)
    # an expression is no column: its NDV is not asked
    asked: list[str] = []
    ndv = lambda name: asked.append(name) or 3.0  # noqa: E731
    assert selectivity(parse_one("UPPER(flag) = 'R'"), RANGES.get, ndv) == pytest.approx(0.1)
    assert asked == []


def test_separate_predicates_combine_like_one_conjunction() -> None:
    preds = [parse_one("x >= 10"), parse_one("x < 30"), exp.column("flag").is_(exp.null())]
    assert conjunction_selectivity(preds, RANGES.get) == pytest.approx(0.2 * 0.1)


def test_bounds_of_mixed_types_fall_back_to_one_estimate_each() -> None:
    got = _sel("d >= CAST('1993-07-01' AS DATE) AND d < 5")
    assert 0.0 < got <= 1.0


# --- join estimates over the planner fixtures' SF1 catalog snapshot (no Parquet opened) ---------------------------


def _translated(sql: str) -> L.Node:
    catalog = from_snapshot(json.loads((FIXTURES / "catalog.json").read_text()))
    db = Sandbox(threads=1)
    try:
        return translate_sql(catalog, sql, db)[0].node
    finally:
        db.close()


def _top_join(node: L.Node) -> L.Join:
    while not isinstance(node, L.Join):
        node = node.children[0]
    return node


def test_a_filtered_dimension_keeps_its_share_of_the_fact_rows() -> None:
    join = _top_join(
        _translated(
            "SELECT o_orderkey FROM orders JOIN customer ON o_custkey = c_custkey JOIN nation "
            "ON c_nationkey = n_nationkey WHERE n_name = 'FRANCE'"
        )
    )
    # nation keeps one of its 25 rows (n_name's NDV is 25): so do customer and orders
    assert estimate_rows(join) == pytest.approx(1_500_000 / 25, rel=0.05)


def test_a_composite_key_has_at_most_one_value_per_row() -> None:
    join = _top_join(
        _translated(
            "SELECT l_quantity FROM lineitem JOIN partsupp ON l_partkey = ps_partkey AND l_suppkey = ps_suppkey"
        )
    )
    # (partkey, suppkey) is partsupp's key: every lineitem row meets one partsupp row, not 6M x 800k / 2e9
    assert estimate_rows(join) == pytest.approx(6_001_215, rel=0.01)


@pytest.mark.parametrize(
    "values",
    [
        [1, 2, 2, None, 3, None],
        ["a", "b", "a", None],
        [f"v{i % 977}" for i in range(20_000)],
        list(range(5_000)),
        [None, None],
        [],
    ],
    ids=["ints-with-nulls", "strings-with-null", "many-strings", "all-distinct", "only-nulls", "empty"],
)
def test_the_ndv_samples_distinct_count_is_arrows_count_distinct(values) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    from squall.driver.catalog.tables import _distinct_count

    kind = pa.array(values).type
    kind = pa.int64() if pa.types.is_null(kind) else kind  # (count_distinct has no kernel for the null type)
    data = pa.chunked_array([values[: len(values) // 2], values[len(values) // 2 :]], type=kind)
    assert _distinct_count(data) == pc.count_distinct(data).as_py()
