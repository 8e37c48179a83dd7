"""Small Iceberg tables for tests, written by pyiceberg itself into a SQL (sqlite) catalog.

:func:`build_warehouse` makes, in namespace ``ns``:

- ``orders``: partitioned by ``month(o_orderdate)`` over 12 months; an append, then the schema evolves
  (``o_orderkey`` int → long, ``o_custkey`` renamed ``o_customer``, ``o_note`` added), a second append, and a
  delete (copy-on-write: pyiceberg rewrites the files);
- ``parts``: partitioned by ``kind`` (identity) and ``bucket(4, id)``, two appends;
- ``pd``: two appends, then position deletes (a delete file pyiceberg does not write itself: made here and
  committed with pyiceberg's snapshot producer, as an engine writing merge-on-read deletes would).

:func:`add_delete_file` writes a position- or equality-delete file and commits it the same way.
"""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

NAMESPACE = "ns"


def sql_catalog_properties(root: Path) -> dict[str, str]:
    """pyiceberg (and ``squall.connect(catalogs=…)``) properties of a SQL catalog under ``root``."""
    (root / "warehouse").mkdir(parents=True, exist_ok=True)
    return {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}


def orders_rows(n: int = 2400) -> pa.Table:
    """``n`` orders over the 12 months of 2023 (``o_orderkey`` INT32, as first written)."""
    return pa.table(
        {
            "o_orderkey": pa.array(range(n), pa.int32()),
            "o_custkey": pa.array([i % 97 for i in range(n)], pa.int64()),
            "o_status": pa.array(["F", "O", "P"][i % 3] for i in range(n)),
            "o_totalprice": pa.array([float((i * 37) % 1000) + 0.25 for i in range(n)], pa.float64()),
            "o_orderdate": pa.array(
                [dt.date(2023, 1, 1) + dt.timedelta(days=(i * 7) % 365) for i in range(n)], pa.date32()
            ),
        }
    )


def build_warehouse(root: Path, properties: dict[str, str] | None = None) -> dict[str, str]:
    """Write the tables (see the module doc) into the catalog of ``properties`` (default: a SQL catalog under
    ``root``); returns the properties."""
    from pyiceberg.catalog import load_catalog

    props = properties or sql_catalog_properties(root)
    catalog = load_catalog("lake", **props)
    catalog.create_namespace(NAMESPACE)
    _orders(catalog)
    _parts(catalog)
    _position_deletes(catalog)
    return props


def _orders(catalog: Any) -> None:
    from pyiceberg.transforms import MonthTransform
    from pyiceberg.types import LongType, StringType

    rows = orders_rows()
    table = catalog.create_table(f"{NAMESPACE}.orders", schema=rows.schema)
    with table.update_spec() as spec:
        spec.add_field("o_orderdate", MonthTransform(), "o_month")
    half = rows.num_rows // 2
    table.append(rows.slice(0, half))
    with table.update_schema() as update:
        update.update_column("o_orderkey", LongType())
        update.rename_column("o_custkey", "o_customer")
        update.add_column("o_note", StringType())
    later = rows.slice(half)
    later = pa.table(
        {
            "o_orderkey": later.column("o_orderkey").cast(pa.int64()),
            "o_customer": later.column("o_custkey"),
            "o_status": later.column("o_status"),
            "o_totalprice": later.column("o_totalprice"),
            "o_orderdate": later.column("o_orderdate"),
            "o_note": pa.array([f"n{i % 5}" for i in range(later.num_rows)], pa.string()),
        }
    )
    table = catalog.load_table(f"{NAMESPACE}.orders")
    table.append(later)
    table.delete("o_totalprice < 100")


def _parts(catalog: Any) -> None:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform, IdentityTransform
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "kind", StringType(), required=False),
        NestedField(3, "amount", DoubleType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(2, 1000, IdentityTransform(), "kind"),
        PartitionField(1, 1001, BucketTransform(4), "id_bucket"),
    )
    table = catalog.create_table(f"{NAMESPACE}.parts", schema=schema, partition_spec=spec)
    for start in (0, 300):
        ids = range(start, start + 300)
        table.append(
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "kind": pa.array([f"k{i % 3}" if i % 50 else None for i in ids], pa.string()),
                    "amount": pa.array([i * 0.5 for i in ids], pa.float64()),
                }
            )
        )


def _position_deletes(catalog: Any) -> None:
    rows = pa.table({"k": pa.array(range(100), pa.int64()), "v": pa.array([f"v{i}" for i in range(100)])})
    table = catalog.create_table(f"{NAMESPACE}.pd", schema=rows.schema)
    table.append(rows)
    table.append(rows)
    first, second = sorted(task.file.file_path for task in table.scan().plan_files())
    add_delete_file(table, {first: [0, 1, 2, 50, 99], second: [10]})


def add_delete_file(
    table: Any, positions: dict[str, list[int]] | None = None, equality: pa.Table | None = None
) -> None:
    """Commit one delete file to ``table`` (unpartitioned): position deletes (data file path -> row
    positions) or equality deletes (rows of the columns to match)."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent, ManifestWriterV2
    from pyiceberg.typedef import Record

    class DeleteManifestWriter(ManifestWriterV2):
        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    path = f"{table.location()}/data/deletes-{uuid.uuid4().hex}.parquet"
    extra: dict[str, Any] = {}
    if positions is not None:
        schema = pa.schema(
            [
                pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": b"2147483546"}),
                pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": b"2147483545"}),
            ]
        )
        data = pa.table(
            {"file_path": [p for p, pos in positions.items() for _ in pos],
             "pos": [x for pos in positions.values() for x in pos]},
            schema=schema,
        )  # fmt: skip
        content = DataFileContent.POSITION_DELETES
    else:
        assert equality is not None
        ids = [table.schema().find_field(name).field_id for name in equality.column_names]
        data = equality.cast(
            pa.schema(
                [
                    f.with_metadata({b"PARQUET:field_id": str(i).encode()})
                    for f, i in zip(equality.schema, ids)
                ]
            )
        )
        content, extra = DataFileContent.EQUALITY_DELETES, {"equality_ids": ids}
    sink = pa.BufferOutputStream()
    pq.write_table(data, sink)
    body = sink.getvalue().to_pybytes()
    with table.io.new_output(path).create(overwrite=True) as out:  # the table's own FileIO: local or S3
        out.write(body)
    delete = DataFile.from_args(
        content=content, file_path=path, file_format=FileFormat.PARQUET, partition=Record(),
        record_count=data.num_rows, file_size_in_bytes=len(body), _table_format_version=2, **extra,
    )  # fmt: skip
    delete.spec_id = table.spec().spec_id
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        append.new_manifest_writer = lambda spec: DeleteManifestWriter(  # type: ignore[method-assign]
            spec, append.schema(), append.new_manifest_output(), append.snapshot_id, append._compression
        )
        append.append_data_file(delete)
