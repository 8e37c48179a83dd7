"""Backends: where the service's queries run.

- :class:`LocalBackend` — ``squall serve``: embedded Connections in this process. Queries run **concurrently**:
  the :class:`~squall.service.scheduler.Scheduler` admits them by resource group (a fast lane for queries that
  read little, running and queued limits per group and per user; a full queue is a 429 with ``Retry-After``)
  and each admitted query runs on a thread of its own. On the ``local`` platform every worker count has its
  Connection, and all of them lease their workers from one shared pool of processes
  (:meth:`~squall.driver.platforms.local.platform.LocalPlatform.sharing`), so queries of any W reuse the same
  warm workers. Queries plan on submit (bad SQL is a 400 right away; a plan that would read more than
  ``max_scan_bytes`` is refused then too); the limits of :class:`~squall.service.settings.ServiceSettings`
  apply to every query.
- :class:`LambdaBackend` — the deployed API: every query is an asynchronous invocation of the driver
  function (``SQUALL_DRIVER_FUNCTION``), which runs :func:`squall.service.runner.handle_driver_event`, once
  :mod:`~squall.service.lambda_admission` admits it (running and queued limits per user and in all, kept in the
  state store because many API function instances decide at once; a full queue is a 429 with ``Retry-After``);
  ``tables`` and ``explain`` are synchronous invocations. Submitting only checks the SQL's syntax and
  safety (the API function does not read the data), so catalog errors show up as a failed query; a write
  statement's query is checked the same way, and a COPY's target against ``SQUALL_WRITABLE`` (the locations the
  driver function may write), so a refused target is a 400 before anything runs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from squall import aws
from squall.connection import Connection
from squall.driver.platforms.local.platform import LocalPlatform, max_local_workers
from squall.driver.skipping.predicate_cache import PredicateCache
from squall.driver.write.locations import Writable, writable_list
from squall.errors import AccessDenied, OptionError, SquallError, UserError, squall_error
from squall.service import records
from squall.service.errors import Busy, Unavailable
from squall.service.lambda_admission import (
    DEFAULT_CONCURRENCY,
    Admission,
    AdmissionLimits,
    default_max_running,
    record_cancelled,
)
from squall.service.runner import Limits, OnEnd, describe_tables, explain_doc, fail_unstarted, run_query
from squall.service.scheduler import ANONYMOUS, Scheduler, Ticket, planned_scan_bytes
from squall.service.settings import ServiceSettings
from squall.service.state import StateStore
from squall.service.users import User, check_plan, check_write_target, sql_tables

log = logging.getLogger("squall.service")

__all__ = ["Backend", "LambdaBackend", "LocalBackend", "deployed_limits", "describe_tables"]

#: seconds between the scheduler's checks for queries whose timeout passed in the queue
TICK_S = 0.5


class Backend(ABC):
    """Runs the service's queries. Lifecycle: made with the Service, :meth:`close` when it stops.
    ``on_end(request, status)``: called when a query that runs here ends (the Service's audit log)."""

    max_workers: int
    on_end: OnEnd | None = None

    def check_workers(self, workers: int | None) -> None:
        if workers is not None and not 1 <= workers <= self.max_workers:
            raise OptionError(f"workers must be between 1 and {self.max_workers}, got {workers}")

    @abstractmethod
    def check(self, sql: str, workers: int | None) -> None:
        """Raise a UserError if ``sql`` cannot be accepted (before anything is stored)."""

    def check_user(self, sql: str, workers: int | None, user: User, *, scan: bool = True) -> None:
        """Raise a UserError if ``user`` may not run ``sql`` (a table outside their catalogs; with ``scan``,
        more bytes than their ``max_bytes_scanned``). Here, for a backend that does not plan on submit (the
        deployed API): the tables the SQL names (:func:`~squall.service.users.sql_tables`); the driver checks
        the plan, and the user's bytes, before it runs the query."""
        if user.catalogs is not None:
            check_write_target(user, sql)
            user.check_tables(sql_tables(sql))

    @abstractmethod
    def submit(self, query_id: str, store: StateStore) -> None:
        """Start running the stored query ``query_id`` (returns at once)."""

    def cancel(self, query_id: str) -> None:  # noqa: B027 - the store's cancel marker is enough
        """Cancel the query right away if it runs here (the runner also polls the store's marker)."""

    def wait_for_end(self, query_id: str, timeout_s: float) -> bool:
        """Wait until the query ends here or ``timeout_s`` passes; False when this backend cannot wait (it did
        not: the caller answers at once)."""
        return False

    def queue_info(self, query_id: str) -> dict[str, Any] | None:
        """Where a queued query stands (``{"position", "ahead", "estimated_wait_s", "group"}``), None when
        this backend does not know (not queued here)."""
        return None

    @abstractmethod
    def tables(self) -> list[dict[str, Any]]:
        """The catalog with schemas (see :func:`describe_tables`)."""

    @abstractmethod
    def explain(self, sql: str, workers: int | None, *, estimate: bool = False) -> dict[str, Any]:
        """``{"text": explain text, "plan": plan as a dict}`` (+ ``"estimate"`` with ``estimate=True``)."""

    def close(self) -> None:  # noqa: B027 - optional
        """Stop running queries and release workers."""


class LocalBackend(Backend):
    """Embedded Connections over ``data``; the scheduler admits queries, each runs on a thread of its own.

    ``settings``: the scheduler's groups, the pool and the per-query limits (default:
    :meth:`ServiceSettings.defaults`); ``max_queue`` overrides its ``max_queued``; ``cores``: the cores the
    queries share (default: this machine's; see :meth:`workers_for`).
    """

    def __init__(
        self,
        data: str | None,
        *,
        workers: int | None = None,
        platform: str = "local",
        max_workers: int | None = None,
        max_queue: int | None = None,
        storage_options: dict[str, Any] | None = None,
        poll_s: float = 0.5,
        predicate_cache: PredicateCache | None = None,
        catalogs: dict[str, dict[str, str]] | None = None,
        writable: list[str] | None = None,
        settings: ServiceSettings | None = None,
        cores: int | None = None,
    ) -> None:
        self.data = data
        #: the cores the queries share (see :meth:`workers_for`; default: this machine's)
        self.cores = int(cores or os.cpu_count() or 1)
        self.catalogs = catalogs  # named Iceberg catalogs of every Connection
        #: where every Connection's write statements may write (none: writes are refused)
        self.writable = list(writable or [])
        #: one predicate cache for the whole service, shared by its Connections (one per worker count)
        self.predicate_cache = predicate_cache if predicate_cache is not None else PredicateCache()
        self.default_workers = int(workers or os.cpu_count() or 1)
        self.max_workers = int(max_workers or self.default_workers)
        self.platform = platform
        self.storage_options = storage_options
        self.settings = settings or ServiceSettings.defaults()
        if max_queue is not None:
            self.settings = dataclasses.replace(self.settings, max_queued=max_queue)
        self.limits = self.settings.limits()
        self.poll_s = poll_s
        self.check_workers(self.default_workers)
        #: on the local platform: the owner of the worker pool every Connection leases from
        self.pool_platform: LocalPlatform | None = None
        if platform == "local":
            size = self.settings.pool_size(self.max_workers, max_local_workers())
            self.pool_platform = LocalPlatform(
                self.max_workers, pool_size=size, storage_options=storage_options,
                worker_memory=self.settings.worker_memory,
            )  # fmt: skip
        self.scheduler = Scheduler(self.settings.scheduler_config(), start=self._start)
        self._connections: dict[int, Connection] = {}
        self._lock = threading.Lock()
        self._queries: dict[str, tuple[StateStore, threading.Event]] = {}  # submitted, not yet ended
        self._ended: dict[str, threading.Event] = {}  # set when the query ends (long polls wait on it)
        self._threads: dict[str, threading.Thread] = {}
        self._closed = threading.Event()
        self.connection_for(None).check_ready()  # fail now on a bad data folder or platform
        if self.pool_platform is not None:  # warm workers before the first query
            self.pool_platform.prestart(self.settings.warm(self.max_workers, self.pool_platform.pool_size))
        self._ticker = threading.Thread(target=self._tick, name="squall-scheduler", daemon=True)
        self._ticker.start()

    def connection_for(self, workers: int | None) -> Connection:
        """The Connection for ``workers`` (default: the server's), made on first use."""
        count = int(workers or self.default_workers)
        self.check_workers(count)
        with self._lock:
            con = self._connections.get(count)
            if con is None:
                platform: str | LocalPlatform = self.platform
                if self.pool_platform is not None:
                    platform = self.pool_platform.sharing(count)
                con = Connection(
                    self.data,
                    workers=count,
                    platform=platform,
                    storage_options=self.storage_options,
                    predicate_cache=self.predicate_cache,
                    catalogs=self.catalogs,
                    writable=self.writable,
                )
                self._connections[count] = con
            return con

    def check(self, sql: str, workers: int | None) -> None:
        if self._closed.is_set():
            raise Unavailable("the server is shutting down")
        plan = self.connection_for(workers).plan(sql)
        self.limits.check_scan(planned_scan_bytes(plan))

    def check_user(self, sql: str, workers: int | None, user: User, *, scan: bool = True) -> None:
        """PermissionDenied for a table outside the user's catalogs, LimitExceeded (with ``scan``) for a plan
        that reads more than the user's ``max_bytes_scanned`` (the plan is the one :meth:`check` made: cached)."""
        scan = scan and user.max_bytes_scanned is not None
        if user.catalogs is None and not scan:
            return
        check_write_target(user, sql)
        try:
            plan = self.connection_for(workers).plan(sql)
        except UserError:  # a statement without a plan (DROP TABLE): nothing it reads
            return
        named = self.connection_for(workers).catalog.catalogs
        check_plan(user, plan, named.names() if named is not None else ())
        if scan:
            Limits(max_scan_bytes=user.max_bytes_scanned, user=user.name).check_scan(planned_scan_bytes(plan))

    def _scan_bytes(self, request: dict[str, Any]) -> int:
        """What the request's plan reads (its plan is cached since :meth:`check`); 0 when it has none."""
        try:
            return planned_scan_bytes(
                self.connection_for(request.get("workers")).plan(str(request.get("sql")))
            )
        except UserError:  # a statement without a plan (DROP TABLE): nothing to read
            return 0

    def submit(self, query_id: str, store: StateStore) -> None:
        if self._closed.is_set():
            raise Unavailable("the server is shutting down")
        request = store.get_json(records.request_key(query_id)) or {}
        user = str(request.get("user") or ANONYMOUS)
        scan_bytes = self._scan_bytes(request)
        own = request.get("limits") or {}
        with self._lock:
            self._queries[query_id] = (store, threading.Event())
            self._ended[query_id] = threading.Event()
        try:
            self.scheduler.submit(
                query_id, user=user, scan_bytes=scan_bytes, timeout_s=request.get("timeout_s"),
                user_limits=(own.get("max_running"), own.get("max_queued")),
            )  # fmt: skip
        except Busy:
            self._forget(query_id)
            raise

    def _start(self, ticket: Ticket) -> None:
        """The scheduler admitted ``ticket``: run it on a thread of its own."""
        thread = threading.Thread(
            target=self._run, args=(ticket,), name=f"squall-query-{ticket.query_id}", daemon=True
        )
        with self._lock:
            self._threads[ticket.query_id] = thread
        thread.start()

    def workers_for(self, asked: int | None, load: int) -> tuple[int, str | None]:
        """The workers of a query that asked for ``asked`` (None: the server's default) and started while
        ``load`` queries (itself among them) were running or waiting, and why when fewer than the default.

        A query that names its workers gets them. Otherwise, with ``adaptive_workers`` on, the machine's cores
        are shared among the queries at hand: a query gets at most ``cores // load`` workers (at least one).
        Alone it runs on the default W; under load each query runs on fewer ranks, so the exchange's cost
        (partitioning, writing and reading every shuffled row) is not paid where no core is left to gain from
        it: more queries per second at a little more latency each."""
        if asked or not self.settings.adaptive_workers:
            return int(asked or self.default_workers), None
        cores = self.cores
        share = max(1, cores // max(1, load))
        if share >= self.default_workers:
            return self.default_workers, None
        why = (f"{load} queries were running or waiting on {cores} cores: "
               f"{share} worker{'s' if share > 1 else ''} instead of {self.default_workers}")  # fmt: skip
        return share, why

    def _run(self, ticket: Ticket) -> None:
        query_id = ticket.query_id
        with self._lock:
            store, event = self._queries[query_id]
        request = store.get_json(records.request_key(query_id)) or {}
        workers, why = self.workers_for(request.get("workers"), ticket.load)
        scheduling: dict[str, Any] = {"group": ticket.group, "workers": workers, "load": ticket.load}
        if why:
            scheduling["workers_lowered"] = why
        try:
            run_query(
                store, query_id, lambda _asked: self.connection_for(workers), cancel=event,
                poll_s=self.poll_s, limits=self.limits, scheduling=scheduling, on_end=self.on_end,
            )  # fmt: skip
        except Exception:  # the store failed: nothing more to record
            log.exception("runner failed on %s", query_id)
        finally:
            with self._lock:
                self._threads.pop(query_id, None)
            self._forget(query_id)
            self.scheduler.finish(query_id)

    def _forget(self, query_id: str) -> None:
        """The query has ended (or never started): wake its long polls."""
        with self._lock:
            self._queries.pop(query_id, None)
            ended = self._ended.pop(query_id, None)
        if ended is not None:
            ended.set()

    def wait_for_end(self, query_id: str, timeout_s: float) -> bool:
        with self._lock:
            ended = self._ended.get(query_id)
        if ended is not None:
            ended.wait(timeout_s)
        return True

    def _tick(self) -> None:
        while not self._closed.wait(TICK_S):
            try:
                self.scheduler.poll()
            except Exception:
                log.warning("scheduler poll failed", exc_info=True)

    def cancel(self, query_id: str) -> None:
        with self._lock:
            entry = self._queries.get(query_id)
        if entry is None:
            return
        store, event = entry
        event.set()
        if self.scheduler.cancel(query_id):  # it was queued: record it cancelled now
            run_query(store, query_id, self.connection_for, cancel=event, on_end=self.on_end)
            self._forget(query_id)

    def queue_info(self, query_id: str) -> dict[str, Any] | None:
        return self.scheduler.queue_info(query_id)

    def tables(self) -> list[dict[str, Any]]:
        return describe_tables(self.connection_for(None))

    def explain(self, sql: str, workers: int | None, *, estimate: bool = False) -> dict[str, Any]:
        return explain_doc(self.connection_for(workers), sql, estimate)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with self._lock:
            queries = dict(self._queries)
            threads = list(self._threads.values())
        for query_id, (store, event) in queries.items():
            event.set()
            if self.scheduler.cancel(query_id):  # queued: it will never run
                fail_unstarted(store, query_id, "the server stopped before the query started", self.on_end)
                self._forget(query_id)
        for thread in threads:
            thread.join(timeout=30)
        for query_id in list(self._ended):  # nobody waits on a closed backend
            self._forget(query_id)
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        for con in connections:
            con.close()
        if self.pool_platform is not None:
            self.pool_platform.close()


def writable_here() -> Writable:
    """The deployed functions' writable locations: ``SQUALL_WRITABLE`` (comma-separated; unset: none)."""
    return Writable(writable_list(os.environ.get("SQUALL_WRITABLE")))


def deployed_limits(max_workers: int, environ: Mapping[str, str] | None = None) -> AdmissionLimits:
    """The deployed API's admission limits: the ``[service]`` settings as JSON in ``SQUALL_SERVICE`` (``max_running``,
    ``max_queued``, ``user_running``, ``user_queued``; the stack's ``serviceSettings``) — ``max_running`` by default
    from ``SQUALL_CONCURRENCY``, the concurrent Lambda executions the queries share (default 1000, an account's
    default): :func:`~squall.service.lambda_admission.default_max_running` with ``max_workers`` workers a query."""
    env = os.environ if environ is None else environ
    try:
        table = json.loads(env.get("SQUALL_SERVICE") or "{}")
    except ValueError as err:
        raise OptionError(f"SQUALL_SERVICE must be the [service] settings as a JSON object: {err}") from None
    settings = ServiceSettings.load(table, source="SQUALL_SERVICE")
    max_running = settings.max_running
    if not isinstance(table, dict) or table.get("max_running") is None:
        text = env.get("SQUALL_CONCURRENCY") or str(DEFAULT_CONCURRENCY)
        if not text.strip().isdigit() or int(text) < 1:
            raise OptionError(f"SQUALL_CONCURRENCY must be a whole number of at least 1, got {text!r}")
        max_running = default_max_running(int(text), max_workers)
    return AdmissionLimits(max_running, settings.max_queued, settings.user_running, settings.user_queued)


class LambdaBackend(Backend):
    """Queries run in the driver Lambda function (see :func:`squall.service.runner.handle_driver_event`), as
    admitted by :class:`~squall.service.lambda_admission.Admission` over the state store: ``limits`` (default:
    :func:`deployed_limits`) per user (``request["user"]``) and in all; a query over them waits ``queued`` (its
    status tells its place) and starts when a running one ends, or is refused with 429 when the queue is full.
    ``store``: the service's state store (the one queries are submitted to is used when not given)."""

    def __init__(
        self,
        driver_function: str,
        *,
        max_workers: int = 64,
        client: Any = None,
        store: StateStore | None = None,
        limits: AdmissionLimits | None = None,
    ) -> None:
        self.driver_function = driver_function
        self.max_workers = max_workers
        self._client = client
        self.store = store
        self.limits = limits or deployed_limits(max_workers)
        self._admissions: dict[str, Admission] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, store: StateStore | None = None) -> LambdaBackend:
        """The deployed functions' backend: ``SQUALL_DRIVER_FUNCTION``, ``SQUALL_MAX_WORKERS``, the limits of
        :func:`deployed_limits`."""
        driver = os.environ.get("SQUALL_DRIVER_FUNCTION")
        if not driver:
            raise OptionError("set SQUALL_DRIVER_FUNCTION: the function that runs queries")
        return cls(driver, max_workers=int(os.environ.get("SQUALL_MAX_WORKERS", "64")), store=store)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = aws.client("lambda", max_retries=2, read_timeout_s=28)
        return self._client

    def admission(self, store: StateStore) -> Admission:
        """The admission over ``store`` (one per store)."""
        with self._lock:
            found = self._admissions.get(store.url)
            if found is None:

                def launch(query_id: str) -> None:
                    self._invoke({"op": "run", "query_id": query_id, "state": store.url}, asynchronous=True)

                found = self._admissions[store.url] = Admission(store, self.limits, launch)
            return found

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
        try:
            response = self.client.invoke(
                FunctionName=self.driver_function,
                InvocationType="Event" if asynchronous else "RequestResponse",
                Payload=json.dumps(payload).encode(),
            )
        except Exception as exc:  # the API's role may not invoke it: one line naming the function
            denied = aws.denied_message(exc, f"lambda function {self.driver_function}")
            if denied is not None:
                raise AccessDenied(denied) from None
            raise
        if asynchronous:
            return {}
        body = json.loads(response["Payload"].read() or b"{}")
        if response.get("FunctionError"):
            raise SquallError(f"driver function failed: {body.get('errorMessage', body)}")
        if "error" in body:
            raise squall_error(body["error"], body.get("detail", "")) or SquallError(body.get("detail", ""))
        return body

    def submit(self, query_id: str, store: StateStore) -> None:
        if self.store is None:
            self.store = store
        request = store.get_json(records.request_key(query_id)) or {}
        own = request.get("limits")
        own = own if isinstance(own, dict) else {}
        self.admission(store).submit(
            query_id, str(request.get("user") or ANONYMOUS),
            user_running=own.get("max_running"), user_queued=own.get("max_queued"),
        )  # fmt: skip

    def cancel(self, query_id: str) -> None:
        if self.store is not None and self.admission(self.store).cancel(query_id):
            record_cancelled(self.store, query_id)  # it was queued: it never runs

    def queue_info(self, query_id: str) -> dict[str, Any] | None:
        if self.store is None:
            return None
        try:
            return self.admission(self.store).queue_info(query_id)
        except Exception:  # a status answer does not depend on it
            log.warning("cannot tell where %s stands in the queue", query_id, exc_info=True)
            return None

    def query_ended(self, query_id: str, store: StateStore) -> list[str]:
        """The driver function's end-of-query hook: give back the query's running slots when it has ended and
        start the next queued queries (ids returned)."""
        return self.admission(store).finished(query_id)

    def tables(self) -> list[dict[str, Any]]:
        return list(self._invoke({"op": "tables"})["tables"])

    def explain(self, sql: str, workers: int | None, *, estimate: bool = False) -> dict[str, Any]:
        self.check(sql, workers)
        event: dict[str, Any] = {"op": "explain", "sql": sql, "workers": workers}
        if estimate:
            event["estimate"] = True
        return self._invoke(event)
