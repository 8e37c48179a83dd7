"""Exception hierarchy. ``UserError`` and its subclasses are the user's to fix:
the CLI prints their one-line message (exit 1) and the API answers 4xx."""

from __future__ import annotations


class SquallError(Exception):
    """Base class of every error Squall raises on purpose."""


class UserError(SquallError):
    """Bad input: SQL, options, paths. The message is one line and says where."""


class SqlSyntaxError(UserError):
    """The SQL does not parse; the message carries line and column."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__(f"syntax error{where}: {message}")
        self.line = line
        self.column = column


class BindError(UserError):
    """Unknown table, column or function, or a type error in the query."""


class UnsafeQueryError(UserError):
    """The query tries something Squall never allows (writes, files, settings, …)."""


class NotSupportedError(UserError):
    """Valid SQL that Squall cannot run distributed (yet); never a wrong answer instead."""

    def __init__(self, what: str) -> None:
        super().__init__(f"not supported: {what}")


class DataError(UserError):
    """A table location is missing, empty, unreadable or inconsistent."""


class AccessDenied(UserError):
    """AWS refused a request under the caller's IAM permissions: one line naming the resource, the action and,
    on Lambda, the function role that lacks it (``access denied: s3://b/k (s3:GetObject) for the worker's role``)."""


class OptionError(UserError):
    """A bad option value (CLI flag, API field, connect() argument)."""


class LimitExceeded(UserError):
    """The query would go beyond a limit of the service that runs it (bytes scanned, result rows or bytes)."""


class PermissionDenied(UserError):
    """The user may not do this: read a table outside their catalogs (the service's users file)."""


class QueryRuntimeError(UserError):
    """The query failed while running for a reason in the data (e.g. a failed cast)."""


class QueryCancelled(SquallError):
    """The query was cancelled."""


class QueryTimeout(QueryCancelled):
    """The query ran longer than its ``timeout`` and was cancelled."""


class WorkerError(SquallError):
    """A worker failed for a reason that is not the user's (crash, lost process)."""


class InternalError(SquallError):
    """A bug in Squall (an unexpected exception while binding, translating or planning): one line
    naming the step and, where known, the query's position; the traceback goes to a log file."""


def squall_error(name: str, detail: str) -> Exception | None:
    """The exception of this module called ``name`` carrying ``detail`` as its message (None if unknown): an
    error the service reported by class name, raised again on the client's side.

    The message is set as is: classes whose constructor adds a prefix (``SqlSyntaxError``,
    ``NotSupportedError``) are not re-prefixed.
    """
    cls = globals().get(name)
    if not (isinstance(cls, type) and issubclass(cls, SquallError)):
        return None
    err = cls.__new__(cls)
    Exception.__init__(err, detail)
    if name == "SqlSyntaxError":
        err.line = err.column = None  # type: ignore[attr-defined]
    return err
