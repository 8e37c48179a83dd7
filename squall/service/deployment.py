"""The deployed driver function's Connections, configured from its environment.

``squall.functions.driver.handler`` runs the API's events with
:func:`squall.service.runner.handle_driver_event` on the Connections :func:`connection_for` returns: one
per worker count, kept while the execution environment is warm; after a ``run`` event it calls
:func:`query_ended` (the admission's end-of-query hook).
"""

from __future__ import annotations

import logging
import os

from squall.connection import Connection
from squall.service.backend import LambdaBackend
from squall.service.state import StateStore, state_store

log = logging.getLogger("squall.service")

_connections: dict[int, Connection] = {}
_backend: LambdaBackend | None = None
_stores: dict[str, StateStore] = {}


def connection_for(workers: int | None) -> Connection:
    """The driver function's Connection for ``workers`` (kept while the environment is warm).

    Data: ``SQUALL_DATA`` or ``s3://$SQUALL_BUCKET/$SQUALL_DATA_PREFIX``; platform: ``SQUALL_PLATFORM``
    (``lambda`` when deployed; ``lambda-local`` runs the emulator, for tests); where write statements may
    write: ``SQUALL_WRITABLE`` (the stack's output prefixes, comma-separated; unset: every write is refused).
    """
    count = int(workers or os.environ.get("SQUALL_DEFAULT_WORKERS") or 4)
    if count not in _connections:
        data = os.environ.get("SQUALL_DATA")
        if not data and os.environ.get("SQUALL_BUCKET"):
            data = f"s3://{os.environ['SQUALL_BUCKET']}/{os.environ.get('SQUALL_DATA_PREFIX', 'data/')}"
        platform = os.environ.get("SQUALL_PLATFORM", "lambda")
        writable = os.environ.get("SQUALL_WRITABLE") or None
        _connections[count] = Connection(data, workers=count, platform=platform, writable=writable)
    return _connections[count]


def query_ended(query_id: str, state: str) -> list[str]:
    """The driver function's end-of-query hook: when the query ``query_id`` of the state store ``state`` has ended,
    give back its admission slots and start the next queued queries (their ids;
    :meth:`~squall.service.backend.LambdaBackend.query_ended`). Never raises: a failed promotion heals on the
    API's next submit or status request."""
    global _backend
    try:
        if _backend is None:
            _backend = LambdaBackend.from_env()
        if state not in _stores:
            _stores[state] = state_store(state)
        return _backend.query_ended(query_id, _stores[state])
    except Exception:
        log.warning("cannot promote queued queries after %s", query_id, exc_info=True)
        return []
