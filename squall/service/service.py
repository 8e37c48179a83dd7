"""The operations behind the REST endpoints, independent of HTTP: submit, status, result, cancel, tables.

A :class:`Service` joins a :class:`~squall.service.state.StateStore` (query state) and a
:class:`~squall.service.backend.Backend` (where queries run). :mod:`squall.service.api` maps HTTP onto it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any

from squall.errors import OptionError
from squall.service import records
from squall.service.backend import Backend
from squall.service.errors import Busy, Conflict, NotFound
from squall.service.formats import CONTENT_TYPES, decode_arrow, encode
from squall.service.state import Link, StateStore, state_store

#: Results up to this size are sent in the response body; larger ones as a link. Lambda's response limit is
#: 6 MB and binary bodies are base64-encoded (x4/3), so 4 MiB is the largest safe default.
DEFAULT_INLINE_LIMIT = 4 * 1024 * 1024
MAX_IDEMPOTENCY_KEY = 255


@dataclass(frozen=True)
class ResultBody:
    """A result to send: inline ``data``, or a ``link`` (presigned URL or local file)."""

    format: str
    content_type: str
    filename: str
    size: int
    data: bytes | None = None
    link: Link | None = None


class Service:
    """Queries over a state store and a backend.

    ``inline_limit``: results up to this many bytes are returned inline, larger ones as a presigned URL
    (S3 store) or streamed from the file by ``squall serve`` (local store). ``link_expires_s``: lifetime of
    presigned URLs. ``token``: bearer token the API requires (None: no token check).
    """

    def __init__(
        self,
        store: StateStore,
        backend: Backend,
        *,
        inline_limit: int = DEFAULT_INLINE_LIMIT,
        link_expires_s: int = 3600,
        token: str | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.inline_limit = inline_limit
        self.link_expires_s = link_expires_s
        self.token = token or None

    @classmethod
    def from_env(cls) -> Service:
        """The deployed API's service: S3 state (``SQUALL_STATE`` or ``s3://$SQUALL_BUCKET/$SQUALL_QUERIES_PREFIX``),
        queries on the driver function (``SQUALL_DRIVER_FUNCTION``), ``SQUALL_MAX_WORKERS``,
        ``SQUALL_INLINE_LIMIT``, ``SQUALL_API_TOKEN`` (optional bearer token)."""
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
        backend = LambdaBackend(driver, max_workers=int(os.environ.get("SQUALL_MAX_WORKERS", "64")))
        return cls(
            state_store(url),
            backend,
            inline_limit=int(os.environ.get("SQUALL_INLINE_LIMIT", DEFAULT_INLINE_LIMIT)),
            token=os.environ.get("SQUALL_API_TOKEN"),
        )

    # --- queries --------------------------------------------------------------------------------

    def submit(
        self,
        sql: str,
        *,
        workers: int | None = None,
        fmt: str = "arrow",
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Accept a query; returns its status and whether it was an idempotent replay.

        The SQL is checked first (a UserError means nothing is stored). With ``idempotency_key`` the key
        object is created atomically: the first request creates the query, later ones with the same key and
        the same request get the same query id, with a different request a Conflict.
        """
        request = {"sql": sql, "workers": workers, "format": fmt, "timeout_s": timeout_s}
        self.backend.check(sql, workers)
        query_id = records.new_query_id()
        replayed = False
        if idempotency_key is not None:
            query_id, replayed = self._claim(idempotency_key, request, query_id)
        self._start(query_id, request)
        return self.status(query_id), replayed

    def _claim(self, key: str, request: dict[str, Any], query_id: str) -> tuple[str, bool]:
        if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY or not key.isprintable() or not key.isascii():
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
            "sql": request["sql"],
            "workers": request["workers"],
            "format": request["format"],
            "timeout_s": request["timeout_s"],
            "created_at": time.time(),
        }
        self.store.put_json(records.status_key(query_id), status)
        try:
            self.backend.submit(query_id, self.store)
        except Busy as err:
            status.update(
                status="failed", finished_at=time.time(), error={"error": "Busy", "detail": str(err)}
            )
            self.store.put_json(records.status_key(query_id), status)
            raise

    def _raw_status(self, query_id: str) -> dict[str, Any]:
        if not records.valid_query_id(query_id):
            raise NotFound(f"no query {query_id!r}")
        doc = self.store.get_json(records.status_key(query_id))
        if doc is None:
            request = self.store.get_json(records.request_key(query_id))
            if request is None:
                raise NotFound(f"no query {query_id}")
            doc = {"query_id": query_id, "status": "queued", **request}
        return doc

    def status(self, query_id: str) -> dict[str, Any]:
        """The query's status document (see :mod:`squall.service.records`); NotFound for an unknown id."""
        doc = self._raw_status(query_id)
        if doc["status"] not in records.TERMINAL and self.store.exists(records.cancel_key(query_id)):
            doc["cancel_requested"] = True
            if doc["status"] == "queued":  # the runner will skip it
                doc["status"] = "cancelled"
                doc["error"] = {"error": "QueryCancelled", "detail": "query cancelled before it started"}
        return doc

    def cancel(self, query_id: str) -> dict[str, Any]:
        """Ask the query to stop; Conflict if it already succeeded or failed."""
        doc = self._raw_status(query_id)
        if doc["status"] in ("succeeded", "failed"):
            raise Conflict(f"query {query_id} already {doc['status']}")
        if doc["status"] != "cancelled":
            self.store.put(records.cancel_key(query_id), b"", create_only=True)
            self.backend.cancel(query_id)
        return self.status(query_id)

    def result(self, query_id: str, fmt: str | None = None) -> ResultBody:
        """The result of a finished query in ``fmt`` (default: the format it was submitted with)."""
        doc = self.status(query_id)
        state = doc["status"]
        if state != "succeeded":
            error = doc.get("error") or {}
            if state in ("failed", "cancelled") and error:
                raise Conflict(f"query {query_id} {state}: {error.get('detail', '')}",
                               error=error.get("error", "Conflict"))  # fmt: skip
            raise Conflict(f"query {query_id} is {state}; its result is not ready", error="NotReady")
        fmt = fmt or doc.get("format") or "arrow"
        key = records.result_key(query_id, fmt)
        size = self.store.size(key)
        data = None
        if size is None:  # first download in this format: convert the Arrow result once
            arrow = self.store.get(records.result_key(query_id, "arrow"))
            if arrow is None:
                raise NotFound(f"the result of query {query_id} has expired")
            data = encode(decode_arrow(arrow), fmt)
            self.store.put(key, data)
            size = len(data)
        filename = f"{query_id}.{records.EXTENSIONS[fmt]}"
        body = ResultBody(fmt, CONTENT_TYPES[fmt], filename, size)
        if size <= self.inline_limit:
            data = data if data is not None else self.store.get(key)
            if data is None:
                raise NotFound(f"the result of query {query_id} has expired")
            return ResultBody(fmt, body.content_type, filename, size, data=data)
        link = self.store.link(
            key, expires_s=self.link_expires_s, content_type=body.content_type, filename=filename
        )
        return ResultBody(fmt, body.content_type, filename, size, link=link)

    # --- catalog --------------------------------------------------------------------------------

    def tables(self) -> list[dict[str, Any]]:
        return self.backend.tables()

    def explain(self, sql: str, workers: int | None = None) -> dict[str, Any]:
        return self.backend.explain(sql, workers)

    def close(self) -> None:
        self.backend.close()
        self.store.close()
