"""S3 exchange specifics against moto's S3 server over HTTP: request counts, idempotency,
clean-up, retries, timeouts and aborts. (The shared suite in tests/exchange runs it too.)

Ranks run as threads here, each with its own endpoint and boto3 client, so the
tests can reach into an endpoint (e.g. to inject faults into its client).

Counting convention (see the module doc of ``squall.exchange.s3``): a reader LISTs the
group prefix of its senders once per polling round (keys carry the range lengths) and
GETs each non-empty range once (*data GETs*; one per ``part_size`` slice); *index GETs*
only for objects whose key would be too long; abort checks are HEADs, at most one per
``abort_check_s``; a rank never GETs its own object and never PUTs an object
addressed only to itself.
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from squall.driver.forecast.scale.requests import ExchangeShape, exchange_counts
from squall.exchange.base import (
    ExchangeAborted,
    ExchangeError,
    ExchangeSpec,
    ExchangeTimeout,
    exchange_factory,
    open_exchange,
)
from squall.exchange.s3 import (
    Grid,
    S3Exchange,
    S3ExchangeFactory,
    build_object,
    choose_levels,
    decode_range,
    encode_range,
    encode_table,
    group_prefix,
    ipc_options,
    object_key,
    parse_index,
    parse_key,
)

from .s3server import moto_available, moto_s3

BUCKET = "squall-s3x-test"
REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))


@pytest.fixture(scope="module")
def s3():
    with moto_s3(BUCKET) as server:
        yield server


def _factory(s3, **options: Any) -> S3ExchangeFactory:
    options.setdefault("timeout_s", 20)
    factory = exchange_factory("s3", bucket_url=f"s3://{BUCKET}/t", endpoint_url=s3.endpoint_url, **options)
    assert isinstance(factory, S3ExchangeFactory)
    return factory


def _qid() -> str:
    return f"q{uuid.uuid4().hex[:10]}"


def _table(sender: int, receiver: int, n: int, noisy: bool = False) -> pa.Table:
    rng = np.random.default_rng(sender * 1000 + receiver)
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64) + sender * 1_000_000 + receiver * 10_000),
            "sender": pa.array(np.full(n, sender, dtype=np.int32)),
            "x": pa.array(rng.random(n) if noisy else np.zeros(n)),
        }
    )


def _run(
    config: dict, world: int, fn: Callable[..., Any], ranks: list[int] | None = None
) -> tuple[dict[int, Any], dict[int, dict]]:
    """Run ``fn(exchange, rank, world)`` on one thread per rank; results (or exceptions) and stats."""

    def one(rank: int) -> tuple[Any, dict]:
        exchange = open_exchange(config, rank, world)
        try:
            try:
                result = fn(exchange, rank, world)
            except Exception as exc:
                result = exc
            return result, exchange.stats().to_dict()
        finally:
            exchange.close()

    ranks = list(range(world)) if ranks is None else ranks
    with ThreadPoolExecutor(len(ranks)) as pool:
        done = dict(zip(ranks, pool.map(one, ranks), strict=True))
    return {r: v[0] for r, v in done.items()}, {r: v[1] for r, v in done.items()}


def _total(stats: dict[int, dict], xid: int, field: str) -> int:
    return sum(e[field] for st in stats.values() for e in st["per_exchange"] if e["exchange_id"] == xid)


def _all_to_all(rows: int, noisy: bool = False, xid: int = 1) -> Callable[..., Any]:
    def fn(exchange, rank, world):
        spec = ExchangeSpec(exchange.config["query_id"], xid, tuple(range(world)), tuple(range(world)))
        exchange.send(spec, {r: _table(rank, r, rows, noisy) for r in range(world)})
        return exchange.receive(spec)

    return fn


def _check_received(results: dict[int, Any], world: int, rows: int, noisy: bool = False) -> None:
    for r in range(world):
        assert not isinstance(results[r], BaseException), results[r]
        expected = pa.concat_tables([_table(s, r, rows, noisy) for s in range(world)])
        assert results[r].equals(expected)


# --- pure pieces -------------------------------------------------------------------------------


def test_object_format_roundtrip():
    opts = ipc_options("lz4")
    a, b = encode_table(_table(0, 2, 5), opts), encode_table(_table(1, 2, 3), opts)
    rng = encode_range([(1, b), (0, a), (2, pa.py_buffer(b""))])  # empty pieces are left out
    assert decode_range(pa.py_buffer(rng)) == [(1, b), (0, a)] and encode_range([]) == b""
    schema = encode_table(_table(0, 0, 0), opts).to_pybytes()
    body, index = build_object(schema, [(0, b""), (2, rng)])
    assert len(body) == len(schema) + len(rng) and index[2].offset == len(schema)
    body, index = build_object(schema, [(0, b""), (2, rng)], indexed=True)
    start, parsed = parse_index(body, "k")
    assert parsed == index and [p.to for p in parsed] == [-2, 0, 2] and start == len(schema) + len(rng)
    assert parse_index(body[-20:], "k") == 16 + 24 * 3  # tail too short: bytes needed from the end
    with pytest.raises(ExchangeError, match="corrupt exchange object k"):
        parse_index(body[:-1] + b"X", "k")


def test_keys_carry_the_lengths_and_groups_are_spread():
    groups = [group_prefix("p/q1", "q1", 3, 1, g) for g in range(64)]
    assert groups == [group_prefix("p/q1", "q1", 3, 1, g) for g in range(64)]
    assert all(k.startswith("p/q1/") and k.endswith(f"-x3-l1-g{g}/") for g, k in enumerate(groups))
    assert len({k.split("/")[2][:4] for k in groups}) > 50  # 4-hex-digit spread, nearly all distinct
    key = object_key(groups[0], 17, [300, 0, 36**2, 5])
    assert key == groups[0] + "s17_8c.0.100.5"
    assert parse_key(key, groups[0]) == (17, [300, 0, 36**2, 5])
    assert parse_key(object_key(groups[0], 3, None), groups[0]) == (3, None)
    assert parse_key(groups[0] + "junk", groups[0]) is None


@pytest.mark.parametrize("world", list(range(1, 41)))
def test_grid_routes_within_bounds(world):
    ranks = list(range(10, 10 + world))  # ranks need not start at 0
    grid = Grid(ranks)
    g = math.ceil(math.sqrt(world))
    assert grid.g == g
    for p in ranks:
        assert len({grid.forwarder(p, q) for q in ranks}) <= g
        assert grid.targets(p) == sorted({grid.forwarder(p, q) for q in ranks})
    for q in ranks:
        assert len(grid.forwarders(q)) <= g
        assert {grid.column(f) for f in grid.forwarders(q)} == {grid.column(q)}  # one LIST prefix
        for p in ranks:
            f = grid.forwarder(p, q)
            assert f in grid.forwarders(q) and p in grid.sources(f) and q in grid.served(f)
    for f in ranks:  # a forwarder's sources share one level-1 LIST prefix
        assert len({grid.row_group(s) for s in grid.sources(f)}) <= 1
    assert sum(len(grid.sources(f)) for f in ranks) <= world * g


def test_choose_levels():
    def spec(n: int, kind: str = "hash", receivers: int | None = None) -> ExchangeSpec:
        return ExchangeSpec("q", 1, tuple(range(n)), tuple(range(receivers or n)), kind)

    assert choose_levels(spec(16), "auto", 16) == 2
    assert choose_levels(spec(15), "auto", 16) == 1
    assert choose_levels(spec(64), 1, 16) == 1
    assert choose_levels(spec(4), 2, 16) == 2
    assert choose_levels(spec(64, "broadcast"), 2, 16) == 1
    assert choose_levels(spec(64, "hash", receivers=32), "auto", 16) == 1
    with pytest.raises(ExchangeError, match="levels must be"):
        choose_levels(spec(4), 3, 16)


# --- request counts ----------------------------------------------------------------------------


def _phased(rows: int, world: int, noisy: bool = False) -> Callable[..., Any]:
    """send by every rank → forward (two levels) → receive, with barriers between: nobody ever waits,
    so the polling is deterministic (one LIST round per reading rank and level)."""
    barriers = [threading.Barrier(world) for _ in range(2)]

    def fn(exchange, rank, world):
        spec = ExchangeSpec(exchange.config["query_id"], 1, tuple(range(world)), tuple(range(world)))
        exchange.send(spec, {r: _table(rank, r, rows, noisy) for r in range(world)})
        barriers[0].wait()
        exchange.forward(spec)
        barriers[1].wait()
        return exchange.receive(spec)

    return fn


def expected_counts(world: int, levels: int) -> dict[str, int]:
    """Requests of a hash exchange among ``world`` ranks where every pair has data and nobody waits."""
    if world == 1:
        return {"put": 0, "list": 0, "get_data": 0}
    if levels == 1:
        return {"put": world, "list": world, "get_data": world * (world - 1)}
    grid = Grid(range(world))
    ranks = range(world)
    put = sum(grid.targets(r) != [r] for r in ranks) + sum(grid.served(r) != [r] for r in ranks)
    reads1 = [len(set(grid.sources(r)) - {r}) for r in ranks]
    reads2 = [len(set(grid.forwarders(r)) - {r}) for r in ranks]
    lists = sum(n > 0 for n in reads1) + sum(n > 0 for n in reads2)
    return {"put": put, "list": lists, "get_data": sum(reads1) + sum(reads2)}


@pytest.mark.parametrize(
    ("world", "levels"),
    [(1, 1), (4, 1), (9, 1), (16, 1), (4, 2), (9, 2), (16, 2), (64, 2)],  # 64 at one level: tests/scale
)
def test_request_counts_at_the_formula(s3, world, levels):
    """Lambada's counts: one level W PUTs, W LISTs, W(W-1) GETs (one per remote pair, ≤ W²); two levels
    2W PUTs, 2W LISTs, 2W(g-1) GETs (≤ 2W⌈√W⌉); no index GETs, no misses, no HEADs."""
    factory = _factory(s3, levels=levels, threads=4, max_pool_connections=8)
    config = factory.prepare(_qid(), world)
    try:
        results, stats = _run(config, world, _phased(3, world))
    finally:
        factory.cleanup(config)
    _check_received(results, world, 3)
    got = {
        k: _total(stats, 1, k) for k in ("put", "list", "get_data", "get", "get_index", "get_miss", "head")
    }
    want = expected_counts(world, levels)
    assert {k: got[k] for k in want} == want
    shape = ExchangeShape("hash", tuple(range(world)), tuple(range(world)), 500.0, levels=levels)
    formula = exchange_counts(shape, "s3-v2")  # the scale model's table predicts them exactly
    assert (formula.put, formula.get_index, formula.get_data, formula.list_) == (
        got["put"], got["get_index"], got["get_data"], got["list"])  # fmt: skip
    assert got["get"] == got["get_data"] and got["get_index"] == got["get_miss"] == got["head"] == 0
    assert _total(stats, 1, "poll_rounds") == got["list"]  # one LIST per reading rank and level
    g = math.isqrt(world - 1) + 1 if world > 1 else 1
    if levels == 1:
        assert got["get"] <= world * world and got["put"] <= world
    else:
        assert got["get"] <= 2 * world * g and got["put"] <= 2 * world and got["list"] <= 2 * world
        if g * g == world:
            assert (got["put"], got["list"], got["get"]) == (2 * world, 2 * world, 2 * world * (g - 1))
    for st in stats.values():  # no abort HEAD between stages or rounds within abort_check_s
        assert st["requests"].get("head", 0) == 0
    assert sum(st["requests"].get("put", 0) for st in stats.values()) == got["put"]
    assert sum(st["requests"].get("list", 0) for st in stats.values()) == got["list"]


def _min_rounds_time(rounds: int, lo: float = 0.02, hi: float = 1.0) -> float:
    """The least time ``rounds`` polling rounds take (sleeps of ≥ half the backoff delay between them)."""
    return sum(0.5 * min(lo * 2**i, hi) for i in range(rounds - 1))


def test_polling_is_bounded_when_a_sender_is_late(s3):
    world = 4
    factory = _factory(s3, levels=1)
    config = factory.prepare(_qid(), world)
    exchanges: dict[int, Any] = {}

    def listed_once(rank: int) -> bool:
        per = exchanges[rank].stats().to_dict()["per_exchange"] if rank in exchanges else []
        return bool(per) and per[0]["list"] >= 1

    def fn(exchange, rank, world):
        exchanges[rank] = exchange
        if rank == world - 1:  # late: send only after every other rank has polled once and found it missing
            deadline = time.monotonic() + 60
            while not all(listed_once(r) for r in range(world - 1)) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)
        t0 = time.monotonic()
        got = _all_to_all(3)(exchange, rank, world)
        return got, time.monotonic() - t0

    try:
        results, stats = _run(config, world, fn)
    finally:
        factory.cleanup(config)
    for rank in range(world - 1):
        table, waited = results[rank]
        assert table.num_rows == 3 * world
        e = stats[rank]["per_exchange"][0]
        assert e["list"] == e["poll_rounds"] >= 2  # one LIST per round (one group prefix)
        assert _min_rounds_time(e["poll_rounds"]) <= waited  # rounds follow the exponential backoff
        assert e["head"] <= waited / 1.0 + 1  # abort checks: at most one per abort_check_s of waiting
        assert e["get_data"] == world - 1 and e["get_miss"] == 0


def test_keys_too_long_fall_back_to_a_tail_index(s3):
    world = 4
    factory = _factory(s3, levels=1, max_key_bytes=20)
    config = factory.prepare(_qid(), world)
    try:
        results, stats = _run(config, world, _phased(20, world))
    finally:
        factory.cleanup(config)
    _check_received(results, world, 20)
    pairs = world * (world - 1)
    assert _total(stats, 1, "get_index") == pairs and _total(stats, 1, "get_data") == 0  # ranges in the tail
    assert _total(stats, 1, "list") == world


@pytest.mark.parametrize("levels", [1, 2])
def test_large_ranges_cost_one_data_get_each(s3, levels):
    world = 4
    factory = _factory(s3, levels=levels)
    config = factory.prepare(_qid(), world)
    try:  # 20k random doubles: ~160 KB per piece
        results, stats = _run(config, world, _phased(20_000, world, noisy=True))
    finally:
        factory.cleanup(config)
    _check_received(results, world, 20_000, noisy=True)
    pairs = world * (world - 1) if levels == 1 else 2 * world * (2 - 1)
    assert _total(stats, 1, "get_data") == _total(stats, 1, "get") == pairs
    assert _total(stats, 1, "bytes_read") > pairs * 150_000


def test_big_ranges_are_split_into_parallel_parts(s3):
    world = 2
    factory = _factory(s3, levels=1, part_size=50_000)
    config = factory.prepare(_qid(), world)
    try:
        results, stats = _run(config, world, _all_to_all(20_000, noisy=True))
    finally:
        factory.cleanup(config)
    _check_received(results, world, 20_000, noisy=True)
    assert _total(stats, 1, "get_index") == 0
    assert _total(stats, 1, "get_data") >= 2 * 3  # each ≈160 KB range in ≥ 3 parts


def test_empty_pairs_cost_no_get(s3):
    world = 3
    factory = _factory(s3, levels=1)
    config = factory.prepare(_qid(), world)

    def fn(exchange, rank, world):  # only rank 0 has data, only for rank 2; rank 1 receives nothing
        spec = ExchangeSpec(exchange.config["query_id"], 1, tuple(range(world)), tuple(range(world)))
        exchange.send(spec, {r: _table(rank, r, 4 if (rank, r) == (0, 2) else 0) for r in range(world)})
        return exchange.receive(spec)

    try:
        results, stats = _run(config, world, fn)
    finally:
        factory.cleanup(config)
    assert results[2].equals(_table(0, 2, 4)) and results[1].num_rows == 0
    assert results[1].schema == _table(0, 0, 0).schema  # from its own send: no schema GET
    assert _total(stats, 1, "get") == _total(stats, 1, "get_data") == 1


def test_stats_shape(s3):
    factory = _factory(s3)
    config = factory.prepare(_qid(), 2)
    try:
        _results, stats = _run(config, 2, _all_to_all(3))
    finally:
        factory.cleanup(config)
    entry = stats[0]["per_exchange"][0]
    for name in ("exchange_id", "kind", "levels", "senders", "put", "get", "bytes_written", "bytes_read"):
        assert name in entry
    assert entry["levels"] == 1 and entry["senders"] == 2 and entry["kind"] == "hash"
    assert stats[0]["bytes_sent"] > 0 and stats[0]["requests"]["put"] == 1
    assert entry["bytes_written"] > 0 and entry["bytes_read"] > 0


# --- idempotency and clean-up ------------------------------------------------------------------


def test_duplicate_sender_same_bytes_is_a_412(s3):
    factory = _factory(s3)
    config = factory.prepare(_qid(), 2)
    spec = ExchangeSpec(config["query_id"], 5, (0, 1), (0, 1))
    first, duplicate, other = (open_exchange(config, r, 2) for r in (0, 0, 1))
    try:
        first.send(spec, {r: _table(0, r, 3) for r in (0, 1)})
        duplicate.send(spec, {r: _table(0, r, 3) for r in (0, 1)})  # a retried worker: same key, same bytes
        other.send(spec, {r: _table(1, r, 3) for r in (0, 1)})
        assert duplicate.stats().per_exchange[0]["put_dup"] == 1  # the 412 path
        got_dup, got_other = duplicate.receive(spec), other.receive(spec)
    finally:
        for ex in (first, duplicate, other):
            ex.close()
        factory.cleanup(config)
    assert got_dup.equals(pa.concat_tables([_table(0, 0, 3), _table(1, 0, 3)]))
    assert got_other.equals(pa.concat_tables([_table(0, 1, 3), _table(1, 1, 3)]))


def test_duplicate_sender_other_bytes_readers_take_one_copy(s3):
    factory = _factory(s3)
    config = factory.prepare(_qid(), 3)
    spec = ExchangeSpec(config["query_id"], 5, (0, 1, 2), (0, 1, 2))
    first, duplicate, *others = (open_exchange(config, r, 3) for r in (0, 0, 1, 2))
    try:
        first.send(spec, {r: _table(0, r, 3) for r in range(3)})
        duplicate.send(spec, {r: _table(0, r, 7) for r in range(3)})  # other output: a second key
        for ex in others:
            ex.send(spec, {r: _table(ex.rank, r, 3) for r in range(3)})
        got = [ex.receive(spec) for ex in others]
    finally:
        for ex in (first, duplicate, *others):
            ex.close()
        factory.cleanup(config)
    # every reader takes the smallest key of sender 0, i.e. the same copy, and only that one
    assert got[0].column("sender").to_pylist().count(0) == got[1].column("sender").to_pylist().count(0)
    assert got[0].column("sender").to_pylist().count(0) in (3, 7)


def _keys(s3, prefix: str) -> list[str]:
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_cleanup_deletes_everything(s3):
    factory = _factory(s3, levels=2)
    config = factory.prepare(_qid(), 4)
    _results, stats = _run(config, 4, _all_to_all(5))
    factory.abort(config, "test marker")
    prefix = config["prefix"] + "/"
    assert len(_keys(s3, prefix)) == 2 * 4 + 1  # level-1 and level-2 objects + ABORT
    client = s3.client(max_pool_connections=16)
    with ThreadPoolExecutor(16) as pool:  # more than one DeleteObjects batch of 1,000
        list(
            pool.map(
                lambda i: client.put_object(Bucket=BUCKET, Key=f"{prefix}junk/{i}", Body=b"x"), range(1000)
            )
        )
    factory.cleanup(config)
    assert _keys(s3, prefix) == []
    # two LIST pages of clean-up, and the LIST inside the exchange prefix that prepare() checks the bucket with
    assert factory.requests["delete"] == 2 and factory.requests["list"] == 2 + 1
    assert all("delete" not in st["requests"] for st in stats.values())  # workers only LIST their groups
    factory.cleanup(config)  # already clean
    factory.cleanup({**config, "bucket": "squall-no-such-bucket"})  # never raises


def test_prepare_checks_the_bucket(s3):
    factory = exchange_factory("s3", bucket_url="s3://squall-no-such-bucket/x", endpoint_url=s3.endpoint_url)
    with pytest.raises(ExchangeError, match="exchange bucket 'squall-no-such-bucket' does not exist"):
        factory.prepare("q1", 2)
    with pytest.raises(ExchangeError, match="s3://bucket/prefix"):
        exchange_factory("s3", bucket_url="bucket/x")
    with pytest.raises(ExchangeError, match="unknown S3 exchange option"):
        exchange_factory("s3", bucket_url="s3://b/x", colour="red")


# --- retries -----------------------------------------------------------------------------------


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_kwargs: Any):
        yield self.body


class _Faults:
    """A botocore before-send hook: the first ``n`` requests get an error response (or exception)."""

    def __init__(self, n: int, status: int = 503, code: str = "SlowDown", exc: Exception | None = None):
        self.left, self.status, self.code, self.exc = n, status, code, exc
        self.fired = 0
        self._lock = threading.Lock()

    def __call__(self, request: Any, **_kwargs: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        with self._lock:
            if self.left == 0:
                return None
            self.left -= 1
            self.fired += 1
        if self.exc is not None:
            raise self.exc
        body = f"<Error><Code>{self.code}</Code><Message>injected</Message></Error>".encode()
        return AWSResponse(request.url, self.status, {"Content-Type": "application/xml"}, _Raw(body))


def test_retries_on_503_500_and_connection_errors(s3):
    from botocore.exceptions import ConnectionClosedError

    factory = _factory(s3)
    config = factory.prepare(_qid(), 2)
    spec = ExchangeSpec(config["query_id"], 1, (0, 1), (0, 1))
    a, b = open_exchange(config, 0, 2), open_exchange(config, 1, 2)
    assert isinstance(a, S3Exchange)
    faults = [
        _Faults(2, 503, "SlowDown"),
        _Faults(1, 500, "InternalError"),
        _Faults(1, exc=ConnectionClosedError(endpoint_url=s3.endpoint_url)),
    ]
    a.client.meta.events.register("before-send.s3.PutObject", faults[0])
    a.client.meta.events.register("before-send.s3.GetObject", faults[1])
    b.client.meta.events.register("before-send.s3.PutObject", faults[2])
    try:
        b.send(spec, {r: _table(1, r, 4) for r in (0, 1)})
        a.send(spec, {r: _table(0, r, 4) for r in (0, 1)})
        got_a, got_b = a.receive(spec), b.receive(spec)
    finally:
        a.close()
        b.close()
        factory.cleanup(config)
    assert [f.fired for f in faults] == [2, 1, 1]
    assert got_a.equals(pa.concat_tables([_table(0, 0, 4), _table(1, 0, 4)]))
    assert got_b.num_rows == 8
    assert a.stats().requests["retries"] == 3 and a.stats().per_exchange[0]["put"] == 1
    assert b.stats().requests["retries"] == 1


def test_retries_give_up_with_a_clear_error(s3):
    factory = _factory(s3, max_retries=1)
    config = factory.prepare(_qid(), 2)
    ex = open_exchange(config, 0, 2)
    ex.client.meta.events.register("before-send.s3.PutObject", _Faults(-1, 503, "SlowDown"))
    try:
        with pytest.raises(
            ExchangeError, match=r"^S3 error SlowDown on s3://squall-s3x-test/t/q\w+/\w{4}-x1-l1-g0/s0_"
        ):
            ex.send(ExchangeSpec(config["query_id"], 1, (0, 1), (0, 1)), {0: _table(0, 0, 1)})
    finally:
        ex.close()
        factory.cleanup(config)
    assert ex.stats().requests["retries"] == 1


# --- waiting -----------------------------------------------------------------------------------


def test_two_level_timeout_names_the_missing_sender(s3):
    factory = _factory(s3, levels=2, timeout_s=1.5)
    config = factory.prepare(_qid(), 4)
    try:
        results, stats = _run(config, 4, _all_to_all(2), ranks=[0, 1, 2])  # rank 3 never shows up
    finally:
        factory.cleanup(config)
    for rank in (0, 1, 2):
        assert isinstance(results[rank], ExchangeTimeout), results[rank]
        assert "rank(s) 3 after" in str(results[rank])
    assert _total(stats, 1, "list") > 0 and _total(stats, 1, "get_miss") == 0


def test_abort_stops_waiting_receivers(s3):
    factory = _factory(s3, timeout_s=60)
    config = factory.prepare(_qid(), 2)
    timer = threading.Timer(0.5, factory.abort, args=(config, "cancelled by the test"))
    timer.start()
    try:
        results, _stats = _run(config, 2, _all_to_all(2), ranks=[0])
    finally:
        timer.join()
        factory.cleanup(config)
    # the event, not a duration: the receiver (waiting up to 60 s for rank 1, which never comes) stopped
    # because of the abort, with its reason, not by its timeout
    assert isinstance(results[0], ExchangeAborted) and str(results[0]) == "cancelled by the test"


def test_broadcast_and_gather(s3):
    factory = _factory(s3)
    config = factory.prepare(_qid(), 3)

    def fn(exchange, rank, world):
        q = exchange.config["query_id"]
        bcast = ExchangeSpec(q, 1, (1,), (0, 1, 2), "broadcast")
        if rank == 1:
            exchange.send(bcast, {r: _table(1, 9, 6) for r in range(3)})
        small = exchange.receive(bcast)
        gather = ExchangeSpec(q, 2, (0, 1, 2), (2,), "gather")
        exchange.send(gather, {2: _table(rank, 2, rank)})
        return small, exchange.receive(gather) if rank == 2 else None

    try:
        results, stats = _run(config, 3, fn)
    finally:
        factory.cleanup(config)
    for rank in range(3):
        assert results[rank][0].equals(_table(1, 9, 6))
    assert results[2][1].equals(pa.concat_tables([_table(s, 2, s) for s in range(3)]))
    assert _total(stats, 1, "put") == 1 and _total(stats, 1, "get_data") == 2  # one range all read
    assert _total(stats, 2, "put") == 2 and _total(stats, 2, "get_data") == 1  # rank 0 sent no rows: no GET


# --- benchmark smoke ---------------------------------------------------------------------------


def test_exchange_benchmark_smoke():
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "exchange.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "raw boto3" in out.stdout and "ratio" in out.stdout
    assert "2-level" in out.stdout
