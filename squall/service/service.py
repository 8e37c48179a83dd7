"""The operations behind the REST endpoints, independent of HTTP: submit, status, result, cancel, history,
tables, and the expiry of old queries.

A :class:`Service` joins a :class:`~squall.service.state.StateStore` (query state) and a
:class:`~squall.service.backend.Backend` (where queries run). :mod:`squall.service.api` maps HTTP onto it.

Results expire: with ``result_ttl_s`` a query that finished longer ago than that answers 410 (``Expired``),
and :meth:`Service.sweep` deletes its state (``squall serve`` sweeps in a background thread; the deployed
stack's bucket has lifecycle rules on the same prefix).

With an ``owner`` (``squall serve``: this process, see :mod:`squall.service.recovery`) every query records the
server that runs it; a query left queued or running by a server that stopped reads as failed
(``ServerStopped``), and :meth:`Service.recover` marks all of them at start. Nothing here holds a lock while it
plans, converts or reads: requests run in parallel.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from squall.errors import OptionError, UserError
from squall.formats import CONTENT_TYPES, TEXT_FORMATS, decode_arrow, encode
from squall.service import records, recovery
from squall.service.audit import AuditLog
from squall.service.backend import Backend
from squall.service.errors import Busy, Conflict, Gone, NotAcceptable, NotFound, public_detail
from squall.service.models import SQL_PREVIEW
from squall.service.state import Link, LocalStateStore, StateStore, state_store
from squall.service.users import ADMIN_ANONYMOUS, ANONYMOUS, User, Users

log = logging.getLogger("squall.service")

#: Results up to this size are sent in the response body; larger ones as a link. Lambda's response limit is
#: 6 MB and binary bodies are base64-encoded (x4/3), so 4 MiB is the largest safe default.
DEFAULT_INLINE_LIMIT = 4 * 1024 * 1024
MAX_IDEMPOTENCY_KEY = 255
#: Rows per page of a CSV or JSON result when the request gives no ``limit``.
DEFAULT_PAGE_ROWS = 1000
MAX_PAGE_ROWS = 1_000_000
#: ``squall serve --result-ttl`` default: a day.
DEFAULT_RESULT_TTL_S = 24 * 3600
#: ``GET /v1/queries?status=``: query ids whose status is read per request at most (then a page token)
MAX_SCAN = 500

#: Accept media types → result format.
MEDIA_TYPES: dict[str, str] = {
    "application/json": "json",
    "text/csv": "csv",
    "application/vnd.apache.arrow.stream": "arrow",
    "application/vnd.apache.parquet": "parquet",
    "application/x-parquet": "parquet",
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_ttl(text: str) -> float | None:
    """A duration such as ``3600``, ``90s``, ``30m``, ``24h`` or ``7d`` in seconds; ``0``, ``off`` or
    ``never``: None (never expire). OptionError otherwise."""
    if text.strip().lower() in ("off", "never", "none"):
        return None
    match = _DURATION.match(text.lower())
    if not match:
        raise OptionError(f"invalid duration {text!r}: use seconds or a number with s, m, h or d (24h)")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    return seconds or None


def negotiate(accept: str | None, submitted: str | None) -> str:
    """The result format for an ``Accept`` header: the first listed media type we serve (by ``q``);
    a wildcard (curl's ``*/*``) or no header: the format the query was submitted with, else JSON.
    NotAcceptable when nothing listed is served."""
    fallback = submitted or "json"
    if not accept or not accept.strip():
        return fallback
    ranked: list[tuple[float, int, str]] = []
    for i, item in enumerate(accept.split(",")):
        media, *params = (part.strip() for part in item.split(";"))
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if media and q > 0:
            ranked.append((-q, i, media.lower()))
    for _, _, media in sorted(ranked):
        if media in MEDIA_TYPES:
            return MEDIA_TYPES[media]
        if media == "*/*" or media == "*":
            return fallback
        if media == "application/*":
            return fallback if fallback != "csv" else "json"
        if media == "text/*":
            return "csv"
    raise NotAcceptable(
        f"cannot answer Accept: {accept[:200]}; results are " + ", ".join(sorted(set(MEDIA_TYPES)))
    )


@dataclass(frozen=True)
class ResultBody:
    """A result to send: inline ``data``, or a ``link`` (presigned URL or local file)."""

    format: str
    content_type: str
    filename: str
    size: int
    data: bytes | None = None
    link: Link | None = None
    #: rows of the whole result; this body holds rows ``offset`` … ``offset + rows - 1``
    total_rows: int | None = None
    offset: int = 0
    rows: int | None = None
    #: where the next page starts (None: this is the last page)
    next_offset: int | None = None
    limit: int | None = None


class Service:
    """Queries over a state store and a backend.

    ``inline_limit``: results up to this many bytes are returned inline, larger ones as a presigned URL
    (S3 store) or streamed from the file by ``squall serve`` (local store). ``link_expires_s``: lifetime of
    presigned URLs. ``users``: who may call the API (:mod:`squall.service.users`; none: no authentication);
    ``token``: the single-user shorthand (one admin user with this bearer token). ``result_ttl_s``: a
    finished query expires this long after it finished (None: never). ``owner``: the process that runs the
    queries (:func:`squall.service.recovery.owner_stamp`; None when they run elsewhere, as on Lambda).
    ``audit``: where the audit lines go (:mod:`squall.service.audit`; None: nowhere).

    Every query records its user; the methods that take a ``user`` show, page and cancel only that user's
    queries (another user's id is a NotFound, as an unknown id is), unless the user is an admin; ``user=None``
    (callers inside the process) sees every query.
    """

    def __init__(
        self,
        store: StateStore,
        backend: Backend,
        *,
        inline_limit: int = DEFAULT_INLINE_LIMIT,
        link_expires_s: int = 3600,
        token: str | None = None,
        result_ttl_s: float | None = None,
        owner: dict[str, Any] | None = None,
        users: Users | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.owner = owner
        self.inline_limit = inline_limit
        self.link_expires_s = link_expires_s
        self.token = token or None
        self.users = (users or Users()).with_token(self.token)
        self.audit = audit
        if audit is not None:
            backend.on_end = audit.ended
        self.result_ttl_s = result_ttl_s or None
        self._tables: OrderedDict[str, pa.Table] = OrderedDict()
        self._tables_lock = threading.Lock()
        self._planning = 0  # requests planning a query now (see planning)
        self._planning_lock = threading.Lock()

    @property
    def planning(self) -> int:
        """How many requests are planning a query now (``squall serve`` defers full garbage collections
        while one is: they would stall every request for as long as a large plan's objects take to scan)."""
        return self._planning

    @contextlib.contextmanager
    def _plans(self) -> Iterator[None]:
        with self._planning_lock:
            self._planning += 1
        try:
            yield
        finally:
            with self._planning_lock:
                self._planning -= 1

    @classmethod
    def from_env(cls) -> Service:
        """The deployed API's service: S3 state (``SQUALL_STATE`` or ``s3://$SQUALL_BUCKET/$SQUALL_QUERIES_PREFIX``),
        queries on the driver function (``SQUALL_DRIVER_FUNCTION``) as admitted by the limits of ``SQUALL_SERVICE``
        and ``SQUALL_CONCURRENCY`` (:func:`~squall.service.backend.deployed_limits`), ``SQUALL_MAX_WORKERS``,
        ``SQUALL_INLINE_LIMIT``, ``SQUALL_API_TOKEN`` (optional bearer token), ``SQUALL_RESULT_TTL`` (e.g.
        ``7d``: answer 410 for older queries; the bucket's lifecycle rule deletes them), ``SQUALL_USERS`` (the
        users: a TOML file's path or inline JSON, see :meth:`Users.from_env`), ``SQUALL_AUDIT_LOG`` (default
        stdout, i.e. CloudWatch Logs; ``off``)."""
        from squall.service.backend import LambdaBackend

        url = os.environ.get("SQUALL_STATE")
        if not url:
            bucket = os.environ.get("SQUALL_BUCKET")
            if not bucket:
                raise OptionError("set SQUALL_BUCKET (or SQUALL_STATE) for the query state")
            url = f"s3://{bucket}/{os.environ.get('SQUALL_QUERIES_PREFIX', 'queries/')}"
        driver = os.environ.get("SQUALL_DRIVER_FUNCTION")
        if not driver:
            raise OptionError("set SQUALL_DRIVER_FUNCTION: the function that runs queries")
        store = state_store(url)  # the backend's admission state lives there too
        backend = LambdaBackend(
            driver, max_workers=int(os.environ.get("SQUALL_MAX_WORKERS", "64")), store=store
        )
        return cls(
            store,
            backend,
            inline_limit=int(os.environ.get("SQUALL_INLINE_LIMIT", DEFAULT_INLINE_LIMIT)),
            token=os.environ.get("SQUALL_API_TOKEN"),
            result_ttl_s=parse_ttl(os.environ.get("SQUALL_RESULT_TTL") or "off"),
            users=Users.from_env(),
            audit=AuditLog.from_env(),
        )

    # --- queries --------------------------------------------------------------------------------

    def submit(
        self,
        sql: str,
        *,
        workers: int | None = None,
        fmt: str | None = None,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
        user: User | None = None,
        client: str | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Accept a query of ``user`` (None: anonymous, an admin) from address ``client``; returns its status
        and whether it was an idempotent replay.

        The SQL is checked first, then what the user may read and scan (a UserError means nothing is stored;
        the audit log records the refusal). With ``idempotency_key`` the key object (the user's own) is
        created atomically: the first request creates the query, later ones with the same key and the same
        request get the same query id, with a different request a Conflict.
        """
        user = user or ADMIN_ANONYMOUS
        request: dict[str, Any] = {"sql": sql, "workers": workers, "format": fmt, "timeout_s": timeout_s}
        try:
            with self._plans():
                self.backend.check(sql, workers)
                self.backend.check_user(sql, workers, user)
        except (UserError, Busy) as err:
            if self.audit is not None:
                detail = err.detail if isinstance(err, Busy) else str(err)
                self.audit.refused(user.name, sql, client, type(err).__name__, detail)
            raise
        query_id = records.new_query_id()
        replayed = False
        if idempotency_key is not None:
            scoped = idempotency_key if user.name == ANONYMOUS else f"{user.name}\n{idempotency_key}"
            query_id, replayed = self._claim(scoped, request, query_id, idempotency_key)
        own = {"max_running": user.max_running, "max_queued": user.max_queued, **user.limits_doc()}
        request.update(user=user.name, client=client, limits={k: v for k, v in own.items() if v is not None})
        if user.catalogs is not None:
            request["catalogs"] = list(user.catalogs)
        self._start(query_id, request)
        return self.status(query_id, user), replayed

    def _claim(self, key: str, request: dict[str, Any], query_id: str, given: str) -> tuple[str, bool]:
        if not 1 <= len(given) <= MAX_IDEMPOTENCY_KEY or not given.isprintable() or not given.isascii():
            raise OptionError(
                f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters"
            )
        digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
        entry = {"query_id": query_id, "request_hash": digest, "created_at": time.time()}
        if self.store.put_json(records.idempotency_key(key), entry, create_only=True):
            return query_id, False
        existing = self.store.get_json(records.idempotency_key(key))
        if existing is None:  # only possible if it was deleted in between
            raise Conflict("Idempotency-Key is being processed; retry")
        if existing.get("request_hash") != digest:
            raise Conflict("Idempotency-Key was already used for a different request")
        return str(existing["query_id"]), True

    def _start(self, query_id: str, request: dict[str, Any]) -> None:
        """Create the query once (request.json is created atomically) and hand it to the backend."""
        if not self.store.put_json(records.request_key(query_id), request, create_only=True):
            return  # an earlier request with the same Idempotency-Key created it
        status = {
            "query_id": query_id,
            "status": "queued",
            "user": request.get("user"),
            "sql": request["sql"],
            "workers": request["workers"],
            "format": request["format"],
            "timeout_s": request["timeout_s"],
            "created_at": time.time(),
        }
        if self.owner is not None:
            status["server"] = self.owner
        self.store.put_json(records.status_key(query_id), status)
        if self.audit is not None:
            self.audit.submitted(request, query_id)
        try:
            self.backend.submit(query_id, self.store)
        except Busy as err:
            status.update(
                status="failed", finished_at=time.time(), error={"error": "Busy", "detail": str(err)}
            )
            self.store.put_json(records.status_key(query_id), status)
            if self.audit is not None:
                self.audit.ended(request, status)
            raise

    def _cutoff(self, now: float | None = None) -> float | None:
        """Queries that finished before this time have expired (None: nothing expires)."""
        if self.result_ttl_s is None:
            return None
        return (time.time() if now is None else now) - self.result_ttl_s

    def _gone(self, query_id: str) -> Gone:
        hours = (self.result_ttl_s or 0) / 3600
        return Gone(f"query {query_id} has expired (results are kept {hours:g} h after the query ends)")

    def _raw_status(self, query_id: str, user: User | None = None) -> dict[str, Any]:
        """The stored status as clients see it: a query whose server stopped reads failed (and is marked so),
        ``queue`` only on a queued query, no ``server``, and an error's detail names none of the server's
        folders. NotFound, as for an unknown id, when ``user`` may not see it."""
        doc = self._stored_status(query_id)
        if user is not None and not user.may_see(doc.get("user")):
            raise NotFound(f"no query {query_id}")
        if doc["status"] != "queued":
            doc.pop("queue", None)
        doc.pop("server", None)  # where it runs is the operator's business
        error = doc.get("error")
        if isinstance(error, dict) and isinstance(error.get("detail"), str):
            doc["error"] = {**error, "detail": public_detail(error["detail"])}
        return doc

    def _stored_status(self, query_id: str) -> dict[str, Any]:
        if not records.valid_query_id(query_id):
            raise NotFound(f"no query {query_id!r}")
        cutoff = self._cutoff()
        doc = self.store.get_json(records.status_key(query_id))
        if doc is None:
            request = self.store.get_json(records.request_key(query_id))
            if request is None:
                created = records.query_time(query_id)
                if cutoff is not None and created is not None and created < cutoff:
                    raise self._gone(query_id)
                raise NotFound(f"no query {query_id}")
            doc = {"query_id": query_id, "status": "queued", **request}
        if self.owner is not None and recovery.stopped(doc):  # its server is gone: it never finishes
            doc = recovery.fail_stopped(self.store, query_id, doc)
        if cutoff is not None and doc.get("status") in records.TERMINAL:
            finished = doc.get("finished_at") or doc.get("created_at")
            if isinstance(finished, (int, float)) and finished < cutoff:
                raise self._gone(query_id)
        return doc

    def status(self, query_id: str, user: User | None = None, wait_s: float = 0.0) -> dict[str, Any]:
        """The query's status document (see :mod:`squall.service.records`); NotFound for an unknown id (or
        one ``user`` may not see). ``wait_s``: a query not ended yet is answered when it ends or after that
        many seconds, whichever is first (a long poll: one request instead of a poll every few milliseconds;
        where the backend cannot wait — the deployed API — at once)."""
        doc = self._raw_status(query_id, user)
        if (
            wait_s > 0
            and doc["status"] not in records.TERMINAL
            and self.backend.wait_for_end(query_id, wait_s)
        ):
            doc = self._raw_status(query_id, user)
        if doc["status"] not in records.TERMINAL and self.store.exists(records.cancel_key(query_id)):
            doc["cancel_requested"] = True
            if doc["status"] == "queued":  # the runner will skip it
                doc["status"] = "cancelled"
                doc["error"] = {"error": "QueryCancelled", "detail": "query cancelled before it started"}
        if doc["status"] == "queued" and (queue := self.backend.queue_info(query_id)) is not None:
            doc["queue"] = queue  # position, ahead, estimated_wait_s, group
        return doc

    def cancel(self, query_id: str, user: User | None = None) -> dict[str, Any]:
        """Ask the query to stop; Conflict if it already succeeded or failed (also when its server stopped);
        NotFound when ``user`` may not see it."""
        doc = self._raw_status(query_id, user)
        if doc["status"] in ("succeeded", "failed"):
            why = (doc.get("error") or {}).get("detail") if doc["status"] == "failed" else None
            raise Conflict(
                f"query {query_id} already {doc['status']}" + (f": {public_detail(why)}" if why else "")
            )
        if doc["status"] != "cancelled":
            self.store.put(records.cancel_key(query_id), b"", create_only=True)
            self.backend.cancel(query_id)
        return self.status(query_id, user)

    def result(
        self,
        query_id: str,
        fmt: str | None = None,
        *,
        accept: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        user: User | None = None,
    ) -> ResultBody:
        """The result of a finished query, or one page of it.

        ``fmt``: the format (default: by ``accept``, see :func:`negotiate`). Rows ``offset`` … ``offset +
        limit - 1``; without ``limit`` CSV and JSON come in pages of :data:`DEFAULT_PAGE_ROWS` rows and
        Arrow and Parquet whole. The whole result is kept per format in the store; a page is encoded from
        the Arrow result on each request (and stored only when it is too large to send inline). NotFound
        when ``user`` may not see the query.
        """
        doc = self.status(query_id, user)
        state = doc["status"]
        if state != "succeeded":
            error = doc.get("error") or {}
            if state in ("failed", "cancelled") and error:
                raise Conflict(f"query {query_id} {state}: {error.get('detail', '')}",
                               error=error.get("error", "Conflict"))  # fmt: skip
            raise Conflict(f"query {query_id} is {state}; its result is not ready", error="NotReady")
        fmt = fmt or negotiate(accept, doc.get("format"))
        if limit is None and fmt in TEXT_FORMATS:
            limit = DEFAULT_PAGE_ROWS
        total = (doc.get("result") or {}).get("rows")
        if not isinstance(total, int):
            total = self._table(query_id).num_rows
        offset = max(0, int(offset))
        end = total if limit is None else min(total, offset + limit)
        end = max(end, offset)
        rows = max(0, min(end, total) - min(offset, total))
        page: dict[str, Any] = {"total_rows": total, "offset": offset, "rows": rows,
                                "next_offset": end if end < total else None, "limit": limit}  # fmt: skip
        if offset == 0 and end >= total:
            return self._whole(query_id, fmt, page)
        data = encode(self._table(query_id).slice(min(offset, total), rows), fmt)
        ext = records.EXTENSIONS[fmt]
        filename = f"{query_id}-rows-{offset}-{offset + rows}.{ext}"
        if len(data) <= self.inline_limit:
            return ResultBody(fmt, CONTENT_TYPES[fmt], filename, len(data), data=data, **page)
        key = records.page_key(query_id, fmt, offset, offset + rows)
        self.store.put(key, data, content_type=CONTENT_TYPES[fmt])
        link = self.store.link(
            key, expires_s=self.link_expires_s, content_type=CONTENT_TYPES[fmt], filename=filename
        )
        return ResultBody(fmt, CONTENT_TYPES[fmt], filename, len(data), link=link, **page)

    def _whole(self, query_id: str, fmt: str, page: dict[str, Any]) -> ResultBody:
        """The whole result in ``fmt``: encoded from the Arrow result on the first request, kept after."""
        key = records.result_key(query_id, fmt)
        size = self.store.size(key)
        data = None
        if size is None:  # first download in this format: convert the Arrow result once
            data = encode(self._table(query_id), fmt)
            self.store.put(key, data)
            size = len(data)
        filename = f"{query_id}.{records.EXTENSIONS[fmt]}"
        content_type = CONTENT_TYPES[fmt]
        if size <= self.inline_limit:
            data = data if data is not None else self.store.get(key)
            if data is None:
                raise self._gone(query_id)
            return ResultBody(fmt, content_type, filename, size, data=data, **page)
        link = self.store.link(
            key, expires_s=self.link_expires_s, content_type=content_type, filename=filename
        )
        return ResultBody(fmt, content_type, filename, size, link=link, **page)

    def _table(self, query_id: str) -> pa.Table:
        """The query's Arrow result (the last few are kept decoded: paging reads the same one again)."""
        with self._tables_lock:
            table = self._tables.get(query_id)
            if table is not None:
                self._tables.move_to_end(query_id)
                return table
        data = self.store.get(records.result_key(query_id, "arrow"))
        if data is None:
            raise self._gone(query_id)
        table = decode_arrow(data)
        with self._tables_lock:
            self._tables[query_id] = table
            while len(self._tables) > 2:
                self._tables.popitem(last=False)
        return table

    # --- history and expiry -----------------------------------------------------------------------

    def history(
        self,
        limit: int = 20,
        page_token: str | None = None,
        statuses: frozenset[str] | None = None,
        user: User | None = None,
    ) -> dict[str, Any]:
        """Queries, newest first: ``{"queries": [summary, …], "next_page_token": id or None}``. Ids sort
        newest first (see :mod:`~squall.service.records`), so a page is a listing after the last id seen.

        ``statuses`` (e.g. ``{"running", "queued"}``, the operator's view): only queries in one of them. At
        most :data:`MAX_SCAN` queries are read per call; a page may then hold fewer than ``limit`` and the
        token says where to go on. ``user`` (not an admin): only that user's queries, read the same way."""
        if statuses is not None or (user is not None and not user.admin):
            return self._filtered(limit, page_token, statuses or frozenset(records.STATUSES), user)
        names = self.store.children("", start_after=page_token or "q", limit=limit + 1)
        ids = [n for n in names if records.valid_query_id(n)]
        more = len(ids) > limit
        items = []
        for query_id in ids[:limit]:
            try:
                doc = self.status(query_id)
            except (NotFound, Gone):  # deleted or expired in between
                continue
            items.append(summary(doc))
        return {"queries": items, "next_page_token": ids[limit - 1] if more else None}

    def _filtered(
        self, limit: int, page_token: str | None, statuses: frozenset[str], user: User | None
    ) -> dict[str, Any]:
        names = self.store.children("", start_after=page_token or "q", limit=MAX_SCAN + 1)
        ids = [n for n in names if records.valid_query_id(n)]
        items: list[dict[str, Any]] = []
        last = None
        for query_id in ids[:MAX_SCAN]:
            last = query_id
            try:
                doc = self.status(query_id, user)
            except (NotFound, Gone):  # deleted or expired in between, or another user's
                continue
            if doc["status"] in statuses:
                items.append(summary(doc))
                if len(items) == limit:
                    break
        more = last is not None and last != ids[-1]
        return {"queries": items, "next_page_token": last if more else None}

    def recover(self) -> list[str]:
        """Mark the queries a stopped server left queued or running as failed (``squall serve`` at start); their
        ids. In a local state folder a query that names no server counts as left by a stopped one too."""
        if self.owner is None:
            return []
        stale = recovery.fail_all_stopped(self.store, unowned_stopped=isinstance(self.store, LocalStateStore))
        if self.audit is not None:
            for query_id in stale:
                doc = self.store.get_json(records.status_key(query_id)) or {"query_id": query_id}
                self.audit.ended(self.store.get_json(records.request_key(query_id)) or {}, doc)
        return stale

    def sweep(self, now: float | None = None) -> int:
        """Delete the state of queries that finished more than ``result_ttl_s`` ago, and Idempotency-Keys
        older than that; returns how many queries were deleted."""
        cutoff = self._cutoff(now)
        if cutoff is None:
            return 0
        removed = 0
        for name in self.store.children(""):
            try:
                if name == "_idempotency":
                    self._sweep_keys(cutoff)
                elif records.valid_query_id(name) and self._expired(name, cutoff):
                    self.store.delete(name)
                    with self._tables_lock:
                        self._tables.pop(name, None)
                    removed += 1
            except Exception:
                log.warning("cannot sweep %s", name, exc_info=True)
        return removed

    def _expired(self, query_id: str, cutoff: float) -> bool:
        created = records.query_time(query_id)
        if created is not None and created >= cutoff:
            return False  # made after the cutoff: cannot have finished before it
        doc = self.store.get_json(records.status_key(query_id))
        if doc is None:  # a submission that never got a status
            return created is not None
        finished = doc.get("finished_at") or doc.get("created_at")
        return (
            doc.get("status") in records.TERMINAL and isinstance(finished, (int, float)) and finished < cutoff
        )

    def _sweep_keys(self, cutoff: float) -> None:
        for name in self.store.children("_idempotency"):
            key = f"_idempotency/{name}"
            entry = self.store.get_json(key)
            if entry is not None and float(entry.get("created_at") or 0) < cutoff:
                self.store.delete(key)

    # --- catalog --------------------------------------------------------------------------------

    def tables(self, user: User | None = None) -> list[dict[str, Any]]:
        """The catalog with schemas: the tables ``user`` may read (None: all)."""
        tables = self.backend.tables()
        if user is None or user.catalogs is None:
            return tables
        return [t for t in tables if user.may_read(str(t.get("name")))]

    def explain(
        self, sql: str, workers: int | None = None, *, estimate: bool = False, user: User | None = None
    ) -> dict[str, Any]:
        """The plan of ``sql`` (PermissionDenied for a table ``user`` may not read; a plan beyond the user's
        ``max_bytes_scanned`` is shown: explain is how to see what a query would read)."""
        with self._plans():
            if user is not None:
                self.backend.check_user(sql, workers, user, scan=False)
            return self.backend.explain(sql, workers, estimate=estimate)

    def close(self) -> None:
        self.backend.close()
        self.store.close()
        if self.audit is not None:
            self.audit.close()


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    """A history item from a status document."""
    sql = str(doc.get("sql") or "")
    if len(sql) > SQL_PREVIEW:
        sql = sql[: SQL_PREVIEW - 1] + "…"
    stats = doc.get("stats") or {}
    error = doc.get("error")
    return {
        "query_id": doc["query_id"],
        "status": doc["status"],
        "user": doc.get("user"),
        "sql": sql,
        "workers": doc.get("workers"),
        "created_at": doc.get("created_at"),
        "started_at": doc.get("started_at"),
        "finished_at": doc.get("finished_at"),
        "rows": (doc.get("result") or {}).get("rows"),
        "elapsed_s": stats.get("elapsed_s"),
        "cost_usd": stats.get("cost_usd"),
        "error": error if isinstance(error, dict) else None,
        "written": doc.get("written"),
        "queue": doc.get("queue") if doc["status"] == "queued" else None,
    }
