"""Workers read a file through its FileRead: renamed and missing columns, partition constants, widening,
deleted rows (Delta deletion vectors) and Iceberg position-delete files."""

from __future__ import annotations

import base64
import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from squall.errors import DataError
from squall.operators.scan import read_splits
from squall.operators.storage import storage_for
from squall.plan import FileRead, Output, Plan, ScanInput, Split, Stage

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("year", pa.int32()), ("extra", pa.float64())])


def _spec(path: str, rows: int, file_read: FileRead | None) -> ScanInput:
    return ScanInput(
        name="s1_t",
        table="t",
        location=path,
        columns=tuple((c, c) for c in SCHEMA.names),
        splits=((Split(path, (0, 1), ((0, rows // 2), (rows // 2, rows)), rows, 0, True),),),
        schema_b64=base64.b64encode(SCHEMA.serialize().to_pybytes()).decode(),
        files=(file_read,) if file_read else (),
    )


@pytest.fixture()
def old_file(tmp_path):
    """A file written before a rename (``name`` was ``label``), with INT32 ids and no ``extra`` column."""
    path = str(tmp_path / "part-0.parquet")
    table = pa.table({"id": pa.array(range(10), pa.int32()), "label": [f"n{i}" for i in range(10)]})
    pq.write_table(table, path, row_group_size=5)
    return path


def _read(spec: ScanInput) -> pa.Table:
    return read_splits(spec, spec.splits_for(0), lambda p: storage_for(p, {}))


def test_renamed_missing_constant_and_widened_columns(old_file):
    fr = FileRead(old_file, columns=(("name", "label"), ("extra", "")), constants=(("year", "1995"),))
    got = _read(_spec(old_file, 10, fr))
    assert got.schema == SCHEMA
    assert got.column("id").to_pylist() == list(range(10))
    assert got.column("name").to_pylist() == [f"n{i}" for i in range(10)]
    assert got.column("year").to_pylist() == [1995] * 10
    assert got.column("extra").null_count == 10


def test_null_partition_value(old_file):
    fr = FileRead(old_file, columns=(("name", "label"), ("extra", "")), constants=(("year", None),))
    assert _read(_spec(old_file, 10, fr)).column("year").null_count == 10


def test_deleted_rows_and_position_delete_files(old_file, tmp_path):
    dv = base64.b64encode(np.array([0, 7], dtype="<i8").tobytes()).decode()
    deletes = str(tmp_path / "deletes.parquet")
    pq.write_table(pa.table({"file_path": [old_file, old_file, "other.parquet"], "pos": [3, 7, 4]}), deletes)
    fr = FileRead(
        old_file,
        columns=(("name", "label"), ("extra", "")),
        constants=(("year", "1"),),
        deleted_rows=dv,
        position_deletes=(deletes,),
    )
    got = _read(_spec(old_file, 10, fr))
    assert got.column("id").to_pylist() == [1, 2, 4, 5, 6, 8, 9]


def test_deletes_follow_the_split_row_numbers(old_file):
    """A split of the second row group only: position 7 is its third row."""
    dv = base64.b64encode(np.array([7], dtype="<i8").tobytes()).decode()
    fr = FileRead(
        old_file, columns=(("name", "label"), ("extra", "")), constants=(("year", "1"),), deleted_rows=dv
    )
    spec = _spec(old_file, 10, fr)
    spec = dataclasses.replace(spec, splits=((Split(old_file, (1,), ((5, 10),), 5, 0, False),),))
    assert _read(spec).column("id").to_pylist() == [5, 6, 8, 9]


def test_an_incompatible_type_names_column_and_file(tmp_path):
    path = str(tmp_path / "bad.parquet")
    pq.write_table(pa.table({"id": ["x"], "name": ["a"]}), path)
    fr = FileRead(path, columns=(("extra", ""),), constants=(("year", "1"),))
    spec = _spec(path, 1, fr)
    spec = dataclasses.replace(spec, splits=((Split(path, (0,), ((0, 1),), 1, 0, True),),))
    with pytest.raises(DataError, match=r"column id of .*bad.parquet is string"):
        _read(spec)


def test_file_reads_round_trip_through_plan_json(old_file):
    fr = FileRead(old_file, (("name", "label"),), (("year", "1995"), ("k", None)), ("d.parquet",), "AAA=")
    stage = Stage(
        id=0, ranks=(0,), inputs=(_spec(old_file, 10, fr),), sql="SELECT 1", output=Output("result")
    )
    plan = Plan(sql="SELECT 1", world_size=1, stages=(stage,), result_names=("x",))
    assert Plan.from_json(plan.to_json()) == plan
