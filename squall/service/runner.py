"""Run one stored query and record what happens to it: the part of the service that executes.

:func:`run_query` is called by whatever executes queries — the background thread of ``squall serve``
(:class:`~squall.service.backend.LocalBackend`) or the driver Lambda function
(:func:`handle_driver_event`). It reads ``<id>/request.json``, runs the SQL on a Connection and writes
``<id>/status.json`` (running → progress → succeeded/failed/cancelled) and the result objects. It is the
only writer of a query's status after submission, so status writes never race.

Cancellation: a watcher thread checks the ``cancel`` event (set in-process by the backend) and the store's
cancel marker (``<id>/cancel``, written by the API — the way a DELETE reaches a driver in another process)
and the query's deadlines; once triggered it cancels the query on its Connection (``Connection.cancel(id)``)
until it returns.

Deadlines: ``timeout_s`` of the request counts from **submission** (``created_at``): time spent queued counts, and
a query whose timeout passed in the queue fails without running. :class:`Limits` ``max_run_s`` is the server's
maximum run time, counted from the start. Other :class:`Limits`: a result of more than ``max_result_rows`` rows
or ``max_result_bytes`` bytes is refused (:class:`~squall.errors.LimitExceeded`: write it with COPY or
``squall query --output`` instead); ``max_scan_bytes`` is checked before the query runs (:meth:`Limits.check_scan`,
by the backend when it accepts the query).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from squall.connection import Connection
from squall.driver.platforms.base import Progress
from squall.errors import DataError, LimitExceeded, NotSupportedError, SquallError, UserError
from squall.formats import encode
from squall.service import records
from squall.service.audit import AuditLog
from squall.service.scheduler import planned_scan_bytes
from squall.service.state import StateStore, state_store
from squall.service.users import ANONYMOUS, User, check_plan

log = logging.getLogger("squall.service")

ConnectionFor = Callable[[int | None], Connection]
#: ``on_end(request, final status)``: called once when a query ends (the audit log's end line)
OnEnd = Callable[[dict[str, Any], dict[str, Any]], None]


@dataclass(frozen=True)
class Limits:
    """What one query of a service may take (None: no limit). See the module doc. ``user``: these are a user's
    own limits (the users file's ``max_bytes_scanned``, …), and refusals name the user and the key."""

    max_result_rows: int | None = None
    max_result_bytes: int | None = None
    max_scan_bytes: int | None = None
    max_run_s: float | None = None
    user: str | None = None

    @classmethod
    def of_request(cls, request: dict[str, Any]) -> Limits | None:
        """The user's own limits stored in a query's request (``request["limits"]``), None when it has none."""
        doc = request.get("limits")
        if not isinstance(doc, dict) or not doc:
            return None
        return cls(doc.get("max_result_rows"), doc.get("max_result_bytes"), doc.get("max_bytes_scanned"),
                   doc.get("max_run_time"), user=str(request.get("user") or ANONYMOUS))  # fmt: skip

    def _whose(self, key: str, value: str, server: str, user: str) -> str:
        """``server (value)``, or for a user's limits ``user USER may … (key value)``."""
        return f"user {self.user} may {user} ({key} {value})" if self.user else f"{server} ({value})"

    def check_scan(self, scan_bytes: int) -> None:
        """LimitExceeded when a plan that reads ``scan_bytes`` may not run here."""
        if self.max_scan_bytes is not None and scan_bytes > self.max_scan_bytes:
            limit = self._whose("max_bytes_scanned", _size(self.max_scan_bytes),
                                "this server lets one query read", "read in one query")  # fmt: skip
            raise LimitExceeded(
                f"the query would read {_size(scan_bytes)}, more than {limit}: filter on fewer rows or columns"
            )

    def check_result(self, table: pa.Table) -> None:
        """LimitExceeded when ``table`` is larger than a result this server (or user) keeps."""
        rows, size = table.num_rows, table.nbytes
        if self.max_result_rows is not None and rows > self.max_result_rows:
            limit = self._whose(
                "max_result_rows", f"{self.max_result_rows:,}", "this server returns", "fetch"
            )
            what = f"{rows:,} rows, more than {limit}"
        elif self.max_result_bytes is not None and size > self.max_result_bytes:
            limit = self._whose(
                "max_result_bytes", _size(self.max_result_bytes), "this server returns", "fetch"
            )
            what = f"{_size(size)}, more than {limit}"
        else:
            return
        raise LimitExceeded(
            f"the result has {what}: write it with COPY (query) TO 'target' or squall query --output, "
            "or aggregate or LIMIT it"
        )

    def run_time_detail(self) -> str:
        """The error of a query stopped at ``max_run_s``."""
        assert self.max_run_s is not None
        if self.user:
            return (f"query ran longer than user {self.user}'s maximum run time (max_run_time {self.max_run_s:g} s) "
                    "and was stopped")  # fmt: skip
        return f"query ran longer than this server's maximum run time ({self.max_run_s:g} s) and was stopped"


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def progress_doc(state: Progress) -> dict[str, Any]:
    """The ``progress`` field of a status: stages and ranks done, from a ``Progress`` callback."""
    done = {str(stage): n for stage, n in sorted(state.done.items())}
    return {
        "stages": state.stages,
        "world_size": state.world_size,
        "stages_done": sum(1 for n in state.done.values() if n >= state.world_size),
        "ranks_done": done,
        "fraction": round(state.fraction, 4),
    }


def error_doc(err: BaseException) -> dict[str, str]:
    """``{error, detail}`` for an exception: the squall.errors class name and its one-line message."""
    if isinstance(err, SquallError):
        return {"error": type(err).__name__, "detail": str(err)}
    return {"error": "InternalError", "detail": f"{type(err).__name__}: {err}"}


class _Watch:
    """Watches for cancellation and deadlines while a query runs; cancels the query when one happens.

    ``deadline`` (``time.monotonic()``) and ``timeout_detail``: when the query must end and what its error then
    says (its timeout counted from submission, or the server's maximum run time)."""

    def __init__(
        self,
        store: StateStore,
        query_id: str,
        connection: Connection,
        cancel: threading.Event | None,
        deadline: tuple[float, str] | None,
        poll_s: float,
        tick: Callable[[], None] | None = None,
    ) -> None:
        self.store, self.query_id, self.connection = store, query_id, connection
        self.tick = tick
        self.cancel_event = cancel or threading.Event()
        self.deadline: float | None = deadline[0] if deadline is not None else None
        self.timeout_detail = deadline[1] if deadline is not None else ""
        self.poll_s = poll_s
        self.cancelled = False
        self.timed_out = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"squall-watch-{query_id}", daemon=True)

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def _check_store(self) -> bool:
        try:
            return self.store.exists(records.cancel_key(self.query_id))
        except Exception:  # a transient store error must not kill the query
            log.warning("cannot check the cancel marker of %s", self.query_id, exc_info=True)
            return False

    def _run(self) -> None:
        next_poll = time.monotonic() + self.poll_s
        while not self._done.is_set():
            now = time.monotonic()
            if self.cancel_event.is_set():
                self.cancelled = True
            elif self.deadline is not None and now >= self.deadline:
                self.timed_out = True
            elif now >= next_poll:
                next_poll = now + self.poll_s
                self.cancelled = self._check_store()
            if self.cancelled or self.timed_out:
                break
            if self.tick is not None:
                self.tick()
            self._done.wait(0.05 if self.deadline is None else min(0.05, max(0.0, self.deadline - now)))
        # keep cancelling until the query returns: a cancel before the query started is otherwise lost
        while not self._done.is_set():
            try:
                self.connection.cancel(self.query_id)
            except Exception:
                log.warning("cancel failed for %s", self.query_id, exc_info=True)
            self._done.wait(0.2)


class _StatusWriter:
    """The query's status document; writes are serialized and stop after the final one."""

    def __init__(
        self,
        store: StateStore,
        query_id: str,
        doc: dict[str, Any],
        interval_s: float,
        on_end: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.store, self.query_id, self.doc = store, query_id, doc
        self.interval_s = interval_s
        self.on_end = on_end
        self._lock = threading.Lock()
        self._last = 0.0
        self._final = False
        self._dirty = False

    def write(self, **fields: Any) -> None:
        with self._lock:
            if self._final:
                return
            self.doc.update(fields)
            self._final = self.doc["status"] in records.TERMINAL
            self.store.put_json(records.status_key(self.query_id), self.doc)
            self._last = time.monotonic()
            if self._final and self.on_end is not None:
                try:
                    self.on_end(dict(self.doc))
                except Exception:  # the audit must not fail the query
                    log.warning("cannot record the end of %s", self.query_id, exc_info=True)

    def progress(self, state: Progress) -> None:
        """Record progress; written at most every ``interval_s`` (the watcher flushes the last one)."""
        doc = progress_doc(state)
        with self._lock:
            if self._final:
                return
            self.doc["progress"] = doc
            self._dirty = True
            if doc["stages_done"] == doc["stages"] or time.monotonic() - self._last >= self.interval_s:
                self._flush()

    def flush(self) -> None:
        """Write progress that was held back by the interval, once the interval has passed."""
        with self._lock:
            if self._dirty and not self._final and time.monotonic() - self._last >= self.interval_s:
                self._flush()

    def _flush(self) -> None:
        try:
            self.store.put_json(records.status_key(self.query_id), self.doc)
        except Exception:
            log.warning("cannot write progress of %s", self.query_id, exc_info=True)
        self._last = time.monotonic()
        self._dirty = False


def run_query(
    store: StateStore,
    query_id: str,
    connection_for: ConnectionFor,
    *,
    cancel: threading.Event | None = None,
    poll_s: float = 1.0,
    progress_interval_s: float = 0.5,
    limits: Limits | None = None,
    scheduling: dict[str, Any] | None = None,
    on_end: OnEnd | None = None,
) -> str:
    """Execute the stored query ``query_id`` and record its outcome; returns the final status.

    Safe to call twice for the same id (a retried Lambda event): a query that is already running or
    finished is left alone. ``limits``: the server's, see :class:`Limits` (None: none); the user's own limits
    and catalogs come with the request (``limits``, ``catalogs``: :func:`check_request`). ``on_end(request,
    status)`` is called once with the final status (the audit log's end line). ``scheduling``: what the
    scheduler decided for the query (its group, the workers it runs on and why), kept in its status and ``stats``.
    """
    request = store.get_json(records.request_key(query_id))
    if request is None:
        log.warning("query %s has no request; nothing to run", query_id)
        return "failed"
    doc = store.get_json(records.status_key(query_id)) or {"query_id": query_id, "status": "queued"}
    if doc.get("status") != "queued":
        return str(doc.get("status"))
    ended = (lambda final: on_end(request, final)) if on_end is not None else None
    status = _StatusWriter(store, query_id, doc, progress_interval_s, ended)
    if (cancel is not None and cancel.is_set()) or store.exists(records.cancel_key(query_id)):
        status.write(status="cancelled", finished_at=time.time(),
                     error={"error": "QueryCancelled", "detail": "query cancelled before it started"})  # fmt: skip
        return "cancelled"
    user_limits = Limits.of_request(request)
    deadline = _deadline(request, doc, limits or Limits(), user_limits)
    if deadline is not None and deadline[0] <= time.monotonic():
        status.write(status="failed", finished_at=time.time(),
                     error={"error": "QueryCancelled", "detail": deadline[1]})  # fmt: skip
        return "failed"
    try:
        connection = connection_for(request.get("workers"))
        check_request(connection, request, user_limits)
    except UserError as err:  # a table the user may not read, a plan beyond the user's bytes: never runs
        status.write(status="failed", finished_at=time.time(), error=error_doc(err))
        return "failed"
    status.write(
        status="running", started_at=time.time(), **({"scheduling": scheduling} if scheduling else {})
    )
    try:
        with _Watch(store, query_id, connection, cancel, deadline, poll_s, status.flush) as watch:
            try:
                result = connection.sql(request["sql"], progress=status.progress, query_id=query_id)
            except BaseException:
                if watch.cancelled:
                    status.write(status="cancelled", finished_at=time.time(),
                                 error={"error": "QueryCancelled", "detail": "query cancelled"})  # fmt: skip
                    return "cancelled"
                if watch.timed_out:
                    status.write(status="failed", finished_at=time.time(),
                                 error={"error": "QueryCancelled", "detail": watch.timeout_detail})  # fmt: skip
                    return "failed"
                raise
        _store_result(store, query_id, request, result, status, (limits or Limits(), user_limits))
        return "succeeded"
    except Exception as err:
        if not isinstance(err, SquallError):  # a bug: the traceback helps
            log.exception("query %s failed", query_id)
        elif not isinstance(err, UserError):  # a worker crashed, …: its message says it all
            log.warning("query %s failed: %s", query_id, err)
        status.write(status="failed", finished_at=time.time(), error=error_doc(err))
        return "failed"


def fail_unstarted(store: StateStore, query_id: str, detail: str, on_end: OnEnd | None = None) -> None:
    """Record a query that never started as failed (``ServerStopped``: the server stopped with it queued)."""
    doc = store.get_json(records.status_key(query_id))
    if doc is not None and doc.get("status") == "queued":
        doc.update(
            status="failed", finished_at=time.time(), error={"error": "ServerStopped", "detail": detail}
        )
        store.put_json(records.status_key(query_id), doc)
        if on_end is not None:
            on_end(store.get_json(records.request_key(query_id)) or {}, doc)


def check_request(connection: Connection, request: dict[str, Any], user_limits: Limits | None) -> None:
    """PermissionDenied when the query reads a table outside the request's ``catalogs`` (the user's), and
    LimitExceeded when its plan reads more than the user's ``max_bytes_scanned``; nothing to check (no such
    limits, or a statement without a plan such as DROP TABLE): nothing is planned."""
    catalogs = request.get("catalogs")
    if catalogs is None and (user_limits is None or user_limits.max_scan_bytes is None):
        return
    try:
        plan = connection.plan(str(request.get("sql")))
    except UserError:  # no plan to check: running it reports its own error
        return
    if catalogs is not None:
        user = User(str(request.get("user") or ANONYMOUS), catalogs=tuple(catalogs))
        named = connection.catalog.catalogs
        check_plan(user, plan, named.names() if named is not None else ())
    if user_limits is not None:
        user_limits.check_scan(planned_scan_bytes(plan))


def _deadline(
    request: dict[str, Any], doc: dict[str, Any], limits: Limits, user_limits: Limits | None = None
) -> tuple[float, str] | None:
    """When the query must end (``time.monotonic()``) and what its error says then: its ``timeout_s`` counted
    from submission, or the server's (or the user's) maximum run time from now, whichever comes first."""
    options: list[tuple[float, str]] = []
    now_wall, now = time.time(), time.monotonic()
    timeout_s = request.get("timeout_s")
    if timeout_s:
        created = doc.get("created_at")
        waited = max(0.0, now_wall - created) if isinstance(created, (int, float)) else 0.0
        detail = f"query timed out after {timeout_s:g} s"
        if waited >= 0.05:
            detail += f" (counted from submission: it waited {waited:.1f} s in the queue)"
        options.append((now + float(timeout_s) - waited, detail))
    for each in (limits, user_limits):
        if each is not None and each.max_run_s:
            options.append((now + each.max_run_s, each.run_time_detail()))
    return min(options, key=lambda o: o[0]) if options else None


def _store_result(
    store: StateStore,
    query_id: str,
    request: dict[str, Any],
    result: Any,
    status: _StatusWriter,
    limits: tuple[Limits, Limits | None],
) -> None:
    """Check the result against the limits (the server's, the user's), write it (Arrow, and the requested
    format) and the final status."""
    table = result.to_arrow()
    for each in limits:
        if each is not None:
            each.check_result(table)
    fmt = request.get("format") or "arrow"
    stats = dict(result.stats)
    stats["engine_query_id"], stats["query_id"] = stats.get("query_id"), query_id
    if "scheduling" in status.doc:
        stats["scheduling"] = status.doc["scheduling"]
    arrow = encode(table, "arrow")
    store.put(records.result_key(query_id, "arrow"), arrow, content_type="application/octet-stream")
    sizes = {"arrow": len(arrow)}
    if fmt != "arrow":
        data = encode(table, fmt)
        store.put(records.result_key(query_id, fmt), data)
        sizes[fmt] = len(data)
    info = {"rows": table.num_rows, "columns": table.column_names, "bytes": sizes}
    status.write(status="succeeded", finished_at=time.time(), stats=stats, result=info,
                 **written_doc(stats))  # fmt: skip


def written_doc(stats: dict[str, Any]) -> dict[str, Any]:
    """``{"written": {target, rows, files, bytes}}`` for a write statement's status (``{}`` for a query)."""
    written = stats.get("written")
    if not isinstance(written, dict):
        return {}
    return {"written": {"target": str(written.get("target", "")), "rows": int(written.get("rows", 0)),
                        "files": int(written.get("files", 0)), "bytes": int(written.get("bytes", 0))}}  # fmt: skip


def describe_tables(connection: Connection) -> list[dict[str, Any]]:
    """The catalog of ``connection``: name, columns (name, Arrow type, nullable), row count and format per table;
    for Iceberg tables also their partitioning (``month(o_orderdate)``…) and current snapshot. The tables of
    named catalogs are listed as ``catalog.namespace.table``."""
    catalog = connection.catalog
    names = [(name, name) for name in connection.tables()]
    out: list[dict[str, Any]] = []
    if catalog.catalogs is not None:
        from squall.driver.catalog.catalogs import resolve

        try:
            names += [(".".join(parts), resolve(catalog, parts, None)) for parts in catalog.catalogs.tables()]
        except (DataError, NotSupportedError) as err:  # said, and the other tables still listed
            out.append({"name": "(catalogs)", "columns": [], "rows": None, "error": str(err)})
    for shown, name in names:
        try:
            info = catalog.table(name)
            described = _describe_source(connection, name)
        except (DataError, NotSupportedError) as err:  # listed, with why it cannot be read
            out.append({"name": shown, "columns": [], "rows": None, "error": str(err)})
            continue
        columns = [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in info.schema]
        out.append({"name": shown, "columns": columns, "rows": info.num_rows, **described})
    return out


def _describe_source(connection: Connection, name: str) -> dict[str, Any]:
    """``format`` (and what a lake table's source says of itself: ``partitioning``, ``snapshot`` (Delta: the
    version)) of table ``name``."""
    fmt = connection.catalog.format_of(name) or "parquet"
    if fmt == "parquet":  # hive partitions: the key=value columns
        partitioning = list(connection.catalog.source(name).partition_columns())
        return {"format": fmt, **({"partitioning": partitioning} if partitioning else {})}
    if fmt not in ("iceberg", "delta"):
        return {"format": fmt}
    describe = getattr(connection.catalog.source(name), "describe", None)
    return {"format": fmt, **(describe() if describe is not None else {})}


def explain_doc(con: Connection, sql: str, estimate: bool = False) -> dict[str, Any]:
    """``{"text", "plan"}`` of ``sql``; with ``estimate``: the text ends with the scale model's prediction
    and ``"estimate"`` holds it (``time_s``, ``cost_usd``, ``requests``, ``profile``, ``workers``, ``label``,
    ``memory_mb``, ``budget_mb``)."""
    from squall.driver.forecast.predict import format_estimate, summary
    from squall.driver.report.explain import explain_plan

    plan = con.plan(sql)
    doc: dict[str, Any] = {"text": explain_plan(plan), "plan": plan.to_dict()}
    if estimate:
        est = con.estimator.estimate(plan)
        doc["text"] = f"{doc['text'].rstrip()}\n\n{format_estimate(est, con.estimator)}"
        doc["estimate"] = summary(est, con.estimator)
    return doc


_audit_logs: dict[str, AuditLog | None] = {}


def _driver_audit() -> AuditLog | None:
    """The driver function's audit log (:meth:`AuditLog.from_env`), opened once per ``SQUALL_AUDIT_LOG``."""
    key = os.environ.get("SQUALL_AUDIT_LOG") or ""
    if key not in _audit_logs:
        _audit_logs[key] = AuditLog.from_env()
    return _audit_logs[key]


def handle_driver_event(
    event: dict[str, Any], connection_for: ConnectionFor, store: StateStore | None = None
) -> dict[str, Any]:
    """The driver Lambda function's work for the API (``functions/driver.py`` calls this).

    Events (sent by :class:`~squall.service.backend.LambdaBackend`):

    - ``{"op": "run", "query_id": ID, "state": URL}`` (asynchronous) → runs the stored query (with the
      user's limits and catalogs stored in its request; its audit end line on stdout, ``SQUALL_AUDIT_LOG``);
    - ``{"op": "tables"}`` → ``{"tables": [...]}`` (the catalog with schemas);
    - ``{"op": "explain", "sql": SQL, "workers": W, "estimate"?: true}`` → ``{"text": ..., "plan": {...}}``
      (+ ``"estimate"``, see :func:`explain_doc`).

    User errors come back as ``{"error": ClassName, "detail": message}``.
    """
    op = event.get("op", "run")
    try:
        if op == "run":
            target = store or state_store(event["state"])
            audit = _driver_audit()  # stdout: CloudWatch Logs
            ended = audit.ended if audit is not None else None
            return {"status": run_query(target, event["query_id"], connection_for, on_end=ended)}
        if op == "tables":
            return {"tables": describe_tables(connection_for(None))}
        if op == "explain":
            return explain_doc(
                connection_for(event.get("workers")), event["sql"], bool(event.get("estimate"))
            )
    except UserError as err:
        return error_doc(err)
    return {"error": "OptionError", "detail": f"unknown driver op {op!r}"}
