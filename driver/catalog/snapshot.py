"""Catalog snapshots: everything the planner reads from a catalog, saved as JSON.

Planning reads only metadata: table names and locations, files, Arrow schemas,
row groups (rows, byte sizes, min/max/null counts per column) and column NDVs.
:func:`snapshot` saves them (every NDV computed up front, from the same sample
a live catalog uses); :func:`from_snapshot` gives a :class:`SnapshotCatalog`
that answers from them alone and has no storage, so plans made from a snapshot
are identical to plans made from the data and never open a file. Plan fixture
tests (``tests/fixtures/planner``) use one saved from TPC-H SF1.

Format (version 1)::

    {"version": 1, "tables": [{"name", "location", "files", "schema" (Arrow IPC, base64),
      "scan", "scan_options", "ndv": {column: n},
      "row_groups": [[file index, row group index, rows, first row,
                      {column: [min, max, null count, compressed bytes, uncompressed bytes]}]]}]}

Paths are relative to ``root`` when one is given (joined to another root on load).
Min/max values other than JSON's own (str, int, float, bool) are tagged lists:
``["date", iso]``, ``["datetime", iso]``, ``["time", iso]``, ``["decimal", text]``,
``["bytes", base64]``.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from squall.driver.catalog.source import TableSource
from squall.driver.catalog.tables import Catalog, ColumnChunkStats, RowGroup, TableInfo
from squall.errors import DataError
from squall.operators.storage import Storage

if TYPE_CHECKING:
    from sqlglot import exp

VERSION = 1
#: where a loaded snapshot's relative paths point by default: nowhere (nothing may be read)
NOWHERE = "/nonexistent/squall-snapshot"


def snapshot(catalog: Catalog, root: str | None = None) -> dict[str, Any]:
    """Save every table of ``catalog`` (footers and NDV samples are read now)."""

    def rel(path: str) -> str:
        return os.path.relpath(path, root) if root is not None else path

    tables = []
    for name in catalog.names():
        info = catalog.table(name)
        files = list(info.files)
        index = {path: i for i, path in enumerate(files)}
        groups = [
            [
                index[rg.path],
                rg.index,
                rg.num_rows,
                rg.first_row,
                {column: _stats(s) for column, s in rg.columns.items()},
            ]
            for rg in info.row_groups
        ]
        tables.append(
            {
                "name": info.name,
                "location": rel(info.location),
                "files": [rel(f) for f in files],
                "schema": base64.b64encode(info.schema.serialize().to_pybytes()).decode(),
                "scan": info.scan,
                "scan_options": [list(kv) for kv in info.scan_options],
                "ndv": {f.name: catalog.ndv(info.name, f.name) for f in info.schema},
                "row_groups": groups,
            }
        )
    return {"version": VERSION, "tables": tables}


def from_snapshot(data: Mapping[str, Any], root: str = NOWHERE) -> SnapshotCatalog:
    """A catalog answering from a saved snapshot; relative paths are joined to ``root``."""
    if data.get("version") != VERSION:
        raise DataError(f"catalog snapshot version {data.get('version')!r}, expected {VERSION}")
    tables: list[TableInfo] = []
    ndvs: dict[tuple[str, str], int] = {}
    for t in data["tables"]:
        files = tuple(os.path.join(root, f) for f in t["files"])
        groups = tuple(
            RowGroup(
                files[file],
                index,
                rows,
                {c: ColumnChunkStats(_load(s[0]), _load(s[1]), *s[2:]) for c, s in cols.items()},
                first,
            )
            for file, index, rows, first, cols in t["row_groups"]
        )
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(t["schema"])))
        tables.append(
            TableInfo(
                t["name"],
                os.path.join(root, t["location"]),
                files,
                schema,
                groups,
                scan=t["scan"],
                scan_options=tuple((k, v) for k, v in t["scan_options"]),
            )
        )
        ndvs.update({(t["name"].lower(), c): n for c, n in t["ndv"].items()})
    return SnapshotCatalog(tables, ndvs)


class SnapshotCatalog(Catalog):
    """A read-only catalog over saved metadata: no storage, no registration."""

    def __init__(self, tables: list[TableInfo], ndvs: Mapping[tuple[str, str], int]) -> None:
        super().__init__()
        self._saved = {t.name.lower(): t for t in tables}
        self._saved_ndv = dict(ndvs)

    def storage(self, location: str) -> Storage:
        raise DataError(f"a catalog snapshot has no storage (asked for {location})")

    def register(
        self,
        name: str,
        location: str,
        *,
        format: str = "parquet",
        scan: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        raise DataError("a catalog snapshot is read-only")

    def source(self, name: str) -> TableSource:
        raise DataError(f"a catalog snapshot has no table sources (asked for {name})")

    def names(self) -> list[str]:
        return sorted(t.name for t in self._saved.values())

    def location(self, name: str) -> str | None:
        info = self._saved.get(name.lower())
        return info.location if info else None

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._saved

    def table(self, name: str) -> TableInfo:
        info = self._saved.get(name.lower())
        if info is None:
            raise DataError(f"unknown table {name}")
        return info

    def scan_table(self, name: str, filters: Sequence[exp.Expression]) -> TableInfo:
        """The saved table: a snapshot has no sources to prune with (the planner's min/max skipping still does)."""
        return self.table(name)

    def ndv(self, table: str, column: str) -> int:
        try:
            return self._saved_ndv[(table.lower(), column)]
        except KeyError:
            raise DataError(f"catalog snapshot has no NDV of {table}.{column}") from None


def _stats(s: ColumnChunkStats) -> list[Any]:
    return [_value(s.min), _value(s.max), s.null_count, s.compressed_bytes, s.uncompressed_bytes]


def _value(v: Any) -> Any:
    if v is None or isinstance(v, (str, bool, int, float)):
        return v
    if isinstance(v, dt.datetime):
        return ["datetime", v.isoformat()]
    if isinstance(v, dt.date):
        return ["date", v.isoformat()]
    if isinstance(v, dt.time):
        return ["time", v.isoformat()]
    if isinstance(v, decimal.Decimal):
        return ["decimal", str(v)]
    if isinstance(v, bytes):
        return ["bytes", base64.b64encode(v).decode()]
    raise DataError(f"cannot save a statistic of type {type(v).__name__}")


_LOADERS = {
    "datetime": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "time": dt.time.fromisoformat,
    "decimal": decimal.Decimal,
    "bytes": base64.b64decode,
}


def _load(v: Any) -> Any:
    return _LOADERS[v[0]](v[1]) if isinstance(v, list) else v
