"""S3 exchange: Lambada-style write combining, one- or two-level (Lambada, SIGMOD 2020).

Per exchange every sender writes **one** object holding the data of all its
receivers, one byte range each; a receiver reads only its ranges with parallel
ranged GETs. Large hash exchanges can route through a √W x √W grid (two levels).

Keys
----
All objects of a query live under ``<prefix>/<query_id>/`` (``config["prefix"]``)::

    <prefix>/<query_id>/<hhhh>/x<exchange>-l<level>-s<sender>   one object per (exchange, level, sender)
    <prefix>/<query_id>/ABORT                                  the query was aborted; holds the reason

``hhhh`` is 4 hex digits of a hash of (query, exchange, level, sender): keys are
deterministic, and spread over 65,536 sub-prefixes so S3 can split the query's
key space over partitions (≥3,500 PUT / 5,500 GET per second each). Objects are
written with ``If-None-Match: *``: a 412 PreconditionFailed means a retried or
duplicated sender already wrote the same key, and the first copy wins.

Object format (version 1, little endian)
----------------------------------------
::

    object  := piece* index trailer
    piece   := one Arrow IPC *stream* (schema message, record batches, end-of-stream
               marker), buffers compressed with ``compression`` (zstd or lz4)
    index   := entry* ; entries sorted by (to, tag), one per piece
    entry   := to:int32  tag:int32  offset:uint64  length:uint64      (24 bytes)
    trailer := index_length:uint64  magic:8 bytes b"SQXCHG01"          (16 bytes)

``offset``/``length`` locate the piece in the object. ``to`` is the rank that
reads the piece (``-1``: every receiver, broadcast). ``tag`` is the rank the rows
*came from* (the original sender), except in a two-level first-level object,
where it is the final receiver the forwarder passes the piece on to. The
pieces of one ``to`` are contiguous, so a reader needs one byte range per
object. Every piece carries its schema, so empty partitions keep their types.

Reading
-------
A reader first issues a suffix-range GET for the last ``tail_bytes`` (64 KiB):
that returns the trailer, the index and, for small objects, the reader's own
range too (pieces addressed to the highest ranks sit right before the index).
Only when its range lies outside that tail does it issue data GETs: one per
``part_size`` (16 MiB) slice, in parallel on a thread pool (the boto3 client is
shared; ``max_pool_connections`` connections). A missing object (404) is a
*miss*: the reader polls again with bounded exponential backoff (20 ms … 1 s,
jittered), checks the ABORT marker with a HEAD after each round that still
misses something, and raises :class:`ExchangeTimeout` naming the missing ranks
after ``timeout_s``. A rank never GETs what it wrote itself: it keeps the pieces
addressed to it in memory, and does not PUT an object whose pieces are all
addressed to itself (it drops its copy after a 412, so everyone reads the
winning object).

Two levels
----------
With W ranks (senders == receivers, a hash exchange) laid out row-major on a
grid of ``g = ⌈√W⌉`` columns, the rows from sender (row a) to receiver (column d)
go first to the *forwarder* (a, d) — or (a-1, d) when the last row is short.
Level 1: each sender writes one object with g ranges (one per forwarder of its
row, each holding one piece per final receiver); level 2: each forwarder reads
its ≤ g incoming ranges during ``receive``, and writes one object with one
range per final receiver of its column, re-using the IPC bytes unchanged (no
decode). Each receiver then reads ≤ g ranges. So 2W PUTs and ≤ 2W·g reader/object
pairs instead of W PUTs and W² pairs.

``levels="auto"`` picks two levels for hash exchanges with senders == receivers
and W ≥ ``two_level_min`` (16). Rationale: with S3 prices (PUT = 12.5 GETs) the
request bill of one level, 12.5W + pW² GET-units (p = GETs per pair, 1 for
small ranges, 2 for large ones), exceeds two levels' 25W + 2p·W^1.5 from
W ≈ 14 (p = 2) to W ≈ 22 (p = 1); two levels also cut each receiver's GETs from
W to 2g (latency, per-prefix rates) at the price of moving every byte twice.
``levels=2`` on another kind of exchange falls back to one level.

Request accounting
------------------
:meth:`S3Exchange.stats` counts every S3 API call once by type (``put``,
``get``, ``head``; botocore retries inside a call are counted separately as
``retries``). Each ``per_exchange`` entry has ``exchange_id``, ``kind``,
``levels``, ``senders``, ``receivers``, ``put`` (including ``put_dup``, the
412s), ``get`` = ``get_index`` + ``get_data`` + ``get_miss`` (+1 to read an abort
reason), ``head`` (abort checks), ``bytes_written``/``bytes_read`` (payload bytes of PUTs/GETs),
``bytes_sent``/``bytes_received`` (IPC bytes of the pieces this rank sent at
level 1 and received at the last level, through S3 or kept in memory), rows
and ``retries``. ``get_index`` is one per reader/object pair (two if an index
outgrows the tail: W > ~2,700), ``get_data`` one per ``part_size`` slice of a
range outside the tail, ``get_miss`` one per 404 while polling. Summed over the
ranks of one exchange: one level ``put ≤ W`` and ``get_index ≤ W²``; two levels
``put ≤ 2W`` and ``get_index ≤ 2W·g``; and ``get_data ≤ get_index`` while ranges
are ≤ ``part_size``. Misses and HEADs depend on timing and are reported apart.

Retries
-------
Every request goes through botocore's retry handler (``retry_mode``
"standard" by default, or "adaptive" to add client-side rate limiting):
exponential backoff with full jitter on 500/502/503/504, ``SlowDown`` and other
throttling codes, and connection errors, up to ``max_retries`` (8) retries per
request. A 409 ``ConditionalRequestConflict`` (a concurrent conditional PUT of
the same key) is retried by the exchange. What still fails becomes a one-line
:class:`ExchangeError` naming the S3 error code and key.

Lifecycle: the driver's :class:`S3ExchangeFactory` ``prepare`` checks the bucket
and returns the config; workers open :class:`S3Exchange` endpoints; ``abort``
writes the ABORT marker; ``cleanup`` deletes every object under the query prefix.
Endpoint and credentials come from the standard AWS settings (``AWS_ENDPOINT_URL``,
profiles, environment); ``endpoint_url`` in the config overrides them (tests).
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
import re
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from squall import aws
from squall.exchange.base import (
    Exchange,
    ExchangeAborted,
    ExchangeConfigError,
    ExchangeError,
    ExchangeFactory,
    ExchangeSpec,
    ExchangeTimeout,
    check_number,
    concat,
)

log = logging.getLogger(__name__)

MAGIC = b"SQXCHG01"
TRAILER = struct.Struct("<Q8s")
ENTRY = np.dtype([("to", "<i4"), ("tag", "<i4"), ("offset", "<u8"), ("length", "<u8")])
BROADCAST = -1

DEFAULTS: dict[str, Any] = {
    "levels": "auto",
    "timeout_s": 600.0,
    "compression": "zstd",
    "threads": 16,
    "max_pool_connections": 32,
    "two_level_min": 16,
    "tail_bytes": 64 * 1024,
    "part_size": 16 * 1024 * 1024,
    "max_retries": 8,
    "retry_mode": "standard",
    "poll_min_s": 0.02,
    "poll_max_s": 1.0,
}
RETRY_MODES = ("standard", "adaptive", "legacy")
#: S3 error codes a request hands back to its caller as botocore errors (misses, duplicate PUTs)
_PASS_THROUGH = ("NoSuchKey", "404", "PreconditionFailed", "ConditionalRequestConflict")


# --- object format ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """One index entry: bytes ``[offset, offset + length)`` of an object, for rank ``to``."""

    to: int
    tag: int
    offset: int
    length: int


def ipc_options(compression: str | None) -> pa.ipc.IpcWriteOptions:
    if compression in (None, "", "none"):
        return pa.ipc.IpcWriteOptions()
    if compression not in ("zstd", "lz4"):
        raise ExchangeConfigError(f"unsupported exchange compression {compression!r} (use zstd, lz4 or none)")
    return pa.ipc.IpcWriteOptions(compression=compression)


def encode_table(table: pa.Table, options: pa.ipc.IpcWriteOptions) -> pa.Buffer:
    """One piece: an Arrow IPC stream of ``table``."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue()


def decode_table(buf: pa.Buffer) -> pa.Table:
    return pa.ipc.open_stream(buf).read_all()


def build_object(pieces: Iterable[tuple[int, int, pa.Buffer]]) -> tuple[bytes, list[Piece]]:
    """Lay out ``(to, tag, ipc_bytes)`` pieces (sorted by to, tag) with index and trailer."""
    sink = pa.BufferOutputStream()
    index: list[Piece] = []
    for to, tag, buf in sorted(pieces, key=lambda p: (p[0], p[1])):
        index.append(Piece(to, tag, sink.tell(), buf.size))
        sink.write(buf)
    entries = np.array([(p.to, p.tag, p.offset, p.length) for p in index], dtype=ENTRY).tobytes()
    sink.write(entries)
    sink.write(TRAILER.pack(len(entries), MAGIC))
    return sink.getvalue().to_pybytes(), index


def parse_index(tail: bytes, key: str) -> tuple[int, list[Piece]] | int:
    """Parse the index at the end of ``tail``; return ``(start_of_index_in_tail, pieces)``.

    When ``tail`` is too short to hold the whole index, return the number of
    bytes from the end of the object that are needed instead.
    """
    if len(tail) < TRAILER.size:
        raise ExchangeError(f"corrupt exchange object {key}: {len(tail)} bytes")
    index_len, magic = TRAILER.unpack_from(tail, len(tail) - TRAILER.size)
    if magic != MAGIC or index_len % ENTRY.itemsize:
        raise ExchangeError(f"corrupt exchange object {key}: bad trailer")
    start = len(tail) - TRAILER.size - index_len
    if start < 0:
        return index_len + TRAILER.size
    rows = np.frombuffer(tail, dtype=ENTRY, count=index_len // ENTRY.itemsize, offset=start)
    return start, [Piece(int(r["to"]), int(r["tag"]), int(r["offset"]), int(r["length"])) for r in rows]


def object_key(prefix: str, query_id: str, exchange_id: int, level: int, sender: int) -> str:
    name = f"x{exchange_id}-l{level}-s{sender}"
    spread = hashlib.blake2b(f"{query_id}/{name}".encode(), digest_size=2).hexdigest()
    return f"{prefix}/{spread}/{name}"


def split_range(lo: int, hi: int, part_size: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut into ≈equal parts of at most ``part_size`` bytes."""
    n = max(1, math.ceil((hi - lo) / part_size))
    step = math.ceil((hi - lo) / n)
    return [(a, min(a + step, hi)) for a in range(lo, hi, step)] or [(lo, hi)]


# --- routing ------------------------------------------------------------------------------------


class Grid:
    """The √W x √W routing of a two-level exchange over ``ranks`` (sorted), see module doc."""

    def __init__(self, ranks: Sequence[int]) -> None:
        self.ranks = tuple(sorted(ranks))
        self.width = len(self.ranks)
        self.g = math.isqrt(self.width - 1) + 1 if self.width > 1 else 1
        self._pos = {r: i for i, r in enumerate(self.ranks)}

    def forwarder(self, sender: int, receiver: int) -> int:
        row, col = self._pos[sender] // self.g, self._pos[receiver] % self.g
        pos = row * self.g + col
        if pos >= self.width:  # short last row: the forwarder is in the (full) row above
            pos -= self.g
        return self.ranks[pos]

    @cached_property
    def _routes(self) -> list[tuple[int, int, int]]:
        """(row's first position, receiver, forwarder) for every row and receiver."""
        return [
            (start, q, self.forwarder(self.ranks[start], q))
            for start in range(0, self.width, self.g)
            for q in self.ranks
        ]

    def sources(self, forwarder: int) -> list[int]:
        """Senders whose level-1 objects hold a range for ``forwarder``."""
        rows = {start for start, _q, f in self._routes if f == forwarder}
        return sorted(self.ranks[p] for s in rows for p in range(s, min(s + self.g, self.width)))

    def forwarders(self, receiver: int) -> list[int]:
        """Forwarders whose level-2 objects hold a range for ``receiver``."""
        return sorted({f for _s, q, f in self._routes if q == receiver})


def choose_levels(spec: ExchangeSpec, levels: Any, two_level_min: int) -> int:
    """1 or 2 for ``spec`` under the ``levels`` setting (1, 2 or "auto")."""
    if str(levels) not in ("1", "2", "auto"):
        raise ExchangeConfigError(f"exchange levels must be 1, 2 or 'auto', not {levels!r}")
    eligible = spec.kind == "hash" and sorted(spec.senders) == sorted(spec.receivers)
    if not eligible or str(levels) == "1":
        return 1
    if str(levels) == "2":
        return 2
    return 2 if len(spec.senders) >= two_level_min else 1


def check_options(options: Mapping[str, Any]) -> None:
    """ExchangeConfigError (a user mistake) for an option value the exchange cannot use."""
    ipc_options(options.get("compression", DEFAULTS["compression"]))
    for name in ("timeout_s", "poll_min_s", "poll_max_s"):
        if name in options:
            check_number(name, options[name], float, 0)
    for name in ("threads", "max_pool_connections", "two_level_min", "tail_bytes", "part_size"):
        if name in options:
            check_number(name, options[name], int, 1)
    if "max_retries" in options:
        check_number("max_retries", options["max_retries"], int, 0)
    if options.get("retry_mode", "standard") not in RETRY_MODES:
        raise ExchangeConfigError(
            f"exchange retry_mode must be one of {', '.join(RETRY_MODES)}, not {options['retry_mode']!r}"
        )


# --- S3 client ----------------------------------------------------------------------------------


def make_client(config: Mapping[str, Any]) -> Any:
    """A thread-safe boto3 S3 client (:func:`squall.aws.client`) with the pool and retries of ``config``."""
    return aws.client(
        "s3",
        endpoint_url=config.get("endpoint_url"),
        region=config.get("region"),
        max_pool_connections=int(config.get("max_pool_connections", DEFAULTS["max_pool_connections"])),
        max_retries=int(config.get("max_retries", DEFAULTS["max_retries"])),
        retry_mode=str(config.get("retry_mode", DEFAULTS["retry_mode"])),
    )


def parse_bucket_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> (bucket, "some/prefix")."""
    bucket, prefix = aws.parse_s3_url(url, ExchangeConfigError, "exchange bucket_url")
    return bucket, prefix.strip("/")


# --- accounting ---------------------------------------------------------------------------------

_PER_EXCHANGE_COUNTERS = (
    "put",
    "put_dup",
    "get",
    "get_index",
    "get_data",
    "get_miss",
    "head",
    "bytes_written",
    "bytes_read",
    "bytes_sent",
    "bytes_received",
    "rows_sent",
    "rows_received",
    "retries",
)


class _Ledger:
    """Thread-safe counters behind :meth:`S3Exchange.stats`."""

    def __init__(self, stats: Any) -> None:
        self._stats = stats
        self._lock = threading.Lock()
        self._entries: dict[int, dict[str, Any]] = {}

    def entry(self, spec: ExchangeSpec, levels: int) -> None:
        with self._lock:
            if spec.exchange_id not in self._entries:
                e: dict[str, Any] = {
                    "exchange_id": spec.exchange_id,
                    "kind": spec.kind,
                    "levels": levels,
                    "senders": len(spec.senders),
                    "receivers": len(spec.receivers),
                }
                e.update(dict.fromkeys(_PER_EXCHANGE_COUNTERS, 0))
                self._entries[spec.exchange_id] = e
                self._stats.per_exchange.append(e)

    def add(self, xid: int, request: str | None = None, **counters: int) -> None:
        with self._lock:
            e = self._entries[xid]
            if request:
                self._stats.count(request)
                e[request] += 1
            if counters.get("retries"):
                self._stats.count("retries", counters["retries"])
            for name, n in counters.items():
                e[name] += n
            self._stats.bytes_sent += counters.get("bytes_sent", 0)
            self._stats.bytes_received += counters.get("bytes_received", 0)
            self._stats.rows_sent += counters.get("rows_sent", 0)
            self._stats.rows_received += counters.get("rows_received", 0)


# --- endpoint -----------------------------------------------------------------------------------


@dataclass
class _Source:
    """What a reader found in one object: its pieces and the bytes to cut them from."""

    rank: int
    pieces: list[Piece]
    data: pa.Buffer | None = None  # bytes [base, base + data.size) of the object
    base: int = 0

    def tables(self) -> list[tuple[int, pa.Buffer]]:
        """(tag, IPC bytes) of every piece."""
        assert self.data is not None
        return [(p.tag, self.data.slice(p.offset - self.base, p.length)) for p in self.pieces]


def _timeout(xid: int, missing: Sequence[int], timeout_s: float) -> ExchangeTimeout:
    names = ", ".join(str(s) for s in sorted(missing))
    exc = ExchangeTimeout(f"exchange {xid}: no data from rank(s) {names} after {timeout_s:g} s")
    exc.missing = sorted(missing)  # type: ignore[attr-defined]
    return exc


class S3Exchange(Exchange):
    """One rank's endpoint over the query's S3 prefix (object format and costs: module doc).

    Lifecycle: opened by :func:`squall.exchange.base.open_exchange` with the
    factory's config; creates its boto3 client and a thread pool lazily; for each
    exchange ``send`` PUTs this rank's object(s) and ``receive`` polls, fetches and
    decodes (forwarding first in a two-level exchange); ``close`` stops the pool.
    """

    name = "s3"

    def __init__(self, config: Mapping[str, Any], rank: int, world_size: int) -> None:
        super().__init__(config, rank, world_size)
        self.opts = {**DEFAULTS, **{k: v for k, v in self.config.items() if v is not None}}
        self.bucket: str = self.config["bucket"]
        self.prefix: str = self.config["prefix"]
        self.timeout_s = float(self.opts["timeout_s"])
        self.tail_bytes = int(self.opts["tail_bytes"])
        self.part_size = int(self.opts["part_size"])
        self._ipc = ipc_options(self.opts["compression"])
        self._ledger = _Ledger(self._stats)
        self._own: dict[tuple[int, int], list[tuple[Piece, pa.Buffer]]] = {}
        self._client_obj: Any = None
        self._pool_obj: ThreadPoolExecutor | None = None
        self._init_lock = threading.Lock()

    # -- plumbing

    @property
    def client(self) -> Any:
        with self._init_lock:
            if self._client_obj is None:
                self._client_obj = make_client(self.opts)
            return self._client_obj

    @property
    def _pool(self) -> ThreadPoolExecutor:
        with self._init_lock:
            if self._pool_obj is None:
                self._pool_obj = ThreadPoolExecutor(int(self.opts["threads"]), thread_name_prefix="s3x")
            return self._pool_obj

    def close(self) -> None:
        if self._pool_obj is not None:
            self._pool_obj.shutdown(wait=True, cancel_futures=True)
            self._pool_obj = None
        self._own.clear()

    def key(self, spec: ExchangeSpec, level: int, sender: int) -> str:
        return object_key(self.prefix, spec.query_id, spec.exchange_id, level, sender)

    def _request(self, xid: int, kind: str, key: str, call: Callable[..., Any], **kwargs: Any) -> Any:
        """Run one S3 call, count it under ``kind`` and turn failures into ExchangeError.

        ``NoSuchKey``/``404`` and ``PreconditionFailed`` propagate as botocore errors
        (the callers treat them as a miss and a duplicate).
        """
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = call(Bucket=self.bucket, Key=key, **kwargs)
        except ClientError as exc:
            self._ledger.add(xid, kind, retries=aws.retries_of(exc.response))
            if aws.error_code(exc) in _PASS_THROUGH:
                raise
            raise ExchangeError(aws.describe_error(exc, self.bucket, key)) from None
        except BotoCoreError as exc:
            self._ledger.add(xid, kind)
            raise ExchangeError(aws.describe_error(exc, self.bucket, key)) from None
        self._ledger.add(xid, kind, retries=aws.retries_of(response))
        return response

    # -- sending

    def send(self, spec: ExchangeSpec, parts: Mapping[int, pa.Table]) -> None:
        levels = choose_levels(spec, self.opts["levels"], int(self.opts["two_level_min"]))
        self._ledger.entry(spec, levels)
        schema = next(iter(parts.values())).schema if parts else pa.schema([])
        if spec.kind == "broadcast":
            table = next(iter(parts.values())) if parts else schema.empty_table()
            pieces = [(BROADCAST, self.rank, encode_table(table, self._ipc))]
            rows = table.num_rows * len(spec.receivers)
        else:
            grid = Grid(spec.receivers) if levels == 2 else None
            pieces, rows = [], 0
            for receiver in spec.receivers:
                table = parts.get(receiver)
                table = schema.empty_table() if table is None else table
                rows += table.num_rows
                if grid is None:
                    pieces.append((receiver, self.rank, encode_table(table, self._ipc)))
                else:  # level 1: addressed to the forwarder, tagged with the final receiver
                    pieces.append(
                        (grid.forwarder(self.rank, receiver), receiver, encode_table(table, self._ipc))
                    )
        sent = sum(buf.size for _to, _tag, buf in pieces)
        self._ledger.add(spec.exchange_id, rows_sent=rows, bytes_sent=sent)
        self._write(spec, 1, pieces)

    def _write(self, spec: ExchangeSpec, level: int, pieces: list[tuple[int, int, pa.Buffer]]) -> None:
        """PUT this rank's object for ``level`` unless every piece is for this rank itself."""
        body, index = build_object(pieces)
        own_bufs = {(to, tag): buf for to, tag, buf in pieces if to in (self.rank, BROADCAST)}
        own = [(p, own_bufs[p.to, p.tag]) for p in index if p.to in (self.rank, BROADCAST)]
        self._own[spec.exchange_id, level] = own
        if all(p.to == self.rank for p in index):
            return
        if not self._put_if_absent(spec.exchange_id, self.key(spec, level, self.rank), body):
            del self._own[spec.exchange_id, level]  # a duplicate wrote first: read the winner's copy

    def _put_if_absent(self, xid: int, key: str, body: bytes) -> bool:
        """PUT with If-None-Match: *; False when the key already existed (412)."""
        from botocore.exceptions import ClientError

        for attempt in range(8):
            try:
                self._request(xid, "put", key, self.client.put_object, Body=body, IfNoneMatch="*")
            except ClientError as exc:
                if aws.error_code(exc) == "PreconditionFailed":
                    self._ledger.add(xid, put_dup=1)
                    return False
                if aws.error_code(exc) != "ConditionalRequestConflict":
                    raise ExchangeError(aws.describe_error(exc, self.bucket, key)) from None
                # 409: a concurrent conditional write of the same key is in flight; try again
                time.sleep(min(1.0, 0.05 * 2**attempt) * random.random())
                continue
            self._ledger.add(xid, bytes_written=len(body))
            return True
        raise ExchangeError(f"S3 object {key}: conditional PUT kept conflicting")

    # -- receiving

    def receive(self, spec: ExchangeSpec) -> pa.Table:
        levels = choose_levels(spec, self.opts["levels"], int(self.opts["two_level_min"]))
        self._ledger.entry(spec, levels)
        if levels == 1:
            sources = self._collect(spec, 1, sorted(spec.senders))
        else:
            grid = Grid(spec.receivers)
            self._forward(spec, grid)
            try:
                sources = self._collect(spec, 2, grid.forwarders(self.rank))
            except ExchangeTimeout as exc:
                raise self._explain_timeout(spec, grid, exc) from None
        pieces = sorted((pb for src in sources for pb in src.tables()), key=lambda pb: pb[0])
        tables = [decode_table(buf) for _tag, buf in pieces]
        received = concat(tables, tables[0].schema if tables else None)
        nbytes = sum(buf.size for _tag, buf in pieces)
        self._ledger.add(spec.exchange_id, rows_received=received.num_rows, bytes_received=nbytes)
        self._own.pop((spec.exchange_id, levels), None)
        return received

    def _forward(self, spec: ExchangeSpec, grid: Grid) -> None:
        """Two-level step: read the level-1 ranges for this forwarder, write its level-2 object."""
        sources = self._collect(spec, 1, grid.sources(self.rank))
        pieces = [(final, src.rank, buf) for src in sources for final, buf in src.tables()]
        self._own.pop((spec.exchange_id, 1), None)
        self._write(spec, 2, pieces)

    def _collect(self, spec: ExchangeSpec, level: int, senders: Sequence[int]) -> list[_Source]:
        """Wait for and fetch the ranges addressed to this rank in the ``level`` objects of ``senders``."""
        xid = spec.exchange_id
        found: dict[int, _Source] = {}
        pending: list[int] = []
        for sender in senders:
            own = self._own.get((xid, level)) if sender == self.rank else None
            if own is not None:
                found[sender] = self._own_source(sender, own)
            else:
                pending.append(sender)
        data: list[tuple[_Source, list[Future[bytes]], int]] = []
        deadline = time.monotonic() + self.timeout_s
        delay = float(self.opts["poll_min_s"])
        try:
            while pending:
                futures = {
                    self._pool.submit(self._read_index, xid, self.key(spec, level, s)): s for s in pending
                }
                for fut in as_completed(futures):
                    sender = futures[fut]
                    got = fut.result()
                    if got is None:
                        continue
                    source, lo, hi = self._select(sender, *got)
                    found[sender] = source
                    if source.data is None:  # range outside the tail: data GETs in parallel
                        key = self.key(spec, level, sender)
                        parts = [
                            self._pool.submit(self._get_range, xid, key, a, b)
                            for a, b in split_range(lo, hi, self.part_size)
                        ]
                        data.append((source, parts, lo))
                pending = sorted(s for s in pending if s not in found)
                if not pending:
                    break
                self._check_abort(xid)
                if time.monotonic() > deadline:
                    raise _timeout(xid, pending, self.timeout_s)
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())) * random.uniform(0.5, 1.0))
                delay = min(delay * 2, float(self.opts["poll_max_s"]))
            for source, parts, lo in data:
                source.data = pa.py_buffer(b"".join(f.result() for f in parts))
                source.base = lo
        except BaseException:
            for _source, parts, _lo in data:
                for f in parts:
                    f.cancel()
            raise
        return [found[s] for s in sorted(found)]

    @staticmethod
    def _own_source(sender: int, own: list[tuple[Piece, pa.Buffer]]) -> _Source:
        """The pieces this rank kept from its own object (contiguous: one ``to`` per reader)."""
        own = sorted(own, key=lambda pb: pb[0].offset)
        base = own[0][0].offset if own else 0
        data = pa.py_buffer(b"".join(buf.to_pybytes() for _p, buf in own))
        return _Source(sender, [p for p, _b in own], data, base)

    def _select(
        self, sender: int, tail: pa.Buffer, tail_start: int, index: list[Piece]
    ) -> tuple[_Source, int, int]:
        pieces = [p for p in index if p.to in (self.rank, BROADCAST)]
        if not pieces:
            return _Source(sender, [], pa.py_buffer(b""), 0), 0, 0
        lo = min(p.offset for p in pieces)
        hi = max(p.offset + p.length for p in pieces)
        if lo >= tail_start:
            return _Source(sender, pieces, tail, tail_start), lo, hi
        return _Source(sender, pieces), lo, hi

    def _read_index(self, xid: int, key: str) -> tuple[pa.Buffer, int, list[Piece]] | None:
        """Suffix GET of the tail (pool thread): (tail, its offset, index), or None if missing."""
        from botocore.exceptions import ClientError

        try:
            resp = self._request(xid, "get", key, self.client.get_object, Range=f"bytes=-{self.tail_bytes}")
        except ClientError as exc:
            if aws.error_code(exc) in ("NoSuchKey", "404"):
                self._ledger.add(xid, get_miss=1)
                return None
            raise
        tail = resp["Body"].read()
        total = int(str(resp.get("ContentRange", "")).rpartition("/")[2] or len(tail))
        self._ledger.add(xid, get_index=1, bytes_read=len(tail))
        parsed = parse_index(tail, key)
        if isinstance(parsed, int):  # huge index: fetch the rest of it
            extra = self._get_range(xid, key, total - parsed, total - len(tail), index=True)
            tail = extra + tail
            parsed = parse_index(tail, key)
            assert not isinstance(parsed, int)
        return pa.py_buffer(tail), total - len(tail), parsed[1]

    def _get_range(self, xid: int, key: str, lo: int, hi: int, index: bool = False) -> bytes:
        resp = self._request(xid, "get", key, self.client.get_object, Range=f"bytes={lo}-{hi - 1}")
        body = resp["Body"].read()
        if len(body) != hi - lo:
            raise ExchangeError(f"short read from s3://{self.bucket}/{key}: {len(body)} of {hi - lo} bytes")
        self._ledger.add(xid, None, bytes_read=len(body), **({"get_index": 1} if index else {"get_data": 1}))
        return body

    def aborted(self) -> bool:
        """One HEAD of the query's ABORT marker (counted as ``head`` in ``requests``)."""
        from botocore.exceptions import BotoCoreError, ClientError

        self._stats.count("head")
        try:
            self.client.head_object(Bucket=self.bucket, Key=f"{self.prefix}/ABORT")
        except (ClientError, BotoCoreError):
            return False
        return True

    def _check_abort(self, xid: int) -> None:
        from botocore.exceptions import ClientError

        key = f"{self.prefix}/ABORT"
        try:
            self._request(xid, "head", key, self.client.head_object)
        except ClientError:
            return
        try:
            reason = self._request(xid, "get", key, self.client.get_object)["Body"].read()
        except (ClientError, ExchangeError):
            reason = b""
        raise ExchangeAborted(reason.decode(errors="replace").strip() or "query aborted")

    def _explain_timeout(self, spec: ExchangeSpec, grid: Grid, exc: ExchangeTimeout) -> ExchangeTimeout:
        """A level-2 wait timed out: name the senders whose level-1 objects are missing, if any."""
        from botocore.exceptions import ClientError

        suspects = {s for f in getattr(exc, "missing", []) for s in [f, *grid.sources(f)]} - {self.rank}
        missing = []
        for sender in sorted(suspects):
            try:
                self._request(spec.exchange_id, "head", self.key(spec, 1, sender), self.client.head_object)
            except (ClientError, ExchangeError):
                missing.append(sender)
        return _timeout(spec.exchange_id, missing, self.timeout_s) if missing else exc


# --- driver side --------------------------------------------------------------------------------


class S3ExchangeFactory(ExchangeFactory):
    """Per-query set-up and clean-up of the S3 exchange under ``bucket_url``.

    ``levels`` is 1, 2 or ``"auto"`` (see module doc); the other keyword
    options (``timeout_s``, ``compression``, ``threads``, ``max_pool_connections``,
    ``two_level_min``, ``tail_bytes``, ``part_size``, ``max_retries``,
    ``retry_mode``, ``endpoint_url``, ``region``) are passed to the workers.
    ``requests`` counts the driver's own S3 calls (bucket check, abort, clean-up).
    """

    name = "s3"

    def __init__(
        self, bucket_url: str = "s3://squall-exchange/squall", levels: int | str = "auto", **options: Any
    ):
        self.bucket, self.base = parse_bucket_url(bucket_url)
        unknown = set(options) - set(DEFAULTS) - {"endpoint_url", "region", "check_bucket"}
        if unknown:
            raise ExchangeConfigError(f"unknown S3 exchange option(s): {', '.join(sorted(unknown))}")
        choose_levels(ExchangeSpec("q", 0, (0,), (0,)), levels, 1)  # validate
        check_options(options)
        self.levels = levels
        self.options = options
        self.requests: dict[str, int] = {}
        self._client_obj: Any = None

    @property
    def client(self) -> Any:
        if self._client_obj is None:
            self._client_obj = make_client(self.options)
        return self._client_obj

    def _count(self, kind: str, n: int = 1) -> None:
        self.requests[kind] = self.requests.get(kind, 0) + n

    def prepare(self, query_id: str, world_size: int) -> dict[str, Any]:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", query_id):
            raise ExchangeError(f"query id {query_id!r} is not usable in an S3 key")
        if self.options.get("check_bucket", True):
            from botocore.exceptions import BotoCoreError, ClientError

            self._count("head")
            try:
                self.client.head_bucket(Bucket=self.bucket)
            except (ClientError, BotoCoreError) as exc:
                if aws.error_code(exc) in ("404", "NoSuchBucket"):
                    raise ExchangeConfigError(f"exchange bucket {self.bucket!r} does not exist") from None
                raise ExchangeConfigError(aws.describe_error(exc, self.bucket)) from None
        prefix = f"{self.base}/{query_id}" if self.base else query_id
        config: dict[str, Any] = {
            "name": self.name,
            "bucket": self.bucket,
            "prefix": prefix,
            "query_id": query_id,
        }
        config.update({k: v for k, v in self.options.items() if k != "check_bucket"})
        config["levels"] = self.levels
        return config

    def abort(self, config: Mapping[str, Any], reason: str = "query aborted") -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        self._count("put")
        try:
            self.client.put_object(
                Bucket=config["bucket"], Key=f"{config['prefix']}/ABORT", Body=reason.encode()
            )
        except (ClientError, BotoCoreError) as exc:
            log.warning("could not write the abort marker: %s", aws.describe_error(exc, config["bucket"]))

    def cleanup(self, config: Mapping[str, Any]) -> None:
        """Delete every object under the query prefix (list + batched DeleteObjects); never raises."""
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, prefix = config["bucket"], f"{config['prefix']}/"
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for page in pages:
                self._count("list")
                keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
                for i in range(0, len(keys), 1000):
                    self._count("delete")
                    resp = self.client.delete_objects(
                        Bucket=bucket, Delete={"Objects": keys[i : i + 1000], "Quiet": True}
                    )
                    for err in resp.get("Errors", []):
                        log.warning(
                            "could not delete s3://%s/%s: %s", bucket, err.get("Key"), err.get("Code")
                        )
        except (ClientError, BotoCoreError) as exc:
            if aws.error_code(exc) != "NoSuchBucket":
                log.warning(
                    "exchange clean-up of s3://%s/%s incomplete: %s",
                    bucket,
                    prefix,
                    aws.describe_error(exc, bucket),
                )
