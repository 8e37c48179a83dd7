"""The deployed driver function's Connections, configured from its environment.

``squall.functions.driver.handler`` runs the API's events with
:func:`squall.service.runner.handle_driver_event` on the Connections :func:`connection_for` returns: one
per worker count, kept while the execution environment is warm.
"""

from __future__ import annotations

import os

from squall.connection import Connection

_connections: dict[int, Connection] = {}


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
