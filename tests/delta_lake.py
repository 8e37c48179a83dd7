"""Delta tables for tests, written by deltalake itself, and deltalake's own answers.

deltalake 1.6.6 writes appends, deletes (copy-on-write: the deleting commit rewrites files), partitions and
column mapping tables (``configuration={"delta.columnMapping.mode": "name"}``: files hold physical names
``col-<uuid>``). It writes no deletion vectors (``delta.enableDeletionVectors`` only sets the protocol; a
delete still rewrites the file) and cannot rename a column. Both are made here as the Delta protocol says,
by one hand-written commit each: :func:`delete_with_vector` (an inline deletion vector: a RoaringBitmapArray,
Z85-encoded in the log) and :func:`rename_column` (a metaData action: same physical name, new logical
name). deltalake then reads them itself (its DataFusion scan applies the vector), which is the reference.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import duckdb
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def _z85(data: bytes) -> str:
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        chunk = []
        for _ in range(5):
            chunk.append(_Z85[value % 85])
            value //= 85
        out.extend(reversed(chunk))
    return "".join(out)


def _vector(rows: list[int]) -> bytes:
    """A serialized deletion vector: the magic number and a RoaringBitmapArray of one array container."""
    rows = sorted(set(rows))
    assert rows and rows[-1] < 65536
    bitmap = (
        struct.pack("<II", 12346, 1)
        + struct.pack("<HH", 0, len(rows) - 1)
        + struct.pack("<I", 16)
        + b"".join(struct.pack("<H", r) for r in rows)
    )
    return struct.pack("<i", 1681511377) + struct.pack("<q", 1) + struct.pack("<i", 0) + bitmap


def _log(path: Path) -> Path:
    return path / "_delta_log"


def _next_commit(path: Path) -> Path:
    versions = [int(p.name.split(".")[0]) for p in _log(path).glob("*.json")]
    return _log(path) / f"{max(versions) + 1:020d}.json"


def delete_with_vector(path: Path, file_index: int, rows: list[int]) -> None:
    """Delete ``rows`` (positions) of the ``file_index``-th active file with an inline deletion vector.
    The table must have been created with ``delta.enableDeletionVectors``."""
    table = DeltaTable(str(path))
    adds = sorted(pa.table(table.get_add_actions(flatten=False)).to_pylist(), key=lambda a: a["path"])
    target = adds[file_index]["path"]
    add = None
    for commit in sorted(_log(path).glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action and action["add"]["path"] == target:
                add = action["add"]
    assert add is not None
    data = _vector(rows)
    vector = {
        "storageType": "i",
        "pathOrInlineDv": _z85(data + b"\0" * (-len(data) % 4)),
        "sizeInBytes": len(data),
        "cardinality": len(set(rows)),
    }
    now = int(time.time() * 1000)
    remove = {
        "path": target,
        "deletionTimestamp": now,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": add.get("partitionValues", {}),
        "size": add["size"],
    }
    lines = [
        {"commitInfo": {"timestamp": now, "operation": "DELETE", "operationParameters": {}}},
        {"remove": remove},
        {"add": dict(add, deletionVector=vector, modificationTime=now)},
    ]
    _next_commit(path).write_text("".join(json.dumps(line) + "\n" for line in lines))


def rename_column(path: Path, old: str, new: str) -> None:
    """Rename a column of a column-mapping table (a metaData action; the files keep their physical names)."""
    table = DeltaTable(str(path))
    metadata = None
    for commit in sorted(_log(path).glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "metaData" in action:
                metadata = action["metaData"]
    assert metadata is not None and table.metadata().configuration.get("delta.columnMapping.mode") == "name"
    schema = json.loads(metadata["schemaString"])
    for field in schema["fields"]:
        if field["name"] == old:
            field["name"] = new
    metadata = dict(metadata, schemaString=json.dumps(schema))
    now = int(time.time() * 1000)
    lines = [{"commitInfo": {"timestamp": now, "operation": "RENAME COLUMN"}}, {"metaData": metadata}]
    _next_commit(path).write_text("".join(json.dumps(line) + "\n" for line in lines))


def delta_rows(
    path: str, version: int | None = None, storage_options: dict[str, str] | None = None
) -> pa.Table:
    """The table as deltalake reads it: ``to_pyarrow_table``, or its own query engine (DataFusion) for
    column mapping and deletion vectors, which ``to_pyarrow_table`` reads as NULLs or refuses."""
    table = DeltaTable(path, version=version, storage_options=storage_options)
    mapped = table.metadata().configuration.get("delta.columnMapping.mode", "none") != "none"
    if not mapped and "deletionVectors" not in (table.protocol().reader_features or ()):
        return table.to_pyarrow_table()
    return pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())


def answer(tables: dict[str, pa.Table], sql: str) -> list[tuple]:
    """``sql`` run by DuckDB over Arrow tables, rows sorted (order-insensitive comparisons)."""
    con = duckdb.connect()
    for name, table in tables.items():
        con.register(name, table)
    return sorted(con.sql(sql).fetchall(), key=repr)
