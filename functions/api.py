"""REST API Lambda handler (API Gateway REST proxy integration): ``squall.functions.api.handler``.

All the logic is in :mod:`squall.service`: the service comes from the environment
(:meth:`squall.service.service.Service.from_env`: ``SQUALL_BUCKET``, ``SQUALL_QUERIES_PREFIX``,
``SQUALL_DRIVER_FUNCTION``, …) once per execution environment.
"""

from __future__ import annotations

from typing import Any

from squall.service.api import Handler, make_handler
from squall.service.service import Service

_handler: Handler | None = None


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Lambda entry point."""
    global _handler
    if _handler is None:
        _handler = make_handler(Service.from_env())
    return _handler(event, context)
