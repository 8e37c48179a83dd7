"""Time travel in SQL: ``FOR VERSION AS OF`` / ``FOR TIMESTAMP AS OF`` (Trino, Athena) and DuckDB's
``AT (VERSION => …)`` / ``AT (TIMESTAMP => …)``, checked against each format's own reader at that version.

A format joins these tests with a builder in :data:`BUILDERS` making a table with a few versions (each
version's id, commit time and the format's own answer): Delta (versions from deltalake) and Iceberg (snapshots
from pyiceberg, in a table folder).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall.driver.catalog.tables import Catalog
from squall.driver.frontend.time_travel import pin_versions
from squall.errors import DataError, NotSupportedError, SqlSyntaxError
from tests.delta_lake import answer, delta_rows


@dataclass(frozen=True)
class Version:
    """One version of a table: its id in SQL, its commit time (UTC) and the format's own reading of it."""

    id: int
    committed: datetime
    rows: pa.Table


@dataclass(frozen=True)
class Versioned:
    """A table with versions, in ``folder`` (a data folder) as table ``name``."""

    folder: Path
    name: str
    versions: list[Version]
    add_version: Callable[[], None]  # commits one more version (appended rows)


def _rows(start: int, n: int) -> pa.Table:
    ks = list(range(start, start + n))
    return pa.table({"k": pa.array(ks, pa.int64()), "g": pa.array([k % 4 for k in ks], pa.int64())})


def delta_table(root: Path) -> Versioned:
    """A Delta table: v0 append, v1 append, v2 delete (commits 100 ms apart: their times differ)."""
    path = root / "t"
    deltalake.write_deltalake(str(path), _rows(0, 40))
    time.sleep(0.1)
    deltalake.write_deltalake(str(path), _rows(40, 40), mode="append")
    time.sleep(0.1)
    deltalake.DeltaTable(str(path)).delete("k % 3 = 0")
    history = {h["version"]: h["timestamp"] for h in deltalake.DeltaTable(str(path)).history()}
    versions = [
        Version(v, datetime.fromtimestamp(history[v] / 1000, UTC), delta_rows(str(path), version=v))
        for v in sorted(history)
    ]

    def add() -> None:
        deltalake.write_deltalake(str(path), _rows(1000, 5), mode="append")

    return Versioned(root, "t", versions, add)


def iceberg_table(root: Path) -> Versioned:
    """An Iceberg table folder (pyiceberg, SQL catalog): append, append, delete (snapshots 100 ms apart)."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("tt", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=_rows(0, 1).schema, location=f"file://{root}/t")
    table.append(_rows(0, 40))
    time.sleep(0.1)
    table.append(_rows(40, 40))
    time.sleep(0.1)
    table.delete("k < 10")
    table = catalog.load_table("ns.t")
    versions = [
        Version(
            s.snapshot_id,
            datetime.fromtimestamp(s.timestamp_ms / 1000, UTC),
            table.scan(snapshot_id=s.snapshot_id).to_arrow(),
        )
        for s in sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    ]

    def add() -> None:
        catalog.load_table("ns.t").append(_rows(1000, 5))

    return Versioned(root, "t", versions, add)


BUILDERS = {"delta": delta_table, "iceberg": iceberg_table}


@pytest.fixture(params=sorted(BUILDERS))
def versioned(request, tmp_path) -> Versioned:
    return BUILDERS[request.param](tmp_path)


def _rows_of(con: squall.Connection, sql: str) -> list[tuple]:
    table = con.sql(sql).arrow()
    return sorted(zip(*[c.to_pylist() for c in table.columns]), key=repr)


def _ts(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")


@pytest.mark.parametrize("workers", [1, 2])
def test_by_version_in_both_syntaxes(versioned, workers):
    t = versioned.name
    with squall.connect(str(versioned.folder), workers=workers) as con:
        for v in versioned.versions:
            want = answer({t: v.rows}, f"SELECT g, count(*), sum(k) FROM {t} GROUP BY g")
            for clause in (f"FOR VERSION AS OF {v.id}", f"AT (VERSION => {v.id})"):
                got = _rows_of(con, f"SELECT g, count(*), sum(k) FROM {t} {clause} GROUP BY g")
                assert got == want, clause
            assert _rows_of(con, f"SELECT * FROM {t} FOR VERSION AS OF {v.id}") == answer(
                {t: v.rows}, f"SELECT * FROM {t}"
            )
        latest = versioned.versions[-1].rows
        assert _rows_of(con, f"SELECT count(*) FROM {t}") == [(latest.num_rows,)]


@pytest.mark.parametrize("workers", [1, 2])
def test_by_timestamp_in_both_syntaxes(versioned, workers):
    t = versioned.name
    with squall.connect(str(versioned.folder), workers=workers) as con:
        for v in versioned.versions:
            when = v.committed + timedelta(milliseconds=30)  # after this commit, before the next
            for clause in (
                f"FOR TIMESTAMP AS OF TIMESTAMP '{_ts(when)}'",
                f"AT (TIMESTAMP => '{when.astimezone(timezone(timedelta(hours=2))).isoformat()}')",
                f"FOR TIMESTAMP AS OF TIMESTAMP '{_ts(when)}' + INTERVAL 1 MILLISECOND - INTERVAL 1 MICROSECOND",
            ):
                assert _rows_of(con, f"SELECT count(*) FROM {t} {clause}") == [(v.rows.num_rows,)], clause
        first = versioned.versions[0].committed - timedelta(seconds=5)
        with pytest.raises(DataError, match=r"no (version|snapshot) at"):
            con.sql(f"SELECT count(*) FROM {t} FOR TIMESTAMP AS OF TIMESTAMP '{_ts(first)}'")


def test_two_versions_of_one_table_in_one_query(versioned):
    t, (v0, v1) = versioned.name, versioned.versions[:2]
    last = versioned.versions[-1]
    sql = (
        f"SELECT a.g, count(*) AS n, count(b.k) AS kept FROM {t} FOR VERSION AS OF {v1.id} AS a "
        f"LEFT JOIN {t} AT (VERSION => {last.id}) b ON a.k = b.k GROUP BY a.g"
    )
    want = answer(
        {"a": v1.rows, "b": last.rows},
        "SELECT a.g, count(*) AS n, count(b.k) AS kept FROM a LEFT JOIN b ON a.k = b.k GROUP BY a.g",
    )
    with squall.connect(str(versioned.folder), workers=2) as con:
        assert _rows_of(con, sql) == want
        both = f"SELECT (SELECT count(*) FROM {t} FOR VERSION AS OF {v0.id}), (SELECT count(*) FROM {t}.{t} AT (VERSION => {v1.id}))"
        with pytest.raises(DataError, match="unknown table"):
            con.sql(both)  # a qualified name the catalog does not have
        sql = f"SELECT {t}.k FROM {t} FOR VERSION AS OF {v0.id} WHERE {t}.k < 3"  # columns qualified by the table
        assert _rows_of(con, sql) == answer({t: v0.rows}, f"SELECT k FROM {t} WHERE k < 3")


def test_the_plan_cache_keys_on_the_version(versioned):
    t = versioned.name
    with squall.connect(str(versioned.folder), workers=2) as con:
        sql = f"SELECT count(*) FROM {t} FOR VERSION AS OF {versioned.versions[0].id}"
        assert con.sql(sql).stats["plan_cache"] == "miss"
        again = con.sql(sql)
        assert again.stats["plan_cache"] == "hit" and again.arrow().column(0).to_pylist() == [
            versioned.versions[0].rows.num_rows
        ]
        future = f"SELECT count(*) FROM {t} FOR TIMESTAMP AS OF TIMESTAMP '2999-01-01 00:00:00'"
        assert _rows_of(con, future) == [(versioned.versions[-1].rows.num_rows,)]
        versioned.add_version()
        assert _rows_of(con, future) == [
            (versioned.versions[-1].rows.num_rows + 5,)
        ]  # the new commit, not the plan
        assert _rows_of(con, sql) == [(versioned.versions[0].rows.num_rows,)]


def test_refusals(versioned, tmp_path):
    pq.write_table(_rows(0, 3), versioned.folder / "plain.parquet")
    t = versioned.name
    with squall.connect(str(versioned.folder), workers=1) as con:
        with pytest.raises(NotSupportedError) as err:
            con.sql("SELECT * FROM plain FOR VERSION AS OF 1")
        assert "plain" in str(err.value) and len(str(err.value).splitlines()) == 1
        with pytest.raises(DataError, match=r"no (version|snapshot) 99"):
            con.sql(f"SELECT * FROM {t} FOR VERSION AS OF 99")
        with pytest.raises(SqlSyntaxError) as err:
            con.sql(f"SELECT *\nFROM {t} FOR VERSION AS OF 'one'")
        assert err.value.line == 2 and "integer" in str(err.value)
        with pytest.raises(SqlSyntaxError) as err:
            con.sql(f"SELECT * FROM {t} FOR TIMESTAMP AS OF k")
        assert "constant" in str(err.value)
        with pytest.raises(NotSupportedError, match="line 1, column"):
            con.sql(f"SELECT * FROM {t} FOR VERSION BETWEEN 0 AND 1")
        with pytest.raises(NotSupportedError, match="BEFORE"):
            con.sql(f"SELECT * FROM {t} BEFORE (VERSION => 1)")
        with pytest.raises(SqlSyntaxError, match="WITH query"):
            con.sql("WITH w AS (SELECT 1) SELECT * FROM w FOR VERSION AS OF 1")


def test_the_text_keeps_everything_but_the_clause(versioned):
    catalog = Catalog()
    catalog.register_folder(str(versioned.folder))
    t, v = versioned.name, versioned.versions[0].id
    assert pin_versions(f"SELECT k FROM {t} FOR VERSION AS OF {v} AS x WHERE x.k > 1", catalog) == (
        f"SELECT k FROM {t}__v{v}  AS x WHERE x.k > 1"
    )
    assert pin_versions(f"select k from {t} x at (version => {v}) -- at (version => 9)", catalog) == (
        f"select k from {t}__v{v} x  -- at (version => 9)"
    )
    assert pin_versions(f"SELECT 'AS OF' FROM {t}", catalog) == f"SELECT 'AS OF' FROM {t}"
    assert (
        pin_versions(f"SELECT * FROM {t} FOR VERSION AS OF {v}", catalog)
        == f"SELECT * FROM {t}__v{v} AS {t} "
    )
