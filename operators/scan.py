"""Scan operator: reads one rank's share of a table; the Parquet scan (its row groups, needed columns)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence

import pyarrow as pa

from squall.operators.scan_kinds import reader
from squall.operators.storage import Storage
from squall.plan import ScanInput, Split


def scan_schema(spec: ScanInput) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(spec.schema_b64)))


def read_scan(spec: ScanInput, rank: int, storage_of: Callable[[str], Storage]) -> pa.Table:
    """Rows of ``spec`` for ``rank``, with columns renamed to the stage's names.

    The reader is looked up by the scan's kind (``spec.scan``) in
    :mod:`squall.operators.scan_kinds`; ``parquet`` is :func:`read_parquet`.
    """
    return reader(spec.scan)(spec, rank, storage_of)


def read_parquet(spec: ScanInput, rank: int, storage_of: Callable[[str], Storage]) -> pa.Table:
    """The ``parquet`` scan kind: the Storage reads each split's row groups (only the needed column chunks)."""
    return read_splits(spec, spec.splits_for(rank), storage_of)


def read_splits(spec: ScanInput, splits: Sequence[Split], storage_of: Callable[[str], Storage]) -> pa.Table:
    """Rows of ``splits`` (splits of ``spec``, any rank's) through the Storage, in the scan's schema."""
    schema = scan_schema(spec)
    sources = [source for source, _name in spec.columns]
    tables = []
    for split in splits:
        storage = storage_of(split.path)
        table = storage.read_row_groups(split.path, split.row_groups, sources)
        tables.append(table.select(sources).rename_columns(schema.names))
    if not tables:
        return schema.empty_table()
    if len(tables) == 1:
        return tables[0].cast(schema) if tables[0].schema != schema else tables[0]
    return pa.concat_tables([t.cast(schema) if t.schema != schema else t for t in tables])
