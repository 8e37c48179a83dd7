"""Table sources: where a table's files, schema and statistics come from.

A :class:`TableSource` answers for one registered table, before any row is read
(the shape of DataFusion's ``TableProvider`` and DuckDB's multi-file lists):

- :meth:`~TableSource.files`: the data files, each with its partition values;
- :meth:`~TableSource.schema`: the table's Arrow schema, its files' schemas
  (:meth:`~TableSource.file_schema`) reconciled;
- :meth:`~TableSource.statistics`: row groups with rows, bytes and min/max/null counts;
- :meth:`~TableSource.supports_filters`: per filter, whether the source applies it
  (:attr:`FilterSupport.EXACT`), prunes with it (:attr:`FilterSupport.INEXACT`), or
  neither (:attr:`FilterSupport.UNSUPPORTED`);
- :meth:`~TableSource.stamp`: a value that changes when the table's files do (plans
  cached under another stamp are stale);
- :meth:`~TableSource.table_info`: all of it as the planner's :class:`TableInfo`.

A source owns *where the data is*; how workers read a file is the table's scan
kind (:mod:`squall.driver.catalog.scan_kinds`). Sources are found by name in
:data:`SOURCES`: ``parquet`` (:mod:`squall.driver.catalog.parquet`), ``delta``
(:mod:`squall.driver.catalog.delta`); the
catalog picks the one named like the table's format. A source is a cheap handle:
making one does no I/O, and what it reads it keeps for its own lifetime only
(the catalog keeps the :class:`TableInfo`).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from squall.driver.catalog.info import RowGroup, TableInfo
from squall.errors import NotSupportedError, OptionError
from squall.operators.storage import Storage
from squall.registry import Registry

if TYPE_CHECKING:
    from sqlglot import exp


class FilterSupport(enum.Enum):
    """What a source does with one filter of a scan."""

    #: the source applies it: every row it yields passes, the scan need not check again
    EXACT = "exact"
    #: the source prunes with it (files, row groups) but rows must still be checked
    INEXACT = "inexact"
    #: the source cannot use it
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class SourceFile:
    """One data file of a table: its path, size in bytes, and partition values (column -> value)."""

    path: str
    size: int
    partition_values: Mapping[str, Any] = field(default_factory=dict)


class TableSource(ABC):
    """One table's files, schema, statistics and pruning abilities (see the module doc)."""

    #: the name it is registered under in :data:`SOURCES`
    kind: ClassVar[str]

    def __init__(self, name: str, location: str, storage: Storage) -> None:
        self.name = name
        self.location = location
        self.storage = storage

    @abstractmethod
    def files(self) -> tuple[SourceFile, ...]:
        """The table's data files, sorted by path; DataError when the location holds none."""

    @abstractmethod
    def file_schema(self, path: str) -> pa.Schema:
        """The schema of one of the table's files, as written in it."""

    @abstractmethod
    def schema(self) -> pa.Schema:
        """The table's schema: its files' schemas reconciled (DataError naming a file that disagrees)."""

    @abstractmethod
    def statistics(self) -> tuple[RowGroup, ...]:
        """The table's row groups (the units scans are split into) with their column statistics."""

    @abstractmethod
    def table_info(self) -> TableInfo:
        """Everything above as the planner's :class:`TableInfo`."""

    def partition_columns(self) -> tuple[str, ...]:
        """Columns whose values come from file paths rather than file contents; none by default."""
        return ()

    def supports_filters(self, filters: Sequence[exp.Expression]) -> list[FilterSupport]:
        """Per filter (over the table's own column names), what the source does with it.

        Default: nothing (:attr:`FilterSupport.UNSUPPORTED`).
        """
        return [FilterSupport.UNSUPPORTED for _ in filters]

    def scan_info(self, filters: Sequence[exp.Expression]) -> TableInfo:
        """The table as one scan with ``filters`` (over the table's column names, ANDed) reads it.

        A source that can rule files out before reading them (partition values, manifests) returns
        only the files that may hold matching rows, and says what it pruned in
        ``TableInfo.source_notes``; row groups are pruned afterwards by the planner's min/max
        skipping either way. Default: :meth:`table_info` (every file).
        """
        return self.table_info()

    def at(self, version: int | None = None, timestamp: datetime | None = None) -> TableSource:
        """The table as it was at snapshot/version ``version`` or at ``timestamp`` (time travel), one of
        them given. Default: NotSupportedError (the source keeps no history)."""
        raise NotSupportedError(f"table {self.name} ({self.kind} files) has no versions to travel to")

    def stamp(self) -> Hashable | None:
        """A value that changes when the table's data changes; None when the source cannot tell
        cheaply (the table then changes only when registered again). Default: None."""
        return None


SOURCES: Registry[type[TableSource]] = Registry(
    "table source",
    {
        "parquet": "squall.driver.catalog.parquet:ParquetSource",
        "csv": "squall.driver.catalog.text:CsvSource",
        "json": "squall.driver.catalog.text:JsonSource",
        "iceberg": "squall.driver.catalog.iceberg:IcebergSource",
        "delta": "squall.driver.catalog.delta:DeltaSource",
    },
    OptionError,
)


def source_kinds() -> tuple[str, ...]:
    """The registered table source kinds, sorted."""
    return tuple(SOURCES.names())


def register_source(kind: str, target: str | type[TableSource]) -> None:
    """Add a table source kind (``"module:Class"`` or the class)."""
    SOURCES.register(kind, target)


def open_source(kind: str, name: str, location: str, storage: Storage) -> TableSource:
    """A source of kind ``kind`` for table ``name`` at ``location`` (OptionError naming the kinds when
    unknown); no I/O."""
    return SOURCES.get(kind)(name, location, storage)


def require_lake(what: str, module: str) -> None:
    """OptionError in one line when ``module`` (pyiceberg, deltalake: the ``lake`` extra) is not installed, so
    ``what`` (a catalog, a lake table) cannot be opened."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise OptionError(f"{what} needs {module}, which is not installed: pip install 'squall[lake]'")
