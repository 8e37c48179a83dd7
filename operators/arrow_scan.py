"""The ``arrow`` scan kind, worker side: a small table carried in the plan itself (``scan_options["ipc"]``:
an Arrow IPC stream, base64), e.g. an Iceberg metadata table (``"t$snapshots"``). No file is read, so it works
the same on every platform; the rank whose split names it returns the rows, every other rank none.

The driver half is :class:`squall.driver.catalog.catalogs.MetadataSource` (a table registered by source, so
no loader is needed in :mod:`squall.driver.catalog.scan_kinds`).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from squall.plan import ScanInput


def read_arrow(spec: ScanInput, rank: int, storage_of: Callable[[str], Any]) -> pa.Table:
    """The scan's columns of the carried table for ``rank`` (all of it on the rank holding its one split)."""
    from squall.operators.scan import scan_schema

    schema = scan_schema(spec)
    if not spec.splits_for(rank):
        return schema.empty_table()
    ipc = base64.b64decode(dict(spec.scan_options)["ipc"])
    table = pa.ipc.open_stream(pa.py_buffer(ipc)).read_all()
    sources = [source for source, _name in spec.columns]
    return table.select(sources).rename_columns(schema.names).cast(schema)
