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
    <id>/pages/<fmt>-<a>-<b>.<fmt>  rows a … b-1 of the result, kept only when a page is too large to send inline
    _idempotency/<sha256>.json  {query_id, request_hash} for an Idempotency-Key; created once, atomically

Query ids sort **newest first**: ``q``, 12 hex digits of ``2**48 - 1 - (milliseconds since the epoch)``, then
20 random hex digits. A listing of the store (ascending) is the history in reverse order of submission, and an
id tells when it was made, so a request for an id older than the result TTL is answered 410 even after its
state was swept.

With the S3 store the root is ``s3://$SQUALL_BUCKET/queries/`` (``SQUALL_QUERIES_PREFIX``), so these are the
``queries/<id>/…`` objects that the stack's lifecycle rule expires.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time

STATUSES: tuple[str, ...] = ("queued", "running", "succeeded", "failed", "cancelled")
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
QUERY_ID = re.compile(r"^q[0-9a-f]{32}$")
EXTENSIONS = {"arrow": "arrow", "parquet": "parquet", "csv": "csv", "json": "json"}


_MAX_MS = (1 << 48) - 1
#: Ids whose time is before this (2024-01-01) are not time-ordered (older uuid4 ids).
_EPOCH_MS = 1_704_067_200_000


def new_query_id(now: float | None = None) -> str:
    """A fresh query id: ``q`` and 32 hex digits, sorting before every older id."""
    ms = int((time.time() if now is None else now) * 1000)
    return f"q{_MAX_MS - ms:012x}{secrets.token_hex(10)}"


def query_time(query_id: str) -> float | None:
    """When the query ``query_id`` was created (seconds since the epoch), or None if the id does not say."""
    if not valid_query_id(query_id):
        return None
    ms = _MAX_MS - int(query_id[1:13], 16)
    if not _EPOCH_MS <= ms <= time.time() * 1000 + 86_400_000:
        return None
    return ms / 1000


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


def page_key(query_id: str, fmt: str, start: int, end: int) -> str:
    """A page of the result (rows ``start`` … ``end - 1``) kept only when too large to send inline."""
    return f"{query_id}/pages/{fmt}-{start}-{end}.{EXTENSIONS[fmt]}"


def idempotency_key(key: str) -> str:
    return f"_idempotency/{hashlib.sha256(key.encode()).hexdigest()}.json"
