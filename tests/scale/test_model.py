"""The scale model's invariants (fast; no emulator, no S3): formulas, throttling, cold starts, cost, best W."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from squall.driver.forecast.scale import (
    AWS,
    Calibration,
    PlatformConfig,
    best_workers,
    estimate,
    estimate_workload,
    exchange_counts,
)
from squall.driver.forecast.scale.model import tree_blocks, tree_children
from squall.driver.forecast.scale.requests import (
    CURRENT,
    FORMULAS,
    POLL_MAX_S,
    POLL_MIN_S,
    POLLING,
    ExchangeShape,
    closed_form,
    grid_reads,
    grid_width,
)
from squall.driver.forecast.scale.workload import StageSize, StageSizes, scaled
from squall.driver.platforms.prices import query_cost
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


def test_default_exchange_version_is_what_the_exchange_runs():
    s3 = pytest.importorskip("squall.exchange.s3")
    assert s3.MAGIC == b"SQXCHG02"  # object format version 2: lengths in the keys (exchange/s3.py)
    assert CURRENT == "s3-v2" and PlatformConfig(workers=4).exchange_version == CURRENT
    assert POLLING[CURRENT] == "list" and POLLING["s3-v1"] == "get"


def _rounds_bound(time_s: float) -> float:
    """Most polling rounds one reader can make in ``time_s``: backoff 20 ms … 1 s, sleeps ≥ half of it."""
    rounds, t, delay = 1, 0.0, POLL_MIN_S
    while t <= time_s:
        t += 0.5 * delay
        delay = min(2 * delay, POLL_MAX_S)
        rounds += 1
    return rounds


@pytest.mark.parametrize("world", [4, 9, 16, 64])
def test_simulated_requests_v1(world):
    """s3-v1: W PUTs and W(W-1) index GETs one level, 2W and 2W(g-1) two levels; polling by 404s + HEADs."""
    plan, sizes = make_plan(world)
    est = estimate(plan, PlatformConfig(workers=world, exchange_version="s3-v1"), CAL, sizes=sizes)
    for x in est.exchanges:
        f = x["formula"]
        assert (x["put"], x["get_index"], x["get_data"]) == (f["put"], f["get_index"], f["get_data"])
        assert x["list"] == 0
    hash_x = next(x for x in est.exchanges if x["stage"] == 1)
    if world < 16:
        assert hash_x["levels"] == 1
        assert (hash_x["put"], hash_x["get_index"]) == (world, world * (world - 1))
    else:
        g = grid_width(world)
        assert hash_x["levels"] == 2 and g * g == world
        assert (hash_x["put"], hash_x["get_index"]) == (2 * world, 2 * world * (g - 1))
    gather = next(x for x in est.exchanges if x["stage"] == 2)
    assert (gather["put"], gather["get_index"]) == (world - 1, world - 1)  # rank 0 keeps its own piece
    # v1 polls with a GET per pending sender (a 404 until it wrote) and a HEAD per round that waits
    assert est.requests["get_miss"] > 0 and sum(x["head"] for x in est.exchanges) > 0


@pytest.mark.parametrize("world", [4, 9, 16, 64])
def test_simulated_requests_v2(world):
    """s3-v2 (the default): one data GET per remote pair with data (one level W(W-1), two levels
    2W(g-1)), no index GETs, no misses; LISTs = the formula's one per reader and level, plus one per
    extra polling round; abort HEADs at most one per second of waiting."""
    plan, sizes = make_plan(world)
    est = estimate(plan, PlatformConfig(workers=world), CAL, sizes=sizes)
    assert est.requests.get("get_miss", 0) == 0 and est.requests.get("get_index", 0) == 0
    bound = _rounds_bound(est.time_s)
    for x in est.exchanges:
        f = x["formula"]
        assert (x["put"], x["get_index"], x["get_data"]) == (f["put"], 0, f["get_data"])
        assert x["get_miss"] == 0
        assert f["list"] <= x["list"] <= f["list"] * bound
        assert x["head"] <= world * (est.time_s + 1)
    hash_x = next(x for x in est.exchanges if x["stage"] == 1)
    if world < 16:
        assert hash_x["levels"] == 1
        assert hash_x["formula"] == {
            "put": world,
            "get_index": 0,
            "get_data": world * (world - 1),
            "list": world,
        }
    else:
        g = grid_width(world)
        assert hash_x["levels"] == 2 and g * g == world
        assert hash_x["formula"] == {"put": 2 * world, "get_index": 0, "get_data": 2 * world * (g - 1),
                                     "list": 2 * world}  # fmt: skip
    gather = next(x for x in est.exchanges if x["stage"] == 2)
    assert gather["formula"] == {"put": world - 1, "get_index": 0, "get_data": world - 1, "list": 1}
    # some receiver waits for a slower sender: its extra polling rounds are counted as LISTs
    assert sum(x["list"] for x in est.exchanges) > sum(x["formula"]["list"] for x in est.exchanges)


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


def test_v2_formula_one_get_per_pair_with_data():
    """s3-v2: no index GETs; one data GET per remote pair (⌈range / part⌉ for big ranges), none for empty
    pieces; one LIST per reader; two levels at W=9 (forced): 18 PUTs, 36 GETs, 18 LISTs."""
    ranks = (0, 1, 2, 3)
    small = exchange_counts(ExchangeShape("hash", ranks, ranks, 1000.0), "s3-v2")
    big = exchange_counts(ExchangeShape("hash", ranks, ranks, 40e6), "s3-v2")
    empty = exchange_counts(ExchangeShape("hash", ranks, ranks, 0.0), "s3-v2")
    assert (small.put, small.get_index, small.get_data, small.list_) == (4, 0, 12, 4)
    assert (big.get_index, big.get_data) == (0, 12 * math.ceil(40e6 / (16 << 20)))
    assert empty.get == 0
    nine = exchange_counts(ExchangeShape("hash", tuple(range(9)), tuple(range(9)), 1500.0, levels=2), "s3-v2")
    assert (nine.levels, nine.put, nine.get_index, nine.get_data, nine.list_) == (2, 18, 0, 36, 18)
    wide = tuple(range(130))  # one level forced over 130 senders: ⌈130/64⌉ = 3 LIST groups per reader
    counts = exchange_counts(ExchangeShape("gather", wide, (0,), 100.0, levels=1), "s3-v2")
    assert (counts.put, counts.get_data, counts.list_) == (129, 129, 3)


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
    assert b.requests["put"] > a.requests["put"] and b.requests["get_data"] > a.requests["get_data"]


def test_shipped_calibration_loads():
    from squall.driver.forecast.scale import load_calibration

    cal = load_calibration()
    assert set(cal.rates) >= {"scan", "aggregate", "join", "sort", "project"}
    assert replace(cal).compute_s("join", 1e6) > replace(cal).compute_s("join", 1e3)
    assert Calibration.from_dict(__import__("json").loads(cal.to_json())) == cal
