"""The scale model's invariants (fast; no emulator, no S3): formulas, throttling, cold starts, cost, best W."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from squall.driver.cost import query_cost
from squall.driver.scale import (
    AWS,
    Calibration,
    PlatformConfig,
    best_workers,
    estimate,
    estimate_workload,
    exchange_counts,
)
from squall.driver.scale.model import tree_blocks, tree_children
from squall.driver.scale.requests import FORMULAS, ExchangeShape, closed_form, grid_reads, grid_width
from squall.driver.scale.workload import StageSize, StageSizes, scaled
from squall.plan import ExchangeInput, Output, Plan, ScanInput, Split, Stage

CAL = Calibration()


def make_plan(
    world: int, rows: int = 6_000_000, nbytes: int = 200_000_000, out_rows: int = 400_000
) -> tuple[Plan, StageSizes]:
    """scan+filter (hash by key) → aggregate (gather to rank 0) → result."""
    ranks = tuple(range(world))
    per = [(Split(f"lineitem/{r}.parquet", (0,), (), rows // world, nbytes // world, True),) for r in ranks]
    scan = ScanInput("li", "lineitem", "lineitem/", (("l_orderkey", "k"),), tuple(per))
    s1 = Stage(1, ranks, (scan,), "SELECT k FROM li WHERE k > 0", Output("hash", ranks, ranks, ("k",), "k"),
               (("k", "BIGINT"),))  # fmt: skip
    s2 = Stage(2, ranks, (ExchangeInput("x1", 1),), "SELECT k, COUNT(*) AS n FROM x1 GROUP BY k",
               Output("gather", ranks, (0,)), (("k", "BIGINT"), ("n", "BIGINT")))  # fmt: skip
    s3 = Stage(3, (0,), (ExchangeInput("x2", 2),), "SELECT k, SUM(n) AS n FROM x2 GROUP BY k ORDER BY k",
               Output("result"), (("k", "BIGINT"), ("n", "BIGINT")))  # fmt: skip
    plan = Plan("SELECT …", world, (s1, s2, s3), ("k", "n"))
    sizes = StageSizes({1: StageSize(out_rows, out_rows * 8.0), 2: StageSize(1000.0 * world, 16000.0 * world),
                        3: StageSize(1000.0, 16000.0)})  # fmt: skip
    return plan, sizes


def work_at(world: int, sf_factor: float = 1.0):
    plan, sizes = make_plan(4)
    return scaled(plan, sizes, world, sf_factor, {1: 1.0, 2: 0.0, 3: 0.0})


def test_more_workers_less_compute_per_worker():
    compute = []
    for w in (16, 64, 256):
        est = estimate_workload(work_at(w, 100), PlatformConfig(workers=w), CAL)
        compute.append(est.per_stage[0].compute_s)
        assert est.time_s > 0 and est.cost_usd > 0
    assert compute[0] > compute[1] > compute[2]


@pytest.mark.parametrize("world", [4, 9, 16, 64])
def test_simulated_requests_equal_the_formulas(world):
    plan, sizes = make_plan(world)
    est = estimate(plan, PlatformConfig(workers=world), CAL, sizes=sizes)
    for x in est.exchanges:
        f = x["formula"]
        assert (x["put"], x["get_index"], x["get_data"]) == (f["put"], f["get_index"], f["get_data"])
    hash_x = next(x for x in est.exchanges if x["stage"] == 1)
    if world < 16:  # one level: W PUTs, W(W-1) tail GETs
        assert hash_x["levels"] == 1
        assert (hash_x["put"], hash_x["get_index"]) == (world, world * (world - 1))
    else:  # two levels on a full g x g grid: 2W PUTs, 2W(g-1) tail GETs
        g = grid_width(world)
        assert hash_x["levels"] == 2 and g * g == world
        assert (hash_x["put"], hash_x["get_index"]) == (2 * world, 2 * world * (g - 1))
    gather = next(x for x in est.exchanges if x["stage"] == 2)
    assert (gather["put"], gather["get_index"]) == (world - 1, world - 1)  # rank 0 keeps its own piece


def test_two_level_forced_at_nine_matches_closed_form():
    shape = ExchangeShape("hash", tuple(range(9)), tuple(range(9)), 1500.0, levels=2)
    c = exchange_counts(shape, "s3-v1")
    assert c.levels == 2 and c.put == closed_form("hash", 9, 2)["put"] == 18
    assert c.get_index == 36 <= closed_form("hash", 9, 2)["get_index_max"]


def test_grid_mirrors_the_exchange():
    s3 = pytest.importorskip("squall.exchange.s3")
    for w in (2, 3, 5, 10, 17, 30, 64):
        grid = s3.Grid(range(w))
        lvl1, lvl2, _p1, _p2 = grid_reads(w)
        assert list(lvl1) == [len(set(grid.sources(f)) - {f}) for f in range(w)]
        assert list(lvl2) == [len(set(grid.forwarders(q)) - {q}) for q in range(w)]


def test_data_gets_when_pieces_leave_the_tail():
    small = exchange_counts(ExchangeShape("hash", (0, 1, 2, 3), (0, 1, 2, 3), 1000.0), "s3-v1")
    big = exchange_counts(ExchangeShape("hash", (0, 1, 2, 3), (0, 1, 2, 3), 40e6), "s3-v1")
    assert small.get_data == 0
    assert big.get_data == 12 * math.ceil(40e6 / (16 << 20))


def test_target_version_drops_index_gets():
    shape = ExchangeShape("hash", tuple(range(64)), tuple(range(64)), 1e6)
    now, target = FORMULAS["s3-v1"](shape), FORMULAS["target"](shape)
    assert target.get_index == 0 and target.get < now.get and target.put == now.put


def test_throttling_above_per_prefix_limits():
    work = work_at(256, 10)
    cfg = PlatformConfig(workers=256)
    free = estimate_workload(work, cfg, CAL, profile_=AWS.with_(s3_prefixes=1000))
    tight = estimate_workload(
        work, cfg, CAL, profile_=AWS.with_(s3_prefixes=1, s3_get_per_prefix=300, s3_put_per_prefix=100)
    )
    assert free.requests["retries"] == 0
    assert tight.requests["retries"] > 0 and tight.time_s > free.time_s


def test_cold_starts_cost_more():
    work = work_at(64, 10)
    cfg = PlatformConfig(workers=64)
    warm = estimate_workload(work, cfg, CAL, profile_=AWS.with_(warm_fraction=1.0))
    cold = estimate_workload(work, cfg, CAL, profile_=AWS.with_(warm_fraction=0.0, layer_mb=250))
    assert cold.time_s > warm.time_s and cold.cost_usd > warm.cost_usd and cold.startup_s > warm.startup_s


def test_cost_adds_up():
    est = estimate_workload(
        work_at(32, 10), PlatformConfig(workers=32, memory_mb=2048, architecture="x86_64"), CAL
    )
    parts = ("lambda_compute_usd", "lambda_requests_usd", "s3_put_usd", "s3_get_usd")
    assert est.cost_usd == pytest.approx(sum(est.cost[p] for p in parts))
    assert est.cost["invocations"] == 32
    assert est.cost["gb_seconds"] == pytest.approx(est.billed_s * 2048 / 1024, rel=1e-2)
    again = query_cost([(1000, 2048)], 1, {"put": 1, "get": 1}, architecture="x86_64")
    assert again["cost_usd"] > 0


def test_invocations_reach_every_rank():
    for w, f in ((16, 4), (1000, 32), (10, 2)):
        seen: list[int] = []
        stack = list(tree_blocks(w, f))
        while stack:
            lo, hi = stack.pop()
            seen.append(lo)
            stack.extend(tree_children(lo, hi, f))
        assert sorted(seen) == list(range(w))


def test_best_workers_rule():
    rows = [(16, 10.0, 0.10), (32, 6.0, 0.12), (64, 5.2, 0.15), (128, 5.0, 0.30)]
    assert best_workers(rows) == 64  # fastest 5.0; 5.2 within 10 %, cheaper than 128
    assert best_workers(rows, slack=0.0) == 128
    assert best_workers([(8, 1.0, 0.5), (4, 1.05, 0.5)]) == 4  # equal cost: the smaller W


def test_more_workers_same_sf_more_requests():
    a = estimate_workload(work_at(64, 10), PlatformConfig(workers=64), CAL)
    b = estimate_workload(work_at(256, 10), PlatformConfig(workers=256), CAL)
    assert b.requests["put"] > a.requests["put"] and b.requests["get_index"] > a.requests["get_index"]


def test_shipped_calibration_loads():
    from squall.driver.scale import load_calibration

    cal = load_calibration()
    assert set(cal.rates) >= {"scan", "aggregate", "join", "sort", "project"}
    assert replace(cal).compute_s("join", 1e6) > replace(cal).compute_s("join", 1e3)
    assert Calibration.from_dict(__import__("json").loads(cal.to_json())) == cal
