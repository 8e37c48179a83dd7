"""Fabric exchange: Barthels-style RDMA shuffle over libfabric (``rdma-backend/``).

Every rank opens one ``FI_EP_RDM`` endpoint (:class:`Endpoint`, a thin layer
over the cffi module ``squall_fabric._native`` built by ``make native``). Data
moves only by one-sided ``fi_write`` with ``FI_DELIVERY_COMPLETE`` into
receive windows; small control messages (``fi_send``) tell a target what it
cannot see by itself, since EFA has no ``FI_RMA_EVENT``.

Per exchange, between a sender ``s`` and a remote receiver ``r``::

    s -> r  HIST(x, size)        s's Arrow IPC stream for r is `size` bytes
    r -> s  WIN(x, addr, key)    once r has every sender's HIST: r registered ONE
                                 window of exactly sum(sizes) (one slot per sender,
                                 sender order) and tells each sender its slot's address
    s => r  fi_write ...         s writes its stream into its own disjoint slot
    s -> r  DONE(x)              after the writes completed at s (delivery complete)

The HIST messages of all senders form the exchange's global histogram (each
receiver needs only its column of it); DONE messages are the completion
counting, and a receiver returns when it has counted one per sender: that is
the per-exchange barrier between the senders and a receiver. Windows are never
reused, so no global barrier is needed between exchanges; :meth:`FabricExchange.barrier`
offers one anyway. A receiver reads each sender's slot of its window as an
Arrow IPC stream without copying (the returned table keeps the window alive).
A sender computes the stream sizes without serializing (``MockOutputStream``),
then serializes each partition straight into a registered send arena and posts
its write as soon as that receiver's window is known, while it serializes the
next partition. A rank's own partition never touches the fabric.

Communication schedule (Neo-Join §III-C, ``schedule="open-shop"``; the default
across machines): every sender also puts its row of stream sizes on the
rendezvous (``rows/<exchange>/<rank>``), and every participant computes the same
open-shop schedule from the whole matrix (:mod:`squall.exchange.schedule`). A
sender then writes its streams in the schedule's transfers (chunks of a slot, in
phase order, one at a time), and the receivers pace it::

    s => r  fi_write chunk          phase p of the schedule
    s -> r  CHUNK(x, p)             the chunk landed (DONE(x, size, p + 1) for the pair's last)
    r -> s' GO(x, q)                r's next transfer (phase q, from s') may start

A receiver's first transfer needs no GO. So no receiver ever has two senders'
writes in flight and no sender writes to two receivers at once, without a global
barrier between phases. Exchanges whose busiest link carries less than
``schedule_min_bytes``, or where no link is shared, are not scheduled; their
stats say why.

Out-of-band rendezvous: :class:`FabricExchangeFactory.prepare` starts a tiny
TCP key-value server (:class:`RendezvousServer`, a thread in the driver) and
puts its ``host:port`` into the config. Ranks publish their ``fi_getname``
address there (``addr/<rank>``), look their peers up, mark finished sends
(``done/<exchange>/<rank>``, so a retried worker's duplicate send is skipped)
and poll the abort flag. Window addresses and MR keys travel in WIN messages.
Sizes (``sizes``, run-time join decisions) are put-if-absent values ``sizes/<exchange>/<rank>`` on the
rendezvous, read back with one ``get`` per polling round (the fabric progresses meanwhile).
Claims (work stealing, ``claim``/``claims``) are arbitrated by the rendezvous too:
its ``claim`` op is a put-if-absent of ``claim/<item>`` under the server's lock that
answers with the owner, its ``list`` op returns the owners under a prefix — one small
request each, from any process on any host.
On a cluster run the factory with ``host="0.0.0.0"`` and ``advertise=<head
node address>``.

Lifecycle: the driver calls ``prepare`` (starts the rendezvous), hands the
config to every rank, and ``cleanup`` (stops it) when the query ends. A rank
opens :class:`FabricExchange` (endpoint + publish address), calls
``send``/``receive`` in plan order and ``close`` (waits for its last
operations, deregisters, closes the endpoint). Manual progress: every wait in
this module polls the completion queue, so a rank inside ``send`` or
``receive`` keeps the transfers that target it moving.

Provider: ``provider`` in the config, else ``FI_PROVIDER``; e.g. ``tcp`` (with
``FI_TCP_IFACE=lo`` on one machine) or ``shm``; ``efa`` on AWS. Without
libfabric or the native module this module still imports; ``prepare`` and
opening an endpoint raise :class:`ExchangeError` saying what to install.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import os
import secrets
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from squall.exchange.base import (
    Exchange,
    ExchangeAborted,
    ExchangeConfigError,
    ExchangeError,
    ExchangeFactory,
    ExchangeSpec,
    ExchangeStats,
    ExchangeTimeout,
    check_item,
    check_number,
    claim_result,
    concat,
    format_sizes,
    parse_sizes,
)
from squall.exchange.schedule import Schedule, Transfer, bound, open_shop

DEFAULT_TIMEOUT_S = 600.0
NATIVE_MODULE = "squall_fabric._native"
INSTALL_HINT = (
    "build it with `make native` in the Squall checkout (as root it apt-installs the Debian package "
    "libfabric-dev; otherwise run `apt-get install libfabric-dev pkg-config gcc` first)"
)
SLOT_ALIGN = 8  # Arrow IPC streams are multiples of 8 bytes: slots are packed without gaps
ARENA_MIN = 1 << 20
POLL_MS = 2
ABORT_CHECK_S = 0.1
RESOLVE_EVERY_S = 0.005

EV_WRITE, EV_SEND, EV_RECV = 1, 2, 3


class _Deadline(Exception):
    """Internal: a wait passed its deadline (turned into ExchangeTimeout with the missing ranks)."""


class FabricError(ExchangeError):
    """A libfabric operation failed; the message carries libfabric's reason."""


class FabricTimeout(FabricError, ExchangeTimeout):
    """A libfabric operation could not be posted in time (the peer makes no progress)."""


class FabricUnavailable(ExchangeConfigError):
    """The native module or libfabric is missing on this machine (asked for the fabric exchange: a setup mistake)."""


class FabricOpenError(FabricError, ExchangeConfigError):
    """No libfabric endpoint for the requested provider/interface (e.g. an unknown provider name)."""


# --- native module --------------------------------------------------------------------------------

_native_cache: tuple[Any, Any] | None = None


def load_native() -> tuple[Any, Any]:
    """Return ``(ffi, lib)`` of the native module or raise :class:`FabricUnavailable`."""
    global _native_cache
    if _native_cache is None:
        try:
            module = importlib.import_module(NATIVE_MODULE)
        except ImportError as exc:
            detail = str(exc)
            if "libfabric" in detail:
                what = f"the libfabric shared library is missing ({detail}); install the Debian package libfabric1"
            else:
                what = f"the native module {NATIVE_MODULE} is not built ({detail})"
            raise FabricUnavailable(f"fabric exchange unavailable: {what}; {INSTALL_HINT}") from exc
        _native_cache = (module.ffi, module.lib)
    return _native_cache


def native_available() -> str | None:
    """None when the native module loads, else the reason it does not."""
    try:
        load_native()
    except FabricUnavailable as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Event:
    """A finished operation reported by :meth:`Endpoint.poll`."""

    kind: int  # EV_WRITE, EV_SEND or EV_RECV
    err: int  # 0 or a positive FI_E* code
    tag: int
    length: int
    data: bytes = b""


class MemoryRegion:
    """A registered buffer. Keeps the Python object that owns the memory alive."""

    def __init__(self, endpoint: Endpoint, owner: Any, remote_write: bool) -> None:
        ffi, lib = endpoint.ffi, endpoint.lib
        self.endpoint = endpoint
        self.owner = owner
        self._cbuf = ffi.from_buffer("char[]", owner, require_writable=remote_write)
        self.length = len(self._cbuf)
        out = ffi.new("sqf_mr **")
        endpoint._check(
            lib.sqf_mr_reg(endpoint._ptr(), self._cbuf, self.length, int(remote_write), out), "register"
        )
        self._mr = out[0]
        self.key: int = int(lib.sqf_mr_key(self._mr))
        #: the address a peer writes to for offset 0 (virtual address or 0, per FI_MR_VIRT_ADDR)
        self.remote_base: int = int(lib.sqf_mr_remote_base(self._mr))
        endpoint._mrs.add(self)

    @property
    def address(self) -> int:
        """Virtual address of the first byte."""
        return int(self.endpoint.ffi.cast("uintptr_t", self._cbuf))

    def close(self) -> None:
        if self._mr is not None:
            mr, self._mr = self._mr, None
            self.endpoint._mrs.discard(self)
            if not self.endpoint.closed:
                self.endpoint._check(self.endpoint.lib.sqf_mr_close(mr), "deregister")


class Endpoint:
    """One ``FI_EP_RDM`` endpoint of the native core; used by one thread at a time."""

    def __init__(self, provider: str | None = None, max_events: int = 256) -> None:
        self.ffi, self.lib = load_native()
        ffi, lib = self.ffi, self.lib
        out = ffi.new("sqf_ep **")
        err = ffi.new("char[512]")
        rc = lib.sqf_open(provider.encode() if provider else ffi.NULL, out, err, 512)
        if rc:
            hint = (
                " (is FI_TCP_IFACE set to an existing interface?)" if provider and "tcp" in provider else ""
            )
            raise FabricOpenError(
                f"cannot open a libfabric endpoint: {ffi.string(err).decode(errors='replace')}{hint}"
            )
        self._ep: Any = out[0]
        self._events = ffi.new("sqf_event[]", max_events)
        self._max_events = max_events
        self._mrs: set[MemoryRegion] = set()
        info = ffi.new("sqf_info *")
        try:
            self._check(lib.sqf_get_info(self._ep, info), "fi_getinfo")
        except FabricError:
            self.close(linger_ms=0)
            raise
        self.info: dict[str, Any] = {
            "provider": ffi.string(info.provider).decode(),
            "fabric": ffi.string(info.fabric).decode(),
            "domain": ffi.string(info.domain).decode(),
            "mr_mode": int(info.mr_mode),
            "mr_key_size": int(info.mr_key_size),
            "max_msg_size": int(info.max_msg_size),
            "tx_size": int(info.tx_size),
            "rx_size": int(info.rx_size),
            "inject_size": int(info.inject_size),
            "chunk_size": int(info.chunk_size),
            "virt_addr": bool(info.virt_addr),
            "addrlen": int(info.addrlen),
            "cq_wait": bool(info.cq_wait),
        }

    def counters(self) -> dict[str, int]:
        """Native counters: ``eagain`` (posts retried after -FI_EAGAIN), ``pending`` operations."""
        info = self.ffi.new("sqf_info *")
        self._check(self.lib.sqf_get_info(self._ptr(), info), "fi_getinfo")
        return {"eagain": int(info.eagain), "pending": self.pending}

    @property
    def closed(self) -> bool:
        return self._ep is None

    def _ptr(self) -> Any:
        if self._ep is None:
            raise FabricError("the endpoint is closed")
        return self._ep

    def _check(self, rc: int, what: str) -> int:
        if rc < 0:
            msg = (
                self.ffi.string(self.lib.sqf_last_error(self._ep)).decode(errors="replace")
                if self._ep
                else ""
            )
            error = FabricTimeout if rc == -errno.ETIMEDOUT else FabricError
            raise error(f"{what}: {msg or self.ffi.string(self.lib.sqf_strerror(rc)).decode()}")
        return rc

    def name(self) -> bytes:
        """This endpoint's address (``fi_getname``), to publish out of band."""
        size = max(self.info["addrlen"], 16)
        buf = self.ffi.new("char[]", size)
        length = self.ffi.new("size_t *", size)
        self._check(self.lib.sqf_getname(self._ptr(), buf, length), "fi_getname")
        return bytes(self.ffi.buffer(buf, length[0]))

    def insert(self, address: bytes) -> int:
        """Add a peer address to the address vector; returns its ``fi_addr``."""
        out = self.ffi.new("uint64_t *")
        self._check(self.lib.sqf_av_insert(self._ptr(), address, out), "fi_av_insert")
        return int(out[0])

    def register(self, buffer: Any, remote_write: bool = False) -> MemoryRegion:
        """Register a C-contiguous buffer (numpy array, pyarrow buffer, bytearray) without copying."""
        return MemoryRegion(self, buffer, remote_write)

    def set_chunk_size(self, nbytes: int) -> None:
        self._check(self.lib.sqf_set_chunk_size(self._ptr(), nbytes), "chunk size")

    def write(
        self,
        region: MemoryRegion,
        offset: int,
        length: int,
        dest: int,
        remote_addr: int,
        key: int,
        tag: int,
        timeout_ms: int = -1,
    ) -> None:
        """Post ``fi_write``s of ``region[offset:offset+length]``; an EV_WRITE event with ``tag`` follows."""
        if region._mr is None:
            raise FabricError("write from a closed memory region")
        self._check(
            self.lib.sqf_write(
                self._ptr(), region._mr, offset, length, dest, remote_addr, key, tag, int(timeout_ms)
            ),
            "fi_write",
        )

    def send(self, dest: int, payload: bytes, tag: int, timeout_ms: int = -1) -> None:
        """Send a control message (at most 64 bytes); an EV_SEND event with ``tag`` follows."""
        self._check(
            self.lib.sqf_send(self._ptr(), dest, payload, len(payload), tag, int(timeout_ms)), "fi_send"
        )

    def poll(self, timeout_ms: int = 0) -> list[Event]:
        """Progress the completion queue; finished operations (waits up to ``timeout_ms`` for one)."""
        n = self._check(
            self.lib.sqf_poll(self._ptr(), self._events, self._max_events, int(timeout_ms)), "poll"
        )
        out = []
        for i in range(n):
            ev = self._events[i]
            data = bytes(self.ffi.buffer(ev.data, min(int(ev.len), 64))) if ev.kind == EV_RECV else b""
            out.append(Event(int(ev.kind), int(ev.err), int(ev.tag), int(ev.len), data))
        return out

    @property
    def pending(self) -> int:
        return int(self.lib.sqf_pending(self._ptr()))

    def error_text(self, code: int) -> str:
        return self.ffi.string(self.lib.sqf_strerror(code)).decode()

    def close(self, linger_ms: int = 1000) -> None:
        """Wait up to ``linger_ms`` for outstanding operations, then release everything."""
        if self._ep is None:
            return
        for region in list(self._mrs):
            region._mr = None  # closed by sqf_close below
        self._mrs.clear()
        ep, self._ep = self._ep, None
        rc = self.lib.sqf_close(ep, int(linger_ms))
        if rc < 0:
            raise FabricError(f"closing the endpoint: {self.ffi.string(self.lib.sqf_strerror(rc)).decode()}")

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- rendezvous: a tiny TCP key-value store -------------------------------------------------------

_LEN = struct.Struct(">I")


def _send_frame(sock: socket.socket, obj: Mapping[str, Any]) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("rendezvous connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv_frame(sock: socket.socket) -> dict[str, Any]:
    (n,) = _LEN.unpack(_recv_exact(sock, 4))
    return json.loads(_recv_exact(sock, n))


class RendezvousServer:
    """Key-value store for one query, served on TCP by a daemon thread.

    Requests (length-prefixed JSON): ``put`` {items}, ``get`` {keys, wait_ms}
    (waits until every key exists, the wait ends or the query is aborted),
    ``setnx`` {key, value} (stores the value unless the key exists; answers
    ``value``, the stored one, and ``new``), ``list`` {prefix} (``items``: every
    key with that prefix and its value) and ``abort`` {reason}. Every answer
    carries ``abort`` (the reason or null).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._store: dict[str, str] = {}
        self._cond = threading.Condition()
        self.aborted: str | None = None
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with contextlib.suppress(ConnectionError, OSError, ValueError):
                    while True:
                        _send_frame(sock, outer._answer(_recv_frame(sock)))

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((host, port), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="squall-rendezvous", daemon=True
        )
        self._thread.start()

    def _answer(self, req: Mapping[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        with self._cond:
            if op == "put":
                self._store.update(req["items"])
                self._cond.notify_all()
                return {"abort": self.aborted}
            if op == "setnx":
                key = str(req["key"])
                new = key not in self._store
                if new:
                    self._store[key] = str(req["value"])
                    self._cond.notify_all()
                return {"value": self._store[key], "new": new, "abort": self.aborted}
            if op == "list":
                prefix = str(req["prefix"])
                items = {k: v for k, v in self._store.items() if k.startswith(prefix)}
                return {"items": items, "abort": self.aborted}
            if op == "abort":
                self.aborted = self.aborted or str(req.get("reason") or "query aborted")
                self._cond.notify_all()
                return {"abort": self.aborted}
            if op == "get":
                keys = list(req["keys"])
                deadline = time.monotonic() + float(req.get("wait_ms", 0)) / 1000
                while self.aborted is None and not all(k in self._store for k in keys):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                return {"values": {k: self._store.get(k) for k in keys}, "abort": self.aborted}
        return {"error": f"unknown op {op!r}", "abort": self.aborted}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class RendezvousClient:
    """A rank's connection to the query's :class:`RendezvousServer`."""

    def __init__(self, address: str, timeout_s: float = 30.0) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        try:
            self._sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        except OSError as exc:
            raise ExchangeError(f"cannot reach the fabric rendezvous at {address}: {exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.requests = 0

    def call(self, req: Mapping[str, Any]) -> dict[str, Any]:
        self.requests += 1
        wait_s = float(req.get("wait_ms", 0)) / 1000
        self._sock.settimeout(30.0 + wait_s)
        try:
            _send_frame(self._sock, req)
            return _recv_frame(self._sock)
        except (OSError, ValueError) as exc:
            raise ExchangeError(f"fabric rendezvous at {self.address} failed: {exc}") from exc

    def put(self, items: Mapping[str, str]) -> str | None:
        """Store items; returns the abort reason, if any."""
        return self.call({"op": "put", "items": dict(items)}).get("abort")

    def get(self, keys: Sequence[str], wait_ms: int = 0) -> tuple[dict[str, str | None], str | None]:
        ans = self.call({"op": "get", "keys": list(keys), "wait_ms": wait_ms})
        return ans["values"], ans.get("abort")

    def setnx(self, key: str, value: str) -> tuple[str, bool, str | None]:
        """Store ``value`` unless ``key`` exists: (stored value, whether it is new, abort reason)."""
        ans = self.call({"op": "setnx", "key": key, "value": value})
        return ans["value"], bool(ans["new"]), ans.get("abort")

    def list(self, prefix: str) -> tuple[dict[str, str], str | None]:
        """Every key starting with ``prefix`` and its value, and the abort reason."""
        ans = self.call({"op": "list", "prefix": prefix})
        return ans["items"], ans.get("abort")

    def abort(self, reason: str) -> None:
        self.call({"op": "abort", "reason": reason})

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


# --- the exchange ---------------------------------------------------------------------------------

# kind u8, rank u32 (the message's author), exchange u64, then three u64 fields
_MSG = struct.Struct("<BxxxIQQQQ")
HIST, WIN, DONE, SKIP, CHUNK, GO = 1, 2, 3, 4, 5, 6
_WRITE_TAG = 16  # tag kind of an fi_write (the others are message kinds)
_KIND_NAMES = {HIST: "hist", WIN: "win", DONE: "done", SKIP: "skip", CHUNK: "chunk", GO: "go"}
SCHEDULES = ("auto", "open-shop", "rotated")
SCHEDULE_MIN_BYTES = 4 << 20  # the busiest link's bytes below which an exchange is not scheduled
SCHEDULE_QUANTUM = 256 << 10  # no scheduled transfer is shorter (but a pair's last): ~ bandwidth * latency
SCHEDULE_MAX_RANKS = 32  # the schedule costs O(W⁴) in the worst case: ~0.1 s at 32 ranks


def _align(n: int) -> int:
    return (n + SLOT_ALIGN - 1) // SLOT_ALIGN * SLOT_ALIGN


def ipc_size(table: pa.Table) -> int:
    """Exact size of ``table`` as an Arrow IPC stream, computed without serializing."""
    sink = pa.MockOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return int(sink.size())


def write_ipc_into(table: pa.Table, target: np.ndarray) -> None:
    """Serialize ``table`` as an Arrow IPC stream into ``target`` (exactly its size)."""
    sink = pa.FixedSizeBufferWriter(pa.py_buffer(target))
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    if sink.tell() != target.nbytes:
        raise ExchangeError(f"Arrow IPC stream is {sink.tell()} bytes, expected {target.nbytes}")


def resolve_schedule(schedule: str, provider: str | None, one_machine: bool) -> tuple[str, str]:
    """The schedule an exchange uses (``open-shop`` or ``rotated``) and why, from the ``schedule`` option."""
    if schedule not in SCHEDULES:
        raise ExchangeConfigError(f"fabric schedule must be one of {', '.join(SCHEDULES)}, not {schedule!r}")
    if schedule != "auto":
        return schedule, f"option schedule={schedule}"
    if (provider or "").startswith("shm") or one_machine:
        return "rotated", "every rank on this machine: no network link to share (schedule=auto)"
    return "open-shop", "schedule=auto"


@dataclass
class _XState:
    """What this rank knows of one exchange, as sender and as receiver."""

    spec: ExchangeSpec | None = None
    # receiver side
    hist: dict[int, tuple[int, int]] = field(default_factory=dict)  # sender -> (size, nonce)
    done: set[int] = field(default_factory=set)
    opened: bool = False
    window: np.ndarray | None = None
    window_mr: MemoryRegion | None = None
    offsets: dict[int, int] = field(default_factory=dict)
    local: pa.Table | None = None
    received: bool = False
    # sender side
    wins: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # receiver -> (addr, key, size)
    skipped: set[int] = field(default_factory=set)
    written: set[int] = field(default_factory=set)
    delivered: set[int] = field(default_factory=set)
    error: str | None = None
    # communication schedule (exchange/schedule.py), the same on every participant
    schedule_decided: bool = False
    schedule: Schedule | None = None
    schedule_note: str = ""
    schedule_s: float = 0.0
    incoming: list[tuple[int, Transfer]] | None = None  # receiver: its transfers in phase order
    chunks: set[int] = field(default_factory=set)  # receiver: phases whose transfer to it completed
    released: int = 0  # receiver: transfers released (the first needs no GO)
    go_log: list[tuple[int, int]] = field(default_factory=list)  # receiver: (sender, phase) GOs sent
    go: set[int] = field(default_factory=set)  # sender: phases a receiver released
    chunk_written: set[int] = field(default_factory=set)  # sender: phases whose write completed


@dataclass
class _Payload:
    """A sender's streams of one exchange: tables by receiver, sizes, arena slots, what is done."""

    tables: Mapping[int, pa.Table]
    sizes: dict[int, int]
    slots: dict[int, int]
    arena: np.ndarray
    arena_mr: MemoryRegion
    serialized: set[int]
    serialized_slots: set[int]
    announced: set[int] = field(default_factory=set)
    next_resolve: float = 0.0


class FabricExchange(Exchange):
    """One rank's endpoint of the fabric exchange (see module doc)."""

    name = "fabric"

    def __init__(self, config: Mapping[str, Any], rank: int, world_size: int) -> None:
        super().__init__(config, rank, world_size)
        self.timeout_s = float(config.get("timeout_s", DEFAULT_TIMEOUT_S))
        for key, value in (config.get("env") or {}).items():
            os.environ.setdefault(key, str(value))
        self.provider: str | None = config.get("provider") or os.environ.get("FI_PROVIDER") or None
        self._peers: dict[int, tuple[int, int]] = {}  # rank -> (fi_addr, nonce)
        self._xs: dict[int, _XState] = {}
        self._tags: dict[int, tuple[int, int, int]] = {}  # tag -> (kind, exchange, peer)
        self._next_tag = 1
        self._arena: np.ndarray | None = None
        self._arena_mr: MemoryRegion | None = None
        self._sent: set[int] = set()
        self._next_abort_check = 0.0
        self._nonce = secrets.randbits(62)
        self._ep: Endpoint | None = None
        self.schedule, self.schedule_why = resolve_schedule(
            str(config.get("schedule") or "auto"), self.provider, bool(config.get("one_machine"))
        )
        self.schedule_min_bytes = int(config.get("schedule_min_bytes", SCHEDULE_MIN_BYTES))
        self.schedule_quantum = max(1, int(config.get("schedule_quantum", SCHEDULE_QUANTUM)))
        self._chunk_tags: dict[int, tuple[int, bool]] = {}  # write tag -> (phase, last chunk of the pair)
        #: one entry per scheduled write: (exchange, phase, receiver, posted, completed), monotonic seconds
        self.transfer_log: list[tuple[int, int, int, float, float]] = []
        self._posted_at: dict[int, float] = {}
        load_native()  # a clear FabricUnavailable before anything else
        self._rv = RendezvousClient(config["rendezvous"])
        try:
            self._ep = Endpoint(self.provider)
            self._check_abort(self._rv.put({f"addr/{rank}": f"{self._ep.name().hex()}:{self._nonce}"}))
        except BaseException:
            self.close()
            raise

    # -- plumbing ------------------------------------------------------------------------------------

    @property
    def endpoint(self) -> Endpoint:
        if self._ep is None:
            raise ExchangeError("the fabric exchange is closed")
        return self._ep

    def _state(self, x: int, spec: ExchangeSpec | None = None) -> _XState:
        st = self._xs.get(x)
        if st is None:
            st = self._xs[x] = _XState()
        if spec is not None and st.spec is None:
            st.spec = spec
        return st

    def _tag(self, kind: int, x: int, peer: int) -> int:
        tag = self._next_tag
        self._next_tag += 1
        self._tags[tag] = (kind, x, peer)
        return tag

    def _check_abort(self, reason: str | None) -> None:
        if reason is not None:
            raise ExchangeAborted(reason)

    def _poll_abort(self) -> None:
        now = time.monotonic()
        if now >= self._next_abort_check:
            self._next_abort_check = now + ABORT_CHECK_S
            self._check_abort(self._rv.get([])[1])

    def _parse_addr(self, value: str) -> tuple[bytes, int]:
        name, _, nonce = value.partition(":")
        return bytes.fromhex(name), int(nonce)

    def _resolve(self, ranks: Sequence[int]) -> list[int]:
        """Look up peers not yet in the address vector (no waiting); returns those still unknown."""
        missing = [r for r in ranks if r not in self._peers]
        if not missing:
            return []
        values, abort = self._rv.get([f"addr/{r}" for r in missing])
        self._check_abort(abort)
        for r in missing:
            value = values[f"addr/{r}"]
            if value is not None:
                name, nonce = self._parse_addr(value)
                self._peers[r] = (self.endpoint.insert(name), nonce)
        return [r for r in missing if r not in self._peers]

    def _peer(self, rank: int, nonce: int | None = None) -> int:
        """fi_addr of ``rank``; refreshed when its endpoint changed (a restarted worker)."""
        known = self._peers.get(rank)
        if known is not None and (nonce is None or known[1] == nonce):
            return known[0]
        values, abort = self._rv.get([f"addr/{rank}"], wait_ms=int(self.timeout_s * 1000))
        self._check_abort(abort)
        value = values[f"addr/{rank}"]
        if value is None:
            raise ExchangeTimeout(f"no fabric address from rank(s) {rank} after {self.timeout_s:.0f} s")
        name, got = self._parse_addr(value)
        self._peers[rank] = (self.endpoint.insert(name), got)
        return self._peers[rank][0]

    def _message(self, kind: int, x: int, dest_rank: int, a: int = 0, b: int = 0, c: int = 0) -> None:
        """Send a control message; while the transmit queue stays full (a peer that stopped, e.g. after
        another rank's error) check the abort flag every second instead of blocking for ``timeout_s``
        (a send that timed out posted nothing, so it is simply tried again)."""
        payload = _MSG.pack(kind, self.rank, x, a, b, c)
        dest = self._peer(dest_rank)
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                self.endpoint.send(
                    dest, payload, self._tag(kind, x, dest_rank), int(max(min(left, 1.0), 0.001) * 1000)
                )
                break
            except FabricTimeout:
                if left <= 1.0:
                    raise
                self._next_abort_check = 0.0
                self._poll_abort()
        self._stats.count("message")

    # -- progress: every wait goes through here ------------------------------------------------------

    def _progress(self, timeout_ms: int = 0) -> None:
        for ev in self.endpoint.poll(timeout_ms):
            if ev.kind == EV_RECV:
                if ev.err:
                    raise FabricError(f"receiving a control message: {self.endpoint.error_text(ev.err)}")
                self._on_message(ev.data)
                continue
            kind, x, peer = self._tags.pop(ev.tag, (0, -1, -1))
            st = self._state(x)
            if ev.err:
                what = "writing to" if ev.kind == EV_WRITE else f"sending {_KIND_NAMES.get(kind, '?')} to"
                reason = f"exchange {x}: {what} rank {peer} failed: {self.endpoint.error_text(ev.err)}"
                if kind in (WIN, SKIP):  # the sender may be gone; its receive side times out if so
                    continue
                st.error = st.error or reason
                continue
            if ev.kind == EV_WRITE and ev.tag in self._chunk_tags:
                phase, last = self._chunk_tags.pop(ev.tag)
                st.chunk_written.add(phase)
                self.transfer_log.append((x, phase, peer, self._posted_at.pop(ev.tag), time.monotonic()))
                if last:
                    st.written.add(peer)
                    self._message(DONE, x, peer, ev.length, phase + 1)
                else:
                    self._message(CHUNK, x, peer, phase)
            elif ev.kind == EV_WRITE:
                st.written.add(peer)
                self._message(DONE, x, peer, ev.length)
            elif kind == DONE:
                st.delivered.add(peer)

    def _on_message(self, data: bytes) -> None:
        kind, author, x, a, b, c = _MSG.unpack(data[: _MSG.size])
        st = self._state(x)
        if kind == HIST:
            size, nonce = a, b
            if st.received or (st.window_mr is not None and author in st.offsets):
                if st.received:
                    self._message(SKIP, x, author)  # a duplicate sender after we finished
                elif st.hist[author][0] == size:
                    self._peer(author, nonce)
                    self._send_window(x, st, author)  # a duplicate sender: same slot again
                    for sender, phase in st.go_log:  # and the transfers already released to it
                        if sender == author:
                            self._message(GO, x, author, phase)
                else:
                    st.error = f"exchange {x}: rank {author} sent {size} bytes, before {st.hist[author][0]}"
                return
            st.hist[author] = (size, nonce)
            self._maybe_open_window(x, st)
        elif kind == WIN:
            st.wins[author] = (a, b, c)
        elif kind == DONE:
            st.done.add(author)
            if b:  # the last scheduled chunk of this pair (phase b - 1)
                st.chunks.add(b - 1)
                self._release(x, st)
        elif kind == SKIP:
            st.skipped.add(author)
        elif kind == CHUNK:
            st.chunks.add(a)
            self._release(x, st)
        elif kind == GO:
            st.go.add(a)

    def _maybe_open_window(self, x: int, st: _XState) -> None:
        """Register this rank's window once every remote sender's size is known."""
        spec = st.spec
        if spec is None or self.rank not in spec.receivers or st.opened or st.received:
            return
        remote = [s for s in sorted(spec.senders) if s != self.rank]
        if any(s not in st.hist for s in remote):
            return
        st.opened = True
        if not remote:
            return
        offset = 0
        for s in remote:
            st.offsets[s] = offset
            offset += _align(st.hist[s][0])
        st.window = np.empty(max(offset, SLOT_ALIGN), dtype=np.uint8)
        st.window_mr = self.endpoint.register(st.window, remote_write=True)
        self._stats.count("register")
        for s in remote:
            self._peer(s, st.hist[s][1])
            self._send_window(x, st, s)

    # -- communication schedule (Neo-Join §III-C; exchange/schedule.py) -----------------------------------

    def _schedule_skipped(self, spec: ExchangeSpec) -> str | None:
        """Why ``spec`` is never scheduled (the same answer on every rank), or None."""
        if self.schedule != "open-shop":
            return f"rotated: {self.schedule_why}"
        senders, receivers = set(spec.senders), set(spec.receivers)
        if len(senders | receivers) > SCHEDULE_MAX_RANKS:
            return f"rotated: {len(senders | receivers)} ranks > {SCHEDULE_MAX_RANKS}"
        fan_in = max((len(senders - {r}) for r in receivers), default=0)
        fan_out = max((len(receivers - {s}) for s in senders), default=0)
        if fan_in < 2 and fan_out < 2:
            return "rotated: no link is shared"
        return None

    def _decide_schedule(self, x: int, st: _XState) -> None:
        """Gather every sender's stream sizes through the rendezvous and compute the schedule.

        Every sender put its row of sizes first (``send``). Every participant computes the
        same schedule from the same matrix; an exchange whose busiest link carries fewer than
        ``schedule_min_bytes`` is not scheduled (one synchronization per transfer would cost more).
        """
        spec = st.spec
        assert spec is not None
        if st.schedule_decided:
            return
        st.schedule_decided = True
        skipped = self._schedule_skipped(spec)
        if skipped is not None:
            st.schedule_note = skipped
            return
        values = self._wait_for(
            [f"rows/{x}/{s}" for s in sorted(spec.senders)],
            lambda missing: (
                f"exchange {x}: no stream sizes from rank(s) {missing} after {self.timeout_s:.0f} s"
            ),
        )
        matrix = [[0] * self.world_size for _ in range(self.world_size)]
        for key, value in values.items():
            sender = int(key.rsplit("/", 1)[1])
            for receiver, size in json.loads(value or "{}").items():
                matrix[sender][int(receiver)] = int(size)
        busiest = bound(matrix)
        if busiest < self.schedule_min_bytes:
            st.schedule_note = (
                f"rotated: busiest link {busiest} B < schedule_min_bytes {self.schedule_min_bytes}"
            )
            return
        started = time.perf_counter()
        st.schedule = open_shop(matrix, self.schedule_quantum)
        st.schedule_s = time.perf_counter() - started
        self._stats.count("schedule")
        st.schedule_note = (
            f"open-shop: {len(st.schedule.phases)} phases, "
            f"{st.schedule.length / max(busiest, 1):.3f}x the busiest link's {busiest} B"
        )
        if self.rank in spec.receivers:
            st.incoming = st.schedule.incoming(self.rank)
            self._release(x, st)

    def _release(self, x: int, st: _XState) -> None:
        """Receiver: let the sender of the next transfer start once the one before it completed."""
        incoming = st.incoming
        if incoming is None:
            return
        while st.released < len(incoming):
            k = st.released
            if k > 0:
                if incoming[k - 1][0] not in st.chunks:
                    return
                phase, transfer = incoming[k]
                self._message(GO, x, transfer.sender, phase)
                st.go_log.append((transfer.sender, phase))
            st.released += 1

    def _send_window(self, x: int, st: _XState, sender: int) -> None:
        assert st.window_mr is not None
        size = st.hist[sender][0]
        self._message(WIN, x, sender, st.window_mr.remote_base + st.offsets[sender], st.window_mr.key, size)

    def _wait_step(self, deadline: float, st: _XState) -> None:
        self._progress(POLL_MS)
        if st.error:
            raise ExchangeError(st.error)
        self._poll_abort()
        if time.monotonic() > deadline:
            raise _Deadline

    def _ensure_arena(self, nbytes: int) -> tuple[np.ndarray, MemoryRegion]:
        if self._arena is None or self._arena_mr is None or self._arena.nbytes < nbytes:
            if self._arena_mr is not None:
                self._arena_mr.close()
                self._arena_mr = None
            size = max(ARENA_MIN, 1 << max(nbytes - 1, 1).bit_length())
            self._arena = np.empty(size, dtype=np.uint8)
            self._arena_mr = self.endpoint.register(self._arena, remote_write=False)
            self._stats.count("register")
        return self._arena, self._arena_mr

    def _announce(self, x: int, remote: Sequence[int], payload: _Payload, force: bool = False) -> None:
        """Send HIST to every remote receiver whose address is known (looked up at most every 5 ms)."""
        if len(payload.announced) == len(remote) or (not force and time.monotonic() < payload.next_resolve):
            return
        payload.next_resolve = time.monotonic() + RESOLVE_EVERY_S
        self._resolve([r for r in remote if r not in payload.announced])
        for r in remote:
            if r not in payload.announced and r in self._peers:
                self._message(HIST, x, r, payload.sizes[r], self._nonce)
                payload.announced.add(r)

    def _serialize(self, payload: _Payload, r: int) -> None:
        slot = payload.slots[r]
        if slot not in payload.serialized_slots:
            write_ipc_into(payload.tables[r], payload.arena[slot : slot + payload.sizes[r]])
            payload.serialized_slots.add(slot)
        payload.serialized.add(r)

    def _window_of(self, x: int, st: _XState, r: int, payload: _Payload) -> tuple[int, int]:
        addr, key, size = st.wins[r]
        if size != payload.sizes[r]:
            raise ExchangeError(f"exchange {x}: rank {r} opened {size} bytes for {payload.sizes[r]}")
        return addr, key

    def _write(
        self,
        x: int,
        r: int,
        payload: _Payload,
        offset: int,
        length: int,
        addr: int,
        key: int,
        tag: int,
        deadline: float,
    ) -> None:
        timeout_ms = int(max(deadline - time.monotonic(), 0.001) * 1000)
        try:
            self.endpoint.write(
                payload.arena_mr,
                payload.slots[r] + offset,
                length,
                self._peer(r),
                addr + offset,
                key,
                tag,
                timeout_ms,
            )
        except FabricTimeout as exc:
            raise ExchangeTimeout(f"exchange {x}: rank(s) {r} took no data in time: {exc}") from None

    def _send_rotated(
        self, x: int, st: _XState, remote: Sequence[int], payload: _Payload, deadline: float
    ) -> int:
        """Write each receiver's stream as soon as its window is known, serializing the next meanwhile."""
        posted: set[int] = set()

        def post_ready() -> int:
            n = 0
            for r in remote:
                if r in posted or r not in payload.serialized or r not in st.wins:
                    continue
                addr, key = self._window_of(x, st, r, payload)
                self._write(
                    x, r, payload, 0, payload.sizes[r], addr, key, self._tag(_WRITE_TAG, x, r), deadline
                )
                posted.add(r)
                n += 1
            return n

        writes = 0
        self._announce(x, remote, payload, force=True)
        for r in remote:  # serialize r+1 while the writes of r are in flight
            self._serialize(payload, r)
            self._progress(0)
            self._announce(x, remote, payload)
            writes += post_ready()
        while not all(r in st.delivered or r in st.skipped for r in remote):
            self._wait_step(deadline, st)
            self._announce(x, remote, payload)
            writes += post_ready()
        return writes

    def _send_scheduled(
        self, x: int, st: _XState, remote: Sequence[int], payload: _Payload, deadline: float
    ) -> int:
        """Write in the schedule's phases: one receiver at a time, each transfer once its receiver
        released it (GO) — so no receiver hears from two senders at once (no global barrier)."""
        self._announce(x, remote, payload, force=True)
        self._decide_schedule(x, st)
        assert st.schedule is not None or st.schedule_note
        if st.schedule is None:  # below the threshold: as without a schedule
            return self._send_rotated(x, st, remote, payload, deadline)
        out = st.schedule.outgoing(self.rank)
        first = {r: st.schedule.incoming(r)[0][0] for r in remote if st.schedule.incoming(r)}
        order = list(dict.fromkeys(t.receiver for _, t in out))
        writes = 0
        k = 0
        for r in order:  # serialize in the order of the schedule, posting what is due meanwhile
            self._serialize(payload, r)
            self._progress(0)
            self._announce(x, remote, payload)
            k, n = self._post_due(x, st, out, first, payload, k, deadline)
            writes += n
        while not all(r in st.delivered or r in st.skipped for r in remote):
            self._wait_step(deadline, st)
            self._announce(x, remote, payload)
            k, n = self._post_due(x, st, out, first, payload, k, deadline)
            writes += n
        return writes

    def _post_due(
        self,
        x: int,
        st: _XState,
        out: Sequence[tuple[int, Transfer]],
        first: Mapping[int, int],
        payload: _Payload,
        k: int,
        deadline: float,
    ) -> tuple[int, int]:
        """Post the sender's next transfers while each may start: its previous one completed, the data
        is serialized, the window known, and the receiver released it (or it is the receiver's first)."""
        n = 0
        while k < len(out):
            phase, t = out[k]
            r = t.receiver
            if k > 0 and out[k - 1][0] not in st.chunk_written:
                break
            if r in st.skipped:  # the receiver finished before (a retried sender): nothing to write
                st.chunk_written.add(phase)
                k += 1
                continue
            if (
                r not in payload.serialized
                or r not in st.wins
                or (phase != first.get(r) and phase not in st.go)
            ):
                break
            addr, key = self._window_of(x, st, r, payload)
            tag = self._tag(_WRITE_TAG, x, r)
            self._chunk_tags[tag] = (phase, t.offset + t.length == payload.sizes[r])
            self._posted_at[tag] = time.monotonic()
            self._write(x, r, payload, t.offset, t.length, addr, key, tag, deadline)
            k += 1
            n += 1
        return k, n

    # -- the interface -------------------------------------------------------------------------------

    def send(self, spec: ExchangeSpec, parts: Mapping[int, pa.Table]) -> None:
        x = spec.exchange_id
        st = self._state(x, spec)
        values, abort = self._rv.get([f"done/{x}/{self.rank}"])
        self._check_abort(abort)
        if x in self._sent or values[f"done/{x}/{self.rank}"] is not None:
            self._stats.count("duplicate_send")  # a retried worker: the data is there already
            return
        started = time.perf_counter()
        schema = next(iter(parts.values())).schema if parts else pa.schema([])
        receivers = sorted(spec.receivers)
        if spec.kind == "broadcast":
            table = next(iter(parts.values())) if parts else schema.empty_table()
            tables = dict.fromkeys(receivers, table)
        else:
            tables = {r: schema.empty_table() if parts.get(r) is None else parts[r] for r in receivers}

        # rotate so the senders do not all start on the same receiver
        start = next((i for i, r in enumerate(receivers) if r > self.rank), 0)
        remote = [r for r in receivers[start:] + receivers[:start] if r != self.rank]
        # histogram pass: exact stream sizes without serializing; one slot per payload in the arena
        # (a broadcast table, the same object for every receiver, is serialized once)
        sizes: dict[int, int] = {}
        slots: dict[int, int] = {}
        payloads: dict[int, tuple[int, int]] = {}  # id(table) -> (arena offset, size)
        arena_bytes = 0
        for r in remote:
            if id(tables[r]) not in payloads:
                n = ipc_size(tables[r])
                payloads[id(tables[r])] = (arena_bytes, n)
                arena_bytes += _align(n)
            slots[r], sizes[r] = payloads[id(tables[r])]
        rows = sum(tables[r].num_rows for r in receivers)
        sent_bytes = sum(sizes.values())
        if self.rank in spec.receivers:
            st.local = tables[self.rank]
            sent_bytes += ipc_size(st.local)
            self._maybe_open_window(x, st)

        deadline = time.monotonic() + self.timeout_s
        writes = 0
        skipped = self._schedule_skipped(spec)
        scheduled = skipped is None
        st.schedule_note = st.schedule_note or skipped or ""
        if scheduled:  # every sender publishes its row of the size matrix, even an empty one
            self._check_abort(self._rv.put({f"rows/{x}/{self.rank}": json.dumps(sizes)}))
            if not remote:
                self._decide_schedule(x, st)  # a receiver needs it to release its senders
        if remote:
            arena, arena_mr = self._ensure_arena(arena_bytes)
            payload = _Payload(tables, sizes, slots, arena, arena_mr, set(), set())
            try:
                if scheduled:
                    writes = self._send_scheduled(x, st, remote, payload, deadline)
                else:
                    writes = self._send_rotated(x, st, remote, payload, deadline)
            except _Deadline:
                silent = [r for r in remote if r not in st.wins and r not in st.skipped]
                unknown = [r for r in remote if r not in payload.announced]
                unreleased = (
                    sorted({t.receiver for p, t in st.schedule.outgoing(self.rank)} - st.written)
                    if st.schedule
                    else []
                )
                if unknown or silent or not unreleased:
                    what = "have no fabric address" if unknown else "opened no receive window"
                    missing = ", ".join(str(r) for r in (unknown or silent or remote))
                else:
                    what, missing = (
                        "did not release their scheduled transfers",
                        ", ".join(map(str, unreleased)),
                    )
                raise ExchangeTimeout(
                    f"exchange {x}: rank(s) {missing} {what} after {self.timeout_s:.0f} s"
                ) from None
        self._sent.add(x)
        self._check_abort(self._rv.put({f"done/{x}/{self.rank}": "1"}))
        self._stats.bytes_sent += sent_bytes
        self._stats.rows_sent += rows
        self._stats.count("write", writes)
        self._stats.per_exchange.append(
            {
                "exchange_id": x,
                "kind": spec.kind,
                "bytes_sent": sent_bytes,
                "bytes_written": sum(sizes[r] for r in remote if r not in st.skipped),
                "rows_sent": rows,
                "write": writes,
                "seconds": time.perf_counter() - started,
                "schedule": st.schedule_note,
                "schedule_phases": len(st.schedule.phases) if st.schedule is not None else 0,
                "schedule_s": st.schedule_s,
            }
        )

    def receive(self, spec: ExchangeSpec) -> pa.Table:
        x = spec.exchange_id
        st = self._state(x, spec)
        if st.received:
            raise ExchangeError(f"exchange {x} was already received")
        started = time.perf_counter()
        remote = [s for s in sorted(spec.senders) if s != self.rank]
        self._maybe_open_window(x, st)
        if remote and self._schedule_skipped(spec) is None:
            self._decide_schedule(x, st)
        deadline = time.monotonic() + self.timeout_s
        try:
            while not (
                all(s in st.done for s in remote) and (self.rank not in spec.senders or st.local is not None)
            ):
                self._wait_step(deadline, st)
        except _Deadline:
            missing = [s for s in sorted(spec.senders) if s not in st.done and s != self.rank]
            if self.rank in spec.senders and st.local is None:
                missing = sorted([*missing, self.rank])
            raise ExchangeTimeout(
                f"exchange {x}: no data from rank(s) {', '.join(map(str, missing))} after {self.timeout_s:.0f} s"
            ) from None
        if st.window_mr is not None:
            st.window_mr.close()  # every writer is done; the memory lives on in the tables
            st.window_mr = None
        window = pa.py_buffer(st.window) if st.window is not None else None
        tables = []
        for s in sorted(spec.senders):
            if s == self.rank:
                tables.append(st.local)
            else:
                assert window is not None
                stream = window.slice(st.offsets[s], st.hist[s][0])
                tables.append(pa.ipc.open_stream(stream).read_all())
                self._stats.count("read")
        st.received = True
        st.window = None
        st.local = None
        received = concat(tables, None)
        nbytes = received.nbytes
        self._stats.bytes_received += nbytes
        self._stats.rows_received += received.num_rows
        self._stats.per_exchange.append(
            {
                "exchange_id": x,
                "kind": spec.kind,
                "bytes_received": nbytes,
                "rows_received": received.num_rows,
                "seconds": time.perf_counter() - started,
            }
        )
        return received

    supports_claims = True

    def claim(self, query_id: str, item: str) -> bool:
        """One ``setnx`` on the rendezvous (module doc); True if this rank owns ``item``."""
        value, new, abort = self._rv.setnx(f"claim/{check_item(item)}", str(self.rank))
        self._check_abort(abort)
        return claim_result(self._stats, int(value), self.rank, new)

    def claims(self, query_id: str, prefix: str = "") -> dict[str, int]:
        """Owners of the claimed items starting with ``prefix``: one ``list`` on the rendezvous."""
        self._stats.count_claim("list")
        items, abort = self._rv.list(f"claim/{prefix}")
        self._check_abort(abort)
        return {k.removeprefix("claim/"): int(v) for k, v in items.items()}

    supports_sizes = True

    def sizes(self, spec: ExchangeSpec, rows: int, nbytes: int) -> dict[int, tuple[int, int]]:
        """A ``setnx`` of ``sizes/<exchange>/<rank>`` on the rendezvous (the first value wins), then one
        ``get`` of every sender's per polling round (module doc)."""
        x = spec.exchange_id
        if self.rank in spec.senders:
            _value, _new, abort = self._rv.setnx(f"sizes/{x}/{self.rank}", format_sizes(rows, nbytes))
            self._check_abort(abort)
        senders = sorted(spec.senders)
        values = self._wait_for(
            [f"sizes/{x}/{s}" for s in senders],
            lambda missing: f"exchange {x}: no size from rank(s) {missing} after {self.timeout_s:.0f} s",
        )
        return {s: parse_sizes(str(values[f"sizes/{x}/{s}"])) for s in senders}

    def barrier(self, tag: str, ranks: Sequence[int] | None = None) -> None:
        """Wait until every rank in ``ranks`` (default: all) called ``barrier(tag)``; progresses meanwhile."""
        ranks = list(range(self.world_size)) if ranks is None else list(ranks)
        self._check_abort(self._rv.put({f"barrier/{tag}/{self.rank}": "1"}))
        self._wait_for(
            [f"barrier/{tag}/{r}" for r in ranks],
            lambda missing: f"barrier {tag}: rank(s) {missing} did not arrive after {self.timeout_s:.0f} s",
        )

    def _wait_for(self, keys: Sequence[str], timeout_message: Callable[[str], str]) -> dict[str, str | None]:
        """Poll the rendezvous until every key (``…/<rank>``) exists, progressing the fabric meanwhile;
        ExchangeTimeout with ``timeout_message(missing ranks)`` after ``timeout_s``."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            values, abort = self._rv.get(keys, wait_ms=1)
            self._check_abort(abort)
            if all(v is not None for v in values.values()):
                return values
            self._progress(POLL_MS)
            if time.monotonic() > deadline:
                missing = ", ".join(k.rsplit("/", 1)[1] for k, v in values.items() if v is None)
                raise ExchangeTimeout(timeout_message(missing))

    def stats(self) -> ExchangeStats:
        self._stats.requests["rendezvous"] = self._rv.requests
        return self._stats

    def close(self) -> None:
        ep, self._ep = self._ep, None
        if ep is not None:
            try:
                ep.close(linger_ms=2000)
            finally:
                self._arena_mr = None
                self._arena = None
                for st in self._xs.values():
                    st.window_mr = None
        self._rv.close()


class FabricExchangeFactory(ExchangeFactory):
    """Driver side: one rendezvous server per query (see module doc).

    ``host``/``port``: where the rendezvous listens (loopback by default);
    ``advertise``: the address ranks connect to (default ``host``, or this
    machine's name when ``host`` is ``0.0.0.0``); ``provider`` and ``env``
    (e.g. ``{"FI_TCP_IFACE": "lo"}``) go to every rank through the config.
    ``schedule``: ``"open-shop"`` (Neo-Join's communication schedule for
    exchanges whose busiest link carries at least ``schedule_min_bytes``, in
    transfers of at least ``schedule_quantum`` bytes), ``"rotated"`` (every
    sender writes to all receivers at once, starting after its own rank) or
    ``"auto"`` (the default: open-shop across machines; rotated when every
    rank is on this machine, where no network link is shared).
    """

    name = "fabric"

    def __init__(
        self,
        provider: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        advertise: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
        schedule: str = "auto",
        schedule_min_bytes: int = SCHEDULE_MIN_BYTES,
        schedule_quantum: int = SCHEDULE_QUANTUM,
    ) -> None:
        check_number("timeout_s", timeout_s)
        check_number("port", port, int)
        check_number("schedule_min_bytes", schedule_min_bytes, int)
        check_number("schedule_quantum", schedule_quantum, int, minimum=1)
        if schedule not in SCHEDULES:
            raise ExchangeConfigError(
                f"fabric schedule must be one of {', '.join(SCHEDULES)}, not {schedule!r}"
            )
        self.schedule = schedule
        self.schedule_min_bytes = int(schedule_min_bytes)
        self.schedule_quantum = int(schedule_quantum)
        if provider is not None and not isinstance(provider, str):
            raise ExchangeConfigError(f"fabric provider must be a name like 'tcp', not {provider!r}")
        self.provider = provider
        self.host = host
        self.port = int(port)
        self.advertise = advertise
        self.timeout_s = timeout_s
        self.env = dict(env or {})
        self._servers: dict[str, RendezvousServer] = {}

    def prepare(self, query_id: str, world_size: int) -> dict[str, Any]:
        load_native()
        if query_id in self._servers:
            raise ExchangeError(f"query {query_id} is already prepared")
        server = RendezvousServer(self.host, self.port)
        self._servers[query_id] = server
        advertise = self.advertise or (socket.gethostname() if self.host in ("0.0.0.0", "") else self.host)
        env = dict(self.env)
        one_machine = advertise.startswith("127.") or advertise == "localhost"
        if (self.provider or "").startswith("tcp") and one_machine:
            env.setdefault("FI_TCP_IFACE", "lo")  # every rank is on this machine
        return {
            "name": self.name,
            "query_id": query_id,
            "rendezvous": f"{advertise}:{server.port}",
            "provider": self.provider,
            "env": env,
            "timeout_s": self.timeout_s,
            "schedule": self.schedule,
            "one_machine": one_machine,
            "schedule_min_bytes": self.schedule_min_bytes,
            "schedule_quantum": self.schedule_quantum,
        }

    def abort(self, config: Mapping[str, Any], reason: str = "query aborted") -> None:
        server = self._servers.get(str(config.get("query_id")))
        if server is not None:
            server._answer({"op": "abort", "reason": reason})
            return
        with contextlib.suppress(ExchangeError):
            client = RendezvousClient(config["rendezvous"], timeout_s=5)
            try:
                client.abort(reason)
            finally:
                client.close()

    def cleanup(self, config: Mapping[str, Any]) -> None:
        server = self._servers.pop(str(config.get("query_id")), None)
        if server is not None:
            server.close()

    def close(self) -> None:
        """Stop every rendezvous still running (queries not cleaned up)."""
        for query_id in list(self._servers):
            self._servers.pop(query_id).close()


@contextlib.contextmanager
def open_endpoint(provider: str | None = None) -> Iterator[Endpoint]:
    """An :class:`Endpoint` closed on exit (for tools and tests)."""
    ep = Endpoint(provider)
    try:
        yield ep
    finally:
        ep.close()
