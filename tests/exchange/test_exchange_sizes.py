"""``Exchange.sizes`` (run-time join decisions) on every exchange implementation, from real processes.

Every rank of W spawned processes publishes the rows and bytes of its part of one exchange before any data
of it moves, at a different time; every rank gets every sender's numbers, the same on every rank. A
duplicated sender (a second endpoint of the same rank, as a retried worker opens) publishing other numbers
reads back the first ones. The exchange's data then moves as usual under the same id, and a rank that only
receives gets the senders' sizes too.
"""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pytest

from squall.exchange.base import ExchangeSpec, ExchangeTimeout, open_exchange

from .ranks import run_ranks


def _sizes_then_data(exchange, rank, world, query_id):
    spec = ExchangeSpec(query_id, 7, tuple(range(world - 1)), tuple(range(world)), "hash")
    time.sleep(0.15 * (world - 1 - rank))  # senders arrive one after another: the others wait
    got = exchange.sizes(spec, 10 * rank + 1, 1000 * rank + 3)
    if rank in spec.senders:
        parts = {r: pa.table({"sender": [rank] * (r + 1), "to": [r] * (r + 1)}) for r in spec.receivers}
        exchange.send(spec, parts)
    received = exchange.receive(spec)
    again = None
    if (
        rank == 1
    ):  # a duplicate of rank 1 with other numbers (last: a fabric endpoint takes the rank's address)
        duplicate = open_exchange(exchange.config, rank, world)
        try:
            again = duplicate.sizes(spec, 999, 999)
        finally:
            duplicate.close()
    return got, again, received.column("sender").to_pylist(), received.column("to").to_pylist()


def test_sizes_are_shared_before_data(backend):
    b, factory = backend
    world = 4
    query_id = f"q{uuid.uuid4().hex[:12]}"
    config = factory.prepare(query_id, world)
    config.update(b.extra or {})
    try:
        results, _stats = run_ranks(_sizes_then_data, config, world, env=b.env, args=(query_id,))
    finally:
        factory.cleanup(config)
    expected = {s: (10 * s + 1, 1000 * s + 3) for s in range(world - 1)}
    for rank, (got, _again, senders, to) in results.items():
        assert got == expected  # every rank, also the one that sends nothing (rank 3)
        assert to == [rank] * (len(to)) and senders == sorted(senders)  # data moves as usual afterwards
        assert len(senders) == (world - 1) * (rank + 1)
    assert results[1][1] == expected


def _missing_sender(exchange, rank, world, query_id):
    spec = ExchangeSpec(query_id, 3, (0, 1), (0, 1), "hash")
    try:
        exchange.sizes(spec, 1, 1) if rank == 0 else None
    except ExchangeTimeout as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("world", [2])
def test_sizes_wait_names_the_missing_sender(backend, world):
    b, factory = backend
    query_id = f"q{uuid.uuid4().hex[:12]}"
    config = factory.prepare(query_id, world)
    config.update(b.extra or {})
    config["timeout_s"] = 1.0
    try:
        results, _ = run_ranks(_missing_sender, config, world, env=b.env, args=(query_id,))
    finally:
        factory.cleanup(config)
    assert results[0] is not None and "rank(s) 1 " in results[0]
