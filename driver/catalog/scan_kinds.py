"""Scan kinds, driver side: how a table's files are read, for each kind of scan.

A table's *scan kind* (``TableInfo.scan``, ``ScanInput.scan`` in the plan) says how
workers read its files; which files, with which schema and statistics, is its
source's business (:mod:`squall.driver.catalog.source`). Kinds: ``parquet`` (the Storage's projected row-group reads) or
``s3select`` (projection and simple filters run in S3) or ``text`` (CSV and JSON-lines files read
by DuckDB in the workers, the default for those formats). Each kind has two halves
found by name in a :class:`~squall.registry.Registry`: here, the table loader the
catalog calls; in :mod:`squall.operators.scan_kinds`, the reader a worker calls.
A new kind registers both halves under the same name; a kind whose tables are registered by their
source and never loaded by location (``arrow``: a small table carried in the plan, e.g. an Iceberg
metadata table, :class:`squall.driver.catalog.catalogs.MetadataSource`) has only its worker half.

A loader is an object with

- ``formats``: the object formats it reads (``parquet``, ``csv``, ``json``);
- ``schemes``: the storage schemes it needs (``("s3",)``), or ``None`` for any;
- ``load(name, location, storage, fmt) -> TableInfo``: the catalog entry (the table's
  source's :class:`TableInfo`, with this kind's ``scan`` and ``scan_options``).

May import: :mod:`squall.registry`, :mod:`squall.errors` (loaders themselves
import the catalog and operators).
"""

from __future__ import annotations

from typing import Any

from squall.errors import OptionError
from squall.registry import Registry

LOADERS: Registry[Any] = Registry(
    "scan",
    {
        "parquet": "squall.driver.catalog.parquet:PARQUET_TABLES",
        "s3select": "squall.driver.catalog.s3select:S3SELECT_TABLES",
        "text": "squall.driver.catalog.text:TEXT_TABLES",
    },
    OptionError,
)


def scan_kinds() -> tuple[str, ...]:
    """The registered scan kinds, sorted."""
    return tuple(LOADERS.names())


def loader(scan: str) -> Any:
    """The table loader of scan kind ``scan`` (OptionError naming the kinds when unknown)."""
    return LOADERS.get(scan)


def register_scan_kind(name: str, loader_target: str | Any) -> None:
    """Add a scan kind's table loader (``"module:attribute"`` or the object)."""
    LOADERS.register(name, loader_target)
