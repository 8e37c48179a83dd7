"""The local exchange keeps its memory folder within a limit: past it, files go to disk, linked in place."""

from __future__ import annotations

import os

import pyarrow as pa

import squall.exchange.local as local
from squall.exchange.base import ExchangeSpec, open_exchange
from squall.exchange.local import LocalExchangeFactory, in_memory


def _table(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "s": pa.array([f"v{i}" for i in range(n)], pa.string()),
        }
    )


def test_past_the_memory_limit_files_go_to_disk_and_receivers_find_them(tmp_path):
    factory = LocalExchangeFactory(root=tmp_path / "mem", memory_limit=1)  # every file is past it
    config = factory.prepare("q1", 2)
    overflow = config["overflow"]
    sender, receiver = open_exchange(config, 0, 2), open_exchange(config, 1, 2)
    spec = ExchangeSpec("q1", 1, (0,), (0, 1), "hash")
    sender.send(spec, {0: _table(3), 1: _table(5, 100)})
    streamed = ExchangeSpec("q1", 2, (0,), (0, 1), "hash")
    sender.send_pieces(
        streamed, _table(0).schema, iter([{0: _table(2), 1: _table(4, 10)}, {1: _table(1, 50)}])
    )
    try:
        linked = tmp_path / "mem" / "q1" / "x1" / "s0-r1.arrow"
        assert linked.is_symlink() and os.path.dirname(os.readlink(linked)) == overflow
        assert receiver.receive(spec) == _table(5, 100)
        assert receiver.receive(streamed) == pa.concat_tables([_table(4, 10), _table(1, 50)])
        assert sender.receive(streamed) == _table(2)  # its own part, held (small)
    finally:
        factory.cleanup(config)
    assert not os.path.exists(overflow) and not (tmp_path / "mem" / "q1").exists()


def test_a_folder_on_disk_has_no_limit_and_dev_shm_has_one(tmp_path):
    assert LocalExchangeFactory(root=tmp_path).memory_limit == 0 and "overflow" not in LocalExchangeFactory(
        root=tmp_path
    ).prepare("q2", 1)
    if in_memory(local.default_root()):
        assert LocalExchangeFactory().memory_limit > 0


def test_a_large_streamed_send_is_written_as_it_comes_own_part_too_on_disk_past_a_limit(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(local, "STREAM_HELD_BYTES", 0)
    factory = LocalExchangeFactory(
        root=tmp_path, memory_limit=1 << 40
    )  # a limit: a large stream goes to disk
    config = factory.prepare("q3", 1)
    exchange = open_exchange(config, 0, 1)
    spec = ExchangeSpec("q3", 1, (0,), (0,), "hash")
    exchange.send_pieces(spec, _table(0).schema, iter([{0: _table(3)}, {0: _table(2, 7)}]))
    try:
        assert (tmp_path / "q3" / "x1" / "s0-r0.arrow").is_symlink() and not exchange._own
        assert exchange.receive(spec) == pa.concat_tables([_table(3), _table(2, 7)])
    finally:
        factory.cleanup(config)


def test_an_input_past_the_limit_is_read_in_place_from_the_senders_files(tmp_path):
    factory = LocalExchangeFactory(root=tmp_path)
    config = factory.prepare("q4", 2)
    a, b = open_exchange(config, 0, 2), open_exchange(config, 1, 2)
    spec = ExchangeSpec("q4", 1, (0, 1), (0, 1), "hash")
    a.send(spec, {0: _table(3), 1: _table(4, 100)})
    b.send(spec, {0: _table(2, 200), 1: _table(5, 300)})
    try:
        assert b.receive_in_place(spec, 1 << 30) is None  # within the limit: held as usual
        data, rows, nbytes = b.receive_in_place(spec, 0)
        assert rows == 9 and nbytes > 0 and not b._own  # its own part too, handed over
        assert data.to_table().sort_by("id") == pa.concat_tables([_table(4, 100), _table(5, 300)])
        assert a.receive(spec).sort_by("id") == pa.concat_tables([_table(3), _table(2, 200)])
        assert b.stats().rows_received == 9
    finally:
        factory.cleanup(config)


def test_a_streamed_output_on_disk_is_lz4_compressed(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "STREAM_HELD_BYTES", 0)
    factory = LocalExchangeFactory(root=tmp_path, memory_limit=1 << 40)
    config = factory.prepare("q5", 1)
    exchange = open_exchange(config, 0, 1)
    spec = ExchangeSpec("q5", 1, (0,), (0,), "hash")
    zeros = pa.table({"z": pa.array([0] * 100_000, pa.int64())})
    exchange.send_pieces(spec, zeros.schema, iter([{0: zeros}, {0: zeros}]))
    try:
        assert os.path.getsize(tmp_path / "q5" / "x1" / "s0-r0.arrow") < zeros.nbytes / 10  # 1.6 MB of zeros
        assert exchange.receive(spec).num_rows == 200_000
    finally:
        factory.cleanup(config)
