"""Run one stored query and record what happens to it: the part of the service that executes.

:func:`run_query` is called by whatever executes queries — the background thread of ``squall serve``
(:class:`~squall.service.backend.LocalBackend`) or the driver Lambda function
(:func:`handle_driver_event`). It reads ``<id>/request.json``, runs the SQL on a Connection and writes
``<id>/status.json`` (running → progress → succeeded/failed/cancelled) and the result objects. It is the
only writer of a query's status after submission, so status writes never race.

Cancellation: a watcher thread checks the ``cancel`` event (set in-process by the backend) and the store's
cancel marker (``<id>/cancel``, written by the API — the way a DELETE reaches a driver in another process)
and the query's ``timeout_s``; once triggered it calls ``Platform.cancel()`` until the query returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from squall.connection import Connection
from squall.driver.platforms.base import Progress
from squall.errors import DataError, NotSupportedError, SquallError, UserError
from squall.formats import encode
from squall.service import records
from squall.service.state import StateStore, state_store

log = logging.getLogger("squall.service")

ConnectionFor = Callable[[int | None], Connection]


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
    """Watches for cancellation and timeout while a query runs; cancels the platform when one happens."""

    def __init__(
        self,
        store: StateStore,
        query_id: str,
        connection: Connection,
        cancel: threading.Event | None,
        timeout_s: float | None,
        poll_s: float,
        tick: Callable[[], None] | None = None,
    ) -> None:
        self.store, self.query_id, self.connection = store, query_id, connection
        self.tick = tick
        self.cancel_event = cancel or threading.Event()
        self.deadline = time.monotonic() + timeout_s if timeout_s else None
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
            self._done.wait(0.1)
        # keep cancelling until the query returns: a cancel before the platform started is a no-op
        while not self._done.is_set():
            try:
                self.connection.platform.cancel()
            except Exception:
                log.warning("platform cancel failed for %s", self.query_id, exc_info=True)
            self._done.wait(0.5)


class _StatusWriter:
    """The query's status document; writes are serialized and stop after the final one."""

    def __init__(self, store: StateStore, query_id: str, doc: dict[str, Any], interval_s: float) -> None:
        self.store, self.query_id, self.doc = store, query_id, doc
        self.interval_s = interval_s
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
) -> str:
    """Execute the stored query ``query_id`` and record its outcome; returns the final status.

    Safe to call twice for the same id (a retried Lambda event): a query that is already running or
    finished is left alone.
    """
    request = store.get_json(records.request_key(query_id))
    if request is None:
        log.warning("query %s has no request; nothing to run", query_id)
        return "failed"
    doc = store.get_json(records.status_key(query_id)) or {"query_id": query_id, "status": "queued"}
    if doc.get("status") != "queued":
        return str(doc.get("status"))
    status = _StatusWriter(store, query_id, doc, progress_interval_s)
    if (cancel is not None and cancel.is_set()) or store.exists(records.cancel_key(query_id)):
        status.write(status="cancelled", finished_at=time.time(),
                     error={"error": "QueryCancelled", "detail": "query cancelled before it started"})  # fmt: skip
        return "cancelled"
    status.write(status="running", started_at=time.time())
    fmt = request.get("format") or "arrow"
    try:
        connection = connection_for(request.get("workers"))
        timeout_s = request.get("timeout_s")
        with _Watch(store, query_id, connection, cancel, timeout_s, poll_s, status.flush) as watch:
            try:
                result = connection.sql(request["sql"], progress=status.progress)
            except BaseException:
                if watch.cancelled:
                    status.write(status="cancelled", finished_at=time.time(),
                                 error={"error": "QueryCancelled", "detail": "query cancelled"})  # fmt: skip
                    return "cancelled"
                if watch.timed_out:
                    detail = f"query timed out after {request.get('timeout_s')} s"
                    status.write(status="failed", finished_at=time.time(),
                                 error={"error": "QueryCancelled", "detail": detail})  # fmt: skip
                    return "failed"
                raise
        table = result.to_arrow()
        stats = dict(result.stats)
        stats["engine_query_id"], stats["query_id"] = stats.get("query_id"), query_id
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
        return "succeeded"
    except Exception as err:
        if not isinstance(err, UserError):
            log.exception("query %s failed", query_id)
        status.write(status="failed", finished_at=time.time(), error=error_doc(err))
        return "failed"


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
    and ``"estimate"`` holds it (``time_s``, ``cost_usd``, ``requests``, ``profile``, ``workers``, ``label``)."""
    from squall.driver.forecast.predict import format_estimate, summary
    from squall.driver.report.explain import explain_plan

    plan = con.plan(sql)
    doc: dict[str, Any] = {"text": explain_plan(plan), "plan": plan.to_dict()}
    if estimate:
        est = con.estimator.estimate(plan)
        doc["text"] = f"{doc['text'].rstrip()}\n\n{format_estimate(est, con.estimator)}"
        doc["estimate"] = summary(est, con.estimator)
    return doc


def handle_driver_event(
    event: dict[str, Any], connection_for: ConnectionFor, store: StateStore | None = None
) -> dict[str, Any]:
    """The driver Lambda function's work for the API (``functions/driver.py`` calls this).

    Events (sent by :class:`~squall.service.backend.LambdaBackend`):

    - ``{"op": "run", "query_id": ID, "state": URL}`` (asynchronous) → runs the stored query;
    - ``{"op": "tables"}`` → ``{"tables": [...]}`` (the catalog with schemas);
    - ``{"op": "explain", "sql": SQL, "workers": W, "estimate"?: true}`` → ``{"text": ..., "plan": {...}}``
      (+ ``"estimate"``, see :func:`explain_doc`).

    User errors come back as ``{"error": ClassName, "detail": message}``.
    """
    op = event.get("op", "run")
    try:
        if op == "run":
            target = store or state_store(event["state"])
            return {"status": run_query(target, event["query_id"], connection_for)}
        if op == "tables":
            return {"tables": describe_tables(connection_for(None))}
        if op == "explain":
            return explain_doc(
                connection_for(event.get("workers")), event["sql"], bool(event.get("estimate"))
            )
    except UserError as err:
        return error_doc(err)
    return {"error": "OptionError", "detail": f"unknown driver op {op!r}"}
