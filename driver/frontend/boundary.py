"""The error boundary of planning: a bug (an unexpected Python exception while binding, translating or
planning a query) becomes one :class:`~squall.errors.InternalError` line naming the step and, where
known, the query's position; its traceback goes to a log file (and the ``squall.internal`` logger at
debug level), never to the user's terminal."""

from __future__ import annotations

import datetime as dt
import logging
import os
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from squall.errors import InternalError, SquallError
from squall.operators.duck import raise_if_interrupted

log = logging.getLogger("squall.internal")

#: environment variable naming the folder of ``internal-errors.log`` (default ``~/.cache/squall``)
LOG_DIR_ENV = "SQUALL_LOG_DIR"
LOG_NAME = "internal-errors.log"


def log_path() -> Path:
    """Where internal errors' tracebacks are appended: ``$SQUALL_LOG_DIR``, else
    ``$XDG_CACHE_HOME/squall`` or ``~/.cache/squall``."""
    folder = os.environ.get(LOG_DIR_ENV)
    if folder:
        return Path(folder) / LOG_NAME
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "squall" / LOG_NAME


def _write(text: str) -> str:
    """Append ``text`` to the log file; its path (a temporary folder's file when the home is read-only,
    as on Lambda; "the squall.internal log" when nothing is writable)."""
    for path in (log_path(), Path(tempfile.gettempdir()) / "squall-logs" / LOG_NAME):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(text)
            return str(path)
        except OSError:
            continue
    return "the squall.internal log"


def internal_error(step: str, sql: str, exc: BaseException, position: str | None = None) -> InternalError:
    """The one-line error for a bug hit while ``step`` ran on ``sql``; the traceback is logged."""
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    where = _write(f"--- {stamp} internal error while {step}\nquery:\n{sql}\n{trace}\n")
    log.debug("internal error while %s", step, exc_info=exc)
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    what = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    at = f" {position}" if position else ""
    return InternalError(f"internal error while {step} (bug){at}: {what}; traceback in {where}")


class Boundary:
    """``with Boundary(sql) as b: b.step = "translating"; ...`` turns an unexpected exception into
    :func:`internal_error` for the current ``step``; ``locate`` (optional) gives the query's position
    ("at line L, column C") of the part being worked on. Squall's own errors pass through."""

    def __init__(self, sql: str, step: str = "binding") -> None:
        self.sql = sql
        self.step = step
        self.locate: Callable[[], str | None] | None = None

    def __enter__(self) -> Boundary:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, SquallError):
            return
        raise_if_interrupted(exc)  # Ctrl-C while DuckDB ran a query of the driver's: an interrupt, not a bug
        position = None
        if self.locate is not None:
            try:
                position = self.locate()
            except Exception:  # the position is a courtesy: never hide the bug behind another
                position = None
        raise internal_error(self.step, self.sql, exc, position) from exc
