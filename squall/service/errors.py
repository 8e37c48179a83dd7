"""Errors of the service layer that are not the engine's: each carries its HTTP status.

Engine errors (``squall.errors.UserError`` subclasses) become 400 with their class name; these cover what
only a service has: unknown ids, conflicts, a full queue, authentication.
"""

from __future__ import annotations


class ServiceError(Exception):
    """An error answered with ``status`` and JSON ``{"error": error, "detail": message}``."""

    status = 500
    error = "InternalError"

    def __init__(self, detail: str, *, error: str | None = None) -> None:
        super().__init__(detail)
        if error is not None:
            self.error = error

    @property
    def detail(self) -> str:
        return str(self)


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
    """The server's queue is full; retry later (429)."""

    status = 429
    error = "Busy"


class PayloadTooLarge(ServiceError):
    """The request body is larger than the service accepts (413)."""

    status = 413
    error = "PayloadTooLarge"
