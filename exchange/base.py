"""The Exchange interface: how workers trade intermediate Arrow data.

Every worker (rank) of a query opens one :class:`Exchange` endpoint. For each
exchange of the distributed plan the worker calls, in this order,

1. ``send(spec, parts)`` if its rank is in ``spec.senders``: ``parts`` maps a
   receiver rank to the Arrow table for it (receivers missing from the mapping
   get an empty table with the same schema);
2. ``receive(spec)`` if its rank is in ``spec.receivers``: returns one table,
   the concatenation of what every sender addressed to this rank.

Workers follow a bulk-synchronous schedule: for each exchange in plan order a
rank first sends (if it is a sender), then receives (if it is a receiver),
before it moves on to the next exchange. Every participant of exchange *n* has
finished its part of exchanges *1..n-1* before it touches *n*, so an
implementation may treat ``send``/``receive`` of one exchange as a collective.

Lifecycle (smallpond style, on the class that has one):

- the driver calls :meth:`ExchangeFactory.prepare` once per query (create a
  folder, a prefix, a rendezvous), hands the returned JSON-able ``config`` to
  every worker, and calls :meth:`ExchangeFactory.cleanup` when the query ends,
  on success *and* on failure;
- each worker calls :func:`open_exchange` with that config, uses the endpoint
  for every exchange of the plan in plan order, then calls :meth:`Exchange.close`.

Guarantees every implementation gives (the shared suite in
``tests/exchange/`` checks them for each one):

- ``receive`` returns exactly the rows addressed to this rank, all columns and
  types preserved, sender order ascending (rows of sender 0 first);
- a table with zero rows and zero partitions still carries its schema;
- sending the same (query, exchange, sender) twice is harmless (a retried or
  duplicated worker), the receiver sees the data once;
- ``receive`` waits for missing senders at most ``timeout_s`` seconds and then
  raises :class:`ExchangeTimeout` naming the missing ranks; it stops early with
  :class:`ExchangeAborted` when the query was aborted;
- :meth:`Exchange.stats` counts what the endpoint did (requests by type, bytes).

Claims (work stealing of scan splits, :mod:`squall.operators.steal`): ``claim(query_id, item)``
is an atomic test-and-set per (query, item) — the first rank to claim an item owns it forever;
the owner (any attempt of that rank: a retried or duplicated worker) gets True again, everybody
else False. ``claims(query_id, prefix)`` lists the owners of the claimed items whose id starts
with ``prefix``. Item ids are ``[A-Za-z0-9_.-]+``. Claims live as long as the query's exchange
data (``cleanup`` deletes them).

Sizes (run-time join decisions, :mod:`squall.operators.runtime_join`): ``sizes(spec, rows, nbytes)``
is a small collective over ``spec.senders`` that runs *before* any data of ``spec`` is sent: each
sender publishes the rows and bytes it is about to send, and every caller gets every sender's
``(rows, nbytes)``, identical on every rank, without any data moving. The first value a sender
published wins (put-if-absent): a retried or duplicated sender reads back the first one, so every
rank decides from the same numbers. Published as metadata of the exchange itself: a small file in the
local folder, a zero-byte object whose key holds the numbers (one LIST reads them all) on S3, a
put-if-absent on the fabric rendezvous.
"""

from __future__ import annotations

import inspect
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa

from squall.errors import OptionError, SquallError
from squall.registry import Registry


class ExchangeError(SquallError):
    """An exchange could not deliver data."""


class ExchangeConfigError(ExchangeError, OptionError):
    """The exchange cannot be set up as configured (missing bucket, no access, bad option): the user's to fix."""


class ExchangeTimeout(ExchangeError):
    """Senders did not deliver within the timeout; the message names them."""


class ExchangeAborted(ExchangeError):
    """The query was aborted (another rank failed or the user cancelled)."""


@dataclass(frozen=True)
class ExchangeSpec:
    """One exchange of a plan, as every participant sees it.

    ``exchange_id`` is unique within a query (the producing stage's id).
    ``kind`` is informational for implementations that optimise a pattern:
    ``"hash"`` (each sender partitions by receiver), ``"broadcast"`` (every
    receiver gets the same table from a sender) or ``"gather"`` (one receiver).
    """

    query_id: str
    exchange_id: int
    senders: tuple[int, ...]
    receivers: tuple[int, ...]
    kind: str = "hash"

    def __post_init__(self) -> None:
        if self.kind not in ("hash", "broadcast", "gather"):
            raise ValueError(f"unknown exchange kind {self.kind!r}")


@dataclass
class ExchangeStats:
    """What one endpoint did; summed over workers by the driver.

    ``requests`` counts storage/network requests by type (``put``, ``get``,
    ``list``, ``head``, ``delete``, ``write``, ``read``, …). ``per_exchange``
    holds one dict per exchange with at least ``exchange_id``, ``bytes_sent``,
    ``bytes_received`` and the request counts of that exchange.
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    rows_sent: int = 0
    rows_received: int = 0
    requests: dict[str, int] = field(default_factory=dict)
    per_exchange: list[dict[str, Any]] = field(default_factory=list)
    #: claim protocol counters: ``claim`` (calls), ``won``, ``lost`` (owned by another rank),
    #: ``again`` (already owned by this rank), ``list`` (``claims`` calls)
    claims: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str, n: int = 1) -> None:
        self.requests[kind] = self.requests.get(kind, 0) + n

    def count_claim(self, kind: str, n: int = 1) -> None:
        self.claims[kind] = self.claims.get(kind, 0) + n

    def to_dict(self) -> dict[str, Any]:
        return {
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "rows_sent": self.rows_sent,
            "rows_received": self.rows_received,
            "requests": dict(self.requests),
            "per_exchange": list(self.per_exchange),
            "claims": dict(self.claims),
        }


_ITEM = re.compile(r"[A-Za-z0-9_.-]+")


def check_item(item: str) -> str:
    """``item`` if it is a valid claim id (``[A-Za-z0-9_.-]+``), else ExchangeError."""
    if not _ITEM.fullmatch(item):
        raise ExchangeError(f"bad claim item id {item!r}")
    return item


def claim_result(stats: ExchangeStats, owner: int, rank: int, new: bool) -> bool:
    """Count one claim's outcome and say whether ``rank`` owns the item."""
    stats.count_claim("claim")
    stats.count_claim("won" if new else ("again" if owner == rank else "lost"))
    return owner == rank


class Exchange(ABC):
    """One rank's endpoint of an exchange implementation (see module doc)."""

    #: registry name, e.g. ``"local"``, ``"s3"``, ``"fabric"``
    name: ClassVar[str]

    def __init__(self, config: Mapping[str, Any], rank: int, world_size: int) -> None:
        self.config = dict(config)
        self.rank = rank
        self.world_size = world_size
        self._stats = ExchangeStats()

    @abstractmethod
    def send(self, spec: ExchangeSpec, parts: Mapping[int, pa.Table]) -> None:
        """Deliver ``parts[r]`` to each receiver ``r`` of ``spec``."""

    def send_pieces(
        self, spec: ExchangeSpec, schema: pa.Schema, pieces: Iterable[Mapping[int, pa.Table]]
    ) -> None:
        """:meth:`send` of rows that come in pieces (a stage's output a batch at a time, each piece already
        split by receiver): every receiver gets its rows of all pieces, in order. An endpoint that writes as
        they come holds no more than a piece at a time. Default: gathered, then one :meth:`send`."""
        gathered: dict[int, list[pa.Table]] = {r: [] for r in spec.receivers}
        for piece in pieces:
            for receiver, table in piece.items():
                if table.num_rows:
                    gathered[receiver].append(table)
        self.send(spec, {r: concat(tables, schema) for r, tables in gathered.items()})

    @abstractmethod
    def receive(self, spec: ExchangeSpec) -> pa.Table:
        """Return every row the senders of ``spec`` addressed to this rank."""

    def receive_in_place(self, spec: ExchangeSpec, limit: int) -> tuple[Any, int, int] | None:
        """When the rows addressed to this rank come to more than ``limit`` bytes and the endpoint keeps them in
        files this process can read, (a ``pyarrow.dataset`` over them, rows, bytes): read where they are, never
        copied or held. None otherwise (then :meth:`receive` or :meth:`receive_pieces`). Default: None."""
        return None

    def receive_pieces(self, spec: ExchangeSpec) -> Iterator[pa.Table]:
        """The rows :meth:`receive` returns, in pieces (same order, same schema, same stats), for a receiver
        that writes them to disk as they come (``squall.operators.received``): an endpoint whose data arrives in
        pieces yields each as it is read, so no more than one piece need be in memory at a time. Yields at
        least one table (an empty one with the schema when nothing came). Default: the whole of
        :meth:`receive` as one piece."""
        yield self.receive(spec)

    def aborted(self) -> bool:
        """True when the query was aborted (cheap; workers ask once per stage). Default: never."""
        return False

    #: whether :meth:`claim` / :meth:`claims` work on this endpoint
    supports_claims: ClassVar[bool] = False

    def claim(self, query_id: str, item: str) -> bool:
        """Atomically take ``item`` for this rank: True if this rank owns it now (first claimer, or
        an earlier attempt of this rank claimed it), False if another rank does (module doc)."""
        raise ExchangeError(f"the {self.name} exchange does not support claims")

    def claims(self, query_id: str, prefix: str = "") -> dict[str, int]:
        """Owner rank of every claimed item of the query whose id starts with ``prefix``."""
        raise ExchangeError(f"the {self.name} exchange does not support claims")

    #: whether :meth:`sizes` works on this endpoint
    supports_sizes: ClassVar[bool] = False

    def sizes(self, spec: ExchangeSpec, rows: int, nbytes: int) -> dict[int, tuple[int, int]]:
        """Publish this rank's ``(rows, nbytes)`` for exchange ``spec`` (a sender; others publish
        nothing) and return every sender's, identical on every rank: the first value a sender published
        wins (module doc). Waits for missing senders at most the endpoint's timeout
        (:class:`ExchangeTimeout`), stops early when the query was aborted (:class:`ExchangeAborted`)."""
        raise ExchangeError(f"the {self.name} exchange does not share sizes")

    def stats(self) -> ExchangeStats:
        """Counters of this endpoint since it was opened."""
        return self._stats

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources held by this endpoint (not the query's data)."""


class ExchangeFactory(ABC):
    """Driver-side half of an implementation: per-query set-up and clean-up."""

    name: ClassVar[str]

    @abstractmethod
    def prepare(self, query_id: str, world_size: int) -> dict[str, Any]:
        """Create what the query's exchanges need; return the workers' config."""

    @abstractmethod
    def cleanup(self, config: Mapping[str, Any]) -> None:
        """Delete everything the query's exchanges wrote. Must not raise on partial state."""

    def abort(self, config: Mapping[str, Any], reason: str = "query aborted") -> None:  # noqa: B027
        """Tell waiting receivers to stop with ``reason`` (best effort, optional)."""


# name -> endpoint / factory class ("module:Class"), imported lazily so a missing
# optional dependency (boto3, libfabric) only matters when it is used.
_ENDPOINTS: Registry[type[Exchange]] = Registry("exchange", error=ExchangeConfigError)
_FACTORIES: Registry[type[ExchangeFactory]] = Registry("exchange", error=ExchangeConfigError)


def register_exchange(name: str, target: str) -> None:
    """Register ``"module:EndpointClass:FactoryClass"`` under ``name``."""
    module_name, endpoint_name, factory_name = target.split(":")
    _ENDPOINTS.register(name, f"{module_name}:{endpoint_name}")
    _FACTORIES.register(name, f"{module_name}:{factory_name}")


register_exchange("local", "squall.exchange.local:LocalExchange:LocalExchangeFactory")
register_exchange("s3", "squall.exchange.s3:S3Exchange:S3ExchangeFactory")
register_exchange("fabric", "squall.exchange.fabric:FabricExchange:FabricExchangeFactory")


def available_exchanges() -> list[str]:
    return _FACTORIES.names()


def exchange_factory(name: str, **options: Any) -> ExchangeFactory:
    """The driver-side factory of implementation ``name`` (ExchangeConfigError when unknown)."""
    factory: Callable[..., ExchangeFactory] = _FACTORIES.get(name)
    params = inspect.signature(factory).parameters.values()
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        unknown = set(options) - {p.name for p in params}
        if unknown:
            raise ExchangeConfigError(f"unknown {name} exchange option(s): {', '.join(sorted(unknown))}")
    return factory(**options)


def open_exchange(config: Mapping[str, Any], rank: int, world_size: int) -> Exchange:
    """Open the worker endpoint described by a config from ``ExchangeFactory.prepare``.

    The config always has a ``"name"`` key naming the implementation.
    """
    endpoint_cls = _ENDPOINTS.get(config["name"])
    return endpoint_cls(config, rank, world_size)


def check_number(name: str, value: Any, kind: type = float, minimum: float = 0) -> None:
    """ExchangeConfigError unless option ``name`` is a number (``kind``) of at least ``minimum``."""
    try:
        ok = not isinstance(value, bool) and kind(value) >= minimum
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ExchangeConfigError(f"exchange option {name} must be a number >= {minimum}, not {value!r}")


def format_sizes(rows: int, nbytes: int) -> str:
    """The text a size is published as: ``"<rows> <nbytes>"``."""
    return f"{int(rows)} {int(nbytes)}"


def parse_sizes(text: str) -> tuple[int, int]:
    """Inverse of :func:`format_sizes`."""
    rows, nbytes = text.split()
    return int(rows), int(nbytes)


def empty_like(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def concat(tables: Sequence[pa.Table], schema: pa.Schema | None) -> pa.Table:
    """Concatenate received tables (sender order); empty with ``schema`` if none."""
    tables = [t for t in tables if t is not None]
    if not tables:
        if schema is None:
            return pa.table({})
        return schema.empty_table()
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="none")
