"""The ``s3select`` scan kind, catalog side: a table of S3 objects read with S3 Select.

:func:`load_s3select_table` lists the objects, infers the schema from one ranged
GET of the first object's first ``SAMPLE_BYTES`` (64 KiB; Parquet: the footers),
estimates rows from object sizes, and makes one pseudo row group per object (no
pruning). Requests are counted on the Storage (``list``, ``get``). The worker half,
which runs ``SelectObjectContent``, is :mod:`squall.operators.s3select`.
"""

from __future__ import annotations

import fnmatch
import io
import math

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson

from squall.driver.catalog.info import RowGroup, TableInfo
from squall.driver.catalog.parquet import load_table
from squall.errors import DataError
from squall.operators.s3select import s3_storage
from squall.operators.s3storage import S3Storage, parse_s3_url
from squall.operators.storage import Storage

SAMPLE_BYTES = 64 * 1024


def _sample_table(storage: S3Storage, path: str, fmt: str) -> tuple[pa.Table, int]:
    """The first complete lines of an object, parsed; (table, bytes they took)."""
    body = storage._get_range(path, 0, min(SAMPLE_BYTES, storage._size(path)))
    if len(body) == SAMPLE_BYTES and b"\n" in body:
        body = body[: body.rindex(b"\n") + 1]
    try:
        if fmt == "csv":
            table = pcsv.read_csv(io.BytesIO(body))
        else:
            table = pjson.read_json(io.BytesIO(body))
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"cannot read {fmt} sample of {path}: {exc}".splitlines()[0]) from None
    return table, len(body)


def load_s3select_table(name: str, location: str, storage: Storage, fmt: str) -> TableInfo:
    """Catalog entry of an S3 Select table (see module doc)."""
    s3 = s3_storage(storage)
    if fmt == "parquet":
        info = load_table(name, location, s3)
        options = (("columns", ",".join(info.schema.names)), ("format", "parquet"))
        return TableInfo(info.name, info.location, info.files, info.schema, info.row_groups, info.footers,
                         "s3select", options)  # fmt: skip
    bucket, key = parse_s3_url(location)
    suffix = f".{fmt}" if fmt == "csv" else (".json", ".jsonl", ".ndjson")
    if not key or key.endswith("/") or any(ch in key for ch in "*?["):
        listed = s3._list(bucket, key if not any(ch in key for ch in "*?[") else key.rpartition("/")[0] + "/")
        files = sorted(
            f"s3://{bucket}/{k}"
            for k in listed
            if k.endswith(suffix)
            and not k.rpartition("/")[2].startswith((".", "_"))
            and (not any(ch in key for ch in "*?[") or fnmatch.fnmatchcase(k, key))
        )
        with s3._lock:
            s3._sizes.update({f"s3://{bucket}/{k}": size for k, size in listed.items()})
    else:
        files = [location]
    if not files:
        raise DataError(f"no {fmt} objects at {location}")
    sample, used = _sample_table(s3, files[0], fmt)
    schema = pa.schema([f.with_type(pa.string()) if pa.types.is_null(f.type) else f for f in sample.schema])
    bytes_per_row = used / max(sample.num_rows, 1)
    groups = tuple(
        RowGroup(path, 0, max(1, math.ceil(s3._size(path) / bytes_per_row)) if sample.num_rows else 0, {})
        for path in files
    )
    options = (("columns", ",".join(schema.names)), ("format", fmt))
    return TableInfo(name, location, tuple(files), schema, groups, {}, "s3select", options)


class S3SelectTables:
    """The loader of the ``s3select`` scan kind (see :mod:`squall.driver.catalog.scan_kinds`)."""

    formats = ("parquet", "csv", "json")
    schemes = ("s3",)

    @staticmethod
    def load(name: str, location: str, storage: Storage, fmt: str) -> TableInfo:
        return load_s3select_table(name, location, storage, fmt)


S3SELECT_TABLES = S3SelectTables()
