"""The error boundary of planning: a bug (an unexpected Python exception while binding, translating or
planning a query) becomes one :class:`~squall.errors.InternalError` line naming the step and, where
known, the query's position; its traceback goes to a log file (and the ``squall.internal`` logger at
debug level), never to the user's terminal.

A query nested deeper than the planner's recursion allows (a RecursionError: hundreds of parentheses or
nested subqueries) is the query's limit, not a bug: one :class:`~squall.errors.NotSupportedError` line, nothing
logged. The log file is bounded: past :data:`LOG_MAX_BYTES` it is rotated to ``internal-errors.log.1`` (one
old file kept), and one entry keeps at most :data:`ENTRY_MAX_BYTES` (the head and the tail of the traceback)."""

from __future__ import annotations

import datetime as dt
import logging
import os
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from squall.errors import InternalError, NotSupportedError, SquallError
from squall.operators.duck import raise_if_interrupted

log = logging.getLogger("squall.internal")

#: environment variable naming the folder of ``internal-errors.log`` (default ``~/.cache/squall``)
LOG_DIR_ENV = "SQUALL_LOG_DIR"
LOG_NAME = "internal-errors.log"
#: the log is rotated (to ``<name>.1``, replacing an older one) once it is this large
LOG_MAX_BYTES = 4 * 1024 * 1024
#: one entry (header, query, traceback) is cut to this many bytes: its head and its tail
ENTRY_MAX_BYTES = 32 * 1024


def log_path() -> Path:
    """Where internal errors' tracebacks are appended: ``$SQUALL_LOG_DIR``, else
    ``$XDG_CACHE_HOME/squall`` or ``~/.cache/squall``."""
    folder = os.environ.get(LOG_DIR_ENV)
    if folder:
        return Path(folder) / LOG_NAME
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "squall" / LOG_NAME


def _clip(text: str, limit: int | None = None) -> str:
    """``text`` cut to about ``limit`` (default :data:`ENTRY_MAX_BYTES`) characters: its head and its tail, with a
    line saying what was left out (a deep recursion's traceback repeats the same frames thousands of times)."""
    limit = ENTRY_MAX_BYTES if limit is None else limit
    if len(text) <= limit:
        return text
    half = limit // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters left out ...]\n{text[-half:]}"


def _rotate(path: Path, incoming: int) -> None:
    """Move the log to ``<name>.1`` (replacing the older one) when ``incoming`` more bytes would take it past
    :data:`LOG_MAX_BYTES`. Several processes may race here: each rename is atomic, the worst case is one
    rotation too many."""
    try:
        size = path.stat().st_size
    except OSError:
        return
    if size + incoming > LOG_MAX_BYTES:
        try:
            os.replace(path, path.with_name(path.name + ".1"))
        except OSError:
            pass


def _write(text: str) -> str:
    """Append ``text`` to the log file; its path (a temporary folder's file when the home is read-only,
    as on Lambda; "the squall.internal log" when nothing is writable)."""
    for path in (log_path(), Path(tempfile.gettempdir()) / "squall-logs" / LOG_NAME):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _rotate(path, len(text))
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(text)
            return str(path)
        except OSError:
            continue
    return "the squall.internal log"


_SHALLOWER = "use fewer nested parentheses, subqueries or chained set operations (UNION …), e.g. split it with WITH clauses"


def too_deep(step: str, exc: RecursionError) -> NotSupportedError:
    """The one-line error for a query nested deeper than the planner's recursion allows (nothing logged)."""
    return NotSupportedError(
        f"the query nests too deeply to plan (the recursion limit was reached while {step}): {_SHALLOWER}"
    )


def too_deep_for_duckdb() -> NotSupportedError:
    """The one-line error for a query DuckDB's parser refuses as too deep (its own message names a setting
    users cannot change)."""
    return NotSupportedError(
        f"the query nests too deeply to plan (DuckDB reads at most 1000 levels of nested expressions): {_SHALLOWER}"
    )


def internal_error(step: str, sql: str, exc: BaseException, position: str | None = None) -> InternalError:
    """The one-line error for a bug hit while ``step`` ran on ``sql``; the traceback is logged."""
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    where = _write(_clip(f"--- {stamp} internal error while {step}\nquery:\n{sql}\n{trace}") + "\n")
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
        if isinstance(exc, RecursionError):
            raise too_deep(self.step, exc) from None
        position = None
        if self.locate is not None:
            try:
                position = self.locate()
            except Exception:  # the position is a courtesy: never hide the bug behind another
                position = None
        raise internal_error(self.step, self.sql, exc, position) from exc
