"""Without the ``lake`` extra (pyiceberg, deltalake) a catalog or a lake table is one OptionError line naming
what to install, never a ModuleNotFoundError (the modules are hidden from ``find_spec`` here)."""

from __future__ import annotations

import importlib.util

import pytest

import squall
from squall.errors import OptionError


@pytest.fixture
def no_lake(monkeypatch):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name.split(".")[0] in ("pyiceberg", "deltalake"):
            return None
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.parametrize("sql", ["SELECT * FROM lake.ns.t", "CREATE TABLE lake.ns.t AS SELECT 1 AS a"])
def test_a_catalog_without_pyiceberg_says_what_to_install(no_lake, tmp_path, sql):
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}/wh"}
    message = r"catalog lake needs pyiceberg.*pip install 'squall\[lake\]'"
    with (
        squall.connect(workers=1, catalogs={"lake": props}, writable=[str(tmp_path)]) as con,
        pytest.raises(OptionError, match=message),
    ):
        con.sql(sql)
