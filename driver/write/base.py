"""The job a write statement becomes (see :mod:`squall.driver.write.jobs` for how it is made and run)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from squall.driver.write.commit import Committed, check_target, cleanup, commit_files
from squall.operators.sinks import Sink
from squall.plan import WriteSpec

#: (SQL) -> (column names, DuckDB types) of that query's result, bound against the catalog
Describe = Callable[[str], tuple[tuple[str, ...], tuple[str, ...]]]


class WriteJob(ABC):
    """One write statement, ready to run (see module doc)."""

    #: the SQL of the rows to write; "" when nothing is planned (DROP TABLE, CREATE … IF NOT EXISTS of a table
    #: that exists)
    query: str = ""
    spec: WriteSpec | None = None

    @abstractmethod
    def commit(self, manifest: pa.Table | None, rows: int, query_id: str) -> Committed:
        """Make the written files visible (or do the statement's work); ``manifest``: every rank's files."""

    def abort(self, query_id: str) -> None:  # noqa: B027 - nothing to undo by default
        """The query failed: remove what its ranks staged."""

    @property
    def summary(self) -> str:
        """What the statement did, for the result's ``status`` column (``COPY``, ``CREATE TABLE``, …)."""
        return "WRITE"


class DoneJob(WriteJob):
    """A statement whose work is done without planning (DROP TABLE, CREATE … IF NOT EXISTS of an existing table)."""

    def __init__(self, status: str, action: Any = None, target: str = "") -> None:
        self._status, self._action, self._target = status, action, target

    def commit(self, manifest: pa.Table | None, rows: int, query_id: str) -> Committed:
        if self._action is not None:
            self._action()
        return Committed(self._target)

    @property
    def summary(self) -> str:
        return self._status


class FilesJob(WriteJob):
    """Files at a path (``COPY … TO``, ``UNLOAD``; a folder table's CTAS and INSERT): the ranks' parts committed by
    :func:`~squall.driver.write.commit.commit_files`. ``recheck``: check again at commit that the target is still
    free to write (a COPY without OVERWRITE/APPEND); ``after``: called once the files are visible (a folder
    table's marker and registration)."""

    def __init__(
        self,
        query: str,
        spec: WriteSpec,
        sink: Sink,
        mode: str,
        status: str = "COPY",
        *,
        after: Callable[[], None] | None = None,
        recheck: bool = True,
    ) -> None:
        self.query, self.spec, self.sink, self.mode, self._status = query, spec, sink, mode, status
        self._after, self._recheck = after, recheck

    def commit(self, manifest: pa.Table | None, rows: int, query_id: str) -> Committed:
        assert manifest is not None and self.spec is not None
        if self._recheck:
            check_target(
                self.sink, self.spec.target, self.mode, self.spec.single_file
            )  # (still) free to write?
        done = commit_files(self.spec, manifest, self.sink, query_id, self.mode, rows)
        if self._after is not None:
            self._after()
        return done

    def abort(self, query_id: str) -> None:
        assert self.spec is not None
        cleanup(self.spec, self.sink, query_id)

    @property
    def summary(self) -> str:
        return self._status
