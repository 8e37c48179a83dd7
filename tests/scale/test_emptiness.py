"""Per-pair emptiness (issue 15): which (sender, receiver) pieces carry rows, so the model's data GETs are
the s3-v2 exchange's (it neither writes nor reads empty pieces); and the model's speed-ups (rank classes
above 512 workers, boards instead of per-sender events) leave small-W predictions where they were."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest

from squall.driver.forecast.scale import (
    EMULATOR_HERE,
    Calibration,
    PlatformConfig,
    StageSizes,
    estimate,
    estimate_workload,
    exchange_counts,
    from_plan,
    load_calibration,
)
from squall.driver.forecast.scale.emptiness import hash_pairs, hit_rate, output_rule
from squall.driver.forecast.scale.requests import ExchangeShape, PairWeights, grid_reads
from squall.driver.forecast.scale.workload import StageSize, scaled
from squall.plan import ExchangeInput, Output, Plan, Stage

from .test_model import make_plan

RUNS = Path(__file__).with_name("validation-runs.json")
#: the per-request model (before the boards, rank classes and emptiness, Nov 2026) on the validation's runs,
#: mean of seeds 1-3 (benchmarks/scale_validate.py's predict): (W, query) -> seconds, with the emulator
#: profile's fixed costs as they were then (before the quiet re-fit)
PER_REQUEST_PROFILE = EMULATOR_HERE.with_(
    worker_setup_cpu_s=0.5,
    driver_cpu_s=0.6,
    worker_setup_s=0.05,
    s3_request_cpu_s=0.015,
    driver_setup_s=0.05,
    cleanup_s=0.15,
)
#: … and the calibration's compute rates as they were then (rows/s per shape; re-measured 2026-11-27)
PER_REQUEST_RATES = {"aggregate": 3315719.1, "join": 5142329.4, "project": 4229024.3, "scan": 4229024.3,
                     "sort": 4229024.3}  # fmt: skip
PER_REQUEST_MODEL = {(4, 1): 52.53, (4, 3): 58.67, (4, 6): 85.64, (4, 12): 70.9, (8, 1): 80.7, (8, 3): 33.76,
                     (8, 6): 22.8, (8, 12): 27.62, (16, 3): 87.27, (16, 6): 60.49, (16, 12): 69.07}  # fmt: skip


def test_hit_rate_formula():
    """k keys hashed over W receivers reach W·(1 - (1 - 1/W)^k) of them on average."""
    assert (
        float(hit_rate(4, 8)) * 8 == pytest.approx(8 * (1 - (7 / 8) ** 4)) == pytest.approx(3.3105, abs=1e-4)
    )
    assert float(hit_rate(0, 8)) == 0.0 and float(hit_rate(1e6, 8)) == pytest.approx(1.0)
    assert float(hit_rate(1, 1)) == 1.0 and float(hit_rate(0, 1)) == 0.0
    # simulated hashing agrees with the formula
    rng = random.Random(7)
    w, k = 64, 20
    seen = [len({rng.randrange(w) for _ in range(k)}) for _ in range(4000)]
    assert sum(seen) / len(seen) == pytest.approx(w * float(hit_rate(k, w)), rel=0.02)


def test_output_rules():
    assert output_rule("SELECT SUM(x) AS s FROM t WHERE y > 1") == "every"  # a row even from no input
    assert output_rule("SELECT k, SUM(x) FROM t GROUP BY k") == "any"
    assert output_rule("SELECT * FROM a JOIN b ON a.k = b.k") == "all"
    assert output_rule("SELECT * FROM a LEFT JOIN b ON a.k = b.k") == "any"


def _brute(world: int, x: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-empty level-1 and level-2 ranges read per rank, from the exchange's own Grid."""
    s3 = pytest.importorskip("squall.exchange.s3")
    grid = s3.Grid(range(world))
    l1, l2 = np.zeros(world), np.zeros(world)
    for s in range(world):
        for f in grid.targets(s):
            if f != s and x[s] and any(m[q] for q in range(world) if grid.forwarder(s, q) == f):
                l1[f] += 1
    for f in range(world):
        for q in grid.served(f):
            if q != f and m[q] and any(x[s] and grid.forwarder(s, q) == f for s in grid.sources(f)):
                l2[q] += 1
    return l1, l2


@pytest.mark.parametrize("world", [5, 9, 16, 17, 30])
def test_pair_weights_match_the_exchange_grid(world):
    rng = np.random.default_rng(world)
    for _ in range(3):
        x = (rng.random(world) < 0.5).astype(float)
        m = (rng.random(world) < 0.6).astype(float)
        pw = PairWeights(x, m)
        l1, l2 = pw.two_level(range(world))
        b1, b2 = _brute(world, x, m)
        assert list(l1) == list(b1) and list(l2) == list(b2)
        one = pw.one_level(range(world), range(world))
        assert list(one) == [m[q] * (x.sum() - x[q]) for q in range(world)]
    full = PairWeights(np.ones(world), np.ones(world)).two_level(range(world))
    lvl1, lvl2, _p1, _p2 = grid_reads(world)
    assert list(full[0]) == list(lvl1) and list(full[1]) == list(lvl2)


def test_v2_formula_skips_empty_pairs():
    ranks = tuple(range(8))
    # senders 6 and 7 scanned nothing; receivers 2 and 5 get no key
    x = tuple(1.0 if r < 6 else 0.0 for r in ranks)
    m = tuple(0.0 if r in (2, 5) else 1.0 for r in ranks)
    c = exchange_counts(ExchangeShape("hash", ranks, ranks, 500.0, sender_hit=x, receiver_hit=m))
    assert (c.put, c.get_index, c.list_) == (8, 0, 8)  # every sender still PUTs, every reader LISTs
    assert c.get_data == sum(m[q] * (sum(x) - x[q]) for q in ranks) == 32
    gather = exchange_counts(ExchangeShape("gather", ranks, (0,), 100.0, sender_hit=x))
    assert (gather.put, gather.get_data) == (7, 5)


def test_few_groups_reach_few_receivers():
    """Q1's shape: every rank's partial aggregate holds the same 4 groups, hashed over W ranks: about
    W·(1 - (1 - 1/W)^4) receivers get rows, and every sender reaches those."""
    w = 64
    ranks = tuple(range(w))
    plan, _sizes = make_plan(4)
    agg = Stage(2, tuple(range(4)), (ExchangeInput("x1", 1),), "SELECT k, COUNT(*) AS n FROM x1 GROUP BY k",
                Output("hash", tuple(range(4)), tuple(range(4)), ("k",), "k"), (("k", "BIGINT"), ("n", "BIGINT")))  # fmt: skip
    fin = Stage(3, tuple(range(4)), (ExchangeInput("x2", 2),), "SELECT k, SUM(n) AS n FROM x2 GROUP BY k",
                Output("result"), (("k", "BIGINT"), ("n", "BIGINT")))  # fmt: skip
    plan = Plan("SELECT …", 4, (plan.stages[0], agg, fin), ("k", "n"))
    sizes = StageSizes({1: StageSize(4e5, 3.2e6), 2: StageSize(16.0, 256.0), 3: StageSize(4.0, 64.0)})
    work = scaled(plan, sizes, w, 1.0, {1: 1.0, 2: 0.0, 3: 0.0})
    st = work.stages[1]
    assert st.rows_out == pytest.approx(4 * w)  # 4 groups on each of the W ranks
    hit = float(hit_rate(4, w))
    assert st.receiver_hit[list(ranks)] == pytest.approx(np.full(w, hit))
    assert st.sender_hit[list(ranks)] == pytest.approx(np.ones(w))
    est = estimate_workload(work, PlatformConfig(workers=w, levels=1), Calibration())
    x = next(e for e in est.exchanges if e["stage"] == 2)
    assert x["formula"]["get_data"] == round(w * hit * (w - 1)) and x["get_data"] == x["formula"]["get_data"]
    assert x["get_data"] < w * (w - 1) / 10


def test_measured_receivers_fix_the_pairs():
    rows = np.array([10.0, 0.0, 5.0, 7.0])
    alive = (rows > 0).astype(float)
    x, m = hash_pairs(rows, alive, range(4), range(4), False, measured=(3, 0, 0, 19))
    assert list(m) == [1, 0, 0, 1] and list(x) == [1, 0, 1, 1]


def _validation_runs() -> list[dict]:
    return json.loads(RUNS.read_text())


def test_validation_runs_data_gets_exact():
    """The lambda-local runs of benchmarks/scale_validate.py (W = 4, 8, 16; Q1, Q3, Q6, Q12 at SF0.1 on moto):
    the model, given the plan and the measured stage sizes, predicts every exchange's PUT, index GET and
    data GET count exactly (19 exchanges; empty senders: lineitem's 6 and orders' 2 row groups)."""
    cal = load_calibration()
    n = 0
    for run in _validation_runs():
        from squall.plan import Plan as P

        plan = P.from_json(run["plan"])
        fanout = run["stats"].get("lambda", {}).get("fanout")
        cfg = PlatformConfig(workers=plan.world_size, fanout=fanout, memory_mb=1024, profile="emulator-here")
        est = estimate(plan, cfg, cal, sizes=StageSizes.from_stats(run["stats"]), profile_=EMULATOR_HERE)
        measured = {int(x["stage"]): x for x in run["stats"]["exchanges"]}
        for x in est.exchanges:
            m = measured[int(x["stage"])]
            assert (x["put"], x["get_index"], x["get_data"]) == (m["put"], m["get_index"], m["get_data"]), (
                run["workers"], run["query"], x["stage"])  # fmt: skip
            n += 1
    assert n == 19


def test_same_predictions_as_the_per_request_model():
    """Boards and rank classes change how the model runs, not what it predicts: with every pair counted as
    non-empty (what the model assumed before) the validation's runs get the per-request model's times."""
    cal = dataclasses.replace(load_calibration(), rates=PER_REQUEST_RATES, stage_overhead_s=0.004)
    for run in _validation_runs():
        from squall.plan import Plan as P

        plan = P.from_json(run["plan"])
        fanout = run["stats"].get("lambda", {}).get("fanout")
        cfg = PlatformConfig(workers=plan.world_size, fanout=fanout, memory_mb=1024, profile="emulator-here")
        prof = PER_REQUEST_PROFILE.with_(background_load=float(run.get("background_load", 0.0)))
        times = []
        for seed in (1, 2, 3):
            work = from_plan(plan, StageSizes.from_stats(run["stats"]))
            for st in work.stages:  # every pair non-empty, output spread by input (the old assumption)
                st.sender_hit, st.receiver_hit, st.out_rows = np.zeros(0), np.zeros(0), np.zeros(0)
            times.append(estimate_workload(work, cfg, cal, profile_=prof, seed=seed).time_s)
        old = PER_REQUEST_MODEL[run["workers"], run["query"]]
        assert sum(times) / 3 == pytest.approx(old, rel=0.03), (run["workers"], run["query"])


def test_rank_classes_match_every_rank():
    """Above ``max_ranks`` the model simulates one rank per class: the same request counts and invocations;
    the time within the model's own seed-to-seed spread (the gather's last polling round: ±1 s here)."""
    plan, sizes = make_plan(4)
    work = scaled(plan, sizes, 512, 100, {1: 1.0, 2: 0.0, 3: 0.0})
    cfg = PlatformConfig(workers=512)
    every = [estimate_workload(work, cfg, Calibration(), max_ranks=0, seed=s) for s in (1, 2)]
    classes = [estimate_workload(work, cfg, Calibration(), max_ranks=128, seed=s) for s in (1, 2)]
    assert any("standing for 4 ranks" in n for n in classes[0].notes)
    for a, b in zip(every[0].exchanges, classes[0].exchanges, strict=True):
        assert (
            (a["put"], a["get_data"])
            == (b["put"], b["get_data"])
            == (a["formula"]["put"], a["formula"]["get_data"])
        )
    assert classes[0].cost["invocations"] == every[0].cost["invocations"] == 512

    def mean(ests, f):
        return sum(f(e) for e in ests) / len(ests)

    assert mean(classes, lambda e: e.per_stage[0].end_s) == pytest.approx(
        mean(every, lambda e: e.per_stage[0].end_s), rel=0.05
    )
    assert mean(classes, lambda e: e.time_s) == pytest.approx(mean(every, lambda e: e.time_s), rel=0.10)
    assert mean(classes, lambda e: e.cost_usd) == pytest.approx(mean(every, lambda e: e.cost_usd), rel=0.10)
