"""S3 exchange: Lambada-style write combining, one- or two-level (Lambada, SIGMOD 2020).

Per exchange every sender writes **one** object holding the data of all its
receivers, one byte range each, and puts the *lengths of those ranges in the
object's key*. A receiver LISTs the prefix its senders write to (one LIST per
receiver per polling round returns all of their keys), computes its offsets
from the key names and reads each non-empty range with one ranged GET. No
index GETs, no 404 polling, no per-stage HEADs. Large hash exchanges route
through a √W x √W grid (two levels).

Keys
----
All objects of a query live under ``<prefix>/<query_id>/`` (``config["prefix"]``)::

    <prefix>/<query_id>/<hhhh>-x<exchange>-l<level>-g<group>/s<sender>_<lengths>   one object per (exchange, level, sender)
    <prefix>/<query_id>/<hhhh>-x<exchange>-sizes/s<sender>[_<rows>.<bytes>]     a sender's size (``sizes``): its claim, then its name
    <prefix>/<query_id>/ABORT                                                   the query was aborted; holds the reason
    <prefix>/<query_id>/claims/<item>                                           a claimed work item (below)

Sizes (run-time join decisions, ``sizes``): *before* any data of the exchange, each sender PUTs
``s<sender>`` holding its rows and bytes with ``If-None-Match: *`` (the first copy of a retried or
duplicated sender wins; a later copy GETs the winner's numbers), then an empty object whose key holds those
numbers in base 36; readers LIST that prefix (polling as for data) until every sender's named key is there.
So every copy names the same numbers and every reader reads them from LISTs alone. Two PUTs per sender and
one LIST per reader and round, counted in the exchange's ``put`` and ``list``.

Claims (work stealing): ``claim`` PUTs ``claims/<item>`` with ``If-None-Match: *``; a 412 means
another rank (or an earlier attempt of this one) has it, and one HEAD tells which. The object's
body is the owner's rank padded with spaces to ``rank + 1`` bytes, so its *size* names the
owner and ``claims`` learns every owner from LISTs alone (1 LIST per 1,000 items). On Lambda
these objects are the run state of the stealing scan: a re-invoked rank finds its claims there.
Counted as ``put``/``head``/``list`` like every request, and in ``ExchangeStats.claims``.

``<lengths>`` is ``S.L0.L1…`` in base 36: ``S`` the length of the object's
*schema piece* (at offset 0), then the length of the range of each of the
object's destinations in order (the sorted receivers; the sender's forwarders at
level 1 of two; the receivers a forwarder serves at level 2; one ``-1`` range for a
broadcast). Range *i* starts where range *i-1* ends, so offsets are prefix sums
of the key. ``0`` means "nothing for you": empty pieces are not written, and a
range for the sender itself is kept in memory, never written. When a key would
exceed ``max_key_bytes`` (S3 allows 1,024; a one-level hash exchange with
hundreds of receivers), the key ends in ``_i`` instead and the object carries a
tail index (below): its readers GET the tail first, as version 1 did.

A *group* is the set of senders whose keys share a LIST prefix: one level,
``group = position of the sender // group_size`` (64); level 1 of two, the
sender's grid row (a short last row joins the row above); level 2, the
forwarder's grid column. So every reader LISTs one prefix per round (one level
and W > 64: ⌈W/64⌉). ``hhhh`` (4 hex digits of a hash of query, exchange, level
and group) spreads groups over 65,536 sub-prefixes. Objects are written with
``If-None-Match: *``: a 412 means a retried or duplicated sender already wrote
the same bytes (deterministic encoding, same key), and the first copy wins. A
duplicate whose output differs (row order) writes a second key of the same
sender: every reader takes, per sender, the smallest key it lists; every copy is
a complete partitioning of the sender's rows, so each receiver still sees each
row once.

Request rates (S3: ≥3,500 PUT and 5,500 GET/HEAD/LIST per second per prefix)
--------------------------------------------------------------------------
Every request of an exchange level goes to the object keys of one group, so per
group prefix and level: two levels, g = ⌈√W⌉ senders, each object read by ≤ g
readers: ≤ g PUTs and ≤ g² data GETs, plus g LISTs per polling round. At
W = 4,096 (g = 64): 64 PUTs, 4,096 GETs and, with backoff (≤ 7 rounds in the
first second), ≤ 448 LISTs: ≤ 4,544 GET-class requests per prefix even if the
whole level fell into one second — under 5,500 — and 128 groups per exchange
(64 rows + 64 columns) spread the exchange's 2W·g ≈ 524 k GETs over 128
prefixes. One level, groups of 64 senders read by all W receivers: 64·W GETs
per prefix, under 5,500/s for W ≤ 85 in one second; larger one-level exchanges
(``levels=1`` forced; ``auto`` uses two levels from W = 16) rely on the
exchange lasting ≥ 64·W/5,500 s or on S3's 503 SlowDown + retries.

Object format (version 2, little endian)
----------------------------------------
::

    object  := schema range* [index trailer]       (index + trailer only in "_i" objects)
    schema  := an Arrow IPC stream of the zero-row table (the sender's schema)
    range   := count:uint32  (tag:int32 length:uint64)*count  piece*   (empty range: no bytes)
    piece   := one Arrow IPC *stream*, buffers compressed with ``compression`` (zstd or lz4)
    index   := entry* ; one per range, and one with to = -2 for the schema piece
    entry   := to:int32  tag:int32  offset:uint64  length:uint64      (24 bytes)
    trailer := index_length:uint64  magic:8 bytes b"SQXCHG02"          (16 bytes)

``tag`` is the rank the rows *came from* (the original sender), except in a
two-level first-level object, where it is the final receiver the forwarder
passes the piece on to. Pieces without rows are left out; a receiver that ends
up with no piece at all takes the schema from its own ``send`` (every rank of a
hash exchange sends) or, if it sent nothing, GETs one schema piece
(``get_schema``).

Reading (one round)
-------------------
LIST the group prefix(es) of the senders still missing → for each new sender,
one ranged GET of its range when non-empty (one per ``part_size`` (16 MiB)
slice, in parallel on a thread pool; ``_i`` objects: a suffix GET of the last
``tail_bytes`` first, which also holds ranges near the end) → if senders are
still missing, sleep with exponential backoff (``poll_min_s`` 20 ms …
``poll_max_s`` 1 s, jittered) and LIST again. The ABORT marker is checked with
one HEAD per ``abort_check_s`` (1 s) of waiting — never in a round that finds
everything; ``aborted()``, which workers call between stages, HEADs at most once
per ``abort_check_s`` as well. After ``timeout_s`` the wait raises
:class:`ExchangeTimeout` naming the missing ranks.

Two levels
----------
With W ranks (senders == receivers, a hash exchange) laid out row-major on a
grid of ``g = ⌈√W⌉`` columns, the rows from sender (row a) to receiver (column d)
go first to the *forwarder* (a, d) — or (a-1, d) when the last row is short.
Level 1: each sender writes one object with g ranges (one per forwarder of its
row, each holding one piece per final receiver); level 2: each forwarder reads
its ≤ g incoming ranges (:meth:`S3Exchange.forward`, called by ``receive`` if the
worker did not call it earlier), and writes one object with one range per final
receiver of its column, re-using the IPC bytes unchanged (no decode). Each
receiver then reads ≤ g ranges. So 2W PUTs and ≤ 2W·g GETs instead of W PUTs
and W² GETs.

``levels="auto"`` picks two levels for hash exchanges with senders == receivers
and W ≥ ``two_level_min`` (16). Rationale: with S3 prices (PUT = 12.5 GETs) the
request bill of one level, 12.5W + W² GET-units, exceeds two levels' 25W + 2W^1.5
from W ≈ 22; two levels also cut each receiver's GETs from W to 2g (latency,
per-prefix rates) at the price of moving every byte twice. ``levels=2`` on
another kind of exchange falls back to one level.

Request accounting
------------------
:meth:`S3Exchange.stats` counts every S3 API call once by type (``put``,
``get``, ``list``, ``head``; botocore retries inside a call are counted
separately as ``retries``). Each ``per_exchange`` entry has ``exchange_id``,
``kind``, ``levels``, ``senders``, ``receivers``, ``put`` (including
``put_dup``, the 412s), ``get`` = ``get_data`` + ``get_index`` + ``get_schema``
(+1 to read an abort reason), ``get_miss`` (always 0 since version 2: nobody
GETs a key it has not listed), ``list``, ``poll_rounds`` (LIST rounds, ≥ 1 per
reading rank and level), ``head`` (abort checks), ``bytes_written``/``bytes_read``
(payload bytes of PUTs/GETs), ``bytes_sent``/``bytes_received`` (IPC bytes of the
pieces this rank sent at level 1 and received at the last level, through S3 or
kept in memory), rows and ``retries``. Summed over the ranks of a hash exchange
where every pair has data and nobody waits: one level ``put = W``,
``list = W``, ``get_data = W(W-1)``; two levels ``put ≤ 2W``, ``list ≤ 2W``,
``get_data ≤ 2W(g-1)`` (exactly that for W = g²); ``get_index = 0`` unless keys
overflow; one more ``get_data`` per extra ``part_size`` slice. Waiting adds one
``list`` per receiver per round and one ``head`` per ``abort_check_s``.

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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
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
    check_item,
    check_number,
    claim_result,
    concat,
    format_sizes,
    parse_sizes,
)

log = logging.getLogger(__name__)

MAGIC = b"SQXCHG02"
TRAILER = struct.Struct("<Q8s")
ENTRY = np.dtype([("to", "<i4"), ("tag", "<i4"), ("offset", "<u8"), ("length", "<u8")])
HEADER = np.dtype([("tag", "<i4"), ("length", "<u8")])
COUNT = struct.Struct("<I")
BROADCAST = -1
SCHEMA = -2

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
    "abort_check_s": 1.0,
    "group_size": 64,
    "max_key_bytes": 1024,
}
RETRY_MODES = ("standard", "adaptive", "legacy")
#: S3 error codes a request hands back to its caller as botocore errors (missing keys, duplicate PUTs)
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


def encode_range(pieces: Sequence[tuple[int, pa.Buffer]]) -> bytes:
    """``(tag, ipc_bytes)`` pieces (empty ones left out) as one range: header + pieces; b"" if none."""
    pieces = [(tag, buf) for tag, buf in pieces if buf.size]
    if not pieces:
        return b""
    header = np.array([(tag, buf.size) for tag, buf in pieces], dtype=HEADER).tobytes()
    return COUNT.pack(len(pieces)) + header + b"".join(buf.to_pybytes() for _tag, buf in pieces)


def decode_range(data: pa.Buffer) -> list[tuple[int, pa.Buffer]]:
    """The ``(tag, ipc_bytes)`` pieces of one range (zero-copy slices of ``data``)."""
    if not data.size:
        return []
    (n,) = COUNT.unpack_from(data, 0)
    rows = np.frombuffer(data, dtype=HEADER, count=n, offset=COUNT.size)
    out, pos = [], COUNT.size + n * HEADER.itemsize
    for tag, length in rows.tolist():
        out.append((int(tag), data.slice(pos, int(length))))
        pos += int(length)
    if pos != data.size:
        raise ExchangeError(f"corrupt exchange range: {data.size} bytes, header says {pos}")
    return out


def build_object(
    schema: bytes, ranges: Sequence[tuple[int, bytes]], indexed: bool = False
) -> tuple[bytes, list[Piece]]:
    """Lay out the schema piece and ``(to, range_bytes)`` ranges; with ``indexed``, add index and trailer."""
    index = [Piece(SCHEMA, 0, 0, len(schema))]
    pos = len(schema)
    for to, body in ranges:
        index.append(Piece(to, 0, pos, len(body)))
        pos += len(body)
    parts = [schema, *(body for _to, body in ranges)]
    if indexed:
        entries = np.array([(p.to, p.tag, p.offset, p.length) for p in index], dtype=ENTRY).tobytes()
        parts += [entries, TRAILER.pack(len(entries), MAGIC)]
    return b"".join(parts), index


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


def _b36(n: int) -> str:
    return np.base_repr(n, 36).lower()


def group_prefix(prefix: str, query_id: str, exchange_id: int, level: int, group: int) -> str:
    """The LIST prefix of one group of senders (see module doc, "Keys")."""
    name = f"x{exchange_id}-l{level}-g{group}"
    spread = hashlib.blake2b(f"{query_id}/{name}".encode(), digest_size=2).hexdigest()
    return f"{prefix}/{spread}-{name}/"


def object_key(group: str, sender: int, lengths: Sequence[int] | None) -> str:
    """Key of a sender's object under ``group``: lengths (schema piece first) or ``None`` (tail index)."""
    tail = "i" if lengths is None else ".".join(_b36(n) for n in lengths)
    return f"{group}s{sender}_{tail}"


_KEY = re.compile(r"s(\d+)_(i|[0-9a-z]+(?:\.[0-9a-z]+)*)")


def parse_key(key: str, group: str) -> tuple[int, list[int] | None] | None:
    """``(sender, lengths or None for an indexed object)`` of a listed key; None for a foreign key."""
    m = _KEY.fullmatch(key.removeprefix(group))
    if m is None or not key.startswith(group):
        return None
    body = m.group(2)
    return int(m.group(1)), None if body == "i" else [int(x, 36) for x in body.split(".")]


def sizes_prefix(prefix: str, query_id: str, exchange_id: int) -> str:
    """The LIST prefix of the sizes the senders of one exchange published (module doc, "Keys")."""
    name = f"x{exchange_id}-sizes"
    spread = hashlib.blake2b(f"{query_id}/{name}".encode(), digest_size=2).hexdigest()
    return f"{prefix}/{spread}-{name}/"


_SIZE_KEY = re.compile(r"s(\d+)_([0-9a-z]+)\.([0-9a-z]+)")


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

    def targets(self, sender: int) -> list[int]:
        """The forwarders of ``sender``'s level-1 object, in range order."""
        return sorted({self.forwarder(sender, q) for q in self.ranks})

    def served(self, forwarder: int) -> list[int]:
        """The final receivers of ``forwarder``'s level-2 object, in range order."""
        return sorted({q for _s, q, f in self._routes if f == forwarder})

    def row_group(self, sender: int) -> int:
        """Level-1 LIST group: the sender's row; a short last row joins the row above."""
        return min(self._pos[sender] // self.g, self.width // self.g - 1)

    def column(self, rank: int) -> int:
        """Level-2 LIST group: the forwarder's (and its receivers') column."""
        return self._pos[rank] % self.g


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
    for name in ("timeout_s", "poll_min_s", "poll_max_s", "abort_check_s"):
        if name in options:
            check_number(name, options[name], float, 0)
    for name in ("threads", "max_pool_connections", "two_level_min", "tail_bytes", "part_size", "group_size"):
        if name in options:
            check_number(name, options[name], int, 1)
    if "max_key_bytes" in options:
        check_number("max_key_bytes", options["max_key_bytes"], int, 1)
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
    "get_schema",
    "get_miss",
    "list",
    "poll_rounds",
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

    def add(self, xid: int | None, request: str | None = None, **counters: int) -> None:
        with self._lock:
            if request:
                self._stats.count(request)
            if counters.get("retries"):
                self._stats.count("retries", counters["retries"])
            e = self._entries.get(xid) if xid is not None else None
            if e is not None:
                if request:
                    e[request] += 1
                for name, n in counters.items():
                    e[name] += n
            self._stats.bytes_sent += counters.get("bytes_sent", 0)
            self._stats.bytes_received += counters.get("bytes_received", 0)
            self._stats.rows_sent += counters.get("rows_sent", 0)
            self._stats.rows_received += counters.get("rows_received", 0)


# --- endpoint -----------------------------------------------------------------------------------


@dataclass
class _Source:
    """What a reader found for one sender: its key and (once fetched) the pieces of its range."""

    rank: int
    key: str = ""
    pieces: list[tuple[int, pa.Buffer]] = field(default_factory=list)
    schema: tuple[int, int] | None = None  # (offset, length) of the object's schema piece
    fetch: list[Future[bytes]] = field(default_factory=list)
    indexed: Future[list[tuple[int, pa.Buffer]]] | None = None


def _timeout(xid: int, missing: Sequence[int], timeout_s: float) -> ExchangeTimeout:
    names = ", ".join(str(s) for s in sorted(missing))
    exc = ExchangeTimeout(f"exchange {xid}: no data from rank(s) {names} after {timeout_s:g} s")
    exc.missing = sorted(missing)  # type: ignore[attr-defined]
    return exc


class S3Exchange(Exchange):
    """One rank's endpoint over the query's S3 prefix (keys, object format and costs: module doc).

    Lifecycle: opened by :func:`squall.exchange.base.open_exchange` with the
    factory's config; creates its boto3 client and a thread pool lazily; for each
    exchange ``send`` PUTs this rank's object, ``forward`` (two levels) relays the
    level-1 ranges addressed to this rank, and ``receive`` polls with LISTs,
    fetches and decodes; ``close`` stops the pool.
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
        self.abort_check_s = float(self.opts["abort_check_s"])
        self.max_key_bytes = int(self.opts["max_key_bytes"])
        self._ipc = ipc_options(self.opts["compression"])
        self._ledger = _Ledger(self._stats)
        self._own: dict[tuple[int, int], list[tuple[int, pa.Buffer]]] = {}  # (xid, level) -> (tag, piece)
        self._schemas: dict[int, pa.Schema] = {}
        self._forwarded: set[int] = set()
        self._abort_checked = time.monotonic()
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
        self._schemas.clear()

    def levels(self, spec: ExchangeSpec) -> int:
        return choose_levels(spec, self.opts["levels"], int(self.opts["two_level_min"]))

    def group(self, spec: ExchangeSpec, level: int, sender: int, grid: Grid | None) -> str:
        """The LIST prefix ``sender``'s object of ``level`` goes under (module doc, "Keys")."""
        if grid is None:
            number = sorted(spec.senders).index(sender) // int(self.opts["group_size"])
        else:
            number = grid.row_group(sender) if level == 1 else grid.column(sender)
        return group_prefix(self.prefix, spec.query_id, spec.exchange_id, level, number)

    @staticmethod
    def destinations(spec: ExchangeSpec, level: int, sender: int, grid: Grid | None) -> list[int]:
        """The ranks whose ranges ``sender``'s object of ``level`` holds, in order."""
        if spec.kind == "broadcast":
            return [BROADCAST]
        if grid is None:
            return sorted(spec.receivers)
        return grid.targets(sender) if level == 1 else grid.served(sender)

    def _request(self, xid: int | None, kind: str, key: str, call: Callable[..., Any], **kwargs: Any) -> Any:
        """Run one S3 call, count it under ``kind`` and turn failures into ExchangeError.

        ``NoSuchKey``/``404`` and ``PreconditionFailed`` propagate as botocore errors
        (the callers treat them as a miss and a duplicate). ``kind == "list"``: ``key`` is the prefix.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        where = {"Prefix": key} if kind == "list" else {"Key": key}
        try:
            response = call(Bucket=self.bucket, **where, **kwargs)
        except ClientError as exc:
            self._ledger.add(xid, kind, retries=aws.retries_of(exc.response))
            if aws.error_code(exc) in _PASS_THROUGH:
                raise
            raise aws.denied_error(exc, self.bucket, key) or ExchangeError(
                aws.describe_error(exc, self.bucket, key)
            ) from None
        except BotoCoreError as exc:
            self._ledger.add(xid, kind)
            raise aws.denied_error(exc, self.bucket, key) or ExchangeError(
                aws.describe_error(exc, self.bucket, key)
            ) from None
        self._ledger.add(xid, kind, retries=aws.retries_of(response))
        return response

    def _list(self, xid: int, group: str) -> list[str]:
        """Every key under ``group`` (one LIST per 1,000 keys), in key order."""
        keys: list[str] = []
        token: dict[str, str] = {}
        while True:
            resp = self._request(xid, "list", group, self.client.list_objects_v2, **token)
            keys += [obj["Key"] for obj in resp.get("Contents", [])]
            if not resp.get("IsTruncated"):
                return keys
            token = {"ContinuationToken": resp["NextContinuationToken"]}

    # -- sending

    def send(self, spec: ExchangeSpec, parts: Mapping[int, pa.Table]) -> None:
        levels = self.levels(spec)
        self._ledger.entry(spec, levels)
        schema = next(iter(parts.values())).schema if parts else pa.schema([])
        self._schemas[spec.exchange_id] = schema
        grid = Grid(spec.receivers) if levels == 2 else None
        pieces: list[tuple[int, int, pa.Buffer]] = []
        rows = 0
        if spec.kind == "broadcast":
            table = next(iter(parts.values())) if parts else schema.empty_table()
            if table.num_rows:
                pieces.append((BROADCAST, self.rank, encode_table(table, self._ipc)))
            rows = table.num_rows * len(spec.receivers)
        else:
            for receiver in spec.receivers:
                table = parts.get(receiver)
                if table is None or not table.num_rows:
                    continue  # empty pieces are not written (module doc)
                rows += table.num_rows
                if grid is None:
                    pieces.append((receiver, self.rank, encode_table(table, self._ipc)))
                else:  # level 1: addressed to the forwarder, tagged with the final receiver
                    pieces.append(
                        (grid.forwarder(self.rank, receiver), receiver, encode_table(table, self._ipc))
                    )
        sent = sum(buf.size for _to, _tag, buf in pieces)
        self._ledger.add(spec.exchange_id, rows_sent=rows, bytes_sent=sent)
        self._write(spec, 1, pieces, grid)

    def _write(
        self, spec: ExchangeSpec, level: int, pieces: Iterable[tuple[int, int, pa.Buffer]], grid: Grid | None
    ) -> None:
        """PUT this rank's object for ``level`` unless every destination is this rank itself."""
        xid = spec.exchange_id
        tos = self.destinations(spec, level, self.rank, grid)
        by_to: dict[int, list[tuple[int, pa.Buffer]]] = {to: [] for to in tos}
        for to, tag, buf in pieces:
            by_to[to].append((tag, buf))
        self._own[xid, level] = sorted(
            (pb for to in (self.rank, BROADCAST) for pb in by_to.get(to, [])), key=lambda pb: pb[0]
        )
        if all(to == self.rank for to in tos):
            return
        ranges = [
            (to, b"" if to == self.rank else encode_range(sorted(by_to[to], key=lambda pb: pb[0])))
            for to in tos
        ]
        schema = encode_table(self._schemas[xid].empty_table(), self._ipc).to_pybytes()
        group = self.group(spec, level, self.rank, grid)
        key = object_key(group, self.rank, [len(schema), *(len(body) for _to, body in ranges)])
        indexed = len(key.encode()) > self.max_key_bytes
        if indexed:
            key = object_key(group, self.rank, None)
        body, _index = build_object(schema, ranges, indexed)
        # a 412: a duplicate wrote the same key (same lengths) first; this rank's own pieces stay in memory
        self._put_if_absent(xid, key, body)

    def _put_if_absent(self, xid: int | None, key: str, body: bytes) -> bool:
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
                    raise aws.denied_error(exc, self.bucket, key) or ExchangeError(
                        aws.describe_error(exc, self.bucket, key)
                    ) from None
                # 409: a concurrent conditional write of the same key is in flight; try again
                time.sleep(min(1.0, 0.05 * 2**attempt) * random.random())
                continue
            self._ledger.add(xid, bytes_written=len(body))
            return True
        raise ExchangeError(f"S3 object {key}: conditional PUT kept conflicting")

    # -- claims (module doc, "Keys")

    supports_claims = True

    def claim(self, query_id: str, item: str) -> bool:
        """One conditional PUT (+ one HEAD when the item was taken); True if this rank owns it."""
        from botocore.exceptions import ClientError

        key = f"{self.prefix}/claims/{check_item(item)}"
        if self._put_if_absent(None, key, str(self.rank).encode().ljust(self.rank + 1)):
            return claim_result(self._stats, self.rank, self.rank, True)
        try:
            size = self._request(None, "head", key, self.client.head_object)["ContentLength"]
        except ClientError as exc:
            raise aws.denied_error(exc, self.bucket, key) or ExchangeError(
                aws.describe_error(exc, self.bucket, key)
            ) from None
        return claim_result(self._stats, int(size) - 1, self.rank, False)

    def claims(self, query_id: str, prefix: str = "") -> dict[str, int]:
        """Owners of the claimed items starting with ``prefix``, from LISTs (object size = owner + 1)."""
        base = f"{self.prefix}/claims/"
        out: dict[str, int] = {}
        token: dict[str, str] = {}
        self._stats.count_claim("list")
        while True:
            resp = self._request(None, "list", base + prefix, self.client.list_objects_v2, **token)
            for obj in resp.get("Contents", []):
                out[obj["Key"][len(base) :]] = int(obj["Size"]) - 1
            if not resp.get("IsTruncated"):
                return out
            token = {"ContinuationToken": resp["NextContinuationToken"]}

    # -- sizes (module doc, "Sizes")

    supports_sizes = True

    def sizes(self, spec: ExchangeSpec, rows: int, nbytes: int) -> dict[int, tuple[int, int]]:
        """One conditional PUT of an empty object named by the numbers, then LISTs until every sender's."""
        xid = spec.exchange_id
        self._ledger.entry(spec, self.levels(spec))
        base = sizes_prefix(self.prefix, spec.query_id, xid)
        if self.rank in spec.senders:
            # the first copy of this sender to claim s<rank> fixes the numbers; every copy names them the same
            claimed = f"{base}s{self.rank}"
            if not self._put_if_absent(xid, claimed, format_sizes(rows, nbytes).encode()):
                body = self._request(xid, "get", claimed, self.client.get_object)["Body"].read()
                rows, nbytes = parse_sizes(body.decode())
            self._put_if_absent(xid, f"{claimed}_{_b36(rows)}.{_b36(nbytes)}", b"")
        found: dict[int, tuple[int, int]] = {}
        deadline = time.monotonic() + self.timeout_s
        delay = float(self.opts["poll_min_s"])
        while True:
            for key in self._list(xid, base):  # key order: the smallest key of a sender wins
                m = _SIZE_KEY.fullmatch(key.removeprefix(base))
                if m is not None and int(m.group(1)) in spec.senders and int(m.group(1)) not in found:
                    found[int(m.group(1))] = (int(m.group(2), 36), int(m.group(3), 36))
            missing = sorted(set(spec.senders) - found.keys())
            if not missing:
                return {s: found[s] for s in sorted(found)}
            self._check_abort(xid)
            if time.monotonic() > deadline:
                raise _timeout(xid, missing, self.timeout_s)
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())) * random.uniform(0.5, 1.0))
            delay = min(delay * 2, float(self.opts["poll_max_s"]))

    # -- receiving

    def forward(self, spec: ExchangeSpec) -> None:
        """Two-level step: read the level-1 ranges for this forwarder, write its level-2 object.

        ``receive`` calls it when needed; a worker (or a test) may call it earlier, after ``send``.
        A no-op for one-level exchanges and when already done.
        """
        xid = spec.exchange_id
        if self.levels(spec) != 2 or xid in self._forwarded or self.rank not in spec.receivers:
            return
        self._ledger.entry(spec, 2)
        grid = Grid(spec.receivers)
        sources = self._collect(spec, 1, grid.sources(self.rank), grid)
        pieces = [(final, src.rank, buf) for src in sources for final, buf in src.pieces]
        self._own.pop((xid, 1), None)
        self._write(spec, 2, pieces, grid)
        self._forwarded.add(xid)

    def receive(self, spec: ExchangeSpec) -> pa.Table:
        pieces, schema_of = self._pieces(spec)
        tables = [decode_table(buf) for _tag, buf in pieces]
        received = concat(tables, tables[0].schema if tables else schema_of())
        self._received(spec, received.num_rows, sum(buf.size for _tag, buf in pieces))
        return received

    def receive_pieces(self, spec: ExchangeSpec) -> Iterator[pa.Table]:
        """The fetched ranges decoded one at a time (the encoded bytes are held until the last is decoded)."""
        pieces, schema_of = self._pieces(spec)
        rows = 0
        for _tag, buf in pieces:
            table = decode_table(buf)
            rows += table.num_rows
            yield table
        if not pieces:
            yield (schema_of() or pa.schema([])).empty_table()
        self._received(spec, rows, sum(buf.size for _tag, buf in pieces))

    def _pieces(self, spec: ExchangeSpec) -> tuple[list[tuple[Any, Any]], Callable[[], pa.Schema | None]]:
        """The encoded pieces addressed to this rank in sender order, and how to find the schema when none came."""
        levels = self.levels(spec)
        xid = spec.exchange_id
        self._ledger.entry(spec, levels)
        if levels == 1:
            sources = self._collect(spec, 1, sorted(spec.senders), None)
        else:
            grid = Grid(spec.receivers)
            self.forward(spec)
            try:
                sources = self._collect(spec, 2, grid.forwarders(self.rank), grid)
            except ExchangeTimeout as exc:
                raise self._explain_timeout(spec, grid, exc) from None
        pieces = sorted((pb for src in sources for pb in src.pieces), key=lambda pb: pb[0])
        return pieces, lambda: self._schema_of(xid, sources)

    def _received(self, spec: ExchangeSpec, rows: int, nbytes: int) -> None:
        xid = spec.exchange_id
        self._ledger.add(xid, rows_received=rows, bytes_received=nbytes)
        self._own.pop((xid, self.levels(spec)), None)
        self._forwarded.discard(xid)

    def _collect(
        self, spec: ExchangeSpec, level: int, senders: Sequence[int], grid: Grid | None
    ) -> list[_Source]:
        """Wait for and fetch the ranges addressed to this rank in the ``level`` objects of ``senders``:
        one LIST per group prefix per round (module doc, "Reading")."""
        xid = spec.exchange_id
        found: dict[int, _Source] = {}
        pending: set[int] = set()
        for sender in senders:
            own = self._own.get((xid, level)) if sender == self.rank else None
            if own is not None:
                found[sender] = _Source(sender, pieces=list(own))
            else:
                pending.add(sender)
        groups: dict[str, set[int]] = {}
        for sender in pending:
            groups.setdefault(self.group(spec, level, sender, grid), set()).add(sender)
        deadline = time.monotonic() + self.timeout_s
        delay = float(self.opts["poll_min_s"])
        try:
            while pending:
                self._ledger.add(xid, poll_rounds=1)
                for group, members in sorted(groups.items()):
                    if not members & pending:
                        continue
                    for key in self._list(xid, group):  # key order: the smallest key of a sender wins
                        parsed = parse_key(key, group)
                        if parsed is None or parsed[0] not in pending:
                            continue
                        pending.discard(parsed[0])
                        found[parsed[0]] = self._fetch(spec, level, parsed[0], key, parsed[1], grid)
                if not pending:
                    break
                self._check_abort(xid)
                if time.monotonic() > deadline:
                    raise _timeout(xid, sorted(pending), self.timeout_s)
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())) * random.uniform(0.5, 1.0))
                delay = min(delay * 2, float(self.opts["poll_max_s"]))
            for source in found.values():
                if source.indexed is not None:
                    source.pieces = source.indexed.result()
                elif source.fetch:
                    source.pieces = decode_range(pa.py_buffer(b"".join(f.result() for f in source.fetch)))
        except BaseException:
            for source in found.values():
                futures: list[Future[Any]] = [*source.fetch]
                if source.indexed is not None:
                    futures.append(source.indexed)
                for f in futures:
                    f.cancel()
            raise
        return [found[s] for s in sorted(found)]

    def _fetch(
        self,
        spec: ExchangeSpec,
        level: int,
        sender: int,
        key: str,
        lengths: list[int] | None,
        grid: Grid | None,
    ) -> _Source:
        """Start the GETs of this rank's range in ``sender``'s object (none when the range is empty)."""
        xid = spec.exchange_id
        source = _Source(sender, key)
        if lengths is None:
            source.indexed = self._pool.submit(self._read_indexed, xid, source)
            return source
        tos = self.destinations(spec, level, sender, grid)
        if len(lengths) != len(tos) + 1:
            raise ExchangeError(f"corrupt exchange key {key}: {len(lengths) - 1} ranges for {len(tos)} ranks")
        source.schema = (0, lengths[0])
        offset = lengths[0]
        for to, n in zip(tos, lengths[1:], strict=True):
            if n and to in (self.rank, BROADCAST):
                source.fetch = [
                    self._pool.submit(self._get_range, xid, key, a, b)
                    for a, b in split_range(offset, offset + n, self.part_size)
                ]
            offset += n
        return source

    def _read_indexed(self, xid: int, source: _Source) -> list[tuple[int, pa.Buffer]]:
        """An ``_i`` object (key too long for the lengths): suffix GET of the tail, then the range."""
        key = source.key
        resp = self._request(xid, "get", key, self.client.get_object, Range=f"bytes=-{self.tail_bytes}")
        tail = resp["Body"].read()
        total = int(str(resp.get("ContentRange", "")).rpartition("/")[2] or len(tail))
        self._ledger.add(xid, get_index=1, bytes_read=len(tail))
        parsed = parse_index(tail, key)
        if isinstance(parsed, int):  # huge index: fetch the rest of it
            tail = self._get_range(xid, key, total - parsed, total - len(tail), "get_index") + tail
            parsed = parse_index(tail, key)
            assert not isinstance(parsed, int)
        tail_start = total - len(tail)
        mine = None
        for p in parsed[1]:
            if p.to == SCHEMA:
                source.schema = (p.offset, p.length)
            elif p.to in (self.rank, BROADCAST):
                mine = p
        if mine is None or not mine.length:
            return []
        if mine.offset >= tail_start:
            data = pa.py_buffer(tail).slice(mine.offset - tail_start, mine.length)
        else:
            parts = split_range(mine.offset, mine.offset + mine.length, self.part_size)
            data = pa.py_buffer(b"".join(self._get_range(xid, key, a, b) for a, b in parts))
        return decode_range(data)

    def _get_range(self, xid: int, key: str, lo: int, hi: int, kind: str = "get_data") -> bytes:
        resp = self._request(xid, "get", key, self.client.get_object, Range=f"bytes={lo}-{hi - 1}")
        body = resp["Body"].read()
        if len(body) != hi - lo:
            raise ExchangeError(f"short read from s3://{self.bucket}/{key}: {len(body)} of {hi - lo} bytes")
        self._ledger.add(xid, None, bytes_read=len(body), **{kind: 1})
        return body

    def _schema_of(self, xid: int, sources: Sequence[_Source]) -> pa.Schema | None:
        """The schema when no piece arrived: this rank's own send, else one GET of a schema piece."""
        known = self._schemas.get(xid)
        if known is not None:
            return known
        for source in sources:
            if source.key and source.schema is not None and source.schema[1]:
                lo, n = source.schema
                return decode_table(
                    pa.py_buffer(self._get_range(xid, source.key, lo, lo + n, "get_schema"))
                ).schema
        return None

    # -- abort

    def _abort_due(self) -> bool:
        """At most one abort HEAD per ``abort_check_s`` (module doc)."""
        now = time.monotonic()
        if now - self._abort_checked < self.abort_check_s:
            return False
        self._abort_checked = now
        return True

    def aborted(self) -> bool:
        """Whether the query's ABORT marker exists: one HEAD (``head`` in ``requests``) at most per
        ``abort_check_s``; False in between."""
        from botocore.exceptions import BotoCoreError, ClientError

        if not self._abort_due():
            return False
        self._stats.count("head")
        try:
            self.client.head_object(Bucket=self.bucket, Key=f"{self.prefix}/ABORT")
        except (ClientError, BotoCoreError):
            return False
        return True

    def _check_abort(self, xid: int) -> None:
        from botocore.exceptions import ClientError

        if not self._abort_due():
            return
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
        xid = spec.exchange_id
        suspects = {s for f in getattr(exc, "missing", []) for s in [f, *grid.sources(f)]} - {self.rank}
        seen: set[int] = set()
        try:
            for group in sorted({self.group(spec, 1, s, grid) for s in suspects}):
                seen |= {p[0] for key in self._list(xid, group) if (p := parse_key(key, group)) is not None}
        except ExchangeError:
            return exc
        missing = sorted(suspects - seen)
        return _timeout(xid, missing, self.timeout_s) if missing else exc


# --- driver side --------------------------------------------------------------------------------


class S3ExchangeFactory(ExchangeFactory):
    """Per-query set-up and clean-up of the S3 exchange under ``bucket_url``.

    ``levels`` is 1, 2 or ``"auto"`` (see module doc); the other keyword
    options (``timeout_s``, ``compression``, ``threads``, ``max_pool_connections``,
    ``two_level_min``, ``tail_bytes``, ``part_size``, ``max_retries``,
    ``retry_mode``, ``poll_min_s``, ``poll_max_s``, ``abort_check_s``, ``group_size``,
    ``max_key_bytes``, ``endpoint_url``, ``region``) are passed to the workers.
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

            try:
                if (
                    self.base
                ):  # a LIST inside the prefix: what a role allowed to list only its prefixes may do
                    self._count("list")
                    self.client.list_objects_v2(Bucket=self.bucket, Prefix=f"{self.base}/", MaxKeys=1)
                else:  # HeadBucket needs s3:ListBucket on the whole bucket
                    self._count("head")
                    self.client.head_bucket(Bucket=self.bucket)
            except (ClientError, BotoCoreError) as exc:
                if aws.error_code(exc) in ("404", "NoSuchBucket"):
                    raise ExchangeConfigError(f"exchange bucket {self.bucket!r} does not exist") from None
                raise aws.denied_error(exc, self.bucket) or ExchangeConfigError(
                    aws.describe_error(exc, self.bucket)
                ) from None
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
