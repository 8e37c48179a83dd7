"""The memory a plan asks of each worker (issue 38): explain's expected peak per worker, and ``workers="auto"``
on Lambda choosing only a W at which no worker is planned past its budget."""

from __future__ import annotations

import numpy as np
import pytest

import squall
import squall.driver.forecast.scale.memory as memory
from squall.driver.forecast.predict import Estimator, plan_need
from squall.driver.forecast.scale import PlatformConfig
from squall.driver.forecast.scale.memory import HASH_FACTOR, PROCESS_BYTES, memory_need, stage_need
from squall.driver.forecast.scale.workload import StageWork, guess_sizes, scaled
from squall.tpch import query

MIB = float(1 << 20)


def _stage(shape: str, inputs: list[list[float]], received: list[float], rows_out: float = 0.0,
           bytes_out: float = 0.0) -> StageWork:  # fmt: skip
    world = len(received)
    zeros = np.zeros(world)
    return StageWork(1, shape, tuple(range(world)), zeros, zeros, zeros, np.array(received), rows_out,
                     bytes_out, "gather", tuple(range(world)), (0,), 3,
                     input_bytes=tuple(np.array(i) for i in inputs))  # fmt: skip


def test_a_join_holds_all_but_its_largest_input_in_hash_tables():
    st = _stage(
        "join", [[100 * MIB, 10 * MIB], [20 * MIB, 30 * MIB], [5 * MIB, 5 * MIB]], [125 * MIB, 45 * MIB]
    )
    need = stage_need(st)
    assert need.per_rank[0] == pytest.approx(PROCESS_BYTES + 125 * MIB + HASH_FACTOR * 25 * MIB)
    assert need.per_rank[1] == pytest.approx(PROCESS_BYTES + 45 * MIB + HASH_FACTOR * 15 * MIB)
    assert need.what == "join hash tables" and need.operator == pytest.approx(HASH_FACTOR * 25 * MIB)


def test_a_sort_holds_its_input_and_a_scan_streams():
    sort = stage_need(_stage("sort", [[40 * MIB]], [40 * MIB]))
    assert sort.per_rank[0] == pytest.approx(PROCESS_BYTES + 80 * MIB) and sort.what == "sort"
    scan = stage_need(_stage("scan", [[4000 * MIB]], [0.0]))
    assert scan.per_rank[0] == pytest.approx(PROCESS_BYTES + memory.STREAM_BYTES) and scan.what == "streaming"


def test_the_peak_is_the_largest_stage_per_rank_and_explain_says_where():
    small = _stage("sort", [[10 * MIB, 10 * MIB]], [10 * MIB, 10 * MIB])
    big = StageWork(2, "sort", (0, 1), np.zeros(2), np.zeros(2), np.zeros(2), np.array([900 * MIB, 100 * MIB]),
                    0, 0, "gather", (0, 1), (0,), 3, input_bytes=(np.array([900 * MIB, 100 * MIB]),))  # fmt: skip
    need = memory_need(type("W", (), {"world": 2, "stages": [small, big]})())
    assert need.rank == 0 and need.top.stage == 2
    assert need.per_rank[1] == pytest.approx(PROCESS_BYTES + 200 * MIB)
    line = need.line(512 * MIB)
    assert line.startswith("expected peak 1.9 GiB on rank 0 (stage 2: received 900 MiB, sort 900 MiB)"), line
    assert "mean 1.1 GiB per rank" in line  # skew is invisible in totals
    assert line.endswith(
        "over the budget of 512 MiB: about 1.4 GiB goes to disk (received inputs, DuckDB's spill)"
    )
    assert need.line(4 << 30).endswith("within the budget of 4 GiB") and need.line(None).endswith(
        "no budget set"
    )


def test_need_grows_with_the_data_and_shrinks_with_workers(sf001):
    with squall.connect(str(sf001), workers=2) as con:
        plan = con.plan(query(3))
    sizes = guess_sizes(plan)
    at = {(w, f): scaled(plan, sizes, w, f) for w in (1, 8) for f in (1.0, 100.0)}
    assert memory_need(at[(1, 100.0)]).peak - PROCESS_BYTES > 50 * (
        memory_need(at[(1, 1.0)]).peak - PROCESS_BYTES
    )

    def spread(work):  # the largest need of a stage that runs on every rank, less the process
        return (
            max(stage_need(st).per_rank.max() for st in work.stages if len(st.ranks) == work.world)
            - PROCESS_BYTES
        )

    assert spread(at[(8, 100.0)]) < spread(at[(1, 100.0)]) / 1.5  # each rank scans and joins its share


def test_explain_shows_the_expected_peak_against_the_budget(sf001):
    with squall.connect(str(sf001), workers=2, worker_memory="512MB") as con:
        text = con.explain(query(3))
    line = text.rstrip().splitlines()[-1]
    assert line.startswith("memory per worker: expected peak "), text
    assert line.endswith("within the budget of 488 MiB"), line
    assert plan_need(con.plan(query(3))).peak == pytest.approx(
        float(line.split("expected peak ")[1].split(" MiB")[0]) * MIB, rel=0.01
    )


def test_auto_workers_on_lambda_leaves_out_a_w_past_the_budget(sf001, monkeypatch):
    """Tables of a few MB, so the model's fixed costs (the process, streaming buffers) are set to 0 here and a
    function's memory of 65 MB leaves a budget of 1 MiB: Q17's plan asks more of a worker at W=1, less from W=2."""
    monkeypatch.setattr(memory, "PROCESS_BYTES", 0)
    monkeypatch.setattr(memory, "STREAM_BYTES", 0)
    with squall.connect(str(sf001), workers=2) as con:
        template = con.plan(query(17))
    sizes = guess_sizes(template)
    needs = {w: memory_need(scaled(template, sizes, w, 1.0)).peak for w in (1, 2, 4, 8)}
    assert needs[1] > MIB > needs[2] > needs[8], needs
    choice = Estimator("lambda", PlatformConfig(workers=1, memory_mb=65)).auto_workers(template, 8)
    assert (
        choice.workers > 1
        and "; W=1 left out: a worker would need more than its budget of 1 MiB (at W=1: " in choice.reason
    )
    unlimited = Estimator("lambda", PlatformConfig(workers=1, memory_mb=4096)).auto_workers(template, 8)
    assert "left out" not in unlimited.reason
    nothing_fits = Estimator("lambda", PlatformConfig(workers=1, memory_mb=64)).auto_workers(template, 8)
    assert "; no W up to 8 keeps a worker within its budget of 0 B" in nothing_fits.reason, (
        nothing_fits.reason
    )
    assert nothing_fits.reason.endswith(
        "a function of 1769 MB would fit it at W=8 (the memory is set when deployed)"
    )
