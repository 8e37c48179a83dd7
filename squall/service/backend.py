"""Backends: where the service's queries run.

- :class:`LocalBackend` — ``squall serve``: embedded Connections in this process and one background thread
  that runs queued queries **one at a time**, first in, first out (a queue of at most ``max_queue``; more
  submissions get 429). Queries plan on submit (bad SQL is a 400 right away) and run with the worker count
  they ask for (1 … ``max_workers``): one Connection per count, only the last used one keeps its warm
  worker processes.
- :class:`LambdaBackend` — the deployed API: every query is an asynchronous invocation of the driver
  function (``SQUALL_DRIVER_FUNCTION``), which runs :func:`squall.service.runner.handle_driver_event`;
  ``tables`` and ``explain`` are synchronous invocations. Submitting only checks the SQL's syntax and
  safety (the API function does not read the data), so catalog errors show up as a failed query; a write
  statement's query is checked the same way, and a COPY's target against ``SQUALL_WRITABLE`` (the locations the
  driver function may write), so a refused target is a 400 before anything runs.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from abc import ABC, abstractmethod
from typing import Any

from squall import aws
from squall.connection import Connection
from squall.driver.skipping.predicate_cache import PredicateCache
from squall.driver.write.locations import Writable, writable_list
from squall.errors import OptionError, SquallError, squall_error
from squall.service import records
from squall.service.errors import Busy
from squall.service.runner import describe_tables, explain_doc, run_query
from squall.service.state import StateStore

log = logging.getLogger("squall.service")

__all__ = ["Backend", "LambdaBackend", "LocalBackend", "describe_tables"]


class Backend(ABC):
    """Runs the service's queries. Lifecycle: made with the Service, :meth:`close` when it stops."""

    max_workers: int

    def check_workers(self, workers: int | None) -> None:
        if workers is not None and not 1 <= workers <= self.max_workers:
            raise OptionError(f"workers must be between 1 and {self.max_workers}, got {workers}")

    @abstractmethod
    def check(self, sql: str, workers: int | None) -> None:
        """Raise a UserError if ``sql`` cannot be accepted (before anything is stored)."""

    @abstractmethod
    def submit(self, query_id: str, store: StateStore) -> None:
        """Start running the stored query ``query_id`` (returns at once)."""

    def cancel(self, query_id: str) -> None:  # noqa: B027 - the store's cancel marker is enough
        """Cancel the query right away if it runs here (the runner also polls the store's marker)."""

    @abstractmethod
    def tables(self) -> list[dict[str, Any]]:
        """The catalog with schemas (see :func:`describe_tables`)."""

    @abstractmethod
    def explain(self, sql: str, workers: int | None, *, estimate: bool = False) -> dict[str, Any]:
        """``{"text": explain text, "plan": plan as a dict}`` (+ ``"estimate"`` with ``estimate=True``)."""

    def close(self) -> None:  # noqa: B027 - optional
        """Stop running queries and release workers."""


class LocalBackend(Backend):
    """Embedded Connections over ``data``; a background thread runs the queue one query at a time."""

    def __init__(
        self,
        data: str | None,
        *,
        workers: int | None = None,
        platform: str = "local",
        max_workers: int | None = None,
        max_queue: int = 32,
        storage_options: dict[str, Any] | None = None,
        poll_s: float = 0.5,
        predicate_cache: PredicateCache | None = None,
        catalogs: dict[str, dict[str, str]] | None = None,
        writable: list[str] | None = None,
    ) -> None:
        self.data = data
        self.catalogs = catalogs  # named Iceberg catalogs of every Connection
        #: where every Connection's write statements may write (none: writes are refused)
        self.writable = list(writable or [])
        #: one predicate cache for the whole service, shared by its Connections (one per worker count)
        self.predicate_cache = predicate_cache if predicate_cache is not None else PredicateCache()
        self.default_workers = int(workers or os.cpu_count() or 1)
        self.max_workers = int(max_workers or self.default_workers)
        self.platform = platform
        self.storage_options = storage_options
        self.max_queue = max_queue
        self.poll_s = poll_s
        self._connections: dict[int, Connection] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[str, StateStore] | None] = queue.Queue()
        self._events: dict[str, threading.Event] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        self.check_workers(self.default_workers)
        self.connection_for(None)  # fail now on a bad data folder or platform

    def connection_for(self, workers: int | None) -> Connection:
        """The Connection for ``workers`` (default: the server's), made on first use."""
        count = int(workers or self.default_workers)
        self.check_workers(count)
        with self._lock:
            con = self._connections.get(count)
            if con is None:
                con = Connection(
                    self.data,
                    workers=count,
                    platform=self.platform,
                    storage_options=self.storage_options,
                    predicate_cache=self.predicate_cache,
                    catalogs=self.catalogs,
                    writable=self.writable,
                )
                self._connections[count] = con
            return con

    def check(self, sql: str, workers: int | None) -> None:
        if self._queue.qsize() >= self.max_queue:
            raise Busy(f"{self.max_queue} queries are waiting; retry later")
        self.connection_for(workers).plan(sql)

    def submit(self, query_id: str, store: StateStore) -> None:
        if self._closed:
            raise Busy("the server is shutting down")
        if self._queue.qsize() >= self.max_queue:
            raise Busy(f"{self.max_queue} queries are waiting; retry later")
        with self._lock:
            self._events[query_id] = threading.Event()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="squall-runner", daemon=True)
                self._thread.start()
        self._queue.put((query_id, store))

    def cancel(self, query_id: str) -> None:
        with self._lock:
            event = self._events.get(query_id)
        if event is not None:
            event.set()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            query_id, store = item
            with self._lock:
                event = self._events.get(query_id)
            try:
                run_query(store, query_id, self.connection_for, cancel=event, poll_s=self.poll_s)
            except Exception:  # the store failed: nothing more to record
                log.exception("runner failed on %s", query_id)
            finally:
                with self._lock:
                    self._events.pop(query_id, None)
                self._stop_idle_pools(query_id, store)

    def _stop_idle_pools(self, query_id: str, store: StateStore) -> None:
        """Keep warm worker processes only for the worker count used last."""
        request = store.get_json(records.request_key(query_id)) or {}
        used = int(request.get("workers") or self.default_workers)
        with self._lock:
            idle = [con for count, con in self._connections.items() if count != used]
        for con in idle:
            try:
                con.platform.close()
            except Exception:
                log.warning("cannot stop an idle worker pool", exc_info=True)

    def tables(self) -> list[dict[str, Any]]:
        return describe_tables(self.connection_for(None))

    def explain(self, sql: str, workers: int | None, *, estimate: bool = False) -> dict[str, Any]:
        return explain_doc(self.connection_for(workers), sql, estimate)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            events = list(self._events.values())
        for event in events:
            event.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        for con in connections:
            con.close()


def writable_here() -> Writable:
    """The deployed functions' writable locations: ``SQUALL_WRITABLE`` (comma-separated; unset: none)."""
    return Writable(writable_list(os.environ.get("SQUALL_WRITABLE")))


class LambdaBackend(Backend):
    """Queries run in the driver Lambda function; see :func:`squall.service.runner.handle_driver_event`."""

    def __init__(self, driver_function: str, *, max_workers: int = 64, client: Any = None) -> None:
        self.driver_function = driver_function
        self.max_workers = max_workers
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = aws.client("lambda", max_retries=2, read_timeout_s=28)
        return self._client

    def check(self, sql: str, workers: int | None) -> None:
        from squall.driver.frontend.bind import check_safe, parse
        from squall.driver.write.statements import parse_write

        self.check_workers(workers)
        statement = parse_write(sql)
        if statement is None:
            check_safe(parse(sql))
            return
        if statement.query:
            check_safe(parse(statement.query))
        if statement.kind == "copy":
            writable_here().resolve(statement.target)

    def _invoke(self, payload: dict[str, Any], asynchronous: bool = False) -> dict[str, Any]:
        response = self.client.invoke(
            FunctionName=self.driver_function,
            InvocationType="Event" if asynchronous else "RequestResponse",
            Payload=json.dumps(payload).encode(),
        )
        if asynchronous:
            return {}
        body = json.loads(response["Payload"].read() or b"{}")
        if response.get("FunctionError"):
            raise SquallError(f"driver function failed: {body.get('errorMessage', body)}")
        if "error" in body:
            raise squall_error(body["error"], body.get("detail", "")) or SquallError(body.get("detail", ""))
        return body

    def submit(self, query_id: str, store: StateStore) -> None:
        self._invoke({"op": "run", "query_id": query_id, "state": store.url}, asynchronous=True)

    def tables(self) -> list[dict[str, Any]]:
        return list(self._invoke({"op": "tables"})["tables"])

    def explain(self, sql: str, workers: int | None, *, estimate: bool = False) -> dict[str, Any]:
        self.check(sql, workers)
        event: dict[str, Any] = {"op": "explain", "sql": sql, "workers": workers}
        if estimate:
            event["estimate"] = True
        return self._invoke(event)
