"""The S3 exchange's measured requests on moto's server against the scale model's s3-v2 formula, polling
included (issue 15: "request counts at W = 4, 9, 16 and 64 within the formulas, polling included").

A hash exchange among W ranks (threads, each with its own endpoint and boto3 client), every pair with
data, ``levels="auto"`` (one level below 16 ranks, two from 16) — and sender k starts k x 15 ms late,
so receivers really wait and poll. Asserted against :func:`squall.driver.forecast.scale.requests.exchange_counts`
(the table the simulator uses) and Lambada's bounds:

- PUT and data GET exactly the formula (one level W PUTs and W(W-1) GETs ≤ W²; two levels 2W PUTs and
  2W(g-1) GETs ≤ 2W⌈√W⌉); no index GETs, no 404 misses;
- LIST = the formula's one per reader and level plus one per extra polling round: every reader LISTs
  one group prefix per round at these W, so LIST = Σ poll_rounds ≥ the formula, and each reader's
  rounds fit the backoff (20 ms doubling to 1 s, sleeps ≥ half of it) over the time it waited;
- abort HEADs at most one per second a reader waited (``abort_check_s``).
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pytest

from squall.driver.forecast.scale.requests import POLL_MAX_S, POLL_MIN_S, ExchangeShape, exchange_counts
from squall.exchange.base import ExchangeSpec, exchange_factory, open_exchange

from ..s3server import moto_available, moto_s3

BUCKET = "squall-scale-requests"
LATE_S = 0.015  # sender k starts k x LATE_S late (the last one also after all the others sent)
pytestmark = pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))


@pytest.fixture(scope="module")
def s3():
    with moto_s3(BUCKET) as server:
        yield server


def max_rounds(waited_s: float, levels: int) -> int:
    """Most LIST rounds a reader can make while waiting ``waited_s`` (per level: one round at once, then
    one per backoff sleep, each ≥ half its delay)."""
    rounds, t, delay = 1, 0.0, POLL_MIN_S
    while t <= waited_s:
        t += 0.5 * delay
        delay = min(2 * delay, POLL_MAX_S)
        rounds += 1
    return levels * rounds


def run_exchange(
    s3: Any, world: int, rows: Any = None
) -> tuple[dict[int, pa.Table], dict[int, dict], dict[int, float]]:
    """``rows(sender, receiver)``: rows of that piece (default 2 for every pair)."""
    rows = rows or (lambda _s, _r: 2)

    factory = exchange_factory("s3", bucket_url=f"s3://{BUCKET}/x", endpoint_url=s3.endpoint_url,
                               timeout_s=300, threads=4, max_pool_connections=8)  # fmt: skip
    config = factory.prepare(f"q{uuid.uuid4().hex[:10]}", world)
    start = threading.Barrier(world)
    sent = threading.Semaphore(0)  # released once by each sender but the last

    def one(rank: int) -> tuple[pa.Table, dict, float]:
        exchange = open_exchange(config, rank, world)
        try:
            spec = ExchangeSpec(config["query_id"], 1, tuple(range(world)), tuple(range(world)))
            start.wait()
            if (
                rank == world - 1 and world > 1
            ):  # the last sender starts after every other sent: readers poll again
                for _ in range(world - 1):
                    sent.acquire()
            time.sleep(rank * LATE_S)
            pieces = {r: pa.table({"src": pa.array([rank] * rows(rank, r), pa.int64()),
                                   "dst": pa.array([r] * rows(rank, r), pa.int64())}) for r in range(world)}  # fmt: skip
            exchange.send(spec, pieces)
            if rank != world - 1:
                sent.release()
            t0 = time.monotonic()
            got = exchange.receive(spec)
            return got, exchange.stats().to_dict(), time.monotonic() - t0
        finally:
            exchange.close()

    try:
        with ThreadPoolExecutor(world) as pool:
            out = dict(zip(range(world), pool.map(one, range(world)), strict=True))
    finally:
        factory.cleanup(config)
    return (
        {r: v[0] for r, v in out.items()},
        {r: v[1] for r, v in out.items()},
        {r: v[2] for r, v in out.items()},
    )


@pytest.mark.parametrize("world", [4, 9, 16, 64])
def test_measured_requests_within_the_v2_formula_polling_included(s3, world):
    tables, stats, waited = run_exchange(s3, world)
    for r, table in tables.items():  # every row arrived once
        assert sorted(zip(table["src"].to_pylist(), table["dst"].to_pylist(), strict=True)) == sorted(
            (s, r) for s in range(world) for _ in range(2)
        )
    per_rank = {r: next(e for e in st["per_exchange"] if e["exchange_id"] == 1) for r, st in stats.items()}

    def total(field: str) -> int:
        return sum(e[field] for e in per_rank.values())

    levels = per_rank[0]["levels"]
    assert levels == (2 if world >= 16 else 1)
    formula = exchange_counts(ExchangeShape("hash", tuple(range(world)), tuple(range(world)), 500.0), "s3-v2")
    assert formula.levels == levels
    assert (total("put"), total("get_data"), total("get_index"), total("get_miss")) == (
        formula.put, formula.get_data, 0, 0)  # fmt: skip
    g = math.isqrt(world - 1) + 1
    if levels == 1:
        assert (total("put"), total("get")) == (world, world * (world - 1)) and total("get") <= world**2
    else:
        assert total("put") <= 2 * world and total("get") <= 2 * world * g
    # polling: one LIST per reader, level and round; the formula counts the first round of each
    assert total("list") == total("poll_rounds") >= formula.list_
    assert total("list") > formula.list_, "senders start late: some reader must have polled again"
    for r, e in per_rank.items():
        assert levels <= e["poll_rounds"] <= max_rounds(waited[r], levels), (r, e, waited[r])
        assert e["head"] <= waited[r] / 1.0 + 1


@pytest.mark.parametrize("world", [8, 16])
def test_empty_pairs_cost_no_data_get(s3, world):
    """The model's emptiness (issue 15): senders that scanned nothing (the last two) and receivers no key
    hashes to (2 and 5) — every sender still PUTs and every reader LISTs, but only pairs with rows cost a
    data GET: exactly :func:`exchange_counts` with ``sender_hit`` / ``receiver_hit`` (0/1, as measured)."""
    x = tuple(0.0 if s >= world - 2 else 1.0 for s in range(world))
    m = tuple(0.0 if q in (2, 5) else 1.0 for q in range(world))
    tables, stats, _waited = run_exchange(s3, world, lambda s, q: 2 * int(x[s] * m[q]))
    for r, table in tables.items():
        assert table.num_rows == 2 * int(m[r] * sum(x)), r
    per_rank = [next(e for e in st["per_exchange"] if e["exchange_id"] == 1) for st in stats.values()]
    shape = ExchangeShape(
        "hash", tuple(range(world)), tuple(range(world)), 500.0, sender_hit=x, receiver_hit=m
    )
    formula = exchange_counts(shape, "s3-v2")
    measured = tuple(sum(e[f] for e in per_rank) for f in ("put", "get_data", "get_index", "get_miss"))
    assert measured == (formula.put, formula.get_data, 0, 0)
    full = exchange_counts(ExchangeShape("hash", tuple(range(world)), tuple(range(world)), 500.0), "s3-v2")
    assert formula.get_data < full.get_data
