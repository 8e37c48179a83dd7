"""The job a write statement becomes (see :mod:`squall.driver.write.jobs` for how it is made and run)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from squall.driver.write.commit import Committed
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
