"""The claim protocol (work stealing) on every exchange implementation, from real processes.

Every rank of W spawned processes claims the same items concurrently (each in its own order):
exactly one rank wins each item; the winner (and a duplicate endpoint of the same rank, as a
retried worker opens) gets True again, everybody else False; ``claims`` lists the same owners
on every rank.
"""

from __future__ import annotations

import uuid

from squall.exchange.base import ExchangeError, open_exchange

from .ranks import run_ranks

ITEMS = [f"s1_lineitem.{owner}.{i}" for owner in range(3) for i in range(10)]


def _claim_all(exchange, rank, world, query_id):
    order = ITEMS[rank * 7 :] + ITEMS[: rank * 7]  # every rank starts elsewhere: real contention
    won = [item for item in order if exchange.claim(query_id, item)]
    again = [item for item in ITEMS if exchange.claim(query_id, item)]  # idempotent for the owner
    duplicate = open_exchange(exchange.config, rank, world)  # a retried/duplicated worker of this rank
    try:
        dup = [item for item in ITEMS if duplicate.claim(query_id, item)]
    finally:
        duplicate.close()
    listed = exchange.claims(query_id, "s1_lineitem.")
    other = exchange.claims(query_id, "s2_orders.")
    return sorted(won), sorted(again), sorted(dup), listed, other


def test_concurrent_claims_exactly_one_winner(backend):
    b, factory = backend
    query_id = f"q{uuid.uuid4().hex[:12]}"
    config = factory.prepare(query_id, 3)
    config.update(b.extra or {})
    try:
        results, stats = run_ranks(_claim_all, config, 3, env=b.env, args=(query_id,))
    finally:
        factory.cleanup(config)
    won = {rank: set(r[0]) for rank, r in results.items()}
    assert sum(len(w) for w in won.values()) == len(ITEMS)  # nobody won an item twice …
    assert set().union(*won.values()) == set(ITEMS)  # … and every item has a winner
    owners = {item: rank for rank, items in won.items() for item in items}
    for rank, (_won, again, dup, listed, other) in results.items():
        assert set(again) == won[rank]  # the owner gets True again, the others False
        assert set(dup) == won[rank]
        assert listed == owners  # every rank lists the same owners
        assert other == {}  # the prefix selects
    assert sum(s["claims"].get("won", 0) for s in stats.values()) == len(ITEMS)
    assert sum(s["claims"].get("claim", 0) for s in stats.values()) == 3 * len(ITEMS) * 2
    if b.name.startswith("s3"):  # one conditional PUT per claim (the duplicate endpoint's are its own)
        assert sum(s["requests"].get("put", 0) for s in stats.values()) == 3 * len(ITEMS) * 2


def _bad_item(exchange, rank, world, query_id):
    try:
        exchange.claim(query_id, "s1/../x")
    except ExchangeError as exc:
        return str(exc)
    return None


def test_bad_item_id_is_refused(backend):
    b, factory = backend
    query_id = f"q{uuid.uuid4().hex[:12]}"
    config = factory.prepare(query_id, 1)
    config.update(b.extra or {})
    try:
        results, _ = run_ranks(_bad_item, config, 1, env=b.env, args=(query_id,))
    finally:
        factory.cleanup(config)
    assert results[0] == "bad claim item id 's1/../x'"
