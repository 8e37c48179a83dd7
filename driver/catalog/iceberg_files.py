"""Iceberg scan tasks as the planner's :class:`TableInfo`: each data file's footer read, its columns matched by
field id to the table's, its row groups with statistics keyed by table column, its delete files.

- Columns: a data file's top-level columns are matched to the table's by Parquet field id; a file written
  without field ids (``add_files``) is matched through the table's name mapping
  (``schema.name-mapping.default``, else the current schema's names). A table column the file lacks is read
  as NULLs, or as the file's partition value when it is an identity partition column
  (:class:`~squall.plan.FileRead` ``columns``/``constants``); a renamed one under its name in the file; a
  promoted type (int → long, float → double, decimal precision) is widened by the worker.
- Row groups: from the footers (read in parallel, once per source): the unit scans split into, with min/max
  statistics keyed by *table* column so min/max pruning works across renames; a missing column's group is all
  NULL, a constant's has min = max = its value.
- Deletes: position-delete Parquet files go to the worker (``FileRead.position_deletes``); deletion vectors
  (Puffin) and equality deletes are refused with one line naming the table — never the deleted rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from squall.driver.catalog.info import ColumnChunkStats, RowGroup, chunk_stats
from squall.errors import NotSupportedError
from squall.plan import FileRead

FOOTER_THREADS = 16


def arrow_schema(schema: Any) -> pa.Schema:
    """The table's Arrow schema from its pyiceberg schema: plain (not large) strings and binaries, no field ids."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    def plain(t: pa.DataType) -> pa.DataType:
        if pa.types.is_large_string(t):
            return pa.string()
        if pa.types.is_large_binary(t):
            return pa.binary()
        if pa.types.is_large_list(t):
            return pa.list_(plain(t.value_type))
        return t

    converted = schema_to_pyarrow(schema, include_field_ids=False)
    return pa.schema([pa.field(f.name, plain(f.type), f.nullable) for f in converted]).remove_metadata()


def read_footers(
    paths: Iterable[str], read: Callable[[str], pq.FileMetaData], cache: dict[str, pq.FileMetaData]
) -> dict[str, pq.FileMetaData]:
    """The footers of ``paths``, those not in ``cache`` read in parallel (and added to it)."""
    wanted = [p for p in dict.fromkeys(paths) if p not in cache]
    if len(wanted) == 1:
        cache[wanted[0]] = read(wanted[0])
    elif wanted:
        with ThreadPoolExecutor(
            min(FOOTER_THREADS, len(wanted)), thread_name_prefix="iceberg-footer"
        ) as pool:
            for path, footer in zip(wanted, pool.map(read, wanted)):
                cache[path] = footer
    return cache


def check_deletes(table_name: str, tasks: Iterable[Any]) -> None:
    """NotSupportedError for delete files the worker cannot apply (deletion vectors, other formats)."""
    from pyiceberg.manifest import DataFileContent, FileFormat

    for task in tasks:
        for delete in task.delete_files:
            if delete.content == DataFileContent.EQUALITY_DELETES:
                raise NotSupportedError(f"Iceberg table {table_name}: equality delete files are not read yet")
            if delete.file_format != FileFormat.PARQUET:
                form = "deletion vectors" if delete.file_format == FileFormat.PUFFIN else "delete files"
                raise NotSupportedError(
                    f"Iceberg table {table_name}: {delete.file_format.name.lower()} {form} are not read yet "
                    f"({delete.file_path})"
                )


def _physical_ids(footer: pq.FileMetaData, mapping: Mapping[str, int]) -> dict[int, str]:
    """Field id -> top-level column name in one file (its Parquet field ids, else the name mapping)."""
    schema = footer.schema.to_arrow_schema()
    out: dict[int, str] = {}
    with_ids = [f for f in schema if f.metadata and b"PARQUET:field_id" in f.metadata]
    if with_ids:
        for f in with_ids:
            out[int(f.metadata[b"PARQUET:field_id"])] = f.name
        return out
    for f in schema:
        if f.name in mapping:
            out[mapping[f.name]] = f.name
    return out


class FilePlanner:
    """Builds row groups and FileReads of data files of one table snapshot (see the module doc)."""

    def __init__(self, schema: Any, specs: Mapping[int, Any], mapping: Mapping[str, int]) -> None:
        self.schema = schema  # pyiceberg Schema of the snapshot
        self.specs = specs
        self.mapping = mapping
        self.arrow = arrow_schema(schema)

    def identity_values(self, data_file: Any) -> dict[int, Any]:
        """Field id -> value of the file's identity partition fields."""
        spec = self.specs.get(data_file.spec_id)
        if spec is None:
            return {}
        from pyiceberg.transforms import IdentityTransform

        out = {}
        for i, field in enumerate(spec.fields):
            if isinstance(field.transform, IdentityTransform):
                source = self.schema.find_field(field.source_id)
                out[field.source_id] = _python_value(data_file.partition[i], source.field_type)
        return out

    def plan_file(self, task: Any, footer: pq.FileMetaData) -> tuple[list[RowGroup], FileRead]:
        """Row groups (stats keyed by table column) and the FileRead of one scan task's data file."""
        data_file = task.file
        path = data_file.file_path
        physical = _physical_ids(footer, self.mapping)
        identity = self.identity_values(data_file)
        columns: list[tuple[str, str]] = []
        constants: list[tuple[str, str | None]] = []
        rename: dict[str, str] = {}  # table column -> physical column
        for field in self.schema.fields:
            name = physical.get(field.field_id)
            if name is not None:
                rename[field.name] = name
                if name != field.name:
                    columns.append((field.name, name))
            elif field.field_id in identity:
                value = identity[field.field_id]
                constants.append((field.name, None if value is None else _text(value)))
            else:
                columns.append((field.name, ""))
        const_values = {field.name: identity.get(field.field_id) for field in self.schema.fields}
        groups = _row_groups(path, footer, rename, dict(constants), const_values)
        deletes = tuple(sorted(d.file_path for d in task.delete_files))
        return groups, FileRead(path, tuple(columns), tuple(constants), deletes)


def _python_value(value: Any, iceberg_type: Any) -> Any:
    """A partition value as Python gives it (Iceberg keeps dates as days, timestamps as microseconds)."""
    import datetime as dt

    kind = str(iceberg_type)
    if value is None or not isinstance(value, int) or isinstance(value, bool):
        return value
    if kind == "date":
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if kind in ("timestamp", "timestamptz"):
        base = dt.datetime(1970, 1, 1, tzinfo=dt.UTC if kind == "timestamptz" else None)
        return base + dt.timedelta(microseconds=value)
    return value


def _text(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _row_groups(
    path: str,
    footer: pq.FileMetaData,
    rename: Mapping[str, str],
    constants: Mapping[str, str | None],
    values: Mapping[str, Any],
) -> list[RowGroup]:

    groups = []
    first_row = 0
    for i in range(footer.num_row_groups):
        rg = footer.row_group(i)
        chunks = {rg.column(c).path_in_schema: rg.column(c) for c in range(rg.num_columns)}
        stats: dict[str, ColumnChunkStats] = {}
        for column, name in rename.items():
            if name in chunks:
                stats[column] = chunk_stats(chunks[name])
        for column, text in constants.items():
            value = values.get(column)
            stats[column] = ColumnChunkStats(value, value, rg.num_rows if text is None else 0, 0, 0)
        groups.append(RowGroup(path, i, rg.num_rows, stats, first_row))
        first_row += rg.num_rows
    return groups
