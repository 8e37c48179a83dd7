"""Scan kinds: the catalog's table loaders and the workers' scan readers are two registries of the same names."""

from __future__ import annotations

import inspect

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall.driver.catalog.tables as catalog_module
import squall.operators.scan as scan_module
from squall.driver.catalog.scan_kinds import LOADERS, loader
from squall.driver.catalog.tables import SCANS, Catalog
from squall.errors import OptionError
from squall.operators.scan_kinds import READERS, reader


def test_both_halves_of_every_kind_are_registered():
    assert LOADERS.names() == list(SCANS) == ["parquet", "s3select", "text"]
    # arrow: tables carried in the plan (Iceberg metadata tables), registered by their source, not loaded
    assert READERS.names() == ["arrow", "parquet", "s3select", "text"]
    for kind in SCANS:
        assert callable(reader(kind))
        assert callable(loader(kind).load) and loader(kind).formats


def test_catalog_and_scan_do_not_name_a_particular_kind():
    for module in (catalog_module, scan_module):
        assert "s3select" not in inspect.getsource(module).lower().replace("s3 select", "s3select")


def test_validation_messages(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": [1]}), path)
    with pytest.raises(OptionError, match=r"^scan must be one of parquet, s3select, text, not 'fast'$"):
        Catalog(scan="fast")
    c = Catalog()
    with pytest.raises(OptionError, match=r"^scan must be one of parquet, s3select, text, not 'fast'$"):
        c.register("t", str(path), scan="fast")
    with pytest.raises(
        OptionError, match=r"^table x: csv objects can only be scanned with scan='s3select' or scan='text'$"
    ):
        c.register("x", str(path), format="csv", scan="parquet")
    with pytest.raises(OptionError, match=r"^table x: scan='s3select' needs an s3:// location, not /"):
        c.register("x", str(path), scan="s3select")
    with pytest.raises(OptionError, match="needs an s3:// location"):
        c.register("x", str(path), format="json", scan="s3select")
    lines = tmp_path / "x.jsonl"
    lines.write_text('{"a": 1}\n')
    c.register("x", str(lines), format="json")  # csv/json default to the kind that reads them on any storage
    assert c.table("x").scan == "text" and c.table("x").schema.names == ["a"]
    c.register("t", str(path))
    assert c.table("t").scan == "parquet" and c.table("t").num_rows == 1
