"""The layout of a query's state in a :class:`~squall.service.state.StateStore` (keys relative to its root).

::

    <id>/request.json        the accepted request (sql, workers, format, timeout_s); created once, atomically —
                             whoever creates it submits the query (so a retried submit never runs it twice)
    <id>/status.json         status, progress, error, stats, result info; written by the API at submit
                             ("queued"), then only by the runner that executes the query
    <id>/cancel              cancel marker (DELETE); the runner polls it, the API reports a queued query
                             with a marker as cancelled
    <id>/result.arrow        the result as an Arrow IPC stream (always written on success)
    <id>/result.<fmt>        parquet / csv / json encodings, written on success for the requested format
                             and on first download for the others
    _idempotency/<sha256>.json  {query_id, request_hash} for an Idempotency-Key; created once, atomically

With the S3 store the root is ``s3://$SQUALL_BUCKET/queries/`` (``SQUALL_QUERIES_PREFIX``), so these are the
``queries/<id>/…`` objects that the stack's lifecycle rule expires.
"""

from __future__ import annotations

import hashlib
import re
import uuid

STATUSES: tuple[str, ...] = ("queued", "running", "succeeded", "failed", "cancelled")
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
QUERY_ID = re.compile(r"^q[0-9a-f]{32}$")
EXTENSIONS = {"arrow": "arrow", "parquet": "parquet", "csv": "csv", "json": "json"}


def new_query_id() -> str:
    """A fresh query id: ``q`` and 32 hex digits."""
    return "q" + uuid.uuid4().hex


def valid_query_id(query_id: str) -> bool:
    return bool(QUERY_ID.match(query_id))


def request_key(query_id: str) -> str:
    return f"{query_id}/request.json"


def status_key(query_id: str) -> str:
    return f"{query_id}/status.json"


def cancel_key(query_id: str) -> str:
    return f"{query_id}/cancel"


def result_key(query_id: str, fmt: str) -> str:
    return f"{query_id}/result.{EXTENSIONS[fmt]}"


def idempotency_key(key: str) -> str:
    return f"_idempotency/{hashlib.sha256(key.encode()).hexdigest()}.json"
