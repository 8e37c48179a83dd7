"""Scan kinds, worker side: the reader of each kind of scan (``ScanInput.scan``).

A reader is ``read(spec, rank, storage_of) -> pyarrow.Table``: the rows of the
scan for one rank, columns renamed to the stage's names. The driver half of each
kind (its table loader) is in :mod:`squall.driver.catalog.scan_kinds`; both halves are
registered under the same name.

May import: :mod:`squall.registry`, :mod:`squall.errors` (readers are imported lazily).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from squall.errors import OptionError
from squall.registry import Registry

Reader = Callable[..., Any]

READERS: Registry[Reader] = Registry(
    "scan",
    {
        "parquet": "squall.operators.scan:read_parquet",
        "s3select": "squall.operators.s3select:read_s3select",
        "arrow": "squall.operators.arrow_scan:read_arrow",
        "text": "squall.operators.text_scan:read_text",
    },
    OptionError,
)


def reader(scan: str) -> Reader:
    """The reader of scan kind ``scan`` (OptionError naming the kinds when unknown)."""
    return READERS.get(scan)


def register_scan_reader(name: str, target: str | Reader) -> None:
    """Add a scan kind's worker-side reader (``"module:function"`` or the function)."""
    READERS.register(name, target)
