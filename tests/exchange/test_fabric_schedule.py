"""The fabric exchange's communication schedule (Neo-Join §III-C) across real processes on tcp and shm.

With ``schedule="open-shop"`` a sender writes to one receiver at a time and a receiver releases its next
sender only when the transfer before it completed, so no receiver ever hears from two senders at once.
Each rank logs its scheduled writes (posted, completed on ``time.monotonic``, one clock for every process
on this machine): the test checks that no two writes to one receiver overlap, and the data arrive whole.
"""

from __future__ import annotations

import itertools
import uuid

import numpy as np
import pyarrow as pa
import pytest

from squall.exchange.base import ExchangeSpec
from squall.exchange.fabric import FabricExchangeFactory

from .backends import BACKENDS, Backend
from .ranks import run_ranks

FABRIC = [b for b in BACKENDS if b.name.startswith("fabric")]


@pytest.fixture(params=FABRIC, ids=[b.name for b in FABRIC])
def fabric(request):
    b: Backend = request.param
    reason = b.skip()
    if reason:
        pytest.skip(reason)
    return b


def _rows(rank: int, receiver: int) -> int:
    # receiver 0 is hot; sender 3 is heavy: a matrix round-robin handles badly
    return (20_000 if receiver == 0 else 2_000) * (3 if rank == 3 else 1)


def _table(rank: int, receiver: int) -> pa.Table:
    n = _rows(rank, receiver)
    rng = np.random.default_rng(rank * 100 + receiver)
    return pa.table({"id": np.arange(n, dtype=np.int64) + rank * 10**7, "v": rng.random(n)})


def _exchange(exchange, rank, world, query_id, kind):
    receivers = (0,) if kind == "gather" else tuple(range(world))
    spec = ExchangeSpec(query_id, 7, tuple(range(world)), receivers, kind)
    exchange.send(spec, {r: _table(rank, r) for r in receivers})
    got = exchange.receive(spec) if rank in receivers else None
    entry = exchange.stats().per_exchange[0]
    ids = None if got is None else got.column("id").to_numpy()
    return ids, entry["schedule"], entry["schedule_phases"], exchange.transfer_log


def _run(fabric: Backend, world: int, kind: str, **options):
    factory = FabricExchangeFactory(
        provider=fabric.env["FI_PROVIDER"], timeout_s=30, env=fabric.env, **options
    )
    query_id = f"q{uuid.uuid4().hex[:12]}"
    config = factory.prepare(query_id, world)
    try:
        results, _ = run_ranks(_exchange, config, world, env=fabric.env, args=(query_id, kind))
    finally:
        factory.cleanup(config)
        factory.close()
    return results


def _no_overlap(intervals):
    intervals = sorted(intervals)
    for (_, end), (start, _) in itertools.pairwise(intervals):
        assert start >= end, "two writes in flight to one receiver at once"


@pytest.mark.parametrize("kind", ["hash", "gather"])
def test_open_shop_schedule_one_sender_per_receiver_at_a_time(fabric, kind):
    world = 4
    # a small quantum and no minimum: a few hundred kB make several phases
    results = _run(fabric, world, kind, schedule="open-shop", schedule_min_bytes=0, schedule_quantum=64 << 10)
    receivers = [0] if kind == "gather" else list(range(world))
    for r in receivers:
        ids = results[r][0]
        expected = np.concatenate([_table(s, r).column("id").to_numpy() for s in range(world)])
        assert np.array_equal(ids, expected), f"rank {r} received other data"
    notes = {results[r][1] for r in range(world)}
    assert len(notes) == 1 and next(iter(notes)).startswith("open-shop: "), notes
    phases = results[0][2]
    assert phases >= world - 1
    log = [(sender, *entry) for sender in range(world) for entry in results[sender][3]]
    for r in receivers:
        writes = [(posted, done) for _, _, _, receiver, posted, done in log if receiver == r]
        assert writes
        _no_overlap(writes)
    for s in range(world):
        _no_overlap([(posted, done) for sender, _, _, _, posted, done in log if sender == s])
        assert [p for sender, _, p, *_ in log if sender == s] == sorted(
            p for sender, _, p, *_ in log if sender == s
        )


def test_when_exchanges_are_not_scheduled(fabric):
    world = 3
    runs = {
        # the default on one machine: no network link to share
        "every rank on this machine": _run(fabric, world, "hash"),
        # asked for, but the busiest link carries less than schedule_min_bytes (4 MiB)
        "busiest link": _run(fabric, world, "hash", schedule="open-shop"),
        "option schedule=rotated": _run(fabric, world, "hash", schedule="rotated", schedule_min_bytes=0),
    }
    for why, results in runs.items():
        for r in range(world):
            ids, note, phases, log = results[r]
            assert note.startswith(f"rotated: {why}") and phases == 0 and log == [], note
            expected = np.concatenate([_table(s, r).column("id").to_numpy() for s in range(world)])
            assert np.array_equal(ids, expected)
