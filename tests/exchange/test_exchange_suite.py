"""The one exchange suite every implementation passes (local, s3 on moto, fabric on tcp/shm).

Each test runs W real processes, each opening its own endpoint from the
driver-side config, exactly as workers do.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from squall.exchange.base import ExchangeSpec

from .ranks import run_ranks


def _prepare(backend, world):
    b, factory = backend
    query_id = f"q{uuid.uuid4().hex[:12]}"
    config = factory.prepare(query_id, world)
    config.update(b.extra or {})
    return b, factory, config, query_id


def _table(rank: int, receiver: int, n: int) -> pa.Table:
    ids = np.arange(n, dtype=np.int64) + rank * 1_000_000 + receiver * 10_000
    return pa.table(
        {
            "id": ids,
            "sender": pa.array(np.full(n, rank, dtype=np.int32)),
            "name": pa.array([f"r{rank}-{receiver}-{i}" for i in range(n)], pa.string()),
            "price": pa.array([i / 4 for i in range(n)], pa.float64()),
        }
    )


# --- per-rank programs (module level: pickled into spawned processes) -------------------------


def _all_to_all(exchange, rank, world, sizes, query_id):
    spec = ExchangeSpec(query_id, 1, tuple(range(world)), tuple(range(world)), "hash")
    parts = {r: _table(rank, r, sizes(rank, r)) for r in range(world)}
    exchange.send(spec, parts)
    got = exchange.receive(spec)
    return got.to_pydict(), str(got.schema)


def _uniform(rank, r):
    return 100


def _skewed(rank, r):
    return 20_000 if r == 0 else 3


def _empty(rank, r):
    return 0


def _rank_without_data(rank, r):
    return 0 if rank == 1 else 50


def _large(rank, r):
    return 300_000


def _check_all_to_all(backend, world, sizes):
    b, factory, config, query_id = _prepare(backend, world)
    try:
        results, stats = run_ranks(_all_to_all, config, world, env=b.env, args=(sizes, query_id))
    finally:
        factory.cleanup(config)
    for receiver in range(world):
        data, schema = results[receiver]
        assert "id: int64" in schema and "name: string" in schema
        expected = pa.concat_tables([_table(s, receiver, sizes(s, receiver)) for s in range(world)])
        assert data == expected.to_pydict()
    sent = sum(s["bytes_sent"] for s in stats.values())
    assert sent > 0 or all(sizes(s, r) == 0 for s in range(world) for r in range(world))
    return stats


@pytest.mark.parametrize("world", [1, 2, 4])
def test_all_to_all_uniform(backend, world):
    _check_all_to_all(backend, world, _uniform)


def test_empty_partitions_keep_schema(backend):
    _check_all_to_all(backend, 3, _empty)


def test_skewed_partitions(backend):
    _check_all_to_all(backend, 3, _skewed)


def test_rank_with_no_data(backend):
    _check_all_to_all(backend, 3, _rank_without_data)


def test_large_partitions(backend):
    _check_all_to_all(backend, 2, _large)


def _many_small(exchange, rank, world, query_id):
    out = []
    for xid in range(1, 21):
        spec = ExchangeSpec(query_id, xid, tuple(range(world)), tuple(range(world)), "hash")
        exchange.send(spec, {r: _table(rank, r + xid, 2) for r in range(world)})
        out.append(exchange.receive(spec).num_rows)
    return out


def test_many_small_exchanges(backend):
    b, factory, config, query_id = _prepare(backend, 3)
    try:
        results, _ = run_ranks(_many_small, config, 3, env=b.env, args=(query_id,))
    finally:
        factory.cleanup(config)
    assert all(v == [6] * 20 for v in results.values())


def _broadcast_gather(exchange, rank, world, query_id):
    everyone = tuple(range(world))
    bcast = ExchangeSpec(query_id, 7, (0,), everyone, "broadcast")
    if rank == 0:
        exchange.send(bcast, {r: _table(0, 99, 10) for r in everyone})
    small = exchange.receive(bcast)
    gather = ExchangeSpec(query_id, 8, everyone, (0,), "gather")
    exchange.send(gather, {0: _table(rank, 0, rank + 1)})
    gathered = exchange.receive(gather).num_rows if rank == 0 else None
    return small.column("id").to_pylist(), gathered


def test_broadcast_and_gather(backend):
    world = 3
    b, factory, config, query_id = _prepare(backend, world)
    try:
        results, _ = run_ranks(_broadcast_gather, config, world, env=b.env, args=(query_id,))
    finally:
        factory.cleanup(config)
    expected_ids = _table(0, 99, 10).column("id").to_pylist()
    for rank in range(world):
        ids, gathered = results[rank]
        assert ids == expected_ids
        assert gathered == (sum(r + 1 for r in range(world)) if rank == 0 else None)


def _duplicate_sender(exchange, rank, world, query_id):
    spec = ExchangeSpec(query_id, 3, tuple(range(world)), tuple(range(world)), "hash")
    parts = {r: _table(rank, r, 5) for r in range(world)}
    exchange.send(spec, parts)
    if rank == 1:
        exchange.send(spec, parts)  # a retried worker sends the same data again
    return exchange.receive(spec).num_rows


def test_duplicate_send_is_harmless(backend):
    b, factory, config, query_id = _prepare(backend, 2)
    try:
        results, _ = run_ranks(_duplicate_sender, config, 2, env=b.env, args=(query_id,))
    finally:
        factory.cleanup(config)
    assert results == {0: 10, 1: 10}


def _missing_sender(exchange, rank, world, query_id):
    spec = ExchangeSpec(query_id, 4, (0, 1, 2), (0,), "gather")
    exchange.send(spec, {0: _table(0, 0, 1)})
    return exchange.receive(spec).num_rows  # ranks 1 and 2 never send


def test_missing_sender_times_out_naming_ranks(backend):
    b, factory, config, query_id = _prepare(backend, 1)
    config["timeout_s"] = 1.5
    try:
        with pytest.raises(AssertionError, match=r"ExchangeTimeout: .*rank\(s\) 1, 2"):
            run_ranks(_missing_sender, config, 1, env=b.env, args=(query_id,))
    finally:
        factory.cleanup(config)


# --- streamed send, received within a memory limit (squall.operators.received) -----------------


def _streamed(exchange, rank, world, query_id, folder, limit):
    from squall.operators.received import receive_within

    everyone = tuple(range(world))
    spec = ExchangeSpec(query_id, 5, everyone, everyone, "hash")
    pieces = [{r: _table(rank, r * 10 + i, 40 if i != 1 else 0) for r in everyone} for i in range(3)]
    exchange.send_pieces(spec, pieces[0][0].schema, iter(pieces))
    got = receive_within(exchange, spec, limit, f"{folder}/r{rank}")
    on_disk = got.path is not None and sorted(p.name for p in Path(got.path).parent.iterdir())
    data = got.data if isinstance(got.data, pa.Table) else got.data.to_table()
    got.close()
    left = sorted(p.name for p in Path(f"{folder}/r{rank}").iterdir())
    return data.to_pydict(), got.rows, on_disk, left


@pytest.mark.parametrize("limit", [1 << 30, 2000], ids=["held", "on-disk"])
def test_streamed_send_and_bounded_receive(backend, limit, tmp_path):
    world = 3
    for rank in range(world):
        (tmp_path / f"r{rank}").mkdir()
    b, factory, config, query_id = _prepare(backend, world)
    try:
        results, stats = run_ranks(_streamed, config, world, env=b.env, args=(query_id, str(tmp_path), limit))
    finally:
        factory.cleanup(config)
    for receiver in range(world):
        data, rows, on_disk, left = results[receiver]
        expected = pa.concat_tables(
            [_table(s, receiver * 10 + i, 40 if i != 1 else 0) for s in range(world) for i in range(3)]
        )
        assert data == expected.to_pydict() and rows == expected.num_rows == 240
        assert (on_disk is False) == (limit > 2000)  # past the limit the input was a file, gone once closed
        if on_disk:
            assert len(on_disk) == 1 and on_disk[0].startswith("received-x5-")
        assert left == []
    assert sum(s["rows_received"] for s in stats.values()) == 720


def _two_hash_stages(world: int, partition_sql: str, extra: dict[int, dict]):
    """A plan of stages 1 and 2 on every rank, each a hash exchange by ``k`` over every rank, with ``extra[id]``'s
    further Output fields."""
    from squall.plan import Output, Plan, Stage

    everyone = tuple(range(world))
    stages = tuple(
        Stage(sid, everyone, (), "", Output("hash", everyone, everyone, ("k",), partition_sql, **fields))
        for sid, fields in extra.items()
    )
    return Plan("", world, stages, ("k",))


# --- skew-aware group exchange (squall.operators.skew): histogram round + assignment + selective broadcast


def _skew_group(exchange, rank, world, query_id, clustered=False, folder=None):
    from types import SimpleNamespace

    from squall.operators.partition import PART_COLUMN, RANGE_COLUMN
    from squall.operators.skew import SkewExchanges

    everyone = tuple(range(world))
    ranged = {"range_sql": "(k)::BIGINT", "range_lo": 1, "range_hi": 4999} if clustered else {}
    group = {"partitions": 32 * world, "group": 1, "heavy": "either", **ranged}
    plan = _two_hash_stages(world, "hash(k)", {1: group, 2: group})
    stages = plan.stages
    rng = np.random.default_rng(rank)
    if clustered:  # each rank holds one key range of both sides (e.g. files written in key order)
        lo, hi = 1 + rank * 4999 // world, 1 + (rank + 1) * 4999 // world
        probe, build = rng.integers(lo, hi, 3000), np.arange(lo, hi)
    else:
        probe, build = rng.integers(1, 5000, 3000), np.arange(1 + rank, 5000, world)  # build: each key once
    probe[:900] = 7  # 30 % of every rank's probe rows carry the hot key

    def table(keys):
        hashes = (keys.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(0xABCDEF)
        columns = {"k": pa.array(keys, pa.int64()), PART_COLUMN: pa.array(hashes, pa.uint64())}
        if clustered:
            columns[RANGE_COLUMN] = pa.array(keys, pa.int64())
        return pa.table(columns)

    reports = {1: SimpleNamespace(skew={}), 2: SimpleNamespace(skew={})}
    # with a folder: every member's output is held on disk (past 1 KB), read back a batch at a time
    sx = SkewExchanges(plan, rank, exchange, query_id, folder and f"{folder}/r{rank}", 1000)
    spec_of = lambda s: ExchangeSpec(query_id, s.id, everyone, everyone, "hash")  # noqa: E731
    if folder:
        Path(f"{folder}/r{rank}").mkdir()
        probe_rows = table(probe).to_batches(max_chunksize=700)
        sx.hold(
            stages[0],
            pa.RecordBatchReader.from_batches(probe_rows[0].schema, probe_rows),
            reports[1],
            spec_of,
        )
        assert [p.name[:5] for p in Path(f"{folder}/r{rank}").iterdir()] == ["held-"]
    else:
        sx.hold(stages[0], table(probe), reports[1], spec_of)
    assert sx.ready(stages[0]) == []
    sx.hold(stages[1], table(build), reports[2], spec_of)
    assert not folder or not list(Path(f"{folder}/r{rank}").iterdir())  # sent: the files are gone
    got = {s.id: exchange.receive(spec_of(s)).column("k").to_pylist() for s in sx.ready(stages[1])}
    return got, {k: r.skew for k, r in reports.items()}


@pytest.mark.parametrize("held", ["in-memory", "on-disk"])
@pytest.mark.parametrize("clustered", [False, True], ids=["hash", "key-ranges"])
@pytest.mark.parametrize("world", [3, 4])
def test_skew_aware_group_exchange(backend, world, clustered, held, tmp_path):
    b, factory, config, query_id = _prepare(backend, world)
    folder = str(tmp_path) if held == "on-disk" else None
    try:
        results, _ = run_ranks(_skew_group, config, world, env=b.env, args=(query_id, clustered, folder))
    finally:
        factory.cleanup(config)
    owner = 0 if clustered else 6 % world  # the rank the hot key's build row starts on
    probe_rows = [len(results[r][0][1]) for r in range(world)]
    assert sum(probe_rows) == 3000 * world  # every probe row exactly once
    assert max(probe_rows) / (sum(probe_rows) / world) <= 1.25  # balanced despite the hot key
    for r in range(world):
        got, skew = results[r]
        assert 7 in got[2]  # the hot key's build row is on every rank (selective broadcast)
        # and each rank kept its own hot probe rows (with key ranges rank 0 also drew a few 7s itself)
        kept = got[1].count(7)
        assert kept == 900 or (clustered and r == 0 and 900 <= kept <= 910), kept
        assert skew[1]["heavy_hitters"] == 1 and skew[1]["heavy_rows_kept"] == kept
        assert skew[2]["heavy_rows_broadcast"] == (1 if owner == r else 0)
        assert skew[1]["assignment"] == "histogram+locality" + (", key ranges" if clustered else "")
        if clustered:  # key ranges: (almost) every row stays on its rank
            assert skew[1]["rows_moved"] <= 0.05 * 2100 and skew[2]["rows_moved"] <= 0.05 * len(got[2])
        # every other key: its probe rows are where its build row is (one shared assignment)
        assert {k for k in got[1] if k != 7} <= set(got[2])
    assert sorted(k for r in range(world) for k in results[r][0][2] if k != 7) == [
        k for k in range(1, 5000) if k != 7
    ]


# --- run-time join decision (squall.operators.runtime_join): sizes round, then broadcast / hash / kept in place


def _runtime_join(exchange, rank, world, query_id, decision, order, folder=None):
    from types import SimpleNamespace

    from squall.operators.partition import PART_COLUMN
    from squall.operators.runtime_join import RuntimeJoins

    everyone = tuple(range(world))
    limit = 1e12 if decision == "broadcast" else 0.0
    roles = {1: "decides", 2: "stays"}
    plan = _two_hash_stages(
        world,
        "k % 4",
        {sid: {"runtime_join": 1, "runtime_role": r, "runtime_limit": limit} for sid, r in roles.items()},
    )
    stages = {stage.id: stage for stage in plan.stages}
    rows = {1: np.arange(rank, 400, world), 2: np.arange(rank * 10_000, rank * 10_000 + 3000)}  # S, B keys

    def output(sid, partitioned=True):
        keys = rows[sid]
        columns = {"k": pa.array(keys, pa.int64()), "v": pa.array([f"s{sid}-{k}" for k in keys])}
        if partitioned:
            columns[PART_COLUMN] = pa.array(keys % world, pa.int64())
        batches = pa.table(columns).to_batches(max_chunksize=500)
        return pa.RecordBatchReader.from_batches(batches[0].schema, batches)

    mine = folder and f"{folder}/r{rank}"
    if mine:
        Path(mine).mkdir()
    # with a folder: every side past 1 KB is held on disk, read back a batch at a time
    rj = RuntimeJoins(plan, rank, exchange, query_id, mine, 1000)
    spec_of = lambda s: ExchangeSpec(query_id, s.id, everyone, everyone, "hash")  # noqa: E731
    reports = {sid: SimpleNamespace(runtime={}, bytes_to_others=0, partition_s=0.0) for sid in stages}
    files_while_held = []
    for sid in (1, 2) if order == "s_first" else (2, 1):
        stage = stages[sid]
        rj.hold(stage, output(sid, not rj.stays_here(stage)), reports[sid], spec_of)
        files_while_held.append(sorted(p.name.split("-")[1] for p in Path(mine).iterdir()) if mine else [])
    got = {}
    for sid in (1, 2):
        for ready in rj.ready(stages[sid]):
            got[ready.id] = exchange.receive(rj.spec(ready, spec_of(ready))).to_pydict()
    kept = rj.kept(2)
    if kept is not None:
        assert "k" in kept.data.schema.names and PART_COLUMN not in kept.data.schema.names
        got[2] = (kept.data if isinstance(kept.data, pa.Table) else kept.data.to_table()).to_pydict()
        kept.close()
    left = sorted(p.name for p in Path(mine).iterdir()) if mine else []
    summary = {
        sid: {k: r.runtime[k] for k in ("decision", "this_side", "decided_by_rows")}
        for sid, r in reports.items()
    }
    return got, summary, files_while_held, left


@pytest.mark.parametrize(
    ("decision", "order", "held"),
    [
        ("broadcast", "b_first", "on-disk"),  # B waits for S on disk, then is this rank's input from there
        ("broadcast", "s_first", "on-disk"),  # S on disk sent whole; B held as decided, on disk
        ("hash", "b_first", "on-disk"),  # both read back from disk a batch at a time and hashed
        ("hash", "s_first", "in-memory"),
    ],
    ids=[
        "broadcast-b_first-on_disk",
        "broadcast-s_first-on_disk",
        "hash-b_first-on_disk",
        "hash-s_first-held",
    ],
)
def test_runtime_join_exchange(backend, decision, order, held, tmp_path):
    world = 3
    b, factory, config, query_id = _prepare(backend, world)
    folder = str(tmp_path) if held == "on-disk" else None
    try:
        results, _ = run_ranks(
            _runtime_join, config, world, env=b.env, args=(query_id, decision, order, folder)
        )
    finally:
        factory.cleanup(config)
    s_keys = list(range(400))
    for r in range(world):
        got, summary, files_while_held, left = results[r]
        assert summary[1]["decided_by_rows"] == 400 and summary[1]["decision"] == decision
        b_keys = list(range(r * 10_000, r * 10_000 + 3000))
        if decision == "broadcast":  # S whole on every rank; B's rows stay where they were made
            assert sorted(got[1]["k"]) == s_keys
            assert got[2]["k"] == b_keys and got[2]["v"] == [f"s2-{k}" for k in b_keys]
            assert summary[2]["this_side"] == "kept where it is (no exchange)"
        else:  # both hashed by their partition column
            assert sorted(got[1]["k"]) == [k for k in s_keys if k % world == r]
            everyone_b = [k for s in range(world) for k in range(s * 10_000, s * 10_000 + 3000)]
            assert sorted(got[2]["k"]) == [k for k in everyone_b if k % world == r]
            assert summary[2]["this_side"] == "hash-partitioned"
        # on disk: B's file while it waits for S or stays here as this rank's input; S's goes once sent
        kept_b = ["s2"] if held == "on-disk" and decision == "broadcast" else []
        waiting_b = ["s2"] if held == "on-disk" else []
        assert files_while_held == ([[], kept_b] if order == "s_first" else [waiting_b, kept_b])
        assert left == []  # the kept input's file goes when the worker closes it
