"""Errors of the service layer that are not the engine's: each carries its HTTP status.

Engine errors (``squall.errors.UserError`` subclasses) become 400 with their class name; these cover what
only a service has: unknown ids, conflicts, a full queue, authentication.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from pathlib import Path


class ServiceError(Exception):
    """An error answered with ``status`` and JSON ``{"error": error, "detail": message}``; with
    ``retry_after_s`` also a ``Retry-After`` header (whole seconds, at least 1)."""

    status = 500
    error = "InternalError"
    #: the Retry-After of this class when the raiser gives none (None: no header)
    default_retry_after_s: float | None = None

    def __init__(self, detail: str, *, error: str | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(detail)
        if error is not None:
            self.error = error
        self.retry_after_s = retry_after_s if retry_after_s is not None else self.default_retry_after_s

    @property
    def detail(self) -> str:
        return str(self)

    @property
    def headers(self) -> dict[str, str]:
        """Response headers this error adds (``Retry-After``)."""
        if self.retry_after_s is None:
            return {}
        return {"Retry-After": str(retry_after(self.retry_after_s))}


def retry_after(seconds: float) -> int:
    """A ``Retry-After`` value: whole seconds, at least 1, at most an hour."""
    if not math.isfinite(seconds):
        return 3600
    return int(min(3600, max(1, math.ceil(seconds))))


class NotFound(ServiceError):
    """Unknown query id or route (404)."""

    status = 404
    error = "NotFound"


class Conflict(ServiceError):
    """The query is not in a state that allows the request, or an Idempotency-Key was reused (409)."""

    status = 409
    error = "Conflict"


class Gone(ServiceError):
    """The query's result and state have expired (410): older than the server's result TTL."""

    status = 410
    error = "Expired"


class NotAcceptable(ServiceError):
    """No result format matches the request's ``Accept`` header (406)."""

    status = 406
    error = "NotAcceptable"


class InvalidRequest(ServiceError):
    """A malformed request the models cannot catch, such as an unknown query parameter (422)."""

    status = 422
    error = "ValidationError"


class Unauthorized(ServiceError):
    """Missing or wrong bearer token (401)."""

    status = 401
    error = "Unauthorized"


class Busy(ServiceError):
    """The server's queue is full (or a user or group has as many queries as allowed); retry later (429,
    with ``Retry-After``)."""

    status = 429
    error = "Busy"
    default_retry_after_s = 1.0


class Unavailable(ServiceError):
    """The server cannot take requests now, e.g. it is shutting down (503, with ``Retry-After``)."""

    status = 503
    error = "Unavailable"
    default_retry_after_s = 5.0


class PayloadTooLarge(ServiceError):
    """The request body is larger than the service accepts (413)."""

    status = 413
    error = "PayloadTooLarge"


_TRACEBACK_IN = re.compile(r";? traceback in .*$")


def server_paths() -> list[str]:
    """Folders of this server that no message to a client may name: the home folder and where internal errors
    are logged (``$SQUALL_LOG_DIR``)."""
    found = [os.environ.get("SQUALL_LOG_DIR") or "", str(Path.home())]
    return [p.rstrip("/") for p in found if p and p.rstrip("/")]


def public_detail(text: str, paths: Iterable[str] = ()) -> str:
    """``text`` fit to send to a client: where an internal error's traceback was written becomes "the server's
    log", and the server's own folders (:func:`server_paths`, plus ``paths``) are not named."""
    text = _TRACEBACK_IN.sub("; traceback in the server's log", text)
    for path in sorted({*server_paths(), *paths}, key=len, reverse=True):
        if path and path in text:
            label = "~" if path == str(Path.home()).rstrip("/") else "<server>"
            text = re.sub(re.escape(path) + r"(?![\w.-])", label, text)
    return text
